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
    /// Executable memory no file describes (code generated at run time: a JIT compiler's, an
    /// interpreter's trampolines): named by the process's perf map, not by a file.
    pub generated: bool,
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
    /// Whether the processes sampled allocations alone (`--alloc-only`): no timer ran, and the
    /// CPU profile is empty by design.
    pub cpu_not_sampled: bool,
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
    /// What was refused or dropped of what the processes sent `record` (a connection of
    /// another user, shared memory whose size is not sealed, a sample that cannot be right,
    /// input past a limit), by what, with a count each. Empty for a profile collected in the
    /// program itself.
    pub refused: Vec<(String, u64)>,
    /// The processes' CPU time from the start of their sampling, as the kernel counted it when
    /// `record` last looked (zero when not known: the in-process collector, or processes that
    /// ended before a look).
    pub process_cpu: Duration,
    /// Of `process_cpu`, what the sampled threads' clocks did not count at that look: threads
    /// never sampled (no timer, no record, started before the profiler).
    pub unsampled_cpu: Duration,
    /// The processes' CPU time from their start (their start-up before sampling included), at
    /// `record`'s last look; zero when not known.
    pub lifetime_cpu: Duration,
    /// The CPU time of the program and of every process it started, joined or not, as the
    /// kernel counted it once they had all ended (`record`'s children's resource usage); `None`
    /// where not known (the in-process collector, a snapshot).
    pub descendants_cpu: Option<Duration>,
    /// `record`'s own CPU time, every thread of it (collecting, symbolizing, writing,
    /// exporting), once the program has ended; `None` where not known (in the program).
    pub recorder_cpu: Option<Duration>,
    /// Times the program set its own action for a signal the profiler samples with (its handler
    /// stayed in front, and passed the program's own signals, `foreign_signals`, on to it).
    pub program_actions: u64,
    /// Names of JIT functions (GDB JIT interface) not kept: past
    /// [`JIT_FUNCTIONS_KEPT`](crate::collect::JIT_FUNCTIONS_KEPT) per process.
    pub jit_names_dropped: u64,
    /// Go programs whose goroutines' stacks the walks read, and Go programs whose runtime's `g`
    /// was not found (their walks stop at a goroutine's first frame).
    pub go_programs: (u64, u64),
    /// Times the program closed the profiler's connection to `record`, and the process
    /// connected again.
    pub reconnections: u64,
    /// Threads given a new timer after the program closed their perf event's descriptor.
    pub timers_rearmed: u64,
    /// Samples taken during the profiler's own work in the program's threads, by kind (see
    /// [`crate::sampler::Work`]), each shown as one frame `[unwind-profiler] KIND` under the
    /// program's call that led to it.
    pub profiler_work: Vec<(String, u64)>,
    /// A continuous run's periods (`--period`): how many were cut, written and exported.
    pub periods: Option<crate::periods::PeriodCounts>,
}

/// One process of a profile, as its threads name it, with its samples (see
/// [`Profile::processes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    /// Its process id.
    pub pid: u32,
    /// Its program name (see [`Thread::process`]).
    pub name: String,
    /// Its threads' samples, over the whole run.
    pub samples: u64,
    /// The sampling periods they stand for.
    pub periods: u64,
}

/// What the sampled allocations of a run stand for at one allocation site (a stack): Go's
/// heap profile's four values, estimated from the samples (see
/// [`byte_sampling::estimate`](crate::byte_sampling::estimate)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeapSite {
    /// The stack (an index into [`Profile::stacks`]), the allocating code's frame first.
    pub stack: usize,
    /// Allocations sampled here.
    pub samples: u64,
    /// Objects allocated here, estimated.
    pub alloc_objects: u64,
    /// Bytes allocated here, estimated.
    pub alloc_bytes: u64,
    /// Of the samples, those still live (not freed).
    pub live_samples: u64,
    /// Objects allocated here and still live, estimated.
    pub inuse_objects: u64,
    /// Bytes allocated here and still live, estimated.
    pub inuse_bytes: u64,
}

/// The heap profile of a run whose allocations were sampled ([`Config::alloc_interval`]).
///
/// [`Config::alloc_interval`]: crate::Config::alloc_interval
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Heap {
    /// The mean bytes between sample points.
    pub interval: u64,
    /// By allocation site, in stack order.
    pub sites: Vec<HeapSite>,
    /// Allocation samples in the profile.
    pub sampled: u64,
    /// Sampled allocations without a sample, by reason (only reasons that happened).
    pub dropped: Vec<(String, u64)>,
    /// Sampled allocations the live table had no room for: counted as allocated, never as
    /// live.
    pub untracked: u64,
    /// Time the stored samples took in the allocator (unwind and store), summed.
    pub sample_time: std::time::Duration,
}

