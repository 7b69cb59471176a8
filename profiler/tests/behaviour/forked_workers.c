/* Worker processes forked without exec, as Python's multiprocessing and pre-forking servers
 * make them: the parent starts a thread (so that it forks while multi-threaded), forks three
 * workers (each works in worker_work; the first forks a worker of its own, working in
 * grandchild_work), and works in parent_work while they run. Workers end with _exit, exit and
 * a return from main's branch, as such programs do. Under `record`, one profile holds the
 * five processes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "burn.h"

__attribute__((noinline)) static void parent_work(void) { BURN(200); }
__attribute__((noinline)) static void thread_work(void) { BURN(200); }
__attribute__((noinline)) static void worker_work(void) { BURN(200); }
__attribute__((noinline)) static void grandchild_work(void) { BURN(200); }

static void *thread_main(void *arg) {
    (void)arg;
    thread_work();
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_t thread;
    pthread_create(&thread, NULL, thread_main, NULL);
    pid_t workers[3];
    for (int i = 0; i < 3; i++) {
        workers[i] = fork();
        if (workers[i] == 0) {
            pid_t grandchild = -1;
            if (i == 0) {
                grandchild = fork();
                if (grandchild == 0) {
                    grandchild_work();
                    _exit(0);
                }
            }
            worker_work();
            if (grandchild > 0) waitpid(grandchild, NULL, 0);
            printf("worker %d done\n", i);
            if (i == 1) exit(0);
            if (i == 2) _exit(0);
            return 0;
        }
    }
    parent_work();
    pthread_join(thread, NULL);
    for (int i = 0; i < 3; i++) waitpid(workers[i], NULL, 0);
    printf("parent done\n");
    return 0;
}
