//! The profiler's overhead on the program it profiles: how much longer a fixed amount of work
//! takes under `unwind-profiler record`, at 1 kHz and 10 kHz, with each kind of CPU timer, and
//! the time per sample split into signal delivery, unwinding and storing.
//!
//! `bench-overhead [--runs N] [--markdown FILE]` runs this same program as the workload
//! (`bench-overhead --work THREADS UNITS`: THREADS threads, one per core, each doing UNITS units
//! of deterministic work under a 26-deep stack, and printing the wall time of the work alone,
//! without start-up and exit, and the process's CPU time over it) unprofiled and under each
//! profiler setting, in N rounds of every setting. Each figure is the median over rounds of the
//! figure against the same round's unprofiled run, so that a slow spell of the machine, which
//! lasts longer than a round, hits both sides of each comparison alike. With `--markdown FILE`,
//! it replaces FILE's "Profiler overhead" section (or appends one).
//!
//! The split, per sample: the slowdown's CPU time (threads x extra wall time) over the samples;
//! of it, delivery (the timer interrupt, the signal frame, `sigreturn`), measured the same way
//! with the same timers at 10 kHz and a handler that only counts (`--work T U TIMER HZ`, no
//! profiler); the handler's unwind and store time and the collector thread's CPU time, from the
//! summary; and the rest (the caches the handler evicts from the work's, and noise).
//!
//! Needs the release builds of `unwind-profiler` and the preload library beside this binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use unwind_profiler::timer::{self, TimerChoice, TimerSpec};

/// One setting: unprofiled, profiled, or the delivery floor (the profiler's timers with a
/// handler that only counts, set up by the workload itself).
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Unprofiled,
    Profiled,
    Floor,
}

#[derive(Clone, Copy)]
struct Setting {
    name: &'static str,
    mode: Mode,
    timer: &'static str,
    hz: u32,
}

const fn setting(name: &'static str, mode: Mode, timer: &'static str, hz: u32) -> Setting {
    Setting {
        name,
        mode,
        timer,
        hz,
    }
}

const SETTINGS: [Setting; 9] = [
    setting("unprofiled", Mode::Unprofiled, "", 0),
    setting("perf_event, 1 kHz", Mode::Profiled, "perf", 1000),
    setting("timer_create, 1 kHz", Mode::Profiled, "posix", 1000),
    setting("perf_event, 10 kHz", Mode::Profiled, "perf", 10_000),
    setting(
        "perf_event SIGTRAP, 10 kHz",
        Mode::Profiled,
        "perf-sigtrap",
        10_000,
    ),
    setting("timer_create, 10 kHz", Mode::Profiled, "posix", 10_000),
    setting(
        "perf_event, 10 kHz, empty handler",
        Mode::Floor,
        "perf",
        10_000,
    ),
    setting(
        "perf_event SIGTRAP, 10 kHz, empty handler",
        Mode::Floor,
        "perf-sigtrap",
        10_000,
    ),
    setting(
        "timer_create, 10 kHz, empty handler",
        Mode::Floor,
        "posix",
        10_000,
    ),
];

/// The index of the setting whose empty-handler run gives `timer`'s delivery floor.
fn floor_of(timer: &str) -> Option<usize> {
    SETTINGS
        .iter()
        .position(|s| s.mode == Mode::Floor && s.timer == timer)
}

