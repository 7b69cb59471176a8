//! The profiler on an architecture this host emulates, written once and run per row of the
//! targets table (`profiler/tests/<row>.rs` names the row, [`super::ROW`]): that architecture's
//! preload library (`libunwind_profiler_preload.so`) in its programs, run under qemu-user on
//! this host. Three programs, each with two threads ("alpha" and "beta") and `main` doing
//! distinct named work (`X_work` calling `X_mix`, fixed amounts):
//!
//! - the C program tests/cross/named_work.c built with the row's cross compiler at `-O2`, as
//!   Debian builds by default (on armv7, Thumb-2 without unwind tables for the program's own
//!   functions: its `.ARM.exidx` holds one entry, `_start`'s EXIDX_CANTUNWIND, which covers the
//!   rest of `.text`, so walks stop at the leaf; on aarch64 with `.eh_frame`, as everywhere);
//! - the same with `-funwind-tables`;
//! - the same with `-g` instead (armv7: no EXIDX entries, but a `.debug_frame` in the file, which
//!   the unwinder reads from disk);
//! - the Rust program tests/cross/named_work.rs built with `rustc -O` for the row (`std::thread`s);
//! - under `unwind-profiler record`, forked workers (`forked_workers_under_record`);
//! - continuous profiling by the preload library alone: a period a second and the pull
//!   endpoint read from the host while the program runs
//!   (`periods_and_the_pull_endpoint_of_the_preload_library_alone`);
//! - and, sampled by the wall clock, tests/cross/blocking.c (Debian's default build), whose
//!   threads spend the run blocked in glibc's blocking calls: 99 % of its samples must reach
//!   the thread's function or `main` (see `c_program_blocked_in_system_calls_with_the_wall_clock`).
//!
//! Each runs once alone and once with the preload library (qemu `-E LD_PRELOAD=...`: the
//! variable is set for the guest only); both must exit 0 with the same stdout. The pprof profile,
//! read back per thread (its `thread`/`thread_id` labels), must have samples from every thread,
//! most of each thread's samples in its own `X_mix` and none in another thread's, and names
//! demangled; with unwind tables 95 % of those samples must show the callers (`X_thread` or the
//! Rust closure, then `X_work`, then `X_mix`; `main` for the main thread), and at most 5 % may
//! have a frame in no known module. The figures of each run are printed (`--nocapture` shows
//! them).
//!
//! The programs run through qemu directly (no binfmt_misc needed), alone and with the preload
//! library; `forked_workers_under_record` runs qemu under this host's `record`. Needs the row's
//! cross compiler, qemu, its Rust standard library and its preload library (scripts/test builds
//! it first): `cargo build --release --target TRIPLE -p unwind-profiler-preload &&
//! cargo test --release -p unwind-profiler --test ROW -- --nocapture`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use prost::Message;
use unwind_profiler::output::pprof::proto;
use unwind_test_support::target::{self, Target};
use unwind_test_support::{run, tool_runs};

/// The row of the targets table: its toolchain, sysroot and emulator.
fn row() -> &'static Target {
    target::by_name(super::ROW)
}
/// A run that takes longer has hung (each takes a few seconds under qemu).
const TIMEOUT: Duration = Duration::from_secs(300);

/// Held by each test: the runs are timed for the report, one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The target directory: this test runs from `TARGET/release/deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// The row's preload library, which must have been built (see the module docs).
fn preload_library() -> PathBuf {
    built_library("libunwind_profiler_preload.so", "unwind-profiler-preload")
}

/// The row's build of the preload library with the allocator's hooks.
fn alloc_library() -> PathBuf {
    built_library(
        "libunwind_profiler_preload_alloc.so",
        "unwind-profiler-preload-alloc",
    )
}

/// The row's `file`, the build of `package`, which must have been built.
fn built_library(file: &str, package: &str) -> PathBuf {
    let lib = row().release_dir(&target_dir()).join(file);
    assert!(
        lib.is_file(),
        "{} is missing: build it first with `cargo build --release --target {} -p {package}`",
        lib.display(),
        row().rust_target
    );
    lib
}

/// A fresh directory for one test's programs and outputs.
fn work_dir(test: &str) -> PathBuf {
    let dir = target_dir()
        .join(format!("{}-profiler-test", super::ROW))
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cross")
        .join(name)
}

/// Whether the cross tools are installed; reports the missing ones (a failure under CI).
fn tools_present(rust: bool) -> bool {
    if !row().usable("the profiler's cross tests", &[]) {
        return false;
    }
    // rustc links through the cross gcc too.
    if rust && !tool_runs("rustc") {
        unwind_test_support::missing("rustc");
        return false;
    }
    if rust && !rust_std_for_row() {
        let t = row().rust_target;
        unwind_test_support::missing(&format!(
            "the {t} Rust standard library (rustup target add {t})"
        ));
        return false;
    }
    true
}

/// Whether rustc has the row's standard library.
fn rust_std_for_row() -> bool {
    let Ok(out) = Command::new("rustc")
        .args(["--print", "target-libdir", "--target", row().rust_target])
        .output()
    else {
        return false;
    };
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.filter_map(|e| e.ok()).any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("libstd-") && n.ends_with(".rlib"))
        })
    })
}

