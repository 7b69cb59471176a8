//! `outside_modules()`: a walk that meets a PC in no module of the published table says so, so
//! that a profiler's own thread can refresh the table off the signal path instead of polling the
//! loader. A library `dlopen`ed after `init` calls back into this test, which unwinds through
//! the library's frame: before a refresh the walk ends there (`OutsideModules`, the library's
//! address not written), the count grows and the last address is in the library; after
//! `refresh()`, the same walk passes through the library's frame and the count stays.

use std::ffi::{c_void, CString};
use std::hint::black_box;
use std::path::PathBuf;

/// The tests change the process's one published table and assert what their own refresh
/// found: one at a time. (A refresh by the other test in between parses this one's new library
/// first, and this test's refresh then finds it remembered: `.ci/run` saw `reused` on aarch64.)
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What the callback saw: the outside-module figures after its walk, and the walk.
struct Seen {
    outside: unwind_in_process::OutsideModules,
    pcs: Vec<u64>,
    stop: unwind_in_process::StopReason,
}

extern "C" fn unwind_from_callback(arg: *mut c_void) {
    let mut pcs = [0u64; 128];
    let r = unwind_in_process::unwind_here(black_box(&mut pcs), None).expect("unwind_here");
    // SAFETY: `arg` is the `Seen` that `call_through_library` passed for this call.
    let seen = unsafe { &mut *(arg as *mut Seen) };
    seen.outside = unwind_in_process::outside_modules();
    seen.pcs = pcs[..r.frames].to_vec();
    seen.stop = r.stop;
}

type LibCall = unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void);

#[inline(never)]
fn call_through_library(lib_call: LibCall) -> Seen {
    let mut seen = Seen {
        outside: unwind_in_process::outside_modules(),
        pcs: Vec::new(),
        stop: unwind_in_process::StopReason::EndOfStack,
    };
    // SAFETY: lib_call calls the callback with the argument, once.
    unsafe { lib_call(unwind_from_callback, (&mut seen as *mut Seen).cast()) };
    black_box(seen)
}

/// The test library, built once for the test binary's tests (they run at once).
fn build_library() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| build_library_now("libcallback.so", &[]))
        .clone()
}

/// Builds tests/outside_modules/callback.c as the library `name`, with `more` arguments.
fn build_library_now(name: &str, more: &[&str]) -> PathBuf {
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/outside_modules/callback.c"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("outside-modules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(name);
    let (cc, extra) = unwind_test_support::target_c_compiler();
    let status = std::process::Command::new(&cc)
        .args(extra)
        .args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC"])
        .args(more)
        .arg("-o")
        .arg(&out)
        .arg(src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "{cc} failed on {src}");
    out
}

#[test]
fn a_walk_through_a_new_library_is_reported_until_refresh() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    unwind_in_process::init().expect("init");
    let path = build_library();
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a library of one function, with no constructors.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}", path.display());
    // SAFETY: the symbol is `lib_call`, of type `LibCall`.
    let lib_call: LibCall = unsafe {
        std::mem::transmute::<*mut c_void, LibCall>(libc::dlsym(handle, c"lib_call".as_ptr()))
    };
    let (start, end) = library_range(&path);
    let in_library = |pc: u64| (start..end).contains(&pc);

    let before = unwind_in_process::outside_modules();
    let seen = call_through_library(lib_call);
    assert!(
        seen.outside.count > before.count,
        "no outside-module walk counted: {before:?} then {:?}",
        seen.outside
    );
    assert!(
        in_library(seen.outside.last_address),
        "last outside address {:#x} not in the library ({start:#x}..{end:#x})",
        seen.outside.last_address
    );
    // A return address in no module of the table is not a frame: the walk ends there.
    assert_eq!(
        seen.stop,
        unwind_in_process::StopReason::OutsideModules,
        "{:x?}",
        seen.pcs
    );
    assert!(
        !seen.pcs.iter().any(|&pc| in_library(pc)),
        "a frame in the library before refresh: {:x?}",
        seen.pcs
    );

    unwind_in_process::refresh().expect("refresh");
    let seen = call_through_library(lib_call);
    let after = unwind_in_process::outside_modules();
    assert_eq!(
        after.count, seen.outside.count,
        "the walk after refresh still met a PC in no module: {:#x}",
        after.last_address
    );
    assert!(
        seen.pcs.iter().any(|&pc| in_library(pc)),
        "after refresh the walk does not pass through the library's frame: {:x?}",
        seen.pcs
    );
    assert!(
        seen.pcs.len() > 4 && seen.stop != unwind_in_process::StopReason::NoRule,
        "after refresh the walk stops early ({:?}): {:x?}",
        seen.stop,
        seen.pcs
    );
}

