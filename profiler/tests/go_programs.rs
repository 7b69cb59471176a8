//! Go programs under `record`. Go's runtime installs its own handler for every signal at start,
//! `SIGURG` (the profiler's default sampling signal) among them, which it sends itself to
//! preempt goroutines: before the profiler kept its handler in front of the program's, a Go
//! program was profiled with 0 samples and no word.
//!
//! `profiler/tests/programs/cgo/main.go`, built with cgo (dynamically linked, so that the loader
//! loads the preload library): goroutines in Go code and in a C function, then two goroutines in
//! loops without a call that only Go's asynchronous preemption can take their threads from.
//! Checked: the program's scheduler still preempts (it exits 3 otherwise); samples in the Go
//! function and in the C function; Go's own signals passed on to its handler; every sampled
//! thread's CPU time covered. And a statically linked build is refused, saying why and what to do.
//!
//! Go's frames are crossed (the walk stopped at a goroutine's first frame before): the running
//! goroutine's stack (Go's memory, found through its `g`), Go's CFI from the executable's
//! `.debug_frame`, the cgo call from the system stack back to the goroutine that made it, and
//! `runtime.goexit` as the end of every goroutine's stack. Checked: each stack of the Go
//! function and of the C function is the exact chain of callers up to `runtime.goexit`.
//!
//! Needs the release build of the command and the preload library, and Go (under `CI=true` a
//! missing `go` fails the tests).
#![cfg(target_arch = "x86_64")]

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "common/firefox.rs"]
mod firefox;
#[path = "common/record.rs"]
mod record_command;
#[path = "common/runs.rs"]
mod runs;
#[path = "common/summary.rs"]
mod summary_text;
#[path = "common/svg.rs"]
mod svg;

/// Builds the cgo program into `dir` (`cgo` on: dynamically linked; off: statically, with its
/// C function in Go).
fn build(dir: &Path, cgo: bool) -> Option<PathBuf> {
    if !runs::have(&[("go", &["version"])]) {
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/cgo");
    let exe = dir.join(if cgo { "cgo" } else { "static" });
    let mut go = Command::new("go");
    go.current_dir(&src)
        .args(["build", "-o"])
        .arg(&exe)
        .arg(".")
        .env("CGO_ENABLED", if cgo { "1" } else { "0" })
        .env("GOFLAGS", "-mod=mod");
    unwind_test_support::run(&mut go);
    Some(exe)
}

#[test]
fn a_cgo_program_is_sampled_and_its_scheduler_still_preempts() {
    let dir = runs::scratch("go-cgo");
    let Some(exe) = build(&dir, true) else { return };
    let out = dir.join("out");
    let (status, stderr) = runs::run(
        runs::record(&out, &[], &[exe.to_str().unwrap()]).stdout(std::process::Stdio::piped()),
        None,
    );
    println!("{stderr}");
    assert!(
        status.success(),
        "the program exits 3 when its goroutines are starved: {status}\n{stderr}"
    );
    let samples = runs::check_outputs("cgo", &out);
    let folded = runs::folded(&out);
    let go = runs::samples_with(&folded, |f| f == "main.goSpin");
    let c = runs::samples_with(&folded, |f| f == "c_spin");
    // Three goroutines in Go and one in C, for the same wall-clock time on two threads.
    assert!(
        go * 5 > samples && c * 10 > samples,
        "{go} samples in main.goSpin and {c} in c_spin of {samples}"
    );
    // Go's frames crossed: every stack through the two leaves is its exact chain of callers, up
    // to the top of the goroutine's stack (what the leaves call, such as `time.Now`, may follow).
    let chain = |through: &[&str]| {
        folded
            .iter()
            .filter(|(s, _)| s.iter().any(|f| f == through[through.len() - 1]))
            .map(|(s, n)| {
                let whole = s.len() >= through.len() && s[..through.len()] == *through;
                (if whole { *n } else { 0 }, *n, s)
            })
            .fold((0, 0, Vec::new()), |(w, t, mut odd), (ok, n, s)| {
                if ok == 0 {
                    odd.push(s.join(";"));
                }
                (w + ok, t + n, odd)
            })
    };
    let (whole, total, odd) = chain(&["runtime.goexit", "main.main.func1", "main.goSpin"]);
    assert!(
        total == go && whole * 100 >= total * 97,
        "{whole} of {total} stacks in main.goSpin reach runtime.goexit; others: {odd:?}"
    );
    let through_cgo = [
        "runtime.goexit",
        "main.main.func2",
        "main.cgoSpin",
        "main.cSpin",
        "main._Cfunc_c_spin",
        "runtime.cgocall",
        "runtime.asmcgocall",
        "_cgo_",
        "c_spin",
    ];
    let cgo_stacks: Vec<(Vec<String>, u64)> = folded
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f == "c_spin"))
        .map(|(s, n)| {
            // The cgo wrapper's name carries a hash of the package: its prefix only.
            let s = s
                .iter()
                .map(|f| {
                    if f.starts_with("_cgo_") {
                        "_cgo_".into()
                    } else {
                        f.clone()
                    }
                })
                .collect();
            (s, *n)
        })
        .collect();
    let whole: u64 = cgo_stacks
        .iter()
        .filter(|(s, _)| s.len() == through_cgo.len() && s.iter().eq(through_cgo.iter()))
        .map(|(_, n)| n)
        .sum();
    assert!(
        whole * 100 >= c * 97,
        "{whole} of {c} stacks in c_spin cross the cgo call up to runtime.goexit: {cgo_stacks:?}"
    );
    let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
    let stored = summary_text::required(&summary, "samples stored");
    let ended = summary_text::required(&summary, "EndOfStack");
    assert!(
        ended * 100 >= stored * 90,
        "{ended} of {stored} walks end at the top of a stack:\n{summary}"
    );
    let passed_on = summary
        .lines()
        .find(|l| l.starts_with("program's signal"))
        .unwrap_or_else(|| panic!("Go's own SIGURG handler is not said:\n{summary}"));
    assert!(
        passed_on.contains("passed the program's own"),
        "{passed_on}"
    );
    assert!(
        !stderr.contains("CPU time was not sampled"),
        "every thread of Go's is sampled: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_statically_linked_go_program_is_refused_saying_what_to_do() {
    let dir = runs::scratch("go-static");
    let Some(exe) = build(&dir, false) else {
        return;
    };
    let out = dir.join("out");
    let (status, stderr) = runs::run(&mut runs::record(&out, &[], &[exe.to_str().unwrap()]), None);
    assert_eq!(status.code(), Some(73), "{stderr}");
    assert!(
        stderr.contains("is statically linked") && stderr.contains("CGO_ENABLED=1"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