/// Units of work per thread: about 2 s on the machine the figures were taken on.
const UNITS: u64 = 240_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--work") {
        let threads = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2);
        let units = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(UNITS);
        // `--work T U TIMER HZ`: the floor, each thread with the profiler's timer and an empty
        // handler.
        let floor = args
            .get(3)
            .zip(args.get(4).and_then(|h| h.parse::<u32>().ok()));
        work(threads, units, floor.map(|(t, hz)| (t.as_str(), hz)));
        return;
    }
    let mut runs = 5;
    let mut markdown = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => runs = it.next().and_then(|n| n.parse().ok()).unwrap_or(runs),
            "--markdown" => markdown = it.next().map(PathBuf::from),
            other => {
                eprintln!("bench-overhead: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    let text = measure(runs);
    print!("{text}");
    if let Some(path) = markdown {
        replace_section(&path, &text);
    }
}

/// One run's figures.
#[derive(Clone, Copy, Default)]
struct Run {
    work_s: f64,
    /// The process's CPU time over the same interval (every thread, the collector's too).
    cpu_s: f64,
    samples: f64,
    signals: f64,
    unwind_ns: f64,
    store_ns: f64,
    collector_ns: f64,
    frames: f64,
}

fn measure(runs: usize) -> String {
    let me = std::env::current_exe().unwrap();
    let dir = me.parent().unwrap().to_path_buf();
    let record = dir.join("unwind-profiler");
    assert!(
        record.is_file() && dir.join("libunwind_profiler_preload.so").is_file(),
        "build the profiler first: cargo build --release -p unwind-profiler -p unwind-profiler-preload"
    );
    // SAFETY: sysconf has no preconditions.
    let threads = (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as usize;
    let out = std::env::temp_dir().join(format!("bench-overhead-{}", std::process::id()));
    // rounds[r][s]: setting s's run in round r.
    let mut rounds: Vec<Vec<Run>> = Vec::new();
    let started = Instant::now();
    for round in 0..runs {
        let mut row = Vec::new();
        for setting in &SETTINGS {
            let run = run_once(&me, &record, &out, setting, threads);
            eprintln!(
                "round {round}: {:<36} work {:.3} s, cpu {:.3} s, {} samples",
                setting.name, run.work_s, run.cpu_s, run.samples
            );
            row.push(run);
        }
        rounds.push(row);
    }
    let _ = std::fs::remove_dir_all(&out);
    // Every figure is a median over rounds of a figure taken within one round, against that
    // round's unprofiled run: the machine's slow spells (the same unprofiled work took 1.33 to
    // 1.74 s here from one run to the next) last longer than a round and hit its settings alike.
    let median = |f: &dyn Fn(&[Run]) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(|r| f(r)).collect();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => 0.0,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    };
    let slowdown = |s: usize| median(&|r| (r[s].work_s / r[0].work_s - 1.0) * 100.0);
    let cpu_slowdown = |s: usize| median(&|r| (r[s].cpu_s / r[0].cpu_s - 1.0) * 100.0);
    // The extra CPU time of all the work threads (threads x extra wall time) per sample or
    // signal.
    let per_event = |s: usize, events: fn(&Run) -> f64| {
        median(&|r| (r[s].work_s - r[0].work_s) * threads as f64 * 1e9 / events(&r[s]).max(1.0))
    };
    let mut t = String::new();
    t.push_str(&format!(
        "{threads} threads x {UNITS} units of work (26-deep stacks), {runs} rounds of every setting, each figure the median over rounds of the figure against the same round's unprofiled run; {:.0} s in all.\n\n",
        started.elapsed().as_secs_f64()
    ));
    t.push_str("| setting | work time | slowdown | CPU time | samples | frames/sample | per sample: all | delivery | unwind | store | collector | the rest |\n");
    t.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (s, setting) in SETTINGS.iter().enumerate() {
        let work = median(&|r| r[s].work_s);
        let cpu = median(&|r| r[s].cpu_s);
        match setting.mode {
            Mode::Unprofiled => {
                t.push_str(&format!(
                    "| {} | {work:.3} s | | {cpu:.3} s | | | | | | | | |\n",
                    setting.name
                ));
                continue;
            }
            Mode::Floor => {
                let delivery = per_event(s, |r| r.signals);
                t.push_str(&format!(
                    "| {} | {work:.3} s | {:+.2} % | {:+.2} % | {:.0} signals | | {delivery:.0} ns | {delivery:.0} ns | | | | |\n",
                    setting.name,
                    slowdown(s),
                    cpu_slowdown(s),
                    median(&|r| r[s].signals),
                ));
                continue;
            }
            Mode::Profiled => {}
        }
        let per_sample = per_event(s, |r| r.samples);
        let delivery = floor_of(setting.timer).map_or(0.0, |f| per_event(f, |r| r.signals));
        let unwind = median(&|r| r[s].unwind_ns);
        let store = median(&|r| r[s].store_ns);
        let collector = median(&|r| r[s].collector_ns);
        let rest = per_sample - delivery - unwind - store - collector;
        t.push_str(&format!(
            "| {} | {work:.3} s | {:+.2} % | {:+.2} % | {:.0} | {:.1} | {per_sample:.0} ns | {delivery:.0} ns | {unwind:.0} ns | {store:.0} ns | {collector:.0} ns | {rest:.0} ns |\n",
            setting.name,
            slowdown(s),
            cpu_slowdown(s),
            median(&|r| r[s].samples),
            median(&|r| r[s].frames),
        ));
    }
    t
}

fn run_once(me: &Path, record: &Path, out: &Path, s: &Setting, threads: usize) -> Run {
    let _ = std::fs::remove_dir_all(out);
    let mut work_args = vec!["--work".to_string(), threads.to_string(), UNITS.to_string()];
    if s.mode == Mode::Floor {
        work_args.extend([s.timer.to_string(), s.hz.to_string()]);
    }
    let output = match s.mode {
        Mode::Unprofiled | Mode::Floor => Command::new(me).args(&work_args).output(),
        Mode::Profiled => Command::new(record)
            .args(["record", "--quiet", "--timer", s.timer, "--frequency"])
            .arg(s.hz.to_string())
            .arg("--output")
            .arg(out)
            .arg("--")
            .arg(me)
            .args(&work_args)
            .output(),
    }
    .expect("cannot run the workload");
    assert!(
        output.status.success(),
        "{}: {}",
        s.name,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The number the workload printed after `name: `.
    let printed = |name: &str| -> Option<f64> {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
            .and_then(|v| v.trim().parse().ok())
    };
    let mut run = Run {
        work_s: printed("work seconds").expect("the workload printed no time"),
        cpu_s: printed("cpu seconds").unwrap_or(0.0),
        signals: printed("signals").unwrap_or(0.0),
        ..Run::default()
    };
    if s.mode == Mode::Profiled {
        let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
        let field = |prefix: &str| -> Vec<f64> {
            summary
                .lines()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap_or_default()
                .split(|c: char| c.is_whitespace() || c == '(' || c == ',')
                .filter_map(|w| w.parse().ok())
                .collect()
        };
        run.samples = field("samples stored").first().copied().unwrap_or(0.0);
        run.unwind_ns = field("unwind cost").first().copied().unwrap_or(0.0);
        run.store_ns = field("store cost").first().copied().unwrap_or(0.0);
        run.collector_ns = field("collector").get(1).copied().unwrap_or(0.0);
        run.frames = field("mean stack depth").first().copied().unwrap_or(0.0);
    }
    run
}

/// Replaces the "## Profiler overhead" section of `path` with `body`, or appends it.
fn replace_section(path: &Path, body: &str) {
    const HEADING: &str = "## Profiler overhead";
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let section = format!(
        "{HEADING}\n\n`target/release/bench-overhead --runs 9 --markdown BENCHMARKS.md` (scripts/bench): the wall time of a fixed amount of CPU work, unprofiled and under `unwind-profiler record`. Per sample, *all* is the slowdown's CPU time (threads x extra wall time) over the samples; *delivery* is the same figure per signal for the same timers at 10 kHz with a handler that only counts (the timer interrupt, the signal frame, `sigreturn`); *unwind* and *store* are the handler's own figures from the summary, *collector* the collector thread's CPU time (draining the rings) per sample; *the rest* is what is left: the caches the handler evicts from the work's, and noise. *Slowdown* is the work's wall time against the same round's unprofiled run, *CPU time* the process's CPU time (the collector's included) over the same interval; both are medians over the rounds. `timer_create` CPU timers fire at most once per kernel tick (250 Hz here), so they take fewer, heavier-weighted samples at either rate.\n\n{body}\n"
    );
    let new = match old.find(HEADING) {
        Some(start) => {
            let after = &old[start + HEADING.len()..];
            let end = after
                .find("\n## ")
                .map_or(old.len(), |e| start + HEADING.len() + e + 1);
            format!("{}{section}{}", &old[..start], &old[end..])
        }
        None => format!("{}\n{section}", old.trim_end()),
    };
    std::fs::write(path, new).unwrap();
}

/// Signals the floor's empty handler received.
static FLOOR_SIGNALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn count_signal(_: libc::c_int) {
    FLOOR_SIGNALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// The workload: `threads` threads each doing `units` units of work, timed from when all have
/// started to when all have finished. With `floor`, each thread first starts the profiler's
/// timer of that kind and rate, whose signal (SIGPROF, or SIGTRAP for `perf-sigtrap`) an empty
/// handler counts.
fn work(threads: usize, units: u64, floor: Option<(&str, u32)>) {
    let spec = floor.map(|(timer, hz)| {
        // SAFETY: a zeroed sigaction with an empty mask and a handler of the right type.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = count_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut());
            libc::sigaction(libc::SIGTRAP, &sa, std::ptr::null_mut());
        }
        TimerSpec {
            choice: TimerChoice::from_name(timer).expect("a timer name"),
            clock: libc::CLOCK_THREAD_CPUTIME_ID,
            period: std::time::Duration::from_nanos(1_000_000_000 / u64::from(hz.max(1))),
            signal: libc::SIGPROF,
        }
    });
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                if let Some(spec) = spec {
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() };
                    timer::create(&spec, t, tid).expect("the floor's timer");
                }
                b.wait();
                let mut acc = 0u64;
                for u in 0..units {
                    acc = acc.wrapping_add(descend_a(26, (t as u64) << 32 | u));
                }
                b.wait();
                acc
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let cpu0 = unwind_profiler::sampler::clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
    barrier.wait();
    let elapsed = start.elapsed();
    let cpu1 = unwind_profiler::sampler::clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
    println!("cpu seconds: {:.6}", (cpu1 - cpu0) as f64 / 1e9);
    let sum = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold(0u64, u64::wrapping_add);
    println!("checksum: {sum:016x}");
    println!("work seconds: {:.6}", elapsed.as_secs_f64());
    println!(
        "signals: {}",
        FLOOR_SIGNALS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[inline(never)]
fn descend_a(depth: u32, seed: u64) -> u64 {
    if depth == 0 {
        return leaf(seed);
    }
    std::hint::black_box(descend_b(depth - 1, seed)).wrapping_add(1)
}

#[inline(never)]
fn descend_b(depth: u32, seed: u64) -> u64 {
    if depth == 0 {
        return leaf(seed);
    }
    std::hint::black_box(descend_c(depth - 1, seed)).wrapping_mul(3)
}

#[inline(never)]
fn descend_c(depth: u32, seed: u64) -> u64 {
    if depth == 0 {
        return leaf(seed);
    }
    std::hint::black_box(descend_a(depth - 1, seed)) ^ 5
}

/// About 8 µs: fills 512 words from an LCG, sorts them, and hashes the result.
#[inline(never)]
fn leaf(seed: u64) -> u64 {
    let mut v = [0u64; 512];
    let mut x = seed | 1;
    for w in v.iter_mut() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *w = x >> 17;
    }
    v.sort_unstable();
    v.iter().fold(0xcbf29ce484222325u64, |h, w| {
        (h ^ w).wrapping_mul(0x100000001b3)
    })
}