/// The lowest and highest address of the library's mappings, from /proc/self/maps.
fn library_range(path: &std::path::Path) -> (u64, u64) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let name = path.to_str().unwrap();
    let ranges: Vec<(u64, u64)> = maps
        .lines()
        .filter(|l| l.ends_with(name))
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect();
    assert!(!ranges.is_empty(), "{name} not in /proc/self/maps");
    (
        ranges.iter().map(|r| r.0).min().unwrap(),
        ranges.iter().map(|r| r.1).max().unwrap(),
    )
}

/// A library unloaded and loaded again (a program that does so in a loop, as plugin hosts do)
/// is not read again: its rules are remembered by its build, wherever it lands, and
/// `refresh_after_load` takes the program's own executable memory from the last read of
/// `/proc/self/maps`; the walk through it after that refresh is whole.
#[test]
fn a_library_loaded_again_is_remembered_and_walked() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    unwind_in_process::init().expect("init");
    // A build of its own, with a build id of its own: the other test keeps its library loaded,
    // and a copy of it (the same build id) would be remembered from there, whichever test ran
    // first (CI saw this test fail so).
    let path = build_library_now(
        "libcallback-again.so",
        &["-Wl,--build-id=0x5ca1ab1e0123456789abcdef0123456789abcdef"],
    );
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let name = path.to_str().unwrap().to_owned();
    let open = || {
        // SAFETY: a library of one function, with no constructors.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {name}");
        handle
    };
    let report_of = |r: &unwind_in_process::PreloadReport| {
        r.modules
            .iter()
            .find(|m| m.name == name)
            .map(|m| (m.reused, m.rows))
    };
    let handle = open();
    let first = unwind_in_process::refresh().expect("refresh");
    let (reused, rows) = report_of(&first).expect("the library in the table");
    assert!(!reused && rows > 0, "{reused} {rows}");
    // SAFETY: the handle just opened, closed once; nothing of the library is in use.
    assert_eq!(unsafe { libc::dlclose(handle) }, 0);
    let gone = unwind_in_process::refresh_after_load().expect("refresh");
    assert_eq!(
        report_of(&gone),
        None,
        "the unloaded library is still in the table"
    );

    let handle = open();
    let again = unwind_in_process::refresh_after_load().expect("refresh");
    assert_eq!(
        report_of(&again),
        Some((true, rows)),
        "loaded again: reused, with the same rules"
    );
    // SAFETY: the symbol is `lib_call`, of type `LibCall`.
    let lib_call: LibCall = unsafe {
        std::mem::transmute::<*mut c_void, LibCall>(libc::dlsym(handle, c"lib_call".as_ptr()))
    };
    let (start, end) = library_range(&path);
    let seen = call_through_library(lib_call);
    assert!(
        seen.pcs.iter().any(|&pc| (start..end).contains(&pc))
            && seen.pcs.len() > 4
            && seen.stop != unwind_in_process::StopReason::OutsideModules,
        "the walk through the library loaded again ({:?}): {:x?}",
        seen.stop,
        seen.pcs
    );
}
