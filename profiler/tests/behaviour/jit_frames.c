/* Frames of code made at run time between frames of the program's own, as a JIT compiler's
 * are: two functions written into an executable page (x86_64 machine code), each calling back
 * into a C function that burns CPU time, described as JITs describe theirs: jit_with_fp in
 * /tmp/perf-PID.map, jit_without_fp in a jitdump file, jit-PID.dump, written in the working
 * directory and mapped executable for profilers to find (as node --perf-prof does).
 *
 *   main -> via_fp -> jit_with_fp (push rbp; mov rbp, rsp: a frame pointer, as V8's code and
 *                                  the JVM's with -XX:+PreserveFramePointer keep) -> burn_fp
 *   main -> via_no_fp -> jit_without_fp (sub rsp, 8: no frame pointer; its unwind table in
 *                                  the jitdump file) -> burn_no_fp
 *
 * Under `record`, a walk from burn_fp crosses jit_with_fp by its frame pointer and reaches main;
 * a walk from burn_no_fp crosses jit_without_fp by the rules of its jitdump record. With
 * UNWIND_TEST_NO_UNWINDING_INFO set, the record is left out: the walk cannot know where
 * jit_without_fp keeps its return address and stops there, without a frame it cannot prove
 * (the test checks that no stack holds a wrong caller).
 * The program is built without frame pointers, as distributions build by default, so that the
 * C functions' rbp is no frame either. The map and the dump are left for `record`, which reads
 * them after the process has ended, as perf does. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
struct jitdump_unwinding_info {
    uint32_t id, total_size;
    uint64_t timestamp;
    uint64_t unwinding_size, eh_frame_hdr_size, mapped_size;
};

/* jit_without_fp's .eh_frame, meant to lie 16 bytes after its code (the next multiple of 16
 * after its 16 bytes), as CPython writes its trampolines': a CIE (code alignment 1, data
 * alignment -8, return address r16, FDE pointers pc-relative sdata4; CFA rsp+8, return address
 * at CFA-8) and an FDE for 16 bytes from 0x30 before the FDE's pc_begin field (at 0x20): CFA
 * rsp+16 after `sub $8, %rsp` (4 bytes), rsp+8 again at the `ret` (11 bytes on). Then its
 * .eh_frame_hdr: version 1, encodings, a pointer to .eh_frame, one FDE. */
static const unsigned char eh_frame[] = {
    0x14, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 1, 0x1b, 0x0c, 7, 8, 0x90, 1, 0, 0,
    0x14, 0, 0, 0, 0x1c, 0, 0, 0, 0xd0, 0xff, 0xff, 0xff, 16, 0, 0, 0, 0, 0x44, 0x0e, 0x10, 0x4b,
    0x0e, 0x08, 0};
static const unsigned char eh_frame_hdr[] = {1, 0x1b, 3, 0x3b, 0xcc, 0xff, 0xff, 0xff, 1, 0, 0, 0,
                                             0xc0, 0xff, 0xff, 0xff, 0xe8, 0xff, 0xff, 0xff};

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Writes jit-PID.dump in the working directory with an unwinding record (jit_without_fp's
 * tables) and a code-load record for `code` as `name`, and maps its first page executable, the
 * marker perf looks for. */
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
    struct jitdump_unwinding_info u = {4, 0, now_ns(), sizeof eh_frame + sizeof eh_frame_hdr,
                                       sizeof eh_frame_hdr, 0};
    u.total_size = (uint32_t)(sizeof u + u.unwinding_size);
    u.mapped_size = (u.unwinding_size + 15) & ~15ull;
    if (write(fd, &h, sizeof h) != sizeof h) return -1;
    if (!getenv("UNWIND_TEST_NO_UNWINDING_INFO") &&
        (write(fd, &u, sizeof u) != sizeof u ||
         write(fd, eh_frame, sizeof eh_frame) != sizeof eh_frame ||
         write(fd, eh_frame_hdr, sizeof eh_frame_hdr) != sizeof eh_frame_hdr))
        return -1;
    if (write(fd, &r, sizeof r) != sizeof r ||
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
