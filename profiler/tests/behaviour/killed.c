/* Killed by SIGKILL after some work: nothing of the process runs at its end; under `record` the
 * profile is kept all the same, and the command ends with status 128+9. */
#include <signal.h>
#include <unistd.h>

#include "burn.h"

__attribute__((noinline)) static void work_before_kill(void) { BURN(300); }

int main(void) {
    work_before_kill();
    kill(getpid(), SIGKILL);
    pause();
    return 0;
}
