//! A sampling profiler for Linux programs, built on `unwind-in-process`.

pub mod output;
pub mod profile;
