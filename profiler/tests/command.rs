//! The `unwind-profiler record` command and the preload library's ways in and out, checked by
//! running them:
//!
//! - `--help` (and `-h`) exits 0 on stdout naming every flag and environment variable of
//!   `config::OPTIONS` and the exit statuses; every option reaches the program as its variable.
//! - A bad command line (unknown option, bad value, a signal the program needs such as `KILL` or
//!   `SEGV`, missing value, no `--`, no program or an empty name, no preload library) exits 2
//!   with a first line naming the problem, and runs nothing; so does an output directory other
//!   users can write in; a program that cannot be started exits 127 naming it; the program's
//!   status is passed on, and 128+N when signal N ends it; the outputs get `--output-mode`.
//! - A run whose profile cannot be written fails (73 when the program's status was 0): a full
//!   disk (a file size limit reached) names the file that failed and leaves the previous file of
//!   that name, and no temporary file; a statically linked or set-user-ID program says why.
//! - Small C programs (`profiler/tests/behaviour/*.c`, built with `cc` at test time) under
//!   `record`: `exit()` from a thread while `main` is blocked, and the end of `main`, write every
//!   output with the busy threads' functions under their callers; `--snapshot-signal USR2`
//!   writes the profile so far while the program runs on, when the program `raise()`s it and
//!   when the test sends it; `--clock wall` samples a thread sleeping in `nanosleep` about as
//!   often as a busy one, the CPU clock almost never; `_exit` and `SIGKILL` keep the profile
//!   and the command ends with the program's status; a fork that execs and an exec make one
//!   profile of three processes, each still single-threaded in its C library's eyes; workers
//!   forked without `exec` from a multi-threaded parent (and one of theirs) are processes of
//!   that profile too. Code made at run time is named by the process's perf map.
//! - A library that `dlopen`s a plugin through its own RUNPATH or RPATH, or by a `$ORIGIN`
//!   name, loads it under `record` and under the preload library alone as it does on its own,
//!   and a missing plugin fails with the same `dlerror` message.
//!
//! Needs the release build of the command and the preload library, and `cc` (under `CI=true` a
//! missing `cc` fails the tests): `cargo build --release -p unwind-profiler
//! -p unwind-profiler-preload && cargo test --release -p unwind-profiler --test command`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use unwind_profiler::config::OPTIONS;

#[path = "common/record.rs"]
mod record_command;
use record_command::release_dir;
use unwind_profiler::output::Outputs;

/// Held by each test that profiles a C program: two at once on a small machine would slow
/// each other down, and the wall-clock test compares sample counts of two threads.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long any run may take before the test calls it hung (a guard, not a measurement: the
/// programs run for about a second).
const HANG: Duration = Duration::from_secs(120);

/// The `record` command (see `common/record.rs`).
fn record() -> Command {
    record_command::command(&release_dir())
}

/// A fresh, empty directory named for `test`.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "unwind-profiler-command-{test}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A spawned `record` that is killed, with everything it started, if the test ends before it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            // SAFETY: signals the process group this test created for the run.
            unsafe { libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL) };
            let _ = self.0.wait();
        }
    }
}

