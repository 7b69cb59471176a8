// A throw-heavy C++ program sampled by the test agent: most of its CPU time is in libstdc++'s
// __cxa_throw and libgcc_s's unwinder (_Unwind_RaiseException's search and cleanup phases and
// the context installation at their end), on the main thread and on a std::thread.
// Usage: throws OUT SECONDS HZ

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

extern "C" {
#include "agent.h"
}

#define NOIPA __attribute__((noipa))

static volatile unsigned long sink;
static double deadline;

static double now() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

NOIPA unsigned long thrower(unsigned long n) {
    if (n % 8 != 0)
        throw std::runtime_error("odd");
    return n;
}

NOIPA unsigned long between(unsigned long n) {
    return thrower(n * 3) + 1;
}

NOIPA unsigned long catcher(unsigned long n) {
    unsigned long r = 0;
    for (unsigned long i = 0; i < 64; i++) {
        try {
            r += between(n + i);
        } catch (const std::exception &e) {
            r += e.what()[0];
        }
    }
    return r;
}

NOIPA void worker(unsigned long n) {
    if (agent_register_thread() != 0)
        std::abort();
    while (now() < deadline)
        sink += catcher(n++);
    agent_unregister_thread();
}

int main(int argc, char **argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s OUT SECONDS HZ\n", argv[0]);
        return 2;
    }
    if (agent_start(static_cast<unsigned>(std::atoi(argv[3]))) != 0)
        return 1;
    deadline = now() + std::atof(argv[2]);
    std::thread t(worker, 77);
    unsigned long n = 1;
    while (now() < deadline)
        sink += catcher(n++);
    t.join();
    return agent_stop(argv[1]) == 0 ? 0 : 1;
}
