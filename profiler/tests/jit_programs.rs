//! Code generated at run time, under `unwind-profiler record`: programs whose stacks run through
//! code no file describes, or a file's code mapped where the loader does not list it.
//!
//! - **A JIT of our own** (`behaviour/jit_frames.c`, x86_64, built as distributions build):
//!   one generated function that keeps a frame pointer, crossed by it to `main`; one that keeps
//!   none, crossed by the rules of its unwinding record in the program's jitdump file, and
//!   without that record, where the walk stops or goes on through its true caller, never through
//!   another. One is named by a perf map, the other by the jitdump file, which the program wrote
//!   in its working directory (found because it maps it, as JITs do for perf).
//! - **node**: V8's builtins, which node maps a second time from its own file, named by the
//!   file's symbols; with `--perf-basic-prof`, complete stacks through the JIT's frames (V8 keeps
//!   frame pointers) with the JavaScript functions named by the perf map.
//! - **java** with `-XX:+PreserveFramePointer`: complete stacks, the Java method named by the
//!   perf map the JVM writes at exit.
//! - **python 3.12 `-X perf`** and **3.13 `-X perf_jit`**: complete stacks through CPython's
//!   trampolines (copies of one function without a frame pointer, found in memory and given
//!   its rules), `py::` frames named by the perf map or the jitdump.
//!
//! Needs node, a JDK and python 3.12/3.13 (pyenv's or on the PATH), go, and the release build of
//! the command and the preload library (a missing one fails under `CI=true`):
//! `cargo build --release -p unwind-profiler -p unwind-profiler-preload && cargo test --release
//! -p unwind-profiler --test jit_programs`.

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

use std::path::{Path, PathBuf};
use std::process::Command;

use runs::{check_outputs, folded, have, record, run, samples_with, scratch};
use unwind_profiler::output::Outputs;

/// Held by each test: two profiled programs at once would take each other's CPU.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The run's summary text.
fn summary(out: &Path) -> String {
    std::fs::read_to_string(Outputs::paths(out, "profile").summary).unwrap()
}

/// The summary's stored samples, and of them those whose walk was complete.
fn completeness(summary: &str) -> (u64, u64) {
    let stored = summary_text::required(summary, "samples stored");
    let complete = ["EndOfStack", "ZeroReturnAddress", "CantUnwind"]
        .iter()
        .map(|r| summary_text::required(summary, r))
        .sum();
    (stored, complete)
}

/// The summary's samples with the leaf in generated code, and of them those named (0 and 0
/// without the line).
fn generated_leaves(summary: &str) -> (u64, u64) {
    let Some(line) = summary.lines().find(|l| l.starts_with("generated code")) else {
        return (0, 0);
    };
    let generated = summary_text::required(summary, "generated code");
    let named = line
        .split(", ")
        .find(|part| part.contains("of them named"))
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no named count: {line}"));
    (generated, named)
}

/// Removes the perf map and jitdump that the process `pid` of the run in `out` left in /tmp.
fn remove_jit_files(out: &Path) {
    if let Some(pid) = summary_text::count(&summary(out), "pid") {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
        let _ = std::fs::remove_file(format!("/tmp/jit-{pid}.dump"));
    }
}

