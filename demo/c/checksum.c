/* Linked into the demo binary (built by build.rs with the cc crate): the checksum phase's hot
 * leaf. It hashes the buffer once per pass and calls back into Rust after each pass, so the
 * stacks go Rust (checksum_phase) -> C (c_checksum) -> Rust (the callback). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Called after each pass with the pass's seed and hash; returns the next pass's seed, or
 * UINT64_MAX to stop. */
typedef uint64_t (*demo_pass_fn)(void *ctx, uint64_t seed, uint64_t hash);

/* Hashes `data` once per pass, starting with `seed`, until `on_pass` says stop. Returns the
 * number of passes. All the hashing is in this function's own loop (no helper, no libc call:
 * the memcpy is a plain load), so a profile names it as the leaf. */
uint64_t c_checksum(const uint8_t *data, size_t len, uint64_t seed, demo_pass_fn on_pass, void *ctx)
{
    uint64_t passes = 0;
    while (seed != UINT64_MAX) {
        uint64_t h = seed ^ 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i + 8 <= len; i += 8) {
            uint64_t word;
            memcpy(&word, data + i, sizeof word);
            h = (h ^ word) * 0x100000001b3ull;
            h ^= h >> 29;
            h *= 0xbf58476d1ce4e5b9ull;
        }
        passes++;
        seed = on_pass(ctx, seed, h);
    }
    return passes;
}
