/* The signal-path guard for the library as a shared object.
 *
 *   guard dlopen|preload AGENT_SO TLS_LIB SECONDS HZ REPORT
 *
 * Loads the test agent (libunwind_agent.so, the library built as a cdylib) with dlopen, or finds
 * it already loaded by LD_PRELOAD, and samples four threads at HZ with SIGPROF for SECONDS:
 * the main thread and worker 0 register at start, worker 1 registers after a quarter of the run,
 * worker 2 never registers (every signal it gets must be refused without touching anything),
 * and half-way through the main thread dlopens TLS_LIB, a library with thread-local variables
 * (which makes glibc grow every thread's dynamic thread vector on its next __tls_get_addr).
 *
 * The SIGPROF handler is this program's: it sets a thread-local flag, calls the library's
 * signal-path entry (agent_handle_signal: unwind_signal and a store into preallocated slots),
 * and clears the flag. While the flag is set this program counts:
 * - allocations and frees: malloc, calloc, realloc, free, memalign, posix_memalign,
 *   aligned_alloc, valloc and pvalloc are interposed here, so that calls from the library, libc
 *   and the dynamic loader (__tls_get_addr's allocate_and_init) all land in them;
 * - locks taken through the pthread API (pthread_mutex_lock/trylock, pthread_rwlock_*);
 * - system calls, where the kernel offers syscall user dispatch (Linux 5.11+, not qemu-user):
 *   the handler switches the thread's selector to BLOCK around the library call, so any system
 *   call made inside it raises SIGSYS, which counts it, performs it, and returns.
 * Workers allocate and free in their loops, so signals often land inside malloc: a handler that
 * allocated there would deadlock on the arena lock (the test's timeout catches that too).
 *
 * Writes the agent's report (one line per sample) to REPORT and prints one line of counts:
 *   guard: mode=M signals=N handled=N allocs=N frees=N locks=N syscalls=N|unavailable first_syscall=N
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#define SYSCALL_DISPATCH_FILTER_ALLOW 0
#define SYSCALL_DISPATCH_FILTER_BLOCK 1
#endif

/* ---- Counters. The flags are the executable's own TLS (local-exec: no __tls_get_addr). */

static __thread int in_lib;
static __thread volatile char sud_selector = SYSCALL_DISPATCH_FILTER_ALLOW;
static __thread int sud_on;

static atomic_ulong allocs_in_lib, frees_in_lib, locks_in_lib, syscalls_in_lib;
static atomic_long first_syscall = -1;
static atomic_ulong signals_sent, handled;
static int sud_available;
static uintptr_t sud_allowed_start, sud_allowed_len;

/* ---- The malloc family, forwarded to glibc's own entry points; with GUARD_NEXT_ALLOCATOR
 * set, once found (before main), to the next object's (an allocation profiler's hooks
 * preloaded after this program, which sample the workers' allocations). */

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void *(*next_memalign)(size_t, size_t);

#define COUNT(c) do { if (in_lib) atomic_fetch_add(&(c), 1); } while (0)
#define NEXT(f, ...) (next_##f ? next_##f(__VA_ARGS__) : __libc_##f(__VA_ARGS__))

