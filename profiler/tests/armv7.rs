//! The profiler on 32-bit ARM (the targets table's `armv7` row), under qemu-arm: the programs
//! and checks of [`cross`], written once for every emulated architecture.

/// The row of the targets table these tests run.
const ROW: &str = "armv7";

/// Debian's armhf compiler gives a program's own functions no unwind tables by default (no
/// `-funwind-tables`): a stack of the default build is known at its leaf only.
const DEFAULT_BUILD_HAS_TABLES: bool = false;

/// The most library frames, in %, of a C program (tests/cross/sorting.c) and a C++ one
/// (tests/programs/exceptions.cpp) in code that neither a symbol nor an unwind entry describes,
/// named by their address. Debian's armhf libraries have internal functions without either
/// (glibc's in `EXIDX_CANTUNWIND` ranges, its A32 `memcpy`, libgcc_s's unwinder's own): 0.7 %
/// of the C program's library frames and 19 % of the C++ program's were in them. The calls,
/// PC-relative addresses and function pointers that reach them name them now
/// (`unwind_dwarf::called`), and `.iplt`'s stubs are `NAME@plt`: none is left in either
/// program; 1 % allows for code that only a function pointer built otherwise reaches.
const UNDESCRIBED_LIBRARY_FRAMES: [u64; 2] = [1, 1];

/// The function a signal handler returns to: glibc's restorer, which qemu-arm's frames use.
const SIGNAL_TRAMPOLINE: &str = "__default_sa_restorer";

#[path = "common/cross.rs"]
mod cross;
#[path = "common/debuginfod_server.rs"]
mod debuginfod_server;
