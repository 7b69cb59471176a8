/* A recursion built without unwind tables or frame pointers (gcc -O2 -fomit-frame-pointer
 * -fno-asynchronous-unwind-tables -fno-unwind-tables): no rule describes its frames, so only a
 * stack scan walks through it. Each frame keeps a few words of its own on the stack. */
typedef void (*callback)(void *unused);

__attribute__((noinline)) long scan_chain(int depth, callback cb) {
    volatile long pad[3] = {depth, depth * 3, depth * 7};
    if (depth == 0)
        cb(0);
    else
        pad[1] += scan_chain(depth - 1, cb);
    return pad[0] + pad[1] + pad[2];
}
