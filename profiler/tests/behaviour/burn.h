/* Shared by the behaviour programs of profiler/tests/command.rs. */
#include <time.h>

/* This thread's CPU time in milliseconds. */
static inline double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Spins in the calling function's own code until this thread has used MS more milliseconds of
 * CPU time: a macro, so that the samples land in the named function itself. */
#define BURN(MS)                                                   \
    do {                                                           \
        double until_ = cpu_ms() + (MS);                           \
        volatile unsigned long x_ = 0;                             \
        do {                                                       \
            for (int i_ = 0; i_ < 100000; i_++) x_ += (unsigned)i_; \
        } while (cpu_ms() < until_);                               \
    } while (0)
