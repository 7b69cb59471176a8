/* Allocation sampling against what programs do around their allocator: blocks allocated
 * before the profiler started (libearly's constructor) and freed later, threads that free
 * what other threads allocated, a library dlopened and dlclosed while threads allocate (its
 * constructor allocates), and a fork whose child allocates, keeps some, and ends with _exit. Prints
 * "child kept BYTES" (from the child) and "hazards ok" at the end. Built with -lpthread -ldl
 * and linked with libearly.so; argument: the plugin's path. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

extern void *early_blocks[64];

/* A queue of blocks from the producers to the consumer, which frees them. */
#define QUEUE 4096
static void *queue[QUEUE];
static size_t head, tail;
static int producers_done;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static volatile unsigned long sink;
static const char *plugin_path;

NOINLINE static void *produce(void *arg) {
    unsigned long seed = (unsigned long)arg;
    for (int i = 0; i < 200000; i++) {
        seed = seed * 6364136223846793005UL + 1442695040888963407UL;
        size_t size = 64 + (seed >> 33) % 8192;
        char *p = malloc(size);
        memset(p, 1, size);
        if (i % 2) {
            free(p);
            continue;
        }
        pthread_mutex_lock(&lock);
        while (tail - head == QUEUE)
            pthread_cond_wait(&ready, &lock);
        queue[tail++ % QUEUE] = p;
        pthread_cond_broadcast(&ready);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

NOINLINE static void *consume(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (head == tail && !producers_done)
            pthread_cond_wait(&ready, &lock);
        if (head == tail && producers_done) {
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        void *p = queue[head++ % QUEUE];
        pthread_cond_broadcast(&ready);
        pthread_mutex_unlock(&lock);
        free(p);
    }
}

NOINLINE static void *load_plugins(void *arg) {
    (void)arg;
    for (int i = 0; i < 40; i++) {
        void *h = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            exit(1);
        }
        size_t (*work)(size_t) = (size_t (*)(size_t))dlsym(h, "plugin_work");
        for (int j = 0; j < 100; j++)
            sink += work(1 << 16);
        dlclose(h);
    }
    return NULL;
}

NOINLINE static void child_work(void) {
    unsigned long kept = 0;
    for (int i = 0; i < 400; i++) {
        char *p = malloc(256 * 1024);
        memset(p, 3, 256 * 1024);
        kept += 256 * 1024;
        sink += (unsigned long)p;
    }
    printf("child kept %lu\n", kept);
    fflush(stdout);
}

int main(int argc, char **argv) {
    plugin_path = argc > 1 ? argv[1] : "./libplugin.so";
    pthread_t producers[3], consumer, loader;
    pthread_create(&consumer, NULL, consume, NULL);
    pthread_create(&loader, NULL, load_plugins, NULL);
    for (int i = 0; i < 3; i++)
        pthread_create(&producers[i], NULL, produce, (void *)(unsigned long)(i + 1));
    pid_t child = fork();
    if (child == 0) {
        child_work();
        /* Not exit: another thread of the parent may have held the C library's lock of exit
         * handlers at the fork (its dlclose does), and the child has only this thread. */
        _exit(0);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(producers[i], NULL);
    pthread_mutex_lock(&lock);
    producers_done = 1;
    pthread_cond_broadcast(&ready);
    pthread_mutex_unlock(&lock);
    pthread_join(consumer, NULL);
    pthread_join(loader, NULL);
    int status = 0;
    waitpid(child, &status, 0);
    for (int i = 0; i < 64; i++)
        free(early_blocks[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "child failed: %d\n", status);
        return 1;
    }
    printf("hazards ok\n");
    return 0;
}
