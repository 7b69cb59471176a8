//! In-process stack unwinding for sampling profilers on Linux.
//!
//! At startup, [`init`] preloads the DWARF CFI of every loaded module (the vdso included) into an
//! immutable rule table. Each thread to be sampled calls [`register_thread`] (outside any signal
//! handler). Then, from a `SIGPROF` handler, [`unwind_signal`] walks the interrupted thread's
//! stack into a caller-supplied array without allocating, locking or making system calls:
//!
//! ```no_run
//! extern "C" fn on_sigprof(_sig: i32, _info: *mut libc::siginfo_t, ucontext: *mut libc::c_void) {
//!     let mut pcs = [0u64; 128];
//!     // SAFETY: `ucontext` is the context the kernel passed to this handler.
//!     if let Ok(r) = unsafe { unwind_in_process::unwind_signal(ucontext, &mut pcs, None) } {
//!         let _stack = &pcs[..r.frames];
//!         // ... store it in a preallocated ring buffer ...
//!     }
//! }
//! ```
//!
//! The same walk from ordinary code, with the frames named (symbolization reads files and
//! allocates: do it after sampling, never in the handler):
//!
//! ```
//! let report = unwind_in_process::init().expect("preload");
//! assert!(report.rows() > 0);
//! unwind_in_process::register_thread().expect("register");
//! let mut pcs = [0u64; 64];
//! let r = unwind_in_process::unwind_here(&mut pcs, None).expect("unwind");
//! assert!(r.frames >= 2, "{r:?}");
//! let symbols = unwind_in_process::symbolizer();
//! for name in symbols.stack(&pcs[..r.frames]) {
//!     println!("{name}");
//! }
//! ```
//!
//! After `dlopen` or `dlclose`, call [`refresh`]: it builds a new table off the signal path
//! (reusing modules already parsed), publishes it with one atomic store, and frees old tables
//! once no handler can be reading them (each registered thread publishes the table it reads in a
//! hazard pointer). Every thread's rule cache notices the new generation by itself.
//!
//! The default feature `minidump` adds samples written as minidumps (`Captured::minidump`,
//! `Captures::write_minidumps`, `dump_modules`, `system_info`) for Breakpad-compatible walkers;
//! a profiler that needs only the in-process path leaves it out (`default-features = false`)
//! and builds about a dozen fewer crates.

#![warn(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!("unwind-in-process supports Linux");

mod arch;
mod capture;
mod captures;
mod exported;
mod gdb_jit;
mod go;
pub use go::GoRuntime;
mod huge_pages;
pub use huge_pages::map_huge;
pub use mappings::SIGRETURN;
mod jitdump;
mod mappings;
mod modules;
mod publish;
mod report;
mod system;
mod threads;

use std::cell::UnsafeCell;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

pub use arch::Regs;
pub use capture::{capture_here, capture_signal, regs_from_ucontext, CapturedStack, RED_ZONE};
pub use captures::{Captured, Captures, Samples, StoredSample};
pub use modules::{LoadedModule, ModuleKind};
pub use report::{preload_file, ModuleReport, PreloadReport};
pub use system::symbolizer;
#[cfg(feature = "minidump")]
pub use system::{dump_modules, system_info};
pub use threads::CacheCounts;
pub use unwind_core::{StopReason, Trust, UnwindResult};

use arch::{Native, RuntimeArch};
pub(crate) use publish::Published;
use publish::{with_table, Quarantine};
use unwind_core::{Arch as _, LiveStack, RuleTableBuilder, StackImage};

#[cfg(feature = "poison-freed-tables")]
#[doc(hidden)]
pub use publish::ignore_hazards as testing_ignore_hazards;

/// Why a sample could not be unwound at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleError {
    /// [`init`] has not published a table yet.
    NotInitialized,
    /// The current thread did not call [`register_thread`].
    ThreadNotRegistered,
    /// The current thread is already unwinding (a signal interrupted an unwind).
    Busy,
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SampleError::NotInitialized => "no rule table: call unwind_in_process::init() first",
            SampleError::ThreadNotRegistered => "this thread is not registered",
            SampleError::Busy => "this thread is already unwinding",
        })
    }
}

