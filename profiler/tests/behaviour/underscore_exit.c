/* _exit(4) after some work: no atexit handler runs, so nothing is written; the command must
 * still end, with status 4. */
#include <unistd.h>

#include "burn.h"

__attribute__((noinline)) static void main_work(void) { BURN(200); }

int main(void) {
    main_work();
    _exit(4);
}
