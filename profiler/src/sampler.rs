//! Sampling: a CPU-time (or wall-clock) timer per thread (see [`crate::timer`]), the signal
//! handler that unwinds into the thread's ring, and the counters that account for every signal.
//!
//! Each sampled thread has a [`ThreadRecord`], found by the handler from the signal (a POSIX
//! timer's `sigev_value` holds the record's index; a perf event's descriptor maps to it),
//! checked against the interrupted thread, so the handler needs no thread-local storage (which
//! in a shared object can allocate) and no lock.
//! Records are allocated outside the handler, never freed, and reused by later threads only
//! once the collector has drained them and their thread is gone.
//!
//! What the collector reads (a [`ThreadRecord`] and its ring's words, and the process-wide
//! [`ProcessRecord`]) is `#[repr(C)]`, all atomics, in a region of its own: a leaked block when
//! the collector is a thread of the program, or memory shared with `record` (see
//! [`crate::session`]), which then reads it even after the program was killed.

use std::cell::UnsafeCell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::Mutex;

use crate::ring::{Ring, RingIndices};
use crate::signals;
use crate::timer::{self, ThreadTimer, TimerChoice, TimerSpec};
use unwind_in_process::{SampleError, StopReason, Trust};

/// The most threads sampled at once (records are reused after a thread exits).
pub const MAX_THREADS: usize = 4096;
/// The deepest stack a sample holds; deeper walks stop with `BufferFull`. Deep enough for a
/// Python 3.12 service under `-X perf` (three native frames a Python call) at a Python depth of
/// 300; each thread's record keeps room for one walk of this depth.
pub const MAX_FRAMES: usize = 1024;
/// The longest ring record written: an allocation's header (time, stop reason and kind, size,
/// id) and [`MAX_FRAMES`] PCs.
pub const MAX_RECORD_WORDS: usize = 4 + MAX_FRAMES;

/// A record's kind, in bits 16-23 of its second word: a timer's sample.
const CPU_RECORD: u64 = 0;
/// A record's kind: a sampled allocation ([`sample_allocation`]).
const ALLOC_RECORD: u64 = 1;

/// Why a sampled allocation (one whose bytes held a sample point) has no sample: each is
/// stored or counted under exactly one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocDrop {
    /// The allocating thread has no record (the profiler's own thread, one started before the
    /// profiler or past [`MAX_THREADS`]).
    ThreadNotSampled,
    /// The profiler's own work in the program's thread (a table rebuild, say).
    ProfilerWork,
    /// The thread was already sampling (an allocation in a signal handler that interrupted
    /// it) or its unwinder was busy.
    Busy,
    /// The unwinder could not walk (the thread is not registered, no table yet).
    Unwinder,
    /// The thread's ring was full: the collector fell behind.
    RingFull,
    /// After profiling stopped.
    AfterStop,
}

impl AllocDrop {
    /// Every reason, in the order of [`ProcessRecord::alloc_drops`].
    pub const ALL: [AllocDrop; 6] = [
        AllocDrop::ThreadNotSampled,
        AllocDrop::ProfilerWork,
        AllocDrop::Busy,
        AllocDrop::Unwinder,
        AllocDrop::RingFull,
        AllocDrop::AfterStop,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            AllocDrop::ThreadNotSampled => "thread not sampled",
            AllocDrop::ProfilerWork => "the profiler's own work",
            AllocDrop::Busy => "thread already sampling (allocation in a signal handler)",
            AllocDrop::Unwinder => "unwinder could not walk",
            AllocDrop::RingFull => "ring full (collector behind)",
            AllocDrop::AfterStop => "after stop",
        }
    }
}

/// Why a timer signal produced no sample. Every signal the handler accepts as one of ours is
/// either stored or counted under exactly one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The thread was not registered with the unwinder.
    ThreadNotRegistered,
    /// The thread was already unwinding (a signal interrupted an unwind) or the table was
    /// being replaced at that instant.
    Busy,
    /// No rule table was published yet.
    NotInitialized,
    /// The thread's ring was full: the collector fell behind.
    RingFull,
    /// The signal arrived after profiling stopped.
    AfterStop,
}

impl DropReason {
    /// Every reason, in the order of the counters.
    pub const ALL: [DropReason; 5] = [
        DropReason::ThreadNotRegistered,
        DropReason::Busy,
        DropReason::NotInitialized,
        DropReason::RingFull,
        DropReason::AfterStop,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::ThreadNotRegistered => "thread not registered",
            DropReason::Busy => "unwinder busy (nested signal or table switch)",
            DropReason::NotInitialized => "no rule table yet",
            DropReason::RingFull => "ring full (collector behind)",
            DropReason::AfterStop => "after stop",
        }
    }

    /// This reason's index in [`DropReason::ALL`] (and in [`ThreadCounters::dropped`]).
    pub fn index(self) -> usize {
        self as usize
    }

    fn of(e: SampleError) -> DropReason {
        match e {
            SampleError::NotInitialized => DropReason::NotInitialized,
            SampleError::ThreadNotRegistered => DropReason::ThreadNotRegistered,
            SampleError::Busy => DropReason::Busy,
        }
    }
}

/// The profiler's own work in a thread of the program, which a sample taken during it is
/// marked with (see [`profiler_work`]): the profile shows it as one frame of the profiler's
/// under the program's call that led to it, not as the program's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Work {
    /// Rebuilding the rule tables after the program's `dlopen`, `dlclose`, `mmap` or
    /// `mprotect` changed its code, and telling `record`.
    TableRebuild,
    /// Connecting to `record` again, and re-arming timers, after the program closed the
    /// profiler's descriptors.
    Reconnection,
    /// The interposed `dlopen`'s own work around the C library's: finding its caller, and the
    /// library along the caller's search path.
    DlopenSearch,
    /// The interposed `pthread_create`'s own work around the C library's.
    ThreadStart,
    /// The profiler's code in one of its hooks, before or after the work above is marked (a
    /// sample whose leaf is the profiler's own code, not the thread's start).
    Hook,
}

impl Work {
    /// Every kind, in the order of the mark's values (1 and up; 0 is none).
    pub const ALL: [Work; 5] = [
        Work::TableRebuild,
        Work::Reconnection,
        Work::DlopenSearch,
        Work::ThreadStart,
        Work::Hook,
    ];

    /// What the profile calls it.
    pub fn name(self) -> &'static str {
        match self {
            Work::TableRebuild => "table rebuild",
            Work::Reconnection => "reconnection",
            Work::DlopenSearch => "dlopen search",
            Work::ThreadStart => "thread start",
            Work::Hook => "hook",
        }
    }

    /// The mark's value: its index in [`Work::ALL`] plus one.
    fn mark(self) -> u64 {
        self as u64 + 1
    }
}

/// Runs `f`, the profiler's `work`, marking the calling thread's samples as taken during it
/// (nested work keeps the outer mark). Not async-signal-safe; cheap next to the work it marks
/// (a look through this process's records for the calling thread's).
pub fn profiler_work<T>(work: Work, f: impl FnOnce() -> T) -> T {
    let slot = own_slot();
    let outer = slot.map(|s| s.record.work.load(Relaxed));
    if let (Some(s), Some(0)) = (slot, outer) {
        set_mark(s, work.mark());
    }
    let out = f();
    if let (Some(s), Some(0)) = (slot, outer) {
        set_mark(s, 0);
    }
    out
}

