/* The C test program: distinct call chains, sampled by the agent from SIGPROF.
 * Usage: workload OUT_FILE SECONDS HZ
 * Every function that should appear on a stack is noipa (no inlining, cloning or IPA) and uses
 * its callee's result afterwards (no tail calls), so the call graph in tests/programs.rs is the
 * truth at every optimisation level. */
#include <alloca.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "agent.h"

#define NOIPA __attribute__((noipa))

volatile unsigned long sink;
static double deadline;

long shlib_entry(long (*cb)(long), long n);      /* libshared.so, through the PLT */
#if defined(__x86_64__)
long asm_frame(long (*cb)(long), long n);        /* frames.S (x86_64 only) */
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

NOIPA long spin(long n) {
    for (long i = 0; i < n; i++)
        sink += (unsigned long)(i * i);
    return (long)sink;
}

NOIPA long leaf_c(long n) {
    volatile char buf[48];
    buf[0] = (char)n;
    long r = spin(n);
    sink += (unsigned long)buf[0];
    return r + 1;
}

NOIPA long mid_b(long n) {
    volatile char buf[200];
    buf[0] = (char)n;
    long r = leaf_c(n);
    sink += (unsigned long)buf[0];
    return r + 2;
}

NOIPA long top_a(long n) {
    volatile long x[3] = {n, n + 1, n + 2};
    long r = mid_b(n);
    sink += (unsigned long)x[1];
    return r + 3;
}

NOIPA long via_alloca(long n) {
    volatile char *p = alloca((size_t)(n % 512) + 16);
    p[0] = (char)n;
    long r = leaf_c(n);
    sink += (unsigned long)p[0];
    return r + 4;
}

NOIPA long cb_from_lib(long n) {
    long r = leaf_c(n);
    sink += (unsigned long)r;
    return r + 5;
}

NOIPA long cb_from_asm(long n) {
    long r = spin(n);
    sink += (unsigned long)r;
    return r + 6;
}

NOIPA long phase_plt(long n) {
    long r = shlib_entry(cb_from_lib, n);
    sink += (unsigned long)r;
    return r + 7;
}

#if defined(__x86_64__)
NOIPA long phase_asm(long n) {
    long r = asm_frame(cb_from_asm, n);
    sink += (unsigned long)r;
    return r + 8;
}
#endif

NOIPA long sig_a(long n) {
    long r = leaf_c(n);
    sink += (unsigned long)r;
    return r + 9;
}

NOIPA void on_usr1(int sig) {
    long r = sig_a(20000 + sig);
    sink += (unsigned long)r;
}

NOIPA long phase_signal(long n) {
    raise(SIGUSR1);
    sink += (unsigned long)n;
    return n + 10;
}

NOIPA void *thread_main(void *arg) {
    long n = (long)arg;
    if (agent_register_thread() != 0)
        abort();
    while (now() < deadline) {
        long r = top_a(n);
        sink += (unsigned long)r;
    }
    agent_unregister_thread();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s OUT SECONDS HZ\n", argv[0]);
        return 2;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return 1;
    if (agent_start((unsigned)atoi(argv[3])) != 0)
        return 1;
    deadline = now() + atof(argv[2]);
    pthread_t threads[2];
    for (long i = 0; i < 2; i++)
        if (pthread_create(&threads[i], NULL, thread_main, (void *)(30000 + i * 7000)) != 0)
            return 1;
    long n = 20000;
    while (now() < deadline) {
        sink += (unsigned long)top_a(n);
        sink += (unsigned long)via_alloca(n);
        sink += (unsigned long)phase_plt(n);
#if defined(__x86_64__)
        sink += (unsigned long)phase_asm(n);
#endif
        sink += (unsigned long)phase_signal(n);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    return agent_stop(argv[1]) == 0 ? 0 : 1;
}
