/* Time in a signal handler (SIGALRM every 10 ms of real time) and in clock_gettime (the vdso's,
 * where there is one): profiler/tests/common/cross.rs and profiler/tests/symbol_files.rs check
 * that the signal trampoline between the handler and the code it interrupted is named, and that
 * the vdso is [vdso]. */
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static volatile unsigned long sink;

static __attribute__((noinline)) void spin(unsigned long n) {
    for (unsigned long i = 0; i < n; i++)
        sink += i;
}

static void handler(int signal) {
    (void)signal;
    spin(4000000);
    sink += 1; /* not a tail call: the handler keeps its frame */
}

int main(void) {
    struct sigaction action = {0};
    action.sa_handler = handler;
    sigaction(SIGALRM, &action, NULL);
    struct itimerval every = {{0, 10000}, {0, 10000}};
    setitimer(ITIMER_REAL, &every, NULL);
    struct timespec now;
    for (int i = 0; i < 1000000; i++) {
        spin(500);
        clock_gettime(CLOCK_MONOTONIC, &now);
    }
    for (int i = 0; i < 600; i++)
        spin(1000000);
    printf("%lu\n", sink & 1);
    return 0;
}
