//! A sampling agent for test programs: C programs link against it (`libunwind_agent.so`) and
//! call `agent_start`, `agent_register_thread`, `agent_unregister_thread` and `agent_stop`; the
//! Rust workload uses [`start`], [`register_thread`], [`unregister_thread`] and [`stop`].
//!
//! A sampler thread sends SIGPROF to every registered thread at the requested rate; the handler
//! unwinds with `unwind_in_process::unwind_signal` into preallocated slots. With `AGENT_CLOCK=cpu`
//! it signals a thread only once that thread's own CPU clock has advanced by a period since its
//! last signal: samples then stand for CPU time, whatever the machine's load (a thread blocked or
//! waiting for a CPU gets none), as a CPU-time profiler's do. `stop` symbolizes every sample
//! and writes one line per sample:
//!
//! ```text
//! stop=EndOfStack frames=7 module!function;module!function;...   (innermost first)
//! ```
//!
//! A function is `?+0xOFFSET` when the module has no symbol for the address. Frame 0 is named
//! at its PC, callers by `Symbolizer::lookup_return_address`.
//!
//! [`crash`]: a crash handler (`agent_install_crash_handler`) that unwinds the crashed thread and
//! writes a minidump of the crash with those frames.

pub mod crash;

use std::ffi::{c_char, c_int, c_uint, CStr};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

const MAX_FRAMES: usize = 256;
const MAX_SAMPLES: usize = 1 << 15;
const MAX_THREADS: usize = 64;

static SAMPLES: OnceLock<unwind_in_process::Samples> = OnceLock::new();

/// With `AGENT_SAMPLES_DIR` set, samples are also captured (the full register context and a
/// copy of the stack) and written there with the PCs found in the handler, so that they can be
/// unwound again elsewhere (armv7 samples on the x86_64 host) and compared: every
/// `AGENT_SAMPLES_EVERY`-th unwound sample (default 1), up to `AGENT_SAMPLES_MAX` of them
/// (default 200), each as `NNNN.sample` (text header, `---`, stack bytes) and `NNNN.dmp` (a
/// minidump with the frames in `unwind_samples::minidump::UNWOUND_STREAM`). With `AGENT_SEQUENCE`
/// set (a file path), they are written there as one sequence instead
/// ([`unwind_in_process::Captures::write_sequence`]: the benchmarks replay it in order).
const DEFAULT_CAPTURE_SAMPLES: usize = 200;
const CAPTURE_BYTES: usize = 64 * 1024;

static CAPTURES: OnceLock<unwind_in_process::Captures> = OnceLock::new();

/// A positive count from the environment variable `name`, or `default` (with a warning when the
/// variable is set but not a positive integer).
fn env_count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("agent: {name}={v:?} is not a positive integer; using {default}");
                default
            }
        },
    }
}

#[cfg(target_arch = "arm")]
fn regs_line(r: &unwind_in_process::Regs) -> String {
    format!(
        "regs arm {:#x} {:#x} {:#x} {:#x} {:#x} {:#x}",
        r.pc, r.lr, r.sp, r.r12, r.r11, r.r7
    )
}

#[cfg(target_arch = "aarch64")]
fn regs_line(r: &unwind_in_process::Regs) -> String {
    format!(
        "regs aarch64 {:#x} {:#x} {:#x} {:#x} {:#x}",
        r.pc,
        r.sp,
        r.fp,
        r.lr,
        unwind_in_process::pointer_mask()
    )
}

#[cfg(target_arch = "x86_64")]
fn regs_line(r: &unwind_in_process::Regs) -> String {
    format!("regs x86_64 {:#x} {:#x} {:#x}", r.pc, r.sp, r.fp)
}

