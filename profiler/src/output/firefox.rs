//! The Firefox Profiler's processed profile format, built with `fxprof-processed-profile` and
//! written as gzipped JSON, which <https://profiler.firefox.com> loads as is ("Load a profile
//! from file"; it recognizes gzip by its magic bytes).
//!
//! The profile has one process (the program, its pid, starting at the profile's start) and one
//! thread per model thread (its tid and name; the thread whose tid is the pid is the main
//! thread). When the threads belong to several pids (a [merged](crate::profile::Profile::merge)
//! profile), it has one process per pid instead, named after its program (or programs, if it
//! ran several), starting at its first sample, each with its own threads, its main thread the
//! one whose tid is its pid; only the root process ([`Profile::pid`]) has an end time. Every sample is added with its time, its stack and, for a CPU-time profile, a CPU
//! delta of one interval (each sample stands for that much CPU time of its thread).
//!
//! Frames are string labels holding [`function_name`], root first, with inlined frames
//! expanded, so the profile is already symbolicated. fxprof-processed-profile 0.8 attaches a
//! library (a "resource") only to address frames, whose names then come from one symbol per
//! address without inlined functions; a label frame carries no library, so the profile lists
//! none.

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::{Duration, UNIX_EPOCH};

use flate2::write::GzEncoder;
use flate2::Compression;
use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo, ProcessHandle,
    Profile as FxProfile, ReferenceTimestamp, SamplingInterval, StackHandle, ThreadHandle,
    Timestamp,
};

use super::{file_name, function_name, process_name};
use crate::profile::Profile;

/// The name of the thread that gets the samples whose thread index is not in the model.
pub const UNKNOWN_THREAD: &str = "[unknown thread]";

fn timestamp(since_start: Duration) -> Timestamp {
    Timestamp::from_nanos_since_reference(u64::try_from(since_start.as_nanos()).unwrap_or(u64::MAX))
}

/// The processes of the Firefox profile, added as their first thread is: one for the whole
/// profile if its threads have one pid, else one per pid.
struct Processes<'a> {
    profile: &'a Profile,
    /// Whether the threads belong to several pids.
    several: bool,
    /// Per pid: its name (its programs' names) and when its first timeline sample was taken.
    info: HashMap<u32, (String, Option<Duration>)>,
    handles: HashMap<u32, ProcessHandle>,
}

