//! The plain-text summary printed at the end of a run: what was profiled, what the sampler
//! counted (signals, drops, walk stops, costs, rule tables), the processes (in a profile of
//! several: each one's pid, program name and samples), the threads and the top functions.
//!
//! The top functions ([`top_functions`]) are counted the way `go tool pprof -top` counts them
//! from the [pprof](super::pprof) output: a sample's self (flat) count goes to the innermost
//! frame of its leaf (the innermost inlined function there), its total (cumulative) count to
//! every function on its stack, once per sample even if the function recurs. Functions are
//! told apart by [`function_name`] alone.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::Duration;

use super::{function_name, process_name, UNKNOWN_FUNCTION};
use crate::profile::Profile;

/// How many functions each top list of the summary shows.
pub const TOP: usize = 15;

/// A function and a sample count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCount {
    /// The function's name, as [`function_name`] gives it.
    pub name: String,
    /// Samples counted for it.
    pub samples: u64,
}

/// The functions with the most samples, by self and by total samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopFunctions {
    /// Every sample of the profile: the base of the percentages.
    pub samples: u64,
    /// The functions with self samples, most first, then by name; at most `n` of them.
    pub by_self: Vec<FunctionCount>,
    /// The functions on any stack, by total samples, most first, then by name; at most `n`.
    pub by_total: Vec<FunctionCount>,
}

/// The `n` functions with the most self samples and the `n` with the most total samples (see the
/// [module documentation](self) for how they are counted). Ties are ordered by name, as pprof
/// orders them.
pub fn top_functions(profile: &Profile, n: usize) -> TopFunctions {
    let per_stack = profile.periods_per_stack();
    let mut self_samples: HashMap<String, u64> = HashMap::new();
    let mut total_samples: HashMap<String, u64> = HashMap::new();
    for (&stack, &count) in &per_stack {
        let mut frames = profile.stack_frames_leaf_first(stack).peekable();
        if let Some(leaf) = frames.peek() {
            *self_samples
                .entry(function_name(leaf).into_owned())
                .or_default() += count;
        }
        let on_stack: HashSet<_> = frames.map(function_name).collect();
        for name in on_stack {
            *total_samples.entry(name.into_owned()).or_default() += count;
        }
    }
    TopFunctions {
        samples: profile.period_count(),
        by_self: top(self_samples, n),
        by_total: top(total_samples, n),
    }
}

fn top(counts: HashMap<String, u64>, n: usize) -> Vec<FunctionCount> {
    let mut list: Vec<FunctionCount> = counts
        .into_iter()
        .map(|(name, samples)| FunctionCount { name, samples })
        .collect();
    list.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
    list.truncate(n);
    list
}

/// `part` as a percentage of `whole` with two decimals (`12.50%`), or `-` if `whole` is 0.
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.2}%", part as f64 * 100.0 / whole as f64)
    }
}

/// `total` divided by `n` as nanoseconds with one decimal, or `-` if `n` is 0.
fn nanos_per(total: Duration, n: u64) -> String {
    if n == 0 {
        "-".to_string()
    } else {
        format!("{:.1} ns", total.as_nanos() as f64 / n as f64)
    }
}

/// `part` as a percentage of `whole`, as [`percent`] writes it.
fn percent_of(part: Duration, whole: Duration) -> String {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    percent(ns(part), ns(whole))
}