/// Writes the captured samples to `dir`: `NNNN.sample` (text header, `---`, stack bytes) and
/// `NNNN.dmp` (a minidump of the sample with the frames found in the handler).
fn write_captures(dir: &str) {
    let Some(caps) = CAPTURES.get() else { return };
    let _ = std::fs::create_dir_all(dir);
    let modules = unwind_in_process::loaded_modules();
    // The vdso has no file: its image goes with the samples, for symbol files and offline walks.
    if let Some(image) = unwind_in_process::vdso_image() {
        let _ = std::fs::write(format!("{dir}/linux-vdso.so.1"), image);
    }
    for c in caps.captured() {
        let mut head = String::new();
        let _ = writeln!(head, "{}", regs_line(&c.stack.regs));
        let _ = writeln!(head, "stack {:#x} {}", c.stack.base, c.stack.len);
        let pcs: Vec<String> = c.pcs.iter().map(|p| format!("{p:#x}")).collect();
        let _ = writeln!(head, "pcs {}", pcs.join(","));
        for m in &modules {
            let _ = writeln!(
                head,
                "module {:#x} {:#x} {:#x} {}",
                m.start, m.end, m.bias, m.name
            );
        }
        head.push_str("---\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(c.bytes);
        let _ = std::fs::write(format!("{dir}/{:04}.sample", c.index), bytes);
    }
    match caps.write_minidumps(std::path::Path::new(dir)) {
        Ok(n) => eprintln!("agent: {n} samples written to {dir} (.sample and .dmp)"),
        Err(e) => eprintln!("agent: writing minidumps to {dir}: {e}"),
    }
}
static FAILED: AtomicUsize = AtomicUsize::new(0);
/// With `AGENT_STACK_SCANNING` set (not `0`), walks scan the stack where the rules and the
/// fallbacks end ([`unwind_in_process::set_stack_scanning`]); frames found so are counted.
static SCANNING: AtomicBool = AtomicBool::new(false);
static SCANNED_FRAMES: AtomicUsize = AtomicUsize::new(0);
static TIDS: [AtomicI32; MAX_THREADS] = [const { AtomicI32::new(0) }; MAX_THREADS];
static RUNNING: AtomicBool = AtomicBool::new(false);
static SAMPLER: Mutex<Option<JoinHandle<u64>>> = Mutex::new(None);

/// The SIGPROF handler: unwinds the interrupted thread into a preallocated sample slot (and, with
/// `AGENT_SAMPLES_DIR`, captures it). Exported for C programs that install their own handler
/// and call this one from it (the shared-object guard brackets it to count what it does).
///
/// # Safety
/// Must be called from an `SA_SIGINFO` signal handler with the `ucontext` the kernel passed it,
/// on the interrupted thread.
#[no_mangle]
pub unsafe extern "C" fn agent_handle_signal(
    _: c_int,
    _: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    let mut pcs = [0u64; MAX_FRAMES];
    let mut trust = [unwind_in_process::Trust::Context; MAX_FRAMES];
    let scanning = SCANNING.load(Ordering::Relaxed);
    // SAFETY: `uc` is the running handler's context (the caller's contract).
    let Ok(r) = (unsafe {
        unwind_in_process::unwind_signal(uc, &mut pcs, scanning.then_some(&mut trust[..]))
    }) else {
        FAILED.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if scanning {
        let found = trust.get(..r.frames).unwrap_or(&[]);
        let n = found
            .iter()
            .filter(|&&t| t == unwind_in_process::Trust::Scan)
            .count();
        SCANNED_FRAMES.fetch_add(n, Ordering::Relaxed);
    }
    let Some(samples) = SAMPLES.get() else { return };
    let pcs = pcs.get(..r.frames).unwrap_or(&[]);
    if !samples.push(pcs, r.stop) {
        return;
    }
    if let Some(c) = CAPTURES.get() {
        // SAFETY: `uc` is this handler's context, on the interrupted (registered) thread.
        unsafe { c.capture(uc, pcs, r.stop) };
    }
}

/// Preallocates the sample slots and preloads the rule table (registering the calling thread),
/// without installing a handler or starting a sampler.
pub fn init() -> Result<(), String> {
    SAMPLES.get_or_init(|| unwind_in_process::Samples::new(MAX_SAMPLES, MAX_FRAMES));
    if std::env::var_os("AGENT_SAMPLES_DIR").is_some()
        || std::env::var_os("AGENT_SEQUENCE").is_some()
    {
        let max = env_count("AGENT_SAMPLES_MAX", DEFAULT_CAPTURE_SAMPLES);
        let every = env_count("AGENT_SAMPLES_EVERY", 1);
        CAPTURES.get_or_init(|| {
            unwind_in_process::Captures::new(max, every, CAPTURE_BYTES, MAX_FRAMES)
        });
    }
    if std::env::var_os("AGENT_STACK_SCANNING").is_some_and(|v| v != "0") {
        unwind_in_process::set_stack_scanning(true).map_err(|e| e.to_string())?;
        SCANNING.store(true, Ordering::Relaxed);
    }
    let report = unwind_in_process::init().map_err(|e| e.to_string())?;
    eprintln!(
        "agent: preloaded {} modules, {} rows{}",
        report.modules.len(),
        report.rows(),
        if SCANNING.load(Ordering::Relaxed) {
            ", stack scanning on"
        } else {
            ""
        }
    );
    Ok(())
}

/// Preloads the rule table, installs the SIGPROF handler, registers the calling thread and
/// starts sampling every registered thread `hz` times a second.
pub fn start(hz: u32) -> Result<(), String> {
    init()?;
    // SAFETY: installs a handler that only runs async-signal-safe code; `sa` is initialised.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = agent_handle_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut()) != 0 {
            return Err("sigaction failed".into());
        }
    }
    register_thread()?;
    RUNNING.store(true, Ordering::Release);
    let period = Duration::from_secs_f64(1.0 / f64::from(hz.max(1)));
    let cpu_clock = match std::env::var("AGENT_CLOCK").as_deref() {
        Ok("cpu") => true,
        Ok("wall") | Err(_) => false,
        Ok(other) => return Err(format!("AGENT_CLOCK={other:?}: want cpu or wall")),
    };
    let handle = std::thread::spawn(move || {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let period_ns = period.as_nanos() as u64;
        // Per slot: the thread last seen there and its CPU clock at its last signal.
        let mut last = [(0i32, 0u64); MAX_THREADS];
        let mut sent = 0u64;
        while RUNNING.load(Ordering::Acquire) {
            for (t, last) in TIDS.iter().zip(&mut last) {
                let tid = t.load(Ordering::Acquire);
                if tid == 0 {
                    continue;
                }
                if cpu_clock {
                    let Some(cpu) = thread_cpu_ns(tid) else {
                        continue;
                    };
                    if last.0 != tid {
                        *last = (tid, cpu);
                    }
                    if cpu.saturating_sub(last.1) < period_ns {
                        continue;
                    }
                    // One signal however far the clock ran since (as a timer's overrun
                    // would be); the next period counts from here.
                    last.1 = cpu;
                }
                // SAFETY: signals a thread of this process; the SIGPROF handler is installed.
                if unsafe { libc::tgkill(pid, tid, libc::SIGPROF) } == 0 {
                    sent += 1;
                }
            }
            std::thread::sleep(period);
        }
        sent
    });
    *SAMPLER.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
    Ok(())
}

