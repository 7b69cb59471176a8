//! A Rust program whose `#[global_allocator]` is `Sampled<System>` profiles its own
//! allocations through the library (`Profiler::builder().sample_allocations(...)`): see
//! `common/sampled_allocations.rs` for the program and what is checked.
//!
//! One process, no test harness (its threads would allocate too): `cargo test -p
//! unwind-profiler --test sampled_allocator`.

use std::alloc::System;

use unwind_profiler::alloc_sampling::Sampled;

#[path = "common/sampled_allocations.rs"]
mod sampled_allocations;

#[global_allocator]
static ALLOCATOR: Sampled<System> = Sampled(System);

fn main() {
    sampled_allocations::run("sampled_allocator");
}
