//! A finished profile: symbolized stacks with the counters of the run. Every output format is
//! written from this one model (see [`crate::output`]).

use std::time::{Duration, SystemTime};

/// One loaded module (executable, shared library, vdso) seen during the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// The path it was loaded from (or its soname for the vdso).
    pub path: String,
    /// First address of its code at run time.
    pub start: u64,
    /// One past its last address at run time.
    pub end: u64,
    /// Load bias: run-time address minus the address in the file.
    pub bias: u64,
    /// The file offset of `start` (for the vdso, which has no file, the offset in its image).
    pub file_offset: u64,
    /// Its GNU build id, as lowercase hex (empty if it has none).
    pub build_id: String,
}

/// One source-level frame: a function, or a function inlined into another.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The demangled function name, or `module+0xOFFSET` when nothing names it.
    pub function: String,
    /// The source file, where debug information gives one.
    pub file: Option<String>,
    /// The line in `file`, where debug information gives one.
    pub line: Option<u32>,
}

/// One distinct code address of the profile, symbolized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The run-time address: the interrupted PC for a leaf, a return address otherwise.
    pub address: u64,
    /// Index into [`Profile::modules`], if the address lies in a known module.
    pub module: Option<usize>,
    /// The frames at this address, innermost first: the functions inlined there, then the
    /// function whose code it is. Never empty.
    pub frames: Vec<Frame>,
}

/// A thread of a profiled process, or every thread of one name (in one process) that has exited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thread {
    /// Its kernel thread id; 0 for the merged totals of the threads named `name` that exited
    /// after the first [`EXITED_THREADS_KEPT`](crate::collect::EXITED_THREADS_KEPT) had (see
    /// [`Profile::totals`]).
    pub tid: i32,
    /// Its name (`/proc/self/task/TID/comm`), if it could be read.
    pub name: String,
    /// The id of the process it belongs to.
    pub pid: u32,
    /// That process's program name: its executable's file name (such as `python3.11`), as
    /// [`basename`](crate::symbolize::basename) gives it.
    pub process: String,
}

/// How many samples of one thread had one stack, over the whole run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Total {
    /// Index into [`Profile::threads`].
    pub thread: usize,
    /// Index into [`Profile::stacks`].
    pub stack: usize,
    /// Samples.
    pub samples: u64,
    /// The sampling periods they stand for (see [`Sample::weight`]).
    pub periods: u64,
}

/// One sample: a thread's stack at a timer tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Index into [`Profile::threads`].
    pub thread: usize,
    /// When it was taken, from the start of profiling.
    pub time: Duration,
    /// The sampling periods it stands for: 1, plus timer expirations the kernel merged into
    /// its signal (CPU-time timers fire at most once per kernel tick, so at rates above the
    /// tick rate most samples stand for several periods), times the samples it stands for in
    /// a long run's thinned timeline (see [`Profile::samples`]).
    pub weight: u64,
    /// Index into [`Profile::stacks`].
    pub stack: usize,
}

/// Counters of the whole run, for the summary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Timer signals the handler received.
    pub signals: u64,
    /// Samples stored (unwound, possibly only partly).
    pub stored: u64,
    /// Signals that produced no sample, by reason, with a count each (every signal is either
    /// stored or dropped for exactly one reason).
    pub dropped: Vec<(String, u64)>,
    /// Timer expirations the kernel merged into a signal still pending (CPU time that went
    /// unsampled because the thread could not take the signal in time).
    pub merged_expirations: u64,
    /// Periods a perf-event timer counted without a signal of its own (overflows merged into
    /// one pending signal): CPU time not sampled.
    pub perf_unsignalled: u64,
    /// CPU time the sampled threads used while sampled (what the samples' periods should add
    /// up to with a CPU clock).
    pub sampled_cpu: Duration,
    /// Threads sampled, by kind of timer, with a count each.
    pub timers: Vec<(String, u64)>,
    /// Signals of the profiler's number that no timer of ours sent (the program's own), ignored.
    pub foreign_signals: u64,
    /// Threads that were never sampled, by reason, with a count each.
    pub threads_not_sampled: Vec<(String, u64)>,
    /// How the stored samples' walks ended, with a count each.
    pub stops: Vec<(String, u64)>,
    /// Frames in all stored samples.
    pub frames: u64,
    /// Whether walks scanned the stack (`--stack-scanning`).
    pub stack_scanning: bool,
    /// Of the frames, those found by stack scanning.
    pub scanned_frames: u64,
    /// Rule-cache hits and misses of the sampled threads.
    pub cache_hits: u64,
    /// See `cache_hits`.
    pub cache_misses: u64,
    /// Time spent unwinding in the handler, over all stored samples.
    pub unwind_time: Duration,
    /// Time spent storing samples in the handler, over all stored samples.
    pub store_time: Duration,
    /// Time spent building the rule tables (at start and at every refresh).
    pub preload_time: Duration,
    /// Bytes of the rule tables, as last published.
    pub table_bytes: usize,
    /// Rows of the rule tables, as last published.
    pub table_rows: u64,
    /// CPU time the collector spent draining the rings and refreshing the table (the tables'
    /// rebuilds included).
    pub collector_cpu: Duration,
    /// Times the tables were rebuilt because a walk met code in no known module.
    pub refreshes: u64,
    /// Threads sampled during the run.
    pub threads: u64,
}