fn millis(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// The summary's line on the rule tables' build.
fn preload_line(c: &crate::profile::Counters) -> String {
    format!(
        "preload           {}, {} table bytes, {} rows, {} refreshes",
        millis(c.preload_time),
        c.table_bytes,
        c.table_rows,
        c.refreshes
    )
}

/// The summary's text (see the [module documentation](self)).
pub fn text(profile: &Profile) -> String {
    let c = &profile.counters;
    let mut s = String::new();
    // Writing to a String cannot fail.
    let mut line = |text: std::fmt::Arguments<'_>| {
        let _ = s.write_fmt(text);
        s.push('\n');
    };
    line(format_args!("program           {}", profile.program));
    line(format_args!("pid               {}", profile.pid));
    line(format_args!(
        "duration          {:.3} s",
        profile.duration.as_secs_f64()
    ));
    let clock = if profile.wall_clock {
        "wall-clock"
    } else {
        "CPU"
    };
    let rate = if profile.interval.is_zero() {
        "-".to_string()
    } else {
        format!("{:.1} Hz", 1.0 / profile.interval.as_secs_f64())
    };
    if c.cpu_not_sampled {
        // Allocations alone: the CPU sections would be zeros.
        line(format_args!(
            "CPU               not sampled (allocations alone, --alloc-only: no timer, no signal)"
        ));
        line(format_args!("{}", preload_line(c)));
        for (what, n) in &c.refused {
            line(format_args!("refused           {n} {what}"));
        }
        for l in profile.heap.iter().flat_map(|h| heap_lines(profile, h)) {
            line(format_args!("{l}"));
        }
        return s;
    }
    line(format_args!(
        "rate              {rate} per thread (one sample per {} of {clock} time)",
        millis(profile.interval)
    ));
    line(format_args!(
        "samples stored    {} ({} of signals; {} in the profile)",
        c.stored,
        percent(c.stored, c.signals),
        profile.sample_count()
    ));
    if profile.samples.len() as u64 != profile.sample_count() && c.periods.is_none() {
        line(format_args!(
            "timeline          {} of the samples kept, evenly spread (the Firefox profile); every count is exact",
            profile.samples.len()
        ));
    }
    line(format_args!("signals           {}", c.signals));
    let periods: u64 = profile.period_count();
    let timers: Vec<String> = c
        .timers
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} on {n} threads"))
        .collect();
    if !timers.is_empty() {
        line(format_args!("timers            {}", timers.join(", ")));
    }
    line(format_args!(
        "periods           {periods} (samples weighted by the timer periods each stands for; {} POSIX timer expirations merged by the kernel, which checks CPU timers once per tick)",
        c.merged_expirations
    ));
    if !profile.wall_clock && !c.sampled_cpu.is_zero() {
        let covered = profile.interval.as_secs_f64() * periods as f64;
        line(format_args!(
            "CPU time sampled  {:.3} s by the threads' clocks; periods x interval = {:.3} s ({:.1}%)",
            c.sampled_cpu.as_secs_f64(),
            covered,
            covered * 100.0 / c.sampled_cpu.as_secs_f64()
        ));
    }
    if !c.process_cpu.is_zero() && !c.cpu_not_sampled {
        line(format_args!(
            "CPU not sampled   {:.3} s of the processes' {:.3} s since sampling started ({}): threads without a timer or record (see \"threads not sampled\"), as the kernel counted it",
            c.unsampled_cpu.as_secs_f64(),
            c.process_cpu.as_secs_f64(),
            percent(
                c.unsampled_cpu.as_nanos() as u64,
                c.process_cpu.as_nanos() as u64
            )
        ));
    }
    if let Some(all) = c.descendants_cpu {
        line(format_args!(
            "run's CPU         {:.3} s: the program and every process it started, as the kernel counted them when they ended; {:.3} s of it in the processes that joined the profile ({}), from their start to record's last look",
            all.as_secs_f64(),
            c.lifetime_cpu.as_secs_f64(),
            profile.processes().len()
        ));
    }
    if c.perf_unsignalled > 0 {
        line(format_args!(
            "unsignalled       {} perf-event periods (overflows merged into one pending signal: CPU time not sampled)",
            c.perf_unsignalled
        ));
    }
    let (go, go_unknown) = c.go_programs;
    if go > 0 {
        line(format_args!(
            "go runtime        {go} process{}: goroutines' stacks read",
            if go == 1 { "" } else { "es" }
        ));
    }
    if go_unknown > 0 {
        line(format_args!(
            "go runtime        {go_unknown} process{}: its goroutine (g) not found (Go before 1.18, or an unknown runtime): walks stop at a goroutine's first frame",
            if go_unknown == 1 { "" } else { "es" }
        ));
    }
    if c.jit_names_dropped > 0 {
        line(format_args!(
            "jit names         {} names of JIT functions (GDB JIT interface) past the {} kept per process",
            c.jit_names_dropped,
            crate::collect::JIT_FUNCTIONS_KEPT
        ));
    }
    if c.program_actions > 0 {
        line(format_args!(
            "program's signal  the program set its own action for the sampling signal {} times: the profiler's handler stayed in front and passed the program's own {} signals on to it",
            c.program_actions, c.foreign_signals
        ));
    } else if c.foreign_signals > 0 {
        line(format_args!(
            "foreign signals   {} (the sampling signal, not from the profiler's timers: ignored)",
            c.foreign_signals
        ));
    }
    if c.reconnections > 0 {
        line(format_args!(
            "reconnections     {} (the program closed the profiler's connection to record; the process connected again, and gave {} threads whose timer it had closed a new one)",
            c.reconnections, c.timers_rearmed
        ));
    }
    for (reason, n) in c.threads_not_sampled.iter().filter(|(_, n)| *n > 0) {
        line(format_args!("threads not sampled: {n} ({reason})"));
    }
    let dropped: u64 = c.dropped.iter().map(|(_, n)| n).sum();
    line(format_args!(
        "dropped           {dropped} ({} of signals)",
        percent(dropped, c.signals)
    ));
    let width = c
        .dropped
        .iter()
        .chain(&c.stops)
        .map(|(reason, _)| reason.chars().count())
        .max()
        .unwrap_or(0);
    for (reason, n) in &c.dropped {
        line(format_args!(
            "  {reason:<width$}  {n:>10}  {:>7}",
            percent(*n, c.signals)
        ));
    }
    line(format_args!(
        "stop reasons      (of {} stored samples)",
        c.stored
    ));
    for (reason, n) in &c.stops {
        line(format_args!(
            "  {reason:<width$}  {n:>10}  {:>7}",
            percent(*n, c.stored)
        ));
    }
    let depth = if c.stored == 0 {
        "-".to_string()
    } else {
        format!("{:.2}", c.frames as f64 / c.stored as f64)
    };
    line(format_args!(
        "mean stack depth  {depth} frames ({} frames / {} stored)",
        c.frames, c.stored
    ));
    let (generated, named) = generated_leaves(profile);
    if generated > 0 {
        line(format_args!(
            "generated code    {generated} samples with the leaf in code generated at run time ({} of the samples), {named} of them named by a perf map, a jitdump or the GDB JIT interface",
            percent(generated, profile.sample_count())
        ));
    }
    if c.stack_scanning {
        line(format_args!(
            "stack scanning    {} of the frames ({} frames found by a scan)",
            percent(c.scanned_frames, c.frames),
            c.scanned_frames
        ));
    }
    line(format_args!(
        "rule cache        {} hits ({} hits, {} misses)",
        percent(c.cache_hits, c.cache_hits + c.cache_misses),
        c.cache_hits,
        c.cache_misses
    ));
    line(format_args!(
        "unwind cost       {} per sample, {} per frame",
        nanos_per(c.unwind_time, c.stored),
        nanos_per(c.unwind_time, c.frames)
    ));
    line(format_args!(
        "store cost        {} per sample",
        nanos_per(c.store_time, c.stored)
    ));
    line(format_args!("{}", preload_line(c)));
    line(format_args!(
        "collector         {} CPU draining and refreshing, {} per sample",
        millis(c.collector_cpu),
        nanos_per(c.collector_cpu, c.stored)
    ));
    if let Some(p) = &c.periods {
        line(format_args!(
            "period profiles   {} of {} s cut, {} without a sample (samples, threads and functions here are the last period's: {} s from {} UTC); {} written to {}{}",
            p.cut,
            p.every.as_secs_f64(),
            p.empty,
            profile.duration.as_secs_f64().round(),
            crate::periods::utc_stamp(profile.start),
            p.written,
            p.directory,
            match (&p.file_error, p.not_written) {
                (Some(e), n) => format!(", {n} not written ({e})"),
                _ => String::new(),
            }
        ));
        if let Some(e) = &p.export {
            line(format_args!(
                "export            {} periods delivered ({} bytes of OTLP), {} tries failed and retried, {} dropped (the queue full), {} refused by the collector, {} undelivered at the end{}",
                e.delivered,
                e.bytes,
                e.retries,
                e.dropped,
                e.refused,
                e.undelivered,
                e.last_error.as_ref().map_or(String::new(), |e| format!("; last failure: {e}"))
            ));
        }
        let export_cpu = p.export.as_ref().map_or(Duration::ZERO, |e| e.cpu);
        let handler = c.unwind_time + c.store_time;
        let total = handler + c.collector_cpu + p.cut_cpu + p.files_cpu + export_cpu;
        let program = if c.process_cpu > Duration::ZERO {
            c.process_cpu
        } else {
            c.sampled_cpu
        };
        line(format_args!(
            "profiler cost     {} in all, {} of the program's {} s of CPU: in its signal handlers {} (unwinding and storing; the signals' delivery not counted), draining {}, cutting periods {} (symbolizing included), period files {}, export {}",
            millis(total),
            percent_of(total, program),
            format_args!("{:.3}", program.as_secs_f64()),
            millis(handler),
            millis(c.collector_cpu),
            millis(p.cut_cpu),
            millis(p.files_cpu),
            millis(export_cpu)
        ));
        if let Some(own) = c.recorder_cpu {
            line(format_args!(
                "record's CPU      {} in all, {} of the program's (the parts above outside the handlers, and the rest of its work: waiting on the processes, reading their CPU clocks)",
                millis(own),
                percent_of(own, program),
            ));
        }
        if p.symbol_cache_resets > 0 {
            line(format_args!(
                "symbol cache      emptied {} times for holding {} addresses",
                p.symbol_cache_resets,
                crate::symbolize::FRAMES_CACHED
            ));
        }
    }
    let work: u64 = c.profiler_work.iter().map(|(_, n)| n).sum();
    if work > 0 {
        let kinds: Vec<String> = c
            .profiler_work
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        line(format_args!(
            "profiler's work   {work} samples ({} of the samples) in the program's threads, as frames \"[unwind-profiler] ...\" under the calls that led to it: {}",
            percent(work, profile.sample_count()),
            kinds.join(", ")
        ));
    }
    for (what, n) in &c.refused {
        line(format_args!("refused           {n} {what}"));
    }
    let processes = profile.processes();
    if processes.len() > 1 {
        line(format_args!("processes         {}", processes.len()));
        for p in &processes {
            line(format_args!(
                "  {:>8}  {:<16}  {:>10} samples  {:>7}",
                p.pid,
                process_name(&p.name),
                p.samples,
                percent(p.samples, profile.sample_count())
            ));
        }
    }
    line(format_args!("threads           {} sampled", c.threads));
    let mut per_thread = vec![0u64; profile.threads.len()];
    for t in &profile.totals {
        if let Some(n) = per_thread.get_mut(t.thread) {
            *n += t.samples;
        }
    }
    for (thread, n) in profile.threads.iter().zip(per_thread) {
        if n == 0 {
            continue;
        }
        let tid = match thread.tid {
            0 => "exited".to_string(),
            tid => tid.to_string(),
        };
        line(format_args!(
            "  {tid:>8}  {:<16}  {n:>10} samples  {:>7}",
            thread.name,
            percent(n, profile.sample_count())
        ));
    }

    let top = top_functions(profile, TOP);
    for (title, list) in [("self", &top.by_self), ("total", &top.by_total)] {
        line(format_args!(""));
        line(format_args!(
            "top {TOP} functions by {title} samples (of {} samples)",
            top.samples
        ));
        line(format_args!("  {:>10}  {:>7}  function", "samples", "%"));
        for f in list.iter() {
            line(format_args!(
                "  {:>10}  {:>7}  {}",
                f.samples,
                percent(f.samples, top.samples),
                f.name
            ));
        }
    }
    if let Some(heap) = &profile.heap {
        for l in heap_lines(profile, heap) {
            line(format_args!("{l}"));
        }
    }
    if !profile.names.is_empty() {
        line(format_args!(""));
        line(format_args!("names from (per module)"));
        for n in &profile.names {
            line(format_args!("  {}: {}", n.module, n.from));
        }
    }
    s
}

