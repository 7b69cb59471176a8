//! The program of `sampled_allocator.rs` and `sampled_jemalloc.rs`, whichever allocator the
//! test's `#[global_allocator]` wraps in `Sampled`: two functions of known allocations, one
//! that keeps 512 MiB of vectors live and one that churns 1 GiB of strings. The heap profile's
//! estimate of each is within 10 % of what it allocated (about 1,000 and 2,000 samples at the
//! default interval: spreads of 3.2 and 2.2 %), what the first keeps is live and nothing of the
//! second, each sample's stack holds its function under the program's body, and nothing the profiler
//! allocates for itself (its thread, its start) is among the program's sites.

use std::hint::black_box;

const MIB: usize = 1 << 20;

/// Vectors of 64 KiB to 1 MiB, 512 MiB in all, returned to be kept live.
#[inline(never)]
pub fn vectors_kept() -> (Vec<Vec<u8>>, u64) {
    let mut kept = Vec::with_capacity(1024);
    let (mut total, mut size) = (0, 64 * 1024);
    while total < 512 * MIB {
        kept.push(black_box(vec![1u8; size]));
        total += size;
        size = if size >= MIB { 64 * 1024 } else { size * 2 };
    }
    (kept, total as u64)
}

/// Strings of 24 to 4,000 bytes, 1 GiB in all, each dropped at once.
#[inline(never)]
pub fn strings_churned() -> u64 {
    let (mut total, mut size) = (0, 24);
    while total < 1024 * MIB {
        let s = black_box("y".repeat(size));
        total += s.capacity();
        drop(s);
        size = if size >= 4000 { 24 } else { size * 3 / 2 };
    }
    total as u64
}

/// Profiles the two functions through the library and checks the heap profile; `test` is the
/// test's crate name (this function, the program's body, is under every sample).
pub fn run(test: &str) {
    let profiler = unwind_profiler::Profiler::builder()
        .sample_allocations(unwind_profiler::byte_sampling::DEFAULT_MEAN)
        .start()
        .expect("start the profiler");
    let (kept, kept_bytes) = vectors_kept();
    let churned_bytes = strings_churned();
    let profile = profiler.stop();
    drop(black_box(kept));

    let heap = profile.heap.as_ref().expect("a heap profile");
    assert_eq!(heap.interval, 512 * 1024);
    assert!(heap.dropped.is_empty(), "{:?}", heap.dropped);
    let mut by_function = std::collections::HashMap::<&str, [u64; 2]>::new();
    for site in &heap.sites {
        let names: Vec<String> = profile
            .stack_frames_leaf_first(site.stack)
            .map(|f| f.function.clone())
            .collect();
        let Some(function) = ["vectors_kept", "strings_churned"]
            .into_iter()
            .find(|f| names.iter().any(|n| n.ends_with(&format!("::{f}"))))
        else {
            panic!("a site of neither function: {names:?}");
        };
        assert!(
            names
                .iter()
                .any(|n| n.ends_with(&format!("{test}::sampled_allocations::run"))),
            "{names:?}"
        );
        let e = by_function.entry(function).or_default();
        e[0] += site.alloc_bytes;
        e[1] += site.inuse_bytes;
    }
    println!("{by_function:?}; kept {kept_bytes}, churned {churned_bytes}");
    let within = |estimate: u64, truth: u64| (estimate as f64 / truth as f64 - 1.0).abs() <= 0.10;
    let kept = by_function["vectors_kept"];
    assert!(within(kept[0], kept_bytes), "kept allocated {kept:?}");
    assert!(within(kept[1], kept_bytes), "kept live {kept:?}");
    let churned = by_function["strings_churned"];
    assert!(within(churned[0], churned_bytes), "churned {churned:?}");
    assert_eq!(churned[1], 0, "churned strings live: {churned:?}");
    println!("{test}: ok ({} samples)", heap.sampled);
}
