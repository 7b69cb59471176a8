//! `fork()` in a process that unwinds: the child must be able to refresh, register and unwind,
//! although at the fork another thread may have been in the middle of a refresh (holding the
//! library's state) and other registered threads in the middle of an unwind (their hazard
//! pointers naming a table). Those threads do not exist in the child: their slots must be free
//! there and their hazards must not pin tables.
//!
//! The parent runs a thread that refreshes in a loop and two registered threads that unwind
//! themselves in a loop, and forks 200 times. Each child refreshes, registers, unwinds, checks
//! that it is the only registered thread and that every retired table can be freed, and exits
//! with a status saying what failed. A child that does not exit within 10 s is deadlocked; after
//! three such children the test stops forking and fails.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FORKS: usize = 200;

/// What a child checks; its exit status is the first failed step (0: all passed).
fn child() -> i32 {
    if unwind_in_process::refresh().is_err() {
        return 10;
    }
    if unwind_in_process::register_thread().is_err() {
        return 11;
    }
    let mut pcs = [0u64; 64];
    match unwind_in_process::unwind_here(&mut pcs, None) {
        Ok(r) if r.frames >= 3 && r.stop.is_complete() => {}
        Ok(_) => return 12,
        Err(_) => return 13,
    }
    if unwind_in_process::registered_threads() != 1 {
        return 14;
    }
    if unwind_in_process::collect_retired() != 0 {
        return 15;
    }
    0
}

/// Waits for `pid` for up to 10 s; its exit status, or `None` if it had to be killed.
fn wait_bounded(pid: libc::pid_t) -> Option<i32> {
    let started = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child without blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            });
        }
        if started.elapsed() > Duration::from_secs(10) {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn main() {
    unwind_in_process::init().expect("init");
    let stop = Arc::new(AtomicBool::new(false));
    let refreshes = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    {
        let (stop, refreshes) = (stop.clone(), refreshes.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                unwind_in_process::refresh().expect("refresh");
                refreshes.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for _ in 0..2 {
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            unwind_in_process::register_thread().expect("register");
            let mut pcs = [0u64; 64];
            while !stop.load(Ordering::Relaxed) {
                let _ = unwind_in_process::unwind_here(&mut pcs, None);
            }
        }));
    }
    while unwind_in_process::registered_threads() < 3 {
        std::thread::yield_now();
    }
    let mut failures: Vec<String> = Vec::new();
    let mut statuses = std::collections::BTreeMap::<Option<i32>, usize>::new();
    for _ in 0..FORKS {
        // SAFETY: the child calls only into the library and exits with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = child();
            // SAFETY: ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(code) };
        }
        assert!(pid > 0, "fork failed");
        let status = wait_bounded(pid);
        *statuses.entry(status).or_default() += 1;
        if statuses.get(&None).copied().unwrap_or(0) >= 3 {
            break; // deadlocks are repeatable; more would only add 10 s each
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a thread panicked");
    }
    println!(
        "fork: {} children while {} refreshes ran; exit statuses (None: killed after 10 s): {statuses:?}",
        statuses.values().sum::<usize>(),
        refreshes.load(Ordering::Relaxed)
    );
    if statuses.get(&Some(0)) != Some(&FORKS) {
        failures.push(format!(
            "every child refreshed, registered, unwound, was the only registered thread and \
             freed every retired table: {statuses:?} (10 refresh, 11 register, 12 incomplete \
             unwind, 13 unwind error, 14 other threads registered, 15 tables pinned)"
        ));
    }

    if failures.is_empty() {
        println!("fork: passed");
    } else {
        for f in &failures {
            eprintln!("FAILED: {f}");
        }
        std::process::exit(1);
    }
}