void *malloc(size_t n) { COUNT(allocs_in_lib); return NEXT(malloc, n); }
void free(void *p) {
    if (p) COUNT(frees_in_lib);
    if (next_free) next_free(p); else __libc_free(p);
}
void *calloc(size_t n, size_t m) { COUNT(allocs_in_lib); return NEXT(calloc, n, m); }
void *realloc(void *p, size_t n) { COUNT(allocs_in_lib); return NEXT(realloc, p, n); }
void *memalign(size_t a, size_t n) { COUNT(allocs_in_lib); return NEXT(memalign, a, n); }
void *aligned_alloc(size_t a, size_t n) { COUNT(allocs_in_lib); return NEXT(memalign, a, n); }
void *valloc(size_t n) { COUNT(allocs_in_lib); return __libc_valloc(n); }
void *pvalloc(size_t n) { COUNT(allocs_in_lib); return __libc_pvalloc(n); }
int posix_memalign(void **out, size_t a, size_t n) {
    COUNT(allocs_in_lib);
    void *p = NEXT(memalign, a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

__attribute__((constructor(101))) static void find_next_allocator(void) {
    if (!getenv("GUARD_NEXT_ALLOCATOR"))
        return;
    /* Each looked up before any is used: a block is freed by the allocator that made it. */
    void *m = dlsym(RTLD_NEXT, "malloc"), *f = dlsym(RTLD_NEXT, "free");
    void *c = dlsym(RTLD_NEXT, "calloc"), *r = dlsym(RTLD_NEXT, "realloc");
    void *a = dlsym(RTLD_NEXT, "memalign");
    if (!m || !f || !c || !r || !a) {
        fprintf(stderr, "guard: cannot find the next allocator\n");
        exit(2);
    }
    next_malloc = (void *(*)(size_t))m;
    next_calloc = (void *(*)(size_t, size_t))c;
    next_realloc = (void *(*)(void *, size_t))r;
    next_memalign = (void *(*)(size_t, size_t))a;
    next_free = (void (*)(void *))f;
}

/* ---- The pthread lock API, forwarded to the next definition (libc's), found before main. */

static int (*real_mutex_lock)(pthread_mutex_t *);
static int (*real_mutex_trylock)(pthread_mutex_t *);
static int (*real_rwlock_rdlock)(pthread_rwlock_t *);
static int (*real_rwlock_wrlock)(pthread_rwlock_t *);

__attribute__((constructor(101))) static void find_lock_functions(void) {
    real_mutex_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    real_mutex_trylock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_trylock");
    real_rwlock_rdlock = (int (*)(pthread_rwlock_t *))dlsym(RTLD_NEXT, "pthread_rwlock_rdlock");
    real_rwlock_wrlock = (int (*)(pthread_rwlock_t *))dlsym(RTLD_NEXT, "pthread_rwlock_wrlock");
    if (!real_mutex_lock || !real_mutex_trylock || !real_rwlock_rdlock || !real_rwlock_wrlock) {
        fprintf(stderr, "guard: cannot find libc's lock functions\n");
        exit(2);
    }
}

int pthread_mutex_lock(pthread_mutex_t *m) { COUNT(locks_in_lib); return real_mutex_lock(m); }
int pthread_mutex_trylock(pthread_mutex_t *m) { COUNT(locks_in_lib); return real_mutex_trylock(m); }
int pthread_rwlock_rdlock(pthread_rwlock_t *l) { COUNT(locks_in_lib); return real_rwlock_rdlock(l); }
int pthread_rwlock_wrlock(pthread_rwlock_t *l) { COUNT(locks_in_lib); return real_rwlock_wrlock(l); }

/* ---- System calls: syscall user dispatch. */

/* SIGSYS: a system call was made while the selector said BLOCK. Count it, perform it with the
 * selector at ALLOW, and return its result. The return to the interrupted code goes through
 * the signal trampoline, which is inside the always-allowed range. */
static void on_sigsys(int sig, siginfo_t *info, void *ucv) {
    (void)sig;
    sud_selector = SYSCALL_DISPATCH_FILTER_ALLOW;
    atomic_fetch_add(&syscalls_in_lib, 1);
    long expected = -1;
    atomic_compare_exchange_strong(&first_syscall, &expected, (long)info->si_syscall);
#if defined(__x86_64__)
    ucontext_t *uc = ucv;
    greg_t *g = uc->uc_mcontext.gregs;
    long r = syscall(info->si_syscall, g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8],
                     g[REG_R9]);
    g[REG_RAX] = r == -1 ? -errno : r;
#else
    (void)ucv;
#endif
    if (sud_allowed_len) sud_selector = SYSCALL_DISPATCH_FILTER_BLOCK;
}

/* Turns syscall user dispatch on for the calling thread (selector at ALLOW). */
static void sud_enable_thread(void) {
    if (!sud_available) return;
    if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, sud_allowed_start, sud_allowed_len,
              &sud_selector) == 0)
        sud_on = 1;
}

/* Installs the SIGSYS handler and finds the signal trampoline, the one code range that must be
 * allowed while blocking (sigreturn). Returns whether dispatch works on this kernel. */
static int sud_setup(void) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, NULL) != 0) return 0;
#if defined(__x86_64__)
    if (sigaction(SIGSYS, NULL, &old) == 0 && old.sa_restorer) {
        sud_allowed_start = (uintptr_t)old.sa_restorer;
        sud_allowed_len = 16;
    }
#else
    (void)old;
#endif
    int rc = prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, sud_allowed_start,
                   sud_allowed_len, &sud_selector);
    if (rc != 0) return 0;
    prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0);
#if !defined(__x86_64__)
    return 0; /* the handler only knows x86_64's system call registers */
#else
    return 1;
#endif
}

/* ---- The library's C API. */

static int (*agent_init)(void);
static int (*agent_register_thread)(void);
static int (*agent_refresh)(void);
static void (*agent_handle_signal)(int, siginfo_t *, void *);
static int (*agent_stop)(const char *);

static void on_sigprof(int sig, siginfo_t *info, void *uc) {
    int saved = errno;
    atomic_fetch_add(&handled, 1);
    in_lib = 1;
    if (sud_on) sud_selector = SYSCALL_DISPATCH_FILTER_BLOCK;
    agent_handle_signal(sig, info, uc);
    sud_selector = SYSCALL_DISPATCH_FILTER_ALLOW;
    in_lib = 0;
    errno = saved;
}

static void *need(void *handle, const char *name) {
    void *p = dlsym(handle, name);
    if (!p) {
        fprintf(stderr, "guard: %s not found: %s\n", name, dlerror());
        exit(2);
    }
    return p;
}

/* ---- Workloads: recursion, allocation, and a call into the TLS library once loaded. */

static atomic_int stop;
static int (*tls_touch)(int);

