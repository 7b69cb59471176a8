//! Trust boundaries: `record` runs programs it does not trust, often as root, on machines shared
//! with other users. A hostile program (profiler/tests/trust/hostile.c, one scenario a run) and
//! another user's process (trust/intruder.c, run as a user the test makes) try to crash it, fool
//! it, grow it without bound, and make it write where they like. In each, `record` survives,
//! writes the program's profile with its honest work in it, says what it refused, stays within
//! its memory bound, and exits with the program's status.
//!
//! Needs the release build of the command and the preload library, and `cc`; the second user's
//! test needs root (to make the user): skipped without, failing under `CI=true`.
//! `cargo build --release -p unwind-profiler -p unwind-profiler-preload && cargo test --release
//! -p unwind-profiler --test trust`. x86_64 only (the scenarios' run-time code is x86_64's).
#![cfg(target_arch = "x86_64")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/other_user.rs"]
mod other_user;
#[path = "common/record.rs"]
mod record_command;

use other_user::{as_other_user, other_user};

/// How long a run may take before the test calls it hung (a guard: runs take about a second,
/// and a hung `record` is one of the failures looked for).
const HANG: Duration = Duration::from_secs(60);

/// A fresh directory for one test, open to other users to read (the second user runs the
/// programs built there).
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("unwind-trust-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Builds `profiler/tests/trust/NAME.c` into `dir`; `None` (failing under CI) without `cc`.
fn build(name: &str, dir: &Path) -> Option<PathBuf> {
    if !unwind_test_support::tool_runs("cc") {
        unwind_test_support::missing("cc (a C compiler: gcc)");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trust");
    let exe = dir.join(name);
    unwind_test_support::run(
        Command::new("cc")
            .args(["-O0", "-g", "-pthread"])
            .arg(src.join(format!("{name}.c")))
            .arg("-ldl")
            .arg("-o")
            .arg(&exe),
    );
    Some(exe)
}

/// One run of `record`: how it ended, what it printed, and the most memory it held (its peak
/// resident set, in KiB: the program's too if larger, which these programs never are).
struct Run {
    status: i32,
    stdout: String,
    stderr: String,
    max_rss_kib: i64,
    out: PathBuf,
}

impl Run {
    fn summary(&self) -> String {
        std::fs::read_to_string(self.out.join("profile.summary.txt"))
            .unwrap_or_else(|e| panic!("no summary ({e}); record said:\n{}", self.stderr))
    }

    fn folded(&self) -> Vec<(Vec<String>, u64)> {
        let text = std::fs::read_to_string(self.out.join("profile.folded")).unwrap();
        unwind_profiler::output::folded::parse(&text)
    }

    /// Periods whose stack holds `function`.
    fn periods_in(&self, function: &str) -> u64 {
        self.folded()
            .iter()
            .filter(|(stack, _)| stack.iter().any(|f| f == function))
            .map(|(_, n)| n)
            .sum()
    }

    /// The exit status, as a shell reports it.
    fn exited_with(&self, code: i32) -> bool {
        self.status == code
    }
}

/// Runs `record OPTIONS -- PROGRAM ARGS` into `out`, calling `meanwhile` with the record's pid
/// once it started; fails the test if it runs past [`HANG`].
// The child is reaped with `wait4`, for its peak memory, not with `Child::wait`.
#[allow(clippy::zombie_processes)]
fn record(
    out: &Path,
    options: &[&str],
    program: &Path,
    args: &[&str],
    meanwhile: impl FnOnce(u32),
) -> Run {
    let mut cmd = record_command::command(&record_command::release_dir());
    cmd.arg("record")
        .arg("--output")
        .arg(out)
        .args(options)
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let readers = (
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
            s
        }),
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
            s
        }),
    );
    meanwhile(pid);
    let start = Instant::now();
    let (status, rusage) = loop {
        let mut status = 0;
        // SAFETY: a zeroed rusage is valid; wait4 fills it for our own child.
        let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our child without blocking; the pointers are valid.
        let r = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut rusage) };
        if r == pid as i32 {
            break (status, rusage);
        }
        if start.elapsed() > HANG {
            // SAFETY: signals the process group `record_command` made for the run.
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("record hung: {}", readers.1.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The status as a shell gives it: the exit code, or 128 + the signal.
    let status = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    let run = Run {
        status,
        stdout: readers.0.join().unwrap(),
        stderr: readers.1.join().unwrap(),
        max_rss_kib: rusage.ru_maxrss,
        out: out.to_path_buf(),
    };
    println!(
        "record -- {} {args:?}: status {}, peak {} KiB\n{}{}",
        program.display(),
        run.status,
        run.max_rss_kib,
        run.stdout,
        run.stderr
    );
    run
}

/// `record` on the hostile program's `scenario`, into a scratch directory of the test's.
fn hostile(test: &str, options: &[&str], args: &[&str]) -> Option<Run> {
    let dir = scratch(test);
    let exe = build("hostile", &dir)?;
    Some(record(&dir.join("out"), options, &exe, args, |_| {}))
}

/// Checks the summary never gives a share past 100 % of its own whole: the figures written
/// over by the program are not used.
fn shares_are_shares(summary: &str) {
    let stored = summary
        .lines()
        .find_map(|l| l.strip_prefix("samples stored"))
        .unwrap_or_else(|| panic!("no samples line:\n{summary}"));
    let percent: f64 = stored
        .split('(')
        .nth(1)
        .and_then(|s| s.split('%').next())
        .map_or(0.0, |p| p.trim().parse().unwrap_or(0.0));
    assert!(percent <= 100.0, "{stored}");
}

/// A ring record claiming 2^24 words (before: 235 MB of folded stacks, still writing after
/// 120 s) ends the reading of that ring, is said, and the rest of the profile stays.
#[test]
fn a_sample_claiming_2_to_the_24_words_is_cut_off_and_said() {
    let Some(run) = hostile("huge", &[], &["huge"]) else {
        return;
    };
    assert!(run.exited_with(0), "the program's status: {}", run.status);
    assert!(
        run.stdout.contains("huge: 1 rings written"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr
            .contains("thread rings written over (a record of 16777216 words)"),
        "{}",
        run.stderr
    );
    let folded = std::fs::metadata(run.out.join("profile.folded"))
        .unwrap()
        .len();
    assert!(folded < 1 << 20, "folded stacks of {folded} bytes");
    // Its honest work before, on both threads, is in the profile.
    assert!(run.periods_in("honest_worker_work") > 300);
    assert!(run.periods_in("honest_main_work") > 200);
    shares_are_shares(&run.summary());
}

/// Counters written over by the program (before: "samples stored 9030521503378994672
/// (187.46%)") are not used, and said.
#[test]
fn counters_written_over_are_not_used() {
    let Some(run) = hostile("scribble", &[], &["scribble"]) else {
        return;
    };
    assert!(run.exited_with(0), "the program's status: {}", run.status);
    let summary = run.summary();
    assert!(
        summary.contains("process counters written over (not used)")
            && summary.contains("thread counters written over (not used)"),
        "{summary}"
    );
    shares_are_shares(&summary);
    // Both threads' work came after the scribble: every sample of it is in the profile.
    assert!(run.periods_in("honest_worker_work") > 500);
    assert!(run.periods_in("honest_main_work") > 300);
}

/// Shared memory cannot be shrunk under `record` (before: `SIGBUS`, no profile): the program
/// opens every region it shares and fails to shrink each (it exits 2 otherwise).
#[test]
fn shared_memory_cannot_be_shrunk() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        unwind_test_support::missing("root, to open /proc/self/map_files");
        return;
    }
    let Some(run) = hostile("truncate", &[], &["truncate"]) else {
        return;
    };
    assert!(run.exited_with(0), "{}", run.stdout);
    assert!(run.stdout.contains(", 0 shrunk"), "{}", run.stdout);
    assert!(run.periods_in("after_the_attack") > 150);
}

