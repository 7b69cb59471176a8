//! The profiler as a preloadable shared object: `LD_PRELOAD=libunwind_profiler_preload.so
//! PROGRAM` profiles `PROGRAM` from before its `main` to its exit and writes the outputs to
//! `UNWIND_PROFILER_OUTPUT` (default `./unwind-profile`). Every setting is an environment
//! variable (see `unwind_profiler::config::OPTIONS`; `unwind-profiler record --help` lists them).
//!
//! - **Start**: a constructor in `.init_array`, run by the dynamic loader before `main`, starts
//!   the profiler on the main thread.
//! - **Threads**: this library defines `pthread_create`, so that every thread the program
//!   starts (C, C++ `std::thread`, Rust `std::thread`, thread pools) is sampled from its first
//!   instruction; the call goes on to the C library's `pthread_create`.
//! - **Exit**: an `atexit` handler writes the outputs, whichever thread calls `exit` (returning
//!   from `main` included). A process that ends with `_exit` or a fatal signal writes nothing.
//! - **Under `record`** (`UNWIND_PROFILER_SESSION` names its socket): the process joins the
//!   session ([`unwind_profiler::session`]): its rings and counters are in memory shared with
//!   `record`, which collects and writes one profile of every process, however they end. No
//!   collector thread is started and nothing runs at exit; the tables are rebuilt after a
//!   `dlopen` or `dlclose` (this library interposes both) that changed the loaded modules, and
//!   after an `mmap` or `mprotect` (interposed too, see `mmap.rs`) that made memory executable
//!   outside every module the table knows: code a JIT compiler generated, or node's second
//!   mapping of its builtins.
//!   The interposed `dlopen` keeps its caller's search path: a bare file name is still looked
//!   up along the calling object's DT_RPATH or DT_RUNPATH, and `$ORIGIN` is still the calling
//!   object's directory, as if the C library had been called directly (see `dlopen.rs`).
//!   If the socket cannot be reached (a program that left the session's network namespace),
//!   the process is profiled on its own as below.
//! - **Signals**: `sigaction` and `signal` are interposed, so that a program that sets its own
//!   action for the sampling signal keeps the profiler's handler in front of it and receives its
//!   own signals, not the profiler's (see `signals.rs`).
//! - **Snapshots**: with `UNWIND_PROFILER_SNAPSHOT_SIGNAL`, that signal writes the profile so
//!   far while the program runs on.
//! - **Processes**: under `record`, a `fork`ed child joins the session from the `fork` child
//!   handler (its own connection, records and timer: [`unwind_profiler::session::join_after_fork`])
//!   and a program it `exec`s joins it too (the environment carries `LD_PRELOAD`): one profile.
//!   Used alone, a `fork`ed child is not profiled (timers are not inherited, the collector
//!   thread does not exist there, and nothing runs at its exit); a program it `exec`s is,
//!   writing `STEM-COMM-PID.*` beside the first process's outputs.
//!
//! - **Allocations**: the build with the `alloc-hooks` feature
//!   (`libunwind_profiler_preload_alloc.so`, crate `unwind-profiler-preload-alloc`) also
//!   interposes the allocator's entry points (see `malloc.rs`) and samples allocations when
//!   `UNWIND_PROFILER_ALLOC` asks; the build without them says so and profiles CPU time only.
//!
//! Nothing here may change what the program does: a setting that cannot be read or a profiler
//! that cannot start prints one line on stderr and the program runs unprofiled.
#![cfg_attr(test, allow(dead_code))]

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Mutex;

use unwind_profiler::{Config, Profiler};

mod dlopen;
mod huge_pages;
#[cfg(feature = "alloc-hooks")]
mod malloc;
mod mmap;
mod signals;

/// Large blocks (the rule tables of large modules) in 2 MiB pages: see [`huge_pages`].
#[global_allocator]
static ALLOCATOR: huge_pages::LargeInHugePages = huge_pages::LargeInHugePages;

/// The running profiler, taken by the exit handler.
static PROFILER: Mutex<Option<Profiler>> = Mutex::new(None);
/// The process that started the profiler (a forked child is another).
static PID: AtomicU32 = AtomicU32::new(0);
/// The C library's `pthread_create`.
static REAL_PTHREAD_CREATE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Marks the first profiled process of a run, so that the processes it starts name their
/// outputs apart.
const ROOT_PID: &str = "UNWIND_PROFILER_ROOT_PID";

// Not in a test harness (`cargo test --all-targets` builds one from this library): it would
// profile itself into `./unwind-profile`, the source directory. The library is tested as users
// load it, by profiler/tests; in the harness, what the constructor reaches is unused.
#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = start;

