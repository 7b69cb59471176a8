/*
 * A plugin for tests/stress.rs: built at test time with
 *   gcc -O2 -g -fomit-frame-pointer -shared -fPIC
 * and dlopen'ed / dlclose'd over and over while its caller is sampled.
 *
 * plugin_spin() spins for about `ms` milliseconds inside a chain of three distinct static
 * functions, plugin_outer -> plugin_middle -> plugin_inner. `noipa` keeps gcc from inlining,
 * cloning (no `.constprop`/`.isra` renames) or merging them, and every call's result is used
 * after the call, so none of them is a tail call: each frame is really on the stack, described
 * only by CFI (no frame pointer).
 */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

static volatile unsigned long plugin_sink;

__attribute__((noinline, noipa)) static unsigned long plugin_inner(unsigned long x)
{
    volatile unsigned long acc = x;
    for (unsigned i = 0; i < 4096; i++)
        acc = acc * 6364136223846793005UL + 1442695040888963407UL;
    return acc;
}

__attribute__((noinline, noipa)) static unsigned long plugin_middle(unsigned long x)
{
    unsigned long r = plugin_inner(x);
    plugin_sink += r;
    r ^= plugin_inner(r + 1);
    plugin_sink += r;
    return r + 1;
}

__attribute__((noinline, noipa)) static unsigned long plugin_outer(unsigned long x)
{
    unsigned long r = plugin_middle(x);
    plugin_sink += r;
    r += plugin_middle(r ^ 0x9e3779b97f4a7c15UL);
    plugin_sink += r;
    return r;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((visibility("default"))) unsigned long plugin_spin(unsigned ms)
{
    long long until = now_ns() + (long long)ms * 1000000LL;
    unsigned long acc = 0;
    do {
        acc += plugin_outer(acc);
    } while (now_ns() < until);
    return acc;
}
