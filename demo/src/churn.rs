//! `--churn`: the things a profiler must survive, from one extra thread while the workers run.
//!
//! - Short-lived threads: one started and joined every few milliseconds (hundreds per run),
//!   each calling into the churn plugin.
//! - Unloading: `libdemo_churn.so` is `dlclose`d and `dlopen`ed again every ~50 ms, with calls
//!   into it in between (never while it is being closed: the short-lived threads that use it are
//!   joined first).
//! - `fork`: a few children that compute a little and exit with `_exit` or `exit`, and one that
//!   `exec`s `/bin/true`. Every child's exit status is checked.

use std::ffi::{c_char, c_int};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::deep;
use crate::plugin::Library;
use crate::sort::{self, SORT_LEN};

/// Where `build.rs` put the churn plugin.
pub const CHURN_PLUGIN_PATH: &str = env!("DEMO_CHURN_PATH");

/// Time between two short-lived threads.
const THREAD_PERIOD: Duration = Duration::from_millis(4);
/// Time between two reloads of the churn plugin.
const RELOAD_PERIOD: Duration = Duration::from_millis(50);
/// Rounds of `churn_work` per call (a few microseconds).
const CHURN_ROUNDS: u64 = 5_000;

/// One process event of the run, at a fraction of its length.
#[derive(Clone, Copy, Debug)]
enum Event {
    /// A child that works and ends with `_exit` (`false`) or `exit` (`true`).
    Fork { libc_exit: bool },
    /// A child that execs `/bin/true`.
    Exec,
}

/// The events and when they happen (fraction of the run); any not reached by the deadline run
/// right after it.
const EVENTS: [(f64, Event); 5] = [
    (0.2, Event::Fork { libc_exit: false }),
    (0.4, Event::Fork { libc_exit: true }),
    (0.5, Event::Exec),
    (0.6, Event::Fork { libc_exit: false }),
    (0.8, Event::Fork { libc_exit: true }),
];

/// What the churn thread did.
#[derive(Debug, Default)]
pub struct ChurnReport {
    /// Short-lived threads started and joined.
    pub threads: u64,
    /// Times the churn plugin was closed and opened again.
    pub reloads: u64,
    /// Of those, times it was really gone from the process between close and open.
    pub unloaded: u64,
    /// Forked children that worked and exited.
    pub forks: u64,
    /// Forked children that exec'd `/bin/true`.
    pub execs: u64,
    /// What went wrong (empty when all is well).
    pub failures: Vec<String>,
}

/// `churn_work(rounds)` in the churn plugin.
type ChurnWorkFn = unsafe extern "C" fn(u64) -> u64;

/// The churn plugin, opened, with `churn_work` looked up.
struct ChurnPlugin {
    work: ChurnWorkFn,
    library: Library,
}

impl ChurnPlugin {
    fn open(path: &Path) -> Result<ChurnPlugin, String> {
        let library = Library::open(path)?;
        let work = library.symbol(c"churn_work")?;
        // SAFETY: churn_work in c/churn.c has this signature; the pointer is used only while
        // `library` (kept beside it) is open.
        let work =
            unsafe { std::mem::transmute::<*mut std::ffi::c_void, ChurnWorkFn>(work.as_ptr()) };
        Ok(ChurnPlugin { work, library })
    }

    fn call(&self) -> u64 {
        // SAFETY: the library is open while `self` lives; churn_work only computes.
        unsafe { (self.work)(CHURN_ROUNDS) }
    }
}

/// Runs the churn from `start` until `deadline` on the calling thread.
pub fn run(plugin_path: &Path, start: Instant, deadline: Instant) -> ChurnReport {
    let mut report = ChurnReport::default();
    if let Err(e) = churn(plugin_path, start, deadline, &mut report) {
        report.failures.push(e);
    }
    report
}