/// Runs the row's program `exe` under qemu (with `args`), with the preload library
/// writing its outputs to `profile_dir` if given and the profiler's settings `settings`
/// (`UNWIND_PROFILER_*` variables); fails if it hangs. Returns its output and how long it ran.
fn run_under_qemu(
    exe: &Path,
    args: &[&str],
    profile: Option<(&Path, &Path)>,
    settings: &[(&str, &str)],
) -> (Output, Duration) {
    // The variables for the guest only: the host's qemu must not preload the guest's library.
    let mut env: Vec<(String, String)> = Vec::new();
    if let Some((library, dir)) = profile {
        env.push(("LD_PRELOAD".into(), library.display().to_string()));
        env.push(("UNWIND_PROFILER_OUTPUT".into(), dir.display().to_string()));
        env.extend(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut cmd = row().command(exe, &env);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("UNWIND_PROFILER_")) {
        cmd.env_remove(k);
    }
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!("{cmd:?} ran for more than {TIMEOUT:?}: hung");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let elapsed = started.elapsed();
    (child.wait_with_output().unwrap(), elapsed)
}

/// A thread of the programs: how to find it in the profile and the call chain of its work, root
/// first, ending with its `X_mix`.
struct ThreadSpec {
    /// The thread's name, or `None` for the main thread (found by its tid, the process id: its
    /// name under qemu is the emulator's).
    name: Option<&'static str>,
    chain: [&'static str; 3],
}

const C_THREADS: [ThreadSpec; 3] = [
    ThreadSpec {
        name: Some("alpha"),
        chain: ["alpha_thread", "alpha_work", "alpha_mix"],
    },
    ThreadSpec {
        name: Some("beta"),
        chain: ["beta_thread", "beta_work", "beta_mix"],
    },
    ThreadSpec {
        name: None,
        chain: ["main", "main_work", "main_mix"],
    },
];

const RUST_THREADS: [ThreadSpec; 3] = [
    ThreadSpec {
        name: Some("alpha"),
        chain: [
            "named_work::main::{{closure}}",
            "named_work::alpha_work",
            "named_work::alpha_mix",
        ],
    },
    ThreadSpec {
        name: Some("beta"),
        chain: [
            "named_work::main::{{closure}}",
            "named_work::beta_work",
            "named_work::beta_mix",
        ],
    },
    ThreadSpec {
        name: None,
        chain: [
            "named_work::main",
            "named_work::main_work",
            "named_work::main_mix",
        ],
    },
];

/// One sample of the pprof profile: its thread and its function names, root first.
struct Sample {
    thread: String,
    tid: i64,
    frames: Vec<String>,
    /// Samples of this stack and thread (the first value).
    count: u64,
    /// Every value (a heap profile's four).
    values: Vec<i64>,
}

/// The samples of the gzipped pprof profile at `path`.
fn pprof_samples(path: &Path) -> Vec<Sample> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()),
        &mut bytes,
    )
    .unwrap();
    let p = proto::Profile::decode(&bytes[..]).expect("not a pprof profile");
    let string = |i: i64| p.string_table[i as usize].clone();
    let functions: HashMap<u64, String> =
        p.function.iter().map(|f| (f.id, string(f.name))).collect();
    let locations: HashMap<u64, &proto::Location> = p.location.iter().map(|l| (l.id, l)).collect();
    p.sample
        .iter()
        .map(|s| {
            // Locations leaf first, lines innermost first: reversed, root first.
            let mut frames: Vec<String> = s
                .location_id
                .iter()
                .flat_map(|id| locations[id].line.iter())
                .map(|l| functions[&l.function_id].clone())
                .collect();
            frames.reverse();
            let label = |key: &str| s.label.iter().find(|l| string(l.key) == key);
            Sample {
                thread: label("thread").map_or_else(String::new, |l| string(l.str)),
                tid: label("thread_id").map_or(0, |l| l.num),
                frames,
                count: s.value[0] as u64,
                values: s.value.clone(),
            }
        })
        .collect()
}

/// The number after `key` at the start of a line of the summary (`pid`, `NoRule`, ...).
fn summary_number(summary: &str, key: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(key)?.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key} line in the summary:\n{summary}"))
}

fn contains_run(frames: &[String], run: &[&str]) -> bool {
    frames
        .windows(run.len())
        .any(|w| w.iter().zip(run).all(|(a, b)| a == b))
}

