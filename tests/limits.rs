//! The runtime's limits, at each and one past it (the rule table's own are in
//! unwind-core/tests/limits.rs):
//!
//! | what | limit | one past |
//! |---|---|---|
//! | registered threads | none but memory: 10,000 at once tested; a slot per thread at the peak, reused by later threads | - |
//! | stack depth | the caller's buffer: a 100,000-frame recursion walked whole | `StopReason::BufferFull`, counted |
//!
//! Slots are never freed (a signal handler may be walking a chain), so their memory is that of
//! the most threads registered at once; a thread that exits releases its slot for the next.

use std::hint::black_box;
use std::sync::{Arc, Barrier, Once};

use unwind_in_process::StopReason;

/// Preloads once: the tests run in parallel, and a refresh never waits for another.
fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        unwind_in_process::init().expect("init");
    });
}

#[cfg(target_arch = "x86_64")]
type NativeCache = unwind_core::Cache<unwind_core::X86_64>;
#[cfg(target_arch = "arm")]
type NativeCache = unwind_core::Cache<unwind_core::Arm>;
#[cfg(target_arch = "aarch64")]
type NativeCache = unwind_core::Cache<unwind_core::Aarch64>;

#[inline(never)]
fn recurse(depth: usize, pcs: &mut [u64]) -> unwind_in_process::UnwindResult {
    if depth == 0 {
        return unwind_in_process::unwind_here(pcs, None).expect("unwind_here");
    }
    let r = recurse(black_box(depth - 1), pcs);
    black_box(r)
}

#[test]
fn a_100_000_frame_recursion_is_walked_whole_or_cut_at_the_buffer() {
    init();
    const DEPTH: usize = 100_000;
    let t = std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(|| {
            unwind_in_process::register_thread().expect("register");
            let mut pcs = vec![0u64; DEPTH + 1_000];
            let whole = recurse(DEPTH, &mut pcs);
            let mut short = vec![0u64; 256];
            let cut = recurse(DEPTH, &mut short);
            unwind_in_process::unregister_thread();
            (whole, cut)
        })
        .expect("spawn");
    let (whole, cut) = t.join().expect("join");
    assert!(whole.stop.is_complete(), "{whole:?}");
    assert!(whole.frames > DEPTH, "{whole:?}");
    assert_eq!((cut.stop, cut.frames), (StopReason::BufferFull, 256));
}

#[test]
fn ten_thousand_threads_registered_at_once() {
    init();
    // 1,000 on armv7 and aarch64, which CI runs under qemu-user: its thread creation alone took
    // 3 minutes for 20,000 threads on armv7 (the full count passes there too).
    const THREADS: usize = if cfg!(any(target_arch = "arm", target_arch = "aarch64")) {
        1_000
    } else {
        10_000
    };
    let run = |threads: usize| {
        // Every thread registers before the main thread counts, and leaves after it has.
        let (registered, counted) = (
            Arc::new(Barrier::new(threads + 1)),
            Arc::new(Barrier::new(threads + 1)),
        );
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (registered, counted) = (registered.clone(), counted.clone());
                std::thread::Builder::new()
                    .stack_size(128 << 10)
                    .spawn(move || {
                        unwind_in_process::register_thread().expect("register");
                        let mut pcs = [0u64; 64];
                        let r = unwind_in_process::unwind_here(&mut pcs, None).expect("unwind");
                        registered.wait();
                        counted.wait();
                        unwind_in_process::unregister_thread();
                        r
                    })
                    .expect("spawn a thread")
            })
            .collect();
        registered.wait();
        let peak = unwind_in_process::registered_threads();
        counted.wait();
        let walks: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("join"))
            .collect();
        (peak, walks)
    };
    let (peak, walks) = run(THREADS);
    assert!(peak >= THREADS, "{peak} registered at the peak");
    let incomplete = walks.iter().filter(|r| !r.stop.is_complete()).count();
    // ARM: glibc's start_thread is EXIDX_CANTUNWIND, which is complete too.
    assert_eq!(
        incomplete,
        0,
        "{:?}",
        walks.iter().find(|r| !r.stop.is_complete())
    );
    let slots = unwind_in_process::registered_slots();
    // The next 10,000 threads reuse the slots: a thread takes a free slot of its bucket (by its
    // thread pointer), so only buckets that now hold more threads at once than before grow.
    run(THREADS);
    let again = unwind_in_process::registered_slots();
    println!(
        "{THREADS} threads registered at once: {slots} slots, then {again} after {THREADS} more; \
         {} bytes of rule cache reserved a slot",
        NativeCache::new().bytes()
    );
    // Without reuse there would be `slots + THREADS`; with it, most of the second batch found
    // a free slot (84 % on x86_64 with 10,000 threads, over 60 % with 1,000).
    let reused = (slots + THREADS).saturating_sub(again);
    assert!(reused >= THREADS / 4, "{slots} slots, then {again}");
}
