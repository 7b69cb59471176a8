//! The profiler's settings: one table of options, read from environment variables by the
//! preload library and from flags by the `record` command (which passes them on as the same
//! variables).

use std::path::PathBuf;
use std::time::Duration;

pub use crate::timer::TimerChoice;

/// Which clock drives the per-thread timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Clock {
    /// The thread's CPU time: a thread is sampled only while it runs (where it spends CPU).
    Cpu,
    /// Wall-clock time: every thread is sampled at the rate, running or blocked (where it
    /// waits too).
    Wall,
}

impl Clock {
    /// The time it measures, as the command's messages name it: `CPU` or `wall-clock`.
    pub fn time_name(self) -> &'static str {
        match self {
            Clock::Cpu => "CPU",
            Clock::Wall => "wall-clock",
        }
    }
}

/// The profiler's settings: [`Config::default`] (or [`Config::from_env`]) with fields changed,
/// or [`Profiler::builder`](crate::Profiler::builder). New settings may come in any release.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Samples per second of each thread's clock.
    pub frequency: u32,
    /// The clock the rate is measured in.
    pub clock: Clock,
    /// Which timers sample CPU time.
    pub timer: TimerChoice,
    /// The signal the timers send.
    pub signal: libc::c_int,
    /// The deepest stack recorded (deeper walks stop with `BufferFull`); at most and by default
    /// [`crate::sampler::MAX_FRAMES`], which the handler's buffer on the signal stack holds.
    pub max_frames: usize,
    /// The size of each thread's sample ring, in 8-byte words (four times this with
    /// allocations sampled).
    pub ring_words: usize,
    /// How often the collector drains the rings.
    pub collect_every: Duration,
    /// Where the preload library writes its outputs (and snapshots go).
    pub output: Option<PathBuf>,
    /// The outputs' file name stem (`STEM.folded`, `STEM.svg`, ...).
    pub stem: String,
    /// The outputs' file mode: read and write bits only
    /// ([`output::DEFAULT_MODE`](crate::output::DEFAULT_MODE), 0600, by default).
    pub output_mode: u32,
    /// A signal on which the preload library writes a profile of everything so far.
    pub snapshot_signal: Option<libc::c_int>,
    /// Whether the preload library stays silent (no summary on stderr at exit).
    pub quiet: bool,
    /// Whether `record` prints the summary on stderr at the end, and each process a line of its
    /// own (by default `record` prints one line at the start and one at the end).
    pub verbose: bool,
    /// Whether walks scan the stack for a return address where the unwind tables and the
    /// frame-pointer chain end ([`unwind_in_process::set_stack_scanning`]).
    pub stack_scanning: bool,
    /// Samples whose registers and stack copy are also kept, from the first, and written to
    /// `STEM.sequence` at exit (0: none): the benchmarks' input (`bench-sequence`).
    pub capture_samples: usize,
    /// Where to export the profile as OTLP profiles (`--export`: a URL, or `otlp` for the
    /// `OTEL_EXPORTER_OTLP_*` variables' endpoint); `None`: no export unless
    /// `OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT` names one (see [`crate::export`]).
    pub export: Option<String>,
    /// The exported profile's `service.name` (else `OTEL_SERVICE_NAME`, else the program's
    /// name).
    pub service: Option<String>,
    /// Resource attributes added to the exported profile (`--label k=v`, repeatable), after
    /// those of `OTEL_RESOURCE_ATTRIBUTES`.
    pub labels: Vec<(String, String)>,
    /// With a value, continuous profiling (`--period`): a profile of each window this long,
    /// written to `STEM-periods/` in the output directory and exported, instead of one profile
    /// of the whole run (see [`crate::periods`]).
    pub profile_period: Option<Duration>,
    /// How many period profiles `STEM-periods/` keeps (the oldest removed first).
    pub keep_periods: usize,
    /// Where to serve `GET /debug/pprof/profile?seconds=N` (see [`crate::pull`]): an address
    /// and port, such as `127.0.0.1:6060` (port 0: any free one).
    pub pprof_listen: Option<std::net::SocketAddr>,
    /// With a value, allocations are sampled too (`--alloc`): one sample point every this many
    /// bytes allocated on average (see [`crate::alloc_sampling`]), written as a heap profile
    /// beside the CPU one.
    pub alloc_interval: Option<u64>,
    /// Whether the threads' CPU time is sampled (their timers started); `false` with
    /// `--alloc-only`, where only allocations are (the CPU outputs then hold no samples).
    pub sample_cpu: bool,
    /// A directory the program's files are read under first when naming its functions
    /// (`--symfs`: the file system it ran in, a container's or an emulated program's sysroot);
    /// a file not there is read at its own path if its build id is the one loaded.
    pub symfs: Option<PathBuf>,
    /// Whether the debuginfod servers of `DEBUGINFOD_URLS` are asked for debug files
    /// (`--no-debuginfod` turns it off).
    pub debuginfod: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            frequency: 1000,
            clock: Clock::Cpu,
            timer: TimerChoice::Auto,
            signal: libc::SIGURG,
            max_frames: crate::sampler::MAX_FRAMES,
            ring_words: 1 << 14,
            collect_every: Duration::from_millis(10),
            output: None,
            stem: "profile".into(),
            output_mode: crate::output::DEFAULT_MODE,
            snapshot_signal: None,
            quiet: false,
            verbose: false,
            stack_scanning: false,
            capture_samples: 0,
            export: None,
            service: None,
            labels: Vec::new(),
            profile_period: None,
            keep_periods: 100,
            pprof_listen: None,
            alloc_interval: None,
            sample_cpu: true,
            symfs: None,
            debuginfod: true,
        }
    }
}

