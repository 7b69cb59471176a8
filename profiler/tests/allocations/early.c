/* A library the hazards program links: its constructor allocates before the preload library's
 * constructor has run (the loader initializes a program's libraries before the preloaded one),
 * and keeps the blocks for the program to free later. */
#include <stdlib.h>
#include <string.h>

void *early_blocks[64];

__attribute__((constructor)) static void allocate_early(void) {
    for (int i = 0; i < 64; i++) {
        early_blocks[i] = malloc(4096 + i);
        memset(early_blocks[i], i, 4096 + i);
    }
    char *s = strdup("allocated before the profiler started");
    free(s);
}
