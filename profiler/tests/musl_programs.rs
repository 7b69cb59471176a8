//! Programs linked against musl libc, as Alpine images build them, under `record`: a C program
//! (musl-gcc, linked with `--eh-frame-hdr --build-id` as Alpine's gcc links: Debian's musl-gcc
//! wrapper leaves both out) and a Rust program (dynamically linked, as Alpine's rustc builds;
//! `-crt-static`). `record` picks the musl build of the preload library (`scripts/build-musl`)
//! from the program's interpreter; the glibc build cannot load into them.
//!
//! Checked, for each: every sample's stack is the program's whole chain of callers, leaf to
//! the thread's entry (`leaf_work` ← `middle` ← `worker` ← `main`, or the thread's start), each
//! frame named; the walk's only stop is in musl's own entry code, which musl builds without
//! unwind tables (its configure adds `-fno-asynchronous-unwind-tables`), counted as `NoRule`.
//!
//! Needs the release build of the command and its glibc and musl preload libraries, musl-gcc
//! and the musl Rust target (under `CI=true` a missing tool fails the tests).
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

const TARGET: &str = "x86_64-unknown-linux-musl";

/// The musl preload library, where `scripts/build-musl` puts it; `None` (failing under CI) if
/// it or musl-gcc is missing.
fn musl_ready() -> bool {
    if !runs::have(&[("musl-gcc", &["--version"])]) {
        return false;
    }
    let library = record_command::release_dir()
        .join("..")
        .join(TARGET)
        .join("release")
        .join("libunwind_profiler_preload.so");
    if !library.is_file() {
        unwind_test_support::missing("the musl preload library (scripts/build-musl)");
        return false;
    }
    true
}

/// The program's source.
fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs/musl")
        .join(name)
}

/// Profiles `program` under `record`; its folded stacks and summary.
fn profile(dir: &Path, program: &Path) -> (Vec<(Vec<String>, u64)>, String) {
    let out = dir.join("out");
    let (status, stderr) = runs::run(
        &mut runs::record(&out, &[], &[program.to_str().unwrap()]),
        None,
    );
    assert!(status.success(), "{status}: {stderr}");
    // Every output written, each reader taking the same samples.
    runs::check_outputs(&program.display().to_string(), &out);
    let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
    (runs::folded(&out), summary)
}

/// Checks the stacks: every sample in the program's code has its whole chain, to `main` or the
/// thread's start routine, under one frame of musl's entry code.
fn check(what: &str, lines: &[(Vec<String>, u64)], summary: &str, name: &dyn Fn(&str) -> String) {
    let total: u64 = lines.iter().map(|(_, n)| n).sum();
    let chain = [name("worker"), name("middle"), name("leaf_work")];
    let mut whole = 0;
    for (stack, n) in lines {
        // Leaf last. The chain, ending at the leaf (inlined frames of std aside, in Rust).
        let Some(at) = stack.iter().position(|f| *f == chain[0]) else {
            continue;
        };
        let below: Vec<&String> = stack[at..].iter().filter(|f| chain.contains(f)).collect();
        let want: Vec<&String> = chain.iter().take(below.len()).collect();
        assert_eq!(below, want, "{what}: {stack:?}");
        let callers = &stack[..at];
        // Above `worker`: `main` (then musl's entry) or the thread's start in musl, each named.
        assert!(
            callers.iter().all(|f| !f.is_empty() && f != "[unknown]"),
            "{what}: {stack:?}"
        );
        let outermost = callers.first().map(String::as_str).unwrap_or("");
        assert!(
            outermost.starts_with("ld-musl-x86_64.so.1") || callers.iter().any(|f| f == "main"),
            "{what}: {stack:?}"
        );
        whole += n;
    }
    println!("{what}: {whole} of {total} samples with the whole chain");
    assert!(total >= 1000, "{what}: {total} samples");
    assert!(whole * 100 >= total * 95, "{what}: {whole} of {total}");
    let leaf = runs::samples_with(lines, |f| f == chain[2]);
    assert!(
        leaf * 100 >= total * 80,
        "{what}: {leaf} of {total} in leaf_work"
    );
    let stored = summary_text::required(summary, "samples stored");
    let no_rule = summary_text::count(summary, "NoRule").unwrap_or(0);
    let end = summary_text::count(summary, "EndOfStack").unwrap_or(0);
    assert_eq!(no_rule + end, stored, "{what}: other stops:\n{summary}");
}

#[test]
fn a_musl_c_program_is_profiled_whole() {
    if !musl_ready() {
        return;
    }
    let dir = runs::scratch("musl-c");
    let program = dir.join("threads");
    let built = Command::new("musl-gcc")
        .args([
            "-O2",
            "-g",
            "-pthread",
            "-Wl,--eh-frame-hdr",
            "-Wl,--build-id",
            "-o",
        ])
        .arg(&program)
        .arg(source("threads.c"))
        .status()
        .unwrap();
    assert!(built.success());
    let (lines, summary) = profile(&dir, &program);
    check("C", &lines, &summary, &|f| f.to_owned());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_musl_rust_program_is_profiled_whole() {
    if !musl_ready() {
        return;
    }
    let dir = runs::scratch("musl-rust");
    // Rust's musl target links libgcc_s when not static: musl images have it with Rust's own
    // packages; here, its LLVM libunwind through a linker script by that name (as
    // scripts/build-musl does).
    let sysroot = String::from_utf8(
        Command::new("rustc")
            .args(["--print", "sysroot"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::fs::write(
        dir.join("libgcc_s.so"),
        format!(
            "INPUT({}/lib/rustlib/{TARGET}/lib/self-contained/libunwind.a)\n",
            sysroot.trim()
        ),
    )
    .unwrap();
    let program = dir.join("threads");
    let built = Command::new("rustc")
        .args([
            "--edition",
            "2021",
            "--target",
            TARGET,
            "-C",
            "opt-level=2",
            "-g",
        ])
        .args(["-C", "target-feature=-crt-static", "-C", "linker=musl-gcc"])
        .args([
            "-C",
            "link-arg=-Wl,--eh-frame-hdr",
            "-C",
            "link-arg=-Wl,--build-id",
        ])
        .arg("-L")
        .arg(&dir)
        .arg("-o")
        .arg(&program)
        .arg(source("threads.rs"))
        .status()
        .unwrap();
    assert!(built.success());
    let (lines, summary) = profile(&dir, &program);
    check("Rust", &lines, &summary, &|f| format!("threads::{f}"));
    let _ = std::fs::remove_dir_all(&dir);
}