impl Heap {
    /// The four totals over every site: allocated objects and bytes, live objects and bytes.
    pub fn totals(&self) -> [u64; 4] {
        self.sites.iter().fold([0; 4], |t, s| {
            [
                t[0] + s.alloc_objects,
                t[1] + s.alloc_bytes,
                t[2] + s.inuse_objects,
                t[3] + s.inuse_bytes,
            ]
        })
    }

    /// Adds `other`'s sites (their stacks moved by `remap`) and counts to these.
    fn add(&mut self, other: Heap, remap: impl Fn(usize) -> usize) {
        self.interval = self.interval.max(other.interval);
        self.sites.extend(other.sites.into_iter().map(|s| HeapSite {
            stack: remap(s.stack),
            ..s
        }));
        self.sampled += other.sampled;
        add_named(&mut self.dropped, &other.dropped);
        self.untracked += other.untracked;
        self.sample_time += other.sample_time;
    }
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
    /// The sampled allocations, when they were sampled.
    pub heap: Option<Heap>,
    /// Where the names of each module read came from, by path.
    pub names: Vec<NameSource>,
}

/// Where one module's names came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NameSource {
    /// The module's path, as the process loaded it.
    pub module: String,
    /// Where its names came from: a debug file and how it was found, its own symbol tables, its
    /// unwind tables, or why it has none.
    pub from: String,
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

/// `index` into a table of `len` entries, moved to where that table starts (`offset`) in a merged
/// one; an index out of range stays out of range (`usize::MAX`), so that it still refers to
/// nothing rather than to another profile's entry.
fn remap(index: usize, len: usize, offset: usize) -> usize {
    if index < len {
        index + offset
    } else {
        usize::MAX
    }
}

/// Adds the counts of `from` to `into`, by name: a name already in `into` gets its count added,
/// a new one is appended (so the order is `into`'s, then the new names in `from`'s order).
fn add_named(into: &mut Vec<(String, u64)>, from: &[(String, u64)]) {
    for (name, n) in from {
        match into.iter_mut().find(|(known, _)| known == name) {
            Some((_, count)) => *count += n,
            None => into.push((name.clone(), *n)),
        }
    }
}

impl Counters {
    /// Adds the counters of another run (another process) to these, field by field: counts,
    /// durations and sizes are summed, the named counts summed by name (the names new here
    /// appended in `other`'s order), and `stack_scanning` is set if either run scanned.
    pub fn add(&mut self, other: &Counters) {
        self.signals += other.signals;
        self.stored += other.stored;
        add_named(&mut self.dropped, &other.dropped);
        self.merged_expirations += other.merged_expirations;
        self.perf_unsignalled += other.perf_unsignalled;
        self.sampled_cpu += other.sampled_cpu;
        add_named(&mut self.timers, &other.timers);
        self.foreign_signals += other.foreign_signals;
        add_named(&mut self.threads_not_sampled, &other.threads_not_sampled);
        add_named(&mut self.stops, &other.stops);
        self.frames += other.frames;
        self.stack_scanning |= other.stack_scanning;
        self.cpu_not_sampled |= other.cpu_not_sampled;
        self.scanned_frames += other.scanned_frames;
        self.cache_hits += other.cache_hits;
        self.cache_misses += other.cache_misses;
        self.unwind_time += other.unwind_time;
        self.store_time += other.store_time;
        self.preload_time += other.preload_time;
        self.table_bytes += other.table_bytes;
        self.table_rows += other.table_rows;
        self.collector_cpu += other.collector_cpu;
        self.refreshes += other.refreshes;
        self.threads += other.threads;
        add_named(&mut self.refused, &other.refused);
        self.process_cpu += other.process_cpu;
        self.unsampled_cpu += other.unsampled_cpu;
        self.lifetime_cpu += other.lifetime_cpu;
        self.descendants_cpu = self.descendants_cpu.max(other.descendants_cpu);
        self.program_actions += other.program_actions;
        self.jit_names_dropped += other.jit_names_dropped;
        self.go_programs.0 += other.go_programs.0;
        self.go_programs.1 += other.go_programs.1;
        self.reconnections += other.reconnections;
        self.timers_rearmed += other.timers_rearmed;
        add_named(&mut self.profiler_work, &other.profiler_work);
    }
}

