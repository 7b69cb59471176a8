/* A program that is hostile to the unwinder that samples it (tests/hostile.rs runs it under the
 * test agent at 5 kHz on every thread, and once without sampling for its reference output).
 * Each of its threads keeps doing one unfriendly thing:
 *
 *   smash      overwrites its own return address (and saved frame pointer) while it spins:
 *              with 0, a stack address, garbage, and an address inside libc;
 *   jit        runs code in an mmap()ed executable page, which no module and no unwind table
 *              describes, with and without a frame pointer, calling back into the program;
 *   altstack   spins in a signal handler on a sigaltstack (outside the thread's stack);
 *   coroutine  spins in a makecontext/swapcontext coroutine on a malloc()ed stack;
 *   userstack  a thread whose stack the program allocated (pthread_attr_setstack);
 *   nested     spins in a signal handler interrupted by another signal's handler;
 *   unmap      dlcloses a library whose code is on its stack, then siglongjmps out;
 *   churn      starts short threads that are sampled as they exit, some still registered.
 *
 * Every computation is deterministic: the program prints the same checksums with and without
 * sampling. Usage: hostile OUT ROUNDS HZ PLUGIN (HZ 0: no sampling). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "agent.h"

#define NOIPA __attribute__((noipa))

static int sampling;
static unsigned long rounds;
static const char *plugin_path;

static void reg(void) {
    if (sampling && agent_register_thread() != 0)
        abort();
}

static void unreg(void) {
    if (sampling)
        agent_unregister_thread();
}

/* Deterministic work: about a million multiplications. */
NOIPA unsigned long spin(unsigned long seed) {
    unsigned long h = seed;
    for (unsigned long i = 0; i < 200000; i++)
        h = h * 6364136223846793005ul + i;
    return h;
}

/* ---- smash ---------------------------------------------------------------------------------- */

NOIPA unsigned long smashed(unsigned long seed, uintptr_t garbage, int frame_pointer_too) {
    void *ra = __builtin_return_address(0);
    uintptr_t *frame = (uintptr_t *)__builtin_frame_address(0);
    volatile uintptr_t *slot = 0;
    /* The word holding our return address, just above the frame address (x86_64: the word
     * after the saved frame pointer; Thumb: above the few locals r7 points to). */
    for (int i = 0; i < 32 && !slot; i++)
        if (frame[i] == (uintptr_t)ra)
            slot = &frame[i];
    if (!slot)
        return spin(seed);
    uintptr_t saved_fp = frame[0];
    *slot = garbage;
#if defined(__x86_64__)
    /* The saved frame pointer too (x86_64 only: elsewhere the word at the frame address may be
     * a spilled local). */
    if (frame_pointer_too && slot != &frame[0])
        frame[0] = garbage ^ 0x5a5a;
#else
    (void)frame_pointer_too;
#endif
    unsigned long h = spin(seed);
    frame[0] = saved_fp;
    *slot = (uintptr_t)ra;
    return h;
}

static void *smash_main(void *arg) {
    (void)arg;
    reg();
    unsigned long h = 0;
    volatile uintptr_t local = 0;
    for (unsigned long r = 0; r < rounds; r++) {
        uintptr_t garbage[] = {0, (uintptr_t)&local, 0xdeadbeefcafef00dul & UINTPTR_MAX,
                               (uintptr_t)&printf + 7};
        h += smashed(h + r, garbage[r % 4], (r / 4) % 2);
    }
    unreg();
    return (void *)h;
}

/* ---- jit ------------------------------------------------------------------------------------ */

typedef unsigned long (*jitted)(void *callback, unsigned long arg);

/* Called from the JIT page (not a tail call: its frame returns into the page). */
NOIPA unsigned long jit_callback(unsigned long arg) { return spin(arg) ^ 1; }

#if defined(__x86_64__)
/* push rbp; mov rbp, rsp; mov rax, rdi; mov rdi, rsi; call rax; pop rbp; ret */
static const unsigned char with_fp[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf8, 0x48,
                                        0x89, 0xf7, 0xff, 0xd0, 0x5d, 0xc3};
/* sub rsp, 8; mov rax, rdi; mov rdi, rsi; call rax; add rsp, 8; ret */
static const unsigned char without_fp[] = {0x48, 0x83, 0xec, 0x08, 0x48, 0x89, 0xf8, 0x48, 0x89,
                                           0xf7, 0xff, 0xd0, 0x48, 0x83, 0xc4, 0x08, 0xc3};
