/* Loads and unloads two libraries in a loop (argv[1] times, default 2000), from `churn_loop`,
 * which calls nothing else, then burns CPU in `burn`. Under `record` every load and unload
 * rebuilds the profiler's tables inside the program's `dlopen` and `dlclose`: the profile must
 * show that work as the profiler's, under the program's call, never as a function the program
 * calls itself. */
#include <dlfcn.h>
#include <stdlib.h>

#include "burn.h"

__attribute__((noinline)) static int churn_loop(int n) {
    for (int i = 0; i < n; i++) {
        void *m = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
        void *z = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!m || !z) return 1;
        dlclose(z);
        dlclose(m);
    }
    return 0;
}

__attribute__((noinline)) static void burn(void) { BURN(200); }

int main(int argc, char **argv) {
    int rc = churn_loop(argc > 1 ? atoi(argv[1]) : 2000);
    burn();
    return rc;
}