fn pct(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

/// Runs `exe` alone and under the preload library, checks the runs and the profile (see the
/// module docs), prints the figures, and fails naming every check that did not hold.
/// `callers`: whether the program has unwind tables, so that stacks must show callers.
fn check_program(label: &str, exe: &Path, dir: &Path, threads: &[ThreadSpec], callers: bool) {
    let out = dir.join("profile");
    std::fs::create_dir_all(&out).unwrap();
    let (plain, plain_time) = run_under_qemu(exe, &[], None, &[]);
    let (profiled, profiled_time) = run_under_qemu(exe, &[], Some((&preload_library(), &out)), &[]);
    let stderr = String::from_utf8_lossy(&profiled.stderr);
    assert!(
        plain.status.success(),
        "{label} failed alone: {}",
        String::from_utf8_lossy(&plain.stderr)
    );
    assert!(
        profiled.status.success(),
        "{label} failed under the profiler: {}",
        stderr
    );
    let stdout = String::from_utf8_lossy(&plain.stdout);
    assert_eq!(
        String::from_utf8_lossy(&profiled.stdout),
        stdout,
        "{label}: the program's output changed under the profiler"
    );
    assert_eq!(stdout.lines().count(), 3, "{label} printed {stdout:?}");
    assert!(
        stderr.contains(" samples of 3 threads; summary in "),
        "{label}: the profiler did not report 3 threads at exit: {stderr}"
    );
    let outputs = unwind_profiler::output::Outputs::paths(&out, "profile");
    for f in outputs.all() {
        let len = std::fs::metadata(f).map_or(0, |m| m.len());
        assert!(len > 0, "{label}: {} is missing or empty", f.display());
    }
    let summary = std::fs::read_to_string(&outputs.summary).unwrap();
    let pid = summary_number(&summary, "pid ") as i64;
    let samples = pprof_samples(&outputs.pprof);
    let total: u64 = samples.iter().map(|s| s.count).sum();

    println!("{label}: qemu ran {plain_time:.2?} alone, {profiled_time:.2?} profiled");
    println!(
        "{label}: {total} samples ({} periods of 1 ms CPU time: the kernel checks CPU timers once \
         per tick); stops: NoRule {}, CantUnwind {}; mean depth {}",
        summary_number(&summary, "periods"),
        summary_number(&summary, "NoRule"),
        summary_number(&summary, "CantUnwind"),
        summary
            .lines()
            .find_map(|l| l.strip_prefix("mean stack depth"))
            .unwrap_or("?")
            .trim()
    );
    let mut failures = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failures.push(what);
        }
    };
    check(total > 0, format!("{label}: no samples"));
    let mangled: Vec<&String> = samples
        .iter()
        .flat_map(|s| &s.frames)
        .filter(|f| f.starts_with("_ZN"))
        .collect();
    check(
        mangled.is_empty(),
        format!("{label}: mangled names {mangled:?}"),
    );
    let unknown: u64 = samples
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.starts_with("[unknown]")))
        .map(|s| s.count)
        .sum();
    let reach_main: u64 = samples
        .iter()
        .filter(|s| s.frames.iter().any(|f| f == "main"))
        .map(|s| s.count)
        .sum();
    let reach_start: u64 = samples
        .iter()
        .filter(|s| s.frames.first().is_some_and(|f| f == "_start"))
        .map(|s| s.count)
        .sum();
    println!(
        "{label}: {unknown} samples ({:.1} %) with a frame in no known module; {reach_main} \
         ({:.1} %) reach main, {reach_start} ({:.1} %) start at _start",
        pct(unknown, total),
        pct(reach_main, total),
        pct(reach_start, total)
    );
    if callers {
        check(
            unknown * 100 <= total * 5,
            format!("{label}: {unknown} of {total} samples with a frame in no known module"),
        );
    }
    let mixes: Vec<&str> = threads.iter().map(|t| t.chain[2]).collect();
    for t in threads {
        let who = t.name.unwrap_or("main thread");
        let mine: Vec<&Sample> = samples
            .iter()
            .filter(|s| match t.name {
                Some(name) => s.thread == name,
                None => s.tid == pid,
            })
            .collect();
        let all: u64 = mine.iter().map(|s| s.count).sum();
        let sum = |f: &dyn Fn(&Sample) -> bool| -> u64 {
            mine.iter().filter(|s| f(s)).map(|s| s.count).sum()
        };
        let mix = t.chain[2];
        let in_mix = sum(&|s| s.frames.iter().any(|f| f == mix));
        let others = sum(&|s| {
            s.frames
                .iter()
                .any(|f| f != mix && mixes.contains(&f.as_str()))
        });
        let chained =
            sum(&|s| s.frames.iter().any(|f| f == mix) && contains_run(&s.frames, &t.chain));
        println!(
            "{label}: {who}: {all} samples ({:.1} % of the profile); {in_mix} ({:.1} %) in \
             {mix}, {chained} of them under {} <- {}",
            pct(all, total),
            pct(in_mix, all),
            t.chain[1],
            t.chain[0]
        );
        check(all > 0, format!("{label}: no samples from {who}"));
        check(
            in_mix * 2 > all,
            format!("{label}: {who}: only {in_mix} of {all} samples in {mix}"),
        );
        check(
            others == 0,
            format!("{label}: {who}: {others} samples in another thread's work"),
        );
        if callers {
            check(
                chained * 100 >= in_mix * 95,
                format!(
                    "{label}: {who}: {chained} of {in_mix} samples in {mix} under {:?}",
                    t.chain
                ),
            );
        }
    }
    if !failures.is_empty() {
        let folded = std::fs::read_to_string(&outputs.folded).unwrap_or_default();
        panic!(
            "{}\nsummary:\n{summary}\nfolded:\n{folded}",
            failures.join("\n")
        );
    }
}

/// Builds tests/cross/`name`.c with the row's cross compiler at `-O2` and `extra` flags (the
/// functions are named from the symbol table, which the build keeps).
fn build_c_program(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    run(Command::new(row().cc())
        .args(["-O2", "-Wall", "-Wextra", "-Werror"])
        .args(extra)
        .arg("-o")
        .arg(&exe)
        .arg(source(&format!("{name}.c")))
        .arg("-lpthread"));
    exe
}

/// Builds tests/cross/named_work.c (see [`build_c_program`]).
fn build_c(dir: &Path, extra: &[&str]) -> PathBuf {
    build_c_program(dir, "named_work", extra)
}

/// Debian's default build: on armv7 only the leaf of each stack is known (see the module
/// docs), so the threads, their work and the program's output are checked, not the callers;
/// elsewhere the callers too ([`super::DEFAULT_BUILD_HAS_TABLES`]).
#[test]
fn c_program_default_build() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    let dir = work_dir("c-default");
    let exe = build_c(&dir, &[]);
    check_program(
        "C -O2",
        &exe,
        &dir,
        &C_THREADS,
        super::DEFAULT_BUILD_HAS_TABLES,
    );
}

#[test]
fn c_program_with_unwind_tables() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    let dir = work_dir("c-unwind-tables");
    let exe = build_c(&dir, &["-funwind-tables"]);
    check_program("C -O2 -funwind-tables", &exe, &dir, &C_THREADS, true);
}

/// The default build with `-g`: the callers come from `.debug_frame`.
#[test]
fn c_program_with_debug_info() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    let dir = work_dir("c-debug-info");
    let exe = build_c(&dir, &["-g"]);
    check_program("C -O2 -g", &exe, &dir, &C_THREADS, true);
}

#[test]
fn rust_program() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(true) {
        return;
    }
    let dir = work_dir("rust");
    let exe = dir.join("named_work");
    run(Command::new("rustc")
        .args(["--edition", "2021", "--crate-name", "named_work"])
        .args(["--target", row().rust_target, "-O", "-C", "debuginfo=1"])
        .arg("-C")
        .arg(format!("linker={}", row().cc()))
        .arg("-o")
        .arg(&exe)
        .arg(source("named_work.rs")));
    check_program("Rust release", &exe, &dir, &RUST_THREADS, true);
}

