// A C++ workload sampled by the test agent: std::thread workers (their stacks start in
// libstdc++'s thread trampoline), std::sort with an out-of-line comparator, std::function,
// iostream formatting inside libstdc++, and exceptions thrown and caught (frames inside
// libstdc++'s __cxa_throw and libgcc_s's unwinder).
// Usage: workload-cpp OUT SECONDS HZ

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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

NOIPA bool by_digits(unsigned long a, unsigned long b) {
    return (a * 0x9e3779b97f4a7c15ul) < (b * 0x9e3779b97f4a7c15ul);
}

NOIPA unsigned long cpp_sort(unsigned long n) {
    std::vector<unsigned long> v(2000);
    for (size_t i = 0; i < v.size(); i++)
        v[i] = (i ^ n) * 2654435761ul;
    std::sort(v.begin(), v.end(), by_digits);
    return v[n % v.size()];
}

NOIPA std::string cpp_format(unsigned long n) {
    std::ostringstream s;
    for (int i = 0; i < 20; i++)
        s << (n + i) << ' ' << static_cast<double>(n) / (i + 1) << ';';
    return s.str();
}

NOIPA unsigned long cpp_thrower(unsigned long n) {
    if (n % 2 == 0)
        throw std::runtime_error("even");
    return n;
}

NOIPA unsigned long cpp_catch(unsigned long n) {
    unsigned long r = 0;
    for (unsigned long i = 0; i < 50; i++) {
        try {
            r += cpp_thrower(n + i);
        } catch (const std::exception &e) {
            r += e.what()[0];
        }
    }
    return r;
}

NOIPA unsigned long cpp_recurse(int depth, unsigned long n, const std::function<unsigned long(unsigned long)> &f) {
    if (depth == 0)
        return f(n);
    return cpp_recurse(depth - 1, n ^ depth, f) + 1;
}

NOIPA void cpp_worker(unsigned long n) {
    if (agent_register_thread() != 0)
        std::abort();
    std::function<unsigned long(unsigned long)> leaf = [](unsigned long x) { return cpp_sort(x); };
    while (now() < deadline) {
        sink += cpp_recurse(12, n++, leaf);
        sink += cpp_format(n).size();
    }
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
    std::vector<std::thread> threads;
    for (unsigned long i = 0; i < 2; i++)
        threads.emplace_back(cpp_worker, 1000 + i * 77);
    unsigned long n = 1;
    while (now() < deadline) {
        sink += cpp_catch(n++);
        sink += cpp_format(n).size();
    }
    for (auto &t : threads)
        t.join();
    return agent_stop(argv[1]) == 0 ? 0 : 1;
}