/// Runs `f`, a call the profiler's work makes for the program (the C library's `dlopen`, which
/// the interposed one calls), without the calling thread's mark: what it does is the program's.
pub fn program_call<T>(f: impl FnOnce() -> T) -> T {
    let slot = own_slot();
    let outer = slot.map_or(0, |s| s.record.work.load(Relaxed));
    if let Some(s) = slot.filter(|_| outer != 0) {
        set_mark(s, 0);
    }
    let out = f();
    if let Some(s) = slot.filter(|_| outer != 0) {
        set_mark(s, outer);
    }
    out
}

/// The calling thread's record, if it is sampled.
fn own_slot() -> Option<&'static Slot> {
    let me = unwind_in_process::thread_pointer();
    slots().find(|s| s.record.active() && s.owner.load(Relaxed) == me)
}

/// Sets the calling thread's work mark (see [`Work`]).
fn set_mark(s: &Slot, mark: u64) {
    // The store is this thread's own, for its own signal handler: it must not move across the
    // work it marks.
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    s.record.work.store(mark, Relaxed);
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// A record's life: free, owned by a live thread, or left by an exited thread (to be drained).
const FREE: u64 = 0;
const ACTIVE: u64 = 1;
const EXITED: u64 = 2;

/// A counter with one writer (the owning thread's handler, or the thread itself): a load and a
/// store, no read-modify-write.
#[derive(Default)]
#[repr(transparent)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline(always)]
    fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// What one sampled thread's handler counts. Counters are never reset, so that totals over all
/// records stay right when a record passes to another thread.
#[derive(Default)]
#[repr(C)]
pub struct ThreadCounters {
    /// Our timer's signals received.
    pub signals: Counter,
    /// Expirations the kernel merged into a signal already pending (CPU time not sampled).
    pub overruns: Counter,
    /// Periods a perf event counted but sent no signal for (two overflows merged into one
    /// pending signal), added when the event is closed.
    pub perf_unsignalled: Counter,
    /// CPU time the owners used while their timers ran, in ns, added when a timer is deleted:
    /// what the samples' periods should add up to.
    pub cpu_ns: Counter,
    /// Samples stored.
    pub stored: Counter,
    /// Signals without a sample, by [`DropReason`] (in the order of `DropReason::ALL`).
    pub dropped: [Counter; DropReason::ALL.len()],
    /// Stored samples by how their walk ended (in the order of `StopReason::ALL`).
    pub stops: [Counter; StopReason::ALL.len()],
    /// Frames in the stored samples.
    pub frames: Counter,
    /// Of them, frames found by stack scanning ([`Trust::Scan`]), counted when it is on.
    pub scanned: Counter,
    /// Nanoseconds spent unwinding, over stored samples.
    pub unwind_ns: Counter,
    /// Nanoseconds spent storing, over stored samples.
    pub store_ns: Counter,
    /// Rule-cache hits of the owners' unwinds, kept current by the handler (so that `record`
    /// reads them however the process ends).
    pub cache_hits: Counter,
    /// Rule-cache misses, as `cache_hits`.
    pub cache_misses: Counter,
}

impl ThreadCounters {
    #[inline(always)]
    fn drop(&self, reason: DropReason) {
        if let Some(c) = self.dropped.get(reason.index()) {
            c.add(1);
        }
    }

    /// Whether the counters can be what the handler wrote: every signal stored or dropped once,
    /// every stored sample with one stop reason and at most [`MAX_FRAMES`] frames. Read while
    /// the handler runs, they may be a few signals apart; counters further apart were written
    /// over (by the program, in memory it shares with `record`) and are not to be used.
    pub fn plausible(&self) -> bool {
        /// Signals a handler may have half-counted while the counters were read.
        const SLACK: u64 = 4;
        let sum = |counters: &[Counter]| {
            counters
                .iter()
                .try_fold(0u64, |total, c| total.checked_add(c.get()))
        };
        let (signals, stored, frames) = (self.signals.get(), self.stored.get(), self.frames.get());
        let (Some(dropped), Some(stops)) = (sum(&self.dropped), sum(&self.stops)) else {
            return false;
        };
        // Counts below 2^48 (445 years of signals at 20 kHz), times below 2^62 ns: sums over
        // many records cannot overflow.
        let counts = [signals, self.overruns.get(), self.perf_unsignalled.get()];
        let times = [self.cpu_ns.get(), self.unwind_ns.get(), self.store_ns.get()];
        counts.iter().all(|&n| n < 1 << 48)
            && times.iter().all(|&ns| ns < 1 << 62)
            && self.cache_hits.get().max(self.cache_misses.get()) < 1 << 56
            && stored
                .checked_add(dropped)
                .is_some_and(|n| n <= signals.saturating_add(SLACK))
            && stops.abs_diff(stored) <= SLACK
            && frames
                <= stored
                    .saturating_add(SLACK)
                    .saturating_mul(MAX_FRAMES as u64)
            && self.scanned.get() <= frames
    }
}

/// Marks an initialized [`ThreadRecord`] (and the layout the reader expects).
pub const THREAD_RECORD_MAGIC: u64 =
    0x7468_7265_6164_0000 ^ std::mem::size_of::<ThreadRecord>() as u64;

/// One sampled thread, as the collector sees it: in a region of its own, followed by its ring's
/// words (see the module docs). Zeroed memory is a free record.
#[repr(C)]
pub struct ThreadRecord {
    /// [`THREAD_RECORD_MAGIC`] once set up.
    pub magic: AtomicU64,
    /// The words of its ring (a power of two), which follow the record.
    pub ring_words: AtomicU64,
    state: AtomicU64,
    /// The owner's kernel thread id.
    pub tid: AtomicI32,
    _tid_pad: u32,
    /// The owner's CPU time when its timer started, in ns (`record` counts the CPU time of a
    /// thread whose timer was never deleted from it).
    pub cpu_at_start: AtomicU64,
    /// The owner's name, as it was when it exited (written by the owner, then read by the
    /// collector once `state` is EXITED).
    name: [AtomicU8; 16],
    /// The profiler's [`Work`] the owner is doing now (its mark), 0 for none: the handler puts
    /// it in each sample.
    work: AtomicU64,
    /// The handler's counters.
    pub counters: ThreadCounters,
    /// The indices of the ring.
    pub ring: RingIndices,
}

/// A record of this process: where its [`ThreadRecord`] is, a view of its ring, and the owner's
/// timer, which only this process can delete.
pub struct Slot {
    /// The record the collector reads.
    pub record: &'static ThreadRecord,
    /// Its ring (the words after the record).
    pub ring: Ring,
    /// The owner's thread pointer ([`unwind_in_process::thread_pointer`]), 0 while it has none:
    /// the handler checks it (a signal meant for another thread is not ours), and the
    /// profiler's hooks find their thread's record by it, without a call into the C library (a
    /// sample there would be shown as the program's).
    owner: AtomicUsize,
    /// The owner's timer, taken by whoever deletes it (the exiting thread, or `stop`).
    timer: Mutex<Option<ThreadTimer>>,
    /// `counters.signals` when the owner's timer started (for a perf event's unsignalled
    /// periods).
    signals_at_start: AtomicU64,
    /// The owner's rule-cache counts in the unwinder (null until it starts), and what of them
    /// the handler has already added to the record's counters.
    cache: AtomicPtr<unwind_in_process::CacheCounts>,
    cache_seen: [AtomicU64; 2],
    /// Where the owner's handler writes a walk.
    scratch: Scratch,
}

/// Room for one walk of the owner's handler: its PCs and how each was found. Kept with the
/// thread's record rather than on the signal's stack, which may be a program's small
/// alternate stack (`SA_ONSTACK` is taken on from the program's action).
struct Scratch {
    /// Set while a handler holds the buffers: a handler that interrupts it finds them taken.
    busy: AtomicBool,
    pcs: UnsafeCell<[u64; MAX_FRAMES]>,
    trust: UnsafeCell<[Trust; MAX_FRAMES]>,
}

// SAFETY: the buffers are reached only through `Scratch::take`, which gives them to one holder
// at a time (`busy`).
unsafe impl Sync for Scratch {}

/// The buffers of a [`Scratch`], released when dropped.
struct ScratchBuffers<'a> {
    busy: &'a AtomicBool,
    pcs: &'a mut [u64; MAX_FRAMES],
    trust: &'a mut [Trust; MAX_FRAMES],
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            busy: AtomicBool::new(false),
            pcs: UnsafeCell::new([0; MAX_FRAMES]),
            trust: UnsafeCell::new([Trust::Context; MAX_FRAMES]),
        }
    }

    /// The buffers, or `None` while another holder (a handler this signal interrupted) has
    /// them. Async-signal-safe.
    fn take(&self) -> Option<ScratchBuffers<'_>> {
        if self.busy.swap(true, Acquire) {
            return None;
        }
        // SAFETY: `busy` was clear and is now set, so no other reference to the buffers exists
        // until the returned value clears it.
        let (pcs, trust) = unsafe { (&mut *self.pcs.get(), &mut *self.trust.get()) };
        Some(ScratchBuffers {
            busy: &self.busy,
            pcs,
            trust,
        })
    }
}

