//! A program whose signal handler allocates, while its main thread allocates too, under
//! allocation sampling (`Sampled<A>`, a sample every 4 KiB, so that the sampling path is often
//! running when the signal comes): a handler's allocation that reaches its sample point while
//! the interrupted code is itself taking a sample is counted ("thread already sampling") and
//! not taken; every other is unwound through the signal frame. The run ends, the heap profile
//! holds only the two functions' sites, each handler site's stack goes on through the signal
//! frame to the main loop, the main loop's estimate is within 10 % of what it allocated, and
//! some handler allocations did meet a sample being taken (else this test tested nothing).
//!
//! The handler allocates from a bump region of its own (the C library's `malloc` is not
//! reentrant); everything else from `System`. One process, no test harness: `cargo test -p
//! unwind-profiler --test alloc_in_signal_handler`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use unwind_profiler::alloc_sampling::Sampled;

/// `System`, but inside the signal handler a bump region that wraps around (what the handler
/// allocates it drops at once).
struct HandlerSafe;

const REGION: usize = 16 << 20;
static IN_HANDLER: AtomicBool = AtomicBool::new(false);
/// The thread pointer of the thread whose handler uses the region (the profiler's thread
/// allocates meanwhile, from `System`).
static HANDLER_THREAD: AtomicUsize = AtomicUsize::new(0);
static REGION_START: AtomicUsize = AtomicUsize::new(0);
static REGION_NEXT: AtomicUsize = AtomicUsize::new(0);

// SAFETY: outside the handler, `System`'s blocks; inside, blocks of the region, each of its
// layout's size and alignment, never handed to `System`.
unsafe impl GlobalAlloc for HandlerSafe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if IN_HANDLER.load(Relaxed)
            && HANDLER_THREAD.load(Relaxed) == unwind_in_process::thread_pointer()
        {
            let start = REGION_START.load(Relaxed);
            let size = layout.size().next_multiple_of(64).max(64);
            let at = REGION_NEXT.fetch_add(size, Relaxed) % (REGION - size - 64);
            return ((start + at).next_multiple_of(64)) as *mut u8;
        }
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let start = REGION_START.load(Relaxed);
        if (start..start + REGION).contains(&(ptr as usize)) {
            return;
        }
        // SAFETY: forwarded: a block of `System`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Sampled<HandlerSafe> = Sampled(HandlerSafe);

static HANDLER_RUNS: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
extern "C" fn on_alarm(_: libc::c_int) {
    IN_HANDLER.store(true, Relaxed);
    for _ in 0..4 {
        drop(black_box(Box::new([7u8; 512])));
    }
    IN_HANDLER.store(false, Relaxed);
    HANDLER_RUNS.fetch_add(1, Relaxed);
}

/// Allocates and drops 1 KiB vectors for `time`; the bytes allocated.
#[inline(never)]
fn main_loop(time: Duration) -> u64 {
    let start = Instant::now();
    let mut total = 0u64;
    while start.elapsed() < time {
        for _ in 0..1000 {
            let v = black_box(vec![1u8; 1024]);
            total += v.capacity() as u64;
        }
    }
    total
}

fn main() {
    // SAFETY: a private anonymous mapping for the handler's region; a valid handler for
    // SIGALRM; the timer and mask calls take valid arguments.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            REGION,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        REGION_START.store(p as usize, Relaxed);
        HANDLER_THREAD.store(unwind_in_process::thread_pointer(), Relaxed);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()), 0);
    }
    // The profiler's thread inherits a mask with SIGALRM blocked: only this thread takes it.
    let mut alarm: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset and mask calls.
    unsafe {
        libc::sigemptyset(&mut alarm);
        libc::sigaddset(&mut alarm, libc::SIGALRM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &alarm, std::ptr::null_mut());
    }
    let mut builder = unwind_profiler::Profiler::builder().sample_allocations(64 * 1024);
    // Half a million samples a second: room for a collector kept off the CPU for a while on a
    // busy machine.
    builder.config_mut().ring_words = 1 << 17;
    let profiler = builder.start().expect("start the profiler");
    let every = libc::timeval {
        tv_sec: 0,
        tv_usec: 100,
    };
    let timer = libc::itimerval {
        it_interval: every,
        it_value: every,
    };
    // SAFETY: valid mask and timer calls.
    unsafe {
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &alarm, std::ptr::null_mut());
        libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut());
    }
    let allocated = main_loop(Duration::from_secs(2));
    // SAFETY: as above; a zeroed itimerval stops the timer.
    unsafe {
        libc::setitimer(libc::ITIMER_REAL, &std::mem::zeroed(), std::ptr::null_mut());
        libc::pthread_sigmask(libc::SIG_BLOCK, &alarm, std::ptr::null_mut());
    }
    let profile = profiler.stop();
    let heap = profile.heap.as_ref().expect("a heap profile");
    let busy = heap
        .dropped
        .iter()
        .find(|(why, _)| why.starts_with("thread already sampling"))
        .map_or(0, |&(_, n)| n);
    let (mut main_bytes, mut handler_sites, mut handler_samples) = (0u64, 0, 0);
    for site in &heap.sites {
        let names: Vec<String> = profile
            .stack_frames_leaf_first(site.stack)
            .map(|f| f.function.clone())
            .collect();
        let has = |f: &str| names.iter().any(|n| n.ends_with(&format!("::{f}")));
        assert!(has("main_loop"), "a site outside the main loop: {names:?}");
        if has("on_alarm") {
            handler_sites += 1;
            handler_samples += site.samples;
        } else {
            main_bytes += site.alloc_bytes;
        }
    }
    println!(
        "handler runs {}, samples {}, of them in the handler {handler_samples} ({handler_sites} \
         sites), not taken while sampling {busy}; main loop allocated {allocated}, estimated \
         {main_bytes}",
        HANDLER_RUNS.load(Relaxed),
        heap.sampled
    );
    println!("samples not taken: {:?}", heap.dropped);
    // Samples lost to a full ring (the collector behind) thin the main loop's uniformly: the
    // estimate is compared as if they had been stored.
    let ring_full = heap
        .dropped
        .iter()
        .find(|(why, _)| why.starts_with("ring full"))
        .map_or(0, |&(_, n)| n);
    let main_bytes =
        (main_bytes as f64 * (heap.sampled + ring_full) as f64 / heap.sampled.max(1) as f64) as u64;
    assert!(HANDLER_RUNS.load(Relaxed) > 1000);
    assert!(handler_samples > 0, "no sample in the handler");
    assert!(busy > 0, "no handler allocation met a sample being taken");
    assert!(
        (main_bytes as f64 / allocated as f64 - 1.0).abs() <= 0.10,
        "main loop: {main_bytes} estimated for {allocated}"
    );
    println!("alloc_in_signal_handler: ok");
}