/// One setting: its `record` flag, its environment variable, and its help.
pub struct OptionSpec {
    /// The `record` command's flag.
    pub flag: &'static str,
    /// The value's name in the help, empty for a switch.
    pub value: &'static str,
    /// The environment variable the preload library reads.
    pub env: &'static str,
    /// What it does.
    pub help: &'static str,
}

/// Every setting.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        flag: "--frequency",
        value: "HZ",
        env: "UNWIND_PROFILER_FREQUENCY",
        help: "samples per second of each thread's clock, 1 to 20000 (default 1000)",
    },
    OptionSpec {
        flag: "--clock",
        value: "cpu|wall",
        env: "UNWIND_PROFILER_CLOCK",
        help: "cpu: sample threads while they run (default); wall: sample every thread at the rate, running or not",
    },
    OptionSpec {
        flag: "--timer",
        value: "auto|perf|perf-sigtrap|posix",
        env: "UNWIND_PROFILER_TIMER",
        help: "CPU-clock timers: perf (a perf_event task-clock per thread, at the rate asked), perf-sigtrap (the same, sending SIGTRAP itself: cheaper to deliver, but a debugger stops at each sample and a SIGTRAP handler the program installs later would receive them; Linux 5.13+), posix (timer_create: at most the kernel's tick rate, often 250 Hz, each sample weighted by the periods it stands for), auto (perf where the kernel allows it, else posix; default)",
    },
    OptionSpec {
        flag: "--output",
        value: "DIR",
        env: "UNWIND_PROFILER_OUTPUT",
        help: "directory for the outputs (default ./unwind-profile)",
    },
    OptionSpec {
        flag: "--stem",
        value: "NAME",
        env: "UNWIND_PROFILER_STEM",
        help: "file name stem of the outputs (default profile; processes started by the profiled one add -COMM-PID)",
    },
    OptionSpec {
        flag: "--output-mode",
        value: "MODE",
        env: "UNWIND_PROFILER_OUTPUT_MODE",
        help: "the outputs' permissions, in octal, read and write bits only (at most 0666), given to them exactly whatever the umask (default 0600: only their owner can read them, as perf's data)",
    },
    OptionSpec {
        flag: "--signal",
        value: "SIG",
        env: "UNWIND_PROFILER_SIGNAL",
        help: "signal the timers send: URG (default: ignored by a program without a handler for it, so that a signal raised as the program execs is harmless to the new one), a name such as PROF, USR1 or RTMIN+3, or a number; not one the program needs for itself (KILL, STOP, SEGV, BUS, ILL, FPE, ABRT, SYS, CHLD, CONT, TSTP, TTIN, TTOU), nor TRAP except with --timer perf-sigtrap, where it makes every timer send SIGTRAP (the POSIX timers too) and the program's own SIGTRAPs count as samples instead of reaching its handler",
    },
    OptionSpec {
        flag: "--snapshot-signal",
        value: "SIG",
        env: "UNWIND_PROFILER_SNAPSHOT_SIGNAL",
        help: "on this signal (e.g. USR2), write the profile so far while the program runs on (not one the program needs for itself, as for --signal, nor TRAP)",
    },
    OptionSpec {
        flag: "--max-frames",
        value: "N",
        env: "UNWIND_PROFILER_MAX_FRAMES",
        help: "deepest stack recorded, 1 to 1024 (default 1024; deeper walks stop and are counted as BufferFull)",
    },
    OptionSpec {
        flag: "--stack-scanning",
        value: "",
        env: "UNWIND_PROFILER_STACK_SCANNING",
        help: "where a frame has no unwind rule and no frame pointer leads on, look up the stack for a return address just after a call (as Breakpad does): deeper stacks through code without unwind tables, at the risk of a stale frame; those frames are counted in the summary (default off)",
    },
    OptionSpec {
        flag: "--capture-samples",
        value: "N",
        env: "UNWIND_PROFILER_CAPTURE_SAMPLES",
        help: "also keep the registers and a copy of the stack (up to 512 KiB) of the first N samples, 1 to 100000, and write them to STEM.sequence at exit, for replaying them in order elsewhere (benches: bench-sequence); N x 512 KiB of address space is reserved at start, and used as far as the stacks reach (default 0: none)",
    },
    OptionSpec {
        flag: "--export",
        value: "URL|otlp",
        env: "UNWIND_PROFILER_EXPORT",
        help: "also send the profile, as OTLP profiles over HTTP (protobuf), to an OpenTelemetry Collector: URL is the collector's OTLP/HTTP endpoint (http://HOST:4318, to which /v1development/profiles is added if it has no path), otlp takes it from OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318); OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT alone also turns it on; under record a profile the collector did not take is a warning and exit status 73 (the preload library used alone exports at exit, a failure being a warning)",
    },
    OptionSpec {
        flag: "--service",
        value: "NAME",
        env: "UNWIND_PROFILER_SERVICE",
        help: "the exported profile's service.name (default OTEL_SERVICE_NAME, else the program's name)",
    },
    OptionSpec {
        flag: "--label",
        value: "KEY=VALUE",
        env: "UNWIND_PROFILER_LABELS",
        help: "a resource attribute of the exported profile (service.version=1.2, deployment.environment.name=prod, ...), repeatable; after those of OTEL_RESOURCE_ATTRIBUTES, which it overrides",
    },
    OptionSpec {
        flag: "--period",
        value: "DURATION",
        env: "UNWIND_PROFILER_PERIOD",
        help: "continuous profiling: cut a profile every DURATION (such as 10s, 500ms or 1m; 100ms to 1h), of that window's samples only, written as a pprof file to STEM-periods/ in the output directory and exported with --export as it is cut (delivery retried with backoff, up to 5 minutes of periods queued); memory stays flat however long the run; the summary is then of the run's counters and the last period (default: one profile of the whole run)",
    },
    OptionSpec {
        flag: "--keep-periods",
        value: "N",
        env: "UNWIND_PROFILER_KEEP_PERIODS",
        help: "with --period, how many period files STEM-periods/ keeps, the oldest removed first, 1 to 100000 (default 100)",
    },
    OptionSpec {
        flag: "--pprof-listen",
        value: "ADDR:PORT",
        env: "UNWIND_PROFILER_PPROF_LISTEN",
        help: "a program that profiles itself (the library, or the preload library used alone, not under record) serves GET /debug/pprof/profile?seconds=N there, Go's convention: a gzipped pprof profile of the next N seconds (1 to 300, default 30), for go tool pprof, Parca and Grafana Alloy; give a loopback address (127.0.0.1:6060) unless the port is to be reached from elsewhere (port 0: any free one, said on stderr)",
    },
    OptionSpec {
        flag: "--alloc",
        value: "",
        env: "UNWIND_PROFILER_ALLOC",
        help: "also sample the program's allocations (malloc, calloc, realloc, the aligned ones, C++ new through them), by bytes as tcmalloc and Go do, one sample every 512 KiB allocated on average, each unwound where it was made: STEM.heap.pb.gz is a heap profile (alloc_objects, alloc_space, inuse_objects, inuse_space, as Go's; go tool pprof -sample_index=inuse_space) and the summary lists the top allocation sites",
    },
    OptionSpec {
        flag: "--alloc-only",
        value: "",
        env: "UNWIND_PROFILER_ALLOC_ONLY",
        help: "sample allocations as --alloc does (which it implies), and not CPU time: no timer and no signal in the program; the CPU outputs hold no samples",
    },
    OptionSpec {
        flag: "--alloc-interval",
        value: "BYTES",
        env: "UNWIND_PROFILER_ALLOC_INTERVAL",
        help: "with --alloc (which it implies), the mean bytes between sampled allocations, such as 64k, 512k or 4m (1 to 1g; default 512k): smaller is more precise and costs more",
    },
    OptionSpec {
        flag: "--symfs",
        value: "DIR",
        env: "UNWIND_PROFILER_SYMFS",
        help: "read the program's files under DIR first when naming its functions (perf's --symfs): the root of the file system it ran in, such as a container's or an emulated program's sysroot (under qemu, its -L directory or QEMU_LD_PREFIX is used by itself); a file not under DIR is read at its own path only if its build id is the one the program loaded; the profiles keep the program's own paths",
    },
    OptionSpec {
        flag: "--no-debuginfod",
        value: "",
        env: "UNWIND_PROFILER_NO_DEBUGINFOD",
        help: "do not ask the debuginfod servers of DEBUGINFOD_URLS for the debug files of modules this machine has none for (by default they are asked, as gdb and perf do, with a 5 s timeout, DEBUGINFOD_TIMEOUT, and the files kept in elfutils' cache)",
    },
    OptionSpec {
        flag: "--quiet",
        value: "",
        env: "UNWIND_PROFILER_QUIET",
        help: "print nothing at exit (the summary is still written)",
    },
    OptionSpec {
        flag: "--verbose",
        value: "",
        env: "UNWIND_PROFILER_VERBOSE",
        help: "also print the summary on stderr at the end, and a line for each process that ends (default: one line when recording starts, one at the end naming the files)",
    },
];

