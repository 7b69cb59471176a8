/* Several processes of one run: the program works, forks a child that execs this program again
 * ("child": works in child_work), waits for it, then execs itself ("last": works in last_work).
 * Under `record`, one profile holds the three program images. Prints whether the C library still
 * sees the process as single-threaded (the profiler must not start a thread in it). */
#include <stdio.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <sys/wait.h>
#include <unistd.h>

#include "burn.h"

__attribute__((noinline)) static void parent_work(void) { BURN(200); }
__attribute__((noinline)) static void child_work(void) { BURN(200); }
__attribute__((noinline)) static void last_work(void) { BURN(200); }

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        child_work();
        printf("child single-threaded %d\n", (int)__libc_single_threaded);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "last") == 0) {
        last_work();
        printf("last single-threaded %d\n", (int)__libc_single_threaded);
        return 0;
    }
    parent_work();
    printf("parent single-threaded %d\n", (int)__libc_single_threaded);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "child", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    execl("/proc/self/exe", argv[0], "last", (char *)NULL);
    return 127;
}