impl Drop for ScratchBuffers<'_> {
    fn drop(&mut self) {
        self.busy.store(false, Release);
    }
}

/// Marks an initialized [`ProcessRecord`].
/// "proc" in the high bytes, the record's size (over a MiB with the live table) in the low 32
/// bits.
pub const PROCESS_RECORD_MAGIC: u64 =
    0x7072_6f63_0000_0000 ^ std::mem::size_of::<ProcessRecord>() as u64;

/// What the process as a whole counts and reports about its tables (see the module docs).
#[repr(C)]
pub struct ProcessRecord {
    /// [`PROCESS_RECORD_MAGIC`] once set up.
    pub magic: AtomicU64,
    /// Signals of our number that were not from one of our timers (the program's own, or
    /// another thread's timer after a record was reused): ignored, counted.
    pub foreign: AtomicU64,
    /// Threads that could not be sampled because every record was in use.
    pub over_limit: AtomicU64,
    /// Threads whose timer could not be created.
    pub timer_failed: AtomicU64,
    /// Threads sampled, by kind of timer (in the order of [`timer::KINDS`]).
    pub threads_by_timer: [AtomicU64; timer::KINDS.len()],
    /// CLOCK_MONOTONIC when sampling started, in ns: sample times count from it.
    pub epoch_ns: AtomicU64,
    /// Whether walks scan the stack (1) or not (0).
    pub scanning: AtomicU64,
    /// The address of [`crate::threads`]' trampoline, whose frame profiles leave out.
    pub trampoline: AtomicU64,
    /// 1 when the profiler runs as the preload library: profiles leave out every frame of the
    /// trampoline's module (see [`mark_preloaded`]).
    pub preloaded: AtomicU64,
    /// Nanoseconds spent building the rule tables, at start and at every refresh.
    pub preload_ns: AtomicU64,
    /// Bytes of the rule tables, as last published.
    pub table_bytes: AtomicU64,
    /// Rows of the rule tables, as last published.
    pub table_rows: AtomicU64,
    /// Times the tables were rebuilt after start.
    pub refreshes: AtomicU64,
    /// Threads not sampled because the memory for their samples could not be made (under
    /// `record`: no descriptor left under `RLIMIT_NOFILE`, a file size limit, no memory).
    pub no_shared_region: AtomicU64,
    /// Times the process connected to `record` again after the program closed its connection.
    pub rejoins: AtomicU64,
    /// Threads given a new timer after the program closed their perf event's descriptor.
    pub timers_rearmed: AtomicU64,
    /// Threads not sampled because their record could not be handed to `record` (the
    /// connection was gone, and could not be made again).
    pub not_announced: AtomicU64,
    /// Times the program set its own action for a signal the profiler owns (kept behind the
    /// profiler's: see [`crate::signals`]).
    pub program_actions: AtomicU64,
    /// The process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`, ns) when sampling started: what
    /// no thread's timer could count (the loader, the table build at start).
    pub cpu_before_sampling: AtomicU64,
    /// A Go program's runtime as the tables found it: 0 not Go (or not looked at yet), 1 its
    /// goroutines' stacks read, 2 its `g` not found (walks stop at a goroutine's first frame).
    pub go_runtime: AtomicU64,
    /// The mean bytes between sampled allocations, 0 when allocations are not sampled.
    pub alloc_mean: AtomicU64,
    /// 1 when CPU time is not sampled (allocations alone: no timers), else 0.
    pub cpu_off: AtomicU64,
    /// Allocation samples stored.
    pub alloc_sampled: AtomicU64,
    /// Nanoseconds the stored allocation samples took in the allocator (unwind and store).
    pub alloc_ns: AtomicU64,
    /// Sampled allocations without a sample, by [`AllocDrop`] (in the order of its `ALL`).
    pub alloc_drops: [AtomicU64; AllocDrop::ALL.len()],
    /// The sampled allocations still live ([`crate::alloc_sampling`]).
    pub live: crate::alloc_sampling::LiveHeap,
}

impl ProcessRecord {
    /// A zeroed record.
    pub const fn zero() -> ProcessRecord {
        ProcessRecord {
            magic: AtomicU64::new(0),
            foreign: AtomicU64::new(0),
            over_limit: AtomicU64::new(0),
            timer_failed: AtomicU64::new(0),
            threads_by_timer: [const { AtomicU64::new(0) }; timer::KINDS.len()],
            epoch_ns: AtomicU64::new(0),
            scanning: AtomicU64::new(0),
            trampoline: AtomicU64::new(0),
            preloaded: AtomicU64::new(0),
            preload_ns: AtomicU64::new(0),
            table_bytes: AtomicU64::new(0),
            table_rows: AtomicU64::new(0),
            refreshes: AtomicU64::new(0),
            no_shared_region: AtomicU64::new(0),
            rejoins: AtomicU64::new(0),
            program_actions: AtomicU64::new(0),
            timers_rearmed: AtomicU64::new(0),
            not_announced: AtomicU64::new(0),
            cpu_before_sampling: AtomicU64::new(0),
            go_runtime: AtomicU64::new(0),
            alloc_mean: AtomicU64::new(0),
            cpu_off: AtomicU64::new(0),
            alloc_sampled: AtomicU64::new(0),
            alloc_ns: AtomicU64::new(0),
            alloc_drops: [const { AtomicU64::new(0) }; AllocDrop::ALL.len()],
            live: crate::alloc_sampling::LiveHeap::zero(),
        }
    }

    /// Counts a sampled allocation without a sample.
    pub fn alloc_dropped(&self, reason: AllocDrop) {
        if let Some(n) = self.alloc_drops.get(reason as usize) {
            n.fetch_add(1, Relaxed);
        }
    }

    /// Records the table a build or refresh just published.
    pub fn table_built(&self, report: &unwind_in_process::PreloadReport, refresh: bool) {
        self.preload_ns
            .fetch_add(report.build_time.as_nanos() as u64, Relaxed);
        self.table_bytes.store(report.bytes() as u64, Relaxed);
        self.table_rows.store(report.rows(), Relaxed);
        if refresh {
            self.refreshes.fetch_add(1, Relaxed);
        }
        use unwind_in_process::GoRuntime;
        let go = match unwind_in_process::go_runtime() {
            Some(GoRuntime::Found) => 1,
            Some(GoRuntime::Unknown) => 2,
            _ => 0,
        };
        self.go_runtime.store(go, Relaxed);
    }

