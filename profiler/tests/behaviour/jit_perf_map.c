/* Code made at run time, as a JIT compiler makes it, and described in /tmp/perf-PID.map as node
 * --perf-basic-prof and the JVM's perf map agents describe theirs: a counting loop copied into
 * an executable page, called until it has used 500 ms of CPU. Under `record`, the samples in it
 * are named by the map ("jit_spin"), not by their address. The map is left for `record`, which
 * reads it after the process has ended, as perf does. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "burn.h"

#if defined(__x86_64__)
/* mov rcx, rdi; 1: dec rcx; jnz 1b; ret */
static const unsigned char code[] = {0x48, 0x89, 0xf9, 0x48, 0xff, 0xc9, 0x75, 0xfb, 0xc3};
#elif defined(__arm__) && !defined(__thumb__)
/* 1: subs r0, r0, #1; bne 1b; bx lr (ARM state, little-endian) */
static const unsigned char code[] = {0x01, 0x00, 0x50, 0xe2, 0xfd, 0xff, 0xff, 0x1a,
                                     0x1e, 0xff, 0x2f, 0xe1};
#else
#error "no machine code for this architecture"
#endif

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 1;
    memcpy(page, code, sizeof code);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) return 1;
    __builtin___clear_cache((char *)page, (char *)page + sizeof code);
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *map = fopen(path, "w");
    if (!map) return 1;
    fprintf(map, "%lx %zx jit_spin\n", (unsigned long)page, sizeof code);
    fclose(map);
    void (*spin)(unsigned long) = (void (*)(unsigned long))(void *)page;
    double until = cpu_ms() + 500;
    while (cpu_ms() < until) spin(1000000);
    printf("pid %d\n", (int)getpid());
    return 0;
}