/// The threads of tests/cross/blocking.c, each blocked in `X_wait` for the run, in the call
/// named after it.
const BLOCKING_THREADS: [&str; 10] = [
    "sleep",
    "clocksleep",
    "condwait",
    "mutex",
    "futex",
    "read",
    "write",
    "poll",
    "epoll",
    "sem",
];

/// The function each thread of tests/cross/blocking.c blocks in, called by its `X_thread`.
fn blocking_wait(thread: &str) -> String {
    match thread {
        "epoll" => "epoll_wait_for_input".into(),
        "sem" => "sem_wait_for_post".into(),
        t => format!("{t}_wait"),
    }
}

/// Wall-clock samples of a program whose threads spend the run blocked in the C library's
/// blocking calls (tests/cross/blocking.c: `nanosleep`, `clock_nanosleep`, a condition
/// variable's and a mutex's futex waits, a raw `futex` wait, `read`, `write`, `poll`,
/// `epoll_wait`, `sem_wait`, and `pthread_join` in `main`), built as Debian builds it (armhf
/// glibc marks most of these paths `EXIDX_CANTUNWIND`, so there each walk goes through
/// functions whose rules come from their instructions). At least 99 % of the samples must be complete:
/// a thread's reach its `X_thread` right under the thread's entry (glibc's `start_thread`: the
/// profiler's trampoline between them is left out), the main thread's `main` under `_start`; every thread's samples
/// must be mostly in its own `X_wait`, under its `X_thread`.
#[test]
fn c_program_blocked_in_system_calls_with_the_wall_clock() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    let dir = work_dir("c-blocking");
    let exe = build_c_program(&dir, "blocking", &[]);
    let out = dir.join("profile");
    std::fs::create_dir_all(&out).unwrap();
    let args = ["2"];
    let (plain, _) = run_under_qemu(&exe, &args, None, &[]);
    let (profiled, took) = run_under_qemu(
        &exe,
        &args,
        Some((&preload_library(), &out)),
        &[("UNWIND_PROFILER_CLOCK", "wall")],
    );
    let stderr = String::from_utf8_lossy(&profiled.stderr);
    assert!(plain.status.success(), "blocking failed alone");
    assert!(
        profiled.status.success(),
        "blocking failed profiled: {stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&profiled.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "the program's output changed under the profiler"
    );
    let outputs = unwind_profiler::output::Outputs::paths(&out, "profile");
    let summary = std::fs::read_to_string(&outputs.summary).unwrap();
    let pid = summary_number(&summary, "pid ") as i64;
    let samples = pprof_samples(&outputs.pprof);
    let total: u64 = samples.iter().map(|s| s.count).sum();
    let trampoline = "unwind_profiler::threads::trampoline";
    // A thread's stack: its entry's frames in glibc (on armv7 `start_thread`, where the walk
    // ends; on aarch64 `thread_start`, the clone's entry, then `start_thread`; Debian's
    // cross libraries name neither), then the thread's function: the profiler's trampoline
    // between them is left out.
    let entries = if row().name == "armv7" { 1 } else { 2 };
    let complete = |s: &Sample| {
        if s.tid == pid {
            s.frames.first().is_some_and(|f| f == "_start") && s.frames.iter().any(|f| f == "main")
        } else {
            s.frames.len() > entries
                && s.frames[..entries].iter().all(|f| {
                    f.starts_with("libc.so.6+")
                        || f.ends_with("start_thread")
                        || f == "thread_start"
                })
                && s.frames[entries].ends_with("_thread")
                && s.frames[entries] != "start_thread"
                && !s.frames.iter().any(|f| f == trampoline)
        }
    };
    let complete_samples: u64 = samples
        .iter()
        .filter(|s| complete(s))
        .map(|s| s.count)
        .sum();
    println!(
        "blocking: qemu ran {took:.2?} profiled; {total} samples, {complete_samples} ({:.2} %) complete",
        pct(complete_samples, total)
    );
    let mut failures = Vec::new();
    for thread in BLOCKING_THREADS.iter().copied().chain([""]) {
        let (who, chain) = if thread.is_empty() {
            (
                "main thread".to_string(),
                vec!["main".to_string(), "main_wait".into()],
            )
        } else {
            (
                thread.to_string(),
                vec![format!("{thread}_thread"), blocking_wait(thread)],
            )
        };
        let mine: Vec<&Sample> = samples
            .iter()
            .filter(|s| {
                if thread.is_empty() {
                    s.tid == pid
                } else {
                    s.thread == thread
                }
            })
            .collect();
        let all: u64 = mine.iter().map(|s| s.count).sum();
        let chain: Vec<&str> = chain.iter().map(String::as_str).collect();
        let waiting: u64 = mine
            .iter()
            .filter(|s| complete(s) && contains_run(&s.frames, &chain))
            .map(|s| s.count)
            .sum();
        // The most frequent stack of the thread, leaf last.
        let top = mine
            .iter()
            .max_by_key(|s| s.count)
            .map(|s| s.frames.join(";"));
        println!(
            "blocking: {who}: {all} samples, {waiting} ({:.1} %) complete under {chain:?}; most: {}",
            pct(waiting, all),
            top.unwrap_or_default()
        );
        if all == 0 || waiting * 100 < all * 90 {
            failures.push(format!(
                "{who}: {waiting} of {all} samples complete under {chain:?}"
            ));
        }
    }
    if complete_samples * 100 < total * 99 {
        failures.push(format!(
            "{complete_samples} of {total} samples complete (want 99 %)"
        ));
    }
    if !failures.is_empty() {
        let folded = std::fs::read_to_string(&outputs.folded).unwrap_or_default();
        panic!(
            "{}\nsummary:\n{summary}\nfolded:\n{folded}",
            failures.join("\n")
        );
    }
}

