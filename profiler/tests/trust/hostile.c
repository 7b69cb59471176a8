/* A program that attacks the profiler that samples it (profiler/tests/trust.rs runs it under
 * `record`, one scenario per run, named by argv[1]). Every scenario also does honest work in
 * named functions, which the profile must keep:
 *
 *   huge      writes a ring record claiming 2^24 words into its main thread's sample ring
 *   scribble  writes over its process record and its threads' counters
 *   truncate  tries to shrink every memory it shares with record (through /proc/self/map_files)
 *   inject    connects to record's socket itself (it has the session's name and key in its
 *             environment): a process record that is not sealed and then shrunk, a wrong key,
 *             a second record for itself; then floods its own connection with module messages,
 *             and sends garbage on it
 *   closefds  closes every descriptor but 0-2, opens a socketpair, starts threads and loads a
 *             library: the profiler must write nothing on the program's descriptors
 *   rlimit    lowers RLIMIT_NOFILE to 4, then starts four threads
 *   holes     starts a thread under RLIMIT_NOFILE 4 (it cannot be sampled), then, the limit
 *             restored, one that exits, then one that takes over its record
 *   handler   installs its own handlers (sigaction, then signal) for the sampling signal
 *             (argv[2], default URG) and raises it: it must receive exactly its own signals
 *   fifo      runs code in an executable page and leaves a FIFO at /tmp/perf-PID.map and a
 *             symbolic link to /etc/passwd at /tmp/jit-PID.dump for record to find
 *   wait      prints its pid, works until the file argv[2] exists (the second user's test
 *             attacks meanwhile), then runs code in an executable page, which only a perf map
 *             could name
 *
 * Layouts it relies on (profiler/src/sampler.rs): a record's first word is its magic, "proc"
 * in the high bytes and the record's size in the low 32 bits for the process record, "thread"
 * and the size in the low 16 bits for a thread's; a thread record's second
 * word is its ring's size in words, its tid is the int at byte 24, its ring's indices (head,
 * then tail 64 bytes on) are its last 128 bytes, and its ring's words follow it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "../behaviour/burn.h"

#define PROCESS_MAGIC 0x70726f6300000000ull
#define THREAD_MAGIC 0x7468726561640000ull

__attribute__((noinline)) static void honest_worker_work(void) { BURN(600); }
__attribute__((noinline)) static void honest_main_work(void) { BURN(400); }
__attribute__((noinline)) static void after_the_attack(void) { BURN(300); }

static void *worker(void *arg) {
    (void)arg;
    honest_worker_work();
    return NULL;
}

/* One memory region shared with record, as this process maps it. */
struct region {
    unsigned char *start;
    size_t len;
    char range[64];
};

/* Every mapping of the profiler's memfds (at most `max`). */
static int shared_regions(struct region *out, int max) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return 0;
    char line[512];
    int n = 0;
    while (n < max && fgets(line, sizeof line, maps)) {
        if (!strstr(line, "/memfd:unwind-profiler")) continue;
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
        out[n].start = (unsigned char *)lo;
        out[n].len = hi - lo;
        snprintf(out[n].range, sizeof out[n].range, "%lx-%lx", lo, hi);
        n++;
    }
    fclose(maps);
    return n;
}

static uint64_t word(const struct region *r, size_t offset) {
    return *(volatile uint64_t *)(r->start + offset);
}

/* The bits of a record's magic that hold its size. */
static uint64_t size_bits(uint64_t kind) {
    return kind == PROCESS_MAGIC ? 0xffffffffull : 0xffffull;
}

static int is_kind(const struct region *r, uint64_t kind) {
    return (word(r, 0) & ~size_bits(kind)) == kind;
}

/* The size of record `r` of `kind`. */
static size_t record_size(const struct region *r, uint64_t kind) {
    return word(r, 0) & size_bits(kind);
}

/* The sampling signal blocked in this thread, so that its own handler does not write the ring
 * while we do. */
static void block_sampling(int signal) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signal);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static int huge(void) {
    honest_main_work();
    block_sampling(SIGURG);
    struct region r[64];
    int n = shared_regions(r, 64), done = 0;
    for (int i = 0; i < n; i++) {
        if (!is_kind(&r[i], THREAD_MAGIC)) continue;
        size_t size = record_size(&r[i], THREAD_MAGIC);
        if (*(int *)(r[i].start + 24) != (int)gettid()) continue;
        uint64_t words = word(&r[i], 8);
        volatile uint64_t *head = (uint64_t *)(r[i].start + size - 128);
        volatile uint64_t *ring = (uint64_t *)(r[i].start + size);
        ring[*head & (words - 1)] = 1ull << 24;
        *head = *head + 1;
        done++;
    }
    printf("huge: %d rings written\n", done);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGURG);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    after_the_attack();
    return done == 1 ? 0 : 2;
}

