//! Registered threads: stack bounds, a rule cache and a hazard pointer each, found from a signal
//! handler by the thread pointer.
//!
//! A signal handler must find its thread's slot without `thread_local!`: in a shared object (a
//! `dlopen`ed or preloaded profiler) a thread-local access compiles to a call to
//! `__tls_get_addr`, which allocates the thread's block for that object on its first access and
//! reallocates the thread's vector of blocks after a later `dlopen` of a library with TLS. A
//! `malloc` in a signal handler deadlocks when the signal interrupted `malloc`. So the slot is
//! keyed by the **thread pointer**, the per-thread address the C library keeps in a register
//! (x86_64: the `%fs` base, whose first word the TLS ABI defines to be the thread pointer
//! itself; ARM: `TPIDRURO`). It is read with one instruction, is unique among live threads, and
//! is the same in a signal handler as in the interrupted code.
//!
//! Slots are never freed, and are chained two ways, both only ever extended at the head:
//! - every slot, for the table reclaimer (which reads every hazard pointer) and for counts;
//! - per bucket of [`BUCKETS`] (by a hash of the owner's thread pointer), for the lookup. A slot
//!   stays in the bucket it was created in: a thread that registers takes a free slot of its own
//!   bucket or creates one, so a chain is never unlinked while a handler walks it, and its length
//!   is the most threads of that bucket ever registered at once.
//!
//! Registration and unregistration happen outside signal handlers (`pthread_getattr_np`
//! allocates) and are lock-free, so a `fork`ed child can always register.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::arch::{thread_pointer, Native};
use crate::publish::Published;
use unwind_core::cache::LevelsOf;
use unwind_core::Cache;

/// Number of lookup buckets (a power of two).
const BUCKETS: usize = 1024;

/// One registered thread's state.
///
/// A walk reads or writes `owner`, `busy`, `hazard`, the stack bounds and the two counts: they
/// are the slot's first line (`repr(C)`, checked by a test), so that a signal meets one cold
/// line of it before its cache's; the cache's own hot fields are its first line.
#[repr(C)]
pub(crate) struct ThreadSlot {
    /// The owning thread's thread pointer; 0 while the slot is free.
    owner: AtomicUsize,
    /// Set while the owning thread is unwinding (guards the cache against re-entrant signals).
    pub busy: AtomicBool,
    /// The table the owning thread is reading, if any: the reclaimer must not free it.
    pub hazard: AtomicPtr<Published>,
    pub stack_lo: AtomicU64,
    pub stack_hi: AtomicU64,
    /// The cache's hit and miss counts as of its last unwind, for other threads to read.
    pub cache_counts: CacheCounts,
    /// The next slot of the same bucket (immutable after publication).
    chain: *const ThreadSlot,
    /// Only the owning thread touches it, and only while `busy` is held.
    pub cache: UnsafeCell<Cache<Native>>,
    /// The next slot of the list of every slot (immutable after publication).
    next: *const ThreadSlot,
    /// The owning thread's id (`gettid`), read at registration.
    pub tid: AtomicI32,
}

// SAFETY: every field but `cache` is atomic or immutable after publication; `cache` is touched
// only by the thread that holds `busy` (see `enter`), so no two threads access it at once.
unsafe impl Sync for ThreadSlot {}

/// A registered thread's rule-cache counts as of its last unwind: written by its unwinds
/// (plain stores to the thread's own slot), read by anyone.
#[repr(C)]
#[derive(Default)]
pub struct CacheCounts {
    hits: AtomicU64,
    misses: AtomicU64,
}

impl CacheCounts {
    /// Lookups answered by the cache, over every unwind of the slot's owners.
    #[inline(always)]
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Lookups that went to the table, over every unwind of the slot's owners.
    #[inline(always)]
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Stores the cache's counts after an unwind (the owning thread only).
    #[inline(always)]
    pub(crate) fn set(&self, hits: u64, misses: u64) {
        self.hits.store(hits, Ordering::Relaxed);
        self.misses.store(misses, Ordering::Relaxed);
    }
}

/// The list of every slot.
static SLOTS: AtomicPtr<ThreadSlot> = AtomicPtr::new(ptr::null_mut());
/// The heads of the bucket chains.
static HEADS: [AtomicPtr<ThreadSlot>; BUCKETS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; BUCKETS];

thread_local! {
    /// Releases the slot when a registered thread exits without unregistering. Touched only by
    /// `register` (outside signal handlers), which is what registers its destructor.
    static EXIT_GUARD: ExitGuard = const { ExitGuard };
}

struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        unregister();
    }
}

/// The bucket of thread pointer `tp`: Fibonacci hashing of its bits (thread control blocks sit
/// at similar offsets of stacks a few MiB apart, so the low bits alone would collide).
#[inline(always)]
fn bucket_of(tp: usize) -> &'static AtomicPtr<ThreadSlot> {
    let folded = (tp as u64 ^ (tp as u64 >> 32)) as u32;
    let i = (folded.wrapping_mul(0x9e37_79b1) >> (32 - BUCKETS.trailing_zeros())) as usize;
    // `i < BUCKETS` by construction; the fallback keeps the path free of a panic.
    HEADS.get(i).unwrap_or(&HEADS[0])
}

