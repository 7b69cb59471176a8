//! The `poison-freed-tables` check itself: a rule table freed while a thread unwinds from it must
//! abort the process with a message, and correct reclamation must never trigger it.
//!
//! The test forks twice. In each child two registered threads unwind
//! themselves in a loop while the main thread refreshes (publishing a new table and retiring the
//! old one each time) for up to `SECONDS`:
//! - `honoured`: reclamation respects hazard pointers; the child must exit 0 without the message;
//! - `ignored`: `testing_ignore_hazards(true)` makes reclamation free tables in use; the child
//!   must die of SIGABRT with the message on stderr.
//!
//! Without fence X in `src/publish.rs` (the reader's, between its hazard store and the load that
//! confirms the table) the `honoured` child aborts within 0.02 s on x86_64: the hazard store
//! waits in the store buffer while the reclaimer frees the table.
//!
//! Only built with `--features poison-freed-tables` (scripts/test runs it so, and the stress test
//! with the same feature).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECONDS: u64 = 3;
const MESSAGE: &str = "unwind: rule table used after free";

fn child(ignore: bool) {
    unwind_in_process::init().expect("init");
    let stop = Arc::new(AtomicBool::new(false));
    let walks = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (stop, walks) = (stop.clone(), walks.clone());
            std::thread::spawn(move || {
                unwind_in_process::register_thread().expect("register");
                let mut pcs = [0u64; 64];
                while !stop.load(Ordering::Relaxed) {
                    if unwind_in_process::unwind_here(&mut pcs, None).is_ok() {
                        walks.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    while unwind_in_process::registered_threads() < 3 {
        std::thread::yield_now();
    }
    unwind_in_process::testing_ignore_hazards(ignore);
    let started = Instant::now();
    let mut refreshes = 0u64;
    while started.elapsed() < Duration::from_secs(SECONDS) {
        unwind_in_process::refresh().expect("refresh");
        refreshes += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("join");
    }
    println!(
        "{refreshes} refreshes, {} walks, {} tables still retired",
        walks.load(Ordering::Relaxed),
        unwind_in_process::collect_retired()
    );
}

/// Runs `child(ignore)` in a forked process (this process is still single-threaded) with its
/// stderr sent to a pipe; returns the wait status and what it wrote to stderr. (A fork rather
/// than an exec, so that it also works under qemu-user, which does not follow an exec of an ARM
/// binary.)
fn run_forked(ignore: bool) -> (i32, String) {
    let mut fds = [0; 2];
    // SAFETY: creates a pipe into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: only the main thread exists (no test harness), so the child may do anything.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: redirects this child's stderr to the pipe's write end.
        unsafe {
            libc::dup2(fds[1], 2);
            libc::close(fds[0]);
        }
        child(ignore);
        // SAFETY: ends the child.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: closes the parent's copy of the write end, so that read sees EOF when the child
    // ends.
    unsafe { libc::close(fds[1]) };
    let mut err = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads into a buffer of its length.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        err.extend_from_slice(&buf[..n as usize]);
    }
    let mut status = 0;
    // SAFETY: reaps our child.
    unsafe {
        libc::close(fds[0]);
        libc::waitpid(pid, &mut status, 0);
    }
    (status, String::from_utf8_lossy(&err).into_owned())
}

fn main() {
    let mut failures = Vec::new();
    for (mode, ignore) in [("honoured", false), ("ignored", true)] {
        let started = Instant::now();
        let (status, stderr) = run_forked(ignore);
        let signal = libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
        let exit = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        let said = stderr.contains(MESSAGE);
        let how = match (exit, signal) {
            (Some(code), _) => format!("exit {code}"),
            (_, Some(sig)) => format!("signal {sig}"),
            _ => format!("status {status:#x}"),
        };
        println!(
            "poison: hazards {mode}: {how} after {:.2} s, message {}",
            started.elapsed().as_secs_f64(),
            if said { "printed" } else { "not printed" },
        );
        let ok = if ignore {
            signal == Some(libc::SIGABRT) && said
        } else {
            exit == Some(0) && !said
        };
        if !ok {
            failures.push(format!(
                "hazards {mode}: want {}, got {how} (stderr: {})",
                if ignore {
                    "SIGABRT with the use-after-free message"
                } else {
                    "exit 0 without the message"
                },
                stderr.trim()
            ));
        }
    }
    if failures.is_empty() {
        println!("poison: passed");
    } else {
        for f in &failures {
            eprintln!("FAILED: {f}");
        }
        std::process::exit(1);
    }
}