static int scribble(void) {
    /* First, while both threads still have their work ahead: the samples after it must count. */
    struct region r[64];
    int n = 0;
    for (int tries = 0; tries < 1000; tries++) {
        n = shared_regions(r, 64);
        int threads = 0;
        for (int i = 0; i < n; i++) threads += is_kind(&r[i], THREAD_MAGIC);
        if (threads >= 2) break;
        usleep(1000);
    }
    block_sampling(SIGURG);
    int processes = 0, threads = 0;
    for (int i = 0; i < n; i++) {
        if (is_kind(&r[i], PROCESS_MAGIC)) {
            memset(r[i].start + 8, 0xa5, record_size(&r[i], PROCESS_MAGIC) - 8);
            processes++;
        } else if (is_kind(&r[i], THREAD_MAGIC)) {
            /* Everything between the tid and the ring's indices: its counters. */
            size_t size = record_size(&r[i], THREAD_MAGIC);
            memset(r[i].start + 32, 0xa5, size - 128 - 32);
            threads++;
        }
    }
    printf("scribble: %d process and %d thread records written over\n", processes, threads);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGURG);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    honest_main_work();
    return processes == 1 && threads >= 2 ? 0 : 2;
}

static int truncate_shared(void) {
    honest_main_work();
    struct region r[64];
    int n = shared_regions(r, 64), opened = 0, shrunk = 0;
    for (int i = 0; i < n; i++) {
        char path[128];
        snprintf(path, sizeof path, "/proc/self/map_files/%s", r[i].range);
        int fd = open(path, O_RDWR);
        if (fd < 0) continue;
        opened++;
        if (ftruncate(fd, 0) == 0) shrunk++;
        close(fd);
    }
    printf("truncate: %d of %d regions opened, %d shrunk\n", opened, n, shrunk);
    after_the_attack();
    return opened > 0 && shrunk == 0 ? 0 : 2;
}

/* A connection to record's socket, named in the environment. */
static int connect_session(void) {
    const char *name = getenv("UNWIND_PROFILER_SESSION");
    if (!name) return -1;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    if (s < 0 || len + 1 > sizeof a.sun_path) return -1;
    memcpy(a.sun_path + 1, name, len);
    if (connect(s, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + 1 + len) != 0) {
        close(s);
        return -1;
    }
    return s;
}

