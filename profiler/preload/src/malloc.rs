//! The C library's allocator entry points, interposed: with allocations sampled
//! (`UNWIND_PROFILER_ALLOC`, `record --alloc`), each allocation goes on to the next object's
//! function (the C library's, or jemalloc's or tcmalloc's when the program links one) and is
//! then counted down ([`unwind_profiler::alloc_sampling::allocated`]); each free first leaves
//! the live table. Otherwise each call is the next object's and a load.
//!
//! - **The real functions** are found with `dlsym(RTLD_NEXT)` on the first call, which may come
//!   before this library's constructor (the C library's own start-up allocates). `dlsym` may
//!   allocate itself: while the lookup runs, allocations come from a bootstrap arena here
//!   ([`Arena`]), which `free` recognizes and never passes on.
//! - **C++**: libstdc++'s `operator new` and `delete` call `malloc` and `free` through their
//!   exported symbols, so they arrive here (the sample's stack then has `operator new` first).
//!   The C library's internal calls (`strdup`, `fopen`, `getline`) reach its allocator through
//!   internal aliases and are not seen, except where they call the exported `malloc`
//!   (`strdup` does).
//! - **Never the profiler's own**: this library's Rust code allocates from the real functions
//!   directly ([`real_alloc`] and friends, used by [`crate::huge_pages`]), not through these.

use std::ffi::c_void;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize};

use libc::size_t;
use unwind_profiler::alloc_sampling::{
    allocated, count_down, counted_once, freed, may_be_sampled, sample_point,
};

type Malloc = unsafe extern "C" fn(size_t) -> *mut c_void;
type Free = unsafe extern "C" fn(*mut c_void);
type Calloc = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;
type Realloc = unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void;
type Reallocarray = unsafe extern "C" fn(*mut c_void, size_t, size_t) -> *mut c_void;
type PosixMemalign = unsafe extern "C" fn(*mut *mut c_void, size_t, size_t) -> libc::c_int;
type Memalign = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;
type Valloc = unsafe extern "C" fn(size_t) -> *mut c_void;

/// The next object's functions, once found.
struct Reals {
    malloc: AtomicPtr<c_void>,
    free: AtomicPtr<c_void>,
    calloc: AtomicPtr<c_void>,
    realloc: AtomicPtr<c_void>,
    reallocarray: AtomicPtr<c_void>,
    posix_memalign: AtomicPtr<c_void>,
    aligned_alloc: AtomicPtr<c_void>,
    memalign: AtomicPtr<c_void>,
    valloc: AtomicPtr<c_void>,
    pvalloc: AtomicPtr<c_void>,
}

static REALS: Reals = Reals {
    malloc: AtomicPtr::new(std::ptr::null_mut()),
    free: AtomicPtr::new(std::ptr::null_mut()),
    calloc: AtomicPtr::new(std::ptr::null_mut()),
    realloc: AtomicPtr::new(std::ptr::null_mut()),
    reallocarray: AtomicPtr::new(std::ptr::null_mut()),
    posix_memalign: AtomicPtr::new(std::ptr::null_mut()),
    aligned_alloc: AtomicPtr::new(std::ptr::null_mut()),
    memalign: AtomicPtr::new(std::ptr::null_mut()),
    valloc: AtomicPtr::new(std::ptr::null_mut()),
    pvalloc: AtomicPtr::new(std::ptr::null_mut()),
};
/// Set once every real function was looked up.
static FOUND: AtomicBool = AtomicBool::new(false);
/// Set while a thread looks them up.
static LOOKING: AtomicBool = AtomicBool::new(false);