/// Under `unwind-profiler record` (this host's command, the program through qemu): the
/// session works across the emulator (the socket, the `memfd`s), and workers forked without
/// `exec` from a multi-threaded parent (profiler/tests/behaviour/forked_workers.c, built with
/// `-funwind-tables`) are processes of the one profile, each function at its share.
#[test]
fn forked_workers_under_record() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    let dir = work_dir("forked-workers");
    let behaviour = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/behaviour");
    let exe = dir.join("forked_workers");
    run(Command::new(row().cc())
        .args(["-O0", "-funwind-tables", "-pthread", "-I"])
        .arg(&behaviour)
        .arg(behaviour.join("forked_workers.c"))
        .arg("-o")
        .arg(&exe));
    let (out, stderr) = record_through_qemu(&dir, &exe, &[]);
    assert!(stderr.contains("of 5 processes"), "{stderr}");
    let text = std::fs::read_to_string(out.join("profile.folded")).unwrap();
    let lines = unwind_profiler::output::folded::parse(&text);
    for (function, processes) in [
        ("parent_work", 1),
        ("thread_work", 1),
        ("worker_work", 3),
        ("grandchild_work", 1),
    ] {
        let n: u64 = lines
            .iter()
            .filter(|(s, _)| s.iter().any(|f| f == function))
            .map(|(_, n)| n)
            .sum();
        println!("{function}: {n} samples");
        // 200 ms of CPU in each process's function: 200 periods at 1 kHz.
        assert!(n >= 100 * processes, "{function}: {n} samples:\n{text}");
    }
}

/// Allocation profiling in the emulated program (the preload library alone,
/// `UNWIND_PROFILER_ALLOC`): profiler/tests/allocations/known.c, 100 MiB a chain (about 200
/// samples each: a spread of 7 %), built with `-funwind-tables`. Each chain's estimated
/// `alloc_space` is within 25 % of what it allocated, its `inuse_space` within 25 % of what it
/// keeps (exactly 0 for the chains that free all), and every stack of a chain's function goes
/// on to `main`.
#[test]
fn allocations_of_a_known_program() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    let dir = work_dir("allocations");
    let exe = dir.join("known");
    run(Command::new(row().cc())
        .args(["-O2", "-g", "-funwind-tables", "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/allocations/known.c")));
    let out = dir.join("profile");
    let (output, took) = run_under_qemu(
        &exe,
        &["100"],
        Some((&alloc_library(), &out)),
        &[("UNWIND_PROFILER_ALLOC", "1")],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let samples = pprof_samples(&out.join("profile.heap.pb.gz"));
    println!(
        "{}: {} allocation sites in {took:?}",
        super::ROW,
        samples.len()
    );
    for (chain, function) in [
        ("churn", "make_node"),
        ("calloc", "zeroed_tables"),
        ("realloc", "grow_buffer"),
        ("aligned", "aligned_blocks"),
        ("kept", "keep_live"),
        ("strdup", "leak_strings"),
    ] {
        let truth: Vec<u64> = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{chain} alloc ")))
            .unwrap_or_else(|| panic!("no {chain} line: {stdout}"))
            .split(" live ")
            .map(|n| n.trim().parse().unwrap())
            .collect();
        let mine: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.frames.iter().any(|f| f == function))
            .collect();
        for s in &mine {
            assert!(
                s.frames.iter().any(|f| f == "main"),
                "{function}: a stack that does not reach main: {:?}",
                s.frames
            );
        }
        let alloc: i64 = mine.iter().map(|s| s.values[1]).sum();
        let live: i64 = mine.iter().map(|s| s.values[3]).sum();
        println!(
            "  {chain}: allocated {} estimated {alloc}, live {} estimated {live}",
            truth[0], truth[1]
        );
        let within = |e: i64, t: u64| (e as f64 / t as f64 - 1.0).abs() <= 0.25;
        assert!(within(alloc, truth[0]), "{chain}: {alloc} for {}", truth[0]);
        if truth[1] == 0 {
            assert_eq!(live, 0, "{chain} freed everything");
        } else {
            assert!(
                within(live, truth[1]),
                "{chain}: {live} live for {}",
                truth[1]
            );
        }
    }
}

