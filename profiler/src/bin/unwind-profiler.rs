//! `unwind-profiler record [OPTIONS] -- PROGRAM [ARGS...]`: runs a program under the preload
//! library, collects the samples of every process it becomes or starts through a session
//! ([`unwind_profiler::session`]), and when the last has ended writes one profile and prints
//! the paths of the outputs.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use unwind_profiler::config::{Config, OPTIONS};
use unwind_profiler::periods::Periods;
use unwind_profiler::session::{Server, KEY_VAR, RULES_CACHE_VAR, SESSION_VAR};

const LIBRARY: &str = "libunwind_profiler_preload.so";
/// The build of the preload library that interposes the allocator, preloaded with `--alloc`.
const ALLOC_LIBRARY: &str = "libunwind_profiler_preload_alloc.so";
/// The musl builds of the two, when installed next to the command.
const MUSL_LIBRARY: &str = "libunwind_profiler_preload-musl.so";
const MUSL_ALLOC_LIBRARY: &str = "libunwind_profiler_preload_alloc-musl.so";

/// The exit status of a run whose profile could not be written (sysexits.h: an output file
/// cannot be created).
const EX_CANTCREAT: u8 = 73;

/// How long a continuous run, once the program has ended, keeps trying to deliver the periods
/// still queued.
const EXPORT_AT_EXIT: Duration = Duration::from_secs(30);

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
         bad option, no preload library or an output directory it cannot write to safely (checked\n\
         before PROGRAM runs: it must belong to you and no other user may write in it); 127 if\n\
         PROGRAM cannot be run. If an output could not be written (a full disk), or no profile was\n\
         written at all (a statically linked or set-user-ID PROGRAM), PROGRAM's status if it was\n\
         not 0, else 73 (EX_CANTCREAT).\n",
    );
    s
}

/// The sysroot an emulated program's files are in: with qemu-user as the program, its `-L`
/// directory; else `QEMU_LD_PREFIX` (`prefix`), which qemu-user reads however it was started
/// (binfmt_misc included).
fn qemu_sysroot(program: &[OsString], prefix: Option<OsString>) -> Option<PathBuf> {
    let is_qemu = program.first().is_some_and(|p| {
        Path::new(p)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("qemu-"))
    });
    let mut from_flag = None;
    if is_qemu {
        let mut args = program[1..].iter();
        while let Some(a) = args.next() {
            let Some(a) = a.to_str().filter(|a| a.starts_with('-')) else {
                break; // the guest program: what follows is its own
            };
            match a.trim_start_matches('-') {
                "L" => from_flag = args.next().map(PathBuf::from),
                // qemu's options that take a value, whose value may not start with `-`.
                "U" | "E" | "0" | "s" | "cpu" | "B" | "R" | "d" | "D" | "p" | "r" | "g"
                | "seed" | "plugin" | "dfilter" | "trace" => {
                    args.next();
                }
                _ => {}
            }
        }
    }
    from_flag
        .or_else(|| prefix.filter(|p| !p.is_empty()).map(PathBuf::from))
        .and_then(|p| std::path::absolute(p).ok())
        .filter(|p| p.is_dir())
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
                // --label is repeatable: its values accumulate.
                match r.vars.iter_mut().find(|(k, _)| k == o.env) {
                    Some((_, v)) if o.flag == "--label" => {
                        v.push(',');
                        v.push_str(&value);
                    }
                    _ => r.vars.push((o.env.to_string(), value)),
                }
            }
        }
    }
    match r.program.first() {
        None => {
            return Err("no program to run (usage: record [OPTIONS] -- PROGRAM [ARGS...])".into())
        }
        Some(p) if p.is_empty() => {
            return Err(
                "the program's name is empty (usage: record [OPTIONS] -- PROGRAM [ARGS...])".into(),
            )
        }
        Some(_) => {}
    }
    Ok(Some(r))
}