/// Looks the real functions up, once; allocations meanwhile come from the [`Arena`]. Returns
/// false while the lookup is running (on this thread, from inside `dlsym`, or on another).
#[cold]
#[inline(never)]
fn find_reals() -> bool {
    if FOUND.load(Acquire) {
        return true;
    }
    if LOOKING.swap(true, Acquire) {
        return false;
    }
    for (cache, name) in [
        (&REALS.malloc, c"malloc"),
        (&REALS.free, c"free"),
        (&REALS.calloc, c"calloc"),
        (&REALS.realloc, c"realloc"),
        (&REALS.reallocarray, c"reallocarray"),
        (&REALS.posix_memalign, c"posix_memalign"),
        (&REALS.aligned_alloc, c"aligned_alloc"),
        (&REALS.memalign, c"memalign"),
        (&REALS.valloc, c"valloc"),
        (&REALS.pvalloc, c"pvalloc"),
    ] {
        // SAFETY: dlsym with a NUL-terminated name.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        cache.store(p, Release);
    }
    FOUND.store(true, Release);
    true
}

/// The real function in `cache` as a `T`, or `None` while the lookup runs or if the next
/// object has none.
#[inline(always)]
fn real<T: Copy>(cache: &AtomicPtr<c_void>) -> Option<T> {
    let mut p = cache.load(Relaxed);
    if p.is_null() {
        if !find_reals() {
            return None;
        }
        p = cache.load(Acquire);
        if p.is_null() {
            return None;
        }
    }
    debug_assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: `T` is the function pointer type of the symbol `cache` was filled from (each
    // caller names the right one), the same size as a data pointer on Linux.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// The bootstrap arena: what `dlsym` (and any thread meanwhile) allocates while the real
/// functions are looked up. Blocks are 16-aligned, each after a 16-byte header holding its
/// size; never freed.
struct Arena;

const ARENA_BYTES: usize = 256 * 1024;
#[repr(C, align(4096))]
struct ArenaBytes(std::cell::UnsafeCell<[u8; ARENA_BYTES]>);
// SAFETY: each block is handed to one caller only (`NEXT` is bumped atomically).
unsafe impl Sync for ArenaBytes {}
static ARENA: ArenaBytes = ArenaBytes(std::cell::UnsafeCell::new([0; ARENA_BYTES]));
static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Arena {
    /// A block from the arena while the real functions are being looked up; null once they
    /// were (the next object has no such function: a C library without `pvalloc`, say).
    fn meanwhile(size: usize, align: usize) -> *mut c_void {
        if FOUND.load(Acquire) {
            return std::ptr::null_mut();
        }
        Arena::alloc(size, align)
    }

    /// A zeroed block of `size` bytes aligned to `align` (a power of two), null if the arena is
    /// spent.
    fn alloc(size: usize, align: usize) -> *mut c_void {
        let align = align.max(16);
        let base = ARENA.0.get() as usize;
        let mut at = NEXT.load(Relaxed);
        loop {
            let start = (base + at + 16).next_multiple_of(align) - base;
            let Some(end) = start.checked_add(size).filter(|&e| e <= ARENA_BYTES) else {
                return std::ptr::null_mut();
            };
            match NEXT.compare_exchange(at, end, Relaxed, Relaxed) {
                Ok(_) => {
                    let p = (base + start) as *mut u8;
                    // SAFETY: `start - 16 .. end` is within the arena and this caller's alone.
                    unsafe { (p.sub(16) as *mut usize).write(size) };
                    return p.cast();
                }
                Err(now) => at = now,
            }
        }
    }

    /// Whether `p` is one of the arena's blocks (one comparison: below the arena wraps).
    #[inline(always)]
    fn holds(p: *mut c_void) -> bool {
        (p as usize).wrapping_sub(ARENA.0.get() as usize) < ARENA_BYTES
    }

    /// The size of the arena's block `p`.
    fn size(p: *mut c_void) -> usize {
        // SAFETY: `p` is an arena block (`holds`), after its header.
        unsafe { (p.cast::<u8>().sub(16) as *const usize).read() }
    }
}

/// The real `malloc` for the library's own allocations (not sampled).
pub(crate) fn real_alloc(size: usize, align: usize) -> *mut u8 {
    if align <= 16 && align <= size {
        match real::<Malloc>(&REALS.malloc) {
            // SAFETY: the C library's malloc.
            Some(f) => unsafe { f(size).cast() },
            None => Arena::meanwhile(size, align).cast(),
        }
    } else {
        match real::<PosixMemalign>(&REALS.posix_memalign) {
            Some(f) => {
                let mut out = std::ptr::null_mut();
                // SAFETY: the C library's posix_memalign, with an out-pointer of ours; the
                // alignment is a power of two (a Layout's), at least a pointer's.
                let rc = unsafe { f(&mut out, align.max(std::mem::size_of::<usize>()), size) };
                if rc == 0 {
                    out.cast()
                } else {
                    std::ptr::null_mut()
                }
            }
            None => Arena::meanwhile(size, align).cast(),
        }
    }
}

/// The real `free` for the library's own blocks.
pub(crate) fn real_release(p: *mut u8) {
    let p: *mut c_void = p.cast();
    if p.is_null() || Arena::holds(p) {
        return;
    }
    if let Some(f) = real::<Free>(&REALS.free) {
        // SAFETY: a block of the real functions (`real_alloc`).
        unsafe { f(p) }
    }
}

/// Interposes `malloc` (see the module docs).
///
/// # Safety
/// The contract of `malloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: size_t) -> *mut c_void {
    let f = REALS.malloc.load(Relaxed);
    // Counted down first, so that an allocation without a sample point jumps to the real
    // function, this hook keeping no frame.
    if f.is_null() || count_down(size) {
        // SAFETY: forwarded.
        return unsafe { malloc_slow(size, f.is_null()) };
    }
    // SAFETY: the next object's `malloc` (looked up by its name), forwarded to.
    unsafe { std::mem::transmute::<*mut c_void, Malloc>(f)(size) }
}

/// `malloc` of an allocation that holds a sample point, or before the real functions were
/// looked up (`first`; then not counted down).
///
/// # Safety
/// The contract of `malloc`.
#[cold]
#[inline(never)]
unsafe extern "C" fn malloc_slow(size: size_t, first: bool) -> *mut c_void {
    let Some(f) = real::<Malloc>(&REALS.malloc) else {
        return Arena::meanwhile(size, 16);
    };
    // SAFETY: forwarded.
    let p = unsafe { f(size) };
    if first {
        allocated(p.cast(), size, 1);
    } else {
        sample_point(p.cast(), size, 1);
    }
    p
}

/// Interposes `free`.
///
/// # Safety
/// The contract of `free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if Arena::holds(p) {
        return;
    }
    let f = REALS.free.load(Relaxed);
    if f.is_null() || may_be_sampled(p.cast()) {
        // SAFETY: forwarded.
        return unsafe { free_slow(p) };
    }
    // SAFETY: the next object's `free` (looked up by its name), forwarded to.
    unsafe { std::mem::transmute::<*mut c_void, Free>(f)(p) }
}