/// The frames of `stack` from `from` on (the frames below the C library's start), or `None`
/// if `from` is not in it.
fn from<'a>(stack: &'a [String], from: &str) -> Option<&'a [String]> {
    let at = stack.iter().position(|f| f == from)?;
    Some(&stack[at..])
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_jit_of_our_own_with_and_without_frame_pointers() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("cc", &["--version"]), ("go", &["version"])]) {
        return;
    }
    let dir = scratch("jit-frames");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/behaviour");
    let exe = dir.join("jit_frames");
    // Built as a distribution builds: -O2, no frame pointers.
    unwind_test_support::run(
        Command::new("cc")
            .args(["-O2", "-I"])
            .arg(&src)
            .arg(src.join("jit_frames.c"))
            .arg("-o")
            .arg(&exe),
    );
    let with_fp = [
        "__libc_start_call_main",
        "main",
        "via_fp",
        "jit_with_fp",
        "burn_fp",
    ]
    .map(String::from);
    let without_fp = [
        "__libc_start_call_main",
        "main",
        "via_no_fp",
        "jit_without_fp",
        "burn_no_fp",
    ]
    .map(String::from);
    // With jit_without_fp's unwind table in the jitdump file, then without it.
    for tables in [true, false] {
        let out = dir.join(if tables { "tables" } else { "no-tables" });
        let mut cmd = record(&out, &["--frequency", "5000"], &[exe.to_str().unwrap()]);
        // In its directory: the program writes its jitdump file where it runs.
        cmd.current_dir(&dir);
        if !tables {
            cmd.env("UNWIND_TEST_NO_UNWINDING_INFO", "1");
        }
        let (status, stderr) = run(&mut cmd, None);
        assert!(status.success(), "{stderr}");
        check_outputs("jit_frames", &out);
        remove_jit_files(&out);
        let lines = folded(&out);
        let (mut crossed, mut stopped, mut through) = (0, 0, 0);
        for (stack, n) in &lines {
            match stack.last().map(String::as_str) {
                Some("burn_fp") => {
                    // Crossed by its frame pointer, every time, to main and the C library's
                    // start.
                    assert_eq!(
                        from(stack, "__libc_start_call_main"),
                        Some(&with_fp[..]),
                        "{stack:?}"
                    );
                    crossed += n;
                }
                Some("burn_no_fp") => {
                    // Crossed by its jitdump rules; or, without them, its caller cannot be
                    // proven: the walk stops at the generated function (the stack holds it and
                    // its callee only, under the process's name), or, if a frame pointer
                    // happened to lead on, it leads to the true caller.
                    let tail = &stack[stack.len().saturating_sub(2)..];
                    if stack.len() <= 3 && tail == ["jit_without_fp", "burn_no_fp"] {
                        stopped += n;
                    } else {
                        assert_eq!(
                            from(stack, "__libc_start_call_main"),
                            Some(&without_fp[..]),
                            "a caller that is not jit_without_fp's: {stack:?}"
                        );
                        through += n;
                    }
                }
                _ => {}
            }
        }
        let summary = summary(&out);
        println!(
            "jit_frames (jitdump tables: {tables}): burn_fp {crossed} samples, all crossed to \
             main; burn_no_fp {stopped} stopped at jit_without_fp, {through} through to main; \
             NoRule stops {}",
            summary_text::required(&summary, "NoRule")
        );
        // 400 ms of CPU in each at 5 kHz: about 2,000 samples each.
        assert!(crossed >= 500, "{crossed} samples in burn_fp: {lines:?}");
        assert!(
            stopped + through >= 500,
            "{} samples in burn_no_fp",
            stopped + through
        );
        if tables {
            assert_eq!(stopped, 0, "jit_without_fp's jitdump rules were not used");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A JIT that describes its code through the GDB JIT interface (`behaviour/jit_gdb.c`, x86_64):
/// gcc-built code without frame pointers placed in anonymous memory, registered after it was
/// made executable, as LLVM's ORC JIT does. Every sample in the host's callback crosses both
/// generated functions to `main`, named by the symbol file (the thread that watches the
/// interface sees the registration, which no hook does); none has another caller.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_jit_describing_its_code_through_the_gdb_interface() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("cc", &["--version"]), ("go", &["version"])]) {
        return;
    }
    let dir = scratch("jit-gdb");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/behaviour");
    let exe = dir.join("jit_gdb");
    unwind_test_support::run(
        Command::new("cc")
            .args(["-O2", "-I"])
            .arg(&src)
            .arg(src.join("jit_gdb.c"))
            .arg("-o")
            .arg(&exe),
    );
    let jitted = dir.join("jitted.so");
    unwind_test_support::build_jitted_object("cc", &[], &jitted);
    let expected = [
        "__libc_start_call_main",
        "main",
        "via_jit",
        "jitted_call",
        "jitted_inner",
        "burn_in_host",
    ]
    .map(String::from);
    let out = dir.join("out");
    let mut cmd = record(
        &out,
        &["--frequency", "5000"],
        &[exe.to_str().unwrap(), jitted.to_str().unwrap()],
    );
    let (status, stderr) = run(&mut cmd, None);
    assert!(status.success(), "{stderr}");
    check_outputs("jit_gdb", &out);
    let lines = folded(&out);
    let (mut crossed, mut other) = (0, 0);
    for (stack, n) in &lines {
        if stack.last().map(String::as_str) != Some("burn_in_host") {
            continue;
        }
        if from(stack, "__libc_start_call_main") == Some(&expected[..]) {
            crossed += n;
        } else {
            // Before the registration was seen (the watcher looks every 20 ms): the walk stops
            // at the generated code, never through a caller that is not its own.
            assert!(
                stack.len() <= 3 && !stack.iter().any(|f| f == "main"),
                "a caller that is not the generated code's: {stack:?}"
            );
            other += n;
        }
    }
    println!("jit_gdb: burn_in_host {crossed} samples crossed to main, {other} stopped");
    // 600 ms of CPU at 5 kHz: about 3,000 samples.
    assert!(crossed >= 1000, "{crossed} samples crossed: {lines:?}");
    assert!(
        other * 20 <= crossed + other,
        "{other} of {} stopped",
        crossed + other
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// LLVM's JIT, `lli` (ORC; its objects registered through the GDB JIT interface as relocatable
/// files whose unwind sections' relocations gdb, and we, apply): a recursive function in IR
/// (`jit/fib.ll`). Nearly every sample completes through the generated `fib` frames to lli's
/// `main`, every generated frame named by the registered objects' symbols.
#[test]
fn llvm_jit_code_registered_through_the_gdb_interface() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("lli", &["--version"]), ("go", &["version"])]) {
        return;
    }
    let dir = scratch("lli");
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jit/fib.ll");
    let out = dir.join("out");
    let mut cmd = record(
        &out,
        &["--frequency", "2000"],
        &["lli", program.to_str().unwrap()],
    );
    let (status, stderr) = run(&mut cmd, None);
    assert!(status.success(), "{stderr}");
    check_outputs("lli", &out);
    let summary = summary(&out);
    let (stored, complete) = completeness(&summary);
    let lines = folded(&out);
    let (mut through, mut in_fib) = (0, 0);
    for (stack, n) in &lines {
        if stack.last().map(String::as_str) != Some("fib") {
            continue;
        }
        in_fib += n;
        // lli's own main, then the program's main and its fib frames.
        let at = stack
            .iter()
            .position(|f| f.starts_with("llvm::orc::runAsMain("));
        let generated = at.map(|at| &stack[at + 1..]);
        if let Some(g) = generated {
            if g.first().map(String::as_str) == Some("main") && g[1..].iter().all(|f| f == "fib") {
                through += n;
            }
        }
    }
    println!(
        "lli: {complete} of {stored} samples complete; {in_fib} with the leaf in fib, {through} \
         of them through every generated frame to lli's runAsMain; {}",
        summary
            .lines()
            .find(|l| l.starts_with("generated code"))
            .unwrap_or("")
    );
    assert!(in_fib >= 300, "{in_fib} samples in fib: {lines:?}");
    // Before the watcher sees the registration (every 20 ms), the walk stops at fib.
    assert!(through * 100 >= in_fib * 90, "{through} of {in_fib}");
    assert!(complete * 100 >= stored * 90, "{complete} of {stored}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A CPU-bound script: a recursive function, and sorts through V8's builtins.
const SPIN_JS: &str = "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
    let a = []; for (let i = 0; i < 200000; i++) a.push((i * 7919) % 10007);\n\
    const t = Date.now(); let s = 0;\n\
    while (Date.now() - t < 1500) { s += fib(22); a.sort((x, y) => x - y); }\n\
    console.log(s > 0);\n";

#[test]
fn node_builtins_named_and_javascript_frames_crossed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("node", &["--version"]), ("go", &["version"])]) {
        return;
    }
    let dir = scratch("node");
    let script = dir.join("spin.js");
    std::fs::write(&script, SPIN_JS).unwrap();
    let script = script.to_str().unwrap();

    // No flags: the builtins (node maps part of its own code a second time, where the loader
    // does not list it) are named by node's symbols.
    let out = dir.join("plain");
    // In the scratch directory: node writes its V8 log (`isolate-*.log`) where it runs.
    let (status, stderr) = run(record(&out, &[], &["node", script]).current_dir(&dir), None);
    assert!(status.success(), "{stderr}");
    let total = check_outputs("node", &out);
    let lines = folded(&out);
    let leaves = |f: &dyn Fn(&str) -> bool| -> u64 {
        lines
            .iter()
            .filter(|(s, _)| s.last().is_some_and(|l| f(l)))
            .map(|(_, n)| n)
            .sum()
    };
    let builtins = leaves(&|l| l.starts_with("Builtins_"));
    let unnamed_node = leaves(&|l| l.starts_with("node+0x"));
    let unknown = leaves(&|l| l.starts_with("[unknown]"));
    println!(
        "node: {builtins} of {total} leaves in V8's builtins, {unnamed_node} in node's code \
         unnamed, {unknown} unknown (code the JIT made, no perf map)\n{}",
        summary(&out)
    );
    assert!(builtins * 4 >= total, "{builtins} of {total} in builtins");
    assert_eq!(unnamed_node, 0, "leaves in node's code without a name");
    // The summary counts the leaves in the JIT's code, which nothing names here.
    let (generated, named) = generated_leaves(&summary(&out));
    assert!(
        generated >= unknown * 9 / 10 && generated > 0 && named == 0,
        "generated code: {generated} samples, {named} named; {unknown} unknown leaves"
    );
    remove_jit_files(&out);

    // --perf-basic-prof: the JIT's frames crossed by their frame pointers, named by the map.
    let out = dir.join("perf-basic-prof");
    let (status, stderr) = run(
        record(&out, &[], &["node", "--perf-basic-prof", script]).current_dir(&dir),
        None,
    );
    assert!(status.success(), "{stderr}");
    let total = check_outputs("node --perf-basic-prof", &out);
    let summary = summary(&out);
    remove_jit_files(&out);
    let (stored, complete) = completeness(&summary);
    let lines = folded(&out);
    let js = samples_with(&lines, |f| f.starts_with("JS:"));
    let fib = samples_with(&lines, |f| f.starts_with("JS:") && f.contains("fib"));
    println!(
        "node --perf-basic-prof: {complete} of {stored} complete; JavaScript functions named \
         in {js} of {total} samples, fib in {fib}"
    );
    assert!(
        complete * 10 >= stored * 9,
        "{complete} of {stored} complete:\n{summary}"
    );
    // The script's functions (the loop and the comparison, calling the sort builtins, and fib)
    // are on most stacks.
    assert!(
        js * 2 >= total,
        "JavaScript named in {js} of {total} samples"
    );
    assert!(fib * 100 >= total, "fib named in {fib} of {total} samples");
    let (generated, named) = generated_leaves(&summary);
    println!("  generated code: {generated} leaves, {named} named");
    assert!(
        generated > 0 && named * 10 >= generated * 9,
        "generated code: {generated} leaves, {named} named"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const SPIN_JAVA: &str = "public class Spin {\n\
    static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
    public static void main(String[] a) {\n\
        long t = System.currentTimeMillis(); long s = 0;\n\
        while (System.currentTimeMillis() - t < 1500) { s += fib(22); }\n\
        System.out.println(s > 0);\n\
    }\n\
}\n";

