//! What a test does when a prerequisite is missing: a tool (`gcc`, `arm-linux-gnueabihf-gcc`,
//! `qemu-arm`, `readelf`, `dump_syms`, ...) or a file (Debian's armhf libraries,
//! `librustc_driver`, ...).
//!
//! Under CI (the environment variable `CI` is `true` or `1`) a missing prerequisite is a
//! failure: a test that silently checks nothing must not pass there. Elsewhere the test prints
//! `SKIPPED: ...` on stdout and stderr and returns. The stderr line is written to the stream
//! itself, past libtest's capture of `println!`/`eprintln!`, so that it shows in `cargo test`
//! output even for a passing test without `--nocapture`. `scripts/setup` installs every prerequisite.
//!
//! ```no_run
//! if !unwind_test_support::tool_runs("qemu-arm") {
//!     unwind_test_support::missing("qemu-arm (package qemu-user)");
//!     return;
//! }
//! ```
//!
//! [`Checks`] is the tally of a `harness = false` test that checks many things and reports every
//! failure, not only the first. [`call_graph`] holds the test programs' known call graphs, and
//! [`target`] the architectures the tests build for and run (`targets.tsv`).

pub mod call_graph;
pub mod collector;
pub mod gdb_jit;
pub mod mini_debug_info;
pub mod target;

pub use gdb_jit::build_jitted_object;
pub use mini_debug_info::{mini_debug_info_library, MiniDebugInfoLibrary};

use std::io::Write;
use std::process::Command;

/// How to get any missing prerequisite; part of every message.
pub const HOW_TO_GET: &str = "scripts/setup installs it";

/// Reports that the calling test's prerequisite `what` is missing (name it so that a reader can
/// install it: the tool, file or package).
///
/// Under CI ([`under_ci`]) this panics, failing the test. Elsewhere it prints
/// `SKIPPED: <what> (scripts/setup installs it)` to stdout and stderr and returns; the caller
/// then skips the checks that need `what`.
#[track_caller]
pub fn missing(what: &str) {
    missing_in(what, under_ci(), &mut std::io::stderr().lock());
}

/// True if this is a CI run: the environment variable `CI` is `true` (any case) or `1`, as CI
/// services set it.
pub fn under_ci() -> bool {
    is_ci_value(std::env::var("CI").ok().as_deref())
}

/// The C compiler for libraries a test loads into itself, with the flags the target needs: the
/// row of the architecture the test runs on ([`target::host`]; on armv7, run under qemu-user,
/// which executes the x86_64 cross compiler natively: `arm-linux-gnueabihf-gcc
/// -funwind-tables`).
pub fn target_c_compiler() -> (String, &'static [&'static str]) {
    let t = target::host();
    (t.cc(), &t.c_flags)
}

/// True if `program --version` runs and succeeds (the way to tell that a tool is installed).
pub fn tool_runs(program: &str) -> bool {
    tool_runs_with(program, &["--version"])
}

/// True if `program ARGS` runs and succeeds, for tools without `--version` (`go version`).
pub fn tool_runs_with(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn is_ci_value(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        let v = v.trim();
        v.eq_ignore_ascii_case("true") || v == "1"
    })
}

/// The line printed for a skip.
fn skip_line(what: &str) -> String {
    format!("SKIPPED: {what} ({HOW_TO_GET})")
}

/// [`missing`] with the CI flag and the stderr stream as parameters, so that both branches can
/// be tested.
#[track_caller]
fn missing_in(what: &str, ci: bool, stderr: &mut dyn Write) {
    if ci {
        panic!("missing prerequisite under CI (CI=true): {what} ({HOW_TO_GET})");
    }
    let line = skip_line(what);
    println!("{line}");
    // The stream itself: libtest captures `eprintln!` of passing tests, not this.
    let _ = writeln!(stderr, "{line}");
}

/// Runs `cmd` to completion and panics, with its status, stdout and stderr, unless it succeeds
/// (building a test program, say).
#[track_caller]
pub fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the test agent (`libunwind_agent.so`, tests/agent) and the Rust workload in release
/// mode for `target` ([`target::Target::release_build`]) in the workspace `root`; returns the
/// directory holding them.
pub fn build_agent(root: &std::path::Path, target: &target::Target) -> std::path::PathBuf {
    let (mut cmd, dir) = target.release_build(root, "unwind-test-agent");
    run(&mut cmd);
    dir
}

/// The checks of a `harness = false` test: each prints an `ok`/`FAIL` line as it is made, and
/// [`Checks::finish`] exits non-zero naming every failure.
#[derive(Debug, Default)]
pub struct Checks {
    passed: usize,
    failed: Vec<String>,
}

