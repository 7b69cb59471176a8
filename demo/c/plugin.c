/* libdemo_plugin.so: dlopened by the demo workload after it has started (never linked), its
 * functions found with dlsym. Built by build.rs with `cc -shared -fPIC -O2 -g`. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

/* The mandelbrot phase's hot leaf: escape-time iterations over a size x size tile whose corner
 * is (x0, y0), `step` apart. Returns the sum of the iteration counts. No helper, no libc call. */
uint64_t plugin_mandelbrot(double x0, double y0, double step, int size, int max_iter)
{
    uint64_t total = 0;
    for (int py = 0; py < size; py++) {
        double ci = y0 + py * step;
        for (int px = 0; px < size; px++) {
            double cr = x0 + px * step;
            double zr = 0.0, zi = 0.0;
            int n = 0;
            while (n < max_iter && zr * zr + zi * zi <= 4.0) {
                double t = zr * zr - zi * zi + cr;
                zi = 2.0 * zr * zi + ci;
                zr = t;
                n++;
            }
            total += (uint64_t)n;
        }
    }
    return total;
}

struct plugin_thread {
    void (*entry)(void *);
    void *arg;
};

/* The start routine of the thread made by plugin_thread_start: names the thread, then runs the
 * caller's entry (Rust code, from this thread made by C). */
static void *plugin_thread_main(void *p)
{
    struct plugin_thread job = *(struct plugin_thread *)p;
    free(p);
    pthread_setname_np(pthread_self(), "plugin-thread");
    job.entry(job.arg);
    return NULL;
}

/* Creates a thread with pthread_create that runs entry(arg); stores its id in *thread.
 * Returns 0 or an error number. */
int plugin_thread_start(void (*entry)(void *), void *arg, uint64_t *thread)
{
    struct plugin_thread *job = malloc(sizeof *job);
    if (job == NULL)
        return -1;
    job->entry = entry;
    job->arg = arg;
    pthread_t tid;
    int err = pthread_create(&tid, NULL, plugin_thread_main, job);
    if (err != 0) {
        free(job);
        return err;
    }
    *thread = (uint64_t)tid;
    return 0;
}

/* Waits for a thread made by plugin_thread_start. Returns 0 or an error number. */
int plugin_thread_join(uint64_t thread)
{
    return pthread_join((pthread_t)thread, NULL);
}