/// Bytes in a unit a person reads at a glance (`1.5 MiB`).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The summary's section on sampled allocations: the totals, what was not sampled, and the top
/// allocation sites by bytes allocated and by bytes live (each named by its function and its
/// caller's).
fn heap_lines(profile: &Profile, heap: &crate::profile::Heap) -> Vec<String> {
    let [objects, space, live_objects, live_space] = heap.totals();
    let mut out = vec![
        String::new(),
        format!(
            "allocations       {} samples, one per {} allocated on average: about {objects} objects and {} allocated, {live_objects} objects and {} live at the end (estimates; STEM.heap.pb.gz)",
            heap.sampled,
            bytes(heap.interval),
            bytes(space),
            bytes(live_space)
        ),
    ];
    if heap.sampled > 0 {
        out.push(format!(
            "allocation cost   {} a sample in the allocator (unwind and store), {:.3} s in all",
            nanos_per(heap.sample_time, heap.sampled),
            heap.sample_time.as_secs_f64()
        ));
    }
    if !heap.dropped.is_empty() {
        let what: Vec<String> = heap
            .dropped
            .iter()
            .map(|(w, n)| format!("{n} ({w})"))
            .collect();
        out.push(format!("allocation samples not taken: {}", what.join(", ")));
    }
    if heap.untracked > 0 {
        out.push(format!(
            "allocation samples not tracked as live (live table full): {}",
            heap.untracked
        ));
    }
    let site_name = |stack: usize| {
        let mut frames = profile.stack_frames_leaf_first(stack).map(function_name);
        match (frames.next(), frames.next()) {
            (Some(f), Some(caller)) => format!("{f} <- {caller}"),
            (Some(f), None) => f.into_owned(),
            _ => UNKNOWN_FUNCTION.to_owned(),
        }
    };
    for (title, total, value) in [
        (
            "allocated",
            space,
            (|s: &crate::profile::HeapSite| s.alloc_bytes) as fn(&_) -> u64,
        ),
        ("live at the end", live_space, |s| s.inuse_bytes),
    ] {
        let mut by_name: HashMap<String, u64> = HashMap::new();
        for s in &heap.sites {
            *by_name.entry(site_name(s.stack)).or_default() += value(s);
        }
        let list = top(by_name, TOP);
        out.push(String::new());
        out.push(format!(
            "top {TOP} allocation sites by bytes {title} (of {})",
            bytes(total)
        ));
        out.push(format!("  {:>12}  {:>7}  function <- caller", "bytes", "%"));
        for f in list.iter().filter(|f| f.samples > 0) {
            out.push(format!(
                "  {:>12}  {:>7}  {}",
                bytes(f.samples),
                percent(f.samples, total),
                f.name
            ));
        }
    }
    out
}