/// A finished, symbolized profile.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The profiled program (its executable's path).
    pub program: String,
    /// Its process id.
    pub pid: u32,
    /// When profiling started (wall clock).
    pub start: SystemTime,
    /// How long profiling ran.
    pub duration: Duration,
    /// The sampling period: CPU time per sample and thread (or wall time, when sampling wall
    /// clock).
    pub interval: Duration,
    /// Whether the period is wall-clock time rather than CPU time.
    pub wall_clock: bool,
    /// Every module seen.
    pub modules: Vec<Module>,
    /// Every distinct address in the samples.
    pub locations: Vec<Location>,
    /// Every distinct stack, as indices into `locations`, leaf first.
    pub stacks: Vec<Vec<usize>>,
    /// Every thread sampled (and, with tid 0, the threads of each name that exited after the
    /// first [`EXITED_THREADS_KEPT`](crate::collect::EXITED_THREADS_KEPT) had).
    pub threads: Vec<Thread>,
    /// The timeline: every sample, in time order per thread, while the run has taken at most
    /// [`TIMELINE_SAMPLES`]; beyond that, an evenly spread subset of that many at most, each
    /// weighted for the samples it stands for (so that memory stays flat in long runs). The
    /// Firefox profile is drawn from it.
    pub samples: Vec<Sample>,
    /// Samples per (thread, stack), one entry for each, exact over the whole run: folded
    /// stacks, the flame graph, pprof and the summary are counted from these. A thread that
    /// exited after the first [`EXITED_THREADS_KEPT`](crate::collect::EXITED_THREADS_KEPT) had
    /// has its totals merged into those of its name (a [`Thread`] with tid 0), so that thread
    /// churn does not grow them.
    pub totals: Vec<Total>,
    /// The run's counters.
    pub counters: Counters,
}

/// The most samples [`Profile::samples`] keeps: beyond it, every other sample is dropped from the
/// timeline (and the rest weighted twice as much), as often as needed.
pub const TIMELINE_SAMPLES: usize = 1 << 20;

/// Totals of `samples`, per (thread, stack), in order of first appearance: for a profile built
/// from a complete timeline.
pub fn totals_of(samples: &[Sample]) -> Vec<Total> {
    let mut totals: Vec<Total> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for s in samples {
        let i = *index.entry((s.thread, s.stack)).or_insert_with(|| {
            totals.push(Total {
                thread: s.thread,
                stack: s.stack,
                samples: 0,
                periods: 0,
            });
            totals.len() - 1
        });
        totals[i].samples += 1;
        totals[i].periods += s.weight;
    }
    totals
}

impl Profile {
    /// Samples in the whole run (the sum of [`Profile::totals`]).
    pub fn sample_count(&self) -> u64 {
        self.totals.iter().map(|t| t.samples).sum()
    }

    /// Sampling periods in the whole run.
    pub fn period_count(&self) -> u64 {
        self.totals.iter().map(|t| t.periods).sum()
    }

    /// Sampling periods per stack (index into [`Profile::stacks`]), over every thread.
    pub fn periods_per_stack(&self) -> std::collections::HashMap<usize, u64> {
        let mut per_stack = std::collections::HashMap::new();
        for t in &self.totals {
            *per_stack.entry(t.stack).or_default() += t.periods;
        }
        per_stack
    }

    /// The location at `index`, or `None` if the index is out of range.
    pub fn location(&self, index: usize) -> Option<&Location> {
        self.locations.get(index)
    }

    /// The module of `location`, or `None` if it has none or its index is out of range.
    pub fn module_of(&self, location: &Location) -> Option<&Module> {
        location.module.and_then(|m| self.modules.get(m))
    }

    /// The locations of stack `stack`, leaf first (as stored). A stack index out of range gives
    /// no locations; location indices out of range are skipped.
    pub fn stack_locations(&self, stack: usize) -> impl DoubleEndedIterator<Item = &Location> + '_ {
        self.stacks
            .get(stack)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|&l| self.locations.get(l))
    }

    /// The frames of stack `stack`, root first, with inlined frames expanded: at each location
    /// the function whose code it is comes first, then the functions inlined into it, the
    /// innermost last. Out-of-range indices are skipped, as in [`Profile::stack_locations`].
    pub fn stack_frames_root_first(&self, stack: usize) -> impl Iterator<Item = &Frame> + '_ {
        self.stack_locations(stack)
            .rev()
            .flat_map(|location| location.frames.iter().rev())
    }

    /// The frames of stack `stack`, leaf first (the reverse of
    /// [`Profile::stack_frames_root_first`]): the innermost inlined function of the leaf comes
    /// first.
    pub fn stack_frames_leaf_first(&self, stack: usize) -> impl Iterator<Item = &Frame> + '_ {
        self.stack_locations(stack)
            .flat_map(|location| location.frames.iter())
    }
}