    /// Copies what sampling and the tables set in `parent`'s record into this one, for a child
    /// forked from `parent`'s process, whose tables and settings it inherits (its counters start
    /// at zero).
    pub fn inherit(&self, parent: &ProcessRecord) {
        for (to, from) in [
            (&self.epoch_ns, &parent.epoch_ns),
            (&self.scanning, &parent.scanning),
            (&self.trampoline, &parent.trampoline),
            (&self.preloaded, &parent.preloaded),
            (&self.table_bytes, &parent.table_bytes),
            (&self.table_rows, &parent.table_rows),
            (&self.go_runtime, &parent.go_runtime),
            (&self.alloc_mean, &parent.alloc_mean),
            (&self.cpu_off, &parent.cpu_off),
        ] {
            to.store(from.load(Relaxed), Relaxed);
        }
    }

    /// Whether the counts can be right (see [`ThreadCounters::plausible`]): each below 2^40
    /// (a thousand threads a second for thirty years), the table build time below a day.
    pub fn plausible(&self) -> bool {
        const MOST: u64 = 1 << 40;
        [
            &self.foreign,
            &self.over_limit,
            &self.timer_failed,
            &self.refreshes,
            &self.no_shared_region,
            &self.rejoins,
            &self.program_actions,
            &self.timers_rearmed,
            &self.not_announced,
            &self.table_rows,
            &self.alloc_sampled,
        ]
        .into_iter()
        .chain(&self.threads_by_timer)
        .chain(&self.alloc_drops)
        .all(|c| c.load(Relaxed) < MOST)
            && self.preload_ns.load(Relaxed) < 86_400 * 1_000_000_000
            && self.table_bytes.load(Relaxed) < MOST
            && self.alloc_mean.load(Relaxed) <= 1 << 30
            && self.cpu_off.load(Relaxed) <= 1
            && self.alloc_ns.load(Relaxed) < 1 << 62
    }

    /// The counts of what was not sampled.
    pub fn unsampled(&self) -> Unsampled {
        Unsampled {
            threads_by_timer: self.threads_by_timer.each_ref().map(|n| n.load(Relaxed)),
            over_limit: self.over_limit.load(Relaxed),
            timer_failed: self.timer_failed.load(Relaxed),
            no_shared_region: self.no_shared_region.load(Relaxed),
            not_announced: self.not_announced.load(Relaxed),
            foreign_signals: self.foreign.load(Relaxed),
        }
    }
}

/// Says that the profiler runs as a library of its own, preloaded into the program: profiles
/// leave its frames out (its interposers of `pthread_create` and `dlopen` are not the
/// program's code). Call before sampling starts.
pub fn mark_preloaded() {
    PRELOADED.store(true, Relaxed);
}

/// Set by [`mark_preloaded`]; copied into the process record when sampling starts.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// This process's record when no one shares it.
static LOCAL_PROCESS: ProcessRecord = ProcessRecord::zero();
/// This process's record: [`LOCAL_PROCESS`], or one shared with `record`.
static PROCESS: AtomicPtr<ProcessRecord> =
    AtomicPtr::new(&LOCAL_PROCESS as *const ProcessRecord as *mut ProcessRecord);

/// This process's [`ProcessRecord`].
#[inline(always)]
pub fn process() -> &'static ProcessRecord {
    // SAFETY: PROCESS points to LOCAL_PROCESS or to a shared mapping that is never unmapped
    // (see `use_process_record`).
    unsafe { &*PROCESS.load(Acquire) }
}

/// Makes `record` this process's [`ProcessRecord`] (before sampling starts).
///
/// # Safety
/// `record` stays mapped and valid for the rest of the process.
pub unsafe fn use_process_record(record: *mut ProcessRecord) {
    PROCESS.store(record, Release);
    crate::alloc_sampling::process_record_changed();
}

/// Every record ever allocated, by index (the timer's `sigev_value`).
static RECORDS: [AtomicPtr<Slot>; MAX_THREADS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];
/// Records allocated so far (indices below it may be non-null).
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
/// Whether the handler stores samples.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// How threads are sampled, fixed when sampling starts.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The timers.
    pub timer: TimerSpec,
    /// Frames per sample, at most [`MAX_FRAMES`].
    pub max_frames: usize,
    /// Words per thread ring.
    pub ring_words: usize,
    /// Whether walks scan the stack: the handler then counts the frames scans found.
    pub stack_scanning: bool,
    /// How many of the first samples are also captured (registers and stack copy), 0 for none.
    pub capture_samples: usize,
    /// With a value, allocations are sampled too, one sample point every this many bytes on
    /// average ([`crate::alloc_sampling`]).
    pub alloc_mean: Option<u64>,
    /// Whether threads get timers (CPU time sampled); `false`: allocations alone.
    pub cpu: bool,
}

/// Bytes of stack copied per captured sample.
const CAPTURE_BYTES: usize = 512 * 1024;

/// The captured samples ([`Timing::capture_samples`]), allocated at [`install`].
static CAPTURES: std::sync::OnceLock<unwind_in_process::Captures> = std::sync::OnceLock::new();

/// Writes the captured samples, in the order they were taken, to `path` as a sequence named
/// `name` ([`unwind_in_process::Captures::write_sequence`]); `Ok(None)` if none were asked for.
pub fn write_sequence(path: &std::path::Path, name: &str) -> std::io::Result<Option<usize>> {
    match CAPTURES.get() {
        Some(c) => c.write_sequence(path, name).map(Some),
        None => Ok(None),
    }
}

static TIMING: std::sync::OnceLock<Timing> = std::sync::OnceLock::new();
/// `Timing::max_frames`, for the handler (read without the OnceLock).
static MAX_FRAMES_NOW: AtomicUsize = AtomicUsize::new(MAX_FRAMES);
/// `Timing::stack_scanning`, for the handler.
static SCANNING: AtomicBool = AtomicBool::new(false);

/// CLOCK_MONOTONIC at start, in ns; sample times are relative to it.
static EPOCH_NS: AtomicU64 = AtomicU64::new(0);

/// `clock` in nanoseconds, 0 if it cannot be read (async-signal-safe).
#[inline(always)]
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into a valid timespec; clock_gettime is async-signal-safe, and an invalid
    // clock fails with EINVAL.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds (a vDSO call: no system call on x86_64 and ARM Linux).
#[inline(always)]
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The CPU time of thread `tid` of this process, in ns (0 if it is gone).
fn thread_cpu_ns(tid: libc::pid_t) -> u64 {
    // The kernel's per-thread scheduler clock: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), as
    // glibc's pthread_getcpuclockid builds it, but from a tid, which outlives nothing it names.
    clock_ns(((!tid) << 3) | 6)
}