fn churn(
    path: &Path,
    start: Instant,
    deadline: Instant,
    report: &mut ChurnReport,
) -> Result<(), String> {
    let mut plugin = ChurnPlugin::open(path)?;
    let expected_work = plugin.call();
    let expected_child = child_work();
    let length = deadline.saturating_duration_since(start);
    let mut events = EVENTS.iter().peekable();
    let mut next_reload = Instant::now() + RELOAD_PERIOD;

    while Instant::now() < deadline {
        // A short-lived thread calling into the plugin, which stays open until it is joined.
        let work = plugin.work;
        let value = thread::Builder::new()
            .name("churn-short".to_owned())
            // SAFETY: the library stays open until this thread is joined just below.
            .spawn(move || unsafe { work(CHURN_ROUNDS) })
            .map_err(|e| format!("cannot start a short-lived thread: {e}"))?
            .join()
            .map_err(|_| "a short-lived thread panicked".to_owned())?;
        report.threads += 1;
        check(
            report,
            "churn_work in a short-lived thread",
            value,
            expected_work,
        );

        if Instant::now() >= next_reload {
            next_reload += RELOAD_PERIOD;
            let library_path: PathBuf = plugin.library.path().to_owned();
            drop(plugin);
            if !Library::is_loaded(&library_path) {
                report.unloaded += 1;
            }
            plugin = ChurnPlugin::open(&library_path)?;
            report.reloads += 1;
            check(
                report,
                "churn_work after a reload",
                plugin.call(),
                expected_work,
            );
        }

        while let Some(&&(at, event)) = events.peek() {
            if start.elapsed() < length.mul_f64(at) {
                break;
            }
            events.next();
            run_event(event, expected_child, report);
        }
        thread::sleep(THREAD_PERIOD);
    }
    for &(_, event) in events {
        run_event(event, expected_child, report);
    }
    Ok(())
}

fn check(report: &mut ChurnReport, what: &str, value: u64, expected: u64) {
    if value != expected {
        report
            .failures
            .push(format!("{what}: {value:#x}, expected {expected:#x}"));
    }
}

fn run_event(event: Event, expected_child: u64, report: &mut ChurnReport) {
    let result = match event {
        Event::Fork { libc_exit } => {
            fork_worker(libc_exit, expected_child).map(|()| report.forks += 1)
        }
        Event::Exec => fork_exec_true().map(|()| report.execs += 1),
    };
    if let Err(e) = result {
        report.failures.push(e);
    }
}

/// A child's work: the deep descent and a sort, a few milliseconds; no allocation (a forked
/// child of a multi-threaded process must not need locks another thread may have held).
fn child_work() -> u64 {
    let mut buf = [0u32; SORT_LEN];
    let mut value = 0;
    for input in 0..16 {
        value ^= deep::chain_one(input) ^ sort::fill_and_sort(&mut buf, input);
    }
    value
}

/// Forks a child that does [`child_work`] and exits 0 if it got `expected` (3 otherwise), with
/// `exit` or `_exit`; checks its status.
fn fork_worker(libc_exit: bool, expected: u64) -> Result<(), String> {
    // SAFETY: the child runs only child_work (computation on its own stack, no locks, no
    // allocation) and then exits; the parent carries on as usual.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = if child_work() == expected { 0 } else { 3 };
        if libc_exit {
            // SAFETY: ends the child, running its atexit handlers (none of this program's).
            unsafe { libc::exit(code) }
        } else {
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) }
        }
    }
    let how = if libc_exit { "exit" } else { "_exit" };
    wait_ok(pid, &format!("forked child ending with {how}"))
}

/// Forks a child that execs `/bin/true`; checks its status.
fn fork_exec_true() -> Result<(), String> {
    let path = c"/bin/true";
    let argv: [*const c_char; 2] = [path.as_ptr(), std::ptr::null()];
    // SAFETY: the child only calls execv (async-signal-safe) with data prepared before the fork,
    // then _exit if that failed.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: `path` and `argv` are NUL-terminated and valid; execv returns only on failure.
        unsafe {
            libc::execv(path.as_ptr(), argv.as_ptr());
            libc::_exit(127)
        }
    }
    wait_ok(pid, "forked child exec'ing /bin/true")
}

/// Waits for child `pid` (as returned by fork) and checks it exited with status 0.
fn wait_ok(pid: libc::pid_t, what: &str) -> Result<(), String> {
    if pid < 0 {
        return Err(format!(
            "fork for {what}: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut status: c_int = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("waitpid for {what}: {error}"));
        }
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else if libc::WIFEXITED(status) {
        Err(format!("{what} exited with {}", libc::WEXITSTATUS(status)))
    } else {
        Err(format!("{what} ended with wait status {status:#x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_succeed_and_a_failing_child_is_caught() {
        fork_worker(false, child_work()).unwrap();
        fork_worker(true, child_work()).unwrap();
        fork_exec_true().unwrap();
        let error = fork_worker(false, child_work() ^ 1).unwrap_err();
        assert!(error.contains("exited with 3"), "{error}");
    }

    #[test]
    fn the_churn_plugin_unloads() {
        let path = Path::new(CHURN_PLUGIN_PATH);
        let plugin = ChurnPlugin::open(path).unwrap();
        assert_eq!(plugin.call(), plugin.call());
        drop(plugin);
        assert!(!Library::is_loaded(path));
    }
}
