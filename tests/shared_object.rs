//! The library as a shared object, loaded the two ways a profiler is: `dlopen`ed and
//! `LD_PRELOAD`ed, on x86_64 and (under qemu-arm) armv7.
//!
//! 1. The guard (tests/shared_object/guard.c): a C program loads the test agent
//!    (`libunwind_agent.so`), samples 4 threads at 5 kHz for 10 s (two registered at start, one
//!    registered later, one never), `dlopen`s a library with TLS half-way, and counts what
//!    happens inside the library's signal path: allocations and frees (the malloc family is
//!    interposed, so libc's and the loader's calls count too), locks through the pthread API, and
//!    (x86_64, by syscall user dispatch) system calls. All must be 0, and the stacks must reach
//!    the thread's start.
//! 2. The machine code: the closure of `agent_handle_signal` under direct calls, read from
//!    `objdump -d` of the shared object, may call nothing outside the object but `mem*`, and has
//!    no system call instruction, no indirect call and no panic path (tests/shared_object/
//!    machine_code.rs). The same analysis of `agent_init`, which allocates, must find violations:
//!    the check is not blind.
//! 3. The profiler's preload library (x86_64 and armv7): the closure of its signal handler
//!    (`on_signal`) under the same rules, allowing only `clock_gettime`, `pthread_self` and
//!    `__errno_location` besides `mem*`; the same for its allocation hooks' sampling path
//!    (`alloc_sampling::sampled`), and nothing at all outside the library for a `free` that
//!    finds its address among the sampled ones.

#[path = "shared_object/machine_code.rs"]
mod machine_code;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use machine_code::{closure, register_calls_self_test, Isa};
use unwind_test_support::target::{self, Target};
use unwind_test_support::{run, Checks};

const SECONDS: &str = "10";
const HZ: &str = "5000";
/// A run that takes longer than this has hung (a deadlock in a handler, say).
const TIMEOUT: Duration = Duration::from_secs(180);

/// Runs `cmd` to completion or kills it after [`TIMEOUT`]; returns (exited in time with status
/// 0, stdout, stderr).
fn run_bounded(cmd: &mut Command) -> (bool, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match status {
        Some(s) => (s.success(), stdout, stderr),
        None => (false, stdout, format!("killed after {TIMEOUT:?}\n{stderr}")),
    }
}

/// Builds `package`'s shared object `file` in release mode for `t` in the workspace `root`
/// ([`Target::release_build`]).
fn build_library(root: &Path, t: &Target, package: &str, file: &str) -> PathBuf {
    let (mut cmd, dir) = t.release_build(root, package);
    run(&mut cmd);
    dir.join(file)
}

