//! The bodies of the fuzz targets (`fuzz/fuzz_targets/*.rs`, run with
//! `cargo +nightly fuzz run TARGET` in `fuzz/`). Each takes the fuzzer's bytes, feeds them to one
//! layer of the unwinder as its untrusted input, and checks what must hold whatever the input:
//! no panic and no hang (every loop is bounded), no read outside the given memory
//! (libFuzzer's AddressSanitizer sees any), and the target's own invariants (tables sorted,
//! walks that end with a reason inside their buffer and write no frame outside the known
//! modules, exported symbol files that parse back). A violated invariant panics, which the
//! fuzzer reports as a crash.
//!
//! The same functions replay the checked-in corpus (`fuzz/corpus/TARGET/`) and every input
//! that once crashed (`fuzz/regressions/TARGET/`) as ordinary tests on stable
//! (`tests/replay.rs`), so CI needs no libFuzzer.

pub mod arm_code;
pub mod cfi;
mod check;
pub mod elf;
pub mod exidx;
pub mod expr;
pub mod gdb_jit;
mod gen;
pub mod stack_cfi;
pub mod unwind;

/// A target's body: the fuzzer's input in, a panic out if an invariant does not hold.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/` file and corpus directory.
pub const TARGETS: [(&str, Target); 8] = [
    ("arm_code", arm_code::run),
    ("cfi", cfi::run),
    ("elf", elf::run),
    ("exidx", exidx::run),
    ("expr", expr::run),
    ("gdb_jit", gdb_jit::run),
    ("stack_cfi", stack_cfi::run),
    ("unwind", unwind::run),
];
