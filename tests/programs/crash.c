/* A program that crashes inside a signal handler: main -> outer -> inner -> raise(SIGUSR1), and
 * the SIGUSR1 handler on_usr1 calls a null function pointer. The agent's crash handler
 * (agent_install_crash_handler) writes a minidump of the crash to MINIDUMP and the process dies
 * of SIGSEGV. Usage: crash MINIDUMP
 * Every function that must appear on the stack is noipa (no inlining, cloning or IPA) and uses
 * its callee's result afterwards (no tail calls), so that the stack at the crash is
 * on_usr1 <- signal frame <- raise <- inner <- outer <- main at every optimisation level. */
#include <signal.h>
#include <stdio.h>
#include "agent.h"

#define NOIPA __attribute__((noipa))

volatile unsigned long sink;

NOIPA void on_usr1(int sig) {
    void (*volatile fp)(void) = 0;
    fp();
    sink += (unsigned long)sig;
}

NOIPA long inner(long n) {
    raise(SIGUSR1);
    sink += (unsigned long)n;
    return n + 1;
}

NOIPA long outer(long n) {
    long r = inner(n + 1);
    sink += (unsigned long)r;
    return r + 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MINIDUMP\n", argv[0]);
        return 2;
    }
    if (agent_install_crash_handler(argv[1]) != 0)
        return 1;
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return 1;
    long r = outer(argc);
    sink += (unsigned long)r;
    /* Not reached: the crash ends the process. */
    fprintf(stderr, "crash: still alive\n");
    return 3;
}