impl Running {
    /// Waits for the run to end, failing the test if it takes longer than [`HANG`].
    fn wait(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(start.elapsed() < HANG, "the run hung");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Starts `cmd` with its stdout and stderr piped (its stdin as the caller set it); the run is
/// killed, with its process group, if the test ends first.
fn spawn(cmd: &mut Command) -> Running {
    Running(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Each line of the run's stdout and stderr, as it comes (read by [`expect_line`]).
fn lines(running: &mut Running) -> mpsc::Receiver<(Stream, String)> {
    let (tx, rx) = mpsc::channel();
    for (stream, pipe) in [
        (
            Stream::Out,
            Box::new(running.0.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        ),
        (Stream::Err, Box::new(running.0.stderr.take().unwrap())),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { return };
                if tx.send((stream, line)).is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// Runs `cmd` to the end with its stdout and stderr captured (no stdin), failing the test if it
/// hangs.
fn run(cmd: &mut Command) -> Output {
    let mut running = spawn(cmd.stdin(Stdio::null()));
    let (mut out, mut err) = (
        running.0.stdout.take().unwrap(),
        running.0.stderr.take().unwrap(),
    );
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).unwrap();
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).unwrap();
        v
    });
    let status = running.wait();
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Builds `profiler/tests/behaviour/NAME.c` into `dir`, or returns `None` (skipping the test,
/// failing it under CI) without a C compiler.
fn build(name: &str, dir: &Path) -> Option<PathBuf> {
    if !unwind_test_support::tool_runs("cc") {
        unwind_test_support::missing("cc (a C compiler: gcc)");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/behaviour");
    let exe = dir.join(name);
    // -O0: every function keeps its frame and its calls (no inlining, no tail calls).
    unwind_test_support::run(
        Command::new("cc")
            .args(["-O0", "-g", "-pthread", "-I"])
            .arg(&src)
            .arg(src.join(format!("{name}.c")))
            .arg("-o")
            .arg(&exe),
    );
    Some(exe)
}

/// Compiles `profiler/tests/behaviour/SOURCE` into `out` with `args` after the source (such as
/// `-shared`, `-Wl,...`, `-l...`), making `out`'s directory; `None` (skipping the test, failing
/// it under CI) without a C compiler.
fn compile(source: &str, out: &Path, args: &[&str]) -> Option<PathBuf> {
    if !unwind_test_support::tool_runs("cc") {
        unwind_test_support::missing("cc (a C compiler: gcc)");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/behaviour");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    unwind_test_support::run(
        Command::new("cc")
            .args(["-O0", "-g", "-I"])
            .arg(&src)
            .arg(src.join(source))
            .args(args)
            .arg("-o")
            .arg(out),
    );
    Some(out.to_path_buf())
}

/// Folded lines as (frames root first, weighted count).
fn folded(dir: &Path) -> Vec<(Vec<String>, u64)> {
    let path = Outputs::paths(dir, "profile").folded;
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    unwind_profiler::output::folded::parse(&text)
}

/// Samples with `function` anywhere in their stack.
fn samples_in(lines: &[(Vec<String>, u64)], function: &str) -> u64 {
    lines
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f == function))
        .map(|(_, n)| n)
        .sum()
}

/// Samples with `function` called directly by `parent`.
fn samples_under(lines: &[(Vec<String>, u64)], parent: &str, function: &str) -> u64 {
    lines
        .iter()
        .filter(|(s, _)| s.windows(2).any(|w| w[0] == parent && w[1] == function))
        .map(|(_, n)| n)
        .sum()
}

/// Checks that every output of stem `profile` is in `dir` and not empty.
fn assert_outputs(dir: &Path) {
    for f in Outputs::paths(dir, "profile").all() {
        let len = std::fs::metadata(f)
            .unwrap_or_else(|e| panic!("{} was not written: {e}", f.display()))
            .len();
        assert!(len > 0, "{} is empty", f.display());
    }
}

#[test]
fn help_names_every_option_its_variable_and_the_exit_statuses() {
    for args in [
        &["record", "--help"][..],
        &["record", "-h"],
        &["record", "--frequency", "10", "--help"],
        &["--help"],
        &["-h"],
    ] {
        let out = run(record().args(args));
        let help = text(&out.stdout);
        assert!(out.status.success(), "{args:?}: {}", out.status);
        assert_eq!(text(&out.stderr), "", "{args:?} wrote on stderr");
        assert!(help.starts_with("Usage: unwind-profiler record"), "{help}");
        for o in OPTIONS {
            let flag = if o.value.is_empty() {
                o.flag.to_string()
            } else {
                format!("{} {}", o.flag, o.value)
            };
            assert!(
                help.contains(&flag),
                "{args:?}: {flag} missing from\n{help}"
            );
            assert!(
                help.contains(o.env),
                "{args:?}: {} missing from\n{help}",
                o.env
            );
        }
        for documented in [
            "--library PATH",
            "Exit status",
            "128+N",
            "2 for a",
            "127 if",
            "73 (EX_CANTCREAT)",
        ] {
            assert!(
                help.contains(documented),
                "{documented:?} missing from\n{help}"
            );
        }
    }
}

#[test]
fn every_option_reaches_the_program_as_its_variable() {
    let dir = scratch("options");
    // --export sends the profile: to a real collector, so that the run succeeds.
    if unwind_test_support::collector::otelcol_path().is_none() {
        unwind_test_support::missing("the OpenTelemetry Collector, built by scripts/otelcol");
        return;
    }
    let collector = unwind_test_support::collector::Collector::start(&dir.join("collector"))
        .expect("the collector");
    let endpoint = collector.http_endpoint();
    for o in OPTIONS {
        let value = match o.flag {
            "--export" => endpoint.as_str(),
            "--service" => "svc",
            "--label" => "k=v",
            "--frequency" => "500",
            "--clock" => "wall",
            "--timer" => "posix",
            "--output" => "out",
            "--stem" => "run1",
            "--output-mode" => "0644",
            "--signal" => "USR1",
            "--snapshot-signal" => "USR2",
            "--max-frames" => "64",
            "--capture-samples" => "10",
            "--period" => "1s",
            "--keep-periods" => "5",
            "--pprof-listen" => "127.0.0.1:0",
            "--alloc-interval" => "64k",
            "--symfs" => "root",
            "--quiet" | "--stack-scanning" | "--verbose" | "--alloc" | "--alloc-only"
            | "--no-debuginfod" => "",
            other => panic!("{other} is new: give it a valid value in this test"),
        };
        // Both spellings of a value: `--flag VALUE` and `--flag=VALUE`.
        let spellings: &[Vec<String>] = if value.is_empty() {
            &[vec![o.flag.to_string()]]
        } else {
            &[
                vec![o.flag.to_string(), value.to_string()],
                vec![format!("{}={value}", o.flag)],
            ]
        };
        for flag in spellings {
            let out = run(record()
                .current_dir(&dir)
                .arg("record")
                .args(flag)
                .args(["--", "env"]));
            let env = text(&out.stdout);
            assert!(
                out.status.success(),
                "{flag:?}: {}\n{}",
                out.status,
                text(&out.stderr)
            );
            let want = match o.flag {
                // The command makes the directory absolute (the program may change its own).
                "--output" => dir.join("out").display().to_string(),
                // And the symbol root, which `record` reads from where it runs.
                "--symfs" => dir.join("root").display().to_string(),
                "--quiet" | "--stack-scanning" | "--verbose" | "--alloc" | "--alloc-only"
                | "--no-debuginfod" => "1".to_string(),
                _ => value.to_string(),
            };
            assert!(
                env.lines().any(|l| l == format!("{}={want}", o.env)),
                "{flag:?}: no {}={want} in the program's environment:\n{env}",
                o.env
            );
            let stem = if o.flag == "--stem" { value } else { "profile" };
            let out_dir = if o.flag == "--output" {
                dir.join("out")
            } else {
                dir.join("unwind-profile")
            };
            let summary = Outputs::paths(&out_dir, stem).summary;
            assert!(summary.is_file(), "{flag:?}: no {}", summary.display());
            let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&summary).unwrap());
            let want_mode = if o.flag == "--output-mode" {
                0o644
            } else {
                0o600
            };
            assert_eq!(mode & 0o7777, want_mode, "{flag:?}: {mode:o}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_command_line_exits_2_naming_the_problem_and_runs_nothing() {
    let dir = scratch("usage");
    let marker = dir.join("ran");
    let program = [
        "--".to_string(),
        "sh".into(),
        "-c".into(),
        format!("touch {}", marker.display()),
    ];
    let with_program = |opts: &[&str]| -> Vec<String> {
        let mut v = vec!["record".to_string()];
        v.extend(opts.iter().map(|s| s.to_string()));
        v.extend(program.iter().cloned());
        v
    };
    let cases: Vec<(Vec<String>, &[&str])> = vec![
        (with_program(&["--bogus"]), &["unknown option", "--bogus"]),
        (
            with_program(&["--frequency", "abc"]),
            &["--frequency", "\"abc\""],
        ),
        (
            with_program(&["--frequency=abc"]),
            &["--frequency", "\"abc\""],
        ),
        (
            with_program(&["--frequency", "0"]),
            &["--frequency", "\"0\"", "1 to 20000"],
        ),
        (
            with_program(&["--frequency", "20001"]),
            &["--frequency", "\"20001\""],
        ),
        (
            with_program(&["--clock", "sideways"]),
            &["--clock", "\"sideways\"", "cpu or wall"],
        ),
        (
            with_program(&["--signal", "NOTASIG"]),
            &["--signal", "\"NOTASIG\"", "a signal"],
        ),
        (
            with_program(&["--snapshot-signal", "NOTASIG"]),
            &["--snapshot-signal", "\"NOTASIG\""],
        ),
        (
            with_program(&["--snapshot-signal", "URG"]),
            &["--snapshot-signal", "other than the sampling signal"],
        ),
        (
            with_program(&["--signal", "9"]),
            &["--signal", "\"9\"", "SIGKILL cannot be caught"],
        ),
        (
            with_program(&["--signal", "KILL"]),
            &["--signal", "\"KILL\"", "SIGKILL cannot be caught"],
        ),
        (
            with_program(&["--signal", "SEGV"]),
            &[
                "--signal",
                "\"SEGV\"",
                "SIGSEGV is the program's fault signal",
            ],
        ),
        (
            with_program(&["--signal", "11"]),
            &[
                "--signal",
                "\"11\"",
                "SIGSEGV is the program's fault signal",
            ],
        ),
        (
            with_program(&["--signal", "TRAP"]),
            &["--signal", "\"TRAP\"", "--timer perf-sigtrap"],
        ),
        (
            with_program(&["--snapshot-signal", "SIGBUS"]),
            &[
                "--snapshot-signal",
                "\"SIGBUS\"",
                "SIGBUS is the program's fault signal",
            ],
        ),
        (
            with_program(&["--output-mode", "0755"]),
            &["--output-mode", "\"0755\"", "octal file mode"],
        ),
        (
            with_program(&["--max-frames", "1025"]),
            &["--max-frames", "\"1025\""],
        ),
        (with_program(&["--stem", "a/b"]), &["--stem", "\"a/b\""]),
        (
            with_program(&["--library", "/nonexistent/libx.so"]),
            &["preload library", "/nonexistent/libx.so"],
        ),
        (
            vec!["record".into(), "--frequency".into()],
            &["--frequency needs a value"],
        ),
        // The program without `--` before it.
        (
            vec!["record".into(), "sh".into(), "-c".into(), "true".into()],
            &["unknown option", "\"sh\"", "after `--`"],
        ),
        (vec!["record".into()], &["no program to run"]),
        (vec!["record".into(), "--".into()], &["no program to run"]),
        (
            vec!["record".into(), "--".into(), "".into()],
            &["the program's name is empty"],
        ),
        (
            {
                let mut v = with_program(&[]);
                v[0] = "recrod".into();
                v
            },
            &["unknown command", "recrod"],
        ),
        (vec![], &["missing command"]),
    ];
    for (args, want) in cases {
        let out = run(record().current_dir(&dir).args(&args));
        let stderr = text(&out.stderr);
        let first = stderr.lines().next().unwrap_or("");
        println!("{args:?} -> {first}");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(first.starts_with("unwind-profiler: "), "{args:?}: {stderr}");
        for w in want {
            assert!(first.contains(w), "{args:?}: {w:?} not in {first:?}");
        }
        assert_eq!(text(&out.stdout), "", "{args:?}");
        assert!(!marker.exists(), "{args:?}: the program ran");
        assert!(
            !dir.join("unwind-profile").exists(),
            "{args:?}: made the output directory"
        );
    }
    // The same line with a good value runs the program: the cases fail for their reason.
    let out =
        run(record()
            .current_dir(&dir)
            .args(with_program(&["--frequency", "100", "--quiet"])));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(marker.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_program_that_cannot_start_exits_127_naming_it() {
    let dir = scratch("cannot-start");
    let not_executable = dir.join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    for program in [
        "/nonexistent/program".to_string(),
        "no-such-program-on-the-path".to_string(),
        not_executable.display().to_string(),
    ] {
        let out = run(record()
            .current_dir(&dir)
            .args(["record", "--quiet", "--"])
            .arg(&program));
        let stderr = text(&out.stderr);
        println!("{program}: {stderr}");
        assert_eq!(out.status.code(), Some(127), "{program}: {stderr}");
        assert!(
            stderr.contains(&format!("cannot run {program}")),
            "{program}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_programs_exit_status_is_passed_on() {
    let dir = scratch("status");
    for (script, code, says) in [
        ("exit 0", 0, None),
        ("exit 3", 3, None),
        ("exit 255", 255, None),
        // Ended by a signal: 128+N, as the help says, and the signal named.
        ("kill -TERM $$", 128 + 15, Some("killed by signal 15")),
        ("kill -KILL $$", 128 + 9, Some("killed by signal 9")),
    ] {
        let out = run(record()
            .current_dir(&dir)
            .args(["record", "--quiet", "--", "sh", "-c", script]));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{script}: {stderr}");
        if let Some(says) = says {
            assert!(stderr.contains(says), "{script}: {stderr}");
        } else {
            assert!(!stderr.contains("killed by signal"), "{script}: {stderr}");
        }
        // However the shell ended (dash's `exit` is an `_exit`), its profile was written.
        assert!(
            Outputs::paths(&dir.join("unwind-profile"), "profile")
                .summary
                .is_file(),
            "{script}: no profile: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `record` ends after the program's descendants, which may outlive it (orphans are reparented
/// to `record`): one that writes a file after the program has exited has written it when
/// `record` exits.
#[test]
fn record_waits_for_the_programs_descendants() {
    let dir = scratch("descendants");
    let flag = dir.join("written-by-a-descendant");
    let script = format!(
        "(sleep 0.3; echo done > '{}') >/dev/null 2>&1 </dev/null & exit 0",
        flag.display()
    );
    let out = run(record()
        .current_dir(&dir)
        .args(["record", "--quiet", "--", "sh", "-c", &script]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        flag.is_file(),
        "record ended before the program's descendant"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C reaches the terminal's foreground group, `record` and the program: the program ends
/// as it would alone (here killed by `SIGINT`), and `record` outlives it to say so and pass the
/// status on (130).
#[test]
fn ctrl_c_ends_the_program_and_record_reports_it() {
    let dir = scratch("ctrl-c");
    let mut running = spawn(
        record()
            .current_dir(&dir)
            .args(["record", "--", "sh", "-c", "echo started; exec sleep 60"])
            .stdin(Stdio::null()),
    );
    let rx = lines(&mut running);
    expect_line(&rx, Stream::Out, "started");
    // SAFETY: signals the process group `record()` made for this run, as a terminal's Ctrl-C.
    unsafe { libc::kill(-(running.0.id() as libc::pid_t), libc::SIGINT) };
    expect_line(
        &rx,
        Stream::Err,
        "unwind-profiler: the program was killed by signal 2",
    );
    assert_eq!(
        running.wait().code(),
        Some(130),
        "record itself ended by the signal"
    );
    // The program ended by the signal (having slept: no sample), its profile is written all
    // the same.
    let summary = Outputs::paths(&dir.join("unwind-profile"), "profile").summary;
    assert!(summary.is_file(), "{} was not written", summary.display());
    let _ = std::fs::remove_dir_all(&dir);
}

/// An output directory other users can write in (where one of them could have planted a link
/// at an output's name) is refused before the program runs: exit 2, naming the directory, its
/// owner and mode.
#[test]
fn an_output_directory_other_users_can_write_in_exits_2_before_the_program_runs() {
    let dir = scratch("open-output");
    let marker = dir.join("ran");
    let out_dir = dir.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    for mode in [0o777, 0o1777] {
        std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = run(record()
            .arg("record")
            .arg("--output")
            .arg(&out_dir)
            .args(["--", "sh", "-c"])
            .arg(format!("touch '{}'", marker.display())));
        let stderr = text(&out.stderr);
        println!("{stderr}");
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let first = stderr.lines().next().unwrap_or("");
        let want = format!(
            "unwind-profiler: cannot write to the output directory {}: every user can write in it",
            out_dir.display()
        );
        assert!(first.starts_with(&want), "{first:?}");
        assert!(first.contains(&format!("mode {mode:04o}")), "{first:?}");
        assert!(!marker.exists(), "the program ran");
        assert_eq!(std::fs::read_dir(&out_dir).unwrap().count(), 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The disk fills while the program runs (it lowers `record`'s file size limit below the flame
/// graph's size: `EFBIG`, as `ENOSPC` on a full disk): `record` writes every other output, names
/// the one that failed, leaves the previous file of that name as it was and no temporary file,
/// and exits 73 (the program's status was 0).
#[test]
fn a_full_disk_fails_the_run_naming_the_file_and_keeping_the_previous_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("full-disk");
    let Some(exe) = build("full_disk", &dir) else {
        return;
    };
    let out_dir = dir.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let outputs = Outputs::paths(&out_dir, "profile");
    std::fs::write(&outputs.flamegraph, "the previous run's flame graph").unwrap();
    // The flame graph (its script alone is over 8 KiB) cannot be written; the other files of
    // this small program's profile take a few KiB each.
    let limit = 8192;
    let mut cmd = record();
    // SAFETY: signal() is async-signal-safe; SIGXFSZ ignored makes a write past the limit fail
    // with EFBIG instead of killing record (the program inherits it, and never meets it).
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        })
    };
    let out = run(cmd
        .arg("record")
        .arg("--output")
        .arg(&out_dir)
        .arg("--")
        .arg(&exe)
        .arg(limit.to_string()));
    let stderr = text(&out.stderr);
    println!("{stderr}");
    assert_eq!(out.status.code(), Some(73), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: File too large", outputs.flamegraph.display())),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&outputs.flamegraph).unwrap(),
        "the previous run's flame graph"
    );
    for f in outputs.all() {
        if f != outputs.flamegraph {
            assert!(!stderr.contains(&f.display().to_string()), "{stderr}");
            let len = std::fs::metadata(f).unwrap().len();
            assert!(len > 0 && len < limit, "{}: {len} bytes", f.display());
        }
    }
    let n = samples_under(&folded(&out_dir), "main", "work_before_the_disk_fills");
    assert!(
        n >= 100,
        "work_before_the_disk_fills under main: {n} samples"
    );
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "profile.firefox.json.gz",
            "profile.folded",
            "profile.pb.gz",
            "profile.summary.txt",
            "profile.svg"
        ],
        "a temporary file was left"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program the dynamic loader runs without the preload library fails the run (73: it exited
/// 0) saying why: statically linked (no loader), or set-user-ID to another user (the loader
/// ignores `LD_PRELOAD` in secure-execution mode; root only, to give the file away), said before
/// it runs too.
#[test]
fn a_program_without_the_preload_library_fails_the_run_saying_why() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("not-preloaded");
    let Some(exe) = build("full_disk", &dir) else {
        return;
    };
    let out_dir = dir.join("out");
    let run_it = |program: &Path| {
        let out = run(record()
            .arg("record")
            .arg("--output")
            .arg(&out_dir)
            .arg("--")
            .arg(program));
        let stderr = text(&out.stderr);
        println!("{stderr}");
        assert_eq!(out.status.code(), Some(73), "{stderr}");
        assert!(
            !Outputs::paths(&out_dir, "profile").summary.exists(),
            "a profile was written: {stderr}"
        );
        stderr
    };

    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/behaviour");
    let static_exe = dir.join("full_disk_static");
    let built = Command::new("cc")
        .args(["-O0", "-static", "-I"])
        .arg(&src)
        .arg(src.join("full_disk.c"))
        .arg("-o")
        .arg(&static_exe)
        .status()
        .is_ok_and(|s| s.success());
    if built {
        let stderr = run_it(&static_exe);
        assert!(
            stderr.contains(&format!(
                "no profile was written: {} is statically linked",
                static_exe.display()
            )),
            "{stderr}"
        );
    } else {
        // A missing static C library is not what this test is about.
        println!("cc -static failed (no libc.a?): the statically linked case is not checked");
    }

    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        println!("not root: cannot make a program set-user-ID to another user");
        return;
    }
    let setuid_exe = dir.join("full_disk_setuid");
    std::fs::copy(&exe, &setuid_exe).unwrap();
    std::os::unix::fs::chown(&setuid_exe, Some(65534), None).unwrap();
    std::fs::set_permissions(&setuid_exe, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let c = std::ffi::CString::new(setuid_exe.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a zeroed statvfs is valid for statvfs to overwrite; `c` is NUL-terminated.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut fs) }, 0);
    if fs.f_flag & libc::ST_NOSUID != 0 {
        println!(
            "{} is mounted nosuid: the set-user-ID case is not checked",
            dir.display()
        );
        return;
    }
    let stderr = run_it(&setuid_exe);
    let name = setuid_exe.display();
    for said in [
        format!("unwind-profiler: {name} is set-user-ID to uid 65534 (your real uid is 0): the dynamic loader ignores LD_PRELOAD for it (secure execution), so it cannot be profiled"),
        format!("no profile was written: {name} is set-user-ID to uid 65534"),
    ] {
        assert!(stderr.contains(&said), "{said:?} not in {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the C program `name` under `record --output DIR` with `options`, returning the output
/// directory and the run's output; `None` without a C compiler.
fn record_program(name: &str, options: &[&str]) -> Option<(PathBuf, Output)> {
    let dir = scratch(name);
    let exe = build(name, &dir)?;
    let out_dir = dir.join("out");
    let out = run(record()
        .arg("record")
        .arg("--output")
        .arg(&out_dir)
        .args(options)
        .arg("--")
        .arg(&exe));
    println!("{}", text(&out.stderr));
    Some((out_dir, out))
}

#[test]
fn exit_from_another_thread_writes_the_outputs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((out_dir, out)) = record_program("exit_from_thread", &[]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "exit from a thread\n");
    assert_outputs(&out_dir);
    let lines = folded(&out_dir);
    // Each worker burned 300 ms of CPU before the exit: about 300 samples at 1000 Hz.
    for (parent, leaf) in [("worker_a", "burn_a"), ("worker_b", "burn_b")] {
        let n = samples_under(&lines, parent, leaf);
        println!("{leaf} under {parent}: {n} samples");
        assert!(n >= 100, "{leaf} under {parent}: {n} samples");
    }
    let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());
}

/// `--capture-samples N` writes the first N samples, registers and stacks, as a sequence; walked
/// again away from the process, with a table built from the module files, every one gives the
/// frames the handler found (so the benchmarks that replay sequences measure the handler's work).
#[test]
fn captured_samples_replay_to_the_frames_the_handler_found() {
    use unwind_samples::sequence::{SampleRegs, Sequence};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((out_dir, out)) = record_program("exit_from_thread", &["--capture-samples", "300"])
    else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let seq = Sequence::load(&out_dir.join("profile.sequence"), None).expect("profile.sequence");
    assert_eq!(seq.samples.len(), 300, "the first 300 samples");
    assert!(seq
        .modules
        .iter()
        .any(|m| m.path.ends_with("exit_from_thread")));
    let threads: std::collections::BTreeSet<u32> = seq.samples.iter().map(|s| s.thread).collect();
    assert!(
        threads.len() >= 2,
        "samples of the two workers: {threads:?}"
    );
    let (table, errors) = unwind_samples::offline::table_from_files::<unwind_dwarf::X86_64>(
        &seq.modules,
        std::num::NonZeroU32::MIN,
    )
    .expect("table");
    assert!(errors.is_empty(), "{errors:?}");
    let mut cache = Box::new(unwind_core::Cache::<unwind_dwarf::X86_64>::new());
    let mut pcs = [0u64; 256];
    let mut deep = 0;
    for (i, s) in seq.samples.iter().enumerate() {
        let SampleRegs::X86_64(regs) = s.regs else {
            panic!("sample {i}: not x86_64");
        };
        let image = unwind_core::StackImage::new(s.base, &s.stack);
        let r = unwind_core::unwind(&table, &mut cache, regs, &image, &mut pcs, None);
        assert_eq!(&pcs[..r.frames], &s.pcs[..], "sample {i}");
        deep += usize::from(r.frames >= 5);
    }
    println!("{deep} of 300 samples with 5 frames or more");
    assert!(deep >= 250, "{deep} of 300 samples with 5 frames or more");
    let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());
}

#[test]
fn the_end_of_main_writes_the_outputs_and_passes_the_status_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((out_dir, out)) = record_program("return_from_main", &[]) else {
        return;
    };
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert_outputs(&out_dir);
    // One line at the start and one at the end, naming the files (the summary is in its file).
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("unwind-profiler:"))
        .collect();
    assert_eq!(ours.len(), 2, "{stderr}");
    assert!(
        ours[0].contains("recording") && ours[0].contains("1000 Hz"),
        "{stderr}"
    );
    assert!(
        ours[1].contains(&format!("{}/profile.{{folded,svg", out_dir.display())),
        "{stderr}"
    );
    assert!(
        !stderr.contains("rule cache"),
        "no summary without --verbose: {stderr}"
    );
    let lines = folded(&out_dir);
    for (parent, leaf) in [("main", "main_work"), ("worker", "thread_work")] {
        let n = samples_under(&lines, parent, leaf);
        println!("{leaf} under {parent}: {n} samples");
        assert!(n >= 100, "{leaf} under {parent}: {n} samples");
    }
    let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Stream {
    Out,
    Err,
}

/// Waits for a line of `stream` starting with `prefix` and returns it; fails the test if the
/// run ends or hangs first. Lines of the other stream are printed.
fn expect_line(rx: &mpsc::Receiver<(Stream, String)>, stream: Stream, prefix: &str) -> String {
    let start = Instant::now();
    loop {
        let left = HANG.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok((s, line)) => {
                println!("{s:?}: {line}");
                if s == stream && line.starts_with(prefix) {
                    return line;
                }
            }
            Err(e) => panic!("no {stream:?} line {prefix:?}: {e}"),
        }
    }
}

#[test]
fn the_snapshot_signal_writes_the_profile_so_far_while_the_program_runs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("snapshot");
    let Some(exe) = build("snapshot", &dir) else {
        return;
    };
    let out_dir = dir.join("out");
    let mut running = spawn(
        record()
            .arg("record")
            .arg("--output")
            .arg(&out_dir)
            .args(["--snapshot-signal", "USR2", "--"])
            .arg(&exe)
            .stdin(Stdio::piped()),
    );
    let mut stdin = running.0.stdin.take().unwrap();
    let rx = lines(&mut running);
    let pid: libc::pid_t = expect_line(&rx, Stream::Out, "pid ")["pid ".len()..]
        .parse()
        .unwrap();
    let phases = ["before_snapshot", "middle_phase", "after_snapshot"];
    let counts = |lines: &[(Vec<String>, u64)]| -> Vec<u64> {
        phases
            .iter()
            .map(|f| samples_under(lines, "main", f))
            .collect()
    };
    let written = format!("unwind-profiler: snapshot written to {}", out_dir.display());

    // 1. The program raise()s the signal, then waits on stdin.
    expect_line(&rx, Stream::Err, &written);
    assert!(
        running.0.try_wait().unwrap().is_none(),
        "the program ended at its snapshot"
    );
    assert_outputs(&out_dir);
    let first = counts(&folded(&out_dir));
    println!("first snapshot: {phases:?} = {first:?}");
    assert!(first[0] >= 100, "first snapshot: {first:?}");
    assert_eq!(&first[1..], [0, 0], "first snapshot: {first:?}");
    for f in Outputs::paths(&out_dir, "profile").all() {
        std::fs::remove_file(f).unwrap();
    }

    // 2. The test sends the signal while the program waits again, after its middle phase.
    writeln!(stdin, "go").unwrap();
    expect_line(&rx, Stream::Out, "burned");
    // SAFETY: signals the profiled program, which is still running (it waits on stdin).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR2) }, 0);
    expect_line(&rx, Stream::Err, &written);
    assert!(running.0.try_wait().unwrap().is_none());
    assert_outputs(&out_dir);
    let second = counts(&folded(&out_dir));
    println!("second snapshot: {phases:?} = {second:?}");
    assert!(
        second[0] >= first[0] && second[1] >= 100 && second[2] == 0,
        "second snapshot: {second:?} (first: {first:?})"
    );

    // 3. The program finishes: the outputs at exit have every phase.
    writeln!(stdin, "go").unwrap();
    expect_line(&rx, Stream::Out, "done");
    let status = running.wait();
    assert_eq!(status.code(), Some(0));
    assert_outputs(&out_dir);
    let last = counts(&folded(&out_dir));
    println!("at exit: {phases:?} = {last:?}");
    assert!(
        last[0] >= second[0] && last[1] >= second[1] && last[2] >= 100,
        "at exit: {last:?} (second snapshot: {second:?})"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wall_clock_samples_a_sleeping_thread_and_cpu_time_does_not() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut seen = Vec::new();
    for clock in ["wall", "cpu"] {
        let Some((out_dir, out)) = record_program("wall_clock", &["--clock", clock]) else {
            return;
        };
        assert!(out.status.success(), "{}", text(&out.stderr));
        let lines = folded(&out_dir);
        let busy = samples_under(&lines, "main", "busy");
        let sleepy = samples_under(&lines, "sleeper", "sleepy");
        println!("--clock {clock}: busy {busy}, sleepy {sleepy} samples");
        // busy runs 400 ms of CPU: about 400 samples by either clock.
        assert!(busy >= 100, "--clock {clock}: busy {busy}");
        assert_eq!(
            samples_in(&lines, "sleepy"),
            sleepy,
            "--clock {clock}: sleepy not under sleeper"
        );
        seen.push((busy, sleepy));
        let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());
    }
    let [(wall_busy, wall_sleepy), (cpu_busy, cpu_sleepy)] = seen[..] else {
        unreachable!()
    };
    // Wall clock: the sleeper lives as long as busy runs and is sampled all that time.
    assert!(
        wall_sleepy * 2 >= wall_busy,
        "--clock wall: sleepy {wall_sleepy}, busy {wall_busy}"
    );
    // CPU time: the sleeper uses a few microseconds per millisecond.
    assert!(
        cpu_sleepy * 10 <= cpu_busy,
        "--clock cpu: sleepy {cpu_sleepy}, busy {cpu_busy}"
    );
}

/// A program that ends without running anything of its own (`_exit`, `SIGKILL`) keeps its
/// profile: `record` reads the samples from the memory it shares with the program.
#[test]
fn underscore_exit_and_sigkill_keep_the_profile() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for (name, code, function) in [
        ("underscore_exit", 4, "main_work"),
        ("killed", 128 + 9, "work_before_kill"),
    ] {
        let Some((out_dir, out)) = record_program(name, &[]) else {
            return;
        };
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{name}: {stderr}");
        assert_outputs(&out_dir);
        let n = samples_under(&folded(&out_dir), "main", function);
        println!("{name}: {function} under main: {n} samples");
        assert!(n >= 100, "{name}: {function} under main: {n} samples");
        let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());
    }
}

/// One run of several program images (a fork that execs, then an exec of the first process)
/// gives one profile: one set of files, each process's samples under its own name and pid, and the C
/// library of each process still sees it single-threaded (the profiler starts no thread).
#[test]
fn every_process_of_a_run_is_in_one_profile_and_stays_single_threaded() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((out_dir, out)) = record_program("exec_chain", &[]) else {
        return;
    };
    let stderr = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for who in ["parent", "child", "last"] {
        assert!(
            stdout.contains(&format!("{who} single-threaded 1")),
            "{who}: {stdout}"
        );
    }
    assert_outputs(&out_dir);
    let files: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 5, "one set of outputs: {files:?}");
    // Two processes: the first (before and after its exec of the same program) and the child.
    assert!(stderr.contains("of 2 processes"), "{stderr}");
    // Several processes: each stack starts with its process's name, and the two of this one
    // name are kept apart by their pid.
    let lines = folded(&out_dir);
    let roots: std::collections::BTreeSet<&str> =
        lines.iter().map(|(s, _)| s[0].as_str()).collect();
    assert_eq!(roots.len(), 2, "{roots:?}");
    assert!(
        roots.iter().all(|r| r
            .strip_prefix("exec_chain-")
            .is_some_and(|pid| pid.parse::<u32>().is_ok())),
        "{roots:?}"
    );
    for function in ["parent_work", "child_work", "last_work"] {
        let n = samples_under(&lines, "main", function);
        println!("{function} under main: {n} samples");
        assert!(n >= 100, "{function} under main: {n} samples");
    }
    let summary = std::fs::read_to_string(Outputs::paths(&out_dir, "profile").summary).unwrap();
    assert!(summary.contains("processes         2"), "{summary}");
    let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());
}

/// Worker processes forked without `exec` (the first forking one of its own), from a parent
/// with a second thread, are each profiled as a process of the run, in the one profile.
#[test]
fn forked_workers_are_processes_of_the_profile() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((out_dir, out)) = record_program("forked_workers", &[]) else {
        return;
    };
    let stderr = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for line in [
        "worker 0 done",
        "worker 1 done",
        "worker 2 done",
        "parent done",
    ] {
        assert!(stdout.contains(line), "{line:?} missing: {stdout}");
    }
    assert_outputs(&out_dir);
    // The parent, three workers and the first worker's own.
    assert!(stderr.contains("of 5 processes"), "{stderr}");
    let lines = folded(&out_dir);
    // Each process burns 200 ms of CPU in its function: 200 samples at 1 kHz.
    for (parent, function, processes) in [
        ("main", "parent_work", 1),
        ("thread_main", "thread_work", 1),
        ("main", "worker_work", 3),
        ("main", "grandchild_work", 1),
    ] {
        let n = samples_under(&lines, parent, function);
        println!("{function} under {parent}: {n} samples");
        assert!(
            n >= 100 * processes,
            "{function} under {parent}: {n} samples, want {} or more",
            100 * processes
        );
    }
    let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());
}

/// Code made at run time and described in the process's perf map (`/tmp/perf-PID.map`, as JIT
/// compilers write it) is named by the map in the profile, not by its address.
#[test]
fn code_a_perf_map_describes_is_named_by_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((out_dir, out)) = record_program("jit_perf_map", &[]) else {
        return;
    };
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let pid = stdout
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .unwrap_or_else(|| panic!("no pid line: {stdout}"));
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    let lines = folded(&out_dir);
    let total: u64 = lines.iter().map(|(_, n)| n).sum();
    let named = lines
        .iter()
        .filter(|(s, _)| s.last().is_some_and(|f| f == "jit_spin"))
        .map(|(_, n)| n)
        .sum::<u64>();
    let unknown = lines
        .iter()
        .filter(|(s, _)| s.last().is_some_and(|f| f.starts_with("[unknown]")))
        .map(|(_, n)| n)
        .sum::<u64>();
    println!("{named} of {total} samples in jit_spin, {unknown} leaves unnamed");
    // 500 ms of CPU in the loop: most samples there, none of them left unnamed.
    assert!(
        named >= 100,
        "{named} of {total} samples named jit_spin: {lines:?}"
    );
    assert_eq!(unknown, 0, "{lines:?}");
    let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());
}

/// A library that `dlopen`s a plugin by its own search path (a bare name found through its
/// RUNPATH or RPATH, and a name starting with `$ORIGIN`) loads it under `record` and under the
/// preload library alone as it does on its own: glibc resolves such names from the object that
/// calls `dlopen`, and the preload library's `dlopen` stands between the two. A file that is
/// nowhere fails with the same message, by either kind of name.
#[test]
fn dlopen_keeps_the_search_path_of_its_caller() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("dlopen");
    let expected = "bare name: loaded, plugin_value 42, dlerror empty\n\
                    $ORIGIN name: loaded, plugin_value 42, dlerror empty\n\
                    missing: failed: libnot-anywhere.so: cannot open shared object file: \
                    No such file or directory\n\
                    $ORIGIN missing: failed: $ORIGIN/../plugins/libnot-anywhere.so: cannot open \
                    shared object file: No such file or directory\n";
    for (tag, dtags) in [
        ("RUNPATH", "-Wl,--enable-new-dtags"),
        ("RPATH", "-Wl,--disable-new-dtags"),
    ] {
        // TREE/plugins/libplugin.so, TREE/lib/libloader.so (searching $ORIGIN/../plugins),
        // TREE/caller (searching $ORIGIN/lib).
        let tree = dir.join(tag);
        let lib = tree.join("lib");
        let built = compile(
            "dlopen_plugin.c",
            &tree.join("plugins/libplugin.so"),
            &["-shared", "-fPIC"],
        )
        .and_then(|_| {
            compile(
                "dlopen_loader.c",
                &lib.join("libloader.so"),
                &["-shared", "-fPIC", "-Wl,-rpath,$ORIGIN/../plugins", dtags],
            )
        })
        .and_then(|_| {
            compile(
                "dlopen_caller.c",
                &tree.join("caller"),
                &[
                    &format!("-L{}", lib.display()),
                    "-lloader",
                    "-ldl",
                    "-Wl,-rpath,$ORIGIN/lib",
                    dtags,
                ],
            )
        });
        let Some(exe) = built else {
            return;
        };
        let dynamic = Command::new("readelf")
            .arg("-d")
            .arg(lib.join("libloader.so"))
            .output()
            .expect("readelf (binutils, with cc)");
        assert!(
            text(&dynamic.stdout).contains(&format!("({tag})")),
            "libloader.so has no {tag}: {}",
            text(&dynamic.stdout)
        );

        // The test's own check: the program loads its plugin when nothing stands between.
        let alone = run(Command::new(&exe).env_remove("LD_PRELOAD"));
        assert_eq!(
            text(&alone.stdout),
            expected,
            "{tag}, alone: {}",
            text(&alone.stderr)
        );
        assert!(alone.status.success(), "{tag}, alone: {}", alone.status);

        let out_dir = tree.join("out");
        let recorded = run(record()
            .arg("record")
            .arg("--output")
            .arg(&out_dir)
            .arg("--")
            .arg(&exe));
        let stderr = text(&recorded.stderr);
        println!("{tag}, under record: {stderr}");
        assert_eq!(
            text(&recorded.stdout),
            expected,
            "{tag}, under record: {stderr}"
        );
        assert_eq!(
            recorded.status.code(),
            Some(0),
            "{tag}, under record: {stderr}"
        );

        let mut preloaded = Command::new(&exe);
        for o in OPTIONS {
            preloaded.env_remove(o.env);
        }
        let preloaded = run(preloaded
            .env_remove(unwind_profiler::session::SESSION_VAR)
            .env(
                "LD_PRELOAD",
                release_dir().join("libunwind_profiler_preload.so"),
            )
            .env("UNWIND_PROFILER_OUTPUT", tree.join("preloaded"))
            .env("UNWIND_PROFILER_QUIET", "1"));
        let stderr = text(&preloaded.stderr);
        assert_eq!(
            text(&preloaded.stdout),
            expected,
            "{tag}, preloaded: {stderr}"
        );
        assert!(preloaded.status.success(), "{tag}, preloaded: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A process of the run that never joins the profile (a statically linked program: the loader
/// ignores LD_PRELOAD for it) is said, with the CPU time it took: `record` compares what the
/// kernel counted for all its descendants with what the joined processes used. The same run
/// with a dynamically linked child, which joins, has no such warning.
#[test]
fn cpu_of_processes_that_never_join_is_said() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("never-joined");
    let Some(exe) = build("static_child", &dir) else {
        return;
    };
    let Some(static_exe) = compile(
        "static_child.c",
        &dir.join("static_child_static"),
        &["-static"],
    ) else {
        return;
    };
    let warning = "processes that never joined the profile";
    for (child, joins) in [(&static_exe, false), (&exe, true)] {
        let out_dir = dir.join(if joins { "joined" } else { "static" });
        let out = run(record()
            .arg("record")
            .arg("--output")
            .arg(&out_dir)
            .arg("--")
            .arg(&exe)
            .arg(child));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let summary = std::fs::read_to_string(Outputs::paths(&out_dir, "profile").summary).unwrap();
        let line = summary
            .lines()
            .find(|l| l.starts_with("run's CPU"))
            .unwrap_or_else(|| panic!("{summary}"));
        println!("{}: {line}", child.display());
        // The static child's 800 ms are in the descendants' CPU time either way.
        let all: f64 = line
            .split_whitespace()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(all >= 1.0, "{line}");
        assert_eq!(stderr.contains(warning), !joins, "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The profiler's own work inside the program's calls (the tables rebuilt in `dlopen` and
/// `dlclose`, the interposed `dlopen`'s search) is shown as the profiler's: a frame
/// `[unwind-profiler] ...` under the program's call, never a function the program does not call
/// under the program's frame (before: `churn_loop;__libc_sendmsg`, `churn_loop;_dl_addr`). The
/// C library's `dlopen`, which the program did call, stays the program's.
#[test]
fn the_profilers_own_work_is_shown_as_its_own() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("own-work");
    let Some(exe) = build("dlopen_churn", &dir) else {
        return;
    };
    let out_dir = dir.join("out");
    let out = run(record()
        .arg("record")
        .arg("--output")
        .arg(&out_dir)
        .arg("--")
        .arg(&exe)
        .arg("1500"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut under_loop: std::collections::BTreeMap<String, u64> = Default::default();
    for (stack, n) in folded(&out_dir) {
        // Root first: what `churn_loop` calls is the frame after it.
        if let Some(i) = stack.iter().position(|f| f == "churn_loop") {
            let callee = stack.get(i + 1).cloned().unwrap_or_else(|| "(self)".into());
            *under_loop.entry(callee).or_default() += n;
        }
        // The profiler's frame is a leaf: what it did is its own.
        if let Some(i) = stack
            .iter()
            .position(|f| f.starts_with("[unwind-profiler] "))
        {
            assert_eq!(i + 1, stack.len(), "{stack:?}");
        }
    }
    println!("under churn_loop: {under_loop:?}");
    for (callee, n) in &under_loop {
        assert!(
            callee.contains("dlopen")
                || callee.contains("dlclose")
                || callee.starts_with("[unwind-profiler] ")
                || callee == "(self)",
            "churn_loop calls only dlopen and dlclose, not {callee} ({n} samples): {under_loop:?}"
        );
    }
    let rebuilds = under_loop
        .get("[unwind-profiler] table rebuild")
        .copied()
        .unwrap_or(0);
    assert!(rebuilds > 0, "{under_loop:?}");
    let summary = std::fs::read_to_string(Outputs::paths(&out_dir, "profile").summary).unwrap();
    let line = summary
        .lines()
        .find(|l| l.starts_with("profiler's work"))
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        line.contains(&format!("table rebuild {rebuilds}")),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program that spends its time 700 calls deep is sampled whole: each stack reaches `main`
/// (no `BufferFull`), and `--max-frames` still cuts walks where asked, counted.
#[test]
fn deep_stacks_are_recorded_whole() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((out_dir, out)) = record_program("deep_recursion", &[]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines = folded(&out_dir);
    let total: u64 = lines.iter().map(|(_, n)| n).sum();
    let deep: u64 = lines
        .iter()
        .filter(|(s, _)| {
            s.iter().position(|f| f == "main").is_some()
                && s.iter().filter(|f| *f == "descend").count() == 701
        })
        .map(|(_, n)| n)
        .sum();
    println!("{deep} of {total} samples 701 calls deep under main");
    assert!(total >= 100, "{total} samples");
    assert!(deep * 10 >= total * 9, "{deep} of {total} reach main");
    let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());

    let Some((out_dir, out)) = record_program("deep_recursion", &["--max-frames", "100"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary = std::fs::read_to_string(Outputs::paths(&out_dir, "profile").summary).unwrap();
    let cut = summary
        .lines()
        .find(|l| l.trim_start().starts_with("BufferFull"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(cut >= 100, "BufferFull {cut}:\n{summary}");
    let _ = std::fs::remove_dir_all(out_dir.parent().unwrap());
}
