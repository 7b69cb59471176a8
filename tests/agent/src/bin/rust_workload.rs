//! A Rust release program sampled by the agent: three threads with distinct call chains.
//! Usage: `rust-workload OUT_FILE SECONDS HZ`.

use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn rw_leaf(n: u64) -> u64 {
    let mut h = n;
    for i in 0..2_000u64 {
        h = black_box(h.rotate_left(5) ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h
}

#[inline(never)]
fn rw_recurse(depth: u32, n: u64) -> u64 {
    let pad = black_box([n; 6]);
    let r = if depth == 0 {
        rw_leaf(n)
    } else {
        rw_recurse(depth - 1, n ^ u64::from(depth))
    };
    black_box(r.wrapping_add(pad[depth as usize % 6]))
}

#[inline(never)]
fn rw_sort(n: u64) -> u64 {
    let mut v: Vec<u64> = (0..4_000)
        .map(|i| (i ^ n).wrapping_mul(0x2545_f491))
        .collect();
    v.sort_unstable();
    black_box(v[v.len() / 2])
}

#[inline(never)]
fn rw_thread(kind: u32, until: Instant) -> u64 {
    unwind_agent::register_thread().expect("register");
    let mut acc = 0u64;
    while Instant::now() < until {
        acc = acc.wrapping_add(match kind {
            0 => rw_recurse(black_box(12), acc),
            _ => rw_sort(acc),
        });
    }
    unwind_agent::unregister_thread();
    acc
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = args.get(1).expect("usage: rust-workload OUT SECONDS HZ");
    let seconds: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let hz: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1000);
    unwind_agent::start(hz).expect("agent");
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..2)
        .map(|k| std::thread::spawn(move || rw_thread(k, until)))
        .collect();
    let mut acc = 0u64;
    while Instant::now() < until {
        acc = acc.wrapping_add(rw_recurse(black_box(5), acc));
    }
    for t in threads {
        acc = acc.wrapping_add(t.join().expect("thread"));
    }
    black_box(acc);
    std::fs::write(out, unwind_agent::stop()).expect("write report");
}
