//! benches/c/new-stacks.c as a Rust service that profiles itself through the library
//! (`unwind_profiler::Profiler::builder()`, a profile per period written to a directory), for
//! scripts/continuous-memory: the memory of a library user over a long run of stacks it never
//! met before. Each call picks the next of 16 functions by a random number, 8 to 40 deep.
//!
//! Usage: `new-stacks-service SECONDS HZ DIR` (period 10 s). At the end it prints the periods
//! cut and written.

use std::time::{Duration, Instant};

type Step = fn(u32, u64) -> u64;

/// The 16 functions a call may go to next.
static TABLE: [Step; 16] = [
    f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15,
];

/// One step deeper, to a function picked by the top bits of `x`; at depth 0 a few microseconds
/// of work, so that samples land all over the stacks.
#[inline(never)]
fn next(depth: u32, x: u64) -> u64 {
    let mut x = x
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    if depth == 0 {
        for _ in 0..2000 {
            x = (x ^ (x >> 13)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        return x;
    }
    TABLE[(x >> 60) as usize](depth - 1, x).wrapping_add(1)
}

macro_rules! steps {
    ($($name:ident = $n:expr),*) => {
        $(
            /// A frame of its own (`black_box` keeps the call from being a tail call).
            #[inline(never)]
            fn $name(depth: u32, x: u64) -> u64 {
                std::hint::black_box(next(depth, x ^ $n))
            }
        )*
    };
}

#[rustfmt::skip]
steps!(
    f0 = 0, f1 = 1, f2 = 2, f3 = 3, f4 = 4, f5 = 5, f6 = 6, f7 = 7, f8 = 8, f9 = 9, f10 = 10,
    f11 = 11, f12 = 12, f13 = 13, f14 = 14, f15 = 15
);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(seconds), Some(hz), Some(dir)) = (
        args.first().and_then(|s| s.parse::<f64>().ok()),
        args.get(1).and_then(|s| s.parse::<u32>().ok()),
        args.get(2),
    ) else {
        eprintln!("usage: new-stacks-service SECONDS HZ DIR");
        std::process::exit(2);
    };
    let profiler = unwind_profiler::Profiler::builder()
        .frequency(hz)
        .period(Duration::from_secs(10))
        .output(dir)
        .start()
        .expect("the profiler starts");
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let (mut x, mut sink) = (1u64, 0u64);
    while Instant::now() < end {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        sink = sink.wrapping_add(next(8 + (x >> 59) as u32, x));
    }
    std::hint::black_box(sink);
    let last = profiler.stop();
    if let Some(p) = &last.counters.periods {
        println!("periods {} written {}", p.cut, p.written);
    }
}
