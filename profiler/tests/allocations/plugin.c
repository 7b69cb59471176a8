/* A library the hazards program dlopens and dlcloses again and again while its threads
 * allocate: the loader's own allocations, and a constructor that allocates. */
#include <stdlib.h>
#include <string.h>

static char *table;

__attribute__((constructor)) static void plugin_start(void) {
    table = calloc(1, 1 << 16);
}

__attribute__((destructor)) static void plugin_end(void) {
    free(table);
}

size_t plugin_work(size_t n) {
    char *p = malloc(n);
    memset(p, 7, n);
    size_t s = (size_t)p[n / 2] + (size_t)table[0];
    free(p);
    return s;
}