/// Samples whose leaf is in code generated at run time ([`crate::profile::Module::generated`]),
/// and of them those whose leaf a perf map or jitdump names.
pub fn generated_leaves(profile: &Profile) -> (u64, u64) {
    let (mut generated, mut named) = (0, 0);
    for t in &profile.totals {
        let leaf = profile
            .stacks
            .get(t.stack)
            .and_then(|s| s.first())
            .and_then(|&l| profile.locations.get(l));
        let Some(leaf) = leaf else { continue };
        if leaf
            .module
            .and_then(|m| profile.modules.get(m))
            .is_some_and(|m| m.generated)
        {
            generated += t.samples;
            if leaf
                .frames
                .first()
                .is_some_and(|f| !f.function.starts_with("[unknown]"))
            {
                named += t.samples;
            }
        }
    }
    (generated, named)
}

/// What the user should be told at the end of a run, one line each: input that was refused,
/// threads that were not sampled, a share of the processes' CPU time that no timer sampled
/// (past a tenth and 100 ms), signals of the profiler's number that were not its own. Empty
/// for a run where everything was sampled.
pub fn warnings(profile: &Profile) -> Vec<String> {
    let c = &profile.counters;
    let mut out: Vec<String> = refused_line(&c.refused).into_iter().collect();
    let unsampled: Vec<String> = c
        .threads_not_sampled
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(why, n)| format!("{n} ({why})"))
        .collect();
    if !unsampled.is_empty() {
        out.push(format!("threads not sampled: {}", unsampled.join(", ")));
    }
    if let Some(heap) = &profile.heap {
        let dropped: u64 = heap.dropped.iter().map(|(_, n)| n).sum();
        // Past 1 % of the samples, the estimates are low by about as much.
        if dropped * 100 > heap.sampled + dropped {
            let what: Vec<String> = heap
                .dropped
                .iter()
                .map(|(w, n)| format!("{n} ({w})"))
                .collect();
            out.push(format!(
                "{dropped} of {} sampled allocations have no sample, so the heap profile's estimates are low by {}: {}",
                heap.sampled + dropped,
                percent(dropped, heap.sampled + dropped),
                what.join(", ")
            ));
        }
        if heap.untracked > 0 {
            out.push(format!(
                "{} allocation samples found the live table full: counted as allocated, never as live",
                heap.untracked
            ));
        }
    }
    if c.unsampled_cpu >= Duration::from_millis(100)
        && c.unsampled_cpu * 10 > c.process_cpu
        && !c.cpu_not_sampled
    {
        out.push(format!(
            "{} of the processes' CPU time was not sampled ({:.3} s of {:.3} s): threads the profiler did not see start, or could not sample",
            percent(
                c.unsampled_cpu.as_nanos() as u64,
                c.process_cpu.as_nanos() as u64
            ),
            c.unsampled_cpu.as_secs_f64(),
            c.process_cpu.as_secs_f64()
        ));
    }
    if let Some(unjoined) = unjoined_cpu(profile) {
        let all = c.descendants_cpu.unwrap_or_default();
        out.push(format!(
            "{:.3} s of the run's {:.3} s of CPU time ({}) was in processes that never joined the profile: statically linked or set-ID programs (the loader ignores LD_PRELOAD for them), or programs started without the profiler's environment",
            unjoined.as_secs_f64(),
            all.as_secs_f64(),
            percent(unjoined.as_nanos() as u64, all.as_nanos() as u64)
        ));
    }
    if c.go_programs.1 > 0 {
        out.push(format!(
            "{} Go process(es): the runtime's goroutine (g) was not found: their stacks in Go code stop at the first frame",
            c.go_programs.1
        ));
    }
    if c.program_actions > 0 {
        out.push(format!(
            "the program set its own action for the sampling signal: the profiler's handler stayed in front and passed its {} signals on to it (--signal chooses another)",
            c.foreign_signals
        ));
    } else if c.foreign_signals > 0 {
        out.push(format!(
            "{} signals of the sampling signal's number came from elsewhere than the profiler's timers (ignored: --signal chooses another)",
            c.foreign_signals
        ));
    }
    out
}

