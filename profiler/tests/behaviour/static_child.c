/* Forks and execs argv[1] (this program again, built dynamically or statically), which burns
 * 800 ms of CPU time, while the parent burns 300 ms in `parent_burn`. Under `record` a static
 * child never joins the profile (the loader ignores LD_PRELOAD for it): `record` must say how
 * much CPU time went unprofiled. Usage: static_child CHILD */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "burn.h"
__attribute__((noinline)) static void parent_burn(void) { BURN(300); }
int main(int argc, char **argv) {
    if (argc > 2) { BURN(atoi(argv[2])); return 0; }  /* the child */
    pid_t pid = fork();
    if (pid == 0) { execl(argv[1], argv[1], argv[1], "800", (char *)0); _exit(127); }
    parent_burn();
    int status; waitpid(pid, &status, 0);
    return 0;
}
