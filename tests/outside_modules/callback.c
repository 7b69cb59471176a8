/*
 * A library for tests/outside_modules.rs, dlopen'ed after the unwinder's tables were built:
 * lib_call calls back into the test, which unwinds through lib_call's frame. The call is not a
 * tail call (the counter is updated after it), so lib_call's frame is on the stack.
 */
static volatile unsigned long calls;

__attribute__((noinline, noipa)) void lib_call(void (*callback)(void *), void *arg)
{
    callback(arg);
    calls++;
}