/// Every slot ever created.
pub(crate) fn slots() -> impl Iterator<Item = &'static ThreadSlot> {
    chain(SLOTS.load(Ordering::Acquire), |s| s.next)
}

/// The stacks `[lo, hi)` of the registered threads.
pub(crate) fn stacks() -> Vec<(u64, u64)> {
    slots()
        .map(|s| {
            (
                s.stack_lo.load(Ordering::Relaxed),
                s.stack_hi.load(Ordering::Relaxed),
            )
        })
        .filter(|&(lo, hi)| lo < hi)
        .collect()
}

/// The slots from `head` on, following `next`.
fn chain(
    head: *const ThreadSlot,
    next: fn(&ThreadSlot) -> *const ThreadSlot,
) -> impl Iterator<Item = &'static ThreadSlot> {
    let mut p = head;
    std::iter::from_fn(move || {
        // SAFETY: slots are leaked boxes, never freed, and their links are immutable after
        // publication (a Release CAS that the Acquire load of the head synchronizes with).
        let s = unsafe { p.as_ref()? };
        p = next(s);
        Some(s)
    })
}

/// The calling thread's slot, if it is registered. Async-signal-safe: a register read and a
/// walk of one bucket chain (finite: chains only grow by registrations).
#[inline]
pub(crate) fn current() -> Option<&'static ThreadSlot> {
    let tp = thread_pointer();
    let mut p = bucket_of(tp).load(Ordering::Acquire) as *const ThreadSlot;
    // SAFETY: as in `chain`.
    while let Some(s) = unsafe { p.as_ref() } {
        // Relaxed: only this thread ever stores its own thread pointer into `owner`, so it reads
        // its own latest store; a slot it released reads 0 or another thread's pointer.
        if s.owner.load(Ordering::Relaxed) == tp {
            return Some(s);
        }
        p = s.chain;
    }
    None
}

/// The current thread's stack as `[lo, hi)`.
fn stack_bounds() -> std::io::Result<(u64, u64)> {
    // SAFETY: standard pthread attribute calls on the current thread with a zeroed attr that
    // pthread_getattr_np initialises; it is destroyed on every path after initialisation.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let rc = libc::pthread_getattr_np(libc::pthread_self(), &mut attr);
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        let mut addr: *mut libc::c_void = ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok((addr as u64, addr as u64 + size as u64))
    }
}

/// Registers the current thread (idempotent: a second call refreshes its stack bounds).
pub(crate) fn register() -> std::io::Result<()> {
    let (lo, hi) = stack_bounds()?;
    let tp = thread_pointer();
    // A slot this thread pointer already owns: this thread's (registered before), or one left by
    // an exited thread whose control block this thread reuses (its exit guard did not run).
    let slot = match current() {
        Some(s) => s,
        None => claim(tp),
    };
    slot.stack_lo.store(lo, Ordering::Relaxed);
    slot.stack_hi.store(hi, Ordering::Relaxed);
    // SAFETY: gettid has no preconditions.
    slot.tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
    // Registers the exit guard's destructor (a no-op if this thread already did).
    let _ = EXIT_GUARD.try_with(|_| ());
    Ok(())
}

