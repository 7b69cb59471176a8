/* exit() from a thread that is not main, while main is blocked in pthread_join and two other
 * threads burn CPU: the profiler's atexit handler must write the outputs, with those threads'
 * samples. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "burn.h"

static atomic_int warmed_up;

__attribute__((noinline)) static void burn_a(void) { BURN(50); }
__attribute__((noinline)) static void burn_b(void) { BURN(50); }

static void *worker_a(void *arg) {
    (void)arg;
    for (int i = 0;; i++) {
        burn_a();
        if (i == 5) atomic_fetch_add(&warmed_up, 1);
    }
}

static void *worker_b(void *arg) {
    (void)arg;
    for (int i = 0;; i++) {
        burn_b();
        if (i == 5) atomic_fetch_add(&warmed_up, 1);
    }
}

static void *exiter(void *arg) {
    (void)arg;
    /* Both workers have burned 300 ms of CPU each (and go on burning). */
    while (atomic_load(&warmed_up) < 2) usleep(1000);
    printf("exit from a thread\n");
    fflush(stdout);
    exit(0);
}

int main(void) {
    pthread_t a, b, e;
    pthread_create(&a, NULL, worker_a, NULL);
    pthread_create(&b, NULL, worker_b, NULL);
    pthread_create(&e, NULL, exiter, NULL);
    pthread_join(a, NULL); /* never returns: exit() ends the process */
    return 1;
}