impl std::error::Error for SampleError {}

/// Why a table could not be built or a thread registered.
#[derive(Debug)]
pub enum Error {
    /// The modules' rules could not be assembled.
    Table(unwind_core::table::TableError),
    /// A system call failed.
    Io(std::io::Error),
    /// More than `u32::MAX` tables were built.
    GenerationsExhausted,
    /// Called from a signal handler that interrupted a refresh on the same thread.
    Reentrant,
    /// [`refresh_unless_busy`]: another refresh was in progress.
    Busy,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Table(e) => write!(f, "cannot build the rule table: {e}"),
            Error::Io(e) => write!(f, "{e}"),
            Error::GenerationsExhausted => f.write_str("table generations exhausted"),
            Error::Reentrant => f.write_str(
                "called from a signal handler that interrupted a refresh on this thread",
            ),
            Error::Busy => f.write_str("another refresh was in progress"),
        }
    }
}

impl std::error::Error for Error {}

/// Everything the (rare, non-signal) refresh path owns.
struct State {
    generation: u32,
    /// Whether tables scan the stack ([`set_stack_scanning`]).
    scan: bool,
    cache: modules::ModuleCache,
    modules: Vec<LoadedModule>,
    /// The executable mappings the loader does not list, as last read from `/proc/self/maps`,
    /// and when (see [`refresh_after_load`]).
    unlisted: Vec<modules::ParsedModule>,
    maps_read: Option<Instant>,
    /// Replaced tables not yet freed because a hazard pointer may still name them.
    retired: Vec<*mut Published>,
    quarantine: Quarantine,
}

/// The refresh path's lock and the state it guards. Not std's `Mutex`: the holder must be part
/// of the lock word itself, so that `fork()` from a signal handler that interrupted this thread's
/// own refresh can tell, and not wait for itself (see [`before_fork`]).
struct StateLock {
    /// The thread pointer of the holder, 0 when free.
    holder: AtomicUsize,
    state: UnsafeCell<State>,
}

// SAFETY: `state` is touched only through a `StateGuard`, which exists only while `holder`
// names its thread (acquired with Acquire, released with Release).
unsafe impl Sync for StateLock {}

static STATE: StateLock = StateLock {
    holder: AtomicUsize::new(0),
    state: UnsafeCell::new(State {
        generation: 0,
        scan: false,
        cache: modules::ModuleCache::new(),
        modules: Vec::new(),
        unlisted: Vec::new(),
        maps_read: None,
        retired: Vec::new(),
        quarantine: Quarantine::new(),
    }),
};

/// STATE, locked by the calling thread; released on drop.
struct StateGuard(());

impl std::ops::Deref for StateGuard {
    type Target = State;
    fn deref(&self) -> &State {
        // SAFETY: this guard's thread holds the lock (see `StateLock`).
        unsafe { &*STATE.state.get() }
    }
}

impl std::ops::DerefMut for StateGuard {
    fn deref_mut(&mut self) -> &mut State {
        // SAFETY: as in `deref`; the guard is not shared.
        unsafe { &mut *STATE.state.get() }
    }
}

impl Drop for StateGuard {
    fn drop(&mut self) {
        STATE.holder.store(0, Ordering::Release);
    }
}

/// Locks STATE for the calling thread, waiting for another holder (refreshes are rare, so a
/// polling wait costs nothing measurable); `None` if this thread holds it already (a call from
/// a signal handler that interrupted a refresh).
fn lock_state() -> Option<StateGuard> {
    register_fork_handlers();
    let me = arch::thread_pointer();
    let mut spins = 0u32;
    loop {
        match STATE
            .holder
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => return Some(StateGuard(())),
            Err(h) if h == me => return None,
            Err(_) => {
                spins = spins.saturating_add(1);
                if spins < 64 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            }
        }
    }
}

