//! `unwind-profiler record [OPTIONS] -- PROGRAM [ARGS...]`: runs a program under the preload
//! library, collects the samples of every process it becomes or starts through a session
//! ([`unwind_profiler::session`]), and when the last has ended writes one profile and prints
//! the paths of the outputs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use unwind_profiler::config::{Config, OPTIONS};
use unwind_profiler::session::{Server, RULES_CACHE_VAR, SESSION_VAR};

const LIBRARY: &str = "libunwind_profiler_preload.so";

fn usage() -> String {
    let mut s = String::from(
        "Usage: unwind-profiler record [OPTIONS] -- PROGRAM [ARGS...]\n\n\
         Runs PROGRAM with the profiler preloaded, samples every thread it starts, and when it\n\
         exits writes, in the output directory: STEM.folded (folded stacks), STEM.svg (flame\n\
         graph), STEM.pb.gz (pprof: `go tool pprof`), STEM.firefox.json.gz (profiler.firefox.com)\n\
         and STEM.summary.txt: one profile of PROGRAM and every program it runs (exec, fork and\n\
         exec), however each ends (exit, _exit, a signal, SIGKILL). It ends when PROGRAM and every\n\
         process PROGRAM started have ended; Ctrl-C goes to PROGRAM, which ends as it would\n\
         alone, and then it reports how.\n\n\
         Options (each also settable as the environment variable shown, for LD_PRELOAD use):\n",
    );
    for o in OPTIONS {
        let flag = if o.value.is_empty() {
            o.flag.to_string()
        } else {
            format!("{} {}", o.flag, o.value)
        };
        s.push_str(&format!(
            "  {flag:<28} {}\n  {:<28} [{}]\n",
            o.help, "", o.env
        ));
    }
    s.push_str(&format!(
        "  {:<28} the preload library (default: {LIBRARY} next to this program)\n",
        "--library PATH"
    ));
    s.push_str(&format!("  {:<28} this help\n", "-h, --help"));
    s.push_str(
        "\nExit status: PROGRAM's own; 128+N if signal N ended it (as a shell reports it); 2 for a\n\
         bad option or no preload library; 127 if PROGRAM cannot be run.\n",
    );
    s
}

/// What the command line asks for.
struct Request {
    vars: Vec<(String, String)>,
    library: Option<PathBuf>,
    program: Vec<OsString>,
}

fn parse(args: Vec<OsString>) -> Result<Option<Request>, String> {
    let mut it = args.into_iter();
    match it.next().as_ref().and_then(|a| a.to_str()) {
        Some("record") => {}
        Some("-h" | "--help" | "help") => return Ok(None),
        Some(other) => return Err(format!("unknown command {other:?} (want `record`)")),
        None => return Err("missing command `record`".into()),
    }
    let mut r = Request {
        vars: Vec::new(),
        library: None,
        program: Vec::new(),
    };
    while let Some(a) = it.next() {
        let Some(s) = a.to_str() else {
            return Err(format!("option {a:?} is not UTF-8"));
        };
        match s {
            "--" => {
                r.program = it.collect();
                break;
            }
            "-h" | "--help" => return Ok(None),
            "--library" => {
                r.library = Some(it.next().ok_or("--library needs a path")?.into());
            }
            _ => {
                let (flag, inline) = match s.split_once('=') {
                    Some((f, v)) => (f, Some(v.to_string())),
                    None => (s, None),
                };
                let Some(o) = OPTIONS.iter().find(|o| o.flag == flag) else {
                    return Err(format!(
                        "unknown option {s:?} (the program goes after `--`; see --help)"
                    ));
                };
                let value = if o.value.is_empty() {
                    "1".to_string()
                } else {
                    match inline {
                        Some(v) => v,
                        None => it
                            .next()
                            .and_then(|v| v.into_string().ok())
                            .ok_or_else(|| format!("{} needs a value ({})", o.flag, o.value))?,
                    }
                };
                r.vars.push((o.env.to_string(), value));
            }
        }
    }
    if r.program.is_empty() {
        return Err("no program to run (usage: record [OPTIONS] -- PROGRAM [ARGS...])".into());
    }
    Ok(Some(r))
}

