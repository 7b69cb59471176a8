//! Thread CPU time and the per-thread phase budgets.
//!
//! Every thread that runs the phases keeps a [`Budget`]: each iteration adds every phase's share
//! of [`ITERATION`] to that phase's cumulative target, and a phase runs (in chunks of a few tens
//! of microseconds, reading the clock once per chunk) until the thread's CPU time spent in it
//! reaches its target. Because the targets are cumulative, a chunk that overshoots is paid back
//! in the next iteration, and so is a phase that could not run yet (the mandelbrot phase before
//! the plugin is loaded): over a run, each phase gets its share of the thread's CPU time.

use std::time::Duration;

use crate::phases::{Phase, PHASES};

/// The CPU time of one iteration of the four phases, split by their shares.
pub const ITERATION: Duration = Duration::from_millis(10);

/// The calling thread's CPU time (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`).
pub fn thread_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The whole process's CPU time (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`).
pub fn process_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the CPU clocks of the calling thread and
    // process always exist, so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime({clock}) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One thread's CPU-time accounting: what each phase was given and spent.
#[derive(Clone, Debug)]
pub struct Budget {
    /// The thread CPU time at the last reading.
    last: Duration,
    /// CPU time spent in each phase (indexed by [`Phase::index`]).
    spent: [Duration; PHASES.len()],
    /// Cumulative CPU time each phase is due.
    target: [Duration; PHASES.len()],
    /// CPU time spent outside the phases (e.g. loading the plugin).
    other: Duration,
}

impl Budget {
    /// Starts accounting at the calling thread's current CPU time.
    pub fn new() -> Self {
        Budget {
            last: thread_cpu_time(),
            spent: [Duration::ZERO; PHASES.len()],
            target: [Duration::ZERO; PHASES.len()],
            other: Duration::ZERO,
        }
    }

    /// Adds one iteration's share to every phase's target.
    pub fn next_iteration(&mut self) {
        for phase in PHASES {
            self.target[phase.index()] += ITERATION * phase.percent() / 100;
        }
    }

    /// Whether `phase` is still owed CPU time (checked before its first chunk).
    pub fn owed(&self, phase: Phase) -> bool {
        self.spent[phase.index()] < self.target[phase.index()]
    }

    /// Reads the clock after a chunk of `phase`, charging it everything since the last reading;
    /// returns whether the phase is still owed time.
    pub fn keep_going(&mut self, phase: Phase) -> bool {
        let now = thread_cpu_time();
        self.spent[phase.index()] += now.saturating_sub(self.last);
        self.last = now;
        self.owed(phase)
    }

    /// Reads the clock after work outside the phases, charging it to "other".
    pub fn charge_other(&mut self) {
        let now = thread_cpu_time();
        self.other += now.saturating_sub(self.last);
        self.last = now;
    }

    /// CPU time spent in `phase` so far.
    pub fn spent(&self, phase: Phase) -> Duration {
        self.spent[phase.index()]
    }

    /// CPU time charged to work outside the phases.
    pub fn other(&self) -> Duration {
        self.other
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new()
    }
}