/// STATE if no thread holds it ([`Error::Busy`] if another does, [`Error::Reentrant`] if this
/// one does).
fn try_lock_state() -> Result<StateGuard, Error> {
    register_fork_handlers();
    let me = arch::thread_pointer();
    match STATE
        .holder
        .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
    {
        Ok(_) => Ok(StateGuard(())),
        Err(h) if h == me => Err(Error::Reentrant),
        Err(_) => Err(Error::Busy),
    }
}

/// Registers [`before_fork`], [`after_fork`] and [`in_child`], once, before STATE is first
/// taken.
fn register_fork_handlers() {
    static AT_FORK: Once = Once::new();
    AT_FORK.call_once(|| {
        // SAFETY: registers three `extern "C" fn()` handlers that live as long as this library
        // (glibc unregisters them if the library is unloaded).
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(in_child)) };
    });
}

/// STATE held across `fork()` by the forking thread, from [`before_fork`] to [`after_fork`] or
/// [`in_child`].
struct ForkHold(UnsafeCell<Option<StateGuard>>);

// SAFETY: only the forking thread touches it, between the fork handlers, which glibc runs on
// that thread one after another.
unsafe impl Sync for ForkHold {}

static FORK_HOLD: ForkHold = ForkHold(UnsafeCell::new(None));

/// `pthread_atfork` prepare handler: waits for a refresh in progress on another thread to finish
/// and holds STATE, so that the child gets it free and consistent. If this thread holds it (a
/// `fork()` from a signal handler that interrupted this thread's refresh), it does not wait for
/// itself: the interrupted refresh finishes, in both processes, when the handler returns. (glibc's
/// own prepare handlers can still deadlock there if the signal interrupted `malloc`: POSIX.1-2024
/// no longer lists `fork` as async-signal-safe; `_Fork` runs no handlers.)
extern "C" fn before_fork() {
    let guard = lock_state();
    // SAFETY: see `ForkHold`.
    unsafe { *FORK_HOLD.0.get() = guard };
}

/// `pthread_atfork` parent handler: releases STATE.
extern "C" fn after_fork() {
    // SAFETY: see `ForkHold`.
    drop(unsafe { (*FORK_HOLD.0.get()).take() });
}

/// `pthread_atfork` child handler: frees the thread slots and hazards of the parent's other
/// threads (gone in the child) and releases STATE, so that the child can register, refresh and
/// reclaim tables those threads pinned.
extern "C" fn in_child() {
    threads::after_fork_in_child();
    // SAFETY: see `ForkHold`.
    drop(unsafe { (*FORK_HOLD.0.get()).take() });
}

/// Preloads the rules of every loaded module and publishes them; registers the calling thread.
/// Calling it again is the same as [`refresh`].
pub fn init() -> Result<PreloadReport, Error> {
    let report = refresh()?;
    register_thread()?;
    Ok(report)
}

/// Rebuilds the table from the modules loaded now (after `dlopen`/`dlclose`) and the executable
/// memory the program mapped itself (see [`ModuleKind`]), reusing modules already parsed,
/// publishes it, and frees replaced tables that no unwind is reading.
pub fn refresh() -> Result<PreloadReport, Error> {
    let state = lock_state().ok_or(Error::Reentrant)?;
    refresh_locked(state, false)
}

/// How long [`refresh_after_load`] takes the program's own executable mappings from the last
/// read of `/proc/self/maps`.
pub const MAPS_REREAD_AFTER: Duration = Duration::from_millis(100);

/// [`refresh`] after the program's `dlopen` or `dlclose` (or anything else that changes only
/// the modules the dynamic loader lists): the executable memory the program mapped itself is
/// taken from the last read of `/proc/self/maps` if that was less than [`MAPS_REREAD_AFTER`]
/// ago, less what a loaded module now covers. Reading `/proc/self/maps` is most of a refresh's
/// cost for a program that loads and unloads libraries in a loop; code the program maps itself
/// meanwhile is found by the next read (or by a [`refresh`], which always reads).
pub fn refresh_after_load() -> Result<PreloadReport, Error> {
    let state = lock_state().ok_or(Error::Reentrant)?;
    refresh_locked(state, true)
}