impl Profile {
    /// A profile of `program` (process `pid`) with nothing in it: no modules, samples or
    /// counters, starting at `start`, of no duration, CPU time sampled every `interval`.
    pub fn empty(program: String, pid: u32, start: SystemTime, interval: Duration) -> Profile {
        Profile {
            program,
            pid,
            start,
            duration: Duration::ZERO,
            interval,
            wall_clock: false,
            modules: Vec::new(),
            locations: Vec::new(),
            stacks: Vec::new(),
            threads: Vec::new(),
            samples: Vec::new(),
            totals: Vec::new(),
            counters: Counters::default(),
            heap: None,
            names: Vec::new(),
        }
    }

    /// The part of this profile that `totals` (some of its own) count: those totals, the stacks
    /// they name and the locations of those stacks, renumbered; the modules, threads and
    /// everything else as they are, no timeline and no heap profile. An index out of range names nothing in
    /// the part either.
    pub fn part(&self, totals: &[Total]) -> Profile {
        let mut stack_at = vec![usize::MAX; self.stacks.len()];
        let mut location_at = vec![usize::MAX; self.locations.len()];
        let (mut stacks, mut locations) = (Vec::new(), Vec::new());
        let totals = totals
            .iter()
            .map(|t| {
                let stack = match stack_at.get(t.stack) {
                    Some(&usize::MAX) => {
                        let renumbered: Vec<usize> = self.stacks[t.stack]
                            .iter()
                            .map(|&l| match location_at.get(l) {
                                Some(&usize::MAX) => {
                                    location_at[l] = locations.len();
                                    locations.push(self.locations[l].clone());
                                    location_at[l]
                                }
                                Some(&at) => at,
                                None => usize::MAX,
                            })
                            .collect();
                        stack_at[t.stack] = stacks.len();
                        stacks.push(renumbered);
                        stack_at[t.stack]
                    }
                    Some(&at) => at,
                    None => usize::MAX,
                };
                Total { stack, ..*t }
            })
            .collect();
        Profile {
            program: self.program.clone(),
            pid: self.pid,
            start: self.start,
            duration: self.duration,
            interval: self.interval,
            wall_clock: self.wall_clock,
            modules: self.modules.clone(),
            locations,
            stacks,
            threads: self.threads.clone(),
            samples: Vec::new(),
            totals,
            counters: self.counters.clone(),
            // The parts are those of the timers' samples (export requests); a heap's stacks are
            // not among their renumbered ones.
            heap: None,
            names: self.names.clone(),
        }
    }

    /// The part of this profile that its heap profile counts: the heap profile, the stacks its
    /// sites name and their locations, renumbered; no totals or timeline (see
    /// [`part`](Self::part)). `None` without a heap profile.
    pub fn heap_part(&self) -> Option<Profile> {
        let heap = self.heap.as_ref()?;
        let as_totals: Vec<Total> = heap
            .sites
            .iter()
            .map(|s| Total {
                thread: usize::MAX,
                stack: s.stack,
                samples: 0,
                periods: 0,
            })
            .collect();
        let mut part = self.part(&as_totals);
        let sites = heap
            .sites
            .iter()
            .zip(&part.totals)
            .map(|(s, t)| HeapSite {
                stack: t.stack,
                ..s.clone()
            })
            .collect();
        part.totals = Vec::new();
        part.heap = Some(Heap {
            sites,
            ..heap.clone()
        });
        Some(part)
    }

