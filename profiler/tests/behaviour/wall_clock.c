/* Wall clock against CPU time: main burns 400 ms of CPU in busy() while another thread sleeps in
 * sleepy(), 1 ms nanosleeps until main is done. Sampling wall-clock time, sleepy gets about as
 * many samples as busy; sampling CPU time, almost none. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "burn.h"

static atomic_int stop;

__attribute__((noinline)) static void sleepy(void) {
    while (!atomic_load(&stop)) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL); /* EINTR on a timer signal: the loop goes on */
    }
}

__attribute__((noinline)) static void busy(void) { BURN(400); }

static void *sleeper(void *arg) {
    (void)arg;
    sleepy();
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    busy();
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    return 0;
}
