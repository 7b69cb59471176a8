/* libdemo_churn.so: the small plugin that the demo's --churn mode dlcloses and dlopens again
 * every ~50 ms. Built by build.rs with `cc -shared -fPIC -O2 -g`. */
#include <stdint.h>

/* Calls since this copy of the library was loaded: back to 0 after a real unload. */
static uint64_t calls;

/* A little deterministic work: `rounds` rounds of a multiply-xorshift mix. */
uint64_t churn_work(uint64_t rounds)
{
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    uint64_t x = 0x243f6a8885a308d3ull;
    for (uint64_t i = 0; i < rounds; i++) {
        x ^= x >> 31;
        x *= 0x94d049bb133111ebull;
        x += i;
    }
    return x;
}

/* How many times churn_work ran since this copy of the library was loaded. */
uint64_t churn_calls(void)
{
    return __atomic_load_n(&calls, __ATOMIC_RELAXED);
}