/// Continuous profiling inside the emulated program: the preload library alone (no `record`)
/// cuts a period a second on a thread of its own in the guest (`UNWIND_PROFILER_PERIOD`) and
/// serves the pull endpoint (`UNWIND_PROFILER_PPROF_LISTEN`), which this test reads from the
/// host while the program runs (tests/cross/named_work.c with `-funwind-tables`, its work 20
/// times over). The window holds the threads' work; every sample stored is in a period file.
#[test]
fn periods_and_the_pull_endpoint_of_the_preload_library_alone() {
    use std::io::{BufRead, Read, Write};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    let dir = work_dir("periods");
    let exe = build_c(&dir, &["-funwind-tables"]);
    let out = dir.join("profile");
    let library = preload_library().display().to_string();
    let output = out.display().to_string();
    let env = [
        ("LD_PRELOAD", library.as_str()),
        ("UNWIND_PROFILER_OUTPUT", output.as_str()),
        ("UNWIND_PROFILER_PERIOD", "1s"),
        ("UNWIND_PROFILER_PPROF_LISTEN", "127.0.0.1:0"),
    ];
    let mut cmd = row().command(&exe, &env);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("UNWIND_PROFILER_")) {
        cmd.env_remove(k);
    }
    cmd.arg("20").stdout(Stdio::null()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let url = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("the program never said where it serves:\n{said}");
        }
        said.push_str(&line);
        if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
            break url.to_owned();
        }
    };
    // The rest of its standard error, read on so that the program never blocks on it.
    let rest = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .write_all(b"GET /debug/pprof/profile?seconds=1 HTTP/1.1\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let window = dir.join("window.pb.gz");
    std::fs::write(&window, &answer[split + 4..]).unwrap();
    let window = pprof_samples(&window);
    let in_window: u64 = window.iter().map(|s| s.count).sum();
    let alpha: u64 = window
        .iter()
        .filter(|s| s.frames.iter().any(|f| f == "alpha_mix"))
        .map(|s| s.count)
        .sum();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!("{cmd:?} ran for more than {TIMEOUT:?}: hung");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    let said = said + &rest.join().unwrap();
    assert!(status.success(), "{said}");
    let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
    let stored = summary_number(&summary, "samples stored");
    let files: Vec<PathBuf> = std::fs::read_dir(out.join("profile-periods"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let in_periods: u64 = files
        .iter()
        .flat_map(|f| pprof_samples(f))
        .map(|s| s.count)
        .sum();
    println!(
        "{}: {in_window} samples in the 1 s window ({alpha} in alpha_mix); {} period files \
         holding {in_periods} samples; {stored} stored; {:.1} s",
        super::ROW,
        files.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(in_window >= 100, "{in_window} samples in the window");
    assert!(
        alpha >= in_window / 10,
        "{alpha} of {in_window} in alpha_mix"
    );
    assert!(files.len() >= 3, "{} period files:\n{said}", files.len());
    assert_eq!(in_periods, stored, "samples in the periods and stored");
}

/// Runs the row's program `exe` through qemu under this host's `record`, its outputs in
/// `dir/profile`; returns that directory and `record`'s stderr.
fn record_through_qemu(dir: &Path, exe: &Path, args: &[&str]) -> (PathBuf, String) {
    record_through_qemu_with(dir, exe, args, &[])
}

/// [`record_through_qemu`] with the variables `env` set for `record` (no debuginfod server
/// unless they name one).
fn record_through_qemu_with(
    dir: &Path,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (PathBuf, String) {
    let record = target_dir().join("release").join("unwind-profiler");
    assert!(
        record.is_file(),
        "{} is missing: build it first (cargo build --release -p unwind-profiler)",
        record.display()
    );
    let out = dir.join("profile");
    let mut cmd = Command::new(&record);
    cmd.env_remove("LD_LIBRARY_PATH")
        .env_remove("QEMU_LD_PREFIX")
        .env_remove("DEBUGINFOD_URLS");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("UNWIND_PROFILER_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    let done = cmd
        .arg("record")
        .arg("--library")
        .arg(preload_library())
        .arg("--output")
        .arg(&out)
        .arg("--")
        .args(row().launcher())
        .arg(exe)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr).into_owned();
    assert!(done.status.success(), "{stderr}");
    (out, stderr)
}

/// A library of the row's architecture, stripped, whose debug file only a debuginfod server
/// has (elfutils', started on loopback over a directory holding it): its static functions,
/// which only the debug file names, are named in the profile of a program run through qemu
/// under this host's `record`, and the summary says the server gave them. The build id is all
/// the server is asked by, whatever the architecture.
#[test]
fn debuginfod_names_a_guest_library() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) || !row().usable("debug files", &["objcopy", "strip"]) {
        return;
    }
    for tool in ["debuginfod", "curl"] {
        if !tool_runs(tool) {
            unwind_test_support::missing(tool);
            return;
        }
    }
    let dir = work_dir("debuginfod");
    let symbols = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/symbols");
    let lib = dir.join("libwork.so");
    run(Command::new(row().cc())
        .args(["-g", "-O1", "-fPIC", "-shared", "-Wl,--build-id=sha1", "-o"])
        .arg(&lib)
        .arg(symbols.join("work.c")));
    let exe = dir.join("work");
    run(Command::new(row().cc())
        .args(["-g", "-O1", "-o"])
        .arg(&exe)
        .arg(symbols.join("main.c"))
        .arg(format!("-L{}", dir.display()))
        .args(["-lwork", "-Wl,-rpath,$ORIGIN"]));
    let served = dir.join("served");
    std::fs::create_dir_all(&served).unwrap();
    run(Command::new(row().tool("objcopy"))
        .arg("--only-keep-debug")
        .arg(&lib)
        .arg(served.join("libwork.so.debug")));
    run(Command::new(row().tool("strip"))
        .arg("--strip-all")
        .arg(&lib));
    let id: String = unwind_samples::debug_files::build_id_of(&lib)
        .expect("a build id")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let server = super::debuginfod_server::serve(&served, &dir.join("db.sqlite"), &id);
    let cache = dir.join("cache");
    let env = [
        ("DEBUGINFOD_URLS", server.url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", cache.to_str().unwrap()),
    ];
    let (out, stderr) = record_through_qemu_with(&dir, &exe, &[], &env);
    let text = std::fs::read_to_string(out.join("profile.folded")).unwrap();
    let lines = unwind_profiler::output::folded::parse(&text);
    let total: u64 = lines.iter().map(|(_, n)| n).sum();
    for f in ["hidden_spin_a", "hidden_spin_b"] {
        let n: u64 = lines
            .iter()
            .filter(|(s, _)| s.iter().any(|x| x == f))
            .map(|(_, n)| n)
            .sum();
        assert!(
            n * 4 >= total,
            "{f} in {n} of {total} samples:\n{text}\n{stderr}"
        );
    }
    let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
    assert!(
        summary
            .lines()
            .any(|l| l.contains("libwork.so:")
                && l.contains(&format!("debug file from {}", server.url))),
        "{summary}"
    );
    assert!(cache.join(&id).join("debuginfo").is_file());
}

/// A signal handler's samples (tests/cross/signal_handler.c, a `SIGALRM` handler spinning, run
/// through qemu under this host's `record`): the frame between the handler and the code it
/// interrupted is the signal trampoline, named ([`super::SIGNAL_TRAMPOLINE`]: qemu-user's
/// aarch64 one is a page of its own, `[sigreturn]`, whose first byte is the handler's return
/// address), and the walk goes on through it to `_start`.
#[test]
fn signal_trampoline_named_under_record() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    let dir = work_dir("signal-trampoline");
    let exe = build_c_program(&dir, "signal_handler", &["-funwind-tables"]);
    let (out, _) = record_through_qemu(&dir, &exe, &[]);
    let text = std::fs::read_to_string(out.join("profile.folded")).unwrap();
    let lines = unwind_profiler::output::folded::parse(&text);
    let (mut in_handler, mut through) = (0u64, 0u64);
    for (frames, n) in &lines {
        let Some(at) = frames.iter().position(|f| f == "handler") else {
            continue;
        };
        in_handler += n;
        if at >= 2
            && frames[at - 1] == super::SIGNAL_TRAMPOLINE
            && frames[0] == "_start"
            && frames.iter().any(|f| f == "main")
        {
            through += n;
        }
    }
    println!(
        "signal handler: {through} of {in_handler} samples through {} to _start",
        super::SIGNAL_TRAMPOLINE
    );
    assert!(
        in_handler >= 50,
        "{in_handler} samples in the handler:\n{text}"
    );
    assert!(
        through * 100 >= in_handler * 95,
        "{through} of {in_handler} through the trampoline:\n{text}"
    );
}

/// The entries binutils sees in the ARM library `file`, as the row's `objdump -d` decodes its
/// instructions: the targets of its `bl` and `blx`, the addresses it makes relative to the PC
/// (`ldr rN, [pc, #M]` of a literal, then `add rN, pc`), and the Thumb function
/// pointers its `R_ARM_RELATIVE` relocations store. A judge, written apart from
/// `unwind_dwarf::called`, of the functions that one finds between the unwind tables' (empty
/// for other architectures).
fn call_targets(file: &Path) -> std::collections::HashSet<u64> {
    use object::{Object, ObjectSection};
    let mut targets = std::collections::HashSet::new();
    if super::ROW != "armv7" {
        return targets;
    }
    let data = std::fs::read(file).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let word_at = |at: u64| {
        elf.sections().find_map(|s| {
            let i = usize::try_from(at.checked_sub(s.address())?).ok()?;
            let w = s.data().ok()?.get(i..i + 4)?;
            Some(u64::from(u32::from_le_bytes(w.try_into().unwrap())))
        })
    };
    let out = Command::new(row().tool("objdump"))
        .arg("-d")
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "objdump -d {}", file.display());
    // The literal each register was loaded with, by the register's name.
    let mut literals: HashMap<String, u64> = HashMap::new();
    // `   15c74:\tf7ff ffe2 \tbl\t15c3c <__enable_execute_stack@@GCC_3.4.2+0x4>`
    // `   e70c8:\t4814      \tldr\tr0, [pc, #80]\t@ (e711c <__gnu_Unwind_Find_exidx+0x60>)`
    // `   e70d2:\t4478      \tadd\tr0, pc`
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
        let hex = |f: Option<&&str>| {
            f.and_then(|t| t.trim_start_matches("@ (").split(' ').next())
                .and_then(|t| u64::from_str_radix(t.trim_end_matches(':'), 16).ok())
        };
        let (Some(at), Some(op), operands) = (hex(fields.first()), fields.get(2), fields.get(3))
        else {
            continue;
        };
        let register = operands.and_then(|o| o.split(',').next()).unwrap_or("");
        match *op {
            "bl" | "blx" => {
                if let Some(t) = hex(operands) {
                    targets.insert(t);
                }
            }
            "ldr" | "ldr.w" if operands.is_some_and(|o| o.contains("[pc, #")) => {
                match hex(fields.get(4)).and_then(word_at) {
                    Some(v) => literals.insert(register.to_owned(), v),
                    None => literals.remove(register),
                };
            }
            "add" if operands.is_some_and(|o| o.ends_with(", pc")) => {
                if let Some(v) = literals.remove(register) {
                    targets.insert((v + at + 4) & 0xffff_fffe);
                }
            }
            _ => {}
        }
    }
    for (at, r) in elf.dynamic_relocations().into_iter().flatten() {
        let relative = object::RelocationFlags::Elf {
            r_type: object::elf::R_ARM_RELATIVE,
        };
        if let Some(v) = word_at(at).filter(|v| r.flags() == relative && v & 1 == 1) {
            targets.insert(v & !1);
        }
    }
    targets
}

