/* The blocking program of profiler/tests/common/cross.rs: each thread spends the run blocked in one of
 * the C library's blocking calls, where a wall-clock profile of a real program spends most of its
 * samples. Each thread is `X_thread` (named "X") calling `X_wait`, which blocks in the call:
 *
 *   sleep      nanosleep                       clocksleep  clock_nanosleep
 *   condwait   pthread_cond_wait (a futex)     mutex       pthread_mutex_lock (a futex)
 *   futex      syscall(SYS_futex, FUTEX_WAIT)  read        read on an empty pipe
 *   write      write to a full pipe            poll        poll on an empty pipe
 *   epoll      epoll_wait                      sem         sem_wait
 *
 * and main blocks in pthread_join (main -> main_wait -> pthread_join) on the "stopper" thread,
 * which sleeps for the run's length (SECONDS, default 2; the first argument) and then releases
 * every other thread. Prints one line per thread, the same on every run. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

static atomic_int stop;
static double seconds = 2.0;

static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int released; /* under cond_lock */
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER; /* held by the stopper */
static sem_t holding; /* posted once the stopper holds `held` */
static atomic_int futex_word;
static int read_pipe[2], write_pipe[2], poll_pipe[2], epoll_pipe[2];
static sem_t sem;

/* Each blocking call is retried on EINTR: the profiler's signals interrupt some of them. */

NOIPA static int sleep_wait(void) {
    int n = 0;
    while (!atomic_load(&stop)) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        n++;
    }
    return n > 0;
}

NOIPA static int clocksleep_wait(void) {
    int n = 0;
    while (!atomic_load(&stop)) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
        n++;
    }
    return n > 0;
}

NOIPA static int condwait_wait(void) {
    pthread_mutex_lock(&cond_lock);
    while (!released)
        pthread_cond_wait(&cond, &cond_lock);
    pthread_mutex_unlock(&cond_lock);
    return 1;
}

NOIPA static int mutex_wait(void) {
    pthread_mutex_lock(&held);
    pthread_mutex_unlock(&held);
    return 1;
}

NOIPA static int futex_wait(void) {
    while (atomic_load(&futex_word) == 0)
        syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    return 1;
}

NOIPA static int read_wait(void) {
    char c;
    ssize_t r;
    do
        r = read(read_pipe[0], &c, 1);
    while (r < 0 && errno == EINTR);
    return r == 1;
}

NOIPA static int write_wait(void) {
    /* The pipe was filled to its last byte: this write blocks until the stopper drains it. */
    char c = 'w';
    ssize_t r;
    do
        r = write(write_pipe[1], &c, 1);
    while (r < 0 && errno == EINTR);
    return r == 1;
}

NOIPA static int poll_wait(void) {
    struct pollfd p = {.fd = poll_pipe[0], .events = POLLIN};
    while (poll(&p, 1, -1) != 1)
        ;
    return 1;
}

NOIPA static int epoll_wait_for_input(void) {
    int ep = epoll_create1(0);
    struct epoll_event e = {.events = EPOLLIN};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, epoll_pipe[0], &e) != 0)
        return 0;
    struct epoll_event got;
    while (epoll_wait(ep, &got, 1, -1) != 1)
        ;
    close(ep);
    return 1;
}

NOIPA static int sem_wait_for_post(void) {
    while (sem_wait(&sem) != 0)
        ;
    return 1;
}

/* The threads: each names itself and blocks in its `_wait`; the result is used after the call
 * returns, so that no call is a tail call. */
#define THREAD(name, wait)                                                                         \
    static int name##_result;                                                                      \
    NOIPA static void *name##_thread(void *arg) {                                                  \
        (void)arg;                                                                                 \
        pthread_setname_np(pthread_self(), #name);                                                 \
        name##_result = wait() + 1;                                                                \
        return NULL;                                                                               \
    }

