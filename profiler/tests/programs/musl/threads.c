/* A C program as an Alpine image builds it (musl libc): two threads in a two-level call chain.
 * profiler/tests/musl_programs.rs profiles it under record. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

__attribute__((noinline)) static unsigned long leaf_work(unsigned long x) {
    for (int i = 0; i < 100000; i++) x = x * 6364136223846793005ULL + 1;
    return x;
}

__attribute__((noinline)) static unsigned long middle(unsigned long x) { return leaf_work(x) + 1; }

__attribute__((noinline)) static void *worker(void *arg) {
    unsigned long x = (unsigned long)arg;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        x = middle(x);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - start.tv_sec < 2);
    return (void *)x;
}

int main(void) {
    pthread_t t;
    void *other;
    pthread_create(&t, 0, worker, (void *)1);
    unsigned long mine = (unsigned long)worker((void *)2);
    pthread_join(t, &other);
    printf("%lu\n", (mine ^ (unsigned long)other) & 1);
    return 0;
}
