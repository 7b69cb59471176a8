/* libshared.so: reached from the workload through the PLT; calls back into the program. */
#define NOIPA __attribute__((noipa))

volatile unsigned long shlib_sink;

NOIPA static long shlib_inner(long (*cb)(long), long n) {
    volatile char pad[96];
    pad[0] = (char)n;
    for (long i = 0; i < n; i++)
        shlib_sink += (unsigned long)(i * i);
    long r = cb(n);
    shlib_sink += (unsigned long)pad[0];
    return r + 3;
}

long shlib_entry(long (*cb)(long), long n) {
    long r = shlib_inner(cb, n);
    shlib_sink += (unsigned long)r;
    return r + 1;
}
