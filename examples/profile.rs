//! A sampling profiler in one file: worker threads run a bundled workload, a sampler thread sends
//! each of them SIGPROF at 1 kHz, the handler unwinds the interrupted stack into preallocated
//! storage, and at the end the stacks are symbolized and printed (hottest first, in the folded
//! format flame-graph tools read), with the preload report and cache hit rate.
//!
//! `cargo run --release --example profile [-- SECONDS] [--preload FILE] [--minidumps DIR [--every N] [--max M]]`
//!
//! With `--preload FILE`, the unwind tables of that ELF file are loaded too and the cost
//! reported (`scripts/demo` passes the Rust toolchain's `librustc_driver`, the largest binary at
//! hand).
//!
//! With `--minidumps DIR`, every `N`-th sample (default 100) is also captured in the handler (the
//! full register context and up to 64 KiB of stack, into buffers allocated before sampling, at
//! most `M` of them, default 256) and written after sampling as `DIR/NNNN.dmp`, a minidump
//! holding the frames the handler found (`unwind_samples::minidump::UNWOUND_STREAM`), for other stack
//! walkers to compare with.

use std::hint::black_box;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAX_FRAMES: usize = 128;
const MAX_SAMPLES: usize = 1 << 16;

/// The samples, allocated before sampling starts.
static SAMPLES: std::sync::OnceLock<unwind_in_process::Samples> = std::sync::OnceLock::new();
static FAILED: AtomicUsize = AtomicUsize::new(0);

const STOPS: [unwind_in_process::StopReason; unwind_in_process::StopReason::ALL.len()] =
    unwind_in_process::StopReason::ALL;

/// Stack bytes copied per minidump capture.
const CAPTURE_BYTES: usize = 64 * 1024;

/// Samples saved as minidumps (`--minidumps`), allocated before sampling starts.
static CAPTURES: std::sync::OnceLock<unwind_in_process::Captures> = std::sync::OnceLock::new();

/// Command-line options.
struct Options {
    seconds: f64,
    minidumps: Option<std::path::PathBuf>,
    every: usize,
    max: usize,
    /// An ELF file whose unwind tables are also loaded, to report what preloading it costs.
    preload: Option<std::path::PathBuf>,
}

fn parse_options() -> Result<Options, String> {
    let mut o = Options {
        seconds: 2.0,
        minidumps: None,
        every: 100,
        max: 256,
        preload: None,
    };
    let mut args = std::env::args().skip(1);
    let positive = |flag: &str, v: Option<String>| -> Result<usize, String> {
        v.as_deref()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{flag} needs a positive integer"))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--minidumps" => {
                o.minidumps = Some(args.next().ok_or("--minidumps needs a directory")?.into())
            }
            "--preload" => o.preload = Some(args.next().ok_or("--preload needs a file")?.into()),
            "--every" => o.every = positive("--every", args.next())?,
            "--max" => o.max = positive("--max", args.next())?,
            s => {
                o.seconds = s
                    .parse()
                    .ok()
                    .filter(|&t: &f64| t.is_finite() && t > 0.0)
                    .ok_or_else(|| format!("unknown argument {s:?} (want SECONDS or an option)"))?
            }
        }
    }
    Ok(o)
}

extern "C" fn on_sigprof(_: libc::c_int, _: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let mut pcs = [0u64; MAX_FRAMES];
    // SAFETY: `uc` is the context the kernel passed to this SA_SIGINFO handler.
    let Ok(r) = (unsafe { unwind_in_process::unwind_signal(uc, &mut pcs, None) }) else {
        FAILED.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let Some(samples) = SAMPLES.get() else { return };
    let pcs = pcs.get(..r.frames).unwrap_or(&[]);
    if !samples.push(pcs, r.stop) {
        return;
    }
    if let Some(c) = CAPTURES.get() {
        // SAFETY: `uc` is this handler's context, on the interrupted (registered) thread.
        unsafe { c.capture(uc, pcs, r.stop) };
    }
}

// The bundled workload: three kinds of work with distinct call chains.
#[inline(never)]
fn fib(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        black_box(fib(n - 1)) + fib(n - 2)
    }
}

