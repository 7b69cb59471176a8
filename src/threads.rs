//! Registered threads: stack bounds, a rule cache, and a hazard pointer each.
//!
//! Slots live in a lock-free singly linked list and are never freed (a thread that unregisters
//! leaves its slot for the next one), so a signal handler or the table reclaimer can walk the
//! list at any time. Registration happens outside signal handlers: `pthread_getattr_np`
//! allocates.

use std::cell::{Cell, UnsafeCell};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use crate::arch::{CachedRule, Rule};
use unwind_core::{Cache, RuleTable};

/// One registered thread's state.
pub(crate) struct ThreadSlot {
    next: *const ThreadSlot,
    in_use: AtomicBool,
    /// Set while the owning thread is unwinding (guards the cache against re-entrant signals).
    pub busy: AtomicBool,
    /// The table the owning thread is reading, if any: the reclaimer must not free it.
    pub hazard: AtomicPtr<RuleTable<Rule>>,
    pub stack_lo: AtomicU64,
    pub stack_hi: AtomicU64,
    /// Only the owning thread touches it, and only while `busy` is held.
    pub cache: UnsafeCell<Cache<CachedRule>>,
}

// SAFETY: every field but `cache` is atomic or immutable after publication; `cache` is touched
// only by the thread that holds `busy` (see `enter`), so no two threads access it at once.
unsafe impl Sync for ThreadSlot {}

static SLOTS: AtomicPtr<ThreadSlot> = AtomicPtr::new(ptr::null_mut());

thread_local! {
    /// The current thread's slot. Const-initialised with no destructor, so reading it from a
    /// signal handler is a plain TLS load.
    static CURRENT: Cell<*const ThreadSlot> = const { Cell::new(ptr::null()) };
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

/// Every slot ever created.
pub(crate) fn slots() -> impl Iterator<Item = &'static ThreadSlot> {
    let mut p = SLOTS.load(Ordering::Acquire) as *const ThreadSlot;
    std::iter::from_fn(move || {
        // SAFETY: slots are leaked boxes, never freed, and `next` is immutable after publication.
        let s = unsafe { p.as_ref()? };
        p = s.next;
        Some(s)
    })
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

/// Registers the current thread (idempotent).
pub(crate) fn register() -> std::io::Result<()> {
    if is_registered() {
        return Ok(());
    }
    let (lo, hi) = stack_bounds()?;
    let slot = slots()
        .find(|s| {
            s.in_use
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
        .unwrap_or_else(|| {
            let mut head = SLOTS.load(Ordering::Acquire);
            let slot = Box::leak(Box::new(ThreadSlot {
                next: head,
                in_use: AtomicBool::new(true),
                busy: AtomicBool::new(false),
                hazard: AtomicPtr::new(ptr::null_mut()),
                stack_lo: AtomicU64::new(0),
                stack_hi: AtomicU64::new(0),
                cache: UnsafeCell::new(Cache::new()),
            }));
            loop {
                match SLOTS.compare_exchange_weak(head, slot, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break &*slot,
                    Err(h) => {
                        head = h;
                        slot.next = h;
                    }
                }
            }
        });
    slot.stack_lo.store(lo, Ordering::Relaxed);
    slot.stack_hi.store(hi, Ordering::Relaxed);
    CURRENT.with(|c| c.set(slot));
    // Registers the exit guard's destructor (a no-op if this thread already did).
    let _ = EXIT_GUARD.try_with(|_| ());
    Ok(())
}

/// Unregisters the current thread; its slot becomes free for another thread.
pub(crate) fn unregister() {
    let Ok(slot) = CURRENT.try_with(|c| c.replace(ptr::null())) else {
        return;
    };
    // SAFETY: non-null slots are leaked and live forever.
    if let Some(s) = unsafe { slot.as_ref() } {
        s.in_use.store(false, Ordering::Release);
    }
}

/// The current thread's slot, with its `busy` flag taken; `None` if the thread is not registered
/// or is already unwinding (a signal arrived during an unwind).
pub(crate) fn enter() -> Result<SlotGuard, crate::SampleError> {
    let slot = CURRENT.try_with(|c| c.get()).unwrap_or(ptr::null());
    // SAFETY: non-null slots are leaked and live forever.
    let slot = unsafe { slot.as_ref() }.ok_or(crate::SampleError::ThreadNotRegistered)?;
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
    CURRENT.try_with(|c| !c.get().is_null()).unwrap_or(false)
}
