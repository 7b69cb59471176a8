//! Unwinds a captured recursion K times, for instruction counting under callgrind:
//! `valgrind --tool=callgrind target/release/examples/count_instructions DEPTH K [cold]`.
//! Instructions per frame = (total(K) - total(0)) / (K * frames). The frame count is printed.

use unwind_benches::capture_recursion;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let depth: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let k: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let cold = args.get(3).is_some_and(|s| s == "cold");
    unwind::init().expect("init");
    let captured = capture_recursion(depth);
    let image = captured.image();
    let mut pcs = vec![0u64; 1024];
    let mut cache = Box::new(unwind_core::Cache::new());
    // One unwind outside the counted loop warms the cache (and is in the K = 0 run too).
    let frames = unwind::unwind_with(captured.regs, &image, &mut cache, &mut pcs, None)
        .expect("unwind")
        .frames;
    for _ in 0..k {
        if cold {
            cache.clear();
        }
        let r = unwind::unwind_with(captured.regs, &image, &mut cache, &mut pcs, None);
        std::hint::black_box(r.ok());
    }
    println!("frames {frames}");
}