/* mov rcx, rsi; loop: dec rcx; jnz loop; mov rax, rsi; ret  (spins in the page itself) */
static const unsigned char looping[] = {0x48, 0x89, 0xf1, 0x48, 0xff, 0xc9,
                                        0x75, 0xfb, 0x48, 0x89, 0xf0, 0xc3};
#define THUMB 0
#elif defined(__arm__)
/* Thumb: push {r7, lr}; mov r7, sp; mov r2, r0; mov r0, r1; blx r2; pop {r7, pc} */
static const unsigned char with_fp[] = {0x80, 0xb5, 0x6f, 0x46, 0x02, 0x46,
                                        0x08, 0x46, 0x90, 0x47, 0x80, 0xbd};
/* Thumb: push {r4, lr}; mov r2, r0; mov r0, r1; blx r2; pop {r4, pc} */
static const unsigned char without_fp[] = {0x10, 0xb5, 0x02, 0x46, 0x08, 0x46,
                                           0x90, 0x47, 0x10, 0xbd};
/* Thumb: mov r0, r1; loop: subs r0, #1; bne loop; mov r0, r1; bx lr */
static const unsigned char looping[] = {0x08, 0x46, 0x01, 0x38, 0xfd, 0xd1, 0x08, 0x46, 0x70, 0x47};
#define THUMB 1
#elif defined(__aarch64__)
/* stp x29, x30, [sp, #-16]!; mov x29, sp; mov x2, x0; mov x0, x1; blr x2;
 * ldp x29, x30, [sp], #16; ret */
static const unsigned char with_fp[] = {0xfd, 0x7b, 0xbf, 0xa9, 0xfd, 0x03, 0x00, 0x91, 0xe2, 0x03, 0x00, 0xaa, 0xe0, 0x03, 0x01, 0xaa, 0x40, 0x00, 0x3f, 0xd6, 0xfd, 0x7b, 0xc1, 0xa8, 0xc0, 0x03, 0x5f, 0xd6};
/* str x30, [sp, #-16]!; mov x2, x0; mov x0, x1; blr x2; ldr x30, [sp], #16; ret */
static const unsigned char without_fp[] = {0xfe, 0x0f, 0x1f, 0xf8, 0xe2, 0x03, 0x00, 0xaa, 0xe0, 0x03, 0x01, 0xaa, 0x40, 0x00, 0x3f, 0xd6, 0xfe, 0x07, 0x41, 0xf8, 0xc0, 0x03, 0x5f, 0xd6};
/* mov x0, x1; loop: subs x0, x0, #1; b.ne loop; mov x0, x1; ret */
static const unsigned char looping[] = {0xe0, 0x03, 0x01, 0xaa, 0x00, 0x04, 0x00, 0xf1, 0xe1, 0xff, 0xff, 0x54, 0xe0, 0x03, 0x01, 0xaa, 0xc0, 0x03, 0x5f, 0xd6};
#define THUMB 0
#endif

static jitted jit(unsigned char *page, size_t at, const unsigned char *code, size_t len) {
    memcpy(page + at, code, len);
    __builtin___clear_cache((char *)page + at, (char *)page + at + len);
    return (jitted)(uintptr_t)(page + at + THUMB);
}

/* The JIT page, for the report: return addresses into it are frames a walk may rightly write
 * once a refresh has made the page a module of the table (crossed by its frame pointer). */
static uintptr_t jit_lo, jit_hi;

static void *jit_main(void *arg) {
    (void)arg;
    reg();
    unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        abort();
    jit_lo = (uintptr_t)page;
    jit_hi = jit_lo + 4096;
    jitted fp = jit(page, 0, with_fp, sizeof with_fp);
    jitted nofp = jit(page, 64, without_fp, sizeof without_fp);
    jitted loop = jit(page, 128, looping, sizeof looping);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0)
        abort();
    unsigned long h = 0;
    for (unsigned long r = 0; r < rounds; r++) {
        h += fp((void *)jit_callback, h + r);
        h += nofp((void *)jit_callback, h + r);
        h += loop(0, 3000000);
    }
    munmap(page, 4096);
    unreg();
    return (void *)h;
}