extern "C" fn start() {
    unwind_profiler::sampler::mark_preloaded();
    dlopen::remember_library_path();
    let mut config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("unwind-profiler: {e}; not profiling");
            return;
        }
    };
    // Allocations reach the profiler only through the hooks of the build that has them.
    if config.alloc_interval.is_some() && !cfg!(feature = "alloc-hooks") {
        eprintln!(
            "unwind-profiler: allocations are sampled by libunwind_profiler_preload_alloc.so, \
             not this library: profiling CPU time only"
        );
        config.alloc_interval = None;
        // Allocations alone, asked of the wrong library: CPU time rather than nothing.
        config.sample_cpu = true;
    }
    // Captured samples are written at exit by the process itself: such a process is profiled
    // on its own.
    if let Some(name) = std::env::var(unwind_profiler::session::SESSION_VAR)
        .ok()
        .filter(|n| !n.is_empty() && config.capture_samples == 0)
    {
        match unwind_profiler::session::start(&config, &name) {
            Ok(()) => {
                install_handlers(config.snapshot_signal, false);
                return;
            }
            // Not connected: nothing was set up; profile this process on its own.
            Err(e @ unwind_profiler::StartError::Session(_)) => {
                eprintln!("unwind-profiler: {e}; profiling this process on its own")
            }
            Err(e) => {
                eprintln!("unwind-profiler: {e}; not profiling");
                return;
            }
        }
    }
    let pid = std::process::id();
    match std::env::var(ROOT_PID) {
        Ok(root) if root != pid.to_string() => {
            let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
            config.stem = format!("{}-{}-{pid}", config.stem, comm.trim());
        }
        Ok(_) => {}
        // SAFETY: constructors run before `main`, while the process has a single thread, so
        // no other thread reads the environment concurrently.
        Err(_) => unsafe { std::env::set_var(ROOT_PID, pid.to_string()) },
    }
    let snapshot = config.snapshot_signal;
    let profiler = match Profiler::start(config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("unwind-profiler: {e}; not profiling");
            return;
        }
    };
    if let Some(addr) = profiler
        .pprof_address()
        .filter(|_| !profiler.config().quiet)
    {
        eprintln!(
            "unwind-profiler: serving http://{addr}{}?seconds=N",
            unwind_profiler::pull::PROFILE_PATH
        );
    }
    PID.store(pid, Ordering::Relaxed);
    *PROFILER.lock().unwrap_or_else(|e| e.into_inner()) = Some(profiler);
    install_handlers(snapshot, true);
}

