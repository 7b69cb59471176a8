//! The collector: drains the per-thread rings of one process and, at the end, symbolizes
//! everything into a [`Profile`]. It runs in the profiler's own thread of the program
//! ([`InProcess`], which also keeps the rule table current as modules come and go), or in the
//! `record` process, fed through memory shared with the program ([`crate::session`]).
//!
//! In the program, module changes are seen two ways, both off the signal path: the unwinder's count of walks
//! that met a PC in no known module ([`unwind_in_process::outside_modules`]), which catches a
//! `dlopen` at the first sample in the new code, and the dynamic loader's own counts of loads
//! and unloads (`dlpi_adds`/`dlpi_subs`), which catch a `dlclose`. Each distinct stack has its
//! PCs attributed to modules when it is drained, a few milliseconds after it was taken, so a
//! module unloaded later keeps its samples.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::profile::{
    Counters, Frame, Location, Module, Profile, Sample, Thread, Total, TIMELINE_SAMPLES,
};
use crate::ring::Ring;
use crate::sampler::{self, DropReason, ProcessRecord, ThreadRecord, Work};
use crate::symbolize::{SymbolSources, Symbolizer};
use unwind_in_process::StopReason;

/// A drained sample, kept in the timeline (24 bytes: a million of them is 24 MiB).
struct Drained {
    time_ns: u64,
    tid: i32,
    /// Index into the collector's stacks.
    stack: u32,
    weight: u32,
    /// The samples it stands for in a thinned timeline (a power of two).
    represents: u32,
}

/// The timeline (see [`Profile::samples`]): every sample while it has room, then one in
/// `stride`; when full, every other sample is dropped, the rest stand for twice as many, and
/// `stride` doubles. Memory stays at `cap` samples however long the run.
struct Timeline {
    samples: Vec<Drained>,
    cap: usize,
    /// Samples offered so far.
    offered: u64,
    stride: u64,
}

impl Timeline {
    fn new(cap: usize) -> Self {
        Timeline {
            samples: Vec::new(),
            cap: cap.max(2),
            offered: 0,
            stride: 1,
        }
    }

    /// Offers a sample (its `represents` is set here); returns true if the timeline was thinned.
    fn offer(&mut self, mut sample: Drained) -> bool {
        // Sample `index` (from 0) is kept while `index % stride == 0`: the kept ones stay one
        // stride apart as the stride doubles.
        let index = self.offered;
        self.offered += 1;
        if !index.is_multiple_of(self.stride) {
            return false;
        }
        let mut thinned = false;
        if self.samples.len() >= self.cap {
            let mut i = 0usize;
            self.samples.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            for s in &mut self.samples {
                s.represents = s.represents.saturating_mul(2);
            }
            self.stride *= 2;
            thinned = true;
            if !index.is_multiple_of(self.stride) {
                return true;
            }
        }
        sample.represents = u32::try_from(self.stride).unwrap_or(u32::MAX);
        self.samples.push(sample);
        thinned
    }
}

/// A stack's PCs (leaf first) with their modules.
type Resolved = Arc<[(u64, Option<usize>)]>;

/// Samples and periods of one (thread, stack).
type Counts = HashMap<usize, (u64, u64)>;

/// Samples and periods by thread and stack, the stack itself (it outlives a period's cut).
type WindowCounts = HashMap<(i32, Resolved), (u64, u64)>;

/// Adds `from`'s samples and periods to `into`'s, stack by stack.
fn add_counts(into: &mut Counts, from: &Counts) {
    for (&stack, &(n, periods)) in from {
        let e = into.entry(stack).or_default();
        e.0 += n;
        e.1 += periods;
    }
}

/// How many exited threads keep totals of their own; those that exit after them are counted
/// with the others of their name (a [`Thread`] with tid 0), so that a run that starts and ends
/// threads all along does not grow its totals.
pub const EXITED_THREADS_KEPT: usize = 1024;

/// How many stacks with a PC in no module the collector keeps looking up again as modules are
/// added (code generated at run time may give many, which are never resolved).
const UNRESOLVED_KEPT: usize = 4096;

/// The most frames the distinct stacks of one collector hold (about 100 MiB with the maps
/// that find them; cc1 compiling for a minute needs about a million): past it, a sample with a
/// stack not seen before is dropped and counted, so that a process writing random stacks into
/// its rings cannot grow `record` without bound.
pub const MAX_STACK_FRAMES: usize = 1 << 22;

/// The most timer periods one sample may stand for: the kernel's count of merged expirations
/// is an `int`.
pub const MAX_WEIGHT: u64 = 1 << 31;

/// The address that stands for the profiler's own [`Work`] in a stack (past every address a
/// module of a program can have): the frame the profile names `[unwind-profiler] WHAT`.
const WORK_PC: u64 = u64::MAX - 0xfff;

/// The address put before an allocation's stack (past every address a module can have, below
/// [`WORK_PC`]'s): its stacks are kept apart from the timers' samples', and its first frame is
/// then read as the return address it is, not as an interrupted instruction.
const ALLOC_PC: u64 = WORK_PC - 0x1000;

/// Sampled allocations the collector keeps for counting what is live, beyond which it asks the
/// live table which are ([`Collector::prune_heap`]).
const PENDING_KEPT: usize = 2 * crate::alloc_sampling::LIVE_CAPACITY;

/// What the collector has gathered of sampled allocations.
#[derive(Default)]
struct HeapCounts {
    /// The mean bytes between sample points (0: allocations not sampled).
    mean: u64,
    /// By stack: samples, and the objects and bytes they stand for.
    sites: HashMap<usize, (u64, f64, f64)>,
    /// The samples whose allocations may still be live, by id: their stack, objects and bytes.
    pending: HashMap<u64, (usize, f64, f64)>,
    /// Samples drained.
    sampled: u64,
}

/// The work a stack's address stands for, if it is one of [`WORK_PC`]'s.
fn work_of(pc: u64) -> Option<Work> {
    Work::ALL
        .get(usize::try_from(pc.checked_sub(WORK_PC)?).ok()?)
        .copied()
}

/// The name of the frame that stands for `work`.
pub fn work_frame(work: Work) -> String {
    format!("[unwind-profiler] {}", work.name())
}

/// What the collector has gathered so far.
/// The most JIT functions' names a process keeps (an ART process names tens of thousands):
/// with names of at most 512 bytes, what a process can make `record` hold is bounded (64 MiB).
pub const JIT_FUNCTIONS_KEPT: usize = 1 << 17;

