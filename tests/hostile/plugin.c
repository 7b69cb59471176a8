/* A library the hostile program loads and unloads while its code is on the stack: plugin_call
 * calls back into the program, which dlcloses the library and leaves with siglongjmp, never
 * returning into the unmapped code. */
typedef unsigned long (*callback)(unsigned long);

__attribute__((noinline)) unsigned long plugin_call(callback cb, unsigned long arg) {
    volatile unsigned long pad = arg * 3;
    return cb(arg) + pad;
}