/* ---- altstack and nested signals ------------------------------------------------------------ */

static __thread unsigned long signal_work;

NOIPA void on_altstack(int sig) {
    (void)sig;
    signal_work += spin(signal_work);
}

static void *altstack_main(void *arg) {
    (void)arg;
    reg();
    stack_t ss = {.ss_sp = malloc(256 * 1024), .ss_size = 256 * 1024, .ss_flags = 0};
    if (!ss.ss_sp || sigaltstack(&ss, 0) != 0)
        abort();
    for (unsigned long r = 0; r < rounds; r++)
        pthread_kill(pthread_self(), SIGUSR1);
    unsigned long h = signal_work;
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, 0);
    unreg();
    return (void *)h;
}

NOIPA void nested_inner(int sig) {
    (void)sig;
    signal_work += spin(signal_work ^ 7);
}

NOIPA void nested_outer(int sig) {
    (void)sig;
    signal_work += spin(signal_work);
    /* Another signal's handler runs on top of this one. */
    pthread_kill(pthread_self(), SIGRTMIN);
    signal_work += spin(signal_work ^ 3);
}

static void *nested_main(void *arg) {
    (void)arg;
    reg();
    for (unsigned long r = 0; r < rounds; r++)
        pthread_kill(pthread_self(), SIGUSR2);
    unsigned long h = signal_work;
    unreg();
    return (void *)h;
}

/* ---- coroutine ------------------------------------------------------------------------------ */

static __thread ucontext_t main_ctx, co_ctx;
static __thread unsigned long co_value;

NOIPA void coroutine_body(void) {
    for (;;) {
        co_value = spin(co_value);
        swapcontext(&co_ctx, &main_ctx);
    }
}

static void *coroutine_main(void *arg) {
    (void)arg;
    reg();
    size_t size = 256 * 1024;
    char *stack = malloc(size);
    if (!stack || getcontext(&co_ctx) != 0)
        abort();
    co_ctx.uc_stack.ss_sp = stack;
    co_ctx.uc_stack.ss_size = size;
    co_ctx.uc_link = 0;
    makecontext(&co_ctx, coroutine_body, 0);
    co_value = 1;
    for (unsigned long r = 0; r < rounds; r++)
        swapcontext(&main_ctx, &co_ctx);
    unreg();
    return (void *)co_value;
}

/* ---- a thread on a stack the program allocated ---------------------------------------------- */

NOIPA unsigned long user_stack_work(unsigned long seed, int depth) {
    return depth == 0 ? spin(seed) : user_stack_work(seed + 1, depth - 1) + 1;
}

static void *userstack_main(void *arg) {
    (void)arg;
    reg();
    unsigned long h = 0;
    for (unsigned long r = 0; r < rounds; r++)
        h += user_stack_work(h, (int)(r % 16));
    unreg();
    return (void *)h;
}

/* ---- unmap ---------------------------------------------------------------------------------- */

static __thread sigjmp_buf unmap_escape;
static __thread void *unmap_handle;
static __thread unsigned long unmap_value;
/* Where the library was, for the test: frames there after it is unmapped are not wrong. */
static uintptr_t plugin_lo = UINTPTR_MAX, plugin_hi;
static pthread_mutex_t plugin_mutex = PTHREAD_MUTEX_INITIALIZER;

NOIPA unsigned long after_dlclose(unsigned long arg) {
    void *call = dlsym(unmap_handle, "plugin_call");
    Dl_info info;
    if (call && dladdr(call, &info)) {
        pthread_mutex_lock(&plugin_mutex);
        uintptr_t base = (uintptr_t)info.dli_fbase;
        if (base < plugin_lo)
            plugin_lo = base;
        if (base + 0x10000 > plugin_hi)
            plugin_hi = base + 0x10000;
        pthread_mutex_unlock(&plugin_mutex);
    }
    /* The library's code is on this stack (plugin_call called us): unmap it, spin, and leave
     * without returning into it. */
    if (dlclose(unmap_handle) != 0)
        abort();
    unmap_value = spin(arg);
    siglongjmp(unmap_escape, 1);
}

