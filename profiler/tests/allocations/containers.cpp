// C++ containers for the allocation profiler's test: operator new and delete (libstdc++'s,
// which call malloc and free) from vectors of strings, a map, and shared_ptr churn; one map
// kept live to the end (leaked on purpose).
#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace work {

__attribute__((noinline)) std::size_t build_strings(int n) {
    std::vector<std::string> v;
    for (int i = 0; i < n; i++)
        v.push_back(std::string(40 + i % 200, 'x'));
    return v.size();
}

__attribute__((noinline)) std::map<int, std::string> *build_map(int n) {
    auto *m = new std::map<int, std::string>();
    for (int i = 0; i < n; i++)
        (*m)[i] = std::string(100, 'm');
    return m;
}

__attribute__((noinline)) std::size_t churn_shared(int n) {
    std::size_t sum = 0;
    for (int i = 0; i < n; i++) {
        auto p = std::make_shared<std::array<char, 256>>();
        (*p)[i % 256] = 1;
        sum += (*p)[0];
    }
    return sum;
}

} // namespace work

int main() {
    std::size_t total = 0;
    for (int round = 0; round < 20; round++) {
        total += work::build_strings(100000);
        delete work::build_map(20000);
        total += work::churn_shared(200000);
    }
    auto *kept = work::build_map(200000);
    std::printf("containers ok %zu %zu\n", total, kept->size());
    return 0;
}
