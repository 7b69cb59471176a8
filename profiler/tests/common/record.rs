//! The `unwind-profiler` command as the profiler's tests run it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use unwind_profiler::config::OPTIONS;

/// The release artifacts' directory: the tests run from `target/release/deps/`.
pub fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

/// The command in `dir`, checked to exist with its preload library; in a process group of its
/// own (so that a hung run can be killed with the program it started, and Ctrl-C sent as a
/// terminal would), without the test's own profiler settings in its environment.
pub fn command(dir: &Path) -> Command {
    for f in [
        dir.join("unwind-profiler"),
        dir.join("libunwind_profiler_preload.so"),
    ] {
        assert!(
            f.is_file(),
            "{} is missing: build it first (see the test's docs)",
            f.display()
        );
    }
    let mut cmd = Command::new(dir.join("unwind-profiler"));
    cmd.process_group(0);
    // The preload library reads these: the test's own environment must not change the runs.
    for o in OPTIONS {
        cmd.env_remove(o.env);
    }
    cmd.env_remove("UNWIND_PROFILER_LIBRARY");
    cmd
}
