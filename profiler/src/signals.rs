//! The signals the profiler owns (its sampling signal, and `SIGTRAP` with `perf-sigtrap`
//! timers), and the program's own actions for them.
//!
//! A program may want one of those signals too: Go's runtime takes `SIGURG` (the default
//! sampling signal) for goroutine preemption and installs handlers for every signal at start; a
//! crash reporter takes `SIGTRAP`. If its handler replaced the profiler's, sampling would stop
//! without a word and the program would receive thousands of signals it never asked for. So
//! the profiler's handler stays in front: the action the program sets is recorded here (the
//! preload library interposes `sigaction` and `signal` and hands such calls to
//! [`program_sigaction`]), and every signal that is not from one of the profiler's timers is
//! passed to it, with the program's mask, flags and one-shot reset, as the kernel would have
//! (`pass_on_to_program`). What the program asks of the kernel that matters to both, the
//! alternate signal stack (`SA_ONSTACK`), the profiler's action takes on.
//!
//! The action that was there when the profiler installed its own is the program's first.

use std::io;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize};

/// A signal handler taking `SA_SIGINFO` arguments.
pub type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// `sigaction`'s signature.
pub type Sigaction =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;

#[cfg(target_env = "gnu")]
unsafe extern "C" {
    /// The C library's `sigaction` under its own name (glibc exports it on every architecture
    /// since 2.0): a library that interposes `sigaction`, as the preload library does, would
    /// receive the profiler's own calls to `sigaction` (and the profiler would recurse into
    /// it from a signal handler).
    fn __sigaction(
        signal: libc::c_int,
        act: *const libc::sigaction,
        old: *mut libc::sigaction,
    ) -> libc::c_int;
}

/// The C library's `sigaction`. Async-signal-safe.
#[inline(always)]
fn real_sigaction(
    signal: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    // SAFETY: the pointers are null or valid sigactions (the callers').
    #[cfg(target_env = "gnu")]
    unsafe {
        __sigaction(signal, act, old)
    }
    // musl exports no other name for it: the next object's `sigaction` after this one (the C
    // library's, when this is the preload library that interposes it), found once, at the
    // first call (installing the handler, never in one); in a static program, where there is
    // no next object, the only one.
    #[cfg(not(target_env = "gnu"))]
    {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut f = NEXT.load(Acquire);
        if f == 0 {
            // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT is valid from a library.
            f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) } as usize;
            if f == 0 {
                f = libc::sigaction as *const () as usize;
            }
            NEXT.store(f, Release);
        }
        // SAFETY: `f` is a `sigaction` with the C signature; the pointers are the callers'.
        unsafe { std::mem::transmute::<usize, Sigaction>(f)(signal, act, old) }
    }
}

/// Words of a `sigset_t` (glibc's holds 1024 bits).
const MASK_WORDS: usize = std::mem::size_of::<libc::sigset_t>() / 8;

/// One owned signal and the program's action for it.
struct Owned {
    /// The signal (0: the entry is free).
    signal: AtomicI32,
    /// The profiler's handler that passes what is not its own on ([`pass_on_to_program`]),
    /// installed once the program has an action for the signal.
    chained: AtomicUsize,
    /// The program's action: its handler (or `SIG_DFL`, `SIG_IGN`), flags and mask. The
    /// handler is stored last, and read first.
    handler: AtomicUsize,
    flags: AtomicI32,
    mask: [AtomicU64; MASK_WORDS],
}

static OWNED: [Owned; 2] = [const {
    Owned {
        signal: AtomicI32::new(0),
        chained: AtomicUsize::new(0),
        handler: AtomicUsize::new(libc::SIG_DFL),
        flags: AtomicI32::new(0),
        mask: [const { AtomicU64::new(0) }; MASK_WORDS],
    }
}; 2];

/// The entry of an owned `signal`. Async-signal-safe.
fn owned(signal: libc::c_int) -> Option<&'static Owned> {
    OWNED
        .iter()
        .find(|o| signal > 0 && o.signal.load(Acquire) == signal)
}

impl Owned {
    /// Records `act` as the program's action.
    fn set_program_action(&self, act: &libc::sigaction) {
        // SAFETY: a sigset_t is MASK_WORDS words of plain bits.
        let words: [u64; MASK_WORDS] = unsafe { std::mem::transmute_copy(&act.sa_mask) };
        for (to, from) in self.mask.iter().zip(words) {
            to.store(from, Relaxed);
        }
        self.flags.store(act.sa_flags, Relaxed);
        self.handler.store(act.sa_sigaction, Release);
    }

    /// The program's action, as `sigaction` reports one.
    fn program_action(&self) -> libc::sigaction {
        // SAFETY: a zeroed sigaction is valid; its fields are filled below.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = self.handler.load(Acquire);
        act.sa_flags = self.flags.load(Relaxed);
        let words: [u64; MASK_WORDS] = std::array::from_fn(|i| self.mask[i].load(Relaxed));
        // SAFETY: a sigset_t is MASK_WORDS words of plain bits.
        act.sa_mask = unsafe { std::mem::transmute_copy(&words) };
        act
    }