pub struct Collector {
    /// Every module seen, in order of first sight.
    modules: Vec<Module>,
    keys: HashMap<(String, u64, u64), usize>,
    /// The modules loaded now (indices into `modules`), sorted by start address.
    current: Vec<usize>,
    /// Bumped whenever `current` changes.
    epoch: u32,
    /// The stacks drained since `current` last changed, by their PCs. Emptied when it changes,
    /// since the same PCs may then lie in other modules. FxHash: hashing a 35-deep stack with
    /// std's SipHash took most of the collector's time per sample.
    stack_ids: HashMap<Vec<u64>, usize, rustc_hash::FxBuildHasher>,
    /// Each distinct stack: its PCs (leaf first) with their modules.
    stacks: Vec<Resolved>,
    /// The same stacks by their resolved PCs, never emptied: a stack seen again after the
    /// modules changed (a `dlopen` elsewhere) is the same stack, and a run that loads and
    /// unloads libraries all along does not grow its stacks.
    resolved_ids: HashMap<Resolved, usize, rustc_hash::FxBuildHasher>,
    /// Stacks with a PC in no module when drained (at most [`UNRESOLVED_KEPT`]), looked up
    /// again when modules are added: a sample in a library's constructor, which runs inside
    /// `dlopen` before the new module is announced.
    unresolved: Vec<usize>,
    timeline: Timeline,
    /// Exact totals of the threads that have not exited, by tid, then stack.
    live: HashMap<i32, Counts>,
    /// Exact totals of the first [`EXITED_THREADS_KEPT`] threads that exited, by tid, then
    /// stack.
    exited: HashMap<i32, Counts>,
    /// Exact totals of the threads that exited after those, by name, then stack.
    exited_by_name: HashMap<String, Counts>,
    /// Threads that had a sample.
    threads_seen: u64,
    /// The names of the threads that had a sample and are alive, kept apart in `exited`, or in
    /// the timeline (a program that starts threads all along names far more threads than it
    /// has samples of).
    names: HashMap<i32, String>,
    /// The functions the process's JIT compilers named through the GDB JIT interface, by
    /// start (a later name for the same start wins: code freed and reused), at most
    /// [`JIT_FUNCTIONS_KEPT`]; those past it are counted in `jit_functions_dropped`.
    jit_functions: BTreeMap<u64, (u64, String)>,
    jit_functions_dropped: u64,
    /// CPU time spent draining (and, in the program, refreshing), by the draining threads'
    /// clocks.
    busy: Duration,
    /// When sampling started (wall clock).
    start_time: SystemTime,
    interval: Duration,
    wall_clock: bool,
    /// Frames in `stacks` (see [`MAX_STACK_FRAMES`]).
    stack_frames: usize,
    /// The records whose ring held something that cannot be right, by address: never drained
    /// again (what else their process wrote there is not to be trusted either).
    cut_off: HashSet<usize>,
    /// What was dropped of what the rings held, by what, with a count each.
    refused: BTreeMap<String, u64>,
    /// An address in the profiler's own library, when it is one of its own (preloaded): a
    /// sample of the profiler's work ends at the outermost frame there.
    own_code: Option<u64>,
    /// Samples of the profiler's work, by kind (in the order of [`Work::ALL`]).
    work_samples: [u64; Work::ALL.len()],
    /// When the current period started, once the first was cut ([`Collector::cut_period`]).
    period_start: Option<SystemTime>,
    /// A window being counted on its own ([`Collector::start_window`]): by thread and stack
    /// (the stack itself, which outlives a period's cut), when it started.
    window: Option<(WindowCounts, SystemTime)>,
    /// Sampled allocations.
    heap: HeapCounts,
}

/// The process a [`Collector`] collects from, as its profile names it.
pub struct ProcessInfo<'a> {
    /// Its process id.
    pub pid: u32,
    /// Its executable's path.
    pub program: String,
    /// How long it was sampled.
    pub duration: Duration,
    /// Its process-wide counters and table figures.
    pub record: &'a ProcessRecord,
    /// CPU time of threads whose timers were never deleted, which their records do not count
    /// (seen by `record` from outside the process).
    pub unended_cpu: Duration,
    /// The process's CPU time since sampling started, of it what no sampled thread's clock
    /// counted, and its CPU time since it started, at `record`'s last look (see
    /// [`Counters::process_cpu`], [`Counters::lifetime_cpu`]); `None` if not known.
    pub cpu: Option<(Duration, Duration, Duration)>,
}

/// The collector of the program's own thread: a [`Collector`] of this process, which also keeps
/// the rule table current.
pub struct InProcess {
    /// What was drained.
    pub collector: Collector,
    outside_seen: u64,
    /// No refresh for an outside-module PC before this (backs off when refreshes find
    /// nothing new, as for JIT code).
    next_outside_refresh: Instant,
    outside_backoff: Duration,
    loader_counts: (u64, u64),
    /// When sampling started (for the duration).
    started: Instant,
    /// When the current period started (see [`InProcess::cut_period`]).
    period_started: Instant,
    /// Kept from one profile (or period) to the next: each address is named once.
    symbolizer: Symbolizer,
}

/// The dynamic loader's counts of objects loaded and unloaded so far.
pub fn loader_counts() -> (u64, u64) {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        out: *mut libc::c_void,
    ) -> libc::c_int {
        let needed = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8;
        if size >= needed {
            // SAFETY: the loader passes a valid info of `size` bytes, which covers both
            // counts, and `out` is the pair below.
            unsafe { *(out as *mut (u64, u64)) = ((*info).dlpi_adds, (*info).dlpi_subs) };
        }
        1
    }
    let mut counts = (0u64, 0u64);
    // SAFETY: the callback only reads the info it is given and writes `counts`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut counts as *mut (u64, u64)).cast()) };
    counts
}