    /// One profile of several processes (such as a shell, the program it ran and that
    /// program's children), from the profiles of each; `None` if `profiles` is empty.
    ///
    /// The modules, locations, stacks, threads, samples and totals are concatenated in the
    /// order of `profiles`, with their indices moved to match (an index that was out of range
    /// stays out of range). The merged profile starts at the earliest start and lasts until the
    /// latest end; each profile's sample times are shifted to count from the merged start. The
    /// program, pid, interval and clock are those of the first profile (the root process); the
    /// counters are summed (see [`Counters::add`]). Each thread keeps its own
    /// [`pid`](Thread::pid) and [`process`](Thread::process), which tell the processes apart.
    pub fn merge(profiles: Vec<Profile>) -> Option<Profile> {
        let start = profiles.iter().map(|p| p.start).min()?;
        let end = profiles
            .iter()
            .map(|p| p.start.checked_add(p.duration).unwrap_or(p.start))
            .max()
            .unwrap_or(start);
        let mut profiles = profiles.into_iter();
        let first = profiles.next()?;
        let mut merged = Profile::empty(first.program.clone(), first.pid, start, first.interval);
        merged.duration = end.duration_since(start).unwrap_or_default();
        merged.wall_clock = first.wall_clock;
        for p in std::iter::once(first).chain(profiles) {
            let shift = p.start.duration_since(start).unwrap_or_default();
            let (modules, locations, stacks, threads) = (
                merged.modules.len(),
                merged.locations.len(),
                merged.stacks.len(),
                merged.threads.len(),
            );
            let (n_modules, n_locations, n_stacks, n_threads) = (
                p.modules.len(),
                p.locations.len(),
                p.stacks.len(),
                p.threads.len(),
            );
            merged.modules.extend(p.modules);
            merged.names.extend(p.names);
            merged
                .locations
                .extend(p.locations.into_iter().map(|l| Location {
                    module: l.module.map(|m| remap(m, n_modules, modules)),
                    ..l
                }));
            merged.stacks.extend(p.stacks.into_iter().map(|stack| {
                stack
                    .into_iter()
                    .map(|l| remap(l, n_locations, locations))
                    .collect()
            }));
            merged.threads.extend(p.threads);
            merged.samples.extend(p.samples.into_iter().map(|s| Sample {
                thread: remap(s.thread, n_threads, threads),
                time: s.time + shift,
                stack: remap(s.stack, n_stacks, stacks),
                ..s
            }));
            merged.totals.extend(p.totals.into_iter().map(|t| Total {
                thread: remap(t.thread, n_threads, threads),
                stack: remap(t.stack, n_stacks, stacks),
                ..t
            }));
            merged.counters.add(&p.counters);
            if let Some(heap) = p.heap {
                merged
                    .heap
                    .get_or_insert_with(Heap::default)
                    .add(heap, |s| remap(s, n_stacks, stacks));
            }
        }
        merged.names.sort();
        merged.names.dedup();
        Some(merged)
    }

    /// The process id and program name of thread `thread` (an index into
    /// [`Profile::threads`]): the thread's own, or for an index out of range the profile's (its
    /// root process: [`Profile::pid`] and the file name of [`Profile::program`]).
    pub fn process_of(&self, thread: usize) -> (u32, &str) {
        match self.threads.get(thread) {
            Some(t) => (t.pid, &t.process),
            None => (self.pid, crate::symbolize::basename(&self.program)),
        }
    }

    /// The processes of the threads with samples in [`Profile::totals`]: one per distinct
    /// (pid, program name), in the order of their first thread, with their totals. A process
    /// that replaced its program (`exec`) is listed once per program. Samples of a thread index
    /// out of range count for the root process (see [`Profile::process_of`]).
    pub fn processes(&self) -> Vec<Process> {
        let mut processes: Vec<Process> = Vec::new();
        let mut index: std::collections::HashMap<(u32, &str), usize> =
            std::collections::HashMap::new();
        let mut per_thread = vec![(0u64, 0u64); self.threads.len()];
        let mut unknown = (0u64, 0u64);
        for t in &self.totals {
            let counts = per_thread.get_mut(t.thread).unwrap_or(&mut unknown);
            counts.0 += t.samples;
            counts.1 += t.periods;
        }
        let known = per_thread
            .into_iter()
            .enumerate()
            .map(|(thread, counts)| (self.process_of(thread), counts));
        let unknown = (self.process_of(usize::MAX), unknown);
        for ((pid, name), (samples, periods)) in known.chain(std::iter::once(unknown)) {
            if samples == 0 && periods == 0 {
                continue;
            }
            let i = *index.entry((pid, name)).or_insert_with(|| {
                processes.push(Process {
                    pid,
                    name: name.to_owned(),
                    samples: 0,
                    periods: 0,
                });
                processes.len() - 1
            });
            processes[i].samples += samples;
            processes[i].periods += periods;
        }
        processes
    }

