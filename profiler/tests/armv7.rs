//! The profiler on 32-bit ARM (the targets table's `armv7` row), under qemu-arm: the programs
//! and checks of [`cross`], written once for every emulated architecture.

/// The row of the targets table these tests run.
const ROW: &str = "armv7";

/// Debian's armhf compiler gives a program's own functions no unwind tables by default (no
/// `-funwind-tables`): a stack of the default build is known at its leaf only.
const DEFAULT_BUILD_HAS_TABLES: bool = false;

/// Debian's armhf glibc has code that neither a symbol nor an unwind entry describes (its
/// `.iplt`, and static functions in its `EXIDX_CANTUNWIND` ranges).
const LIBRARIES_FULLY_DESCRIBED: bool = false;

/// The function a signal handler returns to: glibc's restorer, which qemu-arm's frames use.
const SIGNAL_TRAMPOLINE: &str = "__default_sa_restorer";

#[path = "common/cross.rs"]
mod cross;
