/* Time in glibc's own code: qsort's merge sort (static functions only a symbol table names),
 * rand and snprintf, called from main. profiler/tests/common/cross.rs checks how record names
 * the library frames of this program run under qemu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int main(void) {
    long sum = 0;
    int n = 100000;
    int *v = malloc(n * sizeof *v);
    if (!v)
        return 1;
    for (int round = 0; round < 12; round++) {
        for (int i = 0; i < n; i++)
            v[i] = rand();
        qsort(v, n, sizeof *v, compare);
        char text[32];
        for (int i = 0; i < 2000; i++) {
            snprintf(text, sizeof text, "%d", v[i]);
            sum += (long)strlen(text);
        }
    }
    free(v);
    printf("%ld\n", sum);
    return 0;
}