/// A build id as lowercase hex, as profiles and file names carry it.
pub(crate) fn hex(id: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(id.len() * 2);
    for &b in id {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The path a profile gives module `name`: the vdso, which the loader lists by its soname
/// (`linux-vdso.so.1`, `linux-gate.so.1`) and which has no file, is `[vdso]`, as perf and
/// `/proc/PID/maps` call it.
pub fn profile_path(name: &str) -> String {
    if !name.contains('/') && (name.starts_with("linux-vdso") || name.starts_with("linux-gate")) {
        "[vdso]".to_owned()
    } else {
        name.to_owned()
    }
}

/// The modules of the rule table published now, as the profile describes them.
pub fn modules_now() -> Vec<Module> {
    unwind_in_process::loaded_modules()
        .into_iter()
        .map(|m| Module {
            path: profile_path(&m.name),
            start: m.start,
            end: m.end,
            bias: m.bias,
            file_offset: m.file_offset,
            build_id: m.build_id.as_deref().map(hex).unwrap_or_default(),
            generated: m.kind == unwind_in_process::ModuleKind::Anonymous,
        })
        .collect()
}

impl InProcess {
    /// A collector for the table `init` just built, for sampling that starts now with timers
    /// of period `interval`, counting wall-clock time if `wall_clock`.
    pub fn new(interval: Duration, wall_clock: bool, sources: SymbolSources) -> InProcess {
        let mut collector = Collector::new(interval, wall_clock, SystemTime::now());
        collector.set_modules(modules_now());
        collector.add_jit_functions(unwind_in_process::jit_functions());
        // The preload library used alone: its work in the program's threads is its own.
        let record = sampler::process();
        if record.preloaded.load(std::sync::atomic::Ordering::Relaxed) != 0 {
            collector.set_own_code(record.trampoline.load(std::sync::atomic::Ordering::Relaxed));
        }
        InProcess {
            collector,
            outside_seen: unwind_in_process::outside_modules().count,
            next_outside_refresh: Instant::now(),
            outside_backoff: Duration::from_millis(10),
            loader_counts: loader_counts(),
            started: Instant::now(),
            period_started: Instant::now(),
            symbolizer: Symbolizer::with_sources(
                unwind_in_process::vdso_image().as_deref(),
                sources,
            ),
        }
    }

    /// Rebuilds the table if modules were loaded or unloaded since the last look, or a JIT
    /// compiler registered or removed code through the GDB JIT interface.
    fn refresh_if_modules_changed(&mut self) {
        let counts = loader_counts();
        let outside = unwind_in_process::outside_modules().count;
        let now = Instant::now();
        let loader_changed = counts != self.loader_counts;
        let outside_grew = outside != self.outside_seen && now >= self.next_outside_refresh;
        let jit_changed = unwind_in_process::jit_code_changed();
        if !loader_changed && !outside_grew && !jit_changed {
            return;
        }
        self.loader_counts = counts;
        self.outside_seen = outside;
        let epoch = self.collector.epoch;
        if let Ok(report) = unwind_in_process::refresh() {
            sampler::process().table_built(&report, true);
            self.collector.set_modules(modules_now());
            self.collector
                .add_jit_functions(unwind_in_process::jit_functions());
        }
        // PCs outside every module that a refresh does not explain (run-time generated code):
        // wait longer before the next try, up to a second.
        if outside_grew && !loader_changed && self.collector.epoch == epoch {
            self.outside_backoff = (self.outside_backoff * 2).min(Duration::from_secs(1));
        } else {
            self.outside_backoff = Duration::from_millis(10);
        }
        self.next_outside_refresh = now + self.outside_backoff;
    }

    /// One collection step: keeps the table current, then drains every ring.
    pub fn tick(&mut self) {
        let start = thread_cpu();
        self.refresh_if_modules_changed();
        let record = sampler::process();
        self.collector
            .set_alloc_mean(record.alloc_mean.load(std::sync::atomic::Ordering::Relaxed));
        self.collector.drain(sampler::records(), None);
        self.collector.prune_heap(&record.live);
        self.collector.busy += thread_cpu().saturating_sub(start);
    }

    /// Symbolizes everything gathered into a profile of the running program.
    pub fn finish(&mut self) -> Profile {
        let info = this_process(self.started.elapsed());
        self.collector
            .finish(sampler::records(), &info, &mut self.symbolizer)
    }

    /// The profile of the period since the last cut (or since sampling started), after
    /// draining the rings once more; then starts the next (see [`Collector::cut_period`]).
    pub fn cut_period(&mut self) -> Profile {
        self.tick();
        self.symbolizer.start_period();
        let now = Instant::now();
        let info = this_process(now.duration_since(self.period_started));
        self.period_started = now;
        self.collector.cut_period(
            sampler::records(),
            &info,
            &mut self.symbolizer,
            SystemTime::now(),
        )
    }

    /// How many times the symbolizer emptied its cache for holding too many addresses.
    pub fn symbol_cache_resets(&self) -> u64 {
        self.symbolizer.cache_resets()
    }

    /// Starts a window of its own ([`Collector::start_window`]); `false` if one runs.
    pub fn start_window(&mut self) -> bool {
        self.tick();
        self.collector.start_window(SystemTime::now())
    }

    /// The profile of the window started by [`start_window`](Self::start_window), which
    /// ends, after draining the rings once more.
    pub fn end_window(&mut self) -> Option<Profile> {
        self.tick();
        let started = self.collector.window.as_ref()?.1;
        let info = this_process(started.elapsed().unwrap_or_default());
        self.collector
            .end_window(sampler::records(), &info, &mut self.symbolizer)
    }
}

impl Collector {
    /// An empty collector for sampling that started at `start_time` with timers of period
    /// `interval`, counting wall-clock time if `wall_clock`.
    pub fn new(interval: Duration, wall_clock: bool, start_time: SystemTime) -> Collector {
        Collector {
            modules: Vec::new(),
            keys: HashMap::new(),
            current: Vec::new(),
            epoch: 0,
            stack_ids: HashMap::default(),
            stacks: Vec::new(),
            resolved_ids: HashMap::default(),
            unresolved: Vec::new(),
            timeline: Timeline::new(TIMELINE_SAMPLES),
            live: HashMap::new(),
            exited: HashMap::new(),
            exited_by_name: HashMap::new(),
            threads_seen: 0,
            names: HashMap::new(),
            jit_functions: BTreeMap::new(),
            jit_functions_dropped: 0,
            busy: Duration::ZERO,
            start_time,
            interval,
            wall_clock,
            stack_frames: 0,
            cut_off: HashSet::new(),
            refused: BTreeMap::new(),
            own_code: None,
            work_samples: [0; Work::ALL.len()],
            period_start: None,
            window: None,
            heap: HeapCounts::default(),
        }
    }

    /// Sets the mean bytes between sampled allocations (the process record's `alloc_mean`; 0:
    /// not sampled), by which each sample is weighed.
    pub fn set_alloc_mean(&mut self, mean: u64) {
        self.heap.mean = mean.min(1 << 30);
    }

    /// Forgets the sampled allocations that `live` (the process's table) no longer holds, once
    /// more than twice the table's capacity are kept: what the collector keeps stays bounded however
    /// many allocations a run samples.
    pub fn prune_heap(&mut self, live: &crate::alloc_sampling::LiveHeap) {
        if self.heap.pending.len() > PENDING_KEPT {
            self.prune_heap_now(live);
        }
    }

    fn prune_heap_now(&mut self, live: &crate::alloc_sampling::LiveHeap) {
        let mut still = HashMap::with_capacity(self.heap.pending.len().min(PENDING_KEPT));
        live.live_ids(|id| {
            if let Some(v) = self.heap.pending.remove(&id) {
                still.insert(id, v);
            }
        });
        self.heap.pending = still;
    }

    /// Counts a drained allocation sample.
    fn add_allocation(&mut self, a: &sampler::RawAllocation<'_>) -> bool {
        let pcs: Vec<u64> = std::iter::once(ALLOC_PC)
            .chain(a.pcs.iter().copied())
            .collect();
        let Some(stack) = self.stack_id(&pcs) else {
            return false;
        };
        let (objects, bytes) = crate::byte_sampling::estimate(a.size, self.heap.mean.max(1));
        let site = self.heap.sites.entry(stack).or_default();
        site.0 += 1;
        site.1 += objects;
        site.2 += bytes;
        self.heap.sampled += 1;
        if a.id != 0 {
            self.heap.pending.insert(a.id, (stack, objects, bytes));
        }
        true
    }

    /// Starts counting a window of its own, beside the totals and periods (the pull endpoint's
    /// `seconds=N`); `false` if one is being counted.
    pub fn start_window(&mut self, now: SystemTime) -> bool {
        if self.window.is_some() {
            return false;
        }
        self.window = Some((HashMap::new(), now));
        true
    }

    /// The profile of the window started by [`start_window`](Self::start_window), which ends
    /// (`None` if none was started). `info.duration` is the window's.
    pub fn end_window<'r>(
        &mut self,
        records: impl Iterator<Item = (&'r ThreadRecord, &'r Ring)>,
        info: &ProcessInfo<'_>,
        symbolizer: &mut Symbolizer,
    ) -> Option<Profile> {
        let (counts, start) = self.window.take()?;
        let mut window = Collector::new(self.interval, self.wall_clock, self.start_time);
        window.set_periodic();
        window.modules = self.modules.clone();
        window.names = self.names.clone();
        window.jit_functions = self.jit_functions.clone();
        window.own_code = self.own_code;
        window.busy = self.busy;
        window.refused = self.refused.clone();
        for ((tid, stack), (samples, periods)) in counts {
            let id = *window.resolved_ids.entry(stack.clone()).or_insert_with(|| {
                window.stacks.push(stack);
                window.stacks.len() - 1
            });
            let e = window.live.entry(tid).or_default().entry(id).or_default();
            e.0 += samples;
            e.1 += periods;
        }
        window.threads_seen = window.live.len() as u64;
        let mut profile = window.finish(records, info, symbolizer);
        profile.start = start;
        Some(profile)
    }

    /// Makes this a collector of periods ([`Collector::cut_period`]): its timeline keeps no
    /// samples (a period's profile is its totals).
    pub fn set_periodic(&mut self) {
        self.timeline = Timeline::new(0);
    }

    /// The profile of the current period (since the last cut, or since sampling started): what
    /// was drained since, symbolized; then starts the next period, with no stacks, totals or
    /// names kept, so that the collector's memory is that of one period's distinct stacks
    /// (at most [`MAX_STACK_FRAMES`] frames) however long the run. Its counters are the run's
    /// so far. `info.duration` is the period's.
    pub fn cut_period<'r>(
        &mut self,
        records: impl Iterator<Item = (&'r ThreadRecord, &'r Ring)>,
        info: &ProcessInfo<'_>,
        symbolizer: &mut Symbolizer,
        now: SystemTime,
    ) -> Profile {
        let mut profile = self.finish(records, info, symbolizer);
        profile.start = self.period_start.unwrap_or(self.start_time);
        self.period_start = Some(now);
        // The stacks of allocations that may still be live outlast the period.
        let pending_stacks: BTreeMap<usize, Resolved> = self
            .heap
            .pending
            .values()
            .filter_map(|&(s, _, _)| Some((s, self.stacks.get(s)?.clone())))
            .collect();
        self.stack_ids.clear();
        self.stacks.clear();
        self.resolved_ids.clear();
        self.unresolved.clear();
        self.stack_frames = 0;
        let mut moved = HashMap::new();
        for (old, resolved) in pending_stacks {
            moved.insert(old, self.stacks.len());
            self.stack_frames += resolved.len();
            self.resolved_ids
                .insert(resolved.clone(), self.stacks.len());
            self.stacks.push(resolved);
        }
        self.heap
            .pending
            .retain(|_, v| moved.get(&v.0).map(|&s| v.0 = s).is_some());
        self.heap.sites.clear();
        self.heap.sampled = 0;
        self.live.clear();
        self.exited.clear();
        self.exited_by_name.clear();
        self.names.clear();
        self.timeline = Timeline::new(self.timeline.cap.min(TIMELINE_SAMPLES));
        profile
    }

    /// When the current period started: sampling's start before the first cut.
    pub fn period_start(&self) -> SystemTime {
        self.period_start.unwrap_or(self.start_time)
    }

    /// Says that the profiler runs in the process as a library of its own, at `address` (the
    /// samples of its own work then show it as one frame, see [`Work`]).
    pub fn set_own_code(&mut self, address: u64) {
        self.own_code = Some(address);
    }

    /// Whether the leaf of `pcs` is the profiler's own code: whatever the thread was doing then
    /// (its hooks' code outside a marked [`Work`], the threads' trampoline before or after the
    /// program's start routine) was the profiler's.
    fn own_leaf(&self, pcs: &[u64]) -> bool {
        let (Some(own), Some(&leaf)) = (self.own_code, pcs.first()) else {
            return false;
        };
        let ours = self.module_of(own, true);
        ours.is_some() && self.module_of(leaf, true) == ours
    }

    /// `pcs` of a sample taken during the profiler's `work`: the frames from the leaf through
    /// the outermost one of the profiler's library become one that names the work, under the
    /// program's call that led to it (its `dlopen`, say). Without the library's frames in the
    /// stack, that frame is put over the whole stack.
    fn as_work(&self, pcs: &[u64], work: Work) -> Vec<u64> {
        let ours = self.own_code.and_then(|a| self.module_of(a, true));
        let outermost = ours.and_then(|m| {
            pcs.iter()
                .enumerate()
                .rposition(|(i, &pc)| self.module_of(pc, i == 0) == Some(m))
        });
        let callers = outermost.map_or(pcs, |j| pcs.get(j + 1..).unwrap_or_default());
        std::iter::once(WORK_PC + work as u64)
            .chain(callers.iter().copied())
            .collect()
    }

    /// Counts `n` of what `what` says was dropped.
    pub fn refuse(&mut self, what: String, n: u64) {
        *self.refused.entry(what).or_default() += n;
    }

    /// Makes `modules` the modules loaded now: stacks drained from here on are attributed to
    /// them.
    pub fn set_modules(&mut self, modules: Vec<Module>) {
        let mut current = Vec::new();
        for m in modules {
            let key = (m.path.clone(), m.start, m.bias);
            let next = self.modules.len();
            let i = *self.keys.entry(key).or_insert(next);
            if i == next {
                self.modules.push(m);
            }
            current.push(i);
        }
        current.sort_by_key(|&i| self.modules[i].start);
        if current != self.current {
            self.current = current;
            self.epoch += 1;
            self.stack_ids.clear();
            self.resolve_again();
        }
    }

    /// The distinct modules seen so far, and the bytes of their paths.
    pub fn modules_known(&self) -> (usize, usize) {
        (
            self.modules.len(),
            self.modules.iter().map(|m| m.path.len()).sum(),
        )
    }

    /// Whether `m` is a module seen before (the same path at the same place).
    pub fn knows(&self, m: &Module) -> bool {
        self.keys.contains_key(&(m.path.clone(), m.start, m.bias))
    }

    /// Looks the PCs of the stacks that had some in no module up again in the current modules.
    fn resolve_again(&mut self) {
        for id in std::mem::take(&mut self.unresolved) {
            let Some(stack) = self.stacks.get(id).cloned() else {
                continue;
            };
            let again: Resolved = stack
                .iter()
                .enumerate()
                .map(|(i, &(pc, m))| (pc, m.or_else(|| self.module_of(pc, i == 0))))
                .collect();
            if again.iter().any(|&(_, m)| m.is_none()) {
                self.unresolved.push(id);
            }
            if again != stack {
                self.resolved_ids.remove(&stack);
                self.resolved_ids.entry(again.clone()).or_insert(id);
                self.stacks[id] = again;
            }
        }
    }

    /// Adds `cpu` to the time spent collecting.
    pub fn add_busy(&mut self, cpu: Duration) {
        self.busy += cpu;
    }

    /// The current module containing `pc` (for a return address, the byte before it, unless a
    /// module starts at the return address: qemu-user's aarch64 signal trampoline, `[sigreturn]`,
    /// a page of its own whose first byte is the return address of the handler's frame).
    fn module_of(&self, pc: u64, leaf: bool) -> Option<usize> {
        if let Some(&m) = self.current.iter().find(|&&m| self.modules[m].start == pc) {
            if !leaf {
                return Some(m);
            }
        }
        let probe = crate::symbolize::code_address(pc, leaf);
        let i = self
            .current
            .partition_point(|&m| self.modules[m].start <= probe)
            .checked_sub(1)?;
        let m = self.current[i];
        (probe < self.modules[m].end).then_some(m)
    }

    /// Drains the rings of `records`, threads of process `pid` (`None`: this one).
    pub fn drain<'r>(
        &mut self,
        records: impl Iterator<Item = (&'r ThreadRecord, &'r Ring)>,
        pid: Option<u32>,
    ) {
        let proc_dir = match pid {
            Some(pid) => format!("/proc/{pid}"),
            None => "/proc/self".to_owned(),
        };
        let pid = pid.unwrap_or_else(std::process::id);
        for (r, ring) in records {
            let exited = r.exited();
            let tid = r.tid.load(std::sync::atomic::Ordering::Relaxed);
            let id = r as *const ThreadRecord as usize;
            if !self.cut_off.contains(&id) {
                let mut bad = false;
                let mut over_limit = 0;
                let drained = ring.drain(sampler::MAX_RECORD_WORDS, |record| {
                    let s = match sampler::decode_record(record) {
                        Some(sampler::Record::Cpu(s)) if (1..=MAX_WEIGHT).contains(&s.weight) => s,
                        Some(sampler::Record::Allocation(a)) => {
                            if !self.add_allocation(&a) {
                                over_limit += 1;
                            }
                            return true;
                        }
                        _ => {
                            bad = true;
                            return false;
                        }
                    };
                    let work = s
                        .work
                        .or_else(|| self.own_leaf(s.pcs).then_some(Work::Hook));
                    let stack = match work {
                        Some(work) => {
                            self.work_samples[work as usize] += 1;
                            let pcs = self.as_work(s.pcs, work);
                            self.stack_id(&pcs)
                        }
                        None => self.stack_id(s.pcs),
                    };
                    match stack {
                        Some(stack) => self.add(tid, s.time_ns, s.weight, stack),
                        None => over_limit += 1,
                    }
                    true
                });
                if over_limit > 0 {
                    self.refuse(
                        format!(
                            "samples with a new stack past {MAX_STACK_FRAMES} frames of distinct stacks (dropped)"
                        ),
                        over_limit,
                    );
                }
                let why = match drained {
                    Err(crate::ring::Corrupt::Indices) => {
                        Some("indices that cannot be right".into())
                    }
                    Err(crate::ring::Corrupt::Length(n)) => Some(format!("a record of {n} words")),
                    Ok(()) if bad => Some("a sample that cannot be right".into()),
                    Ok(()) => None,
                };
                if let Some(why) = why {
                    self.cut_off.insert(id);
                    self.refuse(
                        format!("thread rings written over ({why}): not read from there on"),
                        1,
                    );
                }
            }
            if exited {
                let name = r.exit_name().or_else(|| self.names.get(&tid).cloned());
                let sampled = self.live.contains_key(&tid) || self.exited.contains_key(&tid);
                // Its totals are kept apart for the first threads that exit; later ones join
                // those of their name, so that thread churn does not grow them.
                if let Some(counts) = self.live.remove(&tid) {
                    let merged = if self.exited.len() < EXITED_THREADS_KEPT
                        || self.exited.contains_key(&tid)
                    {
                        self.exited.entry(tid).or_default()
                    } else {
                        self.exited_by_name
                            .entry(name.clone().unwrap_or_default())
                            .or_default()
                    };
                    add_counts(merged, &counts);
                }
                if let Some(n) = name.filter(|_| sampled) {
                    self.names.insert(tid, n);
                }
                r.release_if_gone(pid);
            } else if r.active() && self.live.contains_key(&tid) && !self.names.contains_key(&tid) {
                if let Ok(n) = std::fs::read_to_string(format!("{proc_dir}/task/{tid}/comm")) {
                    self.names.insert(tid, n.trim_end().to_owned());
                }
            }
        }
    }

    /// Counts a drained sample in its thread's totals and offers it to the timeline.
    fn add(&mut self, tid: i32, time_ns: u64, weight: u64, stack: usize) {
        let counts = self.live.entry(tid).or_insert_with(|| {
            self.threads_seen += 1;
            Counts::new()
        });
        let e = counts.entry(stack).or_default();
        e.0 += 1;
        e.1 += weight;
        if let Some((window, _)) = &mut self.window {
            let e = window.entry((tid, self.stacks[stack].clone())).or_default();
            e.0 += 1;
            e.1 += weight;
        }
        let thinned = self.timeline.offer(Drained {
            tid,
            time_ns,
            weight: u32::try_from(weight).unwrap_or(u32::MAX),
            stack: u32::try_from(stack).unwrap_or(u32::MAX),
            represents: 1,
        });
        if thinned {
            // Only threads still in the timeline, alive or kept apart need their names.
            let kept: HashSet<i32> = self.timeline.samples.iter().map(|s| s.tid).collect();
            let (live, exited) = (&self.live, &self.exited);
            self.names.retain(|tid, _| {
                kept.contains(tid) || live.contains_key(tid) || exited.contains_key(tid)
            });
        }
    }

    /// The stack of `pcs`, or `None` if it is new and the stacks hold [`MAX_STACK_FRAMES`].
    fn stack_id(&mut self, pcs: &[u64]) -> Option<usize> {
        if let Some(&id) = self.stack_ids.get(pcs) {
            return Some(id);
        }
        if self.stack_frames.saturating_add(pcs.len()) > MAX_STACK_FRAMES {
            return None;
        }
        let resolved: Resolved = pcs
            .iter()
            .enumerate()
            .map(|(i, &pc)| (pc, self.module_of(pc, i == 0)))
            .collect();
        let id = match self.resolved_ids.get(&resolved) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len();
                if resolved
                    .iter()
                    .any(|&(pc, m)| m.is_none() && work_of(pc).is_none() && pc != ALLOC_PC)
                    && self.unresolved.len() < UNRESOLVED_KEPT
                {
                    self.unresolved.push(id);
                }
                self.stack_frames += resolved.len();
                self.stacks.push(resolved.clone());
                self.resolved_ids.insert(resolved, id);
                id
            }
        };
        self.stack_ids.insert(pcs.to_vec(), id);
        Some(id)
    }

    /// Samples drained so far.
    pub fn samples(&self) -> usize {
        usize::try_from(self.timeline.offered).unwrap_or(usize::MAX)
    }

    /// Notes functions the process's JIT compilers named through the GDB JIT interface
    /// ([`unwind_in_process::jit_functions`]), for the names of its generated code.
    pub fn add_jit_functions(&mut self, functions: Vec<unwind_in_process::JitFunction>) {
        for f in functions {
            if self.jit_functions.len() >= JIT_FUNCTIONS_KEPT
                && !self.jit_functions.contains_key(&f.start)
            {
                self.jit_functions_dropped += 1;
                continue;
            }
            self.jit_functions.insert(f.start, (f.end, f.name));
        }
    }

    /// Samples in the timeline now (at most [`TIMELINE_SAMPLES`]).
    pub fn timeline_samples(&self) -> usize {
        self.timeline.samples.len()
    }

    /// Symbolizes everything gathered from `records`, the thread records of the process
    /// `info` describes, into a profile of it.
    pub fn finish<'r>(
        &self,
        records: impl Iterator<Item = (&'r ThreadRecord, &'r Ring)>,
        info: &ProcessInfo<'_>,
        symbolizer: &mut Symbolizer,
    ) -> Profile {
        // The profiler's own frame in the threads it started (see `threads::trampoline`).
        let trampoline = info
            .record
            .trampoline
            .load(std::sync::atomic::Ordering::Relaxed);
        let our_module = self.module_of(trampoline, true);
        // The preload library is none of the program's code: its frames (the interposers of
        // `pthread_create` and `dlopen`, a thread's start) are left out. Linked into a program,
        // the profiler's module is the program's: only the trampoline's frame is.
        let preloaded = info
            .record
            .preloaded
            .load(std::sync::atomic::Ordering::Relaxed)
            != 0;
        let ours = our_module
            .filter(|_| !preloaded)
            .and_then(|m| symbolizer.function_bounds(&self.modules[m], trampoline))
            .unwrap_or((0, 0));
        let process = crate::symbolize::basename(&info.program).to_owned();
        let is_ours = |pc: u64, module: Option<usize>, leaf: bool| {
            if preloaded {
                return module.is_some() && module == our_module;
            }
            let at = crate::symbolize::code_address(pc, leaf);
            ours.0 <= at && at < ours.1
        };
        symbolizer.note_process(info.pid, self.start_time, &self.modules);
        symbolizer.note_jit_functions(info.pid, &self.jit_functions);
        // Locations: one per (address, module, leaf or return address).
        let mut location_ids: HashMap<(u64, Option<usize>, bool), usize> = HashMap::new();
        let mut locations = Vec::new();
        let stacks: Vec<Vec<usize>> = self
            .stacks
            .iter()
            .map(|stack| {
                stack
                    .iter()
                    .enumerate()
                    .filter(|&(i, &(pc, module))| pc != ALLOC_PC && !is_ours(pc, module, i == 0))
                    .map(|(i, &(pc, module))| {
                        let leaf = i == 0;
                        *location_ids.entry((pc, module, leaf)).or_insert_with(|| {
                            let frames = match work_of(pc).filter(|_| module.is_none()) {
                                Some(work) => vec![Frame {
                                    function: work_frame(work),
                                    file: None,
                                    line: None,
                                }],
                                None => symbolizer.frames(
                                    info.pid,
                                    module.and_then(|m| self.modules.get(m)),
                                    pc,
                                    leaf,
                                ),
                            };
                            locations.push(Location {
                                address: pc,
                                module,
                                frames,
                            });
                            locations.len() - 1
                        })
                    })
                    .collect()
            })
            .collect();
        let mut thread_ids: HashMap<i32, usize> = HashMap::new();
        let mut threads = Vec::new();
        let mut thread_of = |tid: i32| {
            *thread_ids.entry(tid).or_insert_with(|| {
                threads.push(Thread {
                    tid,
                    name: self.names.get(&tid).cloned().unwrap_or_default(),
                    pid: info.pid,
                    process: process.clone(),
                });
                threads.len() - 1
            })
        };
        let mut samples: Vec<Sample> = self
            .timeline
            .samples
            .iter()
            .map(|s| Sample {
                thread: thread_of(s.tid),
                time: Duration::from_nanos(s.time_ns),
                weight: u64::from(s.weight) * u64::from(s.represents),
                stack: s.stack as usize,
            })
            .collect();
        samples.sort_by_key(|s| (s.thread, s.time));
        let mut totals = Vec::new();
        let mut push = |thread: usize, counts: &Counts| {
            for (&stack, &(samples, periods)) in counts {
                totals.push(Total {
                    thread,
                    stack,
                    samples,
                    periods,
                });
            }
        };
        // A tid the kernel reused after its thread exited is one thread here, as in the timeline.
        let mut by_tid: BTreeMap<i32, Counts> = BTreeMap::new();
        for (&tid, counts) in self.live.iter().chain(&self.exited) {
            add_counts(by_tid.entry(tid).or_default(), counts);
        }
        for (tid, counts) in &by_tid {
            push(thread_of(*tid), counts);
        }
        let mut exited: Vec<_> = self.exited_by_name.iter().collect();
        exited.sort_by(|a, b| a.0.cmp(b.0));
        for (name, counts) in exited {
            threads.push(Thread {
                tid: 0,
                name: name.clone(),
                pid: info.pid,
                process: process.clone(),
            });
            push(threads.len() - 1, counts);
        }
        totals.sort_by_key(|t| (t.thread, t.stack));
        let names = symbolizer
            .name_sources()
            .into_iter()
            .filter(|n| self.modules.iter().any(|m| m.path == n.module))
            .collect();
        let heap = self.heap_profile(info.record);
        Profile {
            program: info.program.clone(),
            pid: info.pid,
            start: self.start_time,
            duration: info.duration,
            interval: self.interval,
            wall_clock: self.wall_clock,
            modules: self.modules.clone(),
            locations,
            stacks,
            threads,
            samples,
            totals,
            counters: {
                let mut c = self.counters(records, info.record, info.unended_cpu);
                if let Some((process, unsampled, lifetime)) = info.cpu {
                    c.process_cpu = process;
                    c.unsampled_cpu = unsampled;
                    c.lifetime_cpu = lifetime;
                }
                c
            },
            heap,
            names,
        }
    }

    /// The heap profile of what was drained, with what `record`'s live table still holds;
    /// `None` if allocations were not sampled.
    fn heap_profile(&self, record: &ProcessRecord) -> Option<crate::profile::Heap> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.heap.mean == 0 {
            return None;
        }
        // A record the program wrote over: its allocations' samples are kept, its counts and
        // live table are not read.
        static EMPTY: ProcessRecord = ProcessRecord::zero();
        let record = if record.plausible() { record } else { &EMPTY };
        let mut sites: BTreeMap<usize, crate::profile::HeapSite> = BTreeMap::new();
        let new = |stack| crate::profile::HeapSite {
            stack,
            ..Default::default()
        };
        for (&stack, &(samples, objects, bytes)) in &self.heap.sites {
            let s = sites.entry(stack).or_insert_with(|| new(stack));
            s.samples = samples;
            s.alloc_objects = objects.round() as u64;
            s.alloc_bytes = bytes.round() as u64;
        }
        let mut live: HashMap<usize, (u64, f64, f64)> = HashMap::new();
        record.live.live_ids(|id| {
            if let Some(&(stack, objects, bytes)) = self.heap.pending.get(&id) {
                let l = live.entry(stack).or_default();
                l.0 += 1;
                l.1 += objects;
                l.2 += bytes;
            }
        });
        for (stack, (samples, objects, bytes)) in live {
            let s = sites.entry(stack).or_insert_with(|| new(stack));
            s.live_samples = samples;
            s.inuse_objects = objects.round() as u64;
            s.inuse_bytes = bytes.round() as u64;
        }
        let drops = record
            .alloc_drops
            .iter()
            .zip(sampler::AllocDrop::ALL)
            .map(|(n, r)| (r.name().to_owned(), n.load(Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect();
        Some(crate::profile::Heap {
            interval: self.heap.mean,
            sites: sites.into_values().collect(),
            sampled: self.heap.sampled,
            dropped: drops,
            untracked: record.live.overflow.load(Relaxed),
            // At most a second a sample: more is a record written over.
            sample_time: Duration::from_nanos(
                record.alloc_ns.load(Relaxed).min(
                    record
                        .alloc_sampled
                        .load(Relaxed)
                        .saturating_mul(1_000_000_000),
                ),
            ),
        })
    }

    /// The counters of every record, summed, with the process's.
    fn counters<'r>(
        &self,
        records: impl Iterator<Item = (&'r ThreadRecord, &'r Ring)>,
        process: &ProcessRecord,
        unended_cpu: Duration,
    ) -> Counters {
        use std::sync::atomic::Ordering::Relaxed;
        let mut refused = self.refused.clone();
        // Counters the program wrote over are not used (and said so), rather than summed into
        // figures that cannot be right.
        // A static: the record holds the live table (over a MiB), too large for a stack.
        static ZERO: ProcessRecord = ProcessRecord::zero();
        let process = if process.plausible() {
            process
        } else {
            *refused
                .entry("process counters written over (not used)".into())
                .or_default() += 1;
            &ZERO
        };
        let mut c = Counters {
            preload_time: Duration::from_nanos(process.preload_ns.load(Relaxed)),
            table_bytes: usize::try_from(process.table_bytes.load(Relaxed)).unwrap_or(usize::MAX),
            table_rows: process.table_rows.load(Relaxed),
            refreshes: process.refreshes.load(Relaxed),
            collector_cpu: self.busy,
            stack_scanning: process.scanning.load(Relaxed) != 0,
            cpu_not_sampled: process.cpu_off.load(Relaxed) != 0,
            ..Counters::default()
        };
        let mut dropped = [0u64; DropReason::ALL.len()];
        let mut stops = [0u64; StopReason::ALL.len()];
        let (mut unwind_ns, mut store_ns, mut overruns) = (0u64, 0u64, 0u64);
        let (mut perf_unsignalled, mut cpu_ns) = (0u64, 0u64);
        let (mut cache_hits, mut cache_misses) = (0u64, 0u64);
        for (r, _) in records {
            let t = &r.counters;
            if !t.plausible() {
                *refused
                    .entry("thread counters written over (not used)".into())
                    .or_default() += 1;
                continue;
            }
            cache_hits += t.cache_hits.get();
            cache_misses += t.cache_misses.get();
            c.signals += t.signals.get();
            c.stored += t.stored.get();
            c.frames += t.frames.get();
            c.scanned_frames += t.scanned.get();
            overruns += t.overruns.get();
            perf_unsignalled += t.perf_unsignalled.get();
            cpu_ns += t.cpu_ns.get();
            unwind_ns += t.unwind_ns.get();
            store_ns += t.store_ns.get();
            for (d, x) in dropped.iter_mut().zip(&t.dropped) {
                *d += x.get();
            }
            for (s, x) in stops.iter_mut().zip(&t.stops) {
                *s += x.get();
            }
        }
        c.unwind_time = Duration::from_nanos(unwind_ns);
        c.store_time = Duration::from_nanos(store_ns);
        c.dropped = DropReason::ALL
            .iter()
            .zip(dropped)
            .map(|(r, n)| (r.name().to_owned(), n))
            .collect();
        let unsampled = process.unsampled();
        c.merged_expirations = overruns;
        c.perf_unsignalled = perf_unsignalled;
        c.sampled_cpu = Duration::from_nanos(cpu_ns) + unended_cpu;
        c.timers = crate::timer::KINDS
            .iter()
            .zip(unsampled.threads_by_timer)
            .map(|(k, n)| (k.to_string(), n))
            .collect();
        c.foreign_signals = unsampled.foreign_signals;
        c.program_actions = process.program_actions.load(Relaxed);
        c.jit_names_dropped = self.jit_functions_dropped;
        c.go_programs = match process.go_runtime.load(Relaxed) {
            1 => (1, 0),
            2 => (0, 1),
            _ => (0, 0),
        };
        c.reconnections = process.rejoins.load(Relaxed);
        c.timers_rearmed = process.timers_rearmed.load(Relaxed);
        c.threads_not_sampled = vec![
            ("thread limit".into(), unsampled.over_limit),
            ("timer could not be created".into(), unsampled.timer_failed),
            (
                "no memory for its samples: under record, a descriptor or file size limit".into(),
                unsampled.no_shared_region,
            ),
            (
                "its record could not be handed to record: the connection was gone".into(),
                unsampled.not_announced,
            ),
        ];
        c.stops = StopReason::ALL
            .iter()
            .zip(stops)
            .map(|(r, n)| (format!("{r:?}"), n))
            .collect();
        c.cache_hits = cache_hits;
        c.cache_misses = cache_misses;
        c.threads = self.threads_seen;
        c.refused = refused.into_iter().collect();
        c.profiler_work = Work::ALL
            .iter()
            .zip(self.work_samples)
            .filter(|(_, n)| *n > 0)
            .map(|(w, n)| (w.name().to_owned(), n))
            .collect();
        c
    }
}

