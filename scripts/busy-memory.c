/* The memory-bound load of `scripts/test --busy`: reads and writes a 256 MiB buffer, one cache
 * line at a time, until killed, so that the tests beside it run with caches and memory
 * bandwidth taken, as on a shared machine. */
#include <stdlib.h>

#define SIZE (256u << 20)
#define LINE 64u

int main(void) {
    volatile unsigned char *buf = malloc(SIZE);
    if (!buf)
        return 1;
    for (unsigned char round = 0;; round++)
        for (size_t i = 0; i < SIZE; i += LINE)
            buf[i] = (unsigned char)(buf[i] + round);
}