/// `free` of a block the live table's filter does not rule out, or before the real functions
/// were looked up (apart, so that the path of every other block keeps no frame).
///
/// # Safety
/// The contract of `free`.
#[cold]
#[inline(never)]
unsafe extern "C" fn free_slow(p: *mut c_void) {
    freed(p.cast());
    if let Some(f) = real::<Free>(&REALS.free) {
        // SAFETY: forwarded.
        unsafe { f(p) }
    }
}

/// Interposes `calloc`.
///
/// # Safety
/// The contract of `calloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    let Some(f) = real::<Calloc>(&REALS.calloc) else {
        // The arena is zeroed and never reused.
        return n
            .checked_mul(size)
            .map_or(std::ptr::null_mut(), |total| Arena::meanwhile(total, 16));
    };
    // SAFETY: forwarded.
    let p = counted_once(|| unsafe { f(n, size) });
    allocated(p.cast(), n.saturating_mul(size), 1);
    p
}

/// Interposes `realloc`: the old block leaves the live table before the call (its address may
/// be given out again as soon as the call frees it), the new one is counted as an allocation
/// of its whole size, as tcmalloc and Go count a moved block.
///
/// # Safety
/// The contract of `realloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    if Arena::holds(p) {
        // A block of the arena moves to the real allocator.
        // SAFETY: malloc's contract.
        let new = unsafe { malloc(size) };
        if !new.is_null() {
            // SAFETY: both blocks hold the smaller size and are distinct.
            unsafe {
                std::ptr::copy_nonoverlapping(p.cast::<u8>(), new.cast(), size.min(Arena::size(p)))
            };
        }
        return new;
    }
    let Some(f) = real::<Realloc>(&REALS.realloc) else {
        return std::ptr::null_mut();
    };
    freed(p.cast());
    // SAFETY: forwarded.
    let new = counted_once(|| unsafe { f(p, size) });
    allocated(new.cast(), size, 1);
    new
}