/// The preload library: given, or next to this executable (with `alloc`, the build that
/// interposes the allocator, `libunwind_profiler_preload_alloc.so`); for a program whose loader
/// is musl's (`musl`), the musl build: `UNWIND_PROFILER_MUSL_LIBRARY`, else
/// `libunwind_profiler_preload[_alloc]-musl.so` next to this executable, else where
/// `scripts/build-musl` puts it in the same cargo target directory.
fn find_library(given: Option<PathBuf>, musl: bool, alloc: bool) -> Result<PathBuf, String> {
    let (library, musl_library, package) = if alloc {
        (
            ALLOC_LIBRARY,
            MUSL_ALLOC_LIBRARY,
            "unwind-profiler-preload-alloc",
        )
    } else {
        (LIBRARY, MUSL_LIBRARY, "unwind-profiler-preload")
    };
    let here =
        std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let path = match given.or_else(|| std::env::var_os("UNWIND_PROFILER_LIBRARY").map(Into::into)) {
        Some(p) => p,
        None if musl => {
            let candidates: Vec<PathBuf> = std::env::var_os("UNWIND_PROFILER_MUSL_LIBRARY")
                .map(PathBuf::from)
                .into_iter()
                .chain([
                    here.with_file_name(musl_library),
                    here.with_file_name("..")
                        .join(format!("{}-unknown-linux-musl", std::env::consts::ARCH))
                        .join(here.parent().and_then(Path::file_name).unwrap_or_default())
                        .join(library),
                ])
                .collect();
            match candidates.iter().find(|p| p.is_file()) {
                Some(p) => p.clone(),
                None => {
                    return Err(format!(
                        "the program uses musl's loader: it needs the musl build of the preload library, which is in none of {} (build it with scripts/build-musl, or pass --library)",
                        candidates
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            }
        }
        None => here.with_file_name(library),
    };
    if !path.is_file() {
        return Err(format!(
            "the preload library {} does not exist (build it with `cargo build --release -p {package}`, or pass --library)",
            path.display()
        ));
    }
    path.canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes the profile so far (the snapshot signal reached a process).
fn write_snapshot(server: &mut Server, dir: &Path, stem: &str, mode: u32) {
    let Some(profile) = server.profile() else {
        return;
    };
    match unwind_profiler::output::write_all_with_mode(&profile, dir, stem, mode) {
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
    config: &Config,
    mut periods: Option<&mut Periods>,
) -> Option<libc::c_int> {
    let mut child_status = None;
    loop {
        match server.as_mut() {
            Some(s) => {
                s.collect(config.drain_every());
                if s.snapshot_requested() {
                    write_snapshot(s, dir, &config.stem, config.output_mode);
                }
                if let Some(p) = periods.as_deref_mut().filter(|p| p.due()) {
                    p.take(|| s.cut_period());
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

/// `record`'s own CPU time, all its threads.
fn own_cpu() -> Duration {
    Duration::from_nanos(unwind_profiler::sampler::clock_ns(
        libc::CLOCK_PROCESS_CPUTIME_ID,
    ))
}

/// The CPU time of every descendant of `record` that ended and was waited for: all of them, once
/// [`collect_until_all_ended`] returned (orphans are reparented to `record`, which waits for
/// them; the others were waited for by their parents).
fn descendants_cpu() -> Duration {
    // SAFETY: a zeroed rusage is valid; getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
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

/// The file `execvp` runs for `program`: `program` itself if it names a path (has a '/'), else
/// the first executable regular file of that name in a directory of `PATH`.
fn resolve_program(program: &OsStr) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(program.into());
    }
    // glibc's execvp searches its default path where PATH is unset.
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    path.as_bytes().split(|&b| b == b':').find_map(|dir| {
        let dir = if dir.is_empty() { b"." } else { dir };
        let candidate = Path::new(OsStr::from_bytes(dir)).join(program);
        let c = CString::new(candidate.as_os_str().as_bytes()).ok()?;
        // SAFETY: `c` is a NUL-terminated path; access only reads it.
        let executable = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
        (executable && candidate.is_file()).then_some(candidate)
    })
}

/// Why the dynamic loader runs `program` in secure-execution mode (`AT_SECURE`), ignoring
/// `LD_PRELOAD`: the reason, and what to do instead; `None` if it does not.
fn secure_execution(program: &Path) -> Option<(String, String)> {
    let meta = std::fs::metadata(program).ok()?;
    let c = CString::new(program.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statvfs is valid for statvfs to overwrite.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `fs` a valid out-pointer.
    let nosuid =
        unsafe { libc::statvfs(c.as_ptr(), &mut fs) } == 0 && fs.f_flag & libc::ST_NOSUID != 0;
    // SAFETY: reads this process's no_new_privs flag, which the program inherits.
    let no_new_privs = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } == 1;
    if nosuid || no_new_privs {
        return None; // the kernel ignores the file's set-ID bits and capabilities
    }
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mode = meta.mode();
    if mode & libc::S_ISUID != 0 && meta.uid() != uid {
        return Some((
            format!("set-user-ID to uid {} (your real uid is {uid})", meta.uid()),
            format!("run record as uid {}", meta.uid()),
        ));
    }
    // Set-group-ID without group execute permission is not set-group-ID (mandatory locking).
    let setgid = libc::S_ISGID | libc::S_IXGRP;
    if mode & setgid == setgid && meta.gid() != gid {
        return Some((
            format!(
                "set-group-ID to gid {} (your real gid is {gid})",
                meta.gid()
            ),
            format!("run record with {} as its real gid", meta.gid()),
        ));
    }
    // File capabilities make an exec secure for every user but root, whose own capabilities
    // already cover them (the kernel's cap_bprm_creds_from_file).
    // SAFETY: `c` and the attribute name are NUL-terminated; a null buffer of size 0 asks
    // only whether the attribute exists (and its size).
    let capabilities = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    } >= 0;
    if capabilities && uid != 0 {
        return Some((
            "given capabilities (its security.capability attribute)".into(),
            "run record as root".into(),
        ));
    }
    None
}

/// What `program` names as its program interpreter (`PT_INTERP`, the dynamic loader that
/// loads the preload library): `Some(None)` for an ELF executable without one (statically
/// linked), `None` if it cannot be read as ELF.
fn interpreter(program: &Path) -> Option<Option<String>> {
    use object::read::elf::{FileHeader, ProgramHeader};
    use object::Endianness;
    fn read<H: FileHeader<Endian = Endianness>>(data: &[u8]) -> Option<Option<String>> {
        let header = H::parse(data).ok()?;
        let endian = header.endian().ok()?;
        let headers = header.program_headers(endian, data).ok()?;
        if headers.is_empty() {
            return None;
        }
        let Some(interp) = headers
            .iter()
            .find(|h| h.p_type(endian) == object::elf::PT_INTERP)
        else {
            return Some(None);
        };
        let bytes = interp.data(endian, data).ok()?;
        let path = bytes.split(|&b| b == 0).next().unwrap_or_default();
        Some(Some(String::from_utf8_lossy(path).into_owned()))
    }
    // The program headers and the interpreter's path follow the ELF header, within the first
    // pages of the file.
    let mut head = Vec::new();
    std::fs::File::open(program)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 16), &mut head))
        .ok()?;
    match object::FileKind::parse(&head[..]) {
        Ok(object::FileKind::Elf64) => read::<object::elf::FileHeader64<Endianness>>(&head),
        Ok(object::FileKind::Elf32) => read::<object::elf::FileHeader32<Endianness>>(&head),
        _ => None,
    }
}

/// Whether `program` is an ELF executable without a program interpreter (`PT_INTERP`): no
/// dynamic loader runs in it to load the preload library.
fn statically_linked(program: &Path) -> bool {
    interpreter(program) == Some(None)
}

/// Whether `program`'s loader is musl's (`/lib/ld-musl-ARCH.so.1`): a glibc build of the
/// preload library cannot load into it.
fn uses_musl(program: &Path) -> bool {
    interpreter(program)
        .flatten()
        .is_some_and(|i| unwind_profiler::symbolize::basename(&i).starts_with("ld-musl-"))
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
    // A relative symbol root is taken from where `record` runs.
    let mut request = request;
    for (k, v) in &mut request.vars {
        if k == "UNWIND_PROFILER_SYMFS" {
            if let Ok(p) = std::path::absolute(&*v) {
                *v = p.display().to_string();
            }
        }
    }
    // Check every value now, with the same parser the library uses at start.
    let vars = request.vars.clone();
    let mut config = match Config::from_vars(|name| {
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
    if config.symfs.is_none() {
        config.symfs = qemu_sysroot(&request.program, std::env::var_os("QEMU_LD_PREFIX"));
    }
    let musl = resolve_program(&request.program[0]).is_some_and(|p| uses_musl(&p));
    let library = match find_library(request.library, musl, config.alloc_interval.is_some()) {
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
    // Before the program runs: a run whose profile cannot be written is a run wasted.
    if let Err(e) = unwind_profiler::output::check_directory(&dir) {
        eprintln!("unwind-profiler: {e}");
        return ExitCode::from(2);
    }
    let export =
        match unwind_profiler::export::Export::configured(&config, |n| std::env::var(n).ok()) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("unwind-profiler: {e}");
                return ExitCode::from(2);
            }
        };
    let mut periods = match config.profile_period {
        Some(every) => match Periods::start(
            every,
            Some(&dir),
            &config.stem,
            config.keep_periods,
            config.output_mode,
            export.clone(),
        ) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("unwind-profiler: cannot start continuous profiling: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
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
            cmd.env(SESSION_VAR, s.name()).env(KEY_VAR, s.key());
            match s.rules_cache() {
                Some(dir) => cmd.env(RULES_CACHE_VAR, dir),
                None => cmd.env_remove(RULES_CACHE_VAR),
            };
            Some(s)
        }
        Err(e) => {
            eprintln!("unwind-profiler: cannot open the session socket ({e}); each process writes its own profile");
            cmd.env_remove(SESSION_VAR).env_remove(KEY_VAR);
            None
        }
    };
    for (k, v) in &request.vars {
        if k != "UNWIND_PROFILER_OUTPUT" {
            cmd.env(k, v);
        }
    }
    // The loader would ignore the preload library: say so now rather than after the run.
    let program = resolve_program(&request.program[0]);
    let secure = program.as_deref().and_then(secure_execution);
    if let (Some(program), Some((reason, remedy))) = (&program, &secure) {
        eprintln!(
            "unwind-profiler: {} is {reason}: the dynamic loader ignores LD_PRELOAD for it (secure execution), so it cannot be profiled; {remedy}",
            program.display()
        );
    }
    if !config.quiet {
        let what = if config.sample_cpu {
            format!(
                "at {} Hz of {} time",
                config.frequency,
                config.clock.time_name()
            )
        } else {
            "allocations alone".to_string()
        };
        eprintln!(
            "unwind-profiler: recording {} {what} into {}",
            Path::new(&request.program[0]).display(),
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
    let status = collect_until_all_ended(server.as_mut(), child, &dir, &config, periods.as_mut());
    // What the user waits for once the program is done: symbolizing and writing.
    let ended = std::time::Instant::now();
    // A continuous run ends with its last, partial period; its summary is of that period with
    // the run's counters.
    let mut profile = match periods.as_mut() {
        Some(periods) => server
            .as_mut()
            .and_then(|s| periods.take(|| s.cut_period())),
        None => server.as_mut().and_then(Server::finish),
    };
    let period_counts = periods.map(|p| {
        p.finish(
            EXPORT_AT_EXIT,
            server.as_ref().map_or(0, Server::symbol_cache_resets),
        )
    });
    let symbolized = ended.elapsed();
    if let Some(p) = profile.as_mut() {
        p.counters.descendants_cpu = Some(descendants_cpu());
        p.counters.recorder_cpu = Some(own_cpu());
        p.counters.periods = period_counts.clone();
    }
    if !config.quiet {
        // What the user must know of the profile: what was refused, what was not sampled.
        let warnings = match &profile {
            Some(p) => unwind_profiler::output::summary::warnings(p),
            None => server
                .as_ref()
                .and_then(|s| unwind_profiler::output::summary::refused_line(&s.refused()))
                .into_iter()
                .collect(),
        };
        for w in warnings {
            eprintln!("unwind-profiler: warning: {w}");
        }
    }
    // Whether the profile the run was for is missing, in part or whole.
    let mut not_written = false;
    if let Some(counts) = &period_counts {
        if let Some(e) = &counts.export {
            let lost = e.dropped + e.refused + e.undelivered;
            if lost > 0 {
                eprintln!(
                    "unwind-profiler: warning: {lost} of {} periods were not exported ({} dropped, the queue full; {} refused; {} undelivered at the end){}",
                    counts.cut,
                    e.dropped,
                    e.refused,
                    e.undelivered,
                    e.last_error.as_ref().map_or(String::new(), |e| format!("; last failure: {e}"))
                );
                not_written = true;
            } else if !config.quiet {
                eprintln!(
                    "unwind-profiler: {} periods exported ({} bytes of OTLP, {} tries retried)",
                    e.delivered, e.bytes, e.retries
                );
            }
        }
        if let Some(e) = &counts.file_error {
            eprintln!(
                "unwind-profiler: {} period files were not written: {e}",
                counts.not_written
            );
            not_written = true;
        }
    }
    if let (Some(profile), Some(export), None) = (&profile, &export, &period_counts) {
        match export.send(profile) {
            Ok(bytes) if !config.quiet => eprintln!(
                "unwind-profiler: profile exported to {} ({bytes} bytes of OTLP)",
                export.url
            ),
            Ok(_) => {}
            Err(e) => {
                eprintln!(
                    "unwind-profiler: warning: the profile was not exported to {}: {e}",
                    export.url
                );
                not_written = true;
            }
        }
    }
    match profile {
        Some(profile) if period_counts.is_some() => {
            match unwind_profiler::output::summary::write_file(
                &profile,
                &dir,
                &config.stem,
                config.output_mode,
            ) {
                Ok(summary) if !config.quiet => {
                    if config.verbose {
                        if let Ok(text) = std::fs::read_to_string(&summary) {
                            eprintln!("{text}");
                        }
                    }
                    let counts = period_counts.as_ref().map(|c| (c.cut, c.directory.clone()));
                    let (cut, periods_dir) = counts.unwrap_or_default();
                    eprintln!(
                        "unwind-profiler: {} samples in {cut} periods; profiles in {periods_dir}/, summary in {}",
                        profile.counters.stored,
                        summary.display()
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("unwind-profiler: the summary was not written: {e}");
                    not_written = true;
                }
            }
        }
        Some(profile) => match unwind_profiler::output::write_all_with_mode(
            &profile,
            &dir,
            &config.stem,
            config.output_mode,
        ) {
            Ok(out) if !config.quiet => {
                if config.verbose {
                    if let Ok(text) = std::fs::read_to_string(&out.summary) {
                        eprintln!("{text}");
                    }
                }
                let processes = profile.processes().len();
                let mut line = if profile.counters.cpu_not_sampled {
                    "unwind-profiler: CPU not sampled (--alloc-only)".to_string()
                } else {
                    format!("unwind-profiler: {} samples", profile.sample_count())
                };
                if processes > 1 {
                    line.push_str(&format!(" of {processes} processes"));
                }
                line.push_str(&format!(
                    "; profile in {}/{}.{{folded,svg,pb.gz,firefox.json.gz,summary.txt{}}}",
                    dir.display(),
                    config.stem,
                    if profile.heap.is_some() {
                        ",heap.pb.gz,alloc.svg,inuse.svg"
                    } else {
                        ""
                    }
                ));
                if let Some(heap) = &profile.heap {
                    let [_, allocated, _, live] = heap.totals();
                    line.push_str(&format!(
                        "; {} allocation samples: {allocated} bytes allocated, {live} live at the end (estimates)",
                        heap.sampled
                    ));
                }
                eprintln!("{line}");
                if config.verbose {
                    eprintln!(
                        "unwind-profiler: outputs written {:.3} s after the program ended ({:.3} s symbolizing)",
                        ended.elapsed().as_secs_f64(),
                        symbolized.as_secs_f64()
                    );
                }
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("unwind-profiler: the profile was not written in full: {e}");
                not_written = true;
            }
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
                Err(_) => {
                    not_written = true;
                    let name = program
                        .as_deref()
                        .unwrap_or(Path::new(&request.program[0]))
                        .display();
                    match &secure {
                        Some((reason, _)) => eprintln!(
                            "unwind-profiler: no profile was written: {name} is {reason}, and the dynamic loader ignored LD_PRELOAD for it (secure execution)"
                        ),
                        None if program.as_deref().is_some_and(statically_linked) => eprintln!(
                            "unwind-profiler: no profile was written: {name} is statically linked (no dynamic loader ran in it to load the preload library): link it dynamically to profile it (Go: build with cgo, CGO_ENABLED=1)"
                        ),
                        None => eprintln!(
                            "unwind-profiler: no profile was written ({} is missing: the program did not load the preload library, or ended before it started)",
                            summary.display()
                        ),
                    }
                }
            }
        }
    }
    let Some(status) = status else {
        eprintln!("unwind-profiler: the program's exit status was lost");
        return ExitCode::from(1);
    };
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status).clamp(0, 255) as u8
    } else {
        let signal = if libc::WIFSIGNALED(status) {
            libc::WTERMSIG(status)
        } else {
            0
        };
        eprintln!("unwind-profiler: the program was killed by signal {signal}");
        128 + signal.clamp(0, 127) as u8
    };
    // A run that ends without its profile fails, with the program's own failure if it had one.
    if not_written && code == 0 {
        eprintln!("unwind-profiler: exit status {EX_CANTCREAT}: the profile could not be written");
        return ExitCode::from(EX_CANTCREAT);
    }
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// qemu-user's `-L` directory is found among its options (not among the guest program's),
    /// else `QEMU_LD_PREFIX`; only an existing directory, made absolute.
    #[test]
    fn an_emulated_programs_sysroot() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        let tmp = std::env::temp_dir();
        let t = tmp.to_str().unwrap();
        assert_eq!(
            qemu_sysroot(
                &args(&["qemu-aarch64", "-E", "A=1", "-L", t, "./prog"]),
                None
            ),
            Some(tmp.clone())
        );
        assert_eq!(
            qemu_sysroot(
                &args(&["/usr/bin/qemu-arm", "-cpu", "max", "./prog", "-L", "/"]),
                None
            ),
            None,
            "the guest program's own -L"
        );
        assert_eq!(
            qemu_sysroot(&args(&["./prog"]), Some(OsString::from(t))),
            Some(tmp.clone())
        );
        assert_eq!(qemu_sysroot(&args(&["./prog"]), None), None);
        assert_eq!(
            qemu_sysroot(&args(&["qemu-arm", "-L", "/no/such/dir", "x"]), None),
            None
        );
    }
}
