//! The profiler on 64-bit ARM (the targets table's `aarch64` row), under qemu-aarch64: the
//! programs and checks of [`cross`], written once for every emulated architecture.

/// The row of the targets table these tests run.
const ROW: &str = "aarch64";

/// Debian's arm64 compiler emits `.eh_frame` for every function by default
/// (`-fasynchronous-unwind-tables`): the default build's stacks show their callers.
const DEFAULT_BUILD_HAS_TABLES: bool = true;

/// The most library frames, in %, in code that neither a symbol nor an unwind entry describes
/// (see armv7.rs): none, every function of Debian's arm64 glibc, libgcc_s and libstdc++ has an
/// FDE or a symbol.
const UNDESCRIBED_LIBRARY_FRAMES: [u64; 2] = [0, 0];

/// The function a signal handler returns to: qemu-aarch64's trampoline, a page of its own.
const SIGNAL_TRAMPOLINE: &str = "[sigreturn]";

#[path = "common/cross.rs"]
mod cross;
#[path = "common/debuginfod_server.rs"]
mod debuginfod_server;