#[test]
fn java_with_frame_pointers_and_its_perf_map() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[
        ("java", &["-version"]),
        ("javac", &["-version"]),
        ("go", &["version"]),
    ]) {
        return;
    }
    let dir = scratch("java");
    std::fs::write(dir.join("Spin.java"), SPIN_JAVA).unwrap();
    unwind_test_support::run(Command::new("javac").arg("Spin.java").current_dir(&dir));
    let out = dir.join("out");
    let (status, stderr) = run(
        record(
            &out,
            &[],
            &[
                "java",
                "-XX:+PreserveFramePointer",
                "-XX:+UnlockDiagnosticVMOptions",
                "-XX:+DumpPerfMapAtExit",
                "-cp",
                ".",
                "Spin",
            ],
        )
        .current_dir(&dir),
        None,
    );
    assert!(status.success(), "{stderr}");
    let total = check_outputs("java", &out);
    let summary = summary(&out);
    remove_jit_files(&out);
    let (stored, complete) = completeness(&summary);
    let lines = folded(&out);
    let fib = samples_with(&lines, |f| f.contains("Spin.fib"));
    println!("java: {complete} of {stored} complete, Spin.fib named in {fib} of {total}");
    assert!(
        complete * 10 >= stored * 9,
        "{complete} of {stored} complete:\n{summary}"
    );
    assert!(
        fib * 10 >= total * 8,
        "Spin.fib named in {fib} of {total}:\n{summary}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Python `version` (such as "3.12"): `pythonVERSION` on the PATH, else pyenv's.
fn python(version: &str) -> Option<PathBuf> {
    let name = format!("python{version}");
    if unwind_test_support::tool_runs_with(&name, &["--version"]) {
        return Some(PathBuf::from(name));
    }
    let root = Command::new("pyenv").arg("root").output().ok()?;
    let versions = PathBuf::from(String::from_utf8_lossy(&root.stdout).trim()).join("versions");
    let mut found: Vec<PathBuf> = std::fs::read_dir(versions)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{version}."))
        })
        .map(|e| e.path().join("bin").join(&name))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

