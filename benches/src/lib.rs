//! Benchmarks of the unwinder against framehop, a Breakpad-compatible walker and the
//! frame-pointer floor, on the same captured stacks.
//!
//! - [`sample`]: captured stacks on disk, so every unwinder runs on identical input.
//! - [`capture`]: the workloads (recursions, a libc callback through the PLT, the profiler
//!   example's workload under SIGPROF, a frame-pointer chain).
//! - [`replay`]: sequences of real samples replayed in order, one cache per thread.
//! - [`unwinders`]: ours, framehop and the frame-pointer walk, set up from a sample's modules.

pub mod breakpad;
pub mod capture;
pub mod replay;
pub mod sample;
pub mod unwinders;
