//! Validation against Breakpad.
//!
//! - [`cfi_compare`]: our exported `STACK CFI` against `dump_syms`'s, evaluated by
//!   `breakpad-symbols` at every address range where either file's rules change.
//! - [`programs`], [`sample`], [`stores`], [`walk`], [`compare`], [`run`], [`report`]: real
//!   programs sampled by the test agent, each sample a minidump with the frames found in the
//!   signal handler; every minidump walked by rust-minidump's Breakpad-compatible walker with
//!   dump_syms's and our symbol files, compared frame by frame, every difference classified;
//!   `VALIDATION.md`.
//! - [`traces`]: both walks of every sample as `minidump_stackwalk -m` text, for diffing.

pub mod cfi_compare;
pub mod compare;
pub mod programs;
pub mod report;
pub mod run;
pub mod sample;
pub mod stores;
pub mod tools;
pub mod traces;
pub mod walk;