/// The program itself, with the session's name and key from its environment, offers a record
/// that is not sealed and shrinks it (before: `SIGBUS`), uses a wrong key, joins a second time,
/// floods its connection with 20,000 modules of 4000-byte paths (before: 203 MB), and sends
/// garbage: each refused and said, `record` within its bound, the honest work profiled.
#[test]
fn a_program_that_injects_floods_and_sends_garbage_is_refused_and_bounded() {
    let Some(run) = hostile("inject", &[], &["inject"]) else {
        return;
    };
    assert!(run.exited_with(0), "{}", run.stdout);
    assert!(
        run.stdout.contains("inject: 5 of 5 steps"),
        "{}",
        run.stdout
    );
    let summary = run.summary();
    for refusal in [
        "process records refused: shared memory whose size is not sealed",
        "connections without the run's key",
        "a second process record while its first is in use",
        "modules past the limit of 16384 modules or 4194304 bytes of paths (ignored)",
        "the process sent a message that is none of the protocol's",
    ] {
        assert!(summary.contains(refusal), "{refusal}:\n{summary}");
    }
    assert!(
        run.max_rss_kib < 150 * 1024,
        "record held {} KiB",
        run.max_rss_kib
    );
    // Its 1 s of CPU, sampled; named or not is its own doing (its module lists were forged).
    let periods = unwind_test_support_periods(&summary);
    assert!(periods > 850, "{periods} periods of 1000");
}