/// A setting with a value it cannot take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The flag or variable.
    pub setting: String,
    /// The value given.
    pub value: String,
    /// What was expected.
    pub expected: &'static str,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={:?}: expected {}",
            self.setting, self.value, self.expected
        )
    }
}

impl std::error::Error for ConfigError {}

/// A signal number from a name (`PROF`, `SIGUSR2`, `RTMIN+3`: every Linux signal's) or a number.
pub fn parse_signal(s: &str) -> Option<libc::c_int> {
    let upper = s.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let n = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "ILL" => libc::SIGILL,
        "TRAP" => libc::SIGTRAP,
        "ABRT" | "IOT" => libc::SIGABRT,
        "BUS" => libc::SIGBUS,
        "FPE" => libc::SIGFPE,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "SEGV" => libc::SIGSEGV,
        "USR2" => libc::SIGUSR2,
        "PIPE" => libc::SIGPIPE,
        "ALRM" => libc::SIGALRM,
        "TERM" => libc::SIGTERM,
        "STKFLT" => libc::SIGSTKFLT,
        "CHLD" => libc::SIGCHLD,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "TSTP" => libc::SIGTSTP,
        "TTIN" => libc::SIGTTIN,
        "TTOU" => libc::SIGTTOU,
        "URG" => libc::SIGURG,
        "XCPU" => libc::SIGXCPU,
        "XFSZ" => libc::SIGXFSZ,
        "VTALRM" => libc::SIGVTALRM,
        "PROF" => libc::SIGPROF,
        "WINCH" => libc::SIGWINCH,
        "IO" | "POLL" => libc::SIGIO,
        "PWR" => libc::SIGPWR,
        "SYS" => libc::SIGSYS,
        _ => {
            if let Some(off) = name.strip_prefix("RTMIN") {
                let off: libc::c_int = if off.is_empty() {
                    0
                } else {
                    off.strip_prefix('+')?.parse().ok()?
                };
                libc::SIGRTMIN() + off
            } else {
                name.parse().ok()?
            }
        }
    };
    (1..=libc::SIGRTMAX()).contains(&n).then_some(n)
}

