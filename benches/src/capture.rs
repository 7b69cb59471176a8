//! The workloads whose stacks the benchmarks unwind, and their capture into [`Sample`]s.

use std::cell::RefCell;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use unwind_samples::offline::ModuleFile;

use crate::sample::Sample;

const STACK_COPY: usize = 512 * 1024;

thread_local! {
    static CAPTURED: RefCell<Option<(unwind_in_process::CapturedStack, Vec<u8>)>> = const { RefCell::new(None) };
}

/// Copies the calling thread's stack (frame 0 inside `unwind_in_process::capture_here`) into `CAPTURED`.
#[inline(never)]
fn capture_now() {
    let mut buf = vec![0u8; STACK_COPY];
    let c = unwind_in_process::capture_here(&mut buf).expect("capture (thread registered?)");
    buf.truncate(c.len);
    CAPTURED.with(|s| *s.borrow_mut() = Some((c, buf)));
}

fn take_captured() -> (unwind_in_process::CapturedStack, Vec<u8>) {
    CAPTURED
        .with(|s| s.borrow_mut().take())
        .expect("nothing captured")
}

// Recursion through four functions with different frames: a small one, one with a large local
// array (a big `sub rsp`), one that saves several callee-saved registers, one with many
// arguments.
#[inline(never)]
fn rec_a(depth: u32, x: u64) -> u64 {
    let r = if depth == 0 {
        capture_now();
        x
    } else {
        rec_b(depth - 1, x ^ 1)
    };
    black_box(r.wrapping_add(1))
}

#[inline(never)]
fn rec_b(depth: u32, x: u64) -> u64 {
    let big = black_box([x; 64]);
    let r = if depth == 0 {
        capture_now();
        x
    } else {
        rec_c(depth - 1, x ^ 2)
    };
    black_box(r.wrapping_add(big[depth as usize % 64]))
}

#[inline(never)]
fn rec_c(depth: u32, x: u64) -> u64 {
    let (p, q, s) = (
        black_box(x.wrapping_mul(3)),
        black_box(x.wrapping_mul(5)),
        black_box(x.wrapping_mul(7)),
    );
    let r = if depth == 0 {
        capture_now();
        x
    } else {
        rec_d(depth - 1, x ^ 3, p, q, s, 1, 2, 3)
    };
    black_box(r ^ p ^ q ^ s)
}

#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn rec_d(depth: u32, x: u64, a: u64, b: u64, c: u64, d: u64, e: u64, f: u64) -> u64 {
    let r = if depth == 0 {
        capture_now();
        x
    } else {
        rec_a(depth - 1, x ^ a ^ b)
    };
    black_box(r.wrapping_add(c ^ d ^ e ^ f))
}

/// The modules of this process as files. The vdso's image and a copy of this executable are
/// saved next to the samples, so that rebuilding the benchmarks cannot make a sample's table
/// disagree with its stack.
fn module_files(dir: &Path) -> Vec<ModuleFile> {
    let exe = std::env::current_exe().ok();
    unwind_in_process::loaded_modules()
        .iter()
        .map(|m| {
            let mut f = ModuleFile::from(m);
            if exe.as_deref() == Some(Path::new(&m.name)) {
                let copy = dir.join("bench-capture.bin");
                if std::fs::copy(&m.name, &copy).is_ok() {
                    f.path = copy;
                }
            } else if !m.name.starts_with('/') {
                let path = dir.join("vdso.so");
                if let Some(image) = unwind_in_process::vdso_image() {
                    let _ = std::fs::write(&path, image);
                }
                f.path = path;
            }
            f
        })
        .collect()
}

fn sample(dir: &Path, name: &str, c: unwind_in_process::CapturedStack, stack: Vec<u8>) -> Sample {
    let mut pcs = vec![0u64; 1024];
    let image = unwind_core::StackImage::new(c.base, &stack);
    let expect = unwind_in_process::unwind_copy(c.regs, &image, &mut pcs, None)
        .map(|r| r.frames)
        .unwrap_or(0);
    Sample {
        name: name.to_string(),
        regs: c.regs,
        base: c.base,
        stack,
        expect,
        modules: module_files(dir),
    }
}

/// A recursion `depth` deep through `rec_a`..`rec_d`.
pub fn recursion(dir: &Path, depth: u32) -> Sample {
    black_box(rec_a(depth, 7));
    let (c, stack) = take_captured();
    sample(dir, &format!("rec{depth}"), c, stack)
}

static QSORT_CALLS: Mutex<u32> = Mutex::new(0);

extern "C" fn compare(a: *const libc::c_void, b: *const libc::c_void) -> libc::c_int {
    let mut n = QSORT_CALLS.lock().unwrap_or_else(|e| e.into_inner());
    *n += 1;
    if *n == 5000 {
        capture_now();
    }
    // SAFETY: qsort passes pointers to two elements of the u64 array being sorted.
    let (a, b) = unsafe { (*(a as *const u64), *(b as *const u64)) };
    a.cmp(&b) as libc::c_int
}

#[inline(never)]
fn sort_through_libc(v: &mut [u64]) {
    // SAFETY: `v` is a valid array of `v.len()` u64s and `compare` matches qsort's contract.
    unsafe {
        libc::qsort(
            v.as_mut_ptr() as *mut libc::c_void,
            v.len(),
            8,
            Some(compare),
        );
    }
}

