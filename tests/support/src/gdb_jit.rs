//! The code the GDB JIT interface tests place in memory as a JIT would.

use std::process::Command;

use crate::run;

/// Builds `tests/gdb_jit/jitted.c` with `cc` (and its `extra` arguments) into `out`: the code
/// the GDB JIT interface tests place in anonymous memory as a JIT would, a shared object without
/// frame pointers and without relocations.
pub fn build_jitted_object(cc: &str, extra: &[&str], out: &std::path::Path) {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../gdb_jit/jitted.c");
    run(Command::new(cc)
        .args(extra)
        .args([
            "-O2",
            "-fomit-frame-pointer",
            "-fno-stack-protector",
            "-fPIC",
            "-shared",
            "-nostdlib",
            "-o",
        ])
        .arg(out)
        .arg(src));
}