/// Interposes `reallocarray` (which the C library implements without calling `realloc`).
///
/// # Safety
/// The contract of `reallocarray`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    if Arena::holds(p) {
        return match n.checked_mul(size) {
            // SAFETY: realloc's contract, which reallocarray's is with the product.
            Some(total) => unsafe { realloc(p, total) },
            None => std::ptr::null_mut(),
        };
    }
    let Some(f) = real::<Reallocarray>(&REALS.reallocarray) else {
        return std::ptr::null_mut();
    };
    freed(p.cast());
    // SAFETY: forwarded.
    let new = counted_once(|| unsafe { f(p, n, size) });
    allocated(new.cast(), n.saturating_mul(size), 1);
    new
}

/// Interposes `posix_memalign`.
///
/// # Safety
/// The contract of `posix_memalign`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> libc::c_int {
    let Some(f) = real::<PosixMemalign>(&REALS.posix_memalign) else {
        if !align.is_power_of_two() {
            return libc::EINVAL;
        }
        let p = Arena::meanwhile(size, align);
        if p.is_null() {
            return libc::ENOMEM;
        }
        // SAFETY: the caller's out-pointer.
        unsafe { *out = p };
        return 0;
    };
    // SAFETY: forwarded.
    let rc = counted_once(|| unsafe { f(out, align, size) });
    if rc == 0 {
        // SAFETY: set by the successful call.
        allocated(unsafe { *out }.cast(), size, 1);
    }
    rc
}

/// Interposes `aligned_alloc`.
///
/// # Safety
/// The contract of `aligned_alloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    let Some(f) = real::<Memalign>(&REALS.aligned_alloc) else {
        return Arena::meanwhile(size, align.next_power_of_two());
    };
    // SAFETY: forwarded.
    let p = counted_once(|| unsafe { f(align, size) });
    allocated(p.cast(), size, 1);
    p
}

/// Interposes `memalign`.
///
/// # Safety
/// The contract of `memalign`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    let Some(f) = real::<Memalign>(&REALS.memalign) else {
        return Arena::meanwhile(size, align.next_power_of_two());
    };
    // SAFETY: forwarded.
    let p = counted_once(|| unsafe { f(align, size) });
    allocated(p.cast(), size, 1);
    p
}

/// Interposes `valloc`.
///
/// # Safety
/// The contract of `valloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn valloc(size: size_t) -> *mut c_void {
    let Some(f) = real::<Valloc>(&REALS.valloc) else {
        return Arena::meanwhile(size, 4096);
    };
    // SAFETY: forwarded.
    let p = counted_once(|| unsafe { f(size) });
    allocated(p.cast(), size, 1);
    p
}

/// Interposes `pvalloc` (a whole number of pages).
///
/// # Safety
/// The contract of `pvalloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    let Some(f) = real::<Valloc>(&REALS.pvalloc) else {
        return Arena::meanwhile(size.next_multiple_of(4096), 4096);
    };
    // SAFETY: forwarded.
    let p = counted_once(|| unsafe { f(size) });
    allocated(p.cast(), size.next_multiple_of(4096), 1);
    p
}