#[inline(never)]
fn mix(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

#[inline(never)]
fn hash_blocks(data: &[u8]) -> u64 {
    data.chunks(64)
        .fold(0xcbf2_9ce4_8422_2325, |h, c| mix(h, black_box(c)))
}

#[inline(never)]
fn sort_and_sum(seed: u64) -> u64 {
    let mut v: Vec<u64> = (0..20_000u64)
        .map(|i| (i ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    v.sort_unstable();
    v.iter().step_by(97).sum()
}

#[inline(never)]
fn worker(kind: usize, until: Instant) -> u64 {
    let data: Vec<u8> = (0..1 << 16).map(|i| i as u8).collect();
    let mut acc = 0u64;
    while Instant::now() < until {
        acc = acc.wrapping_add(match kind {
            0 => fib(black_box(24)),
            1 => hash_blocks(black_box(&data)),
            _ => sort_and_sum(black_box(acc)),
        });
    }
    acc
}

fn main() {
    let options = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "profile: {e}\nusage: profile [SECONDS] [--minidumps DIR [--every N] [--max M]]"
            );
            std::process::exit(2);
        }
    };
    let seconds = options.seconds;
    if options.minidumps.is_some() {
        CAPTURES.get_or_init(|| {
            unwind_in_process::Captures::new(options.max, options.every, CAPTURE_BYTES, MAX_FRAMES)
        });
    }
    SAMPLES.get_or_init(|| unwind_in_process::Samples::new(MAX_SAMPLES, MAX_FRAMES));
    let report = unwind_in_process::init().expect("preload");
    print!("{report}");
    if let Some(file) = &options.preload {
        match unwind_in_process::preload_file(file) {
            Ok((m, t)) => println!("preload {m}, {:.1} ms", t.as_secs_f64() * 1e3),
            Err(e) => println!("preload {}: {e}", file.display()),
        }
    }

    // SAFETY: installs a handler that only calls async-signal-safe code; the sigaction struct is
    // fully initialised.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigprof as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut()), 0);
    }

    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let tids: Arc<Vec<AtomicI32>> = Arc::new((0..3).map(|_| AtomicI32::new(0)).collect());
    let hits = Arc::new(AtomicU64::new(0));
    let misses = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..3)
        .map(|kind| {
            let (tids, hits, misses) = (tids.clone(), hits.clone(), misses.clone());
            std::thread::Builder::new()
                .name(format!("worker-{kind}"))
                .spawn(move || {
                    unwind_in_process::register_thread().expect("register");
                    // SAFETY: gettid has no preconditions.
                    tids[kind].store(unsafe { libc::gettid() }, Ordering::Release);
                    let r = worker(kind, until);
                    tids[kind].store(0, Ordering::Release);
                    if let Some((h, m)) = unwind_in_process::cache_stats() {
                        hits.fetch_add(h, Ordering::Relaxed);
                        misses.fetch_add(m, Ordering::Relaxed);
                    }
                    unwind_in_process::unregister_thread();
                    r
                })
                .expect("spawn")
        })
        .collect();

    // The sampler: SIGPROF to every live worker each millisecond.
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut sent = 0u64;
    while Instant::now() < until {
        for t in tids.iter() {
            let tid = t.load(Ordering::Acquire);
            // SAFETY: sends a signal to a thread of this process whose handler is installed.
            if tid != 0 && unsafe { libc::tgkill(pid, tid, libc::SIGPROF) } == 0 {
                sent += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for w in workers {
        black_box(w.join().expect("worker"));
    }

    let sym = unwind_in_process::symbolizer();
    let samples = SAMPLES.get().expect("samples");
    let taken = samples.pushed().min(MAX_SAMPLES);
    let mut folded: std::collections::HashMap<String, usize> = Default::default();
    let mut stops = [0usize; STOPS.len()];
    let mut frames = 0usize;
    for sample in samples.iter() {
        frames += sample.pcs.len();
        if let Some(n) = stops.get_mut(sample.stop.index()) {
            *n += 1;
        }
        let mut names = sym.stack(sample.pcs);
        names.reverse();
        *folded.entry(names.join(";")).or_default() += 1;
    }
    let mut hot: Vec<_> = folded.into_iter().collect();
    hot.sort_by_key(|b| std::cmp::Reverse(b.1));
    println!("\nhottest stacks (folded: outermost;...;innermost count):");
    for (stack, n) in hot.iter().take(12) {
        println!("{stack} {n}");
    }
    println!(
        "\nsignals sent: {sent}, samples: {taken}, not unwound: {}",
        FAILED.load(Ordering::Relaxed)
    );
    println!(
        "mean frames/sample: {:.1}",
        frames as f64 / taken.max(1) as f64
    );
    for (s, n) in STOPS.iter().zip(stops) {
        if n > 0 {
            println!("stop {s:?}: {n}");
        }
    }
    let (h, m) = (hits.load(Ordering::Relaxed), misses.load(Ordering::Relaxed));
    println!(
        "cache: {h} hits, {m} misses, hit rate {:.2} %",
        100.0 * h as f64 / (h + m).max(1) as f64
    );
    if let Some(dir) = &options.minidumps {
        let written = CAPTURES.get().map_or(Ok(0), |c| c.write_minidumps(dir));
        match written {
            Ok(n) => println!(
                "minidumps: {n} written to {} (every {} samples, at most {})",
                dir.display(),
                options.every,
                options.max
            ),
            Err(e) => println!("minidumps: cannot write to {}: {e}", dir.display()),
        }
    }
}
