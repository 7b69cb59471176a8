//! The demo workload that the README's first command profiles: a program whose profile is known
//! in advance, built the ordinary way (release profile with `debug = 1`; C at `-O2 -g`, no
//! frame pointers forced), so a profiler's output can be checked against it.
//!
//! # Threads
//!
//! `--threads N` (default 4) Rust `std::thread` workers, the main thread, and one thread made by
//! C: `pthread_create` inside the dlopened plugin, whose start routine calls back into Rust.
//! All of them run the same phases (see [`workers`]). With `--churn`, one more thread starts
//! and ends short-lived threads, reloads a second plugin, forks and execs (see [`churn`]).
//!
//! # Phases and their shares
//!
//! Every phase-running thread repeats [`phases::run_iteration`], which gives each phase its
//! share of the thread's CPU time, measured with `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` (see
//! [`clock`]). Each phase spends its time in one hot leaf function:
//!
//! | phase | hot leaf | share | called as (leaf first) |
//! |---|---|---|---|
//! | mandelbrot | `plugin_mandelbrot` (C, in `libdemo_plugin.so`) | 40 % | ← `phases::mandelbrot_phase` ← `phases::run_iteration` |
//! | sort | `sort::sort_leaf` (Rust) | 30 % | ← `sort::fill_and_sort` (inlined) ← `phases::sort_phase` |
//! | checksum | `c_checksum` (C, in the binary) | 20 % | ← `phases::checksum_phase` ← `phases::run_iteration` |
//! | recursion | `deep::recursion_leaf` (Rust) | 10 % | ← `deep::recurse_c` ← `deep::recurse_b` |
//!
//! (Rust names are under `unwind_demo_workload::`.) The remaining stacks are small: clock
//! reads, `c_checksum` calling back into Rust ([`phases::on_checksum_pass`], so stacks go
//! Rust → C → Rust), thread start and exit. The recursion leaf sits below a chain of five
//! distinct functions ([`deep::chain_one`] … [`deep::chain_five`]) and 42 levels of mutual
//! recursion ([`deep::recurse_a`] → [`deep::recurse_b`] → [`deep::recurse_c`] → …).
//!
//! # The plugin
//!
//! `libdemo_plugin.so` is built by `build.rs` and loaded with `dlopen` by the main thread once
//! the workload has run for a while (100 ms, or a fifth of a shorter run), never linked; its
//! functions are found with `dlsym` (see [`plugin`]). Until then the workers skip the
//! mandelbrot phase and owe it the time, which they pay back once it is loaded.
//!
//! # Output
//!
//! - stdout: one line, `checksum: HEX`, a digest of every leaf's results for fixed inputs (see
//!   [`results`]): it depends on the computations only, not on timing, thread count or run
//!   length, so it must be the same under a profiler.
//! - stderr, at the end: `expected share: FUNCTION PERCENT%` per phase and
//!   `expected parents: FUNCTION <- PARENT <- GRANDPARENT` per hot leaf; with `--verbose`,
//!   before those, when the plugin was loaded and the CPU time each phase got, per thread and
//!   in all.
//! - exit status 0; 1 if a result disagreed with another for the same input, a forked child
//!   failed, or a thread or the plugin could not be started; 2 for a bad command line.

#![warn(missing_docs)]

pub mod checksum;
pub mod churn;
pub mod cli;
pub mod clock;
pub mod deep;
pub mod phases;
pub mod plugin;
pub mod results;
pub mod sort;
pub mod workers;

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::{Command, Options};
use crate::clock::process_cpu_time;
use crate::phases::{Worker, PHASES};
use crate::plugin::Library;
use crate::results::Results;
use crate::workers::{CThread, Report};

/// How long the workload runs before the plugin is loaded (at most a fifth of the run).
pub const PLUGIN_DELAY: Duration = Duration::from_millis(100);

/// Runs the program with `args` (without the program name); returns its exit status.
pub fn main_with_args(args: impl IntoIterator<Item = String>) -> i32 {
    match cli::parse(args) {
        Ok(Command::Help) => {
            print!("{}", cli::USAGE);
            0
        }
        Ok(Command::Run(options)) => match run(&options) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("demo-workload: FAILED: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("demo-workload: {e}\n{}", cli::USAGE);
            2
        }
    }
}

