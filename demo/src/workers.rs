//! The threads that run the phases: Rust `std::thread` workers, the main thread, and one thread
//! made by C (`pthread_create` in the plugin) that calls back into Rust.

use std::ffi::c_void;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::phases::{self, Worker, PHASES};
use crate::plugin::DemoPlugin;
use crate::results::Results;

/// What one thread did, for the summary.
#[derive(Debug)]
pub struct Report {
    /// The thread's name.
    pub name: String,
    /// CPU time spent in each phase (indexed by `Phase::index`).
    pub spent: [Duration; PHASES.len()],
    /// CPU time spent outside the phases.
    pub other: Duration,
    /// Leaf calls per phase.
    pub calls: [u64; PHASES.len()],
    /// Iterations run.
    pub iterations: u64,
    /// Its leaf results.
    pub results: Results,
}

impl Report {
    /// The report of `worker`, which ran on the thread `name`.
    pub fn new(name: &str, mut worker: Worker) -> Report {
        worker.budget.charge_other();
        Report {
            name: name.to_owned(),
            spent: PHASES.map(|phase| worker.budget.spent(phase)),
            other: worker.budget.other(),
            calls: worker.calls,
            iterations: worker.iterations,
            results: worker.results,
        }
    }
}

/// Runs iterations on the calling thread until `deadline`.
pub fn work_until(name: &str, deadline: Instant) -> Report {
    let mut worker = Worker::new();
    while Instant::now() < deadline {
        phases::run_iteration(&mut worker);
    }
    Report::new(name, worker)
}

/// Starts `count` Rust workers (`worker-1`, …) that work until `deadline`.
pub fn spawn_workers(count: usize, deadline: Instant) -> Vec<JoinHandle<Report>> {
    (1..=count)
        .map(|i| {
            let name = format!("worker-{i}");
            thread::Builder::new()
                .name(name.clone())
                .spawn(move || work_until(&name, deadline))
                .expect("cannot start a worker thread")
        })
        .collect()
}

/// The job of the thread made by C: its deadline in, its report out.
struct CThreadJob {
    deadline: Instant,
    report: Option<Report>,
}

/// The entry of the thread made by the plugin (Rust called from a thread C created).
extern "C" fn c_thread_entry(arg: *mut c_void) {
    // SAFETY: `arg` is the boxed CThreadJob that CThread::start passed; CThread::join reads it
    // only after pthread_join, and nothing else touches it meanwhile.
    let job = unsafe { &mut *arg.cast::<CThreadJob>() };
    job.report = Some(work_until("plugin-thread", job.deadline));
}

/// The thread made by C with `pthread_create`, inside the plugin.
#[derive(Debug)]
pub struct CThread {
    plugin: &'static DemoPlugin,
    thread: u64,
    job: *mut CThreadJob,
}

impl CThread {
    /// Starts it through the plugin's `plugin_thread_start`; it works until `deadline`.
    pub fn start(plugin: &'static DemoPlugin, deadline: Instant) -> Result<CThread, String> {
        let job = Box::into_raw(Box::new(CThreadJob {
            deadline,
            report: None,
        }));
        let mut thread = 0u64;
        // SAFETY: plugin_thread_start has this signature; `job` stays allocated until join (or
        // is freed below if no thread was made); `thread` is a valid out-pointer.
        let err = unsafe { (plugin.thread_start)(c_thread_entry, job.cast(), &mut thread) };
        if err != 0 {
            // SAFETY: no thread was made, so `job` is still ours alone.
            drop(unsafe { Box::from_raw(job) });
            return Err(format!("plugin_thread_start failed: error {err}"));
        }
        Ok(CThread {
            plugin,
            thread,
            job,
        })
    }

    /// Waits for it (`pthread_join` in the plugin) and returns its report.
    pub fn join(self) -> Result<Report, String> {
        // SAFETY: `thread` came from plugin_thread_start and is joined once, here.
        let err = unsafe { (self.plugin.thread_join)(self.thread) };
        if err != 0 {
            // The thread may still use the job: leak it rather than free it under it.
            return Err(format!("plugin_thread_join failed: error {err}"));
        }
        // SAFETY: the thread has ended, so the job is ours alone again; it came from
        // Box::into_raw in start.
        let job = unsafe { Box::from_raw(self.job) };
        job.report
            .ok_or_else(|| "the plugin thread ended without a report".to_owned())
    }
}
