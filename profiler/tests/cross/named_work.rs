//! The Rust program of profiler/tests/common/cross.rs: two `std::thread`s, "alpha" and "beta", each
//! doing its own named work (`alpha_work` -> `alpha_mix`, `beta_work` -> `beta_mix`), while
//! `main` does its own (`main_work` -> `main_mix`). Fixed iteration counts, so the output is the
//! same on every run: one line per thread with its result.

use std::hint::black_box;
use std::thread;

const ROUNDS: u32 = 2000;
const STEPS: u32 = 100_000;

#[inline(never)]
fn alpha_mix(mut x: u32) -> u32 {
    for _ in 0..STEPS {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
    }
    x
}

/// Each call's result is used after it returns (and `black_box` hides the argument), so that no
/// call is a tail call or specialized away: every caller keeps its frame.
#[inline(never)]
fn alpha_work(seed: u32) -> u32 {
    let mut acc = seed;
    for r in 0..ROUNDS {
        acc = alpha_mix(black_box(acc.wrapping_add(r))).wrapping_add(1);
    }
    acc
}

#[inline(never)]
fn beta_mix(mut x: u32) -> u32 {
    for _ in 0..STEPS {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
    }
    x
}

#[inline(never)]
fn beta_work(seed: u32) -> u32 {
    let mut acc = seed;
    for r in 0..ROUNDS {
        acc = beta_mix(black_box(acc ^ r)).wrapping_add(3);
    }
    acc
}

#[inline(never)]
fn main_mix(mut x: u32) -> u32 {
    for _ in 0..STEPS {
        x = (x >> 1) ^ ((x & 1).wrapping_neg() & 0xedb8_8320);
    }
    x
}

#[inline(never)]
fn main_work(seed: u32) -> u32 {
    let mut acc = seed;
    for r in 0..ROUNDS / 2 {
        acc = main_mix(black_box(acc.wrapping_add(r))).wrapping_add(7);
    }
    acc
}

fn main() {
    let alpha = thread::Builder::new()
        .name("alpha".into())
        .spawn(|| alpha_work(black_box(1)))
        .expect("spawn alpha");
    let beta = thread::Builder::new()
        .name("beta".into())
        .spawn(|| beta_work(black_box(2)))
        .expect("spawn beta");
    let main_result = main_work(black_box(3));
    let alpha = alpha.join().expect("alpha");
    let beta = beta.join().expect("beta");
    println!("alpha {alpha:08x}\nbeta {beta:08x}\nmain {main_result:08x}");
}