/// Installs the handler for `timing.signal` (and for `SIGTRAP` if the timers send it) and
/// lets threads register. Call once.
pub fn install(timing: Timing) -> std::io::Result<()> {
    if TIMING.set(timing).is_err() {
        return Err(std::io::Error::other("sampling was already set up"));
    }
    MAX_FRAMES_NOW.store(timing.max_frames.clamp(1, MAX_FRAMES), Relaxed);
    if timing.capture_samples > 0 {
        let _ = CAPTURES.set(unwind_in_process::Captures::new(
            timing.capture_samples,
            1,
            CAPTURE_BYTES,
            MAX_FRAMES,
        ));
    }
    SCANNING.store(timing.stack_scanning, Relaxed);
    EPOCH_NS.store(now_ns(), Relaxed);
    let p = process();
    p.epoch_ns.store(EPOCH_NS.load(Relaxed), Relaxed);
    p.cpu_before_sampling
        .store(clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID), Relaxed);
    p.scanning.store(u64::from(timing.stack_scanning), Relaxed);
    p.trampoline
        .store(crate::threads::trampoline_address(), Relaxed);
    p.preloaded
        .store(u64::from(PRELOADED.load(Relaxed)), Relaxed);
    // Allocations alone: no timer sends the signal, so the program's action for it stays.
    if timing.cpu {
        signals::own(timing.timer.signal, on_signal, on_signal_chained)?;
    }
    if timing.cpu
        && timing.timer.choice == TimerChoice::PerfSigtrap
        && timing.timer.signal != libc::SIGTRAP
    {
        // A debugger's and a crash reporter's signal: the program's own always go on to it.
        signals::own(libc::SIGTRAP, on_signal_chained, on_signal_chained)?;
    }
    p.alloc_mean.store(timing.alloc_mean.unwrap_or(0), Relaxed);
    p.cpu_off.store(u64::from(!timing.cpu), Relaxed);
    RUNNING.store(true, Release);
    Ok(())
}

/// Starts sampling allocations, if the settings ask for it: called last when profiling
/// starts, so that the profiler's own start is not sampled as the program's allocations.
pub fn start_allocation_sampling() {
    if let Some(mean) = TIMING.get().and_then(|t| t.alloc_mean) {
        crate::alloc_sampling::enable(mean);
    }
}

/// The handler of a signal the program has an action for too (and of `SIGTRAP` with
/// `perf-sigtrap` timers, which debuggers and crash reporters use): the profiler's timers'
/// signals are sampled as [`on_signal`] samples them, every other signal goes to the program's
/// action ([`signals::pass_on_to_program`]). Kept apart from [`on_signal`] because passing on calls
/// `sigaction`, `raise` and the program's handler, which the sampling path never does
/// (tests/shared_object.rs checks both).
extern "C" fn on_signal_chained(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    // SAFETY: this errno is the thread's, kept across the sample and the program's handler.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler.
    match unsafe { our_slot(signal, &*info) } {
        Some((s, overrun)) => {
            // SAFETY: as above.
            unsafe { sample(s, overrun, uc) };
            // A standard signal the program sent while one of the timers' was pending merged
            // into it: the program's is lost. In a Go program that is its preemption signal,
            // `SIGURG`, which Go sends again only once one is acknowledged: a goroutine in a
            // loop without calls kept its thread for good (4 runs in 50 of the test's program
            // at 5 kHz hung). Go takes a spurious `SIGURG` as nothing (a preemption request it
            // did not make is acknowledged and ignored; its documentation warns of them), so
            // there the timers' go on to the program too.
            if signal == libc::SIGURG && is_go_program() {
                // SAFETY: the arguments of this running handler of `signal`.
                unsafe { signals::pass_on_to_program(signal, info, uc) };
            }
        }
        None => {
            process().foreign.fetch_add(1, Relaxed);
            // SAFETY: the arguments of this running handler of `signal`.
            unsafe { signals::pass_on_to_program(signal, info, uc) };
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Whether this process runs Go's runtime (async-signal-safe: an atomic load).
#[inline]
fn is_go_program() -> bool {
    use unwind_in_process::GoRuntime;
    matches!(
        unwind_in_process::go_runtime(),
        Some(GoRuntime::Found | GoRuntime::Unknown)
    )
}

/// Stops storing samples (signals still pending are counted as [`DropReason::AfterStop`]) and
/// deletes every live thread's timer.
pub fn stop() {
    crate::alloc_sampling::disable();
    RUNNING.store(false, Release);
    for s in slots() {
        if s.record.active() {
            s.delete_timer();
        }
    }
}

/// Whether sampling is running.
pub fn running() -> bool {
    RUNNING.load(Acquire)
}

/// In a child after `fork` (async-signal-safe): the parent's threads and POSIX timers do not
/// exist here; sample nothing (allocations neither), and close the copies of the parent's perf
/// events.
pub fn disable_in_child() {
    crate::alloc_sampling::disable();
    RUNNING.store(false, Release);
    for s in slots() {
        // `try_lock`: a lock held by another thread of the parent at the fork stays held here.
        if let Ok(mut t) = s.timer.try_lock() {
            if let Some(ThreadTimer::PerfEvent { fd, .. }) = t.take() {
                timer::close_in_child(fd);
            }
        }
    }
}

/// In a child after `fork`, after [`disable_in_child`]: forgets the parent's thread records
/// and process record (shared with `record` under a session: the parent's, not this process's),
/// so that nothing here writes to them, even a stray signal of ours. The child's own records,
/// if it joins the session, are new ([`resume_in_child`]).
pub fn forget_parent_in_child() {
    let n = ALLOCATED.load(Acquire).min(MAX_THREADS);
    for r in &RECORDS[..n] {
        r.store(std::ptr::null_mut(), Release);
    }
    ALLOCATED.store(0, Release);
    PROCESS.store(
        &LOCAL_PROCESS as *const ProcessRecord as *mut ProcessRecord,
        Release,
    );
}

/// In a child after `fork` that joined the session with `record` as its process record: samples
/// the calling thread (the only one) again. False if it cannot be sampled.
///
/// # Safety
/// As [`use_process_record`].
pub unsafe fn resume_in_child(record: *mut ProcessRecord) -> bool {
    // SAFETY: the caller's promise.
    unsafe { use_process_record(record) };
    process()
        .cpu_before_sampling
        .store(clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID), Relaxed);
    RUNNING.store(true, Release);
    if start_thread_registered(true).is_some() {
        start_allocation_sampling();
        return true;
    }
    RUNNING.store(false, Release);
    false
}

/// Gives a new timer to every sampled thread whose perf event's descriptor the program closed
/// (see [`timer::lost`]), counting them. Call when the program is known to have closed the
/// profiler's descriptors (its connection to `record` was gone).
pub fn rearm_lost_timers() {
    let Some(timing) = TIMING.get() else { return };
    for (index, s) in indexed_slots() {
        if !s.record.active() {
            continue;
        }
        let mut t = s.timer.lock().unwrap_or_else(|e| e.into_inner());
        if !t.as_ref().is_some_and(timer::lost) {
            continue;
        }
        *t = None;
        let tid = s.record.tid.load(Relaxed);
        match timer::create(&timing.timer, index, tid) {
            Ok(new) => {
                *t = Some(new);
                process().timers_rearmed.fetch_add(1, Relaxed);
            }
            Err(_) => {
                process().timer_failed.fetch_add(1, Relaxed);
            }
        }
    }
}

/// Every record of this process allocated so far.
pub fn slots() -> impl Iterator<Item = &'static Slot> {
    indexed_slots().map(|(_, s)| s)
}

/// Every record allocated so far, with its index (the timer's `sigev_value`): an index whose
/// region could not be made stays empty, so a record's place among the others is not its index.
fn indexed_slots() -> impl Iterator<Item = (usize, &'static Slot)> {
    let n = ALLOCATED.load(Acquire).min(MAX_THREADS);
    RECORDS[..n].iter().enumerate().filter_map(|(i, p)| {
        // SAFETY: slots are leaked boxes, never freed.
        unsafe { p.load(Acquire).as_ref() }.map(|s| (i, s))
    })
}

/// Every thread record of this process with its ring, for the collector.
pub fn records() -> impl Iterator<Item = (&'static ThreadRecord, &'static Ring)> {
    slots().map(|s| (s.record, &s.ring))
}

/// What the per-thread counters cannot hold: threads never sampled, foreign signals, and the
/// kinds of timer used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unsampled {
    /// Threads sampled, by kind of timer (in the order of [`timer::KINDS`]).
    pub threads_by_timer: [u64; timer::KINDS.len()],
    /// Threads not sampled because every record was in use.
    pub over_limit: u64,
    /// Threads whose timer could not be created.
    pub timer_failed: u64,
    /// Threads whose record could not be shared with `record`.
    pub no_shared_region: u64,
    /// Threads whose record `record` could not be told of.
    pub not_announced: u64,
    /// Signals of our number that no timer of ours sent for the receiving thread.
    pub foreign_signals: u64,
}

