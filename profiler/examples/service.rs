//! A service that profiles itself continuously: a profile every period, exported to an
//! OpenTelemetry Collector, and Go's pull endpoint served on loopback, in a few lines of
//! set-up (the builder below); the rest is a stand-in for the service's own work.
//!
//! ```text
//! cargo run --release -p unwind-profiler --example service -- \
//!     --export http://127.0.0.1:4318 --period 10s --seconds 60
//! go tool pprof -top http://127.0.0.1:PORT/debug/pprof/profile?seconds=5
//! ```
//!
//! Flags: `--export URL` (default: the `OTEL_EXPORTER_OTLP_*` variables), `--period DURATION`
//! in seconds or milliseconds (`10s`, `500ms`; default 10s), `--seconds N` to run (default
//! 60), `--pprof ADDR:PORT` (default `127.0.0.1:0`). It prints `pprof http://ADDR/...` on
//! stdout once it serves, and at the end what was delivered.

use std::time::{Duration, Instant};

/// The service's "request handling": a hash chain, deep enough to have a stack.
#[inline(never)]
fn handle_request(seed: u64) -> u64 {
    let mut h = seed;
    for i in 0..20_000u64 {
        h = h.rotate_left(7) ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    std::hint::black_box(h)
}

/// The service's "background job".
#[inline(never)]
fn compact_storage(seed: u64) -> u64 {
    let mut v: Vec<u64> = (0..4096).map(|i| (i * seed) % 7919).collect();
    v.sort_unstable();
    std::hint::black_box(v[v.len() / 2])
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn duration(s: &str) -> Duration {
    match s.strip_suffix("ms") {
        Some(ms) => Duration::from_millis(ms.parse().expect("a duration")),
        None => Duration::from_secs(s.trim_end_matches('s').parse().expect("a duration")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: u64 = flag(&args, "--seconds").map_or(60, |s| s.parse().expect("seconds"));
    let period = flag(&args, "--period").map_or(Duration::from_secs(10), |p| duration(&p));
    let pprof = flag(&args, "--pprof").unwrap_or_else(|| "127.0.0.1:0".into());

    // The set-up a service needs: the rest of this file is its work.
    let profiler = unwind_profiler::Profiler::builder()
        .frequency(100)
        .period(period)
        .export_otlp(&flag(&args, "--export").unwrap_or_else(|| "otlp".into()))
        .service("example-service")
        .label("service.version", env!("CARGO_PKG_VERSION"))
        .serve_pprof(pprof.parse().expect("an address and port"))
        .start()
        .expect("the profiler starts");
    if let Some(addr) = profiler.pprof_address() {
        println!("pprof http://{addr}/debug/pprof/profile");
    }

    let end = Instant::now() + Duration::from_secs(seconds);
    let worker = std::thread::Builder::new()
        .name("background".into())
        .spawn(move || {
            // A thread the library did not create registers itself.
            unwind_profiler::sample_this_thread();
            let mut seed = 1;
            while Instant::now() < end {
                seed = compact_storage(seed) + 1;
            }
        })
        .expect("a thread");
    let mut seed = 1;
    while Instant::now() < end {
        seed = handle_request(seed);
    }
    let _ = worker.join();

    let last = profiler.stop();
    if let Some(p) = &last.counters.periods {
        let e = p.export.clone().unwrap_or_default();
        println!(
            "periods {} empty {} delivered {} retries {} dropped {} undelivered {}",
            p.cut, p.empty, e.delivered, e.retries, e.dropped, e.undelivered
        );
    }
}
