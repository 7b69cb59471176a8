//! `mmap` and `mprotect` interposed: memory made executable by the program (a JIT compiler's
//! code regions, node's second mapping of its builtins, python's perf trampolines) becomes part
//! of the rule table at once under `record`, where no thread of ours could notice it later
//! ([`unwind_profiler::session::code_mapped`]). Every other call is passed on as made, and
//! `errno` is the C library's.
//!
//! The C library's own calls (the loader's, `malloc`'s) do not come through here: they do not
//! go through its exported symbols.

use std::ffi::c_void;
use std::sync::atomic::AtomicPtr;

use libc::{c_int, size_t};

static REAL_MMAP: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_MMAP64: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_MPROTECT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

type Mmap =
    unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, libc::off_t) -> *mut c_void;
type Mmap64 =
    unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, libc::off64_t) -> *mut c_void;
type Mprotect = unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int;

/// Interposes the C library's `mmap` (see the module docs).
///
/// # Safety
/// The contract of `mmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    let p = crate::next_symbol(&REAL_MMAP, c"mmap");
    if p.is_null() {
        return unavailable();
    }
    // SAFETY: the next object's `mmap` is the C library's, of this type; forwarded.
    let mapped =
        unsafe { std::mem::transmute::<*mut c_void, Mmap>(p)(addr, len, prot, flags, fd, offset) };
    if mapped != libc::MAP_FAILED && prot & libc::PROT_EXEC != 0 {
        unwind_profiler::session::code_mapped(mapped as usize, len);
    }
    mapped
}

/// Interposes the C library's `mmap64` (see the module docs; on 64-bit targets the same
/// function as `mmap`).
///
/// # Safety
/// The contract of `mmap64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off64_t,
) -> *mut c_void {
    let p = crate::next_symbol(&REAL_MMAP64, c"mmap64");
    if p.is_null() {
        return unavailable();
    }
    // SAFETY: the next object's `mmap64` is the C library's, of this type; forwarded.
    let mapped = unsafe {
        std::mem::transmute::<*mut c_void, Mmap64>(p)(addr, len, prot, flags, fd, offset)
    };
    if mapped != libc::MAP_FAILED && prot & libc::PROT_EXEC != 0 {
        unwind_profiler::session::code_mapped(mapped as usize, len);
    }
    mapped
}

/// Interposes the C library's `mprotect` (see the module docs).
///
/// # Safety
/// The contract of `mprotect`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    let p = crate::next_symbol(&REAL_MPROTECT, c"mprotect");
    if p.is_null() {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    // SAFETY: the next object's `mprotect` is the C library's, of this type; forwarded.
    let rc = unsafe { std::mem::transmute::<*mut c_void, Mprotect>(p)(addr, len, prot) };
    if rc == 0 && prot & libc::PROT_EXEC != 0 {
        unwind_profiler::session::code_mapped(addr as usize, len);
    }
    rc
}

/// `MAP_FAILED` with `errno` set, for a C library without the function (never on glibc).
fn unavailable() -> *mut c_void {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    libc::MAP_FAILED
}
