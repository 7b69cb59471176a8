//! Validation against Breakpad.
//!
//! - [`cfi_compare`]: our exported `STACK CFI` against `dump_syms`'s, evaluated by
//!   `breakpad-symbols` at every address range where either file's rules change.
//! - [`programs`], [`walk`], [`compare`], [`report`]: samples from real programs, saved as
//!   minidumps, walked by rust-minidump's Breakpad-compatible walker and compared frame by
//!   frame with the frames our unwinder found in the signal handler; `VALIDATION.md`.

pub mod cfi_compare;
pub mod tools;