/// [`refresh`], or [`Error::Busy`] at once if another refresh is in progress. For callers that
/// may hold the dynamic loader's lock (an interposed `mmap` called from a library's
/// constructor): a refresh in progress on another thread waits for that lock, so waiting for
/// it could wait forever.
pub fn refresh_unless_busy() -> Result<PreloadReport, Error> {
    refresh_locked(try_lock_state()?, false)
}

/// Whether the published table's modules cover `[start, end)` (the code a walk knows): `None`
/// if a refresh is in progress (for the callers of [`refresh_unless_busy`], which must not
/// wait for it).
pub fn covers_code(start: u64, end: u64) -> Option<bool> {
    let state = try_lock_state().ok()?;
    Some(
        state
            .modules
            .iter()
            .any(|m| m.start <= start && end <= m.end),
    )
}

fn refresh_locked(mut state: StateGuard, after_load: bool) -> Result<PreloadReport, Error> {
    let started = Instant::now();
    let recent = state
        .maps_read
        .is_some_and(|t| started.saturating_duration_since(t) < MAPS_REREAD_AFTER);
    let earlier = (after_load && recent).then_some(state.unlisted.as_slice());
    let discovered = modules::discover(&state.cache, state.scan, earlier);
    let parsed = &discovered.modules;
    let generation = state
        .generation
        .checked_add(1)
        .and_then(NonZeroU32::new)
        .ok_or(Error::GenerationsExhausted)?;
    let mut builder = RuleTableBuilder::new(generation);
    builder.scan_stack(state.scan);
    // Modules whose code overlaps another's are left out (and reported).
    for p in parsed.iter().filter(|p| p.overlaps.is_none()) {
        builder
            .add(
                p.module.start,
                p.module.end,
                p.module.bias,
                p.module.name.clone(),
                p.parsed.rules.clone(),
            )
            .return_sites = p.parsed.return_sites.clone();
    }
    let old = publish::publish(builder.build().map_err(Error::Table)?);
    let state = &mut *state;
    if !old.is_null() {
        state.retired.push(old);
    }
    publish::reclaim(&mut state.retired, &mut state.quarantine);
    state.generation = generation.get();
    if discovered.maps_read {
        state.unlisted = parsed[discovered.unlisted_from..].to_vec();
        state.maps_read = Some(started);
    }
    state.cache = modules::cache_of(parsed, &mut state.cache);
    state.modules = parsed
        .iter()
        .filter(|p| p.overlaps.is_none())
        .map(|p| p.module.clone())
        .collect();
    go::detect(&state.modules);
    Ok(PreloadReport::new(
        generation.get(),
        parsed,
        started.elapsed(),
        discovered.loader_lock,
    ))
}

/// Whether a JIT compiler registered or removed code through the GDB JIT interface
/// (`__jit_debug_descriptor`) since the last call: a few reads of its descriptors' state, cheap
/// enough for a hook that runs often (an interposed `mprotect`) or a periodic check. A
/// [`refresh`] then reads the code's rules from the symbol files the JIT lists (their CFI, at
/// the code's addresses), as it does at every refresh.
pub fn jit_code_changed() -> bool {
    gdb_jit::changed()
}

/// Whether the process has a GDB JIT interface (a `__jit_debug_descriptor`, exported or in the
/// executable's symbol table): a JIT compiler that may register code, whose registrations a
/// profiler without a hook on them looks for with [`jit_code_changed`].
pub fn jit_interface_present() -> bool {
    gdb_jit::present()
}

/// A function a JIT compiler named through the GDB JIT interface: `[start, end)` and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitFunction {
    /// Its first byte's address.
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
    /// Its name as the JIT gave it (ART: `boolean Main.bar(boolean)`; LLVM: the IR name).
    pub name: String,
}

/// The functions the symbol files of the process's JIT compilers (GDB JIT interface) named at
/// the last [`init`] or [`refresh`], sorted by start: the names of code that no module file
/// holds, for a profiler's report.
pub fn jit_functions() -> Vec<JitFunction> {
    gdb_jit::functions()
        .into_iter()
        .map(|f| JitFunction {
            start: f.start,
            end: f.end,
            name: f.name,
        })
        .collect()
}

