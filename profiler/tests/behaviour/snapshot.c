/* Snapshots on the signal given to --snapshot-signal (SIGUSR2 here), driven by the test over
 * stdin and stdout: burns in before_snapshot, raise()s SIGUSR2 and waits for a line on stdin;
 * burns in middle_phase, says "burned" and waits again (the test sends SIGUSR2 itself); burns in
 * after_snapshot and returns 0. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "burn.h"

__attribute__((noinline)) static void before_snapshot(void) { BURN(300); }
__attribute__((noinline)) static void middle_phase(void) { BURN(300); }
__attribute__((noinline)) static void after_snapshot(void) { BURN(300); }

static void wait_for_line(void) {
    char line[64];
    if (!fgets(line, sizeof line, stdin)) _exit(9);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("pid %d\n", (int)getpid());
    before_snapshot();
    raise(SIGUSR2);
    printf("raised\n");
    wait_for_line();
    middle_phase();
    printf("burned\n");
    wait_for_line();
    after_snapshot();
    printf("done\n");
    return 0;
}