/// Registers the fork handler, the snapshot signal's handler if asked for, and the exit handler
/// if `with_exit` (a process profiled on its own writes its outputs there).
fn install_handlers(snapshot: Option<libc::c_int>, with_exit: bool) {
    // SAFETY: registers handlers with the right signatures; a zeroed sigaction with an empty
    // mask is valid.
    unsafe {
        libc::pthread_atfork(None, None, Some(in_child));
        if with_exit {
            libc::atexit(at_exit);
        }
        if let Some(sig) = snapshot {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_snapshot_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

extern "C" fn on_snapshot_signal(_: libc::c_int) {
    unwind_profiler::request_snapshot();
}

extern "C" fn in_child() {
    unwind_profiler::sampler::disable_in_child();
    unwind_profiler::session::join_after_fork();
}

extern "C" fn at_exit() {
    if PID.load(Ordering::Relaxed) != std::process::id() {
        return;
    }
    let Some(profiler) = PROFILER.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    // Under `record`, which names the files itself at the end, a process prints its own line
    // only when asked (`--verbose`); used alone, the library's line is all the user sees.
    let under_record = std::env::var_os("UNWIND_PROFILER_RECORD").is_some();
    let quiet = profiler.config().quiet || (under_record && !profiler.config().verbose);
    let dir = profiler
        .config()
        .output
        .clone()
        .unwrap_or_else(|| ".".into());
    let stem = profiler.config().stem.clone();
    let mode = profiler.config().output_mode;
    // Settings that cannot be honoured stopped the start (`StartError::Export`).
    let export = unwind_profiler::export::Export::configured(profiler.config(), |name| {
        std::env::var(name).ok()
    })
    .ok()
    .flatten();
    let profile = profiler.stop();
    for warning in unwind_profiler::output::summary::warnings(&profile) {
        if !quiet {
            eprintln!("unwind-profiler: warning: {warning}");
        }
    }
    // Continuous: the periods were written and exported as they were cut; the summary is of
    // the run's counters and the last period.
    if let Some(periods) = &profile.counters.periods {
        if let Some(e) = periods.export.as_ref() {
            let lost = e.dropped + e.refused + e.undelivered;
            if lost > 0 || !quiet {
                eprintln!(
                    "unwind-profiler: {} of {} periods exported ({} bytes of OTLP, {} tries retried, {lost} not exported)",
                    e.delivered, periods.cut, e.bytes, e.retries
                );
            }
        }
        match unwind_profiler::output::summary::write_file(&profile, &dir, &stem, mode) {
            Ok(summary) if !quiet => eprintln!(
                "unwind-profiler: {} periods in {}; summary in {}",
                periods.cut,
                periods.directory,
                summary.display()
            ),
            Ok(_) => {}
            Err(e) => eprintln!("unwind-profiler: {e}"),
        }
        return;
    }
    match unwind_profiler::output::write_all_with_mode(&profile, &dir, &stem, mode) {
        Ok(out) => {
            if !quiet {
                eprintln!(
                    "unwind-profiler: {} samples of {} threads; summary in {}",
                    profile.samples.len(),
                    profile.threads.len(),
                    out.summary.display()
                );
            }
        }
        Err(e) => eprintln!("unwind-profiler: {e}"),
    }
    if let Some(export) = export {
        match export.send(&profile) {
            Ok(bytes) if !quiet => eprintln!(
                "unwind-profiler: profile exported to {} ({bytes} bytes of OTLP)",
                export.url
            ),
            Ok(_) => {}
            Err(e) => eprintln!(
                "unwind-profiler: warning: the profile was not exported to {}: {e}",
                export.url
            ),
        }
    }
    let sequence = dir.join(format!("{stem}.sequence"));
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    match unwind_profiler::sampler::write_sequence(&sequence, comm.trim()) {
        Ok(Some(n)) if !quiet => {
            eprintln!(
                "unwind-profiler: {n} samples captured in {}",
                sequence.display()
            )
        }
        Ok(_) => {}
        Err(e) => eprintln!("unwind-profiler: {}: {e}", sequence.display()),
    }
}

/// The C library's `pthread_create`, found once with `dlsym(RTLD_NEXT)`.
fn real_pthread_create() -> Option<unwind_profiler::threads::PthreadCreate> {
    let mut p = REAL_PTHREAD_CREATE.load(Ordering::Acquire);
    if p.is_null() {
        // SAFETY: dlsym with a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) };
        REAL_PTHREAD_CREATE.store(p, Ordering::Release);
    }
    // SAFETY: the symbol `pthread_create` of the next object is the C library's function, of
    // this type.
    (!p.is_null()).then(|| unsafe {
        std::mem::transmute::<*mut c_void, unwind_profiler::threads::PthreadCreate>(p)
    })
}

/// Interposes the C library's `pthread_create` so that new threads are sampled (see the crate
/// docs).
///
/// # Safety
/// The contract of `pthread_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> libc::c_int {
    match real_pthread_create() {
        // SAFETY: forwarded, with the C library's function.
        Some(real) => unsafe { unwind_profiler::threads::create(real, thread, attr, routine, arg) },
        None => libc::EAGAIN,
    }
}

/// `dlclose`'s signature.
type Dlclose = unsafe extern "C" fn(*mut c_void) -> libc::c_int;

static REAL_DLCLOSE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The next object's definition of `name`, found once with `dlsym(RTLD_NEXT)`.
fn next_symbol(cache: &AtomicPtr<c_void>, name: &std::ffi::CStr) -> *mut c_void {
    let mut p = cache.load(Ordering::Acquire);
    if p.is_null() {
        // SAFETY: dlsym with a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        cache.store(p, Ordering::Release);
    }
    p
}

/// Interposes the C library's `dlclose`: under `record`, an unload marks the tables as keeping
/// modules that may be gone, for the next load or code mapping to rebuild
/// ([`unwind_profiler::session::modules_unloaded`]).
///
/// # Safety
/// The contract of `dlclose`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> libc::c_int {
    let Some(real) = real_dlclose() else {
        return -1;
    };
    // SAFETY: forwarded.
    let rc = unsafe { real(handle) };
    unwind_profiler::session::modules_unloaded();
    rc
}

/// The C library's `dlclose`.
fn real_dlclose() -> Option<Dlclose> {
    let p = next_symbol(&REAL_DLCLOSE, c"dlclose");
    // SAFETY: the next object's `dlclose` is the C library's, of this type.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, Dlclose>(p) })
}
