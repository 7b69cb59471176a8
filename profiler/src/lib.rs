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

pub mod alloc_sampling;
pub mod byte_sampling;
pub mod collect;
pub mod config;
pub mod debug_info;
pub mod debuginfod;
pub mod export;
pub mod output;
pub mod periods;
pub mod profile;
pub mod pull;
pub mod ring;
pub mod sampler;
pub mod session;
pub mod signals;
mod static_tls;
pub mod symbolize;
pub mod threads;
pub mod timer;
pub mod user_cache;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

pub use config::{Clock, Config, ConfigError};
pub use profile::Profile;

/// Why profiling could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// The unwinder could not build its tables.
    Unwinder(unwind_in_process::Error),
    /// The signal handler could not be installed, or profiling was already started.
    Signal(std::io::Error),
    /// The collector thread could not be started.
    Thread(std::io::Error),
    /// `record`'s session could not be joined (see [`session`]).
    Session(std::io::Error),
    /// The pull endpoint's address could not be bound ([`Config::pprof_listen`]).
    Pull(std::io::Error),
    /// The export's settings cannot be honoured ([`export::ExportError::Settings`]).
    Export(export::ExportError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Unwinder(e) => write!(f, "cannot load the unwind tables: {e}"),
            StartError::Signal(e) => write!(f, "cannot install the sampling signal handler: {e}"),
            StartError::Thread(e) => write!(f, "cannot start the collector thread: {e}"),
            StartError::Session(e) => write!(f, "cannot join the recording session: {e}"),
            StartError::Pull(e) => write!(f, "cannot serve /debug/pprof/profile: {e}"),
            StartError::Export(e) => write!(f, "cannot export: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// What the collector thread shares with the [`Profiler`].
struct Shared {
    collector: Mutex<collect::InProcess>,
    /// A continuous run's periods (`Config::profile_period`).
    periods: Mutex<Option<periods::Periods>>,
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

    /// Cuts the current period: its profile.
    fn cut_period(&self) -> Profile {
        self.collector
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cut_period()
    }

    /// Cuts a period if one is due, and writes and exports it.
    fn cut_if_due(&self) {
        let mut periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = periods.as_mut().filter(|p| p.due()) {
            p.take(|| Some(self.cut_period()));
        }
    }
}

impl pull::Windows for Shared {
    fn start_window(&self) -> bool {
        self.collector
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .start_window()
    }

    fn end_window(&self) -> Option<Vec<u8>> {
        let profile = self
            .collector
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .end_window()?;
        let mut body = Vec::new();
        output::pprof::write(&profile, &mut body).ok()?;
        Some(body)
    }

    fn heap(&self) -> Option<Vec<u8>> {
        if !alloc_sampling::enabled() {
            return None;
        }
        let profile = self.profile();
        profile.heap.as_ref()?;
        let mut body = Vec::new();
        output::pprof::write_heap(&profile, &mut body).ok()?;
        Some(body)
    }
}

/// How long [`Profiler::stop`] keeps trying to deliver the periods still queued.
pub const EXPORT_AT_STOP: std::time::Duration = std::time::Duration::from_secs(5);

/// A running profiler (one per process).
pub struct Profiler {
    config: Config,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    pprof_address: Option<std::net::SocketAddr>,
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
        // Settings read and bound first: a setting that cannot be honoured, or a port taken,
        // fails the start before anything is set up.
        let export = export::Export::configured(&config, |name| std::env::var(name).ok())
            .map_err(StartError::Export)?;
        let listener = config
            .pprof_listen
            .map(std::net::TcpListener::bind)
            .transpose()
            .map_err(StartError::Pull)?;
        unwind_in_process::set_stack_scanning(config.stack_scanning)
            .map_err(StartError::Unwinder)?;
        let report = unwind_in_process::init().map_err(StartError::Unwinder)?;
        sampler::process().table_built(&report, false);
        sampler::install(config.timing()).map_err(StartError::Signal)?;
        let periods = match config.profile_period {
            Some(every) => Some(
                periods::Periods::start(
                    every,
                    config.output.as_deref(),
                    &config.stem,
                    config.keep_periods,
                    config.output_mode,
                    export,
                )
                .map_err(StartError::Thread)?,
            ),
            None => None,
        };
        let shared = Arc::new(Shared {
            collector: Mutex::new(collect::InProcess::new(
                config.sample_interval(),
                config.clock == Clock::Wall,
                symbolize::SymbolSources::of_config(&config, |n| std::env::var(n).ok()),
            )),
            periods: Mutex::new(periods),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let every = config.drain_every();
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
                s.cut_if_due();
            }
            if stop {
                return;
            }
        })
        .map_err(StartError::Thread)?;
        threads::sample_this_thread();
        let pprof_address = match listener {
            Some(l) => Some(pull::serve(l, shared.clone()).map_err(StartError::Pull)?),
            None => None,
        };
        sampler::start_allocation_sampling();
        Ok(Profiler {
            config,
            shared,
            thread: Some(thread),
            pprof_address,
        })
    }

    /// A builder of a profiler: its settings one call each, from [`Config::default`].
    pub fn builder() -> ProfilerBuilder {
        ProfilerBuilder {
            config: Config::default(),
        }
    }

    /// A profile of everything sampled so far; sampling goes on. (Continuous profilers use
    /// [`take`](Self::take), whose memory does not grow with the run.)
    pub fn report(&self) -> Profile {
        self.shared.profile()
    }

    /// The profile of the window since the last `take` (or since the start, or since the last
    /// period cut when [`Config::profile_period`] is set): its samples only, aggregated by
    /// stack, with its start and duration; the next window starts now. The stacks and totals
    /// kept are emptied at each cut (the symbol cache is kept), so a program that calls it
    /// every few seconds holds one window's stacks however long it runs.
    pub fn take(&self) -> Profile {
        self.shared.cut_period()
    }

    /// Stops sampling and returns the profile: of the whole run, or with
    /// [`Config::profile_period`], of the last, partial period (written and exported as the
    /// others, the delivery of those still queued tried for [`EXPORT_AT_STOP`]), its counters
    /// saying what was done with them all ([`profile::Counters::periods`]).
    pub fn stop(mut self) -> Profile {
        sampler::stop();
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let periods = self
            .shared
            .periods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(mut periods) = periods else {
            return self.shared.profile();
        };
        let shared = &self.shared;
        let mut last = periods
            .take(|| Some(shared.cut_period()))
            .unwrap_or_else(|| shared.profile());
        let resets = self
            .shared
            .collector
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .symbol_cache_resets();
        last.counters.periods = Some(periods.finish(EXPORT_AT_STOP, resets));
        last
    }

    /// Where it serves `/debug/pprof/profile` ([`Config::pprof_listen`], its port chosen if
    /// 0 was given).
    pub fn pprof_address(&self) -> Option<std::net::SocketAddr> {
        self.pprof_address
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

/// Settings of a [`Profiler`], one call each, then [`start`](Self::start):
///
/// ```no_run
/// let profiler = unwind_profiler::Profiler::builder()
///     .frequency(100)
///     .period(std::time::Duration::from_secs(10))
///     .export_otlp("http://127.0.0.1:4318")
///     .service("checkout")
///     .label("service.version", "1.4.2")
///     .start()
///     .unwrap();
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until its start()"]
pub struct ProfilerBuilder {
    config: Config,
}

impl ProfilerBuilder {
    /// Samples per second of each thread's clock (1 to 20,000; 1000 by default).
    pub fn frequency(mut self, hz: u32) -> Self {
        self.config.frequency = hz.clamp(1, 20_000);
        self
    }

    /// The clock the rate is measured in (CPU time by default).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.config.clock = clock;
        self
    }

    /// Continuous profiling: a profile of each window this long (100 ms to 1 h), exported and
    /// written (to the output directory, if one is set) as it is cut.
    pub fn period(mut self, every: std::time::Duration) -> Self {
        self.config.profile_period = Some(every.clamp(
            std::time::Duration::from_millis(100),
            std::time::Duration::from_secs(3600),
        ));
        self
    }

    /// Exports to an OpenTelemetry Collector's OTLP/HTTP endpoint (`http://HOST:4318`, or
    /// `otlp` for the `OTEL_EXPORTER_OTLP_*` variables'); see [`export`].
    pub fn export_otlp(mut self, url: &str) -> Self {
        self.config.export = Some(url.to_owned());
        self
    }

    /// The exported profiles' `service.name`.
    pub fn service(mut self, name: &str) -> Self {
        self.config.service = Some(name.to_owned());
        self
    }

    /// A resource attribute of the exported profiles (`service.version`, ...).
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.config.labels.retain(|(k, _)| k != key);
        self.config.labels.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Serves `GET /debug/pprof/profile?seconds=N` at `addr` ([`pull`]; `127.0.0.1:0` for
    /// any free loopback port, then [`Profiler::pprof_address`]).
    pub fn serve_pprof(mut self, addr: std::net::SocketAddr) -> Self {
        self.config.pprof_listen = Some(addr);
        self
    }

    /// Samples allocations too, one sample point every `bytes` allocated on average (1 B to
    /// 1 GiB; Go's and tcmalloc's 512 KiB is
    /// [`DEFAULT_MEAN`](byte_sampling::DEFAULT_MEAN)): the allocations of a program whose
    /// `#[global_allocator]` is [`Sampled`](alloc_sampling::Sampled), or of any program under
    /// the preload library. The profile's [`heap`](Profile::heap) has them.
    pub fn sample_allocations(mut self, bytes: u64) -> Self {
        self.config.alloc_interval = Some(bytes.clamp(1, 1 << 30));
        self
    }

    /// Whether CPU time is sampled (default `true`); `false` with
    /// [`sample_allocations`](Self::sample_allocations) profiles allocations alone: no timer
    /// and no signal in the program.
    pub fn sample_cpu(mut self, on: bool) -> Self {
        self.config.sample_cpu = on;
        self
    }

    /// Where profiles (and period files) are written.
    pub fn output(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.config.output = Some(dir.into());
        self
    }

    /// The settings so far, to change any other.
    pub fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    /// Starts the profiler ([`Profiler::start`]).
    pub fn start(self) -> Result<Profiler, StartError> {
        Profiler::start(self.config)
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
/// preload library's `pthread_create` are sampled without it. [`SampledThread`] samples it for
/// a scope instead.
pub fn sample_this_thread() {
    threads::sample_this_thread();
}

pub use threads::SampledThread;