static void *unmap_main(void *arg) {
    (void)arg;
    reg();
    unsigned long h = 0;
    /* At most 100 rounds: each dlopen is followed by a table refresh. */
    for (unsigned long r = 0; r < rounds && r < 100; r++) {
        unmap_handle = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
        if (!unmap_handle)
            abort();
        /* The library's rules go into the table; once unmapped, they stay until the next
         * refresh while its code is still on the stack. */
        if (sampling && agent_refresh() != 0)
            abort();
        unsigned long (*call)(unsigned long (*)(unsigned long), unsigned long) =
            (unsigned long (*)(unsigned long (*)(unsigned long), unsigned long))dlsym(
                unmap_handle, "plugin_call");
        if (!call)
            abort();
        if (sigsetjmp(unmap_escape, 0) == 0)
            call(after_dlclose, h + r);
        h += unmap_value;
    }
    unreg();
    return (void *)h;
}

/* ---- churn ---------------------------------------------------------------------------------- */

static void *short_lived(void *arg) {
    unsigned long seed = (unsigned long)arg;
    reg();
    unsigned long h = spin(seed) + spin(seed + 1);
    /* Some exit still registered: the sampler may signal a thread that is exiting or gone
     * (the runtime releases its slot when it exits; the agent keeps sending it signals). */
    if (seed % 8 != 0)
        unreg();
    return (void *)h;
}

static void *churn_main(void *arg) {
    (void)arg;
    unsigned long h = 0;
    /* At most 200 threads: the agent keeps the ids of those that exit registered (one in 8). */
    for (unsigned long r = 0; r < rounds && r < 200; r++) {
        pthread_t t;
        void *v;
        if (pthread_create(&t, 0, short_lived, (void *)r) != 0 || pthread_join(t, &v) != 0)
            abort();
        h += (unsigned long)v;
    }
    return (void *)h;
}

/* ---- main ----------------------------------------------------------------------------------- */

static void handle(int sig, void (*fn)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, 0) != 0)
        abort();
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s OUT ROUNDS HZ PLUGIN\n", argv[0]);
        return 2;
    }
    rounds = strtoul(argv[2], 0, 10);
    unsigned hz = (unsigned)atoi(argv[3]);
    plugin_path = argv[4];
    sampling = hz > 0;
    handle(SIGUSR1, on_altstack, SA_ONSTACK | SA_RESTART);
    handle(SIGUSR2, nested_outer, SA_RESTART);
    handle(SIGRTMIN, nested_inner, SA_RESTART);
    if (sampling && agent_start(hz) != 0)
        return 1;
    struct {
        const char *name;
        void *(*fn)(void *);
        int own_stack;
        pthread_t thread;
        void *stack;
    } scenarios[] = {
        {"smash", smash_main, 0, 0, 0},         {"jit", jit_main, 0, 0, 0},
        {"altstack", altstack_main, 0, 0, 0},   {"nested", nested_main, 0, 0, 0},
        {"coroutine", coroutine_main, 0, 0, 0}, {"userstack", userstack_main, 1, 0, 0},
        {"unmap", unmap_main, 0, 0, 0},         {"churn", churn_main, 0, 0, 0},
    };
    size_t n = sizeof scenarios / sizeof scenarios[0];
    for (size_t i = 0; i < n; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (scenarios[i].own_stack) {
            size_t size = 1 << 20;
            scenarios[i].stack = malloc(size);
            if (!scenarios[i].stack || pthread_attr_setstack(&attr, scenarios[i].stack, size) != 0)
                abort();
        }
        if (pthread_create(&scenarios[i].thread, &attr, scenarios[i].fn, 0) != 0)
            abort();
        pthread_attr_destroy(&attr);
    }
    for (size_t i = 0; i < n; i++) {
        void *v;
        if (pthread_join(scenarios[i].thread, &v) != 0)
            abort();
        printf("%s %lx\n", scenarios[i].name, (unsigned long)v);
        free(scenarios[i].stack);
    }
    if (sampling) {
        if (agent_stop(argv[1]) != 0)
            return 1;
        FILE *f = fopen(argv[1], "a");
        if (f) {
            fprintf(f, "# plugin %lx %lx\n", (unsigned long)plugin_lo, (unsigned long)plugin_hi);
            fprintf(f, "# jit %lx %lx\n", (unsigned long)jit_lo, (unsigned long)jit_hi);
            fclose(f);
        }
    }
    return 0;
}
