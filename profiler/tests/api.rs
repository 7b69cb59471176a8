//! The Rust API, for a program that profiles itself: `Profiler::start(Config)` in this test
//! process; two worker threads that call `sample_this_thread()` run `#[inline(never)]` functions
//! (a first phase, then a second), a third thread sleeps, a fourth works without calling it.
//! `report()` between the phases has each worker's first-phase function under its caller and
//! nothing of the second phase; `stop()` has both phases; the thread that never asked to be
//! sampled has no samples; the sleeping thread is sampled with `Clock::Wall` and (almost) not
//! with `Clock::Cpu`. Profiling is once per process: a second `start`, while running or after
//! `stop`, fails with `StartError::Signal` and leaves the running profiler alone. And `stop()`
//! deletes every timer (no signal comes after it), the first one of the process included. And
//! `take()` gives each window its own samples, none of another; a `SampledThread` guard per
//! request samples its scope only, in one record however many guards a thread makes.
//!
//! Profiling is process-wide (one signal handler, one profiler), so one test profiles this
//! process with the CPU clock and the other runs this binary again, in a child process, to do
//! the same with the wall clock. An ordinary test, in debug too (the unwinder works on any
//! build with `.eh_frame`): `cargo test -p unwind-profiler --test api`.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use unwind_profiler::profile::Frame;
use unwind_profiler::sampler::{self, DropReason};
use unwind_profiler::{Clock, Config, Profile, Profiler, StartError};

/// Set (to `wall`) in the child process that runs [`profile_this_process`] with the wall clock.
const CLOCK_VAR: &str = "UNWIND_PROFILER_API_TEST_CLOCK";
/// Set in the child process that runs [`take_gives_each_window_its_own_samples`].
const WINDOWS_VAR: &str = "UNWIND_PROFILER_API_TEST_WINDOWS";
/// Set in the child process that runs [`a_guard_per_request_samples_its_scope_in_one_record`].
const GUARD_VAR: &str = "UNWIND_PROFILER_API_TEST_GUARD";
/// Set in the child process that runs [`stop_deletes_every_timer`].
const TIMERS_VAR: &str = "UNWIND_PROFILER_API_TEST_TIMERS";
/// Set in the child processes of [`sigtrap_timers_pass_the_programs_sigtraps_on`]: `handler` or
/// `default`, the program's `SIGTRAP` action before the profiler starts.
const TRAP_VAR: &str = "UNWIND_PROFILER_API_TEST_TRAP";

/// This thread's CPU time.
fn cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Spins until this thread has used `cpu` more CPU time. `mark` makes each caller's code its
/// own: a release build merges functions whose machine code is identical (LLVM's
/// `mergefunc`), and the three leaves below would otherwise be one function under one name.
#[inline(always)]
fn burn(cpu: Duration, mark: u64) -> u64 {
    let until = cpu_time() + cpu;
    let mut x = std::hint::black_box(mark);
    while cpu_time() < until {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
    }
    x
}

#[inline(never)]
fn first_phase_leaf() -> u64 {
    burn(Duration::from_millis(300), 1)
}

#[inline(never)]
fn first_phase() -> u64 {
    first_phase_leaf() ^ 0x11
}

#[inline(never)]
fn second_phase_leaf() -> u64 {
    burn(Duration::from_millis(300), 2)
}

#[inline(never)]
fn second_phase() -> u64 {
    second_phase_leaf() ^ 0x22
}

#[inline(never)]
fn unsampled_leaf() -> u64 {
    burn(Duration::from_millis(300), 3)
}

#[inline(never)]
fn unsampled_work() -> u64 {
    unsampled_leaf() ^ 0x33
}

