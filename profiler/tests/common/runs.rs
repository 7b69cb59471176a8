//! Running a program under `record` and reading its outputs back, for the tests that profile
//! real programs (everyday_commands.rs, jit_programs.rs). The including test declares the
//! `common` modules this one uses: `firefox`, `record_command`, `summary_text` and `svg`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use unwind_profiler::output::Outputs;

/// How long a run may take before the test calls it hung (a guard: runs take seconds).
pub const HANG: Duration = Duration::from_secs(180);

/// A fresh, empty directory named for `test`.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("unwind-profiler-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// True if every tool of `tools` runs (each `(program, args)`); a missing one is reported
/// (failing the test under CI).
pub fn have(tools: &[(&str, &[&str])]) -> bool {
    tools.iter().all(|(tool, args)| {
        let runs = unwind_test_support::tool_runs_with(tool, args);
        if !runs {
            unwind_test_support::missing(tool);
        }
        runs
    })
}

/// `record --output OUT OPTIONS -- PROGRAM...`, in a process group of its own, without the
/// test's own profiler settings, its stdout thrown away.
pub fn record(out: &Path, options: &[&str], program: &[&str]) -> Command {
    let mut cmd = crate::record_command::command(&crate::record_command::release_dir());
    cmd.arg("record")
        .arg("--output")
        .arg(out)
        .args(options)
        .arg("--")
        .args(program)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `cmd`, interrupting its process group with `SIGINT` after `interrupt_after` if given,
/// as Ctrl-C in a terminal would; returns its status and stderr. Kills the group if it hangs.
pub fn run(cmd: &mut Command, interrupt_after: Option<Duration>) -> (ExitStatus, String) {
    let mut child = cmd.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let group = child.id() as libc::pid_t;
    let mut interrupted = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if interrupt_after.is_some_and(|t| !interrupted && start.elapsed() >= t) {
            // SAFETY: signals the process group made for this run.
            unsafe { libc::kill(-group, libc::SIGINT) };
            interrupted = true;
        }
        if start.elapsed() > HANG {
            // SAFETY: as above.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            let _ = child.wait();
            panic!("the run hung: {}", reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status, reader.join().unwrap())
}

/// Checks that `dir` holds one set of outputs (stem `profile`) and that every reader takes it
/// with the same number of samples; returns that number.
pub fn check_outputs(what: &str, dir: &Path) -> u64 {
    check_outputs_and(what, dir, 0)
}

/// [`check_outputs`], with `extra` files beside the set (the heap profile).
pub fn check_outputs_and(what: &str, dir: &Path, extra: usize) -> u64 {
    let paths = Outputs::paths(dir, "profile");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        paths.all().len() + extra,
        "{what}: one set of outputs: {files:?}"
    );
    let folded_text = std::fs::read_to_string(&paths.folded).unwrap();
    let folded: u64 = unwind_profiler::output::folded::parse(&folded_text)
        .iter()
        .map(|(_, n)| n)
        .sum();
    // `go tool pprof` reads the file: "Total samples = N" counts the `samples` values.
    let top = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-sample_index=samples",
            "-top",
            "-nodecount=5",
        ])
        .arg(&paths.pprof)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{what}: go tool pprof failed: {}",
        String::from_utf8_lossy(&top.stderr)
    );
    let pprof: u64 = text
        .split("Total samples = ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no sample total from go tool pprof:\n{text}"));
    crate::svg::svg_text(&std::fs::read_to_string(&paths.flamegraph).unwrap());
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&paths.firefox).unwrap())
        .read_to_end(&mut json)
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json).expect("Firefox profile JSON");
    crate::firefox::check_firefox(&json, None);
    // Each Firefox sample stands for `weight` timer periods, as each folded count does.
    let firefox: u64 = json["threads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["samples"]["weight"].as_array().unwrap().clone())
        .map(|w| w.as_u64().unwrap_or(1))
        .sum();
    // The summary's counts: samples in the profile (pprof's `samples` values count each once)
    // and the timer periods they stand for (each folded count and Firefox weight is one).
    let summary = std::fs::read_to_string(&paths.summary).unwrap();
    let in_profile: u64 = summary
        .lines()
        .find_map(|l| l.strip_prefix("samples stored"))
        .and_then(|l| l.split("; ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no samples line in the summary:\n{summary}"));
    let periods = crate::summary_text::required(&summary, "periods");
    println!(
        "{what}: {in_profile} samples for {periods} periods (pprof {pprof} samples, folded \
         {folded} and Firefox {firefox} periods); {files:?}"
    );
    assert_eq!(
        pprof, in_profile,
        "{what}: go tool pprof's total against the summary's"
    );
    assert_eq!(
        folded, periods,
        "{what}: the folded stacks' periods against the summary's"
    );
    assert_eq!(
        firefox, periods,
        "{what}: the Firefox profile's periods against the summary's"
    );
    in_profile
}

/// The folded stacks of `dir`, as (frames root first, count).
pub fn folded(dir: &Path) -> Vec<(Vec<String>, u64)> {
    let text = std::fs::read_to_string(Outputs::paths(dir, "profile").folded).unwrap();
    unwind_profiler::output::folded::parse(&text)
}

/// Samples whose stack holds a frame for which `f` holds.
pub fn samples_with(lines: &[(Vec<String>, u64)], f: impl Fn(&str) -> bool) -> u64 {
    lines
        .iter()
        .filter(|(s, _)| s.iter().any(|x| f(x)))
        .map(|(_, n)| n)
        .sum()
}
