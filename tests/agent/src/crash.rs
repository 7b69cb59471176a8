//! A crash handler that writes a minidump: [`install_crash_handler`] (C:
//! `agent_install_crash_handler`).
//!
//! # Design
//!
//! The handler runs for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT (`SA_SIGINFO | SA_ONSTACK`,
//! every signal blocked while it runs: a fault inside it kills the process at once, and no
//! other handler, a profiler's SIGPROF say, runs on the crashed thread meanwhile), on an alternate stack allocated at install time for the installing thread (other
//! threads run it on their own stacks). Inside the handler everything is async-signal-safe: it
//! unwinds the crashed thread from the `ucontext` ([`unwind_in_process::unwind_signal`]) into an
//! array on the alternate stack, and copies the registers, the stack and those frames into one
//! capture slot preallocated at install time ([`unwind_in_process::Captures::capture`]: atomics
//! and copies, no allocation, lock or system call).
//!
//! Writing the file is not signal-safe (the module list, the minidump's bytes and the file are
//! allocated and written with the standard library), so the handler does not do it: a writer
//! thread started at install time waits on a pipe; the handler writes one byte to that pipe and
//! waits (`poll`, at most [`WRITER_TIMEOUT_MS`], so that a writer that cannot finish, say one
//! that waits for a lock the crashed thread holds, does not hang the process) for the writer's
//! byte on a second pipe. The writer builds the minidump from the slot (the crashed thread's
//! context, its stack copy, the modules loaded now, and our frames in
//! `unwind_samples::minidump::UNWOUND_STREAM`, as the agent's samples carry them), writes it to
//! the path given at install time, and answers. The handler then restores the signal's default
//! action and sends the signal to its own thread again (`tgkill`): it is delivered as soon as
//! the handler returns, so the process dies of the signal it crashed with, as it would have
//! without a handler.
//!
//! A second crash while the first is handled: the writer thread's own re-raises at once (the
//! waiting handler's `poll` times out); any other thread waits in `pause` until the first
//! handler's re-raised signal ends the process.

use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

use crate::MAX_FRAMES;