/* Sends `len` bytes with descriptor `fd` (if >= 0). */
static int send_with(int s, const void *bytes, size_t len, int fd) {
    struct iovec iov = {.iov_base = (void *)bytes, .iov_len = len};
    char control[CMSG_SPACE(sizeof(int))];
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    return sendmsg(s, &msg, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* A hello with `key` (16 bytes) and the process record in `fd`. */
static int hello(int s, const unsigned char *key, int fd) {
    unsigned char m[64] = {0};
    uint64_t w[3] = {1, (uint64_t)getpid(), 0};
    memcpy(m, w, sizeof w);
    memcpy(m + 24, key, 16);
    memcpy(m + 40, "forged", 6);
    return send_with(s, m, 46, fd);
}

/* A memfd holding a copy of `r` (sealed at its size if `seal`). */
static int copy_of(const struct region *r, size_t size, int seal) {
    int fd = memfd_create("unwind-profiler", MFD_CLOEXEC | (seal ? MFD_ALLOW_SEALING : 0));
    if (fd < 0 || ftruncate(fd, size) != 0 || write(fd, r->start, size) != (ssize_t)size) return -1;
    if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) return -1;
    return fd;
}

/* The descriptor of the profiler's own connection: the process's highest-numbered socket. */
static int own_connection(void) {
    for (int fd = 65535; fd >= 0; fd--) {
        char path[64], link[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n > 0 && strncmp(link, "socket:", 7) == 0) return fd;
    }
    return -1;
}

static int inject(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    const char *hex = getenv("UNWIND_PROFILER_SESSION_KEY");
    unsigned char key[16] = {0}, wrong[16] = {0};
    for (int i = 0; hex && i < 16 && sscanf(hex + 2 * i, "%2hhx", &key[i]) == 1; i++) {
    }
    wrong[0] = key[0] ^ 1;
    struct region r[64];
    int n = shared_regions(r, 64);
    const struct region *process = NULL;
    for (int i = 0; i < n; i++)
        if (is_kind(&r[i], PROCESS_MAGIC)) process = &r[i];
    if (!process) return 2;
    size_t size = record_size(process, PROCESS_MAGIC);
    int steps = 0;

    /* 1. A process record whose size is not sealed, shrunk once sent. */
    int s = connect_session(), fd = copy_of(process, size, 0);
    if (s >= 0 && fd >= 0 && hello(s, key, fd) == 0 && ftruncate(fd, 0) == 0) steps++;
    usleep(50000);

    /* 2. The wrong key. */
    int s2 = connect_session(), fd2 = copy_of(process, size, 1);
    if (s2 >= 0 && fd2 >= 0 && hello(s2, wrong, fd2) == 0) steps++;

    /* 3. A second process record (a sealed copy of the real one) for this running process. */
    int s3 = connect_session(), fd3 = copy_of(process, size, 1);
    if (s3 >= 0 && fd3 >= 0 && hello(s3, key, fd3) == 0) steps++;

    /* 4. A flood of modules on the process's own connection: lists of 100 modules with
     * 4000-byte paths, each list new, 20,000 modules in all. */
    int own = own_connection();
    static unsigned char m[8192];
    int sent = 0;
    for (int list = 0; list < 200 && own >= 0; list++) {
        uint64_t head[2] = {3, 100};
        if (send_with(own, head, sizeof head, -1) != 0) break;
        for (int i = 0; i < 100; i++) {
            uint64_t start = 0x100000000ull + ((uint64_t)(list * 100 + i) << 16);
            /* A message of one module: its kind, then the module's start, end, bias, file
             * offset, whether generated, build id length and path length, then the path. */
            uint64_t w[8] = {4, start, start + 0x1000, start, 0, 0, 0, 4000};
            memcpy(m, w, sizeof w);
            memset(m + 64, 'a', 4000);
            int k = snprintf((char *)m + 64, 32, "/forged/%d/%d/", list, i);
            m[64 + k] = 'a';
            if (send_with(own, m, 64 + 4000, -1) != 0) break;
            sent++;
        }
    }
    if (sent == 20000) steps++;
    /* 5. Garbage on it. */
    uint64_t garbage[4] = {0xdeadbeef, 1, 2, 3};
    if (own >= 0 && send_with(own, garbage, sizeof garbage, -1) == 0) steps++;

    printf("inject: %d of 5 steps, %d modules sent\n", steps, sent);
    honest_main_work();
    pthread_join(t, NULL);
    return steps == 5 ? 0 : 2;
}

__attribute__((noinline)) static void *after_close_work(void *arg) {
    (void)arg;
    BURN(300);
    return NULL;
}

__attribute__((noinline)) static void *after_close_burst(void *arg) {
    (void)arg;
    BURN(150);
    return NULL;
}

static int closefds(void) {
    /* As daemons do at start: every descriptor but the standard ones. */
    for (int fd = 3; fd < 65536; fd++) close(fd);
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) != 0) return 2;
    /* Six threads at once: they meet the closed connection together, and must share one new
     * one. */
    pthread_t t[6];
    for (int i = 0; i < 6; i++) pthread_create(&t[i], NULL, after_close_burst, NULL);
    void *lib = dlopen("libm.so.6", RTLD_NOW);
    for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
    if (lib) dlclose(lib);
    int unexpected = 0;
    char buf[256];
    for (int i = 0; i < 2; i++) {
        fcntl(pair[i], F_SETFL, O_NONBLOCK);
        while (recv(pair[i], buf, sizeof buf, 0) >= 0) unexpected++;
    }
    printf("closefds: %d unexpected messages\n", unexpected);
    return unexpected == 0 ? 0 : 3;
}

static int rlimit(void) {
    struct rlimit l = {4, 4};
    if (setrlimit(RLIMIT_NOFILE, &l) != 0) return 2;
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, after_close_work, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("rlimit: 4 threads ran\n");
    return 0;
}

__attribute__((noinline)) static void *short_work(void *arg) {
    (void)arg;
    BURN(50);
    return NULL;
}

__attribute__((noinline)) static void *reused_record_work(void *arg) {
    (void)arg;
    BURN(300);
    return NULL;
}

static int holes(void) {
    struct rlimit was;
    if (getrlimit(RLIMIT_NOFILE, &was) != 0) return 2;
    struct rlimit low = {4, was.rlim_max};
    pthread_t t;
    if (setrlimit(RLIMIT_NOFILE, &low) != 0 || pthread_create(&t, NULL, short_work, NULL) != 0)
        return 2;
    pthread_join(t, NULL);
    if (setrlimit(RLIMIT_NOFILE, &was) != 0) return 2;
    if (pthread_create(&t, NULL, short_work, NULL) != 0) return 2;
    pthread_join(t, NULL);
    /* record frees an exited thread's record once it has drained it (every 10 ms). */
    usleep(300000);
    if (pthread_create(&t, NULL, reused_record_work, NULL) != 0) return 2;
    pthread_join(t, NULL);
    printf("holes: 3 threads ran\n");
    return 0;
}