/// Checks the frames of `lines` (folded stacks) in the row's sysroot libraries: every one named
/// `LIB+0xOFFSET` is at a function's start, in LIB's unwind tables or, between them, a target
/// of a call or a function pointer as binutils sees it ([`call_targets`]), never inside a
/// function its unwind tables describe but at a call's target; those in code nothing describes
/// (named by their address: nothing tells where their function starts) are at most
/// `most_undescribed` % of the library frames. Returns the samples' frames named one of
/// `symbols`, those named by an unwind entry's start, and those by a call's target.
fn check_library_frames(
    what: &str,
    lines: &[(Vec<String>, u64)],
    symbols: &[&str],
    most_undescribed: u64,
) -> (u64, u64, u64) {
    let sysroot = Path::new(row().sysroot.expect("an emulated row has a sysroot"));
    type Known = (
        Vec<unwind_dwarf::functions::Function>,
        std::collections::HashSet<u64>,
    );
    let mut functions_of: HashMap<String, Known> = HashMap::new();
    let (mut by_start, mut by_call, mut by_symbol, mut undescribed, mut wrong) =
        (0u64, 0u64, 0u64, 0u64, Vec::new());
    for (frames, n) in lines {
        for f in frames {
            let Some((lib, offset)) = f.split_once("+0x") else {
                continue;
            };
            let file = sysroot.join("lib").join(lib);
            if !file.is_file() {
                continue;
            }
            let (functions, calls) = functions_of.entry(lib.to_owned()).or_insert_with(|| {
                let data = std::fs::read(&file).unwrap();
                (
                    unwind_dwarf::functions::functions_of_unwind_tables(&data),
                    call_targets(&file),
                )
            });
            let Ok(o) = u64::from_str_radix(offset, 16) else {
                wrong.push(f.clone());
                continue;
            };
            if functions.iter().any(|f| f.start == o) {
                by_start += n;
            } else if calls.contains(&o) {
                by_call += n;
            } else if functions.iter().any(|f| f.start < o && o < f.end) {
                wrong.push(f.clone());
            } else {
                undescribed += n;
            }
        }
        by_symbol += n * frames
            .iter()
            .filter(|f| symbols.contains(&f.as_str()))
            .count() as u64;
    }
    println!(
        "{what} library frames: {by_symbol} named {symbols:?}, {by_start} by their function's \
         start in the unwind tables, {by_call} by a call's target, {undescribed} in code nothing \
         describes, {} otherwise",
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "{what}: named by an address inside a function: {wrong:?}"
    );
    assert!(
        undescribed * 100 <= (by_start + by_call + by_symbol + undescribed) * most_undescribed,
        "{what}: {undescribed} library frames in code nothing describes"
    );
    (by_symbol, by_start, by_call)
}

