// A C++ program for profiler/tests/programs.rs: exceptions thrown and caught in a hot loop, on
// the main thread, on two std::threads and on the three worker threads of a small thread pool
// (a queue of tasks under a mutex and a condition variable), then a deterministic checksum per
// part on stdout. The frames the profile must show are noinline functions of namespace `ns`.
//
// Build: g++ -O2 -g -pthread exceptions.cpp -o exceptions; run: ./exceptions [ROUNDS]

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <queue>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ns {

struct Odd : std::runtime_error {
    explicit Odd(std::uint64_t v) : std::runtime_error("odd"), value(v) {}
    std::uint64_t value;
};

// Throws for odd values of a hash of `i`: half the calls end in __cxa_throw and the unwinder.
__attribute__((noinline)) std::uint64_t check(std::uint64_t i) {
    std::uint64_t h = i * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    if (h & 1) throw Odd(h);
    return h >> 7;
}

// Catches what `check` throws; the catch adds the thrown value.
__attribute__((noinline)) std::uint64_t throw_and_catch(std::uint64_t n, std::uint64_t seed) {
    std::uint64_t acc = 0;
    for (std::uint64_t i = 0; i < n; i++) {
        try {
            acc += check(seed + i);
        } catch (const Odd &e) {
            acc ^= e.value;
        }
    }
    return acc;
}

// Plain arithmetic (no exceptions), for the std::threads.
__attribute__((noinline)) std::uint64_t crunch(std::uint64_t n, std::uint64_t seed) {
    std::uint64_t x = seed | 1;
    for (std::uint64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (x % 1000003 == 0) x += i;
    }
    return x;
}

// A fixed-size pool: `workers` threads take tasks from a queue until it is closed.
class Pool {
  public:
    explicit Pool(unsigned workers) {
        for (unsigned i = 0; i < workers; i++) threads_.emplace_back([this] { worker(); });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            closed_ = true;
        }
        ready_.notify_all();
        for (auto &t : threads_) t.join();
    }
    std::future<std::uint64_t> submit(std::function<std::uint64_t()> task) {
        auto job = std::make_shared<std::packaged_task<std::uint64_t()>>(std::move(task));
        auto result = job->get_future();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            tasks_.push([job] { (*job)(); });
        }
        ready_.notify_one();
        return result;
    }

  private:
    __attribute__((noinline)) void worker() {
        for (;;) {
            std::function<void()> task;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                ready_.wait(lock, [this] { return closed_ || !tasks_.empty(); });
                if (tasks_.empty()) return;
                task = std::move(tasks_.front());
                tasks_.pop();
            }
            task();
        }
    }

    std::vector<std::thread> threads_;
    std::queue<std::function<void()>> tasks_;
    std::mutex mutex_;
    std::condition_variable ready_;
    bool closed_ = false;
};

} // namespace ns

int main(int argc, char **argv) {
    std::uint64_t rounds = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10;
    std::uint64_t main_sum = ns::throw_and_catch(rounds * 50000, 1);

    std::uint64_t crunched[2] = {0, 0};
    std::thread a([&] { crunched[0] = ns::crunch(rounds * 8000000, 7); });
    std::thread b([&] { crunched[1] = ns::throw_and_catch(rounds * 50000, 1000000007); });
    a.join();
    b.join();

    std::uint64_t pooled = 0;
    {
        ns::Pool pool(3);
        std::vector<std::future<std::uint64_t>> results;
        for (std::uint64_t t = 0; t < 24; t++)
            results.push_back(pool.submit([rounds, t] {
                return ns::throw_and_catch(rounds * 5000, t * 1000003) + ns::crunch(rounds * 300000, t);
            }));
        for (std::size_t t = 0; t < results.size(); t++) pooled += results[t].get() * (t + 1);
    }

    std::printf("main %llu\nthreads %llu %llu\npool %llu\n", (unsigned long long)main_sum,
                (unsigned long long)crunched[0], (unsigned long long)crunched[1],
                (unsigned long long)pooled);
    return 0;
}