/// Bytes of a thread record's region: the record, then `ring_words` words.
pub fn record_region_bytes(ring_words: usize) -> usize {
    std::mem::size_of::<ThreadRecord>() + ring_words * 8
}

/// A new zeroed record region of `ring_words` words of ring, never freed: shared with
/// `record` when this process runs under it (with the descriptor to hand over), else a block
/// of this process. Under `record`, a region that cannot be shared is none (counted): a
/// private one would be sampled into memory `record` never sees.
fn new_region(ring_words: usize) -> Option<(*mut u8, Option<std::os::fd::OwnedFd>)> {
    let bytes = record_region_bytes(ring_words);
    match crate::session::shared_thread_region(bytes) {
        Some(Ok((fd, p))) => return Some((p, Some(fd))),
        Some(Err(_)) => {
            process().no_shared_region.fetch_add(1, Relaxed);
            return None;
        }
        None => {}
    }
    let layout = std::alloc::Layout::from_size_align(bytes, 64).ok()?;
    // SAFETY: a layout of non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        process().no_shared_region.fetch_add(1, Relaxed);
        return None;
    }
    Some((p, None))
}

/// The index of a record for the calling thread: a free one, or a new one; `None` if there is
/// none (counted, by why).
/// The record this thread had and ended ([`thread_exiting`], from a
/// [`SampledThread`](crate::threads::SampledThread) dropped) while it lives on, taken back:
/// records are freed only once their thread is gone, so a thread sampled again and again (a
/// guard per request) would otherwise take a new one each time, up to the limit. Its owner and
/// tid are this thread's; the collector frees a record only from `EXITED`
/// ([`ThreadRecord::release_if_gone`]), which this takes it out of first.
fn reclaim_own_record() -> Option<usize> {
    let me = unwind_in_process::thread_pointer();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    indexed_slots()
        .find(|(_, s)| {
            s.owner.load(Relaxed) == me
                && s.record.tid.load(Relaxed) == tid
                && s.record
                    .state
                    .compare_exchange(EXITED, ACTIVE, Acquire, Relaxed)
                    .is_ok()
        })
        .map(|(i, _)| i)
}

fn claim_record(ring_words: usize) -> Option<usize> {
    for (i, s) in indexed_slots() {
        if s.record
            .state
            .compare_exchange(FREE, ACTIVE, Acquire, Relaxed)
            .is_ok()
        {
            return Some(i);
        }
    }
    let i = ALLOCATED.fetch_add(1, Relaxed);
    if i >= MAX_THREADS {
        ALLOCATED.store(MAX_THREADS, Relaxed);
        process().over_limit.fetch_add(1, Relaxed);
        return None;
    }
    let ring_words = ring_words.max(64).next_power_of_two();
    let Some((region, shared)) = new_region(ring_words) else {
        // Never published: the index stays empty (`slots` skips it); counted by `new_region`.
        return None;
    };
    // SAFETY: the region is zeroed (a valid free ThreadRecord), 64-byte aligned, at least
    // `record_region_bytes(ring_words)` long and never freed; the words follow the record.
    let (record, words) = unsafe {
        let record = &*(region as *const ThreadRecord);
        let words = std::slice::from_raw_parts(
            region.add(std::mem::size_of::<ThreadRecord>()) as *const AtomicU64,
            ring_words,
        );
        (record, words)
    };
    record.ring_words.store(ring_words as u64, Relaxed);
    record.state.store(ACTIVE, Relaxed);
    record.magic.store(THREAD_RECORD_MAGIC, Release);
    if let Some(fd) = shared {
        // A record `record` never hears of would be sampled into memory no one reads.
        if !crate::session::announce_thread(i, fd) {
            process().not_announced.fetch_add(1, Relaxed);
            return None;
        }
    }
    let ring = Ring::over(&record.ring, words)?;
    let s = Box::leak(Box::new(Slot {
        record,
        ring,
        owner: AtomicUsize::new(0),
        timer: Mutex::new(None),
        signals_at_start: AtomicU64::new(0),
        cache: AtomicPtr::new(std::ptr::null_mut()),
        cache_seen: [AtomicU64::new(0), AtomicU64::new(0)],
        scratch: Scratch::new(),
    }));
    RECORDS[i].store(s, Release);
    Some(i)
}

/// Starts sampling the calling thread: registers it with the unwinder, gives it a record and
/// starts its timer. Returns the record's index (for [`thread_exiting`]), or `None` if sampling
/// is not running or the thread cannot be sampled (counted). Not async-signal-safe.
pub fn start_thread() -> Option<usize> {
    start_thread_registered(false)
}

/// [`start_thread`], registering the thread with the unwinder unless `registered` says it is
/// (a forked child's only thread, registered in the parent: registering again would read its
/// stack's bounds again, which for a main thread means parsing `/proc/self/maps`).
fn start_thread_registered(registered: bool) -> Option<usize> {
    let timing = *TIMING.get()?;
    if !running() {
        return None;
    }
    if !(registered && unwind_in_process::is_thread_registered()) {
        unwind_in_process::register_thread().ok()?;
    }
    let index = match reclaim_own_record() {
        Some(i) => i,
        None => claim_record(timing.ring_words)?,
    };
    // SAFETY: `claim_record` returned the index of a non-null slot.
    let s = unsafe { &*RECORDS[index].load(Acquire) };
    let r = s.record;
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    r.tid.store(tid, Relaxed);
    r.work.store(0, Relaxed);
    // The handler adds the owner's cache counts from here on (before `owner` names the owner,
    // which is when the handler starts reading them).
    let cache = unwind_in_process::this_thread_cache_counts();
    s.cache_seen[0].store(cache.map_or(0, |c| c.hits()), Relaxed);
    s.cache_seen[1].store(cache.map_or(0, |c| c.misses()), Relaxed);
    s.cache.store(
        cache.map_or(std::ptr::null_mut(), |c| c as *const _ as *mut _),
        Relaxed,
    );
    s.owner.store(unwind_in_process::thread_pointer(), Release);
    s.signals_at_start.store(r.counters.signals.get(), Relaxed);
    r.cpu_at_start.store(thread_cpu_ns(tid), Relaxed);
    if !timing.cpu {
        // Allocations alone: the record and ring without a timer.
        return Some(index);
    }
    match timer::create(&timing.timer, index, tid) {
        Ok(t) => {
            if let Some(n) = process().threads_by_timer.get(t.kind()) {
                n.fetch_add(1, Relaxed);
            }
            *s.timer.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        }
        Err(_) => {
            process().timer_failed.fetch_add(1, Relaxed);
            s.owner.store(0, Relaxed);
            r.state.store(FREE, Release);
            return None;
        }
    }
    Some(index)
}

