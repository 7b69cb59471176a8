/* A recursion built with frame pointers (gcc -O2 -fno-omit-frame-pointer): the frame-pointer
 * walk over it is the floor every CFI unwinder is compared with. At the bottom it calls back
 * with its own frame address, where the walk starts. */
typedef void (*fp_callback)(void *frame);

__attribute__((noinline)) long fp_chain(int depth, fp_callback cb) {
    volatile long pad = depth;
    if (depth == 0)
        cb(__builtin_frame_address(0));
    else
        pad += fp_chain(depth - 1, cb);
    return pad;
}