/// A slot for thread pointer `tp`: a free one of its bucket, or a new one pushed onto the
/// bucket's chain and the list of every slot.
fn claim(tp: usize) -> &'static ThreadSlot {
    let bucket = bucket_of(tp);
    let free = chain(bucket.load(Ordering::Acquire), |s| s.chain).find(|s| {
        s.owner
            .compare_exchange(0, tp, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    if let Some(s) = free {
        return s;
    }
    // Slots and their caches' levels are never freed. The levels in 2 MiB pages where there
    // are some (see `huge_pages`), else from the allocator; the slot from the allocator, so
    // that registering touches no huge page: one is committed (2 MiB zeroed) at the first
    // lookup that reaches its levels, and a process never sampled (most of a shell script's)
    // commits none.
    let cache = match crate::huge_pages::alloc::<LevelsOf<Native>>() {
        // SAFETY: `huge_pages` gives out each byte of its fresh anonymous mappings once, never
        // freed or reused: zero, untouched.
        Some(levels) => unsafe { Cache::new_in_zeroed(levels) },
        None => Cache::new(),
    };
    let slot = ThreadSlot {
        next: ptr::null(),
        chain: ptr::null(),
        owner: AtomicUsize::new(tp),
        busy: AtomicBool::new(false),
        hazard: AtomicPtr::new(ptr::null_mut()),
        stack_lo: AtomicU64::new(0),
        stack_hi: AtomicU64::new(0),
        tid: AtomicI32::new(0),
        cache: UnsafeCell::new(cache),
        cache_counts: CacheCounts::default(),
    };
    let slot: &'static mut ThreadSlot = Box::leak(Box::new(slot));
    // Into the list of every slot first: whoever finds the slot through its bucket (only to
    // claim it after its owner released it) has then synchronized with both pushes.
    push(&SLOTS, slot, |s, next| s.next = next);
    push(bucket, slot, |s, next| s.chain = next);
    slot
}

/// Pushes `slot` onto the list headed by `head`, setting its link with `link`.
fn push(
    head: &AtomicPtr<ThreadSlot>,
    slot: &mut ThreadSlot,
    link: fn(&mut ThreadSlot, *const ThreadSlot),
) {
    let mut h = head.load(Ordering::Acquire);
    loop {
        link(slot, h);
        match head.compare_exchange_weak(h, slot, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(now) => h = now,
        }
    }
}

/// Unregisters the current thread; its slot becomes free for a thread of the same bucket.
pub(crate) fn unregister() {
    if let Some(s) = current() {
        s.stack_lo.store(0, Ordering::Relaxed);
        s.stack_hi.store(0, Ordering::Relaxed);
        s.owner.store(0, Ordering::Release);
    }
}

/// In a child process just after `fork()`: frees the slots of the parent's other threads (they do
/// not exist here; one may have been interrupted mid-unwind, leaving its slot busy and its
/// hazard set), keeping the calling thread's.
pub(crate) fn after_fork_in_child() {
    let me = thread_pointer();
    for s in slots() {
        if s.owner.load(Ordering::Relaxed) != me {
            s.hazard.store(ptr::null_mut(), Ordering::Relaxed);
            s.busy.store(false, Ordering::Relaxed);
            s.stack_lo.store(0, Ordering::Relaxed);
            s.stack_hi.store(0, Ordering::Relaxed);
            s.owner.store(0, Ordering::Release);
        }
    }
}

/// The current thread's slot, with its `busy` flag taken; an error if the thread is not
/// registered or is already unwinding (a signal arrived during an unwind). Async-signal-safe.
#[inline]
pub(crate) fn enter() -> Result<SlotGuard, crate::SampleError> {
    let slot = current().ok_or(crate::SampleError::ThreadNotRegistered)?;
    if slot.busy.swap(true, Ordering::Acquire) {
        return Err(crate::SampleError::Busy);
    }
    Ok(SlotGuard { slot })
}

/// Holds a slot's `busy` flag; released on drop.
pub(crate) struct SlotGuard {
    pub slot: &'static ThreadSlot,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.slot.hazard.store(ptr::null_mut(), Ordering::Release);
        self.slot.busy.store(false, Ordering::Release);
    }
}

/// True if the current thread is registered.
pub(crate) fn is_registered() -> bool {
    current().is_some()
}

/// Slots owned by a thread now.
pub(crate) fn owned() -> usize {
    slots()
        .filter(|s| s.owner.load(Ordering::Relaxed) != 0)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields a walk touches are the slot's first line.
    #[test]
    fn a_walk_touches_one_line_of_its_slot() {
        register().unwrap();
        let s = current().expect("registered");
        let base = s as *const ThreadSlot as usize;
        assert_eq!(base % 64, 0);
        for (name, field) in [
            ("owner", ptr::addr_of!(s.owner) as usize),
            ("busy", ptr::addr_of!(s.busy) as usize),
            ("hazard", ptr::addr_of!(s.hazard) as usize),
            ("stack_lo", ptr::addr_of!(s.stack_lo) as usize),
            ("stack_hi", ptr::addr_of!(s.stack_hi) as usize),
            ("cache_hits", ptr::addr_of!(s.cache_counts.hits) as usize),
            (
                "cache_misses",
                ptr::addr_of!(s.cache_counts.misses) as usize,
            ),
        ] {
            assert!(field - base < 64, "{name} at {}", field - base);
        }
        unregister();
    }

    #[test]
    fn threads_have_distinct_thread_pointers_and_find_their_slots() {
        register().unwrap();
        let mine = current().expect("registered") as *const ThreadSlot;
        let tp = thread_pointer();
        let (other_tp, other_slot) = std::thread::spawn(|| {
            assert!(current().is_none(), "a new thread is not registered");
            register().unwrap();
            let s = current().expect("registered") as *const ThreadSlot as usize;
            (thread_pointer(), s)
        })
        .join()
        .unwrap();
        assert_ne!(tp, other_tp);
        assert_ne!(mine as usize, other_slot);
        assert_eq!(current().map(|s| s as *const ThreadSlot), Some(mine));
        // x86_64: the thread pointer is the address of the TCB, whose first word points to it.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the TCB is mapped for the whole life of the thread.
        assert_eq!(unsafe { *(tp as *const usize) }, tp);
        unregister();
        assert!(current().is_none());
    }
}