    /// Installs `handler` as the kernel's action, on the alternate stack if `onstack`.
    fn install(&self, handler: usize, onstack: bool) -> io::Result<()> {
        // SAFETY: a zeroed sigaction is valid; we fill the handler, flags and an empty mask.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = handler;
        sa.sa_flags =
            libc::SA_SIGINFO | libc::SA_RESTART | if onstack { libc::SA_ONSTACK } else { 0 };
        // SAFETY: initializes the mask in place.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        if real_sigaction(self.signal.load(Relaxed), &sa, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Whether `handler` is a function of the program's (not `SIG_DFL` or `SIG_IGN`).
fn is_handler(handler: usize) -> bool {
    handler != libc::SIG_DFL && handler != libc::SIG_IGN
}

/// Takes `signal` for the profiler: installs `handler` (the sampling path alone) and keeps the
/// action it replaces as the program's; `chained` is installed instead when the program has, or
/// later sets, a handler of its own (see the module docs). Call once per signal, before
/// sampling starts.
pub(crate) fn own(signal: libc::c_int, handler: Handler, chained: Handler) -> io::Result<()> {
    let entry = OWNED
        .iter()
        .find(|o| {
            o.signal
                .compare_exchange(0, signal, AcqRel, Relaxed)
                .is_ok()
        })
        .ok_or_else(|| io::Error::other("the profiler owns two signals at most"))?;
    // SAFETY: a zeroed sigaction is valid; sigaction fills it.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if real_sigaction(signal, std::ptr::null(), &mut old) != 0 {
        return Err(io::Error::last_os_error());
    }
    entry.chained.store(chained as usize, Relaxed);
    entry.set_program_action(&old);
    let first = if is_handler(old.sa_sigaction) {
        chained
    } else {
        handler
    };
    entry.install(first as usize, old.sa_flags & libc::SA_ONSTACK != 0)
}

/// For an interposed `sigaction`: if the profiler owns `signal`, records `act` (if not null) as
/// the program's action and writes the program's previous one into `old` (if not null), keeping
/// the profiler's handler in front, and returns `Some(0)`; `None` for any other signal (the
/// caller passes the call on to the C library).
///
/// # Safety
/// `act` and `old` are null or valid, as for `sigaction`.
pub unsafe fn program_sigaction(
    signal: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> Option<libc::c_int> {
    let entry = owned(signal)?;
    // A copy first: `act` and `old` may be the same sigaction.
    // SAFETY: the caller's contract: null or a valid sigaction.
    let act: Option<libc::sigaction> = unsafe { act.as_ref() }.copied();
    if !old.is_null() {
        // SAFETY: as above; written through the pointer, which `act` no longer borrows.
        unsafe { old.write(entry.program_action()) };
    }
    if let Some(act) = &act {
        entry.set_program_action(act);
        crate::sampler::process()
            .program_actions
            .fetch_add(1, Relaxed);
        let onstack = act.sa_flags & libc::SA_ONSTACK != 0;
        if entry.install(entry.chained.load(Relaxed), onstack).is_err() {
            return Some(-1);
        }
    }
    Some(0)
}

/// Whether `signal`'s default action is to do nothing.
fn ignored_by_default(signal: libc::c_int) -> bool {
    matches!(
        signal,
        libc::SIGURG | libc::SIGCHLD | libc::SIGWINCH | libc::SIGCONT
    )
}

/// A signal of an owned number that none of the profiler's timers sent (the program's own, a
/// `kill`, a breakpoint): what the program would have had without the profiler. Async-signal-
/// safe: `sigaction`, `raise` and `pthread_sigmask` are, and the program's handler is the
/// program's to make so.
///
/// # Safety
/// The arguments of a running handler of `signal`.
#[inline(never)]
pub(crate) unsafe fn pass_on_to_program(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    let Some(entry) = owned(signal) else { return };
    let act = entry.program_action();
    match act.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL if ignored_by_default(signal) => {}
        libc::SIG_DFL => {
            // The default action (the end of the process): restore it and send the signal
            // again; it arrives when this handler returns and unblocks the signal.
            // SAFETY: a zeroed sigaction with SIG_DFL is valid; raise is async-signal-safe.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = libc::SIG_DFL;
                real_sigaction(signal, &sa, std::ptr::null_mut());
                libc::raise(signal);
            }
        }
        handler => {
            // The program's mask while its handler runs, as the kernel would have set it.
            // SAFETY: a zeroed sigset_t is valid; pthread_sigmask reads and writes valid sets.
            let mut before: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &act.sa_mask, &mut before) };
            if act.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the program installed this SA_SIGINFO handler for this signal.
                let f: Handler = unsafe { std::mem::transmute::<usize, Handler>(handler) };
                f(signal, info, uc);
            } else {
                // SAFETY: the program installed this plain handler for this signal.
                let f: extern "C" fn(libc::c_int) =
                    unsafe { std::mem::transmute::<usize, extern "C" fn(libc::c_int)>(handler) };
                f(signal);
            }
            // SAFETY: as above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
            if act.sa_flags & libc::SA_RESETHAND as libc::c_int != 0 {
                entry.handler.store(libc::SIG_DFL, Release);
            }
        }
    }
}