/// A program that closes every descriptor, then opens a socketpair (the numbers the profiler
/// had), starts threads and loads a library: the profiler writes nothing on its descriptors
/// (before: 4 messages on its socket), connects again, and samples the new threads.
#[test]
fn a_program_that_closes_every_descriptor_gets_nothing_and_is_profiled() {
    let Some(run) = hostile("closefds", &[], &["closefds"]) else {
        return;
    };
    assert!(
        run.stdout.contains("closefds: 0 unexpected messages"),
        "{}",
        run.stdout
    );
    assert!(run.exited_with(0), "{}", run.status);
    let summary = run.summary();
    assert!(summary.contains("reconnections     "), "{summary}");
    assert!(
        !summary
            .lines()
            .any(|l| l.starts_with("threads not sampled")),
        "{summary}"
    );
    // Six threads of 150 ms of CPU each, at 1 kHz of each thread's CPU clock.
    let periods = run.periods_in("after_close_burst");
    assert!(periods > 800, "{periods} periods of 900:\n{summary}");
    assert!(
        !run.stderr.contains("CPU time was not sampled"),
        "{}",
        run.stderr
    );
}

/// Threads that cannot be sampled (no descriptor for their shared memory under
/// `RLIMIT_NOFILE` 4) are said, with the CPU time they took (before: "99.8 % of CPU time
/// sampled", with 1 of 5 threads sampled).
#[test]
fn threads_that_cannot_be_sampled_are_said() {
    let Some(run) = hostile("rlimit", &[], &["rlimit"]) else {
        return;
    };
    assert!(run.exited_with(0), "{}", run.status);
    assert!(
        run.stderr
            .contains("warning: threads not sampled: 4 (no memory for its samples"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("of the processes' CPU time was not sampled"),
        "{}",
        run.stderr
    );
    let summary = run.summary();
    let line = summary
        .lines()
        .find(|l| l.starts_with("CPU not sampled"))
        .unwrap_or_else(|| panic!("{summary}"));
    let share: f64 = line
        .split('(')
        .nth(1)
        .and_then(|s| s.split('%').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    assert!(share > 90.0, "{line}");
}

/// A thread that takes over the record of one that exited, after a thread whose record could
/// not be made (its index left empty): it is sampled under its record's own index (before, its
/// place among the records was taken for its index, and the program crashed on the empty one).
#[test]
fn a_record_taken_over_after_an_empty_index_is_sampled() {
    let Some(run) = hostile("holes", &[], &["holes"]) else {
        return;
    };
    assert!(
        run.stdout.contains("holes: 3 threads ran"),
        "{}",
        run.stderr
    );
    assert!(run.exited_with(0), "{}", run.status);
    // 300 ms of CPU at 1 kHz of the thread's clock.
    let periods = run.periods_in("reused_record_work");
    assert!(periods > 250, "{periods} periods of 300");
    assert!(
        run.stderr
            .contains("threads not sampled: 1 (no memory for its samples"),
        "{}",
        run.stderr
    );
}

/// A program that installs its own handler for the sampling signal (`sigaction`, then
/// `signal`) receives the signals it raises and none of the profiler's, and sampling goes on
/// (before: 0 samples, and thousands of the profiler's signals in the program's handler). The
/// kernel merges a standard signal raised while one of its number is pending (a timer's) into
/// it, so a few of the program's own may be lost, as under any profiler sharing its signal.
#[test]
fn the_programs_own_handler_gets_its_signals_and_sampling_goes_on() {
    for (signal, option) in [("URG", None), ("PROF", Some("--signal=PROF"))] {
        let options: Vec<&str> = option.into_iter().collect();
        let Some(run) = hostile(&format!("handler-{signal}"), &options, &["handler", signal])
        else {
            return;
        };
        assert!(
            run.stdout.contains(", not its own 0;"),
            "{signal}: {}",
            run.stdout
        );
        assert!(run.exited_with(0), "{signal}: {}", run.stdout);
        let summary = run.summary();
        assert!(
            summary.contains("the program set its own action for the sampling signal 2 times"),
            "{signal}:\n{summary}"
        );
        // 30 bursts of 20 ms of CPU, at 1 kHz.
        let periods = unwind_test_support_periods(&summary);
        assert!(periods > 450, "{signal}: {periods} periods of 600");
    }
}

/// The summary's periods.
fn unwind_test_support_periods(summary: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| l.strip_prefix("periods"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no periods:\n{summary}"))
}

/// A FIFO at `/tmp/perf-PID.map` and a symbolic link at `/tmp/jit-PID.dump` (before: `record`
/// waited on the FIFO forever): neither is read, and the run ends.
#[test]
fn planted_perf_map_and_jitdump_are_not_followed() {
    let Some(run) = hostile("fifo", &[], &["fifo"]) else {
        return;
    };
    assert!(run.exited_with(0), "{}", run.status);
    let pid = run
        .stdout
        .split("fifo: pid ")
        .nth(1)
        .and_then(|p| p.trim().parse::<u32>().ok())
        .expect("the program's pid");
    for f in [
        format!("/tmp/perf-{pid}.map"),
        format!("/tmp/jit-{pid}.dump"),
    ] {
        let _ = std::fs::remove_file(f);
    }
    // Its code made at run time is there, unnamed.
    let folded = run.folded();
    assert!(
        folded
            .iter()
            .any(|(stack, _)| stack.last().is_some_and(|f| f.starts_with("[unknown]"))),
        "{folded:?}"
    );
}

/// Under `record`, the rule cache's counts are current however the process ends (before: "0
/// hits, 0 misses" when no thread exited and no table was rebuilt): a program killed by
/// `SIGKILL` has as many lookups as frames.
#[test]
fn the_rule_cache_counts_are_current_at_a_kill() {
    let dir = scratch("killed");
    if !unwind_test_support::tool_runs("cc") {
        unwind_test_support::missing("cc (a C compiler: gcc)");
        return;
    }
    let behaviour = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/behaviour");
    let exe = dir.join("killed");
    unwind_test_support::run(
        Command::new("cc")
            .args(["-O0", "-g", "-I"])
            .arg(&behaviour)
            .arg(behaviour.join("killed.c"))
            .arg("-o")
            .arg(&exe),
    );
    let run = record(&dir.join("out"), &[], &exe, &[], |_| {});
    assert!(run.exited_with(128 + 9), "{}", run.status);
    let summary = run.summary();
    let number = |prefix: &str, field: usize| -> u64 {
        summary
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|l| {
                l.split(|c: char| !c.is_ascii_digit())
                    .filter(|s| !s.is_empty())
                    .nth(field)
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{prefix}:\n{summary}"))
    };
    // "rule cache        99.64% hits (7218 hits, 26 misses)"
    let lookups = number("rule cache", 2) + number("rule cache", 3);
    let frames = number("mean stack depth", 2);
    assert!(
        frames > 0 && lookups >= frames,
        "{lookups} lookups for {frames} frames:\n{summary}"
    );
}

/// Another user's process finds root's `record` socket and connects, says hello with its own
/// key and a record it then shrinks, and sends garbage (before: it added a fake process of 100
/// samples to root's profile); cannot read the program's environment; and plants a perf map
/// naming all of the program's code. `record` refuses the connection, names it, and neither the
/// fake process nor the planted names are in the profile.
#[test]
fn another_users_process_cannot_join_or_name_the_code() {
    let Some(uid) = other_user() else { return };
    let dir = scratch("second-user");
    let (Some(program), Some(intruder)) = (build("hostile", &dir), build("intruder", &dir)) else {
        return;
    };
    let go = dir.join("go");
    let mut said = String::new();
    let run = record(
        &dir.join("out"),
        &[],
        &program,
        &["wait", go.to_str().unwrap()],
        |record| {
            // The program's pid: record's child, once it runs.
            let start = Instant::now();
            let pid = loop {
                let children =
                    std::fs::read_to_string(format!("/proc/{record}/task/{record}/children"))
                        .unwrap_or_default();
                if let Some(pid) = children.split_whitespace().next() {
                    break pid.to_owned();
                }
                assert!(start.elapsed() < HANG, "record started no program");
                std::thread::sleep(Duration::from_millis(10));
            };
            std::thread::sleep(Duration::from_millis(200));
            let out = as_other_user(uid, Command::new(&intruder).arg(&pid))
                .output()
                .expect("the intruder runs");
            said = String::from_utf8_lossy(&out.stdout).into_owned();
            // The planted map stays for record, which reads perf maps once the program ended.
            std::fs::write(&go, b"").unwrap();
        },
    );
    println!("intruder: {said}");
    assert!(said.contains("environ: refused"), "{said}");
    assert!(
        said.contains("sockets: ") && !said.contains(" 0 connected"),
        "{said}"
    );
    assert!(run.exited_with(0), "{}", run.status);
    let summary = run.summary();
    assert!(
        summary.contains(&format!(
            "connections of another user (uid {uid}), not a process of the run"
        )),
        "{summary}"
    );
    assert!(!summary.contains("intruder"), "{summary}");
    assert!(
        !summary.lines().any(|l| l.starts_with("processes")),
        "{summary}"
    );
    let folded = std::fs::read_to_string(run.out.join("profile.folded")).unwrap();
    assert!(
        !folded.contains("INTRUDER"),
        "the planted perf map named code"
    );
    assert!(run.periods_in("honest_worker_work") > 300);
    for entry in std::fs::read_dir("/tmp").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("perf-") && name.ends_with(".map") {
            use std::os::unix::fs::MetadataExt;
            if entry.metadata().is_ok_and(|m| m.uid() == uid) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Another user made the output directory first and planted `profile.folded` in it as a link
/// to a file of root's (before: root's `record` overwrote the file): `record` refuses the
/// directory before running anything, and the file is untouched.
#[test]
fn another_users_output_directory_is_refused() {
    let Some(uid) = other_user() else { return };
    let dir = scratch("planted-output");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = scratch("victim").join("victim.txt");
    std::fs::write(&victim, b"root's own").unwrap();
    let planted = dir.join("out");
    let made = as_other_user(
        uid,
        Command::new("sh").arg("-c").arg(format!(
            "mkdir -m 0777 '{0}' && ln -s '{1}' '{0}/profile.folded'",
            planted.display(),
            victim.display()
        )),
    )
    .status()
    .unwrap();
    assert!(made.success());
    let marker = dir.join("ran");
    let run = record(
        &planted,
        &[],
        Path::new("/bin/sh"),
        &["-c", &format!("touch '{}'", marker.display())],
        |_| {},
    );
    assert!(run.exited_with(2), "{}", run.status);
    assert!(
        run.stderr.contains("cannot write to the output directory"),
        "{}",
        run.stderr
    );
    assert!(!marker.exists(), "the program ran");
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's own");
}

/// A program profiling itself (the preload library alone) serves the pull endpoint on loopback,
/// which every user of the machine can connect to: another user's request is answered 403 at
/// once, without taking a window (before: 200 and the program's profile, and the window held
/// from the owner's scraper meanwhile); the owner's (root's) is served.
#[test]
fn another_user_cannot_read_the_pull_endpoint() {
    use std::io::{BufRead, Read, Write};
    let Some(uid) = other_user() else { return };
    let release = record_command::release_dir();
    let dir = scratch("pull");
    let mut program = Command::new(release.join("demo-workload"))
        .args(["--seconds", "8"])
        .env("LD_PRELOAD", release.join("libunwind_profiler_preload.so"))
        .env("UNWIND_PROFILER_OUTPUT", dir.join("out"))
        .env("UNWIND_PROFILER_PPROF_LISTEN", "127.0.0.1:0")
        .env_remove("UNWIND_PROFILER_RECORD")
        .env_remove("UNWIND_PROFILER_EXPORT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(program.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("serving http://") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no address said");
    }
    let address = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .and_then(|w| w.split('/').next())
        .unwrap()
        .to_owned();
    let (host, port) = address.rsplit_once(':').unwrap();
    // The other user's client: bash's /dev/tcp, the answer's status line.
    let started = Instant::now();
    let theirs = as_other_user(
        uid,
        Command::new("bash").arg("-c").arg(format!(
            "exec 3<>/dev/tcp/{host}/{port} && \
             printf 'GET /debug/pprof/profile?seconds=2 HTTP/1.1\\r\\n\\r\\n' >&3 && head -c 200 <&3"
        )),
    )
    .output()
    .unwrap();
    let took = started.elapsed();
    let theirs = String::from_utf8_lossy(&theirs.stdout).into_owned();
    println!("another user's request, in {took:?}: {theirs:?}");
    assert!(theirs.starts_with("HTTP/1.1 403"), "{theirs}");
    assert!(theirs.contains(&format!("user {uid}'s")), "{theirs}");
    assert!(
        took < Duration::from_secs(2),
        "{took:?}: a window was taken"
    );
    // The owner's: served, no window held by the refused one.
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .write_all(b"GET /debug/pprof/profile?seconds=1 HTTP/1.1\r\n\r\n")
        .unwrap();
    let mut ours = Vec::new();
    stream.read_to_end(&mut ours).unwrap();
    let head = String::from_utf8_lossy(&ours[..ours.len().min(40)]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let _ = program.kill();
    let _ = program.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
