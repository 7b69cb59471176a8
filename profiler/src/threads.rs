//! Which threads are sampled: every thread started through `pthread_create` (the preload
//! library interposes it and calls [`create`]), the thread that starts the profiler, and any
//! thread that calls [`sample_this_thread`]; never the profiler's own threads.
//!
//! A sampled thread's timer is deleted, and its record handed back, by a `pthread_key`
//! destructor when it exits (by returning or by `pthread_exit`).

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::OnceLock;

use crate::sampler;

/// `pthread_create`'s signature.
pub type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C" fn(*mut c_void) -> *mut c_void,
    *mut c_void,
) -> libc::c_int;

thread_local! {
    /// Set while this thread spawns one of the profiler's own threads.
    static SPAWNING_UNSAMPLED: Cell<bool> = const { Cell::new(false) };
}

/// Spawns one of the profiler's own threads, which is not sampled, with every signal blocked
/// (it inherits the mask it is spawned with): a signal sent to the process is the program's,
/// and the kernel gives it to a thread that does not block it. Were ours such a thread, a
/// program that blocks a signal in all its threads to `sigwait` for it would have it taken
/// (and its default action, often the end of the process, run) by ours, and a program's
/// handler would run on our thread.
pub fn spawn_unsampled(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    SPAWNING_UNSAMPLED.with(|s| s.set(true));
    // SAFETY: plain C structures filled by libc; the calling thread's mask is restored below.
    let before = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        before
    };
    let t = std::thread::Builder::new().name(name.into()).spawn(|| {
        crate::alloc_sampling::this_thread_is_ours();
        f()
    });
    // SAFETY: restores the mask read above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
    SPAWNING_UNSAMPLED.with(|s| s.set(false));
    t
}

/// The key whose destructor ends a sampled thread's sampling.
fn exit_key() -> Option<libc::pthread_key_t> {
    static KEY: OnceLock<Option<libc::pthread_key_t>> = OnceLock::new();
    *KEY.get_or_init(|| {
        extern "C" fn on_exit(v: *mut c_void) {
            sampler::thread_exiting((v as usize).wrapping_sub(1));
        }
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: creates a key with a valid destructor.
        (unsafe { libc::pthread_key_create(&mut key, Some(on_exit)) } == 0).then_some(key)
    })
}

/// Starts sampling the calling thread, and stops it when the thread exits. Does nothing if the
/// profiler is not running.
pub fn sample_this_thread() {
    start_here();
}

/// Starts sampling the calling thread, unless it is sampled already (then `None`), and
/// registers the end of its sampling at its exit; the index of the record it took.
fn start_here() -> Option<usize> {
    let key = exit_key()?;
    // SAFETY: a valid key; reads this thread's value.
    if !unsafe { libc::pthread_getspecific(key) }.is_null() {
        return None;
    }
    let index = sampler::start_thread()?;
    // SAFETY: a valid key; the value is the record index plus one (never null).
    unsafe { libc::pthread_setspecific(key, (index + 1) as *const c_void) };
    Some(index)
}

/// Sampling of the calling thread for as long as this value lives (a thread the profiler did
/// not start: under the preload library, `pthread_create`'s threads are sampled from their
/// start without it). Dropping it stops the thread's sampling; making one again starts it
/// again, in the same record. Does nothing if the thread is sampled already, or the profiler
/// is not running.
#[must_use = "the thread is sampled only while the value lives"]
pub struct SampledThread {
    index: Option<usize>,
    /// Belongs to the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl SampledThread {
    /// Starts sampling the calling thread until the value is dropped.
    pub fn start() -> SampledThread {
        SampledThread {
            index: start_here(),
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for SampledThread {
    fn drop(&mut self) {
        let Some(index) = self.index else { return };
        if let Some(key) = exit_key() {
            // SAFETY: a valid key; the thread's exit then has nothing more to end.
            unsafe { libc::pthread_setspecific(key, std::ptr::null()) };
        }
        sampler::thread_exiting(index);
    }
}

/// What the trampoline needs to run the program's start routine.
struct Start {
    routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
}

/// Where the trampoline's code is: every thread it starts has its frame between `start_thread`
/// and the program's start routine, which profiles leave out (it is the profiler's, not the
/// program's).
pub(crate) fn trampoline_address() -> u64 {
    trampoline as extern "C" fn(*mut c_void) -> *mut c_void as usize as u64
}

extern "C" fn trampoline(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the Box made in `create` for this thread, passed to it alone.
    let start = unsafe { Box::from_raw(p as *mut Start) };
    sample_this_thread();
    (start.routine)(start.arg)
}

/// `pthread_create` for the preload library's interposer: creates the thread with `real`, the
/// C library's `pthread_create`, and samples it from its first instruction of the program's
/// code on, unless the profiler is not running or the thread is one of its own.
///
/// # Safety
/// The arguments are those of `pthread_create`, and `real` is the C library's.
pub unsafe fn create(
    real: PthreadCreate,
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> libc::c_int {
    let start = sampler::profiler_work(sampler::Work::ThreadStart, || {
        let ours = SPAWNING_UNSAMPLED.try_with(|s| s.get()).unwrap_or(true);
        (!ours && sampler::running()).then(|| Box::into_raw(Box::new(Start { routine, arg })))
    });
    let Some(start) = start else {
        // SAFETY: forwarded.
        return unsafe { real(thread, attr, routine, arg) };
    };
    // SAFETY: forwarded, with our trampoline and its argument instead of the program's.
    let rc = unsafe { real(thread, attr, trampoline, start.cast()) };
    if rc != 0 {
        // SAFETY: the thread was not created, so the Box is still ours.
        drop(unsafe { Box::from_raw(start) });
    }
    rc
}