/// The CPU time of the run's processes that never joined the profile, where it is clearly some:
/// the descendants' CPU time less the joined processes' (each seen up to `record`'s last look,
/// at most 100 ms before it ended), past 200 ms plus 100 ms a joined process and past a tenth
/// of the whole.
pub fn unjoined_cpu(profile: &Profile) -> Option<Duration> {
    let c = &profile.counters;
    let all = c.descendants_cpu?;
    let unjoined = all.saturating_sub(c.lifetime_cpu);
    let lag =
        Duration::from_millis(100) * u32::try_from(profile.processes().len()).unwrap_or(u32::MAX);
    (unjoined > Duration::from_millis(200) + lag && unjoined * 10 > all).then_some(unjoined)
}

/// The line that says what `record` refused or dropped (see [`crate::profile::Counters::refused`]),
/// `None` if nothing.
pub fn refused_line(refused: &[(String, u64)]) -> Option<String> {
    let what: Vec<String> = refused
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(w, n)| format!("{n} {w}"))
        .collect();
    (!what.is_empty()).then(|| format!("refused or dropped: {}", what.join("; ")))
}

/// Writes the summary alone as `dir/STEM.summary.txt` (as [`super::write_all_with_mode`]
/// writes its files); returns its path.
pub fn write_file(
    profile: &Profile,
    dir: &std::path::Path,
    stem: &str,
    mode: u32,
) -> io::Result<std::path::PathBuf> {
    let path = super::Outputs::paths(dir, stem).summary;
    let name = format!("{stem}.summary.txt");
    super::write_one(dir, &name, mode, &|w| write(profile, w))?;
    Ok(path)
}

/// Writes the summary's text.
pub fn write(profile: &Profile, w: &mut dyn Write) -> io::Result<()> {
    w.write_all(text(profile).as_bytes())
}
