/* The C program of profiler/tests/common/cross.rs: two threads, "alpha" and "beta", each doing its own
 * named work (alpha_thread -> alpha_work -> alpha_mix, beta_thread -> beta_work -> beta_mix),
 * while main does its own (main_work -> main_mix). Fixed iteration counts, so the output is the
 * same on every run: one line per thread with its result. An argument N makes each thread do N
 * times its work (a longer run). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 2000
#define STEPS 100000

/* ROUNDS times the argument. */
static int rounds = ROUNDS;

/* Each function is kept out of line and unspecialized (noipa: no ".constprop" clone, whose
 * symbol would be another name), and each call's result is used after it returns, so that no
 * call becomes a tail call and every caller keeps its frame. */
__attribute__((noipa)) static unsigned alpha_mix(unsigned x) {
    for (int i = 0; i < STEPS; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
    }
    return x;
}

__attribute__((noipa)) static unsigned alpha_work(unsigned seed) {
    unsigned acc = seed;
    for (int r = 0; r < rounds; r++)
        acc = alpha_mix(acc + (unsigned)r) + 1;
    return acc;
}

__attribute__((noipa)) static unsigned beta_mix(unsigned x) {
    for (int i = 0; i < STEPS; i++)
        x = x * 1103515245u + 12345u;
    return x;
}

__attribute__((noipa)) static unsigned beta_work(unsigned seed) {
    unsigned acc = seed;
    for (int r = 0; r < rounds; r++)
        acc = beta_mix(acc ^ (unsigned)r) + 3;
    return acc;
}

__attribute__((noipa)) static unsigned main_mix(unsigned x) {
    for (int i = 0; i < STEPS; i++)
        x = (x >> 1) ^ (-(x & 1u) & 0xedb88320u);
    return x;
}

__attribute__((noipa)) static unsigned main_work(unsigned seed) {
    unsigned acc = seed;
    for (int r = 0; r < rounds / 2; r++)
        acc = main_mix(acc + (unsigned)r) + 7;
    return acc;
}

static unsigned alpha_result, beta_result;

__attribute__((noipa)) static void *alpha_thread(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "alpha");
    alpha_result = alpha_work(1);
    return NULL;
}

__attribute__((noipa)) static void *beta_thread(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "beta");
    beta_result = beta_work(2);
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t alpha, beta;
    if (argc > 1)
        rounds = ROUNDS * atoi(argv[1]);
    if (pthread_create(&alpha, NULL, alpha_thread, NULL) != 0 ||
        pthread_create(&beta, NULL, beta_thread, NULL) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    unsigned main_result = main_work(3);
    pthread_join(alpha, NULL);
    pthread_join(beta, NULL);
    printf("alpha %08x\nbeta %08x\nmain %08x\n", alpha_result, beta_result, main_result);
    return 0;
}