/// Turns stack scanning on or off for the tables built from now on (by the next [`init`] or
/// [`refresh`]); off unless turned on.
///
/// When a frame has no unwind rule and the architecture's fallbacks (a leaf's link register,
/// the frame-pointer chain) find no caller, a scanning walk looks at the next stack words (30,
/// or 120 above the interrupted frame) for one that is the address just after a call
/// instruction in a module's code, as Breakpad's walkers do, and marks that frame
/// [`Trust::Scan`]. Such a frame may be a stale return address left in a dead frame, so
/// scanning trades certainty for depth where the unwind tables end (code generated at run time,
/// hand-written assembly). The call sites are found in each module's file on disk when the table
/// is built (about 2 ms for libc); modules without a matching file take no part. Turning it on
/// or off makes the next refresh parse every module again. Returns the previous setting;
/// [`Error::Reentrant`] from a signal handler that interrupted a refresh.
pub fn set_stack_scanning(on: bool) -> Result<bool, Error> {
    let mut state = lock_state().ok_or(Error::Reentrant)?;
    let was = state.scan;
    if was != on {
        state.scan = on;
        state.cache = modules::ModuleCache::new();
    }
    Ok(was)
}

/// Shares module rules with other processes through `dir` (for a profiler that starts many
/// processes of the same programs, in one run or many): the first to build a module's rules
/// writes them there (aside, then renamed over), named by the module's build id, code range and
/// architecture, and the others map them and read them back, checked, instead of copying and
/// parsing the module's unwind sections again (libc: 0.1 ms against 7 ms). The directory may
/// last across runs of the same build of this library (the format has a version, but another
/// build may build other rules: keep one directory per build). Modules without a build id, and
/// every module while stack scanning is on, are parsed as without it; their reports then have
/// no CFI statistics. `None` stops sharing. Set it before [`init`].
pub fn set_rules_cache(dir: Option<std::path::PathBuf>) {
    if let Ok(mut d) = modules::rules_cache::DIR.lock() {
        *d = dir;
    }
}

/// Frees retired tables that have become unused since the last refresh. Returns how many remain
/// (0, freeing nothing, when called from a signal handler that interrupted a refresh on this
/// thread).
pub fn collect_retired() -> usize {
    let Some(mut state) = lock_state() else {
        return 0;
    };
    let state = &mut *state;
    publish::reclaim(&mut state.retired, &mut state.quarantine);
    state.retired.len()
}

/// The modules of the published table (for symbolization and reports).
pub fn loaded_modules() -> Vec<LoadedModule> {
    lock_state().map_or_else(Vec::new, |s| s.modules.clone())
}

/// This process's pointer mask: the bits of an instruction address that are not address (on
/// aarch64 with pointer authentication, the authentication code's field and the top byte, as
/// `xpaclri` clears them; 0 elsewhere). An offline walk of this process's copied stacks gives
/// it to its memory (`unwind_core::StackImage::with_pointer_mask`). Async-signal-safe.
pub fn pointer_mask() -> u64 {
    Native::pointer_mask()
}

/// A copy of the vdso's ELF image (the kernel maps it; it has no file), or `None` if the
/// process has no vdso.
pub fn vdso_image() -> Option<Vec<u8>> {
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    if base == 0 {
        return None;
    }
    #[cfg(target_pointer_width = "64")]
    type Ehdr = libc::Elf64_Ehdr;
    #[cfg(target_pointer_width = "32")]
    type Ehdr = libc::Elf32_Ehdr;
    // SAFETY: the kernel maps a complete ELF image at AT_SYSINFO_EHDR, so its header is readable.
    let ehdr = unsafe { &*(base as *const Ehdr) };
    let end = (ehdr.e_shoff as usize)
        .saturating_add(usize::from(ehdr.e_shnum).saturating_mul(usize::from(ehdr.e_shentsize)));
    let len = end.clamp(std::mem::size_of::<Ehdr>(), 1 << 20);
    // SAFETY: the section headers end the image, so `[base, base + len)` is mapped.
    Some(unsafe { std::slice::from_raw_parts(base as *const u8, len) }.to_vec())
}

