/* malloc/free pairs of 16 to 143 bytes, N of them (argument, default 1,000,000): the
 * allocation hooks' cost per pair under callgrind (BENCHMARKS.md, "Allocation profiling cost"). */
#include <stdlib.h>
#include <stdio.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    volatile unsigned long sink = 0;
    for (long i = 0; i < n; i++) {
        char *p = malloc(16 + (i & 127));
        p[0] = 1;
        sink += (unsigned long)p;
        free(p);
    }
    printf("%lu\n", sink & 1);
    return 0;
}