/// The frames of C++ exceptions thrown and caught (profiler/tests/programs/exceptions.cpp, built
/// with the row's g++), recorded through qemu: libstdc++'s (`__cxa_throw`) and libgcc's
/// unwinder's (`_Unwind_RaiseException`) frames named as [`check_library_frames`] checks. On
/// armv7, some are named by a function that only calls show (libgcc's unwinder's own).
#[test]
fn cpp_library_frames_named_under_record() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    // binutils judges the functions found by calls.
    if !row().usable("checking functions found by calls", &["objdump"]) {
        return;
    }
    let dir = work_dir("cpp-library-names");
    let exe = dir.join("exceptions");
    run(Command::new(row().cxx())
        .args(["-O2", "-g", "-pthread", "-funwind-tables", "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/exceptions.cpp")));
    let (out, _) = record_through_qemu(&dir, &exe, &["2"]);
    let text = std::fs::read_to_string(out.join("profile.folded")).unwrap();
    let lines = unwind_profiler::output::folded::parse(&text);
    let (by_symbol, _, by_call) = check_library_frames(
        "C++",
        &lines,
        &["__cxa_throw", "_Unwind_RaiseException"],
        super::UNDESCRIBED_LIBRARY_FRAMES[1],
    );
    assert!(
        by_symbol > 0,
        "__cxa_throw and _Unwind_RaiseException unnamed:\n{text}"
    );
    assert!(
        super::ROW != "armv7" || by_call > 0,
        "no frame named by a function only calls show:\n{text}"
    );
}

/// The frames of a C program's time in glibc (tests/cross/sorting.c: qsort, rand, snprintf),
/// recorded by this host's `record` through qemu (`-L` the row's sysroot, which `record` reads
/// the guest's libraries under). Every frame in a library of the sysroot is named by its
/// function: by its symbol where `.dynsym` has one (`qsort_r`, `rand`), else as `LIB+0xSTART`,
/// START being the start of the function the library's unwind tables, or on armv7 the calls
/// between them, put it in, never an address inside it. Code none of them describes (armhf
/// glibc's `.iplt`) can only be named by its address: at most `UNDESCRIBED_LIBRARY_FRAMES` %.
/// `go tool pprof -top` lists the same names as the folded stacks (the pprof file carries
/// them), and the summary says the names came from the sysroot's files.
#[test]
fn library_frames_named_under_record() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools_present(false) {
        return;
    }
    if !unwind_test_support::tool_runs_with("go", &["version"]) {
        unwind_test_support::missing("go (go tool pprof)");
        return;
    }
    // binutils judges the functions found by calls.
    if !row().usable("checking functions found by calls", &["objdump"]) {
        return;
    }
    let dir = work_dir("library-names");
    let exe = build_c_program(&dir, "sorting", &["-funwind-tables"]);
    let (out, _) = record_through_qemu(&dir, &exe, &[]);
    let text = std::fs::read_to_string(out.join("profile.folded")).unwrap();
    let lines = unwind_profiler::output::folded::parse(&text);
    let sysroot = Path::new(row().sysroot.expect("an emulated row has a sysroot"));
    let (by_symbol, by_start, _) = check_library_frames(
        "C",
        &lines,
        &["qsort_r", "rand"],
        super::UNDESCRIBED_LIBRARY_FRAMES[0],
    );
    let names: std::collections::BTreeSet<String> =
        lines.iter().flat_map(|(f, _)| f.iter().cloned()).collect();
    assert!(by_symbol > 0, "qsort_r and rand unnamed:\n{text}");
    assert!(by_start > 0, "no static function of libc sampled:\n{text}");
    // go tool pprof lists every name the folded stacks have, and no other.
    let top = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-nodefraction=0",
            "-nodecount=100000",
        ])
        .arg(out.join("profile.pb.gz"))
        .output()
        .unwrap();
    let top = String::from_utf8_lossy(&top.stdout);
    let listed: std::collections::BTreeSet<String> = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let mut rest = l.trim_start();
            for _ in 0..5 {
                rest = rest.split_once(char::is_whitespace)?.1.trim_start();
            }
            Some(rest.to_owned())
        })
        .collect();
    assert_eq!(listed, names, "go tool pprof -top:\n{top}");
    let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
    let libc = summary
        .lines()
        .find(|l| l.trim_start().starts_with("/lib/libc.so.6:"))
        .unwrap_or_else(|| panic!("no names line for libc:\n{summary}"));
    assert!(
        libc.contains(&sysroot.join("lib/libc.so.6").display().to_string()),
        "{libc}"
    );
    // The pprof file's mappings keep the paths the program loaded, not the host's.
    let raw = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(out.join("profile.pb.gz"))
        .output()
        .unwrap();
    let raw = String::from_utf8_lossy(&raw.stdout);
    let mappings = raw.split("Mappings").nth(1).unwrap_or("");
    assert!(mappings.contains(" /lib/libc.so.6 "), "{mappings}");
    assert!(
        !mappings.contains(&sysroot.display().to_string()),
        "{mappings}"
    );
}
