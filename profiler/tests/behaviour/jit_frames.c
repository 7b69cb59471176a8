/* Frames of code made at run time between frames of the program's own, as a JIT compiler's
 * are: two functions written into an executable page (x86_64 machine code), each calling back
 * into a C function that burns CPU time, described as JITs describe theirs: jit_with_fp in
 * /tmp/perf-PID.map, jit_without_fp in a jitdump file, jit-PID.dump, written in the working
 * directory and mapped executable for profilers to find (as node --perf-prof does).
 *
 *   main -> via_fp -> jit_with_fp (push rbp; mov rbp, rsp: a frame pointer, as V8's code and
 *                                  the JVM's with -XX:+PreserveFramePointer keep) -> burn_fp
 *   main -> via_no_fp -> jit_without_fp (sub rsp, 8: no frame pointer, no unwind table)
 *                                  -> burn_no_fp
 *
 * Under `record`, a walk from burn_fp crosses jit_with_fp by its frame pointer and reaches main;
 * a walk from burn_no_fp cannot know where jit_without_fp keeps its return address: it stops
 * there, without a frame it cannot prove (the test checks that no stack holds a wrong caller).
 * The program is built without frame pointers, as distributions build by default, so that the
 * C functions' rbp is no frame either. The map and the dump are left for `record`, which reads
 * them after the process has ended, as perf does. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "burn.h"

typedef void (*callback)(int);
typedef void (*jit_fn)(callback, int);

/* jit_with_fp(fn, arg): push rbp; mov rbp, rsp; mov rax, rdi; mov edi, esi; call rax;
 * pop rbp; ret */
static const unsigned char with_fp[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf8, 0x89,
                                        0xf7, 0xff, 0xd0, 0x5d, 0xc3};
/* jit_without_fp(fn, arg): sub rsp, 8; mov rax, rdi; mov edi, esi; call rax; add rsp, 8; ret */
static const unsigned char without_fp[] = {0x48, 0x83, 0xec, 0x08, 0x48, 0x89, 0xf8, 0x89,
                                           0xf7, 0xff, 0xd0, 0x48, 0x83, 0xc4, 0x08, 0xc3};

static jit_fn jit_with_fp, jit_without_fp;

__attribute__((noinline)) void burn_fp(int ms) { BURN(ms); }
__attribute__((noinline)) void burn_no_fp(int ms) { BURN(ms); }

/* Calls through a volatile pointer: no tail call, no inlining. */
__attribute__((noinline)) void via_fp(int ms) {
    jit_fn volatile f = jit_with_fp;
    f(burn_fp, ms);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void via_no_fp(int ms) {
    jit_fn volatile f = jit_without_fp;
    f(burn_no_fp, ms);
    __asm__ volatile("" ::: "memory");
}

/* perf's jitdump format (tools/perf/Documentation/jitdump-specification.txt), version 1. */
struct jitdump_header {
    uint32_t magic, version, total_size, elf_mach, pad1, pid;
    uint64_t timestamp, flags;
};
struct jitdump_code_load {
    uint32_t id, total_size;
    uint64_t timestamp;
    uint32_t pid, tid;
    uint64_t vma, code_addr, code_size, code_index;
};

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Writes jit-PID.dump in the working directory with a code-load record for `code` as `name`,
 * and maps its first page executable, the marker perf looks for. */
static int write_jitdump(const unsigned char *code, size_t size, const char *name) {
    char path[64];
    snprintf(path, sizeof path, "jit-%d.dump", (int)getpid());
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) return -1;
    struct jitdump_header h = {0x4A695444, 1, sizeof h, 62 /* EM_X86_64 */, 0, (uint32_t)getpid(),
                               now_ns(), 0};
    struct jitdump_code_load r = {0, 0, now_ns(), (uint32_t)getpid(), (uint32_t)syscall(SYS_gettid),
                                  (uint64_t)(uintptr_t)code, (uint64_t)(uintptr_t)code, size, 0};
    r.total_size = (uint32_t)(sizeof r + strlen(name) + 1 + size);
    if (write(fd, &h, sizeof h) != sizeof h || write(fd, &r, sizeof r) != sizeof r ||
        write(fd, name, strlen(name) + 1) != (ssize_t)(strlen(name) + 1) ||
        write(fd, code, size) != (ssize_t)size)
        return -1;
    if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) return -1;
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 1;
    memcpy(page, with_fp, sizeof with_fp);
    memcpy(page + 64, without_fp, sizeof without_fp);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) return 1;
    jit_with_fp = (jit_fn)(void *)page;
    jit_without_fp = (jit_fn)(void *)(page + 64);
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *map = fopen(path, "w");
    if (!map) return 1;
    fprintf(map, "%lx %zx jit_with_fp\n", (unsigned long)page, sizeof with_fp);
    fclose(map);
    if (write_jitdump(page + 64, sizeof without_fp, "jit_without_fp") != 0) return 1;
    /* Short calls, alternated: each JIT function runs often, briefly. */
    for (int i = 0; i < 40; i++) {
        via_fp(10);
        via_no_fp(10);
    }
    printf("pid %d\n", (int)getpid());
    return 0;
}