/// Ends sampling of the calling thread (from its exit path): deletes its timer, records its
/// name, and hands its record to the collector. A signal still pending finds the record intact.
pub fn thread_exiting(index: usize) {
    // SAFETY: as in `slots`.
    let Some(s) = RECORDS
        .get(index)
        .and_then(|p| unsafe { p.load(Acquire).as_ref() })
    else {
        return;
    };
    if s.owner.load(Relaxed) != unwind_in_process::thread_pointer() {
        return;
    }
    s.delete_timer();
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    for (to, from) in s.record.name.iter().zip(name) {
        to.store(from, Relaxed);
    }
    s.record.state.store(EXITED, Release);
}

impl Slot {
    /// Deletes the owner's timer, if no one has yet. For a perf event, counts the periods its
    /// clock ran that sent no signal.
    fn delete_timer(&self) {
        let Some(t) = self.timer.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let Some(period) = TIMING.get().map(|t| t.timer.period) else {
            return;
        };
        let counters = &self.record.counters;
        // Written only here, by whoever took the timer: one writer.
        let cpu = thread_cpu_ns(self.record.tid.load(Relaxed));
        counters
            .cpu_ns
            .add(cpu.saturating_sub(self.record.cpu_at_start.load(Relaxed)));
        if let Some(periods) = timer::delete(t, period) {
            let signalled = counters
                .signals
                .get()
                .wrapping_sub(self.signals_at_start.load(Relaxed));
            counters
                .perf_unsignalled
                .add(periods.saturating_sub(signalled));
        }
    }
}

impl Slot {
    /// Adds the owner's rule-cache hits and misses since the last look to the record's counters
    /// (the handler only: one writer).
    #[inline(always)]
    fn add_cache_counts(&self) {
        // SAFETY: null or the unwinder's counts of the owner's slot, which are never freed.
        let Some(cache) = (unsafe { self.cache.load(Relaxed).as_ref() }) else {
            return;
        };
        let c = &self.record.counters;
        for (now, (seen, counter)) in [cache.hits(), cache.misses()]
            .into_iter()
            .zip(self.cache_seen.iter().zip([&c.cache_hits, &c.cache_misses]))
        {
            counter.add(now.wrapping_sub(seen.load(Relaxed)));
            seen.store(now, Relaxed);
        }
    }
}

impl ThreadRecord {
    /// Whether the owning thread has exited (its record is waiting for a last drain).
    pub fn exited(&self) -> bool {
        self.state.load(Acquire) == EXITED
    }

    /// Whether a thread owns this record.
    pub fn active(&self) -> bool {
        self.state.load(Acquire) == ACTIVE
    }

    /// The name the owner had when it exited (only once [`exited`](Self::exited)).
    pub fn exit_name(&self) -> Option<String> {
        if !self.exited() {
            return None;
        }
        let name: Vec<u8> = self
            .name
            .iter()
            .map(|b| b.load(Relaxed))
            .take_while(|&b| b != 0)
            .collect();
        Some(String::from_utf8_lossy(&name).into_owned())
    }

    /// After the last drain of an exited thread's record: lets a new thread of process `pid`
    /// take it once the old one is gone from the kernel (so that no signal of its can still be
    /// handled).
    pub fn release_if_gone(&self, pid: u32) -> bool {
        if !self.exited() {
            return false;
        }
        let tid = self.tid.load(Relaxed);
        // SAFETY: signal 0 only checks that the thread exists.
        let gone = unsafe { libc::syscall(libc::SYS_tgkill, pid as libc::pid_t, tid, 0) } != 0;
        // Only from EXITED: its thread may have taken it back meanwhile (see
        // `reclaim_own_record`), with another tid.
        gone && self
            .state
            .compare_exchange(EXITED, FREE, Release, Relaxed)
            .is_ok()
    }
}

/// The signal handler: checks the signal is one of our timers' for this thread, unwinds, stores.
extern "C" fn on_signal(signal: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno; it is restored so that the
    // interrupted code never sees a change.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler.
    match unsafe { our_slot(signal, &*info) } {
        // SAFETY: as above.
        Some((s, overrun)) => unsafe { sample(s, overrun, uc) },
        None => {
            process().foreign.fetch_add(1, Relaxed);
        }
    }
    // SAFETY: as above.
    unsafe { *errno = saved };
}

/// The record of the calling thread that one of the profiler's timers sent `info` for, with the
/// expirations the kernel merged into it; `None` for any other signal (the program's own, or
/// one for a record now another thread's).
///
/// # Safety
/// `info` is the siginfo of a running SA_SIGINFO handler of `signal`.
#[inline(always)]
unsafe fn our_slot(signal: libc::c_int, info: &libc::siginfo_t) -> Option<(&'static Slot, i32)> {
    let (index, overrun) = match info.si_code {
        // SAFETY: an SI_TIMER siginfo carries the timer's sigev_value and overrun count.
        libc::SI_TIMER => unsafe { (info.si_value().sival_ptr as usize, info.si_overrun()) },
        // SAFETY: a TRAP_PERF siginfo carries the event's sig_data, the record index.
        timer::TRAP_PERF if signal == libc::SIGTRAP => (
            unsafe { timer::signal_perf_data(info) }.unwrap_or(usize::MAX),
            0,
        ),
        // SAFETY: a POLL_IN siginfo carries the descriptor.
        timer::POLL_IN => match timer::perf_owner(unsafe { timer::signal_fd(info) }) {
            Some(index) => (index, 0),
            None => (usize::MAX, 0),
        },
        _ => (usize::MAX, 0),
    };
    // SAFETY: as in `slots`.
    let slot = RECORDS
        .get(index)
        .and_then(|p| unsafe { p.load(Acquire).as_ref() });
    slot.filter(|s| s.owner.load(Relaxed) == unwind_in_process::thread_pointer())
        .map(|s| (s, overrun))
}

/// Takes a sample for `s`, the interrupted thread's record, whose timer's signal stands for
/// `overrun` more periods.
///
/// # Safety
/// `uc` is the context of a running SA_SIGINFO handler, on the thread `s` belongs to.
#[inline(always)]
unsafe fn sample(s: &Slot, overrun: i32, uc: *mut libc::c_void) {
    let c = &s.record.counters;
    c.signals.add(1);
    c.overruns.add(overrun.max(0) as u64);
    if !RUNNING.load(Acquire) {
        c.drop(DropReason::AfterStop);
        return;
    }
    let Some(scratch) = s.scratch.take() else {
        c.drop(DropReason::Busy);
        return;
    };
    let max = MAX_FRAMES_NOW.load(Relaxed);
    // `get_mut` rather than slicing: no panic path in the handler.
    let pcs = match scratch.pcs.get_mut(..max) {
        Some(p) => p,
        None => &mut scratch.pcs[..],
    };
    // Frames found by a stack scan; how each frame was found is asked for only with scanning on
    // (the walk without it keeps fewer values, and the array is not filled).
    let mut scanned = 0;
    let t0 = now_ns();
    let result = if SCANNING.load(Relaxed) {
        let trust = &mut *scratch.trust;
        // SAFETY: `uc` is this handler's context, on the interrupted thread.
        let result = unsafe { unwind_in_process::unwind_signal(uc, pcs, Some(&mut *trust)) };
        if let Ok(r) = &result {
            let found = trust.get(..r.frames).unwrap_or(trust);
            scanned = found.iter().filter(|&&t| t == Trust::Scan).count() as u64;
        }
        result
    } else {
        // SAFETY: as above.
        unsafe { unwind_in_process::unwind_signal(uc, pcs, None) }
    };
    let t1 = now_ns();
    s.add_cache_counts();
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            c.drop(DropReason::of(e));
            return;
        }
    };
    let stack = pcs.get(..result.frames).unwrap_or(pcs);
    let time = t0.wrapping_sub(EPOCH_NS.load(Relaxed));
    // The kernel checks POSIX CPU-time timers at its tick (250 Hz on many kernels), so one
    // signal may stand for several periods: the sample carries that weight.
    let weight = 1 + overrun.max(0) as u64;
    // The stop reason in the low byte, the profiler's work during the sample above it (a mark
    // that is none of the profiler's, the program having written over its record, is none).
    let work = s.record.work.load(Relaxed);
    let work = if work <= Work::ALL.len() as u64 {
        work
    } else {
        0
    };
    let stop = result.stop.index() as u64 | work << 8;
    let header = [time, stop, weight];
    if !s.ring.push(&header, stack) {
        c.drop(DropReason::RingFull);
        return;
    }
    let t2 = now_ns();
    c.stored.add(1);
    if let Some(s) = c.stops.get(result.stop.index()) {
        s.add(1);
    }
    c.frames.add(stack.len() as u64);
    c.scanned.add(scanned);
    c.unwind_ns.add(t1.wrapping_sub(t0));
    c.store_ns.add(t2.wrapping_sub(t1));
    if let Some(captures) = CAPTURES.get() {
        // SAFETY: `uc` is this handler's context, on the interrupted (registered) thread.
        unsafe { captures.capture(uc, stack, result.stop) };
    }
}