#[inline(never)]
fn sleeping(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[inline(never)]
fn sleeper(stop: &AtomicBool) {
    sleeping(stop);
    std::hint::black_box(());
}

/// Whether `frame` is the function `name` of this test (demangled Rust names carry the path).
fn is(frame: &Frame, name: &str) -> bool {
    frame.function == name || frame.function.ends_with(&format!("::{name}"))
}

/// Samples (weighted) of the thread named `thread` whose stack has `function` called directly
/// by `parent`.
fn samples_under(p: &Profile, thread: &str, parent: &str, function: &str) -> u64 {
    p.samples
        .iter()
        .filter(|s| p.threads.get(s.thread).is_some_and(|t| t.name == thread))
        .filter(|s| {
            let frames: Vec<&Frame> = p.stack_frames_root_first(s.stack).collect();
            frames
                .windows(2)
                .any(|w| is(w[0], parent) && is(w[1], function))
        })
        .map(|s| s.weight)
        .sum()
}

/// Samples (weighted) with `function` anywhere in their stack, of any thread.
fn samples_in(p: &Profile, function: &str) -> u64 {
    p.samples
        .iter()
        .filter(|s| p.stack_frames_root_first(s.stack).any(|f| is(f, function)))
        .map(|s| s.weight)
        .sum()
}

/// Asserts that `start` fails because a profiler was already started in this process.
fn assert_second_start_fails(when: &str) {
    match Profiler::start(Config::default()) {
        Ok(_) => panic!("{when}: a second Profiler::start succeeded"),
        Err(StartError::Signal(e)) => {
            println!("{when}: second start: {e}");
            assert!(e.to_string().contains("already"), "{when}: {e}");
        }
        Err(e) => panic!("{when}: a second start failed for another reason: {e}"),
    }
}

const WORKERS: [&str; 2] = ["api-worker-0", "api-worker-1"];

#[test]
fn profile_this_process() {
    let clock = match std::env::var(CLOCK_VAR).as_deref() {
        Ok("wall") => Clock::Wall,
        _ => Clock::Cpu,
    };
    // The functions looked for are functions of their own in this build (see `burn`).
    let functions = [
        first_phase as *const () as usize,
        first_phase_leaf as *const () as usize,
        second_phase as *const () as usize,
        second_phase_leaf as *const () as usize,
        unsampled_work as *const () as usize,
        unsampled_leaf as *const () as usize,
    ];
    for (i, f) in functions.iter().enumerate() {
        assert!(
            !functions[..i].contains(f),
            "functions merged: {functions:x?}"
        );
    }
    let mut config = Config::default();
    config.frequency = 1000;
    config.clock = clock;
    let profiler = Profiler::start(config).expect("Profiler::start");
    assert_second_start_fails("while running");

    let (done_tx, done_rx) = mpsc::channel();
    let mut go = Vec::new();
    let mut threads = Vec::new();
    for name in WORKERS {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let done_tx = done_tx.clone();
        go.push(go_tx);
        threads.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    unwind_profiler::sample_this_thread();
                    std::hint::black_box(first_phase());
                    done_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    std::hint::black_box(second_phase());
                })
                .unwrap(),
        );
    }
    let unsampled = std::thread::Builder::new()
        .name("api-unsampled".into())
        .spawn(|| std::hint::black_box(unsampled_work()))
        .unwrap();
    let stop_sleeping = Arc::new(AtomicBool::new(false));
    let stop = stop_sleeping.clone();
    let sleeping_thread = std::thread::Builder::new()
        .name("api-sleeper".into())
        .spawn(move || {
            unwind_profiler::sample_this_thread();
            sleeper(&stop);
        })
        .unwrap();

    // Between the phases: the first is in the report, the second not yet.
    for _ in WORKERS {
        done_rx.recv().unwrap();
    }
    let running = profiler.report();
    for w in WORKERS {
        let first = samples_under(&running, w, "first_phase", "first_phase_leaf");
        println!("report(): {w}: {first} samples in first_phase_leaf");
        // 300 ms of CPU time each: about 300 samples.
        assert!(first >= 100, "report(): {w}: {first} first-phase samples");
    }
    assert_eq!(samples_in(&running, "second_phase_leaf"), 0);
    unsampled.join().unwrap();

    for g in &go {
        g.send(()).unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    stop_sleeping.store(true, Ordering::Relaxed);
    sleeping_thread.join().unwrap();
    let last = profiler.stop();
    assert_eq!(last.wall_clock, clock == Clock::Wall);
    assert_eq!(last.interval, Duration::from_millis(1));
    assert!(
        last.samples.len() >= running.samples.len(),
        "stop() has fewer samples than report()"
    );
    let mut worker_samples = 0;
    for w in WORKERS {
        let first = samples_under(&last, w, "first_phase", "first_phase_leaf");
        let second = samples_under(&last, w, "second_phase", "second_phase_leaf");
        let earlier = samples_under(&running, w, "first_phase", "first_phase_leaf");
        println!("stop(): {w}: {first} in first_phase_leaf, {second} in second_phase_leaf");
        assert!(first >= earlier, "stop(): {w}: {first} < {earlier}");
        assert!(second >= 100, "stop(): {w}: {second} second-phase samples");
        worker_samples += first + second;
    }
    // Never asked to be sampled (no preload library here to catch its pthread_create).
    assert_eq!(samples_in(&last, "unsampled_leaf"), 0);
    let asleep = samples_under(&last, "api-sleeper", "sleeper", "sleeping");
    println!("{clock:?}: api-sleeper: {asleep} samples in sleeping, workers {worker_samples}");
    match clock {
        // Asleep for as long as the workers ran (1.2 s of CPU time between them).
        Clock::Wall => assert!(asleep >= 100, "wall clock: {asleep} samples asleep"),
        // A few microseconds of CPU time per millisecond asleep.
        Clock::Cpu => assert!(
            asleep * 10 <= worker_samples,
            "CPU clock: {asleep} samples asleep, {worker_samples} working"
        ),
        other => panic!("{other:?}: a clock this test does not know"),
    }
    assert_second_start_fails("after stop");
}