/// The calling thread's CPU time.
pub(crate) fn thread_cpu() -> Duration {
    Duration::from_nanos(sampler::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID))
}

/// This process, as its profile names it, sampled for `duration`.
fn this_process(duration: Duration) -> ProcessInfo<'static> {
    ProcessInfo {
        pid: std::process::id(),
        program: program(),
        duration,
        record: sampler::process(),
        unended_cpu: Duration::ZERO,
        cpu: None,
    }
}

/// The running program's path.
fn program() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| std::env::args().next().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: u64) -> Drained {
        Drained {
            tid: (i % 3) as i32,
            time_ns: i,
            weight: 1,
            stack: 0,
            represents: 0,
        }
    }

    /// A process naming more JIT functions than are kept: the rest counted, the kept names
    /// bounded, a later name for a kept start still taken.
    #[test]
    fn jit_names_past_the_bound_are_counted() {
        let mut c = Collector::new(Duration::from_millis(1), false, SystemTime::now());
        let f = |i: usize, name: &str| unwind_in_process::JitFunction {
            start: 16 * i as u64,
            end: 16 * i as u64 + 8,
            name: name.into(),
        };
        c.add_jit_functions((0..JIT_FUNCTIONS_KEPT + 3).map(|i| f(i, "f")).collect());
        assert_eq!(c.jit_functions.len(), JIT_FUNCTIONS_KEPT);
        assert_eq!(c.jit_functions_dropped, 3);
        c.add_jit_functions(vec![f(5, "reused")]);
        assert_eq!(c.jit_functions[&80].1, "reused");
        assert_eq!(c.jit_functions_dropped, 3);
    }

    fn module(path: &str, start: u64, end: u64) -> Module {
        Module {
            path: path.into(),
            start,
            end,
            bias: start,
            file_offset: 0,
            build_id: String::new(),
            generated: false,
        }
    }

    /// A sample in a library's constructor (inside `dlopen`, before the library is announced)
    /// is attributed to the library once it is.
    #[test]
    fn a_pc_in_no_module_is_looked_up_again_when_modules_are_added() {
        let mut c = Collector::new(Duration::from_millis(1), false, SystemTime::now());
        c.set_modules(vec![module("/bin/main", 0x1000, 0x2000)]);
        let early = c.stack_id(&[0x5010, 0x1100]).unwrap();
        assert_eq!(c.stacks[early][0].1, None);
        assert_eq!(c.stacks[early][1].1, Some(0));
        c.set_modules(vec![
            module("/bin/main", 0x1000, 0x2000),
            module("/lib/plugin.so", 0x5000, 0x6000),
        ]);
        assert_eq!(c.stacks[early][0].1, Some(1), "the constructor's sample");
        assert!(c.unresolved.is_empty());
        // The same PCs drained now are the same stack.
        assert_eq!(c.stack_id(&[0x5010, 0x1100]), Some(early));
        // A PC that no module ever covers stays unknown, and listed.
        let jit = c.stack_id(&[0x9000]).unwrap();
        c.set_modules(vec![module("/bin/main", 0x1000, 0x2000)]);
        assert_eq!(c.stacks[jit][0].1, None);
        assert_eq!(c.unresolved, [jit]);
    }

    #[test]
    fn a_timeline_sample_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Drained>(), 24);
    }

    #[test]
    fn the_timeline_thins_evenly_and_stays_within_its_cap() {
        let mut t = Timeline::new(8);
        for i in 0..8 {
            assert!(!t.offer(sample(i)));
        }
        assert_eq!(t.samples.len(), 8);
        assert!(t.samples.iter().all(|s| s.represents == 1));
        // The ninth halves it: samples 0, 2, 4, 6 stand for two each; the ninth (8) is kept.
        assert!(t.offer(sample(8)));
        let times: Vec<u64> = t.samples.iter().map(|s| s.time_ns).collect();
        assert_eq!(times, [0, 2, 4, 6, 8]);
        assert!(t.samples.iter().all(|s| s.represents == 2));
        for i in 9..10_000 {
            t.offer(sample(i));
            assert!(t.samples.len() <= 8);
        }
        // What the kept samples stand for adds up to the samples offered, within one stride.
        let represented: u64 = t.samples.iter().map(|s| u64::from(s.represents)).sum();
        assert!(
            represented.abs_diff(10_000) < t.stride,
            "{represented} of 10000, stride {}",
            t.stride
        );
        // Evenly spread: consecutive kept samples are one stride apart.
        let times: Vec<u64> = t.samples.iter().map(|s| s.time_ns).collect();
        assert!(
            times.windows(2).all(|w| w[1] - w[0] == t.stride),
            "{times:?}"
        );
    }
}