/// The calling thread's record, through `cache` (its index plus one, 0 if not looked up yet),
/// which is updated when the thread's record is another.
#[inline]
fn slot_through(cache: &AtomicUsize) -> Option<&'static Slot> {
    let me = unwind_in_process::thread_pointer();
    let ours = |s: &&Slot| s.record.active() && s.owner.load(Relaxed) == me;
    let cached = cache.load(Relaxed).checked_sub(1);
    // SAFETY: as in `slots`.
    let hit = cached.and_then(|i| unsafe { RECORDS.get(i)?.load(Acquire).as_ref() });
    if let Some(s) = hit.filter(ours) {
        return Some(s);
    }
    let (i, s) = indexed_slots().find(|(_, s)| ours(s))?;
    cache.store(i + 1, Relaxed);
    Some(s)
}

/// Stores a sample of an allocation of `size` bytes made by the calling thread, with `id`, its
/// entry in the live table (0 if not tracked): its stack from here, of which the first `skip`
/// frames are the sampling path's and the allocator hook's. `slot_cache` keeps the thread's
/// record index between calls. Whether it was stored; if not, counted by
/// reason in the process record.
///
/// Async-signal-safe: no allocation, lock, system call or panic (what the signal handler
/// does).
#[inline(never)]
pub fn sample_allocation(slot_cache: &AtomicUsize, size: u64, id: u64, skip: usize) -> bool {
    let p = process();
    if !RUNNING.load(Acquire) {
        p.alloc_dropped(AllocDrop::AfterStop);
        return false;
    }
    let Some(s) = slot_through(slot_cache) else {
        p.alloc_dropped(AllocDrop::ThreadNotSampled);
        return false;
    };
    if s.record.work.load(Relaxed) != 0 {
        p.alloc_dropped(AllocDrop::ProfilerWork);
        return false;
    }
    let Some(scratch) = s.scratch.take() else {
        p.alloc_dropped(AllocDrop::Busy);
        return false;
    };
    let max = MAX_FRAMES_NOW.load(Relaxed);
    let pcs = match scratch.pcs.get_mut(..max) {
        Some(p) => p,
        None => &mut scratch.pcs[..],
    };
    let t0 = now_ns();
    let result = unwind_in_process::unwind_here(pcs, None);
    s.add_cache_counts();
    let Ok(result) = result else {
        p.alloc_dropped(AllocDrop::Unwinder);
        return false;
    };
    // The sampling path's and the hook's frames are left out here, not by the collector: the
    // ring holds fewer words.
    let stack = pcs.get(skip..result.frames).unwrap_or_default();
    let time = t0.wrapping_sub(EPOCH_NS.load(Relaxed));
    let kind = result.stop.index() as u64 | ALLOC_RECORD << 16;
    let header = [time, kind, size, id];
    if !s.ring.push(&header, stack) {
        p.alloc_dropped(AllocDrop::RingFull);
        return false;
    }
    p.alloc_sampled.fetch_add(1, Relaxed);
    p.alloc_ns.fetch_add(now_ns().wrapping_sub(t0), Relaxed);
    true
}

/// A record of a thread's ring, decoded.
pub enum Record<'a> {
    /// A timer's sample.
    Cpu(RawSample<'a>),
    /// A sampled allocation.
    Allocation(RawAllocation<'a>),
}

/// A sampled allocation, as its record has it.
pub struct RawAllocation<'a> {
    /// Nanoseconds from the start of sampling.
    pub time_ns: u64,
    /// How the walk ended.
    pub stop: StopReason,
    /// The bytes asked for.
    pub size: u64,
    /// Its id in the live table, 0 if not tracked there.
    pub id: u64,
    /// The PCs: the return address into the allocating code first.
    pub pcs: &'a [u64],
}

/// Decodes a record of a thread's ring (see [`decode`] for a timer's sample).
pub fn decode_record(record: &[u64]) -> Option<Record<'_>> {
    let kind = (*record.get(1)? >> 16) & 0xff;
    match kind {
        CPU_RECORD => decode(record).map(Record::Cpu),
        ALLOC_RECORD => {
            let [time_ns, stop, size, id, pcs @ ..] = record else {
                return None;
            };
            Some(Record::Allocation(RawAllocation {
                time_ns: *time_ns,
                stop: *StopReason::ALL.get((stop & 0xff) as usize)?,
                size: *size,
                id: *id,
                pcs,
            }))
        }
        _ => None,
    }
}

/// A decoded ring record.
pub struct RawSample<'a> {
    /// Nanoseconds from the start of sampling.
    pub time_ns: u64,
    /// How the walk ended.
    pub stop: StopReason,
    /// The sampling periods it stands for: 1, plus the expirations the kernel merged into it.
    pub weight: u64,
    /// The PCs, leaf first.
    pub pcs: &'a [u64],
    /// The profiler's own work the thread was doing, if any.
    pub work: Option<Work>,
}

/// Decodes a record written by the handler.
pub fn decode(record: &[u64]) -> Option<RawSample<'_>> {
    let (&time_ns, rest) = record.split_first()?;
    let (&stop, rest) = rest.split_first()?;
    let (&weight, pcs) = rest.split_first()?;
    if (stop >> 16) & 0xff != CPU_RECORD {
        return None;
    }
    let work = match stop >> 8 {
        0 => None,
        mark => Some(*Work::ALL.get(usize::try_from(mark - 1).ok()?)?),
    };
    Some(RawSample {
        time_ns,
        stop: *StopReason::ALL.get((stop & 0xff) as usize)?,
        weight,
        pcs,
        work,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_reasons_line_up_with_counters() {
        assert_eq!(
            DropReason::ALL.len(),
            ThreadCounters::default().dropped.len()
        );
        assert_eq!(DropReason::ALL[3], DropReason::RingFull);
        assert_eq!(DropReason::ALL[4], DropReason::AfterStop);
        assert_eq!(StopReason::ALL.len(), ThreadCounters::default().stops.len());
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        let c = ThreadCounters::default();
        c.drop(DropReason::RingFull);
        c.drop(DropReason::RingFull);
        c.drop(DropReason::AfterStop);
        let counts: Vec<u64> = c.dropped.iter().map(Counter::get).collect();
        assert_eq!(counts, [0, 0, 0, 2, 1]);
    }
}