/// Runs the test `name` alone in a child process with `var` set, and checks that it passed.
fn run_in_child(name: &str, var: &str, value: &str, extra: &[&str]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .args(extra)
        .env(var, value)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{name} failed in its child process: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // It ran the test rather than filtering it out.
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[test]
fn profile_this_process_with_the_wall_clock() {
    if [CLOCK_VAR, TIMERS_VAR, TRAP_VAR, WINDOWS_VAR, GUARD_VAR]
        .iter()
        .all(|v| std::env::var_os(v).is_none())
    {
        run_in_child("profile_this_process", CLOCK_VAR, "wall", &[]);
    }
}

/// The signals a stopped profiler's handler still received, over every sampled thread.
fn signals_after_stop() -> u64 {
    sampler::records()
        .filter_map(|(r, _)| r.counters.dropped.get(DropReason::AfterStop.index()))
        .map(|c| c.get())
        .sum()
}

/// `stop()` deletes every thread's timer, the first one created in the process included (the
/// kernel numbers a process's POSIX timers from 0, which the sampler once took for "no
/// timer", leaving the timer of the thread that called `start` armed after `stop()`). Runs in
/// a child process of its own, once with each kind of timer.
#[test]
fn stop_deletes_every_timer() {
    if std::env::var_os(TIMERS_VAR).is_none() {
        if [CLOCK_VAR, TRAP_VAR, WINDOWS_VAR, GUARD_VAR]
            .iter()
            .all(|v| std::env::var_os(v).is_none())
        {
            for timer in ["posix", "perf", "perf-sigtrap"] {
                run_in_child("stop_deletes_every_timer", TIMERS_VAR, timer, &[]);
            }
        }
        return;
    }
    let name = std::env::var(TIMERS_VAR).unwrap_or_default();
    let timer = unwind_profiler::config::TimerChoice::from_name(&name).expect("a timer name");
    let mut config = Config::default();
    config.timer = timer;
    let profiler = Profiler::start(config).expect("Profiler::start");
    std::hint::black_box(burn(Duration::from_millis(50), 4));
    let profile = profiler.stop();
    assert!(!profile.samples.is_empty());
    let used = timers_used(&profile);
    println!("timers: {used:?}");
    assert_eq!(used.len(), 1, "{:?}", profile.counters.timers);
    let before = signals_after_stop();
    // 300 ms of CPU time: about 75 signals (one per kernel tick) if a timer is still armed.
    std::hint::black_box(burn(Duration::from_millis(300), 5));
    let after = signals_after_stop() - before;
    println!("{after} signals in 300 ms of CPU time after stop()");
    assert!(
        after <= 1,
        "{after} timer signals after stop(): a timer was not deleted"
    );
}

/// The kinds of timer the profile's threads used, with the threads on each.
fn timers_used(profile: &Profile) -> Vec<&(String, u64)> {
    profile
        .counters
        .timers
        .iter()
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// `SIGTRAP`s the program's own handler received.
static PROGRAM_TRAPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn program_trap(_: libc::c_int) {
    PROGRAM_TRAPS.fetch_add(1, Ordering::Relaxed);
}

/// With `perf-sigtrap` timers, the profiler's handler owns `SIGTRAP` but passes every
/// `SIGTRAP` its events did not send to what the program had: its own handler (called once per
/// `raise`, while samples keep coming), or the default action (the process dies of `SIGTRAP`,
/// as it would unprofiled). Each case in a child process of its own.
#[test]
fn sigtrap_timers_pass_the_programs_sigtraps_on() {
    let Some(case) = std::env::var_os(TRAP_VAR) else {
        if std::env::var_os(CLOCK_VAR).is_none() && std::env::var_os(TIMERS_VAR).is_none() {
            run_in_child(
                "sigtrap_timers_pass_the_programs_sigtraps_on",
                TRAP_VAR,
                "handler",
                &[],
            );
            let out = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "sigtrap_timers_pass_the_programs_sigtraps_on",
                    "--nocapture",
                ])
                .env(TRAP_VAR, "default")
                .output()
                .unwrap();
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGTRAP),
                "the program's SIGTRAP under the default action: {}\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        return;
    };
    let with_handler = case == "handler";
    if with_handler {
        // SAFETY: a plain handler that only counts; a zeroed sigaction with an empty mask.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = program_trap as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGTRAP, &sa, std::ptr::null_mut()), 0);
        }
    } else {
        // No core file from the death this case expects.
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a valid rlimit.
        unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) };
    }
    let mut config = Config::default();
    config.timer = unwind_profiler::config::TimerChoice::PerfSigtrap;
    config.frequency = 1000;
    let profiler = Profiler::start(config).expect("Profiler::start");
    std::hint::black_box(burn(Duration::from_millis(50), 4));
    let before = profiler.report().samples.len();
    // SAFETY: raise has no preconditions.
    unsafe { libc::raise(libc::SIGTRAP) };
    if !with_handler {
        panic!("the process outlived a SIGTRAP whose action was the default");
    }
    std::hint::black_box(burn(Duration::from_millis(50), 4));
    // SAFETY: as above.
    unsafe { libc::raise(libc::SIGTRAP) };
    std::hint::black_box(burn(Duration::from_millis(50), 4));
    let profile = profiler.stop();
    let traps = PROGRAM_TRAPS.load(Ordering::Relaxed);
    println!(
        "{traps} SIGTRAPs reached the program's handler; {} samples ({before} before the first)",
        profile.samples.len()
    );
    assert_eq!(traps, 2, "the program's own SIGTRAPs were not passed on");
    let used = timers_used(&profile);
    assert_eq!(
        used,
        [&("perf_event task-clock (SIGTRAP)".to_string(), 1)],
        "every thread on the SIGTRAP perf event"
    );
    assert!(before >= 20 && profile.samples.len() >= before + 40);
}