/// Registers the calling thread for sampling: records its stack bounds and gives it a rule cache
/// (408 KiB on x86_64, 736 KiB on ARM, most of it the cache's second and extent levels,
/// committed as the thread's samples use it: see [`unwind_core::cache`]).
/// Must be called outside signal handlers (it allocates). Idempotent.
pub fn register_thread() -> Result<(), Error> {
    threads::register().map_err(Error::Io)
}

/// Unregisters the calling thread (call before it exits, outside signal handlers).
pub fn unregister_thread() {
    threads::unregister()
}

/// How many thread slots exist (registered threads, plus free slots left by threads that have
/// unregistered or exited, which later registrations reuse).
pub fn registered_slots() -> usize {
    threads::slots().count()
}

/// How many threads are registered now (slots owned by a live thread).
pub fn registered_threads() -> usize {
    threads::owned()
}

/// True if the calling thread is registered.
pub fn is_thread_registered() -> bool {
    threads::is_registered()
}

/// The calling thread's cache counters `(hits, misses)`, or `None` if it is not registered or
/// is unwinding.
pub fn cache_stats() -> Option<(u64, u64)> {
    let guard = threads::enter().ok()?;
    // SAFETY: the guard holds the slot's busy flag, so this thread has exclusive use of its cache.
    let cache = unsafe { &*guard.slot.cache.get() };
    Some((cache.hits(), cache.misses()))
}

/// The calling thread's thread pointer (the register the C library keeps its thread's control
/// block in: `%fs`'s base on x86_64, `TPIDRURO` on ARM, `TPIDR_EL0` on aarch64): unique among
/// live threads, the same in a signal handler as in the code it interrupted, and read with one
/// instruction, no call. Async-signal-safe.
#[inline(always)]
pub fn thread_pointer() -> usize {
    arch::thread_pointer()
}

/// The calling thread's rule-cache counts, kept current by each of its unwinds, or `None` if it
/// is not registered. The counts belong to the thread's slot, which keeps them when it passes
/// to a later thread: a profiler that copies them from its signal handler (two loads, where
/// [`cache_stats`] finds the slot again) adds the differences since it last looked.
pub fn this_thread_cache_counts() -> Option<&'static CacheCounts> {
    threads::current().map(|s| &s.cache_counts)
}

/// What Go runtime the executable has, once the first [`init`] has looked (`None` before): in a
/// Go program, walks read the running goroutine's stack (see [`GoRuntime`]). Async-signal-safe
/// (an atomic load).
pub fn go_runtime() -> Option<GoRuntime> {
    go::runtime()
}

/// The live stack of the calling thread that an unwind from `sp` may read: from the red zone
/// below `sp` to the top of the registered stack; empty if `sp` is not on that stack.
fn live_stack(slot: &threads::ThreadSlot, sp: u64) -> LiveStack {
    let lo = slot.stack_lo.load(Ordering::Relaxed);
    let hi = slot.stack_hi.load(Ordering::Relaxed);
    let floor = sp.saturating_sub(RED_ZONE).max(lo);
    let (lo, hi) = if lo <= sp && sp < hi {
        (floor, hi)
    } else {
        (0, 0)
    };
    // SAFETY: `[lo, hi)` is part of the calling thread's own stack mapping (registered from
    // pthread_getattr_np), at or above the red zone of the interrupted frame, which is mapped.
    unsafe { LiveStack::new(lo, hi) }.with_pointer_mask(Native::pointer_mask())
}

fn unwind_live(
    regs: Regs,
    pcs: &mut [u64],
    trust: Option<&mut [Trust]>,
) -> Result<UnwindResult, SampleError> {
    with_table(|table, cache, slot| {
        let sp = Native::sp(&regs);
        let outside = cache.outside_modules();
        let result = if go::active() {
            let registered = (
                slot.stack_lo.load(Ordering::Relaxed),
                slot.stack_hi.load(Ordering::Relaxed),
            );
            let mem = go::GoMemory::at(sp, registered, Native::pointer_mask());
            unwind_core::unwind(table, cache, regs, &mem, pcs, trust)
        } else {
            unwind_core::unwind(table, cache, regs, &live_stack(slot, sp), pcs, trust)
        };
        // Plain stores to this thread's own slot (no shared cache line, no read-modify-write).
        slot.cache_counts.set(cache.hits(), cache.misses());
        let now = cache.outside_modules();
        if now != outside {
            note_outside_modules(now.wrapping_sub(outside), cache.last_outside_module());
        }
        result
    })
}