/// A stack inside a libc `qsort` comparator: Rust, then libc (reached through the PLT), then
/// Rust again.
pub fn plt(dir: &Path) -> Sample {
    let mut v: Vec<u64> = (0..20_000u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    sort_through_libc(&mut v);
    let (c, stack) = take_captured();
    sample(dir, "plt", c, stack)
}

// The profiler example's workload (examples/profile.rs: fib), sampled by SIGPROF.
#[inline(never)]
fn fib(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        black_box(fib(n - 1)) + fib(n - 2)
    }
}

struct SignalCapture {
    done: AtomicBool,
    stack: Mutex<Option<(unwind_in_process::CapturedStack, Vec<u8>)>>,
}

static SIGNAL_CAPTURE: SignalCapture = SignalCapture {
    done: AtomicBool::new(false),
    stack: Mutex::new(None),
};
static mut SIGNAL_BUFFER: [u8; STACK_COPY] = [0; STACK_COPY];

extern "C" fn on_sigprof(_: libc::c_int, _: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    if SIGNAL_CAPTURE.done.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: the `done` flag admits one handler run ever, so this is the only reference to the
    // buffer until the main thread reads it after the flag is set and sampling has stopped.
    let buf = unsafe { &mut *std::ptr::addr_of_mut!(SIGNAL_BUFFER) };
    // SAFETY: `uc` is this handler's context.
    if let Ok(c) = unsafe { unwind_in_process::capture_signal(uc, buf) } {
        // try_lock: never block in a handler (nothing else holds it while sampling).
        if let Ok(mut s) = SIGNAL_CAPTURE.stack.try_lock() {
            *s = Some((c, Vec::new()));
        }
    }
}

/// A SIGPROF sample of the profiler example's `fib` workload, taken on this thread.
pub fn profile(dir: &Path) -> Sample {
    // SAFETY: installs a handler that only runs async-signal-safe code (try_lock, no allocation
    // in the path taken during sampling).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigprof as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut());
    }
    // SAFETY: gettid and getpid have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    let sender = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(30));
        // SAFETY: signals this process's main thread, whose handler is installed.
        unsafe { libc::tgkill(pid, tid, libc::SIGPROF) };
    });
    while !SIGNAL_CAPTURE.done.load(Ordering::Acquire) {
        black_box(fib(black_box(22)));
    }
    sender.join().expect("sender");
    let (c, _) = SIGNAL_CAPTURE
        .stack
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .expect("no SIGPROF sample");
    // SAFETY: sampling is over: the handler ran once and nothing writes the buffer any more.
    let buf = unsafe { &*std::ptr::addr_of!(SIGNAL_BUFFER) };
    sample(dir, "profile", c, buf[..c.len].to_vec())
}

static FP_FRAME: Mutex<u64> = Mutex::new(0);

extern "C" fn fp_callback(frame: *mut libc::c_void) {
    *FP_FRAME.lock().unwrap_or_else(|e| e.into_inner()) = frame as u64;
    capture_now();
}

/// A C recursion `(depth, callback)` that calls back at its bottom.
type CRecursion = extern "C" fn(libc::c_int, extern "C" fn(*mut libc::c_void)) -> libc::c_long;

/// Builds `c/SOURCE` into `dir/LIB` with gcc and `flags` (`-shared -fPIC` added), loads it,
/// refreshes the runtime's table and returns its function `symbol`: a recursion
/// `(depth, callback)`.
fn c_recursion(
    dir: &Path,
    source: &str,
    lib: &str,
    flags: &[&str],
    symbol: &std::ffi::CStr,
) -> std::io::Result<CRecursion> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c").join(source);
    let lib: PathBuf = dir.join(lib);
    let status = std::process::Command::new("gcc")
        .args(flags)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()?;
    if !status.success() {
        return Err(std::io::Error::other("gcc failed"));
    }
    let path = std::ffi::CString::new(lib.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: dlopen/dlsym of a library we just built; the symbol has the declared C signature.
    let f = unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        if h.is_null() {
            return Err(std::io::Error::other("dlopen failed"));
        }
        let f = libc::dlsym(h, symbol.as_ptr());
        if f.is_null() {
            return Err(std::io::Error::other("dlsym failed"));
        }
        std::mem::transmute::<*mut libc::c_void, CRecursion>(f)
    };
    unwind_in_process::refresh().map_err(std::io::Error::other)?;
    Ok(f)
}

/// A recursion 200 deep built with frame pointers (C, compiled here with gcc); the sample's
/// `fp` is the innermost C frame, where the frame-pointer walk starts.
pub fn fp_chain(dir: &Path, depth: i32) -> std::io::Result<Sample> {
    let chain = c_recursion(
        dir,
        "fp_chain.c",
        "libfpchain.so",
        &["-O2", "-fno-omit-frame-pointer"],
        c"fp_chain",
    )?;
    black_box(chain(depth, fp_callback));
    let (mut c, stack) = take_captured();
    c.regs.fp = *FP_FRAME.lock().unwrap_or_else(|e| e.into_inner());
    Ok(sample(dir, &format!("fp{depth}"), c, stack))
}

extern "C" fn scan_callback(_: *mut libc::c_void) {
    capture_now();
}

/// A recursion `depth` deep in C built without unwind tables or frame pointers, between Rust
/// frames: only stack scanning finds its frames (and the Rust frames above them).
pub fn no_tables(dir: &Path, depth: i32) -> std::io::Result<Sample> {
    let chain = c_recursion(
        dir,
        "no_tables.c",
        "libnotables.so",
        &[
            "-O2",
            "-fomit-frame-pointer",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
        c"scan_chain",
    )?;
    black_box(chain(depth, scan_callback));
    let (c, stack) = take_captured();
    Ok(sample(dir, &format!("scan{depth}"), c, stack))
}
