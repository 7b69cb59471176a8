/* _exit(4) after some work: no atexit handler runs; under `record` the profile is kept all the
 * same, and the command ends with status 4. */
#include <unistd.h>

#include "burn.h"

__attribute__((noinline)) static void main_work(void) { BURN(200); }

int main(void) {
    main_work();
    _exit(4);
}