__attribute__((noinline)) static unsigned long churn(int depth, unsigned long acc) {
    if (depth == 0) {
        for (int i = 0; i < 64; i++) {
            char *p = malloc(32 + (acc + i) % 512);
            p[0] = (char)i;
            acc += (unsigned char)p[0];
            free(p);
        }
        int (*t)(int) = __atomic_load_n(&tls_touch, __ATOMIC_ACQUIRE);
        if (t) acc += (unsigned long)t((int)acc);
        return acc;
    }
    return churn(depth - 1, acc * 31 + depth) + 1;
}

static pid_t tids[4];

struct worker {
    int index;
    int register_after_ms; /* -1: never */
};

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    sud_enable_thread();
    __atomic_store_n(&tids[w->index], (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    double registered_at = w->register_after_ms < 0 ? -1 : now_s() + w->register_after_ms / 1e3;
    int registered = 0;
    unsigned long acc = 0;
    while (!atomic_load(&stop)) {
        if (!registered && registered_at >= 0 && now_s() >= registered_at) {
            if (agent_register_thread() != 0) {
                fprintf(stderr, "guard: agent_register_thread failed\n");
                exit(2);
            }
            registered = 1;
        }
        acc += churn(24, acc);
    }
    return (void *)acc;
}

/* Sends SIGPROF to every thread in `tids` at `hz` until `seconds` have passed. */
static int hz_global;

static void *sampler_main(void *arg) {
    double seconds = *(double *)arg;
    long period_ns = 1000000000L / hz_global;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    double end = now_s() + seconds;
    pid_t pid = getpid();
    while (now_s() < end) {
        for (int i = 0; i < 4; i++) {
            pid_t t = __atomic_load_n(&tids[i], __ATOMIC_ACQUIRE);
            if (t && syscall(SYS_tgkill, pid, t, SIGPROF) == 0) atomic_fetch_add(&signals_sent, 1);
        }
        next.tv_nsec += period_ns;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s dlopen|preload AGENT_SO TLS_LIB SECONDS HZ REPORT\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    double seconds = atof(argv[4]);
    hz_global = atoi(argv[5]);
    if (hz_global <= 0 || seconds <= 0) {
        fprintf(stderr, "guard: bad SECONDS or HZ\n");
        return 2;
    }
    void *agent;
    if (strcmp(mode, "dlopen") == 0) {
        agent = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
        if (!agent) {
            fprintf(stderr, "guard: dlopen %s: %s\n", argv[2], dlerror());
            return 2;
        }
    } else if (strcmp(mode, "preload") == 0) {
        agent = RTLD_DEFAULT;
    } else {
        fprintf(stderr, "guard: unknown mode %s\n", mode);
        return 2;
    }
    agent_init = need(agent, "agent_init");
    agent_register_thread = need(agent, "agent_register_thread");
    agent_refresh = need(agent, "agent_refresh");
    agent_handle_signal = need(agent, "agent_handle_signal");
    agent_stop = need(agent, "agent_stop");

    sud_available = sud_setup();
    sud_enable_thread();
    if (agent_init() != 0) {
        fprintf(stderr, "guard: agent_init failed\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);

    tids[3] = (pid_t)syscall(SYS_gettid);
    struct worker ws[3] = {{0, 0}, {1, (int)(seconds * 250)}, {2, -1}};
    pthread_t threads[3];
    for (int i = 0; i < 3; i++) pthread_create(&threads[i], NULL, worker_main, &ws[i]);
    pthread_t sampler;
    pthread_create(&sampler, NULL, sampler_main, &seconds);

    /* Half-way: a library with TLS, then a refresh so that its code has rules. */
    double started = now_s();
    unsigned long acc = 0;
    int loaded = 0;
    while (now_s() - started < seconds) {
        if (!loaded && now_s() - started >= seconds / 2) {
            void *tls = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
            if (!tls) {
                fprintf(stderr, "guard: dlopen %s: %s\n", argv[3], dlerror());
                return 2;
            }
            int (*touch)(int) = need(tls, "tls_touch");
            touch(1);
            __atomic_store_n(&tls_touch, touch, __ATOMIC_RELEASE);
            if (agent_refresh() != 0) {
                fprintf(stderr, "guard: agent_refresh failed\n");
                return 2;
            }
            loaded = 1;
        }
        acc += churn(20, acc);
    }
    pthread_join(sampler, NULL);
    sleep_ms(50); /* let signals in flight land */
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
    tids[3] = 0;
    if (agent_stop(argv[6]) != 0) {
        fprintf(stderr, "guard: agent_stop failed\n");
        return 2;
    }
    char sys[32];
    if (sud_available)
        snprintf(sys, sizeof sys, "%lu", atomic_load(&syscalls_in_lib));
    else
        snprintf(sys, sizeof sys, "unavailable");
    printf("guard: mode=%s signals=%lu handled=%lu allocs=%lu frees=%lu locks=%lu syscalls=%s "
           "first_syscall=%ld acc=%lu\n",
           mode, atomic_load(&signals_sent), atomic_load(&handled), atomic_load(&allocs_in_lib),
           atomic_load(&frees_in_lib), atomic_load(&locks_in_lib), sys, atomic_load(&first_syscall),
           acc & 1);
    return 0;
}