    /// Whether the threads with samples belong to more than one process (more than one pid, or
    /// one pid running more than one program): the outputs then tell the processes apart.
    pub fn is_multi_process(&self) -> bool {
        self.processes().len() > 1
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn module(path: &str) -> Module {
        Module {
            path: path.to_string(),
            start: 0x1000,
            end: 0x2000,
            bias: 0,
            file_offset: 0,
            build_id: String::new(),
            generated: false,
        }
    }

    fn location(address: u64, module: Option<usize>, function: &str) -> Location {
        Location {
            address,
            module,
            frames: vec![Frame {
                function: function.to_string(),
                file: None,
                line: None,
            }],
        }
    }

    fn thread(tid: i32, pid: u32, process: &str) -> Thread {
        Thread {
            tid,
            name: process.to_string(),
            pid,
            process: process.to_string(),
        }
    }

    fn sample(thread: usize, ms: u64, stack: usize) -> Sample {
        Sample {
            thread,
            time: Duration::from_millis(ms),
            weight: 1,
            stack,
        }
    }

    /// A shell (pid 10, from second 100 for 50 ms) and the program it ran (pid 20, from 20 ms
    /// later for 60 ms).
    fn two_profiles() -> (Profile, Profile) {
        let t0 = UNIX_EPOCH + Duration::from_secs(100);
        let sh_samples = vec![sample(0, 0, 0), sample(0, 10, 1), sample(0, 20, 1)];
        let sh = Profile {
            program: "/bin/sh".to_string(),
            pid: 10,
            start: t0,
            duration: Duration::from_millis(50),
            interval: Duration::from_millis(10),
            wall_clock: false,
            modules: vec![module("/bin/sh"), module("/lib/libc.so.6")],
            locations: vec![
                location(0x1100, Some(0), "main"),
                location(0x1200, Some(1), "read"),
            ],
            stacks: vec![vec![0], vec![1, 0]],
            threads: vec![thread(10, 10, "sh")],
            totals: totals_of(&sh_samples),
            samples: sh_samples,
            counters: Counters {
                signals: 4,
                stored: 3,
                dropped: vec![("busy".to_string(), 1)],
                stops: vec![("end-of-stack".to_string(), 3)],
                timers: vec![("timer_create".to_string(), 1)],
                sampled_cpu: Duration::from_millis(30),
                table_bytes: 100,
                table_rows: 10,
                threads: 1,
                ..Counters::default()
            },
            heap: None,
            names: Vec::new(),
        };
        let py_samples = vec![sample(0, 0, 0), sample(1, 5, 1), sample(1, 15, 0)];
        let py = Profile {
            program: "/usr/bin/python3.11".to_string(),
            pid: 20,
            start: t0 + Duration::from_millis(20),
            duration: Duration::from_millis(60),
            interval: Duration::from_millis(1),
            wall_clock: true,
            modules: vec![module("/usr/bin/python3.11")],
            locations: vec![
                location(0x1300, Some(0), "Py_Main"),
                location(0x1400, Some(0), "eval"),
                location(0x1500, None, "0x1500"),
            ],
            stacks: vec![vec![1, 0], vec![2, 1, 0]],
            threads: vec![thread(20, 20, "python3.11"), thread(21, 20, "python3.11")],
            totals: totals_of(&py_samples),
            samples: py_samples,
            counters: Counters {
                signals: 3,
                stored: 3,
                dropped: vec![("no-memory".to_string(), 2), ("busy".to_string(), 5)],
                stops: vec![("end-of-stack".to_string(), 2), ("no-rule".to_string(), 1)],
                timers: vec![("timer_create".to_string(), 2)],
                sampled_cpu: Duration::from_millis(3),
                stack_scanning: true,
                table_bytes: 50,
                table_rows: 5,
                threads: 2,
                ..Counters::default()
            },
            heap: None,
            names: Vec::new(),
        };
        (sh, py)
    }

    #[test]
    fn merge_of_nothing_is_none() {
        assert!(Profile::merge(Vec::new()).is_none());
    }

    #[test]
    fn merge_of_one_is_that_profile() {
        let (sh, _) = two_profiles();
        let merged = Profile::merge(vec![sh.clone()]).unwrap();
        assert_eq!(merged.start, sh.start);
        assert_eq!(merged.duration, sh.duration);
        assert_eq!(merged.locations, sh.locations);
        assert_eq!(merged.stacks, sh.stacks);
        assert_eq!(merged.samples, sh.samples);
        assert_eq!(merged.totals, sh.totals);
        assert_eq!(merged.counters, sh.counters);
    }

    #[test]
    fn merge_remaps_indices_shifts_times_and_sums_counters() {
        let (sh, py) = two_profiles();
        // The later process first: the start is still the earliest, its times shift.
        let merged = Profile::merge(vec![py.clone(), sh.clone()]).unwrap();
        assert_eq!(
            (merged.program.as_str(), merged.pid),
            ("/usr/bin/python3.11", 20)
        );
        assert_eq!(merged.interval, Duration::from_millis(1));
        assert!(merged.wall_clock);
        assert_eq!(merged.start, sh.start);
        // sh ends at 50 ms, python at 20 + 60 = 80 ms.
        assert_eq!(merged.duration, Duration::from_millis(80));

        let paths: Vec<_> = merged.modules.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["/usr/bin/python3.11", "/bin/sh", "/lib/libc.so.6"]);
        let modules: Vec<_> = merged.locations.iter().map(|l| l.module).collect();
        assert_eq!(modules, [Some(0), Some(0), None, Some(1), Some(2)]);
        assert_eq!(
            merged.stacks,
            [vec![1, 0], vec![2, 1, 0], vec![3], vec![4, 3]]
        );
        let tids: Vec<_> = merged.threads.iter().map(|t| (t.tid, t.pid)).collect();
        assert_eq!(tids, [(20, 20), (21, 20), (10, 10)]);

        let samples: Vec<_> = merged
            .samples
            .iter()
            .map(|s| (s.thread, s.time.as_millis(), s.stack))
            .collect();
        assert_eq!(
            samples,
            [
                (0, 20, 0),
                (1, 25, 1),
                (1, 35, 0),
                (2, 0, 2),
                (2, 10, 3),
                (2, 20, 3)
            ]
        );
        // Every stack names the functions it named before the merge.
        let functions = |p: &Profile, stack: usize| -> Vec<String> {
            p.stack_frames_root_first(stack)
                .map(|f| f.function.clone())
                .collect()
        };
        assert_eq!(functions(&merged, 1), functions(&py, 1));
        assert_eq!(functions(&merged, 3), functions(&sh, 1));
        assert_eq!(merged.totals, totals_of(&merged.samples));
        assert_eq!(merged.sample_count(), 6);

        let c = &merged.counters;
        assert_eq!((c.signals, c.stored, c.threads), (7, 6, 3));
        let named = |v: &[(&str, u64)]| -> Vec<(String, u64)> {
            v.iter().map(|&(n, c)| (n.to_string(), c)).collect()
        };
        assert_eq!(c.dropped, named(&[("no-memory", 2), ("busy", 6)]));
        assert_eq!(c.stops, named(&[("end-of-stack", 5), ("no-rule", 1)]));
        assert_eq!(c.timers, named(&[("timer_create", 3)]));
        assert_eq!(c.sampled_cpu, Duration::from_millis(33));
        assert!(c.stack_scanning);
        assert_eq!((c.table_bytes, c.table_rows), (150, 15));
    }