const SPIN_PY: &str = "import time\n\
    def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\n\
    t = time.time(); s = 0\n\
    while time.time() - t < 1.5: s += fib(20)\n\
    print(s > 0)\n";

#[test]
fn python_perf_trampolines_are_crossed_and_named() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("go", &["version"])]) {
        return;
    }
    let dir = scratch("python-perf");
    let script = dir.join("spin.py");
    std::fs::write(&script, SPIN_PY).unwrap();
    for (version, switch) in [("3.12", "perf"), ("3.13", "perf_jit")] {
        let Some(python) = python(version) else {
            unwind_test_support::missing(&format!("python{version} (pyenv install {version})"));
            continue;
        };
        let out = dir.join(version);
        let (status, stderr) = run(
            &mut record(
                &out,
                &[],
                &[
                    python.to_str().unwrap(),
                    "-X",
                    switch,
                    script.to_str().unwrap(),
                ],
            ),
            None,
        );
        assert!(status.success(), "{stderr}");
        let total = check_outputs(&format!("python{version} -X {switch}"), &out);
        let summary = summary(&out);
        remove_jit_files(&out);
        let (stored, complete) = completeness(&summary);
        let lines = folded(&out);
        let named = samples_with(&lines, |f| f.starts_with("py::fib:"));
        println!(
            "python{version} -X {switch}: {complete} of {stored} complete, py::fib in {named} \
             of {total}"
        );
        assert!(
            complete * 100 >= stored * 95,
            "python{version}: {complete} of {stored} complete:\n{summary}"
        );
        assert!(
            named * 10 >= total * 9,
            "python{version}: py::fib in {named} of {total}:\n{summary}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