/// The signals the crash handler catches.
pub const CRASH_SIGNALS: [c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// How long the handler waits for the writer thread, milliseconds.
pub const WRITER_TIMEOUT_MS: c_int = 30_000;

/// Bytes of the crashed thread's stack the minidump holds (from the stack pointer's red zone up).
const CRASH_STACK_BYTES: usize = 256 * 1024;

/// Bytes of the alternate signal stack the handler runs on.
const ALT_STACK_BYTES: usize = 256 * 1024;

/// What the handler and the writer thread share, set up once at install time.
struct CrashState {
    /// One slot: the crashed thread's registers, stack copy and frames.
    captures: unwind_in_process::Captures,
    /// The handler writes a byte here to ask for the dump.
    request: c_int,
    /// The writer writes a byte here once the dump is written (or failed).
    done: c_int,
}

static STATE: OnceLock<CrashState> = OnceLock::new();
/// Set by the first crash handled.
static CRASHING: AtomicBool = AtomicBool::new(false);
/// The writer thread's id (`gettid`), 0 until it runs.
static WRITER_TID: AtomicI32 = AtomicI32::new(0);

/// Installs the crash handler (see the module's documentation): preloads the rule table and
/// registers the calling thread ([`unwind_in_process::init`]), preallocates the capture slot and
/// the alternate stack, starts the writer thread, which will write the minidump to `path`, and
/// installs the handler. Call it once, before the crash; threads that may crash must be
/// registered ([`crate::register_thread`]) for their stacks to be captured.
pub fn install_crash_handler(path: PathBuf) -> Result<(), String> {
    if STATE.get().is_some() {
        return Err("the crash handler is already installed".into());
    }
    unwind_in_process::init().map_err(|e| e.to_string())?;
    let (request_r, request_w) = pipe()?;
    let (done_r, done_w) = pipe()?;
    let state = STATE.get_or_init(|| CrashState {
        captures: unwind_in_process::Captures::new(1, 1, CRASH_STACK_BYTES, MAX_FRAMES),
        request: request_w,
        done: done_r,
    });
    std::thread::Builder::new()
        .name("agent-crash-writer".into())
        .spawn(move || writer(state, request_r, done_w, path))
        .map_err(|e| format!("starting the writer thread: {e}"))?;
    // The alternate stack: leaked, it lives as long as the process.
    let alt: &'static mut [u8] = Vec::leak(vec![0u8; ALT_STACK_BYTES]);
    let ss = libc::stack_t {
        ss_sp: alt.as_mut_ptr().cast(),
        ss_flags: 0,
        ss_size: alt.len(),
    };
    // SAFETY: `ss` describes memory that stays valid for the life of the process.
    if unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) } != 0 {
        return Err(format!("sigaltstack: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `sa` is initialised; the handler only runs async-signal-safe code (see
    // `on_crash`).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_crash as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigfillset(&mut sa.sa_mask);
        for s in CRASH_SIGNALS {
            if libc::sigaction(s, &sa, std::ptr::null_mut()) != 0 {
                return Err(format!(
                    "sigaction({s}): {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    Ok(())
}

/// A pipe `(read end, write end)`, both close-on-exec.
fn pipe() -> Result<(c_int, c_int), String> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
    }
    Ok((fds[0], fds[1]))
}

/// The writer thread: waits for the handler's byte, writes the minidump of the captured crash
/// to `path`, answers with a byte.
fn writer(state: &'static CrashState, request: c_int, done: c_int, path: PathBuf) {
    // SAFETY: gettid has no preconditions.
    WRITER_TID.store(unsafe { libc::gettid() }, Ordering::Release);
    // Signals sent to the process go to other threads (a crash of this thread's own still
    // arrives: the kernel delivers a fault's signal even when it is blocked, by killing).
    // SAFETY: `all` is initialised by sigfillset before use.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        for s in CRASH_SIGNALS {
            libc::sigdelset(&mut all, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
    let mut byte = 0u8;
    loop {
        // SAFETY: reads at most one byte into `byte`.
        let n = unsafe { libc::read(request, (&raw mut byte).cast(), 1) };
        if n == 1 {
            break;
        }
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
    match state.captures.captured().next() {
        Some(c) => {
            let modules = unwind_in_process::dump_modules();
            let system = unwind_in_process::system_info();
            match std::fs::write(&path, c.minidump(&system, &modules)) {
                Ok(()) => eprintln!(
                    "agent: crash: minidump written to {} ({} frames, stop={:?})",
                    path.display(),
                    c.pcs.len(),
                    c.stop
                ),
                Err(e) => eprintln!("agent: crash: writing {}: {e}", path.display()),
            }
        }
        None => eprintln!("agent: crash: nothing captured (thread not registered?)"),
    }
    // SAFETY: writes one byte from a local.
    unsafe { libc::write(done, (&raw const byte).cast(), 1) };
}

/// Writes `msg` to stderr (async-signal-safe: one `write`).
fn say(msg: &[u8]) {
    // SAFETY: writes `msg.len()` bytes from `msg`.
    unsafe { libc::write(libc::STDERR_FILENO, msg.as_ptr().cast(), msg.len()) };
}

/// Restores `sig`'s default action and sends it to the calling thread: it is delivered, and
/// ends the process, when the handler returns and unblocks it.
fn reraise(sig: c_int) {
    // SAFETY: sigaction with SIG_DFL, getpid, gettid and tgkill are async-signal-safe system
    // calls; `sa` is initialised.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
        libc::tgkill(libc::getpid(), libc::gettid(), sig);
    }
}

/// The crash handler (see the module's documentation). Async-signal-safe: an unwind into a
/// local array, a copy into the preallocated slot, and `write`, `poll`, `read`, `sigaction`,
/// `tgkill` and `pause`.
extern "C" fn on_crash(sig: c_int, _info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let Some(state) = STATE.get() else {
        reraise(sig);
        return;
    };
    if CRASHING.swap(true, Ordering::AcqRel) {
        // SAFETY: gettid has no preconditions.
        if unsafe { libc::gettid() } == WRITER_TID.load(Ordering::Acquire) {
            say(b"agent: crash: the minidump writer crashed\n");
            reraise(sig);
            return;
        }
        // Another thread is writing its dump; it ends the process when done.
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    }
    let mut pcs = [0u64; MAX_FRAMES];
    // SAFETY: `uc` is the context the kernel passed to this handler, on the crashed thread.
    let walk = unsafe { unwind_in_process::unwind_signal(uc, &mut pcs, None) };
    let captured = match walk {
        Ok(r) => {
            let pcs = pcs.get(..r.frames).unwrap_or(&[]);
            // SAFETY: as above.
            unsafe { state.captures.capture(uc, pcs, r.stop) }
        }
        Err(_) => false,
    };
    if !captured {
        say(b"agent: crash: not captured (thread not registered?), no minidump\n");
        reraise(sig);
        return;
    }
    let byte = 1u8;
    // SAFETY: writes one byte from a local to the request pipe.
    if unsafe { libc::write(state.request, (&raw const byte).cast(), 1) } == 1 {
        let mut p = libc::pollfd {
            fd: state.done,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `p` is one valid pollfd; the read takes at most one byte into a local.
        unsafe {
            let mut ready = libc::poll(&mut p, 1, WRITER_TIMEOUT_MS);
            while ready < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                ready = libc::poll(&mut p, 1, WRITER_TIMEOUT_MS);
            }
            if ready == 1 {
                let mut answer = 0u8;
                libc::read(state.done, (&raw mut answer).cast(), 1);
            } else {
                say(b"agent: crash: the minidump writer did not answer in time\n");
            }
        }
    }
    reraise(sig);
}

/// C: installs the crash handler, which writes a minidump of the crash to `path` (see
/// [`install_crash_handler`]); returns 0 on success.
///
/// # Safety
/// `path` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn agent_install_crash_handler(path: *const c_char) -> c_int {
    if path.is_null() {
        eprintln!("agent_install_crash_handler: no path");
        return -1;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let path = unsafe { CStr::from_ptr(path) }
        .to_string_lossy()
        .into_owned();
    match install_crash_handler(PathBuf::from(path)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agent_install_crash_handler: {e}");
            -1
        }
    }
}
