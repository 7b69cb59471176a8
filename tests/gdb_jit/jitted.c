/* Code for tests/gdb_jit.rs to place in anonymous memory as a JIT compiler would: built as a
 * shared object without frame pointers and without relocations, copied to memory mapped by the
 * test, and described by a copy of this file moved to those addresses (the GDB JIT interface's
 * symbol file). */

typedef void (*callback)(void *);

static __attribute__((noinline)) long jitted_inner(callback cb, void *arg, long n) {
    volatile long pad[16];
    for (int i = 0; i < 16; i++)
        pad[i] = n + i;
    cb(arg);
    long s = 0;
    for (int i = 0; i < 16; i++)
        s += pad[i];
    return s;
}

long jitted_call(callback cb, void *arg) {
    volatile long keep[4] = {1, 2, 3, 4};
    return jitted_inner(cb, arg, keep[2]) + keep[1];
}