impl<'a> Processes<'a> {
    fn new(profile: &'a Profile) -> Processes<'a> {
        let mut names: Vec<(u32, Vec<String>)> = Vec::new();
        for p in profile.processes() {
            let name = process_name(&p.name).into_owned();
            match names.iter_mut().find(|(pid, _)| *pid == p.pid) {
                Some((_, list)) => list.push(name),
                None => names.push((p.pid, vec![name])),
            }
        }
        let several = names.len() > 1;
        let mut info: HashMap<u32, (String, Option<Duration>)> = names
            .into_iter()
            // A pid that ran several programs (exec) is named after all of them.
            .map(|(pid, list)| (pid, (list.join(", "), None)))
            .collect();
        if several {
            for sample in &profile.samples {
                if let Some((_, first)) = info.get_mut(&profile.process_of(sample.thread).0) {
                    *first = Some(first.map_or(sample.time, |t| t.min(sample.time)));
                }
            }
        }
        Processes {
            profile,
            several,
            info,
            handles: HashMap::new(),
        }
    }

    /// The process of thread `thread` (an index into the model's threads, possibly out of range),
    /// added if it is not yet, with its pid and start time.
    fn handle(&mut self, fx: &mut FxProfile, thread: usize) -> (ProcessHandle, u32, Timestamp) {
        let profile = self.profile;
        if !self.several {
            // One process: the program's, from the profile's start to its end.
            let handle = *self.handles.entry(profile.pid).or_insert_with(|| {
                let h = fx.add_process(
                    file_name(&profile.program),
                    profile.pid,
                    timestamp(Duration::ZERO),
                );
                fx.set_process_end_time(h, timestamp(profile.duration));
                h
            });
            return (handle, profile.pid, timestamp(Duration::ZERO));
        }
        let (pid, program) = profile.process_of(thread);
        let (name, first) = self
            .info
            .get(&pid)
            .cloned()
            .unwrap_or_else(|| (process_name(program).into_owned(), None));
        // From its first sample, or the profile's start if the timeline has none.
        let start = first.unwrap_or_default();
        let handle = *self.handles.entry(pid).or_insert_with(|| {
            let h = fx.add_process(&name, pid, timestamp(start));
            // The root process runs until the end; the others' ends are not known.
            if pid == profile.pid {
                fx.set_process_end_time(h, timestamp(profile.duration));
            }
            h
        });
        (handle, pid, timestamp(start))
    }
}

/// The Firefox Profiler profile of `profile` (see the [module documentation](self)); serialize
/// it with serde (`serde_json::to_writer`).
pub fn build(profile: &Profile) -> FxProfile {
    let name = file_name(&profile.program);
    let start = profile.start.duration_since(UNIX_EPOCH).unwrap_or_default();
    let interval = u64::try_from(profile.interval.as_nanos()).unwrap_or(u64::MAX);
    let mut fx = FxProfile::new(
        name,
        ReferenceTimestamp::from_duration_since_unix_epoch(start),
        SamplingInterval::from_nanos(interval),
    );
    fx.set_os_name("Linux");
    // Every frame is a label: there is nothing for the Firefox Profiler to look up.
    fx.set_symbolicated(true);
    let category: CategoryPairHandle = fx.add_category("User", CategoryColor::Yellow).into();

    let mut processes = Processes::new(profile);
    if !processes.several {
        // The one process is there even without samples.
        processes.handle(&mut fx, 0);
    }
    // A thread of the model gets a track when the timeline has samples of it (the threads that
    // exited, merged by name for the totals, have none).
    let mut handles: Vec<Option<ThreadHandle>> = vec![None; profile.threads.len()];
    let mut unknown_thread = None;

    // CPU time is known only when the timer counts it; a sample stands for `weight` periods.
    let cpu_delta = |weight: u64| {
        if profile.wall_clock {
            CpuDelta::ZERO
        } else {
            CpuDelta::from(
                profile
                    .interval
                    .saturating_mul(u32::try_from(weight).unwrap_or(u32::MAX)),
            )
        }
    };
    let mut stacks: HashMap<(usize, usize), Option<StackHandle>> = HashMap::new();
    for sample in &profile.samples {
        let thread = match (
            profile.threads.get(sample.thread),
            handles.get_mut(sample.thread),
        ) {
            (Some(t), Some(handle)) => *handle.get_or_insert_with(|| {
                let tid = t.tid as u32;
                let (process, pid, start) = processes.handle(&mut fx, sample.thread);
                let h = fx.add_thread(process, tid, start, tid == pid);
                if !t.name.is_empty() {
                    fx.set_thread_name(h, &t.name);
                }
                h
            }),
            // Samples of a thread the model does not list still count; they get a thread of
            // their own.
            _ => *unknown_thread.get_or_insert_with(|| {
                let (process, _, start) = processes.handle(&mut fx, sample.thread);
                let h = fx.add_thread(process, 0, start, false);
                fx.set_thread_name(h, UNKNOWN_THREAD);
                h
            }),
        };
        let stack = *stacks
            .entry((sample.thread, sample.stack))
            .or_insert_with(|| {
                let frames: Vec<FrameInfo> = profile
                    .stack_frames_root_first(sample.stack)
                    .map(|frame| FrameInfo {
                        frame: Frame::Label(fx.intern_string(&function_name(frame))),
                        category_pair: category,
                        flags: FrameFlags::empty(),
                    })
                    .collect();
                fx.intern_stack_frames(thread, frames.into_iter())
            });
        fx.add_sample(
            thread,
            timestamp(sample.time),
            stack,
            cpu_delta(sample.weight),
            i32::try_from(sample.weight).unwrap_or(i32::MAX),
        );
    }
    fx
}

/// Writes the Firefox Profiler profile of `profile` as gzipped JSON.
pub fn write(profile: &Profile, w: &mut dyn Write) -> io::Result<()> {
    let mut gz = GzEncoder::new(w, Compression::default());
    serde_json::to_writer(&mut gz, &build(profile))?;
    gz.finish()?;
    Ok(())
}