    #[test]
    fn processes_of_the_threads_with_samples() {
        let (sh, py) = two_profiles();
        assert_eq!(sh.processes().len(), 1);
        assert!(!sh.is_multi_process());
        let mut merged = Profile::merge(vec![sh, py]).unwrap();
        let process = |pid, name: &str, samples| Process {
            pid,
            name: name.to_string(),
            samples,
            periods: samples,
        };
        assert_eq!(
            merged.processes(),
            [process(10, "sh", 3), process(20, "python3.11", 3)]
        );
        assert!(merged.is_multi_process());
        // The shell's pid ran python (exec): one process per program. A thread index out of
        // range counts for the root process.
        merged.threads[1].pid = 10;
        merged.threads[2].pid = 10;
        merged.totals[0].thread = 99;
        assert_eq!(merged.process_of(99), (10, "sh"));
        assert_eq!(
            merged.processes(),
            [process(10, "sh", 3), process(10, "python3.11", 3)]
        );
        // Threads without samples are no process.
        merged.totals.retain(|t| t.thread == 1);
        assert_eq!(merged.processes(), [process(10, "python3.11", 1)]);
        assert!(!merged.is_multi_process());
    }

    #[test]
    fn merge_keeps_indices_out_of_range_out_of_range() {
        let (mut sh, py) = two_profiles();
        sh.stacks[0].push(7);
        sh.locations[0].module = Some(9);
        sh.samples[0].thread = 5;
        sh.totals = totals_of(&sh.samples);
        let merged = Profile::merge(vec![sh, py]).unwrap();
        assert_eq!(merged.stacks[0], [0, usize::MAX]);
        assert_eq!(merged.locations[0].module, Some(usize::MAX));
        assert_eq!(merged.samples[0].thread, usize::MAX);
        assert!(merged.totals.iter().any(|t| t.thread == usize::MAX));
        assert!(merged.module_of(&merged.locations[0]).is_none());
    }
}
