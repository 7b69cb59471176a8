//! A Rust program whose `#[global_allocator]` is `Sampled<Jemalloc>` (tikv-jemallocator, as
//! Rust services use it) profiles its own allocations through the library: the program and the
//! checks of `common/sampled_allocations.rs`, with jemalloc behind the sampling instead of the C
//! library's allocator.
//!
//! One process, no test harness (its threads would allocate too): `cargo test -p
//! unwind-profiler --test sampled_jemalloc`.

use tikv_jemallocator::Jemalloc;
use unwind_profiler::alloc_sampling::Sampled;

#[path = "common/sampled_allocations.rs"]
mod sampled_allocations;

#[global_allocator]
static ALLOCATOR: Sampled<Jemalloc> = Sampled(Jemalloc);

fn main() {
    sampled_allocations::run("sampled_jemalloc");
}
