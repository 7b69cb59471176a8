/* Spends its CPU time 700 calls deep: deeper than the old 256-frame limit, as a Python 3.12
 * service under -X perf is (three native frames a Python call). */
#include "burn.h"

/* Recurses DEPTH times, then burns; the volatile sum keeps each call from being a tail call. */
static volatile int sink;
__attribute__((noinline)) static int descend(int depth) {
    if (depth == 0) {
        BURN(600);
        return 0;
    }
    int r = descend(depth - 1);
    sink += r;
    return r + 1;
}

int main(void) {
    return descend(700) == 700 ? 0 : 1;
}
