/* Allocations of known sizes along known call chains, for the allocation profiler's test
 * (profiler/tests/allocations.rs). Each chain allocates a fixed number of bytes with its own
 * mix of sizes and calls; the program prints what each chain allocated and what it keeps live
 * to the end, as lines "CHAIN alloc BYTES live BYTES", which the test compares with the heap
 * profile's estimates. Argument: the MiB each chain allocates (default 800). Last, the line
 * "timers N": the CPU timers the process holds at the end (perf events among its descriptors,
 * POSIX timers in /proc/self/timers), which a profiler of allocations alone never makes. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MB (1024UL * 1024UL)
#define NOINLINE __attribute__((noinline))

static unsigned long chain_mb = 800;
/* Blocks kept live to the end, and a place to keep pointers the compiler cannot drop. */
static void *kept[1 << 16];
static size_t nkept;
static volatile unsigned long sink;

/* Writes a whole block, as a program that uses its memory does (untouched blocks would make
 * allocation far faster than any real program's). */
static void touch(void *p, size_t size) {
    memset(p, 1, size);
    sink += ((volatile char *)p)[size - 1];
}

static void report(const char *chain, unsigned long alloc, unsigned long live) {
    printf("%s alloc %lu live %lu\n", chain, alloc, live);
}

/* Small-object churn: 16- to 256-byte nodes, freed at once. */
NOINLINE static void *make_node(size_t size) {
    char *p = malloc(size);
    touch(p, size);
    return p;
}

NOINLINE static void churn(void) {
    unsigned long total = 0, target = chain_mb * MB;
    size_t size = 16;
    while (total < target) {
        void *p = make_node(size);
        sink += (unsigned long)p;
        free(p);
        total += size;
        size = size == 256 ? 16 : size + 16;
    }
    report("churn", total, 0);
}

/* calloc of zeroed tables of 2 KiB to 64 KiB, freed. */
NOINLINE static void zeroed_tables(void) {
    unsigned long total = 0, target = chain_mb * MB;
    size_t n = 1;
    while (total < target) {
        size_t count = 256 * n, each = 8;
        char *p = calloc(count, each);
        touch(p, count * each);
        free(p);
        total += count * each;
        n = n == 32 ? 1 : n + 1;
    }
    report("calloc", total, 0);
}

/* A buffer grown by realloc from 1 KiB to 1 MiB, again and again: each call counts its whole
 * new size. */
NOINLINE static void grow_buffer(void) {
    unsigned long total = 0, target = chain_mb * MB;
    while (total < target) {
        char *p = NULL;
        for (size_t size = 1024; size <= MB; size *= 2) {
            p = realloc(p, size);
            touch(p, size);
            total += size;
        }
        free(p);
    }
    report("realloc", total, 0);
}

/* Aligned blocks: posix_memalign of 4 KiB pages, aligned_alloc of 16 KiB at 4 KiB. */
NOINLINE static void aligned_blocks(void) {
    unsigned long total = 0, target = chain_mb * MB;
    int which = 0;
    while (total < target) {
        void *p = NULL;
        size_t size;
        if (which) {
            size = 16384;
            p = aligned_alloc(4096, size);
        } else {
            size = 4096;
            if (posix_memalign(&p, 64, size) != 0)
                abort();
        }
        touch(p, size);
        free(p);
        total += size;
        which = !which;
    }
    report("aligned", total, 0);
}

/* Blocks of 64 KiB to 1 MiB kept live to the end. */
NOINLINE static void keep_live(void) {
    unsigned long total = 0, target = chain_mb * MB;
    size_t size = 64 * 1024;
    while (total < target && nkept < sizeof kept / sizeof kept[0]) {
        char *p = malloc(size);
        touch(p, size);
        kept[nkept++] = p;
        total += size;
        size = size >= MB ? 64 * 1024 : size * 2;
    }
    report("kept", total, total);
}

/* A leak through strdup: 1,000-byte strings never freed. */
NOINLINE static void leak_strings(void) {
    static char text[1000];
    memset(text, 'x', sizeof text - 1);
    unsigned long total = 0, target = chain_mb * MB;
    while (total < target) {
        char *s = strdup(text);
        sink += (unsigned long)s;
        total += sizeof text;
    }
    report("strdup", total, total);
}

/* The CPU timers this process holds: perf events and POSIX timers. */
static int timers(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[64], target[64];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len > 0) {
            target[len] = 0;
            n += strstr(target, "perf_event") != NULL;
        }
    }
    if (d)
        closedir(d);
    FILE *f = fopen("/proc/self/timers", "r");
    char line[128];
    while (f && fgets(line, sizeof line, f))
        n += strncmp(line, "ID:", 3) == 0;
    if (f)
        fclose(f);
    return n;
}

int main(int argc, char **argv) {
    if (argc > 1)
        chain_mb = strtoul(argv[1], NULL, 10);
    churn();
    zeroed_tables();
    grow_buffer();
    aligned_blocks();
    keep_live();
    leak_strings();
    printf("timers %d\n", timers());
    return 0;
}
