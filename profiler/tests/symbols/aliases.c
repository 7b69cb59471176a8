/* Time in glibc functions that have several names (malloc is also __libc_malloc and, inside
 * glibc, __GI___libc_malloc; read is __libc_read and __read; open is __libc_open64 and open64):
 * profiler/tests/symbol_files.rs checks that profiles give the public name, as perf does. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char buffer[1 << 20];

int main(void) {
    unsigned long sum = 0;
    for (int round = 0; round < 4000; round++) {
        void *blocks[256];
        for (int i = 0; i < 256; i++)
            blocks[i] = malloc(16 + (size_t)(i * 97 + round) % 4000);
        for (int i = 0; i < 256; i++)
            free(blocks[i]);
        int fd = open("/dev/zero", O_RDONLY);
        if (fd < 0)
            return 1;
        for (int i = 0; i < 4; i++)
            sum += (unsigned long)read(fd, buffer, sizeof buffer);
        close(fd);
        for (int i = 0; i < 20; i++)
            close(open("/dev/null", O_RDONLY));
    }
    printf("%lu\n", sum & 1);
    return 0;
}