/// The CPU time thread `tid` of this process has used, in nanoseconds (its CPU clock, read
/// from another thread: `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)` of Linux's
/// `posix-timers.h`), or `None` if it has exited.
fn thread_cpu_ns(tid: i32) -> Option<u64> {
    let clock = (!(tid as libc::clockid_t) << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid to write; an unknown clock id only makes the call fail.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Registers the calling thread with the unwinder and adds it to the sampled threads.
pub fn register_thread() -> Result<(), String> {
    unwind_in_process::register_thread().map_err(|e| e.to_string())?;
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    TIDS.iter()
        .find(|t| {
            t.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
        .map(|_| ())
        .ok_or_else(|| "too many threads".to_string())
}

/// Stops sampling the calling thread and unregisters it.
pub fn unregister_thread() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    for t in &TIDS {
        let _ = t.compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
    // A signal already sent may still arrive; the handler then finds the thread unregistered
    // and counts a failure rather than touching freed state.
    unwind_in_process::unregister_thread();
}

/// Stops the sampler and returns the report: one line per sample, then a summary line.
pub fn stop() -> String {
    RUNNING.store(false, Ordering::Release);
    let sent = SAMPLER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .map_or(0, |h| h.join().unwrap_or(0));
    for t in &TIDS {
        t.store(0, Ordering::Release);
    }
    if let (Ok(path), Some(caps)) = (std::env::var("AGENT_SEQUENCE"), CAPTURES.get()) {
        let name = std::env::args().next().unwrap_or_default();
        let name = name.rsplit('/').next().unwrap_or_default();
        match caps.write_sequence(std::path::Path::new(&path), name) {
            Ok(n) => eprintln!("agent: {n} samples written to {path}"),
            Err(e) => eprintln!("agent: writing {path}: {e}"),
        }
    } else if let Ok(dir) = std::env::var("AGENT_SAMPLES_DIR") {
        write_captures(&dir);
    }
    let sym = unwind_in_process::symbolizer();
    let mut out = String::new();
    let Some(samples) = SAMPLES.get() else {
        return out;
    };
    let taken = samples.pushed().min(MAX_SAMPLES);
    for sample in samples.iter() {
        let n = sample.pcs.len();
        let _ = write!(out, "stop={:?} frames={n} ", sample.stop);
        for (i, &pc) in sample.pcs.iter().enumerate() {
            let at = if i == 0 { pc } else { pc.wrapping_sub(1) };
            let symbol = if i == 0 {
                sym.lookup(pc)
            } else {
                sym.lookup_return_address(pc)
            };
            let (module, function) = match symbol {
                Some(s) => (
                    s.module.rsplit('/').next().unwrap_or(s.module).to_string(),
                    s.function
                        .map_or_else(|| format!("?+{:#x}", s.offset), str::to_string),
                ),
                None => ("?".to_string(), format!("?+{at:#x}")),
            };
            let _ = write!(out, "{}{module}!{function}", if i == 0 { "" } else { ";" });
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "# signals sent {sent}, samples {taken}, not unwound {}, frames found by scanning {}",
        FAILED.load(Ordering::Relaxed),
        SCANNED_FRAMES.load(Ordering::Relaxed)
    );
    out
}

/// C: preallocates the sample slots and preloads the rule table (see [`init`]); returns 0 on
/// success.
#[no_mangle]
pub extern "C" fn agent_init() -> c_int {
    match init() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agent_init: {e}");
            -1
        }
    }
}

/// C: rebuilds the rule table after `dlopen`/`dlclose`; returns 0 on success.
#[no_mangle]
pub extern "C" fn agent_refresh() -> c_int {
    match unwind_in_process::refresh() {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("agent_refresh: {e}");
            -1
        }
    }
}

/// C: starts sampling at `hz`; returns 0 on success.
#[no_mangle]
pub extern "C" fn agent_start(hz: c_uint) -> c_int {
    match start(hz) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agent_start: {e}");
            -1
        }
    }
}

/// C: registers the calling thread for sampling; returns 0 on success.
#[no_mangle]
pub extern "C" fn agent_register_thread() -> c_int {
    match register_thread() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agent_register_thread: {e}");
            -1
        }
    }
}

/// C: stops sampling the calling thread.
#[no_mangle]
pub extern "C" fn agent_unregister_thread() {
    unregister_thread()
}

/// C: stops sampling and writes the report to `path`; returns 0 on success.
///
/// # Safety
/// `path` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn agent_stop(path: *const c_char) -> c_int {
    let report = stop();
    // SAFETY: the caller passes a NUL-terminated string.
    let path = unsafe { CStr::from_ptr(path) }
        .to_string_lossy()
        .into_owned();
    match std::fs::write(&path, report) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agent_stop: {path}: {e}");
            -1
        }
    }
}