static volatile sig_atomic_t received, received_plain, not_own;

/* Counts its own signals (sent by raise: SI_TKILL), and any other (a profiler's timer's). */
static void on_own_signal(int sig, siginfo_t *info, void *uc) {
    (void)sig;
    (void)uc;
    if (info->si_code == SI_TKILL || info->si_code == SI_USER)
        received++;
    else
        not_own++;
}

static void on_own_signal_plain(int sig) {
    (void)sig;
    received_plain++;
}

static int handler(const char *name) {
    int sig = strcmp(name, "PROF") == 0 ? SIGPROF : SIGURG;
    struct sigaction sa = {0};
    sa.sa_sigaction = on_own_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) return 2;
    int raised = 0;
    for (int i = 0; i < 20; i++) {
        BURN(20);
        raise(sig);
        raised++;
    }
    /* Then through signal(), which the C library does not route through sigaction. */
    if (signal(sig, on_own_signal_plain) == SIG_ERR) return 2;
    int raised_plain = 0;
    for (int i = 0; i < 10; i++) {
        BURN(20);
        raise(sig);
        raised_plain++;
    }
    /* A standard signal raised while one of the same number is pending (a timer's) is merged
     * into it by the kernel: a few of its own may be lost, none of the profiler's may come. */
    printf("handler: raised %d, received %d, not its own %d; through signal(): raised %d, "
           "received %d\n",
           raised, (int)received, (int)not_own, raised_plain, (int)received_plain);
    return not_own == 0 && received <= raised && received >= raised - 3 &&
                   received_plain <= raised_plain && received_plain >= raised_plain - 3
               ? 0
               : 3;
}

#if defined(__x86_64__)
/* mov rcx, rdi; 1: dec rcx; jnz 1b; ret */
static const unsigned char code[] = {0x48, 0x89, 0xf9, 0x48, 0xff, 0xc9, 0x75, 0xfb, 0xc3};
#endif

/* Runs a counting loop copied into an executable page (code made at run time, which only a perf
 * map or jitdump names) for `ms` of CPU time. */
static int jit_spin(double ms) {
#if defined(__x86_64__)
    static unsigned char *page;
    if (!page) {
        page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) return -1;
        memcpy(page, code, sizeof code);
        if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) return -1;
    }
    void (*spin)(unsigned long) = (void (*)(unsigned long))(void *)page;
    double until = cpu_ms() + ms;
    while (cpu_ms() < until) spin(1000000);
    return 0;
#else
    (void)ms;
    return -1;
#endif
}

static int fifo(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    unlink(path);
    if (mkfifo(path, 0600) != 0) return 2;
    snprintf(path, sizeof path, "/tmp/jit-%d.dump", (int)getpid());
    unlink(path);
    if (symlink("/etc/passwd", path) != 0) return 2;
    if (jit_spin(300) != 0) return 2;
    printf("fifo: pid %d\n", (int)getpid());
    return 0;
}

static int wait_for(const char *file) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    struct stat st;
    printf("wait: pid %d\n", (int)getpid());
    for (int i = 0; i < 3000 && stat(file, &st) != 0; i++) {
        BURN(1);
        usleep(2000);
    }
    honest_main_work();
    if (jit_spin(200) != 0) return 2;
    pthread_join(t, NULL);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "huge") == 0 || strcmp(what, "scribble") == 0 ||
        strcmp(what, "truncate") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, worker, NULL);
        int rc = strcmp(what, "huge") == 0       ? huge()
                 : strcmp(what, "scribble") == 0 ? scribble()
                                                 : truncate_shared();
        pthread_join(t, NULL);
        return rc;
    }
    if (strcmp(what, "inject") == 0) return inject();
    if (strcmp(what, "closefds") == 0) return closefds();
    if (strcmp(what, "rlimit") == 0) return rlimit();
    if (strcmp(what, "holes") == 0) return holes();
    if (strcmp(what, "handler") == 0) return handler(argc > 2 ? argv[2] : "URG");
    if (strcmp(what, "fifo") == 0) return fifo();
    if (strcmp(what, "wait") == 0 && argc > 2) return wait_for(argv[2]);
    fprintf(stderr, "usage: hostile huge|scribble|truncate|inject|closefds|rlimit|handler [SIG]|fifo|wait FILE\n");
    return 2;
}
