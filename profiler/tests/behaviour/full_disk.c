/* Burns 500 ms of CPU, then, given a number of bytes, lowers its parent's (record's) file size
 * limit to it, and exits 0: the disk is full for record when it writes the profile, and not for
 * this program, whose profiler memory (memfds) is sized under its own, unchanged limit. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "burn.h"

__attribute__((noinline)) static void work_before_the_disk_fills(void) { BURN(500); }

int main(int argc, char **argv) {
    work_before_the_disk_fills();
    if (argc < 2) return 0;
    struct rlimit limit;
    if (prlimit(getppid(), RLIMIT_FSIZE, NULL, &limit) != 0) {
        perror("prlimit");
        return 1;
    }
    limit.rlim_cur = strtoul(argv[1], NULL, 10);
    if (prlimit(getppid(), RLIMIT_FSIZE, &limit, NULL) != 0) {
        perror("prlimit");
        return 1;
    }
    return 0;
}
