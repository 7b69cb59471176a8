//! `sigaction` and `signal` interposed: a program that sets its own action for a signal the
//! profiler samples with (Go's runtime takes `SIGURG`; any program may take `SIGPROF`) keeps the
//! profiler's handler in front, which passes the program's own signals on to its action
//! ([`unwind_profiler::signals`]). Every other signal's call goes on to the C library as made.
//!
//! Not caught: `sigset`, `sysv_signal` and `bsd_signal` (rare), and the `rt_sigaction` system
//! call made directly (a statically linked runtime's, which the preload library is not loaded
//! into anyway).

use std::ffi::c_void;
use std::sync::atomic::AtomicPtr;

use libc::c_int;

static REAL_SIGACTION: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_SIGNAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

type Signal = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// The next object's `sigaction` (the C library's, or another interposer's), found once.
fn real_sigaction() -> Option<unwind_profiler::signals::Sigaction> {
    let p = crate::next_symbol(&REAL_SIGACTION, c"sigaction");
    // SAFETY: the next object's `sigaction` is the C library's, of this type.
    (!p.is_null()).then(|| unsafe {
        std::mem::transmute::<*mut c_void, unwind_profiler::signals::Sigaction>(p)
    })
}

/// Interposes the C library's `sigaction` (see the module docs).
///
/// # Safety
/// The contract of `sigaction`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    signal: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: forwarded under the caller's contract.
    if let Some(rc) = unsafe { unwind_profiler::signals::program_sigaction(signal, act, old) } {
        return rc;
    }
    match real_sigaction() {
        // SAFETY: forwarded, with the C library's function.
        Some(real) => unsafe { real(signal, act, old) },
        None => {
            // SAFETY: errno is this thread's.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            -1
        }
    }
}

/// Interposes the C library's `signal`: for a signal the profiler owns, the program's action
/// with the C library's semantics (BSD: `SA_RESTART`, the signal blocked in its handler);
/// every other call goes on.
///
/// # Safety
/// The contract of `signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(signal: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: a zeroed sigaction is valid; its fields are set below.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: initializes the mask in place and adds a signal number to it.
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaddset(&mut act.sa_mask, signal);
    }
    // SAFETY: a zeroed sigaction is valid; filled by the call.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both point to valid sigactions.
    if let Some(rc) = unsafe { unwind_profiler::signals::program_sigaction(signal, &act, &mut old) }
    {
        return if rc == 0 {
            old.sa_sigaction
        } else {
            libc::SIG_ERR
        };
    }
    let p = crate::next_symbol(&REAL_SIGNAL, c"signal");
    if p.is_null() {
        return libc::SIG_ERR;
    }
    // SAFETY: the next object's `signal` is the C library's, of this type; forwarded.
    unsafe { std::mem::transmute::<*mut c_void, Signal>(p)(signal, handler) }
}