/// Walks that met code in no module of the published table, and the last such address.
static OUTSIDE_MODULES: AtomicU64 = AtomicU64::new(0);
static LAST_OUTSIDE_MODULE: AtomicU64 = AtomicU64::new(0);

#[cold]
fn note_outside_modules(new: u64, last: u64) {
    OUTSIDE_MODULES.fetch_add(new, Ordering::Relaxed);
    LAST_OUTSIDE_MODULE.store(last, Ordering::Relaxed);
}

/// Code the published table does not know, as met by unwinds (see [`outside_modules`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutsideModules {
    /// Addresses in no known module met by unwinds since the process started (each counted
    /// once per thread and table generation).
    pub count: u64,
    /// The last such address (0 if none).
    pub last_address: u64,
}

/// How often unwinds have met a PC in no module of the published table: code `dlopen`ed after
/// the last [`init`]/[`refresh`], or generated at run time. A profiler's own thread reads this
/// (a load, no lock) and, when `count` grows, calls [`refresh`] off the signal path, so that it
/// never has to poll the list of loaded modules. (Code that no module holds, such as a JIT's,
/// keeps counting after a refresh: back off when a refresh finds no new module.)
pub fn outside_modules() -> OutsideModules {
    OutsideModules {
        count: OUTSIDE_MODULES.load(Ordering::Relaxed),
        last_address: LAST_OUTSIDE_MODULE.load(Ordering::Relaxed),
    }
}

/// Rule-cache `(hits, misses)` summed over every thread that has unwound, as of each thread's
/// last unwind (a thread's slot, counts included, passes to a later thread when it exits).
pub fn cache_totals() -> (u64, u64) {
    threads::slots().fold((0, 0), |(h, m), s| {
        (h + s.cache_counts.hits(), m + s.cache_counts.misses())
    })
}

/// Unwinds the thread interrupted by the signal whose handler received `ucontext`, writing PCs
/// (frame 0 first) into `pcs` and, optionally, each frame's trust into `trust`.
///
/// Async-signal-safe: no allocation, lock, system call or panic. Reads only the calling thread's
/// registered stack above the interrupted stack pointer's red zone.
///
/// # Safety
/// `ucontext` must be the `ucontext_t` the kernel passed to the running signal handler (its third
/// argument, with `SA_SIGINFO`), on the thread that is to be unwound.
pub unsafe fn unwind_signal(
    ucontext: *const libc::c_void,
    pcs: &mut [u64],
    trust: Option<&mut [Trust]>,
) -> Result<UnwindResult, SampleError> {
    // SAFETY: forwarded from the caller's contract.
    let regs = unsafe { regs_from_ucontext(ucontext) };
    unwind_live(regs, pcs, trust)
}

/// Unwinds the calling thread from this function's own frame (frame 0 is inside `unwind_here`).
#[inline(never)]
pub fn unwind_here(
    pcs: &mut [u64],
    trust: Option<&mut [Trust]>,
) -> Result<UnwindResult, SampleError> {
    let regs = arch::current_regs();
    unwind_live(regs, pcs, trust)
}

/// Unwinds a copied stack (for example one from [`capture_signal`]) with the published table
/// and the calling thread's cache. The calling thread must be registered. The stack is this
/// process's: its return addresses are stripped with this process's pointer mask (aarch64).
pub fn unwind_copy(
    regs: Regs,
    stack: &StackImage<'_>,
    pcs: &mut [u64],
    trust: Option<&mut [Trust]>,
) -> Result<UnwindResult, SampleError> {
    let stack = stack.with_pointer_mask(Native::pointer_mask());
    with_table(|table, cache, _| unwind_core::unwind(table, cache, regs, &stack, pcs, trust))
}
