//! A Rust program for `profiler/tests/programs.rs`: four `std::thread`s, each named after its
//! job and running one `#[inline(never)]` function of this crate (`work::hash_strings`,
//! `work::sort_numbers`, `work::sieve_primes`, `work::mandelbrot`) a fixed number of rounds,
//! then the main thread prints each job's checksum. The output depends only on the rounds.
//!
//! Build: `rustc -O work.rs`; run: `./work [ROUNDS]` (default 10).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::hint::black_box;

/// Hashes formatted strings with the standard library's SipHash.
#[inline(never)]
pub fn hash_strings(rounds: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..rounds * 400_000 {
        let s = format!("item-{i}-{}", i % 97);
        let mut h = DefaultHasher::new();
        s.hash(&mut h);
        acc ^= h.finish().rotate_left((i % 64) as u32);
    }
    acc
}

/// Sorts pseudo-random numbers from a linear congruential generator.
#[inline(never)]
pub fn sort_numbers(rounds: u64) -> u64 {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut acc = 0u64;
    for _ in 0..rounds * 100 {
        let mut v: Vec<u64> = (0..25_000)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                x >> 17
            })
            .collect();
        v.sort_unstable();
        acc = acc.wrapping_add(v[v.len() / 2]);
    }
    acc
}

/// Counts primes with a sieve of Eratosthenes.
#[inline(never)]
pub fn sieve_primes(rounds: u64) -> u64 {
    let mut acc = 0u64;
    for r in 0..rounds * 90 {
        let n = 200_000 + r as usize;
        let mut composite = vec![false; n + 1];
        let mut count = 0u64;
        for i in 2..=n {
            if !composite[i] {
                count += 1;
                let mut j = i * i;
                while j <= n {
                    composite[j] = true;
                    j += i;
                }
            }
        }
        acc += black_box(count);
    }
    acc
}

/// Iterates points of the Mandelbrot set in floating point.
#[inline(never)]
pub fn mandelbrot(rounds: u64) -> u64 {
    let mut inside = 0u64;
    for r in 0..rounds * 18 {
        for py in 0..120 {
            for px in 0..120 {
                let (cx, cy) = (
                    -2.0 + px as f64 * 2.5 / 120.0 + r as f64 * 1e-9,
                    -1.25 + py as f64 * 2.5 / 120.0,
                );
                let (mut x, mut y, mut k) = (0.0f64, 0.0f64, 0);
                while k < 200 && x * x + y * y <= 4.0 {
                    let t = x * x - y * y + cx;
                    y = 2.0 * x * y + cy;
                    x = t;
                    k += 1;
                }
                inside += u64::from(k == 200);
            }
        }
    }
    inside
}

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .map_or(10, |a| a.parse().expect("ROUNDS must be a number"));
    let jobs: [(&str, fn(u64) -> u64); 4] = [
        ("hash_strings", hash_strings),
        ("sort_numbers", sort_numbers),
        ("sieve_primes", sieve_primes),
        ("mandelbrot", mandelbrot),
    ];
    let handles: Vec<_> = jobs
        .iter()
        .map(|&(name, job)| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || job(black_box(rounds)))
                .unwrap()
        })
        .collect();
    for ((name, _), h) in jobs.iter().zip(handles) {
        println!("{name} {}", h.join().unwrap());
    }
}