impl Checks {
    /// No checks made yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `what` holds (`ok`) or does not.
    pub fn check(&mut self, ok: bool, what: impl Into<String>) {
        let what = what.into();
        println!("  {} {what}", if ok { "ok  " } else { "FAIL" });
        if ok {
            self.passed += 1;
        } else {
            self.failed.push(what);
        }
    }

    /// Prints `<test>: N passed, M failed`, then each failure on stderr, and exits with status 1
    /// if any check failed.
    pub fn finish(self, test: &str) {
        println!(
            "{test}: {} passed, {} failed",
            self.passed,
            self.failed.len()
        );
        if !self.failed.is_empty() {
            for f in &self.failed {
                eprintln!("FAILED: {f}");
            }
            std::process::exit(1);
        }
    }
}

/// The Rust toolchain's `librustc_driver-*.so` (the largest binary on a Rust machine, used to
/// report preload cost), found through `rustc --print sysroot`.
pub fn rustc_driver_path() -> Option<std::path::PathBuf> {
    let out = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let lib = std::path::Path::new(String::from_utf8(out.stdout).ok()?.trim()).join("lib");
    std::fs::read_dir(lib)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("librustc_driver-") && n.ends_with(".so"))
        })
}

/// The calling thread's CPU time: what a time limit in a test measures, so that it holds on a
/// busy machine (the wall clock also counts the time the thread waited for a CPU).
#[cfg(unix)]
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Rust's `libstd` shared library for the toolchain's target `triple` (a target `scripts/setup`
/// adds), if installed.
pub fn rust_libstd(triple: &str) -> Option<std::path::PathBuf> {
    rust_sysroot_library(&format!("lib/rustlib/{triple}/lib"), "libstd-")
}

/// The shared library `PREFIX*.so` in directory `dir` of `rustc`'s sysroot (`lib` holds
/// `librustc_driver-*.so`), if there is one.
pub fn rust_sysroot_library(dir: &str, prefix: &str) -> Option<std::path::PathBuf> {
    let out = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = std::path::PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    std::fs::read_dir(sysroot.join(dir))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".so"))
        })
}

/// Checks the allocation section of a profiler summary (`STEM.summary.txt` of a program run
/// under the allocation hooks): at least `least` allocation samples taken, and none refused as
/// nested (an allocation made by the sampling path itself, or by a signal handler while it
/// runs: there is none in the programs that use this) or unwalkable. A full ring (the collector
/// off the CPU on a busy machine) and a thread past its exit hook are counted by the profiler,
/// and allowed. `what` names the run in the checks' lines.
pub fn check_allocation_summary(summary: &str, least: u64, what: &str, checks: &mut Checks) {
    let line = |prefix: &str| summary.lines().find(|l| l.starts_with(prefix));
    let samples = line("allocations ")
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    checks.check(
        samples >= least,
        format!("{what}: {samples} allocation samples taken (>= {least})"),
    );
    let not_taken = line("allocation samples not taken").unwrap_or("");
    let refused: Vec<&str> = not_taken
        .split(": ")
        .nth(1)
        .unwrap_or("")
        .split(", ")
        .filter(|r| r.contains("already sampling") || r.contains("could not walk"))
        .collect();
    checks.check(
        refused.is_empty(),
        format!("{what}: no allocation sample refused as nested or unwalkable ({not_taken:?})"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_values() {
        for v in ["true", "TRUE", "True", "1", " true\n"] {
            assert!(is_ci_value(Some(v)), "{v:?}");
        }
        for v in ["", "0", "false", "yes", "no"] {
            assert!(!is_ci_value(Some(v)), "{v:?}");
        }
        assert!(!is_ci_value(None));
    }

    #[test]
    fn outside_ci_a_missing_prerequisite_is_a_visible_skip() {
        // Returns (no panic) and says on stderr what is missing and how to get it.
        let mut err = Vec::new();
        missing_in("qemu-arm", false, &mut err);
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "SKIPPED: qemu-arm (scripts/setup installs it)\n"
        );
    }

    #[test]
    #[should_panic(expected = "missing prerequisite under CI (CI=true): qemu-arm (scripts/setup")]
    fn under_ci_a_missing_prerequisite_fails() {
        missing_in("qemu-arm", true, &mut Vec::new());
    }

    #[test]
    fn tools_that_do_not_exist_do_not_run() {
        assert!(!tool_runs("unwind-test-support-no-such-tool"));
        // `cargo test` runs under cargo, which is on the PATH or named by $CARGO.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        assert!(tool_runs(&cargo));
    }
}