/// `take()`, for authors who export profiles themselves: each window has the samples taken
/// since the last one and no other (the rings are drained before the cut), with its own start;
/// the profiler started through the builder. In a child process of its own.
#[test]
fn take_gives_each_window_its_own_samples() {
    if std::env::var_os(WINDOWS_VAR).is_none() {
        if [CLOCK_VAR, TIMERS_VAR, TRAP_VAR]
            .iter()
            .all(|v| std::env::var_os(v).is_none())
        {
            run_in_child(
                "take_gives_each_window_its_own_samples",
                WINDOWS_VAR,
                "1",
                &[],
            );
        }
        return;
    }
    let profiler = Profiler::builder()
        .frequency(1000)
        .start()
        .expect("Profiler::builder().start()");
    std::hint::black_box(first_phase());
    let first = profiler.take();
    std::hint::black_box(second_phase());
    let second = profiler.take();
    let last = profiler.stop();
    let count = |p: &Profile, f: &str| samples_in(p, f);
    println!(
        "first window: {} + {}, second: {} + {}, after: {}",
        count(&first, "first_phase_leaf"),
        count(&first, "second_phase_leaf"),
        count(&second, "first_phase_leaf"),
        count(&second, "second_phase_leaf"),
        last.sample_count()
    );
    assert!(count(&first, "first_phase_leaf") >= 100);
    assert_eq!(count(&first, "second_phase_leaf"), 0);
    assert!(count(&second, "second_phase_leaf") >= 100);
    assert_eq!(count(&second, "first_phase_leaf"), 0);
    assert!(second.start >= first.start + first.duration);
    // Every sample stored is in exactly one window.
    assert_eq!(
        first.sample_count() + second.sample_count() + last.sample_count(),
        last.counters.stored
    );
}