/// The `key=value` fields of the guard's summary line.
fn fields(stdout: &str) -> Option<std::collections::HashMap<String, String>> {
    let line = stdout.lines().find(|l| l.starts_with("guard: "))?;
    Some(
        line.split_whitespace()
            .filter_map(|f| f.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// How one platform runs the guard: its row of the targets table (how its programs run here,
/// natively or under qemu-user).
struct Platform {
    target: &'static Target,
}

impl Platform {
    fn name(&self) -> &'static str {
        self.target.name
    }

    /// Whether system calls are counted (syscall user dispatch; not under qemu-user).
    fn counts_syscalls(&self) -> bool {
        self.target.runner.is_none()
    }

    /// Whether every stack must end at the thread's start (`_start`, `__clone3`). Not on armv7:
    /// Debian's armhf glibc marks `start_thread`, `__libc_start_main` and the functions it has no
    /// tables for EXIDX_CANTUNWIND, where walks end; there, the stacks whose frame 0 is in the
    /// program must reach `main` or `worker_main`.
    fn to_thread_start(&self) -> bool {
        self.target.name != "armv7"
    }
}

/// Runs the guard three ways: the agent `dlopen`ed, `LD_PRELOAD`ed, and preloaded with the
/// profiler's allocation hooks (`alloc`, `libunwind_profiler_preload_alloc.so`) after it,
/// sampling allocations alone every 4 KiB, the guard's allocator forwarding to them: signals
/// land inside the hooks' sampling path, and the agent's walks must go through it.
fn guard_runs(
    p: &Platform,
    guard: &Path,
    agent: &Path,
    alloc: &Path,
    tls: &Path,
    out: &Path,
    checks: &mut Checks,
) {
    for mode in ["dlopen", "preload", "alloc"] {
        let report = out.join(format!("{}-{mode}.txt", p.name()));
        let agent_path = agent.display().to_string();
        let both = format!("{agent_path}:{}", alloc.display());
        let alloc_out = out.join(format!("{}-alloc-profile", p.name()));
        let _ = std::fs::remove_dir_all(&alloc_out);
        let alloc_out_path = alloc_out.display().to_string();
        let env: Vec<(&str, &str)> = match mode {
            "preload" => vec![("LD_PRELOAD", &agent_path)],
            "alloc" => vec![
                ("LD_PRELOAD", &both),
                ("GUARD_NEXT_ALLOCATOR", "1"),
                ("UNWIND_PROFILER_ALLOC_ONLY", "1"),
                ("UNWIND_PROFILER_ALLOC_INTERVAL", "4k"),
                ("UNWIND_PROFILER_QUIET", "1"),
                ("UNWIND_PROFILER_OUTPUT", &alloc_out_path),
            ],
            _ => Vec::new(),
        };
        let mut cmd = p.target.command(guard, &env);
        cmd.arg(if mode == "alloc" { "preload" } else { mode })
            .arg(if mode == "dlopen" {
                agent.as_os_str()
            } else {
                "-".as_ref()
            })
            .arg(tls)
            .args([SECONDS, HZ])
            .arg(&report);
        let started = Instant::now();
        let (ok, stdout, stderr) = run_bounded(&mut cmd);
        let what = format!("{} {mode}", p.name());
        println!(
            "{what}: {} ({:.1} s)",
            stdout.trim(),
            started.elapsed().as_secs_f64()
        );
        checks.check(
            ok,
            format!("{what}: the program ran to its end (no hang, no crash)"),
        );
        if !ok {
            println!("{stderr}");
            continue;
        }
        let f = fields(&stdout).unwrap_or_default();
        let n = |k: &str| f.get(k).and_then(|v| v.parse::<u64>().ok());
        let handled = n("handled").unwrap_or(0);
        checks.check(
            handled >= 1000,
            format!("{what}: {handled} signals handled (>= 1000)"),
        );
        for k in ["allocs", "frees", "locks"] {
            checks.check(
                n(k) == Some(0),
                format!(
                    "{what}: {k} inside the signal path = {:?} (want 0)",
                    f.get(k)
                ),
            );
        }
        match f.get("syscalls").map(String::as_str) {
            Some("unavailable") if !p.counts_syscalls() => println!(
                "  note {what}: system calls not counted here (no syscall user dispatch under \
                 qemu-user); the machine-code check covers them"
            ),
            Some("unavailable") => unwind_test_support::missing(
                "syscall user dispatch (Linux 5.11+), to count system calls in the signal path",
            ),
            other => checks.check(
                other == Some("0"),
                format!(
                    "{what}: system calls inside the signal path = {other:?} (want 0; first: {:?})",
                    f.get("first_syscall")
                ),
            ),
        }
        let text = std::fs::read_to_string(&report).unwrap_or_default();
        let samples: Vec<&str> = text.lines().filter(|l| l.starts_with("stop=")).collect();
        let refused = text
            .lines()
            .find_map(|l| l.split("not unwound ").nth(1))
            .and_then(|v| v.split(',').next()?.trim().parse::<u64>().ok())
            .unwrap_or(0);
        checks.check(
            samples.len() >= 1000,
            format!("{what}: {} samples unwound (>= 1000)", samples.len()),
        );
        checks.check(
            refused > 0,
            format!("{what}: {refused} signals to unregistered threads refused (> 0)"),
        );
        // A sample line: `stop=... frames=N module!function;module!function;...`.
        let frames = |l: &str| -> Vec<(String, String)> {
            l.split_whitespace()
                .nth(2)
                .unwrap_or("")
                .split(';')
                .filter_map(|f| f.split_once('!'))
                .map(|(m, f)| (m.to_string(), f.to_string()))
                .collect()
        };
        let ours = |m: &str| m.starts_with("guard");
        let reaches_main = |l: &str| {
            frames(l)
                .iter()
                .any(|(m, f)| ours(m) && (f == "main" || f == "worker_main"))
        };
        // The thread's start: glibc's `clone3` (its public name; `__clone3` is an alias) or the
        // program's `_start`; where the C library
        // has no symbols (Debian's arm64 cross libraries), an unnamed libc frame at which the
        // walk ended by the end-of-stack rule (glibc marks only its thread entry so).
        let at_start = |l: &str| {
            frames(l).last().is_some_and(|(m, f)| {
                f == "clone3"
                    || f == "__clone3"
                    || (ours(m) && f == "_start")
                    || (m == "libc.so.6" && f.starts_with("?+") && l.starts_with("stop=EndOfStack"))
            })
        };
        let judged: Vec<&str> = if p.to_thread_start() {
            samples.clone()
        } else {
            samples
                .iter()
                .copied()
                .filter(|l| frames(l).first().is_some_and(|(m, _)| ours(m)))
                .collect()
        };
        let complete = judged
            .iter()
            .filter(|l| reaches_main(l))
            .filter(|l| !p.to_thread_start() || at_start(l))
            .count();
        let share = complete as f64 / judged.len().max(1) as f64;
        checks.check(
            share >= 0.99 && judged.len() >= 500,
            format!(
                "{what}: {complete} of {} stacks {} reach main or worker_main{} ({:.2} %, want >= 99 %)",
                judged.len(),
                if p.to_thread_start() { "" } else { "interrupted in the program's code" },
                if p.to_thread_start() { " and the thread's start" } else { "" },
                share * 100.0,
            ),
        );
        if share < 0.99 {
            for l in judged.iter().filter(|l| !reaches_main(l)).take(5) {
                println!("    {l}");
            }
        }
        if mode == "alloc" {
            let summary =
                std::fs::read_to_string(alloc_out.join("profile.summary.txt")).unwrap_or_default();
            unwind_test_support::check_allocation_summary(&summary, 100, &what, checks);
        }
    }
}

/// Functions outside the object that the profiler's handler may call besides `mem*`: POSIX
/// lists `clock_gettime` as async-signal-safe (a vDSO call, no system call, on x86_64 and ARM
/// Linux); glibc's `pthread_self` and `__errno_location` read the thread pointer.
const PROFILER_HANDLER_CALLS: [&str; 3] = ["clock_gettime", "pthread_self", "__errno_location"];

/// The violations of `c` but calls to [`PROFILER_HANDLER_CALLS`], each printed (the first 10).
fn beyond_handler_calls(c: &machine_code::Closure) -> Vec<&String> {
    let violations: Vec<&String> = c
        .violations
        .iter()
        .filter(|v| {
            !PROFILER_HANDLER_CALLS
                .iter()
                .any(|f| v.starts_with(&format!("calls {f} outside")))
        })
        .collect();
    for v in violations.iter().take(10) {
        println!("    {v}");
    }
    violations
}

/// The profiler's preload library (`libunwind_profiler_preload.so`): the closure of its signal
/// handler, `unwind_profiler::sampler::on_signal`, under the same rules as the agent's, but for
/// the three calls of [`PROFILER_HANDLER_CALLS`].
fn profiler_handler_checks(name: &str, preload: &Path, isa: Isa, checks: &mut Checks) {
    let c = closure(preload, isa, "_ZN15unwind_profiler7sampler9on_signal");
    println!(
        "{name} profiler signal handler (on_signal): {} functions, {} instructions, external calls \
         {:?}, {} indirect jumps",
        c.functions, c.instructions, c.external, c.indirect_jumps
    );
    let violations = beyond_handler_calls(&c);
    checks.check(
        violations.is_empty(),
        format!(
            "{name}: the profiler's signal handler calls nothing outside the library but mem*, \
             clock_gettime, pthread_self and __errno_location, makes no system call or indirect \
             call and cannot panic ({} violations)",
            violations.len()
        ),
    );
    checks.check(
        c.functions >= 5 && c.external.contains_key("clock_gettime"),
        format!(
            "{name}: the closure holds the unwinder and the handler's clock ({} functions, \
             external {:?})",
            c.functions, c.external
        ),
    );
}

/// The handler of a signal the program has an action for too (`SIGTRAP` with `perf-sigtrap`
/// timers, the sampling signal once the program sets its own action for it),
/// `unwind_profiler::sampler::on_signal_chained`: the sampling path under the rules of
/// [`profiler_handler_checks`], and the passing on of the program's own signals, the one place
/// allowed `sigaction` (as glibc's `__sigaction`, which no interposer of `sigaction` receives),
/// `raise` and `pthread_sigmask` (async-signal-safe in POSIX) and an indirect call (the program's
/// handler), all inside `pass_on_to_program`.
fn profiler_sigtrap_checks(name: &str, preload: &Path, isa: Isa, checks: &mut Checks) {
    let c = closure(
        preload,
        isa,
        "_ZN15unwind_profiler7sampler17on_signal_chained",
    );
    println!(
        "{name} profiler chained handler (on_signal_chained): {} functions, external calls {:?}",
        c.functions, c.external
    );
    let violations: Vec<&String> = c
        .violations
        .iter()
        .filter(|v| {
            let sampling = PROFILER_HANDLER_CALLS
                .iter()
                .any(|f| v.starts_with(&format!("calls {f} outside")));
            let passing_on = v.contains("pass_on_to_program")
                && (v.starts_with("calls __sigaction outside")
                    || v.starts_with("calls raise outside")
                    || v.starts_with("calls pthread_sigmask outside")
                    || v.contains("indirect")
                    || v.starts_with("call through"));
            !sampling && !passing_on
        })
        .collect();
    for v in violations.iter().take(10) {
        println!("    {v}");
    }
    checks.check(
        violations.is_empty() && c.functions > 5,
        format!(
            "{name}: the profiler's chained handler does what its sampling handler does, and \
             calls sigaction, raise, pthread_sigmask and the program's handler only to pass the \
             program's own signals on ({} violations, {} functions)",
            violations.len(),
            c.functions
        ),
    );
}

/// The allocation hooks' paths in the preload library: a sampled allocation
/// (`unwind_profiler::alloc_sampling::sampled`: the live table's insert, the unwind from the
/// hook, the ring) under the rules of [`profiler_handler_checks`], and a `free` that finds its
/// address in the live table (`LiveHeap::remove_slow`) with no call out of the library at all.
fn profiler_allocation_checks(name: &str, preload: &Path, isa: Isa, checks: &mut Checks) {
    let c = closure(preload, isa, "_ZN15unwind_profiler14alloc_sampling7sampled");
    println!(
        "{name} allocation sample (alloc_sampling::sampled): {} functions, {} instructions, \
         external calls {:?}",
        c.functions, c.instructions, c.external
    );
    let violations = beyond_handler_calls(&c);
    checks.check(
        violations.is_empty() && c.functions >= 5 && c.external.contains_key("clock_gettime"),
        format!(
            "{name}: a sampled allocation's path (alloc_sampling::sampled, {} functions) calls \
             nothing outside the library but mem*, clock_gettime, pthread_self and \
             __errno_location, makes no system call or indirect call and cannot panic ({} \
             violations)",
            c.functions,
            violations.len()
        ),
    );
    let free = closure(
        preload,
        isa,
        "_ZN15unwind_profiler14alloc_sampling8LiveHeap11remove_slow",
    );
    for v in free.violations.iter().take(10) {
        println!("    {v}");
    }
    checks.check(
        free.violations.is_empty() && free.external.is_empty(),
        format!(
            "{name}: a free of a sampled address (LiveHeap::remove_slow) calls nothing outside \
             the library ({} violations, external {:?})",
            free.violations.len(),
            free.external
        ),
    );
}

fn machine_code_checks(name: &str, agent: &Path, isa: Isa, checks: &mut Checks) {
    let c = closure(agent, isa, "agent_handle_signal");
    println!(
        "{name} signal path (agent_handle_signal): {} functions, {} instructions, external calls \
         {:?}, {} indirect jumps",
        c.functions, c.instructions, c.external, c.indirect_jumps
    );
    for v in c.violations.iter().take(10) {
        println!("    {v}");
    }
    checks.check(
        c.violations.is_empty(),
        format!(
            "{name}: the signal path's machine code calls nothing outside the library but mem*, \
             makes no system call or indirect call and cannot panic ({} violations)",
            c.violations.len()
        ),
    );
    checks.check(
        c.functions >= 5,
        format!(
            "{name}: the closure holds the unwinder ({} functions)",
            c.functions
        ),
    );
    let init = closure(agent, isa, "agent_init");
    let sees_alloc = init
        .violations
        .iter()
        .any(|v| v.contains("calls malloc") || v.contains("calls __rust_alloc"));
    checks.check(
        sees_alloc,
        format!(
            "{name}: the same check finds agent_init's allocations ({} violations)",
            init.violations.len()
        ),
    );
}

/// Builds the guard program and the TLS-using library with compiler `cc` into `out` (names
/// ending in `suffix`): `(guard, libtls.so)`.
fn build_c_programs(cc: &str, src: &Path, out: &Path, suffix: &str) -> (PathBuf, PathBuf) {
    let guard = out.join(format!("guard{suffix}"));
    run(Command::new(cc)
        .args(["-O2", "-g", "-Wall", "-o"])
        .arg(&guard)
        .arg(src.join("guard.c"))
        .args(["-ldl", "-lpthread"]));
    let tls = out.join(format!("libtls{suffix}.so"));
    run(Command::new(cc)
        .args(["-O2", "-fPIC", "-shared", "-o"])
        .arg(&tls)
        .arg(src.join("tlslib.c")));
    (guard, tls)
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("tests").join("shared_object");
    let out = root
        .join("target")
        .join("test-programs")
        .join("shared-object");
    std::fs::create_dir_all(&out).expect("mkdir");
    let mut checks = Checks::new();

    let failures = register_calls_self_test();
    checks.check(
        failures.is_empty(),
        format!(
            "the machine-code check follows GOT addresses kept in registers, across loops and \
             only where every path loads them {failures:?}"
        ),
    );

    for t in target::all() {
        if !t.usable("the shared-object tests", &["objdump"]) {
            continue;
        }
        let isa = Isa::of(t);
        let agent = build_library(&root, t, "unwind-test-agent", "libunwind_agent.so");
        let suffix = if t.is_host() {
            String::new()
        } else {
            format!("-{}", t.name)
        };
        let (guard, tls) = build_c_programs(&t.cc(), &src, &out, &suffix);
        let platform = Platform { target: t };
        let alloc = build_library(
            &root,
            t,
            "unwind-profiler-preload-alloc",
            "libunwind_profiler_preload_alloc.so",
        );
        guard_runs(&platform, &guard, &agent, &alloc, &tls, &out, &mut checks);
        machine_code_checks(t.name, &agent, isa, &mut checks);
        let preload = build_library(
            &root,
            t,
            "unwind-profiler-preload",
            "libunwind_profiler_preload.so",
        );
        profiler_handler_checks(t.name, &preload, isa, &mut checks);
        profiler_sigtrap_checks(t.name, &preload, isa, &mut checks);
        profiler_allocation_checks(t.name, &alloc, isa, &mut checks);
    }

    checks.finish("shared_object");
}