/// Runs the workload as `options` say, printing its output; `Err` says what failed.
pub fn run(options: &Options) -> Result<(), String> {
    let start = Instant::now();
    let deadline = start + options.duration;
    let cpu_at_start = process_cpu_time();
    let verbose = options.verbose;
    if verbose {
        eprintln!(
            "demo-workload: {} Rust workers, the main thread and a thread made by C, for {:.2} s{}",
            options.threads,
            options.duration.as_secs_f64(),
            if options.churn { ", with churn" } else { "" }
        );
    }
    let loaded_before = Library::is_loaded(&options.plugin);

    let workers = workers::spawn_workers(options.threads, deadline);
    let churn = options
        .churn
        .then(|| {
            thread::Builder::new()
                .name("churn".to_owned())
                .spawn(move || churn::run(Path::new(churn::CHURN_PLUGIN_PATH), start, deadline))
                .map_err(|e| format!("cannot start the churn thread: {e}"))
        })
        .transpose()?;

    // The main thread works too, first without the plugin.
    let mut main = Worker::new();
    let load_at = start + PLUGIN_DELAY.min(options.duration / 5);
    while Instant::now() < load_at {
        phases::run_iteration(&mut main);
    }
    let iterations_before = main.iterations;
    main.budget.charge_other();
    let plugin = plugin::load(&options.plugin)?;
    let loaded_at = start.elapsed();
    let c_thread = CThread::start(plugin, deadline)?;
    main.budget.charge_other();
    if verbose {
        eprintln!(
            "demo-workload: +{:.1} ms: dlopen {} (loaded before: {}; the main thread had run {} \
             iterations); started the thread made by C",
            loaded_at.as_secs_f64() * 1e3,
            plugin.path().display(),
            if loaded_before { "yes" } else { "no" },
            iterations_before,
        );
    }
    while Instant::now() < deadline {
        phases::run_iteration(&mut main);
    }

    let mut reports = vec![Report::new("main", main)];
    reports.push(c_thread.join()?);
    for worker in workers {
        reports.push(
            worker
                .join()
                .map_err(|_| "a worker thread panicked".to_owned())?,
        );
    }
    let churn = churn
        .map(|handle| {
            handle
                .join()
                .map_err(|_| "the churn thread panicked".to_owned())
        })
        .transpose()?;
    let cpu = process_cpu_time().saturating_sub(cpu_at_start);

    let mut results = Results::default();
    for report in &reports {
        results.merge(&report.results);
    }
    let filled = results.fill_missing(phases::compute_once);
    println!("checksum: {:016x}", results.digest());

    if verbose {
        print_accounting(&reports, cpu, filled);
        if let Some(churn) = &churn {
            eprintln!(
                "demo-workload: churn: {} short-lived threads, {} reloads of {} ({} really \
                 unloaded), {} forked children, {} exec of /bin/true",
                churn.threads,
                churn.reloads,
                churn::CHURN_PLUGIN_PATH,
                churn.unloaded,
                churn.forks,
                churn.execs
            );
        }
    }
    for phase in PHASES {
        eprintln!("expected share: {} {}%", phase.leaf(), phase.percent());
    }
    for phase in PHASES {
        eprintln!("expected parents: {}", phase.chain().join(" <- "));
    }

    let mut failures: Vec<String> = results.mismatches().to_vec();
    if let Some(churn) = churn {
        failures.extend(churn.failures);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Prints (on stderr) the CPU time each thread gave each phase, and the shares in all.
fn print_accounting(reports: &[Report], cpu: Duration, filled: usize) {
    let mut total = [Duration::ZERO; PHASES.len()];
    let mut calls = [0u64; PHASES.len()];
    let mut other = Duration::ZERO;
    for report in reports {
        let spent: Duration = report.spent.iter().sum();
        let parts: Vec<String> = PHASES
            .iter()
            .map(|p| {
                format!(
                    "{} {:.1}%",
                    p.name(),
                    percent(report.spent[p.index()], spent)
                )
            })
            .collect();
        eprintln!(
            "demo-workload: thread {}: {} iterations, {:.3} s CPU in phases ({}), {:.1} ms other",
            report.name,
            report.iterations,
            spent.as_secs_f64(),
            parts.join(", "),
            report.other.as_secs_f64() * 1e3
        );
        for p in PHASES {
            total[p.index()] += report.spent[p.index()];
            calls[p.index()] += report.calls[p.index()];
        }
        other += report.other;
    }
    let in_phases: Duration = total.iter().sum();
    for phase in PHASES {
        let i = phase.index();
        eprintln!(
            "demo-workload: measured share: {} {:.1}% of the phases' CPU, {:.1}% of the process's \
             (expected {}%; {} calls, {:.0} us each)",
            phase.leaf(),
            percent(total[i], in_phases),
            percent(total[i], cpu),
            phase.percent(),
            calls[i],
            total[i].as_secs_f64() * 1e6 / calls[i].max(1) as f64
        );
    }
    eprintln!(
        "demo-workload: process CPU {:.3} s: {:.1}% in the phases, {:.1} ms of it outside them \
         in their threads; {} results computed at the end",
        cpu.as_secs_f64(),
        percent(in_phases, cpu),
        other.as_secs_f64() * 1e3,
        filled
    );
}

fn percent(part: Duration, whole: Duration) -> f64 {
    if whole.is_zero() {
        0.0
    } else {
        100.0 * part.as_secs_f64() / whole.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phases::Phase;

    #[test]
    fn every_phase_has_a_distinct_leaf() {
        let leaves: Vec<_> = PHASES.iter().map(|p| p.leaf()).collect();
        for (i, leaf) in leaves.iter().enumerate() {
            assert!(!leaves[..i].contains(leaf));
        }
        assert_eq!(Phase::Mandelbrot.leaf(), "plugin_mandelbrot");
    }
}