#[inline(never)]
fn in_request() -> u64 {
    burn(Duration::from_millis(4), 6)
}

#[inline(never)]
fn between_requests() -> u64 {
    burn(Duration::from_millis(4), 7)
}

/// `SampledThread`, a guard per request on a thread the profiler did not start: the thread is
/// sampled inside each guard's scope and not between them, in one record however many guards
/// it makes (a record is freed only once its thread is gone, so a new one each time would run
/// out); a guard on a thread sampled already changes nothing. In a child process of its own.
#[test]
fn a_guard_per_request_samples_its_scope_in_one_record() {
    if std::env::var_os(GUARD_VAR).is_none() {
        if [CLOCK_VAR, TIMERS_VAR, TRAP_VAR, WINDOWS_VAR]
            .iter()
            .all(|v| std::env::var_os(v).is_none())
        {
            run_in_child(
                "a_guard_per_request_samples_its_scope_in_one_record",
                GUARD_VAR,
                "1",
                &[],
            );
        }
        return;
    }
    let profiler = Profiler::builder().frequency(1000).start().expect("start");
    // The thread that started the profiler is sampled: a guard there does nothing, and its
    // drop does not stop the thread's sampling.
    drop(unwind_profiler::SampledThread::start());
    std::hint::black_box(first_phase());
    let worker = std::thread::spawn(|| {
        let mut records = Vec::new();
        for _ in 0..150 {
            let guard = unwind_profiler::SampledThread::start();
            std::hint::black_box(in_request());
            drop(guard);
            std::hint::black_box(between_requests());
            records.push(sampler::records().count());
        }
        records
    });
    let records = worker.join().unwrap();
    let profile = profiler.stop();
    let (inside, outside) = (
        samples_in(&profile, "in_request"),
        samples_in(&profile, "between_requests"),
    );
    println!(
        "records {}..{}; {inside} samples in requests, {outside} between; main {}",
        records[0],
        records[records.len() - 1],
        samples_in(&profile, "first_phase_leaf")
    );
    assert!(samples_in(&profile, "first_phase_leaf") >= 100);
    assert!(inside >= 200, "{inside} samples in requests");
    // A signal already pending when a guard is dropped may still land just after it.
    assert!(outside * 20 <= inside, "{outside} samples between requests");
    assert_eq!(records.first(), records.last(), "records grew: {records:?}");
}
