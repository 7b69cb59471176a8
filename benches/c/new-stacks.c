/* A workload that keeps making new stacks: each call picks the next of 16 functions by a
 * random number, 8 to 40 deep, so that a long run meets stacks it has never met (16^depth of
 * them), as a service handling varied requests does. Used by scripts/continuous-memory: the
 * profiler's memory must stay flat under it. Usage: new-stacks SECONDS. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef uint64_t (*step_fn)(unsigned depth, uint64_t x);
static step_fn table[16];

static uint64_t next(unsigned depth, uint64_t x) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    if (depth == 0) {
        /* A few microseconds at the leaf: samples land all over the stacks. */
        for (int i = 0; i < 2000; i++) x = (x ^ (x >> 13)) * 0x9e3779b97f4a7c15ULL;
        return x;
    }
    return table[x >> 60](depth - 1, x) + 1;
}

#define F(n)                                                                  \
    __attribute__((noinline)) static uint64_t f##n(unsigned d, uint64_t x) { \
        uint64_t r = next(d, x ^ n);                                          \
        __asm__ volatile("" ::: "memory");                                   \
        return r;                                                             \
    }
F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)

int main(int argc, char **argv) {
    step_fn fs[16] = {f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15};
    for (int i = 0; i < 16; i++) table[i] = fs[i];
    double seconds = argc > 1 ? atof(argv[1]) : 60;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    uint64_t x = 1, sink = 0;
    do {
        x = x * 6364136223846793005ULL + 1;
        sink += next(8 + (x >> 59), x);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
    return (int)(sink & 1);
}