/// Why the profiler cannot take `signal` for its own handler, if it cannot: the signals the
/// kernel does not let a process catch, those the program needs to crash, stop and hear of its
/// children (a handler that returns from a fault runs the faulting instruction again, forever),
/// those the C library keeps, and `SIGTRAP`, the debugger's, unless `trap_allowed` (the
/// sampling signal of `perf-sigtrap` timers, which send it anyway).
fn unownable(signal: libc::c_int, trap_allowed: bool) -> Option<&'static str> {
    Some(match signal {
        libc::SIGKILL => "a signal the profiler can own: SIGKILL cannot be caught",
        libc::SIGSTOP => "a signal the profiler can own: SIGSTOP cannot be caught",
        libc::SIGSEGV => "a signal the profiler can own: SIGSEGV is the program's fault signal (a handler that returns runs the faulting instruction again, forever)",
        libc::SIGBUS => "a signal the profiler can own: SIGBUS is the program's fault signal (a handler that returns runs the faulting instruction again, forever)",
        libc::SIGILL => "a signal the profiler can own: SIGILL is the program's fault signal (a handler that returns runs the faulting instruction again, forever)",
        libc::SIGFPE => "a signal the profiler can own: SIGFPE is the program's fault signal (a handler that returns runs the faulting instruction again, forever)",
        libc::SIGABRT => "a signal the profiler can own: SIGABRT is how the program aborts (abort, a failed assert)",
        libc::SIGSYS => "a signal the profiler can own: SIGSYS reports the program's bad or forbidden (seccomp) system calls",
        libc::SIGCHLD => "a signal the profiler can own: SIGCHLD tells the program its children have stopped or ended",
        libc::SIGCONT => "a signal the profiler can own: SIGCONT resumes a stopped program (job control)",
        libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => "a signal the profiler can own: SIGTSTP, SIGTTIN and SIGTTOU stop the program (job control)",
        libc::SIGTRAP if trap_allowed => return None,
        libc::SIGTRAP => "a signal the profiler can own: SIGTRAP is the debugger's breakpoint signal (the sampling signal only with --timer perf-sigtrap, whose timers send it anyway)",
        n if n > 31 && n < libc::SIGRTMIN() => "a signal the profiler can own: the C library keeps the signals below SIGRTMIN for its threads",
        _ => return None,
    })
}

/// A file mode in octal (`0644`, `644`, `0o644`) with read and write bits only.
/// A duration as `10s`, `500ms`, `2m`, `1h` or a number of seconds.
fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().ok()?;
    let millis = match unit.trim() {
        "ms" => 1,
        "" | "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    Some(Duration::from_millis(n.checked_mul(millis)?))
}

/// A size in bytes as `4096`, `64k`, `4m` or `1g` (powers of 1024; `kb`, `KiB` and the like
/// too).
fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().ok()?;
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

fn parse_mode(s: &str) -> Option<u32> {
    let digits = s.trim();
    let digits = digits.strip_prefix("0o").unwrap_or(digits);
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| matches!(b, b'0'..=b'7')) {
        return None;
    }
    let mode = u32::from_str_radix(digits, 8).ok()?;
    (mode & !0o666 == 0).then_some(mode)
}

