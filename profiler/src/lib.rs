//! A sampling profiler for Linux programs, built on `unwind-in-process`.
//!
//! Every thread gets its own CPU-time timer (a perf event on the thread's `task-clock`, or
//! `timer_create` on `CLOCK_THREAD_CPUTIME_ID`, each signalling that thread alone; see
//! [`timer`]), or a wall-clock one. Its signal handler
//! unwinds the interrupted stack with [`unwind_in_process::unwind_signal`] into a preallocated
//! ring of that thread ([`ring`]), counting every signal it could not turn into a sample, by
//! reason. A collector drains the rings every few milliseconds ([`collect`]): under the
//! `record` command, `record` itself, through memory the program's processes share with it
//! ([`session`]); otherwise a thread of the program, which also keeps the unwinder's rule table
//! current as modules are loaded and unloaded. At the end, the samples are symbolized
//! ([`symbolize`]) into a [`Profile`] that every output format is written from ([`output`]).
//!
//! Three ways to use it: the `unwind-profiler record -- PROGRAM ARGS` command; the preload
//! library (`libunwind_profiler_preload.so`, configured by environment variables, see
//! [`Config::from_env`]); and this crate's API, for a program that profiles itself:
//!
//! ```no_run
//! let profiler = unwind_profiler::Profiler::start(unwind_profiler::Config::default()).unwrap();
//! // ... work; threads that should be sampled call unwind_profiler::sample_this_thread() ...
//! let profile = profiler.stop();
//! unwind_profiler::output::write_all(&profile, std::path::Path::new("."), "profile").unwrap();
//! ```

pub mod collect;
pub mod config;
pub mod export;
pub mod output;
pub mod periods;
pub mod profile;
pub mod ring;
pub mod sampler;
pub mod session;
pub mod signals;
pub mod symbolize;
pub mod threads;
pub mod timer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

pub use config::{Clock, Config, ConfigError};
pub use profile::Profile;

/// Why profiling could not start.
#[derive(Debug)]
pub enum StartError {
    /// The unwinder could not build its tables.
    Unwinder(unwind_in_process::Error),
    /// The signal handler could not be installed, or profiling was already started.
    Signal(std::io::Error),
    /// The collector thread could not be started.
    Thread(std::io::Error),
    /// `record`'s session could not be joined (see [`session`]).
    Session(std::io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Unwinder(e) => write!(f, "cannot load the unwind tables: {e}"),
            StartError::Signal(e) => write!(f, "cannot install the sampling signal handler: {e}"),
            StartError::Thread(e) => write!(f, "cannot start the collector thread: {e}"),
            StartError::Session(e) => write!(f, "cannot join the recording session: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// What the collector thread shares with the [`Profiler`].
struct Shared {
    collector: Mutex<collect::InProcess>,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    /// A profile of everything sampled so far (after draining the rings once more).
    fn profile(&self) -> Profile {
        let mut c = self.collector.lock().unwrap_or_else(|e| e.into_inner());
        c.tick();
        c.finish()
    }
}

/// A running profiler (one per process).
pub struct Profiler {
    config: Config,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Set (from a signal handler, say) to ask the collector for a profile written while running.
static SNAPSHOT: AtomicBool = AtomicBool::new(false);

impl Profiler {
    /// Loads the unwind tables, installs the signal handler and starts sampling the calling
    /// thread, and any thread that calls [`sample_this_thread`] or is created through the
    /// preload library's `pthread_create`.
    ///
    /// Once per process: a second call, while this profiler runs or after its
    /// [`stop`](Self::stop), fails with [`StartError::Signal`] and changes nothing.
    pub fn start(config: Config) -> Result<Profiler, StartError> {
        unwind_in_process::set_stack_scanning(config.stack_scanning)
            .map_err(StartError::Unwinder)?;
        let report = unwind_in_process::init().map_err(StartError::Unwinder)?;
        sampler::process().table_built(&report, false);
        sampler::install(config.timing()).map_err(StartError::Signal)?;
        let shared = Arc::new(Shared {
            collector: Mutex::new(collect::InProcess::new(
                config.sample_interval(),
                config.clock == Clock::Wall,
            )),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let every = config.collect_every;
        let snapshot_dir = config.output.clone();
        let mode = config.output_mode;
        let stem = config.stem.clone();
        let thread = threads::spawn_unsampled("unwind-profiler", move || loop {
            let stop = {
                let guard = s.stop.lock().unwrap_or_else(|e| e.into_inner());
                let (guard, _) = s
                    .wake
                    .wait_timeout(guard, every)
                    .unwrap_or_else(|e| e.into_inner());
                *guard
            };
            if SNAPSHOT.swap(false, Ordering::Relaxed) {
                let profile = s.profile();
                if let Some(dir) = &snapshot_dir {
                    match output::write_all_with_mode(&profile, dir, &stem, mode) {
                        Ok(_) => {
                            eprintln!("unwind-profiler: snapshot written to {}", dir.display())
                        }
                        Err(e) => eprintln!("unwind-profiler: snapshot: {e}"),
                    }
                }
            } else {
                s.collector.lock().unwrap_or_else(|e| e.into_inner()).tick();
            }
            if stop {
                return;
            }
        })
        .map_err(StartError::Thread)?;
        sampler::start_thread();
        Ok(Profiler {
            config,
            shared,
            thread: Some(thread),
        })
    }

    /// A profile of everything sampled so far; sampling goes on.
    pub fn report(&self) -> Profile {
        self.shared.profile()
    }

    /// Stops sampling and returns the profile.
    pub fn stop(mut self) -> Profile {
        sampler::stop();
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.profile()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

/// Asks the running profiler's collector to write a profile of everything so far to the
/// configured output directory, within one collection interval. Async-signal-safe (an atomic
/// store; the collector does the work).
pub fn request_snapshot() {
    // Under `record`, `record` writes it.
    if !session::request_snapshot() {
        SNAPSHOT.store(true, Ordering::Relaxed);
    }
}

/// Starts sampling the calling thread; call it once per thread. Threads created through the
/// preload library's `pthread_create` are sampled without it.
pub fn sample_this_thread() {
    threads::sample_this_thread();
}
