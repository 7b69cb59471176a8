//! Unwinding the calling thread from its current frame, without signals.

use std::hint::black_box;

// The chain of frames the walk must show, the same in debug and release builds: none can be
// inlined (`inline(never)`), folded into another (each calls a different function) or left by
// a tail call (the result goes through `black_box` after the call returns); `black_box` on the
// argument keeps the compiler from specialising a call for a known slice.

#[inline(never)]
fn here_leaf(out: &mut [u64]) -> unwind_in_process::UnwindResult {
    let r = unwind_in_process::unwind_here(black_box(out), None).expect("unwind_here");
    black_box(r)
}

#[inline(never)]
fn here_middle(out: &mut [u64]) -> unwind_in_process::UnwindResult {
    let r = here_leaf(black_box(out));
    black_box(r)
}

#[inline(never)]
fn here_outer(out: &mut [u64]) -> unwind_in_process::UnwindResult {
    let r = here_middle(black_box(out));
    black_box(r)
}

/// The outermost frame checked. (Not the test function itself: release builds inline it into
/// the harness's closure.)
#[inline(never)]
fn here_root(out: &mut [u64]) -> unwind_in_process::UnwindResult {
    let r = here_outer(black_box(out));
    black_box(r)
}

#[test]
fn unwinds_the_current_thread_to_its_start() {
    unwind_in_process::init().expect("init");
    let mut pcs = [0u64; 256];
    let mut trust = [unwind_in_process::Trust::Context; 256];
    let r = here_root(&mut pcs);
    let sym = unwind_in_process::symbolizer();
    let names = sym.stack(&pcs[..r.frames]);
    // On ARM, glibc's thread entry (`start_thread`) is EXIDX_CANTUNWIND: the walk ends there.
    let thread_entry_cant_unwind = cfg!(target_arch = "arm")
        && r.stop == unwind_in_process::StopReason::CantUnwind
        && r.frames > 0
        && sym
            .lookup_return_address(pcs[r.frames - 1])
            .is_some_and(|s| s.module.ends_with("libc.so.6"));
    assert!(
        r.stop.is_complete() || thread_entry_cant_unwind,
        "stopped early: {r:?}\n{names:#?}"
    );
    // Exactly these frames, in this order, at the top of the stack: a frame skipped or invented
    // in between shifts the others.
    let expected = [
        "unwind_in_process::unwind_here",
        "unwind_here::here_leaf",
        "unwind_here::here_middle",
        "unwind_here::here_outer",
        "unwind_here::here_root",
    ];
    assert!(names.len() > expected.len(), "{names:#?}");
    assert_eq!(names[..expected.len()], expected, "{names:#?}");
    // Every frame above the first came from CFI (the test binary and libc have it all).
    let r2 = unwind_in_process::unwind_here(&mut pcs, Some(&mut trust)).expect("unwind_here");
    assert!(
        trust[1..r2.frames]
            .iter()
            .all(|&t| t == unwind_in_process::Trust::Cfi),
        "{:?}",
        &trust[..r2.frames]
    );
}

#[test]
fn unregistered_threads_are_refused() {
    unwind_in_process::init().expect("init");
    std::thread::spawn(|| {
        let mut pcs = [0u64; 8];
        assert_eq!(
            unwind_in_process::unwind_here(&mut pcs, None),
            Err(unwind_in_process::SampleError::ThreadNotRegistered)
        );
    })
    .join()
    .expect("thread");
}

#[test]
fn exiting_threads_release_their_slots() {
    unwind_in_process::init().expect("init");
    // Threads that register and exit without unregistering: their slots must be reused, so the
    // registry does not grow with every short-lived thread.
    for _ in 0..50 {
        std::thread::spawn(|| {
            unwind_in_process::register_thread().expect("register");
            assert!(unwind_in_process::is_thread_registered());
        })
        .join()
        .expect("thread");
    }
    assert!(
        unwind_in_process::registered_slots() < 10,
        "{} slots for 50 sequential threads",
        unwind_in_process::registered_slots()
    );
}