/// The preload library: given, or next to this executable.
fn find_library(given: Option<PathBuf>) -> Result<PathBuf, String> {
    let path = match given.or_else(|| std::env::var_os("UNWIND_PROFILER_LIBRARY").map(Into::into)) {
        Some(p) => p,
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this program's path: {e}"))?
            .with_file_name(LIBRARY),
    };
    if !path.is_file() {
        return Err(format!(
            "the preload library {} does not exist (build it with `cargo build --release -p unwind-profiler-preload`, or pass --library)",
            path.display()
        ));
    }
    path.canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes the profile so far (the snapshot signal reached a process).
fn write_snapshot(server: &Server, dir: &Path, stem: &str) {
    let Some(profile) = server.profile() else {
        return;
    };
    match unwind_profiler::output::write_all(&profile, dir, stem) {
        Ok(_) => eprintln!("unwind-profiler: snapshot written to {}", dir.display()),
        Err(e) => eprintln!("unwind-profiler: snapshot: {e}"),
    }
}

/// Collects from the session until every descendant of `record` has ended (orphans are
/// reparented to it, a child subreaper), reaping them; returns the status of `child`.
fn collect_until_all_ended(
    mut server: Option<&mut Server>,
    child: libc::pid_t,
    dir: &Path,
    stem: &str,
) -> Option<libc::c_int> {
    let mut child_status = None;
    loop {
        match server.as_mut() {
            Some(s) => {
                s.collect(Duration::from_millis(10));
                if s.snapshot_requested() {
                    write_snapshot(s, dir, stem);
                }
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
        loop {
            let mut status = 0;
            // SAFETY: reaps any ended child of this process; `status` is a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == child {
                child_status = Some(status);
            }
            if pid == 0 {
                break; // children left, none ended
            }
            if pid < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return child_status; // ECHILD: none left
            }
        }
    }
}

/// The line `record` ends with: the program's samples and the files, and how many other
/// processes (those it `exec`ed or forked and that `exec`ed) wrote profiles of their own.
fn end_line(summary: &str, dir: &Path, stem: &str) -> String {
    let samples = summary
        .lines()
        .find_map(|l| l.strip_prefix("samples stored"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or("no");
    let theirs = format!("{stem}-");
    let others = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.starts_with(&theirs) && name.ends_with(".summary.txt")
                })
                .count()
        })
        .unwrap_or(0);
    let mut line = format!(
        "unwind-profiler: {samples} samples; profile in {}/{stem}.{{folded,svg,pb.gz,firefox.json.gz,summary.txt}}",
        dir.display()
    );
    if others > 0 {
        line.push_str(&format!(
            "; {others} other processes' in {stem}-COMM-PID.* there"
        ));
    }
    line
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let request = match parse(args) {
        Ok(Some(r)) => r,
        Ok(None) => {
            print!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("unwind-profiler: {e}\n\n{}", usage());
            return ExitCode::from(2);
        }
    };
    // Check every value now, with the same parser the library uses at start.
    let vars = request.vars.clone();
    let config = match Config::from_vars(|name| {
        vars.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }) {
        Ok(c) => c,
        Err(e) => {
            let flag = OPTIONS
                .iter()
                .find(|o| o.env == e.setting)
                .map_or(e.setting.as_str(), |o| o.flag);
            eprintln!(
                "unwind-profiler: {flag} {:?}: expected {}",
                e.value, e.expected
            );
            return ExitCode::from(2);
        }
    };
    let library = match find_library(request.library) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("unwind-profiler: {e}");
            return ExitCode::from(2);
        }
    };
    // An absolute output directory: the program may change its working directory.
    let dir = config
        .output
        .clone()
        .unwrap_or_else(|| "unwind-profile".into());
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("unwind-profiler: cannot create {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(p) if !p.is_empty() => {
            let mut s = library.clone().into_os_string();
            s.push(":");
            s.push(p);
            s
        }
        _ => library.clone().into_os_string(),
    };
    let mut cmd = Command::new(&request.program[0]);
    cmd.args(&request.program[1..])
        .env("LD_PRELOAD", preload)
        .env("UNWIND_PROFILER_OUTPUT", &dir)
        .env("UNWIND_PROFILER_RECORD", "1")
        .env_remove("UNWIND_PROFILER_ROOT_PID");
    // The processes join the session: one profile of them all, written here.
    let mut server = match Server::new(&config, &library) {
        Ok(s) => {
            cmd.env(SESSION_VAR, s.name());
            match s.rules_cache() {
                Some(dir) => cmd.env(RULES_CACHE_VAR, dir),
                None => cmd.env_remove(RULES_CACHE_VAR),
            };
            Some(s)
        }
        Err(e) => {
            eprintln!("unwind-profiler: cannot open the session socket ({e}); each process writes its own profile");
            cmd.env_remove(SESSION_VAR);
            None
        }
    };
    for (k, v) in &request.vars {
        if k != "UNWIND_PROFILER_OUTPUT" {
            cmd.env(k, v);
        }
    }
    if !config.quiet {
        eprintln!(
            "unwind-profiler: recording {} at {} Hz of {} time into {}",
            Path::new(&request.program[0]).display(),
            config.frequency,
            match config.clock {
                unwind_profiler::config::Clock::Cpu => "CPU",
                unwind_profiler::config::Clock::Wall => "wall-clock",
            },
            dir.display()
        );
    }
    // Ctrl-C (and Ctrl-\) go to the terminal's whole foreground group: the program acts on
    // them; `record` outlives it, as a shell does, and reports how it ended. A handler rather
    // than SIG_IGN, which the program would inherit through `exec`.
    extern "C" fn outlive(_: libc::c_int) {}
    for signal in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: installs a handler that does nothing (async-signal-safe by being empty).
        unsafe {
            libc::signal(
                signal,
                outlive as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
    // The program's descendants that outlive it are reparented to `record`, which waits for
    // them too: their profiles are written when they end.
    // SAFETY: only changes who reaps this process's orphaned descendants.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "unwind-profiler: cannot run {}: {e}",
                Path::new(&request.program[0]).display()
            );
            return ExitCode::from(127);
        }
    };
    let child = child.id() as libc::pid_t;
    unwind_profiler::session::raise_descriptor_limit();
    let status = collect_until_all_ended(server.as_mut(), child, &dir, &config.stem);
    let profile = server.and_then(Server::finish);
    match profile {
        Some(profile) => match unwind_profiler::output::write_all(&profile, &dir, &config.stem) {
            Ok(out) if !config.quiet => {
                if config.verbose {
                    if let Ok(text) = std::fs::read_to_string(&out.summary) {
                        eprintln!("{text}");
                    }
                }
                let processes = profile.processes().len();
                let mut line = format!("unwind-profiler: {} samples", profile.sample_count());
                if processes > 1 {
                    line.push_str(&format!(" of {processes} processes"));
                }
                line.push_str(&format!(
                    "; profile in {}/{}.{{folded,svg,pb.gz,firefox.json.gz,summary.txt}}",
                    dir.display(),
                    config.stem
                ));
                eprintln!("{line}");
            }
            Ok(_) => {}
            Err(e) => eprintln!("unwind-profiler: {e}"),
        },
        None => {
            // Processes that could not join wrote their own profiles.
            let summary = dir.join(format!("{}.summary.txt", config.stem));
            match std::fs::read_to_string(&summary) {
                Ok(_) if config.quiet => {}
                Ok(text) => {
                    if config.verbose {
                        eprintln!("{text}");
                    }
                    eprintln!("{}", end_line(&text, &dir, &config.stem));
                }
                Err(_) => eprintln!(
                    "unwind-profiler: the program wrote no profile ({} is missing: it may be statically linked, or not have loaded the preload library)",
                    summary.display()
                ),
            }
        }
    }
    let Some(status) = status else {
        eprintln!("unwind-profiler: the program's exit status was lost");
        return ExitCode::from(1);
    };
    if libc::WIFEXITED(status) {
        return ExitCode::from(libc::WEXITSTATUS(status).clamp(0, 255) as u8);
    }
    let signal = if libc::WIFSIGNALED(status) {
        libc::WTERMSIG(status)
    } else {
        0
    };
    eprintln!("unwind-profiler: the program was killed by signal {signal}");
    ExitCode::from(128 + signal.clamp(0, 127) as u8)
}
