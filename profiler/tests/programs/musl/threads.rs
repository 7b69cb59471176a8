//! A Rust program built for musl as Alpine's rustc builds it (dynamically linked against musl
//! libc): two threads in a two-level call chain. profiler/tests/musl_programs.rs profiles it
//! under record.

#[inline(never)]
fn leaf_work(mut x: u64) -> u64 {
    for i in 0..100_000u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
    }
    std::hint::black_box(x)
}

#[inline(never)]
fn middle(x: u64) -> u64 {
    leaf_work(x) + 1
}

#[inline(never)]
fn worker(mut x: u64) -> u64 {
    let start = std::time::Instant::now();
    while start.elapsed().as_secs() < 2 {
        x = middle(x);
    }
    x
}

fn main() {
    let other = std::thread::spawn(|| worker(1));
    let mine = worker(2);
    println!("{}", (mine ^ other.join().unwrap()) & 1);
}