THREAD(sleep, sleep_wait)
THREAD(clocksleep, clocksleep_wait)
THREAD(condwait, condwait_wait)
THREAD(mutex, mutex_wait)
THREAD(futex, futex_wait)
THREAD(read, read_wait)
THREAD(write, write_wait)
THREAD(poll, poll_wait)
THREAD(epoll, epoll_wait_for_input)
THREAD(sem, sem_wait_for_post)

static void *(*const threads[])(void *) = {
    sleep_thread, clocksleep_thread, condwait_thread, mutex_thread, futex_thread,
    read_thread,  write_thread,      poll_thread,     epoll_thread, sem_thread,
};
static int *const results[] = {
    &sleep_result, &clocksleep_result, &condwait_result, &mutex_result, &futex_result,
    &read_result,  &write_result,      &poll_result,     &epoll_result, &sem_result,
};
static const char *const names[] = {
    "sleep", "clocksleep", "condwait", "mutex", "futex",
    "read",  "write",      "poll",     "epoll", "sem",
};
#define THREADS (sizeof threads / sizeof threads[0])

/* Sleeps for the run, then releases every thread. */
NOIPA static void *stopper_thread(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "stopper");
    pthread_mutex_lock(&held);
    sem_post(&holding);
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)seconds;
    end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (end.tv_nsec >= 1000000000) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) == EINTR)
        ;
    atomic_store(&stop, 1);
    pthread_mutex_lock(&cond_lock);
    released = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&cond_lock);
    pthread_mutex_unlock(&held);
    atomic_store(&futex_word, 1);
    syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    char c = 'r', buf[4096];
    ssize_t w;
    do
        w = write(read_pipe[1], &c, 1);
    while (w < 0 && errno == EINTR);
    /* Drains the full pipe (non-blocking) until the writer's byte has come through. */
    for (int seen = 0; !seen;) {
        ssize_t r = read(write_pipe[0], buf, sizeof buf);
        for (ssize_t i = 0; i < r; i++)
            seen |= buf[i] == 'w';
    }
    do
        w = write(poll_pipe[1], &c, 1);
    while (w < 0 && errno == EINTR);
    do
        w = write(epoll_pipe[1], &c, 1);
    while (w < 0 && errno == EINTR);
    sem_post(&sem);
    return NULL;
}

NOIPA static int main_wait(pthread_t stopper) { return pthread_join(stopper, NULL) == 0; }

int main(int argc, char **argv) {
    if (argc > 1)
        seconds = atof(argv[1]);
    if (pipe(read_pipe) || pipe(write_pipe) || pipe(poll_pipe) || pipe(epoll_pipe) ||
        sem_init(&sem, 0, 0) || sem_init(&holding, 0, 0)) {
        perror("setup");
        return 1;
    }
    /* Fills the write pipe (non-blocking meanwhile) so that the writer's first byte blocks. */
    int flags = fcntl(write_pipe[1], F_GETFL);
    fcntl(write_pipe[1], F_SETFL, flags | O_NONBLOCK);
    char fill[4096];
    memset(fill, 'f', sizeof fill);
    while (write(write_pipe[1], fill, sizeof fill) > 0)
        ;
    while (write(write_pipe[1], fill, 1) > 0)
        ;
    fcntl(write_pipe[1], F_SETFL, flags);
    fcntl(write_pipe[0], F_SETFL, fcntl(write_pipe[0], F_GETFL) | O_NONBLOCK);
    pthread_t stopper, t[THREADS];
    if (pthread_create(&stopper, NULL, stopper_thread, NULL) != 0)
        return 1;
    while (sem_wait(&holding) != 0)
        ;
    for (size_t i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, threads[i], NULL) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    int ok = main_wait(stopper);
    for (size_t i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (size_t i = 0; i < THREADS; i++)
        printf("%s %d\n", names[i], *results[i]);
    printf("main %d\n", ok + 1);
    return 0;
}