impl Config {
    /// The settings from the environment variables of [`OPTIONS`] (unset ones keep their
    /// defaults; the output directory defaults to `./unwind-profile`).
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    /// The settings from `var` (a variable's value by name), as [`from_env`](Self::from_env).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut c = Config {
            output: Some(PathBuf::from("unwind-profile")),
            ..Config::default()
        };
        let err = |setting: &str, value: &str, expected| ConfigError {
            setting: setting.into(),
            value: value.into(),
            expected,
        };
        for o in OPTIONS {
            let Some(v) = var(o.env) else { continue };
            match o.env {
                "UNWIND_PROFILER_FREQUENCY" => {
                    c.frequency = v
                        .trim()
                        .parse()
                        .ok()
                        .filter(|f| (1..=20_000).contains(f))
                        .ok_or_else(|| err(o.env, &v, "a rate from 1 to 20000 Hz"))?
                }
                "UNWIND_PROFILER_CLOCK" => {
                    c.clock = match v.trim() {
                        "cpu" => Clock::Cpu,
                        "wall" => Clock::Wall,
                        _ => return Err(err(o.env, &v, "cpu or wall")),
                    }
                }
                "UNWIND_PROFILER_TIMER" => {
                    c.timer = match TimerChoice::from_name(v.trim()) {
                        Some(choice) => choice,
                        None => return Err(err(o.env, &v, "auto, perf, perf-sigtrap or posix")),
                    }
                }
                "UNWIND_PROFILER_OUTPUT" => c.output = Some(PathBuf::from(v)),
                "UNWIND_PROFILER_OUTPUT_MODE" => {
                    c.output_mode = parse_mode(&v).ok_or_else(|| {
                        err(
                            o.env,
                            &v,
                            "an octal file mode of read and write bits, at most 0666 (such as 0600 or 0644)",
                        )
                    })?
                }
                "UNWIND_PROFILER_STEM" => {
                    if v.is_empty() || v.contains('/') {
                        return Err(err(o.env, &v, "a file name without '/'"));
                    }
                    c.stem = v
                }
                "UNWIND_PROFILER_SIGNAL" => {
                    c.signal = parse_signal(&v).ok_or_else(|| err(o.env, &v, "a signal"))?
                }
                "UNWIND_PROFILER_SNAPSHOT_SIGNAL" => {
                    c.snapshot_signal =
                        Some(parse_signal(&v).ok_or_else(|| err(o.env, &v, "a signal"))?)
                }
                "UNWIND_PROFILER_MAX_FRAMES" => {
                    c.max_frames = v
                        .trim()
                        .parse()
                        .ok()
                        .filter(|n| (1..=crate::sampler::MAX_FRAMES).contains(n))
                        .ok_or_else(|| err(o.env, &v, "a depth from 1 to 1024"))?
                }
                "UNWIND_PROFILER_CAPTURE_SAMPLES" => {
                    c.capture_samples = v
                        .trim()
                        .parse()
                        .ok()
                        .filter(|n| (0..=100_000).contains(n))
                        .ok_or_else(|| err(o.env, &v, "a count from 0 to 100000"))?
                }
                "UNWIND_PROFILER_EXPORT" => {
                    c.export = Some(v.trim().to_owned()).filter(|v| !v.is_empty())
                }
                "UNWIND_PROFILER_SERVICE" => {
                    c.service = Some(v.trim().to_owned()).filter(|v| !v.is_empty())
                }
                "UNWIND_PROFILER_LABELS" => {
                    c.labels = crate::export::parse_attributes(&v)
                        .ok_or_else(|| err(o.env, &v, "KEY=VALUE pairs, separated by commas"))?
                }
                "UNWIND_PROFILER_PERIOD" => {
                    c.profile_period = Some(
                        parse_duration(&v)
                            .filter(|d| {
                                (Duration::from_millis(100)..=Duration::from_secs(3600))
                                    .contains(d)
                            })
                            .ok_or_else(|| {
                                err(o.env, &v, "a duration from 100ms to 1h, such as 10s")
                            })?,
                    )
                }
                "UNWIND_PROFILER_KEEP_PERIODS" => {
                    c.keep_periods = v
                        .trim()
                        .parse()
                        .ok()
                        .filter(|n| (1..=100_000).contains(n))
                        .ok_or_else(|| err(o.env, &v, "a count from 1 to 100000"))?
                }
                "UNWIND_PROFILER_PPROF_LISTEN" => {
                    c.pprof_listen = Some(v.trim().parse().map_err(|_| {
                        err(o.env, &v, "an address and port, such as 127.0.0.1:6060")
                    })?)
                }
                "UNWIND_PROFILER_QUIET" => c.quiet = !matches!(v.trim(), "" | "0"),
                "UNWIND_PROFILER_SYMFS" => {
                    c.symfs = Some(
                        Some(PathBuf::from(&v))
                            .filter(|p| p.is_absolute())
                            .ok_or_else(|| err(o.env, &v, "an absolute directory"))?,
                    )
                }
                "UNWIND_PROFILER_NO_DEBUGINFOD" => c.debuginfod = matches!(v.trim(), "" | "0"),
                "UNWIND_PROFILER_ALLOC" if !matches!(v.trim(), "" | "0") => {
                    c.alloc_interval
                        .get_or_insert(crate::byte_sampling::DEFAULT_MEAN);
                }
                "UNWIND_PROFILER_ALLOC_ONLY" if !matches!(v.trim(), "" | "0") => {
                    c.alloc_interval
                        .get_or_insert(crate::byte_sampling::DEFAULT_MEAN);
                    c.sample_cpu = false;
                }
                "UNWIND_PROFILER_ALLOC_INTERVAL" => {
                    c.alloc_interval = Some(
                        parse_bytes(&v)
                            .filter(|n| (1..=1 << 30).contains(n))
                            .ok_or_else(|| {
                                err(o.env, &v, "a size from 1 to 1g bytes (such as 64k or 4m)")
                            })?,
                    )
                }
                "UNWIND_PROFILER_VERBOSE" => c.verbose = !matches!(v.trim(), "" | "0"),
                "UNWIND_PROFILER_STACK_SCANNING" => {
                    c.stack_scanning = !matches!(v.trim(), "" | "0")
                }
                _ => {}
            }
        }
        // Checked once every setting is read: whether SIGTRAP may sample depends on the timer.
        let sampling_trap = c.timer == TimerChoice::PerfSigtrap;
        if let Some(why) = unownable(c.signal, sampling_trap) {
            let name = "UNWIND_PROFILER_SIGNAL";
            return Err(err(name, &var(name).unwrap_or_default(), why));
        }
        if let Some(why) = c.snapshot_signal.and_then(|s| unownable(s, false)) {
            let name = "UNWIND_PROFILER_SNAPSHOT_SIGNAL";
            return Err(err(name, &var(name).unwrap_or_default(), why));
        }
        if c.snapshot_signal == Some(c.signal) {
            return Err(err(
                "UNWIND_PROFILER_SNAPSHOT_SIGNAL",
                &format!("{}", c.signal),
                "a signal other than the sampling signal",
            ));
        }
        Ok(c)
    }

    /// The sampling period.
    pub fn sample_interval(&self) -> Duration {
        Duration::from_nanos(1_000_000_000 / u64::from(self.frequency.max(1)))
    }

    /// How often the rings are drained at this rate: [`collect_every`](Self::collect_every) at
    /// 1 kHz and above, proportionally less often below (a ring holds the same number of
    /// samples, which take longer to come), at most every 100 ms. Each drain wakes the
    /// collector: at 100 Hz, draining every 10 ms cost more than the signal handlers.
    pub fn drain_every(&self) -> Duration {
        let scale = (1000 / self.frequency.max(1)).max(1);
        (self.collect_every * scale).min(Duration::from_millis(100).max(self.collect_every))
    }

    /// The sampler's fixed settings.
    pub(crate) fn timing(&self) -> crate::sampler::Timing {
        crate::sampler::Timing {
            timer: crate::timer::TimerSpec {
                choice: self.timer,
                clock: match self.clock {
                    Clock::Cpu => libc::CLOCK_THREAD_CPUTIME_ID,
                    Clock::Wall => libc::CLOCK_MONOTONIC,
                },
                period: self.sample_interval(),
                signal: self.signal,
            },
            max_frames: self.max_frames,
            // Allocations come in bursts far denser than a timer's samples (a loop that
            // allocates and frees large blocks): four times the room while the collector sleeps.
            ring_words: if self.alloc_interval.is_some() {
                self.ring_words.saturating_mul(4)
            } else {
                self.ring_words
            },
            stack_scanning: self.stack_scanning,
            capture_samples: self.capture_samples,
            alloc_mean: self.alloc_interval,
            cpu: self.sample_cpu,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn rings_are_drained_less_often_at_low_rates() {
        let every = |frequency| {
            Config {
                frequency,
                ..Config::default()
            }
            .drain_every()
        };
        assert_eq!(every(20_000), Duration::from_millis(10));
        assert_eq!(every(1000), Duration::from_millis(10));
        assert_eq!(every(250), Duration::from_millis(40));
        assert_eq!(every(100), Duration::from_millis(100));
        assert_eq!(every(1), Duration::from_millis(100));
    }

    #[test]
    fn periods_are_durations_within_bounds() {
        let period = |v: &str| {
            Config::from_vars(vars(&[("UNWIND_PROFILER_PERIOD", v)])).map(|c| c.profile_period)
        };
        assert_eq!(period("10s").unwrap(), Some(Duration::from_secs(10)));
        assert_eq!(period("250ms").unwrap(), Some(Duration::from_millis(250)));
        assert_eq!(period("2m").unwrap(), Some(Duration::from_secs(120)));
        assert_eq!(period(" 1h ").unwrap(), Some(Duration::from_secs(3600)));
        assert_eq!(period("5").unwrap(), Some(Duration::from_secs(5)));
        for bad in [
            "",
            "10ms",
            "2h",
            "s",
            "-1s",
            "1.5s",
            "99999999999999999999h",
        ] {
            assert!(period(bad).is_err(), "{bad:?}");
        }
        let keep = |v: &str| {
            Config::from_vars(vars(&[("UNWIND_PROFILER_KEEP_PERIODS", v)])).map(|c| c.keep_periods)
        };
        assert_eq!(keep("3").unwrap(), 3);
        assert!(keep("0").is_err());
        assert_eq!(Config::default().keep_periods, 100);
    }

    #[test]
    fn allocation_sampling_is_a_switch_and_an_interval() {
        let alloc =
            |pairs: &[(&str, &str)]| Config::from_vars(vars(pairs)).map(|c| c.alloc_interval);
        assert_eq!(alloc(&[]).unwrap(), None);
        assert_eq!(alloc(&[("UNWIND_PROFILER_ALLOC", "0")]).unwrap(), None);
        assert_eq!(
            alloc(&[("UNWIND_PROFILER_ALLOC", "1")]).unwrap(),
            Some(512 * 1024)
        );
        let interval = |v| alloc(&[("UNWIND_PROFILER_ALLOC_INTERVAL", v)]);
        assert_eq!(interval("64k").unwrap(), Some(65536));
        assert_eq!(interval("4MiB").unwrap(), Some(4 << 20));
        assert_eq!(interval(" 1g ").unwrap(), Some(1 << 30));
        assert_eq!(interval("100").unwrap(), Some(100));
        for bad in [
            "",
            "0",
            "2g",
            "1.5m",
            "k",
            "-1",
            "5x",
            "99999999999999999999",
        ] {
            assert!(interval(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            alloc(&[
                ("UNWIND_PROFILER_ALLOC", "1"),
                ("UNWIND_PROFILER_ALLOC_INTERVAL", "8k")
            ])
            .unwrap(),
            Some(8192)
        );
        // Allocations alone: sampled at the interval given or the default, and no CPU time.
        let only = |pairs: &[(&str, &str)]| {
            let c = Config::from_vars(vars(pairs)).unwrap();
            (c.alloc_interval, c.sample_cpu)
        };
        assert_eq!(only(&[]), (None, true));
        assert_eq!(only(&[("UNWIND_PROFILER_ALLOC_ONLY", "0")]), (None, true));
        assert_eq!(
            only(&[("UNWIND_PROFILER_ALLOC_ONLY", "1")]),
            (Some(512 * 1024), false)
        );
        assert_eq!(
            only(&[
                ("UNWIND_PROFILER_ALLOC_ONLY", "1"),
                ("UNWIND_PROFILER_ALLOC_INTERVAL", "8k")
            ]),
            (Some(8192), false)
        );
    }

    #[test]
    fn defaults_and_every_variable() {
        let c = Config::from_vars(vars(&[])).unwrap();
        assert_eq!(
            (c.frequency, c.clock, c.signal),
            (1000, Clock::Cpu, libc::SIGURG)
        );
        assert_eq!(c.output, Some(PathBuf::from("unwind-profile")));
        let c = Config::from_vars(vars(&[
            ("UNWIND_PROFILER_FREQUENCY", "10000"),
            ("UNWIND_PROFILER_CLOCK", "wall"),
            ("UNWIND_PROFILER_TIMER", "posix"),
            ("UNWIND_PROFILER_OUTPUT", "/tmp/x"),
            ("UNWIND_PROFILER_STEM", "run1"),
            ("UNWIND_PROFILER_SIGNAL", "RTMIN+2"),
            ("UNWIND_PROFILER_SNAPSHOT_SIGNAL", "SIGUSR2"),
            ("UNWIND_PROFILER_MAX_FRAMES", "64"),
            ("UNWIND_PROFILER_QUIET", "1"),
            ("UNWIND_PROFILER_STACK_SCANNING", "1"),
        ]))
        .unwrap();
        assert_eq!(c.frequency, 10000);
        assert_eq!(c.sample_interval(), Duration::from_micros(100));
        assert_eq!(c.clock, Clock::Wall);
        assert_eq!(c.timer, TimerChoice::Posix);
        assert_eq!(c.output, Some(PathBuf::from("/tmp/x")));
        assert_eq!(c.stem, "run1");
        assert_eq!(c.signal, libc::SIGRTMIN() + 2);
        assert_eq!(c.snapshot_signal, Some(libc::SIGUSR2));
        assert_eq!(c.max_frames, 64);
        assert!(c.quiet);
        assert!(c.stack_scanning);
        assert!(!Config::default().stack_scanning);
        // Every timer by its name, and the option's value list names each of them.
        for (name, choice) in TimerChoice::NAMES {
            let c = Config::from_vars(vars(&[("UNWIND_PROFILER_TIMER", name)])).unwrap();
            assert_eq!(c.timer, choice);
            let listed = OPTIONS.iter().find(|o| o.flag == "--timer").unwrap().value;
            assert!(
                listed.split('|').any(|v| v == name),
                "{listed} lacks {name}"
            );
        }
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("UNWIND_PROFILER_FREQUENCY", "0"),
            ("UNWIND_PROFILER_FREQUENCY", "fast"),
            ("UNWIND_PROFILER_CLOCK", "cpu-time"),
            ("UNWIND_PROFILER_TIMER", "hpet"),
            ("UNWIND_PROFILER_SIGNAL", "NOPE"),
            ("UNWIND_PROFILER_MAX_FRAMES", "1025"),
            ("UNWIND_PROFILER_STEM", "a/b"),
            ("UNWIND_PROFILER_OUTPUT_MODE", "0755"),
            ("UNWIND_PROFILER_SIGNAL", "KILL"),
            ("UNWIND_PROFILER_SNAPSHOT_SIGNAL", "SEGV"),
        ] {
            let e = Config::from_vars(vars(&[(k, v)])).unwrap_err();
            assert_eq!((e.setting.as_str(), e.value.as_str()), (k, v));
            assert!(e.to_string().starts_with(k), "{e}");
        }
        let e = Config::from_vars(vars(&[("UNWIND_PROFILER_SNAPSHOT_SIGNAL", "URG")])).unwrap_err();
        assert_eq!(e.setting, "UNWIND_PROFILER_SNAPSHOT_SIGNAL");
    }

    /// The signals the program needs for itself are refused, by name or number, as either
    /// signal, saying why; `SIGTRAP` samples with `perf-sigtrap` timers only, and is never the
    /// snapshot signal (the `perf-sigtrap` handler owns it).
    #[test]
    fn signals_the_program_needs_are_refused() {
        for value in [
            "KILL", "9", "STOP", "SEGV", "11", "SIGBUS", "ILL", "FPE", "ABRT", "SYS", "CHLD",
            "CONT", "TSTP", "TTIN", "TTOU", "TRAP", "5", "32",
        ] {
            for setting in ["UNWIND_PROFILER_SIGNAL", "UNWIND_PROFILER_SNAPSHOT_SIGNAL"] {
                let e = Config::from_vars(vars(&[(setting, value)])).unwrap_err();
                assert_eq!((e.setting.as_str(), e.value.as_str()), (setting, value));
                assert!(
                    e.expected.starts_with("a signal the profiler can own: "),
                    "{e}"
                );
            }
        }
        let e = Config::from_vars(vars(&[("UNWIND_PROFILER_SIGNAL", "11")])).unwrap_err();
        assert!(
            e.expected.contains("SIGSEGV is the program's fault signal"),
            "{e}"
        );
        let e = Config::from_vars(vars(&[("UNWIND_PROFILER_SIGNAL", "KILL")])).unwrap_err();
        assert!(e.expected.contains("SIGKILL cannot be caught"), "{e}");
        // SIGTRAP as the sampling signal of perf-sigtrap timers: every timer sends it.
        let c = Config::from_vars(vars(&[
            ("UNWIND_PROFILER_TIMER", "perf-sigtrap"),
            ("UNWIND_PROFILER_SIGNAL", "TRAP"),
        ]))
        .unwrap();
        assert_eq!(
            (c.timer, c.signal),
            (TimerChoice::PerfSigtrap, libc::SIGTRAP)
        );
        let e = Config::from_vars(vars(&[
            ("UNWIND_PROFILER_TIMER", "perf-sigtrap"),
            ("UNWIND_PROFILER_SNAPSHOT_SIGNAL", "TRAP"),
        ]))
        .unwrap_err();
        assert_eq!(e.setting, "UNWIND_PROFILER_SNAPSHOT_SIGNAL");
        // Signals the program can spare stay accepted.
        for value in ["URG", "PROF", "USR1", "HUP", "XCPU", "RTMIN+3", "40"] {
            let c = Config::from_vars(vars(&[("UNWIND_PROFILER_SIGNAL", value)]));
            assert!(c.is_ok(), "{value}: {c:?}");
        }
    }

    #[test]
    fn output_modes_are_octal_read_and_write_bits() {
        assert_eq!(Config::from_vars(vars(&[])).unwrap().output_mode, 0o600);
        for (value, mode) in [("0644", 0o644), ("600", 0o600), ("0o640", 0o640), ("0", 0)] {
            let c = Config::from_vars(vars(&[("UNWIND_PROFILER_OUTPUT_MODE", value)])).unwrap();
            assert_eq!(c.output_mode, mode, "{value}");
        }
        for value in [
            "0755",
            "0700",
            "4644",
            "01644",
            "rw-r--r--",
            "",
            "0648",
            "-644",
            "99999",
        ] {
            let e = Config::from_vars(vars(&[("UNWIND_PROFILER_OUTPUT_MODE", value)])).unwrap_err();
            assert_eq!(e.setting, "UNWIND_PROFILER_OUTPUT_MODE", "{value}");
            assert!(e.to_string().contains("octal file mode"), "{e}");
        }
    }

    #[test]
    fn signals_by_name_and_number() {
        assert_eq!(parse_signal("PROF"), Some(libc::SIGPROF));
        assert_eq!(parse_signal("sigusr1"), Some(libc::SIGUSR1));
        assert_eq!(parse_signal("12"), Some(12));
        assert_eq!(parse_signal("RTMIN"), Some(libc::SIGRTMIN()));
        assert_eq!(parse_signal("KILL"), Some(libc::SIGKILL));
        assert_eq!(parse_signal("SIGSEGV"), Some(libc::SIGSEGV));
        assert_eq!(parse_signal("0"), None);
        assert_eq!(parse_signal("RTMIN+x"), None);
    }
}
