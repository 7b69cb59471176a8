/* The end of main: main burns CPU and joins a thread that burns too, then returns 5. The
 * outputs must be written and the status passed on. */
#include <pthread.h>

#include "burn.h"

__attribute__((noinline)) static void main_work(void) { BURN(300); }
__attribute__((noinline)) static void thread_work(void) { BURN(300); }

static void *worker(void *arg) {
    (void)arg;
    thread_work();
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    main_work();
    pthread_join(t, NULL);
    return 5;
}
