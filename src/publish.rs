//! The published rule table: one atomic pointer that a refresh swaps, hazard pointers that say
//! which table each unwinding thread reads, and reclamation of replaced tables.
//!
//! # Why a table is never freed while a handler reads it
//!
//! A reader (a signal handler, in [`with_table`]) does, on its own thread, which registered
//! earlier (its slot was pushed on the slot list, or claimed from it, before):
//!
//! ```text
//!   t = TABLE.load(Acquire)
//!   loop { hazard.store(t, Relaxed); fence(SeqCst) /* X */; u = TABLE.load(Acquire);
//!          if u == t { break } t = u }
//!   ... read *t ...; hazard.store(null, Release)
//! ```
//!
//! The refresh (in `refresh` and [`reclaim`]) does:
//!
//! ```text
//!   old = TABLE.swap(new, AcqRel); retired.push(old)
//!   fence(SeqCst) /* Y */
//!   for every slot (list head loaded with Acquire): free old only if hazard.load(Acquire) != old
//! ```
//!
//! Suppose the reclaimer frees `old` while the reader uses it. The reader confirmed `old` with a
//! load of `TABLE` after X that did not see the swap: that load is coherence-ordered before the
//! swap, which happens before Y, so by C++20 [atomics.order] p4.4 (which Rust adopts) X precedes
//! Y in the single order S of sequentially consistent operations. The reclaimer did not see the
//! hazard: either its hazard load read a value earlier than the reader's store of `old` (then
//! that load, after Y, is coherence-ordered before the store, which is before X, so Y precedes
//! X in S), or its load of the slot list head read a value earlier than the push of the reader's
//! slot (the push happens before X — it is sequenced before it, or, for a reused slot, the
//! reader's claim synchronized with its release, which follows the push — and the same rule
//! gives Y before X). Both contradict X before Y. A reader that sees the swap retries with the
//! new table (at most 8 times, then `Busy`); the final Release store of a null hazard, read by
//! the reclaimer's Acquire load, orders the reader's last use before the free.
//!
//! Both fences are needed: without them the hazard store and the table load (and the swap and
//! the hazard load) form the store-buffering pattern the model lets both sides miss.
//!
//! # Poisoned tables (feature `poison-freed-tables`)
//!
//! For tests: freeing a table marks it poisoned (its canary) and keeps it whole in a quarantine
//! of the last 16 freed tables (of all of them while hazards are ignored, so that a descheduled
//! reader cannot outlive the quarantine); a table leaving that quarantine drops its rules and
//! has its shell overwritten with a poison pattern, kept for 4096 more frees before its memory
//! is released.
//! Every reader checks, before and after its walk, that the table it holds is not poisoned; if it
//! is, it writes a message to stderr and aborts the process. A table freed too early then fails
//! loudly (the walk itself still read intact rules) instead of unwinding from reused memory.

use std::ptr;
use std::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};

use crate::arch::{Native, Rule};
use crate::threads::{self, ThreadSlot};
use crate::SampleError;
use unwind_core::{Cache, RuleTable};

/// A published table, with a canary that freeing overwrites (checked only with the
/// `poison-freed-tables` feature).
pub(crate) struct Published {
    /// [`LIVE`] until the table is freed (atomic: with the feature, a reader may read it while a
    /// premature free writes it, which is the bug the check reports).
    canary: AtomicU64,
    pub table: RuleTable<Rule>,
}

/// The canary of a table that may be read.
const LIVE: u64 = 0x4c49_5645_5441_424c;

/// The published table. Readers announce it in their hazard pointer before using it.
static TABLE: AtomicPtr<Published> = AtomicPtr::new(ptr::null_mut());

/// Publishes `table` and returns the table it replaces (null if none), which the caller must
/// retire and pass to [`reclaim`].
pub(crate) fn publish(table: RuleTable<Rule>) -> *mut Published {
    let new = Box::into_raw(Box::new(Published {
        canary: AtomicU64::new(LIVE),
        table,
    }));
    TABLE.swap(new, Ordering::AcqRel)
}

/// Frees every retired table that no thread's hazard pointer names (see the module docs).
pub(crate) fn reclaim(retired: &mut Vec<*mut Published>, quarantine: &mut Quarantine) {
    // Y: orders the caller's swap of TABLE before the loads of the slot list and the hazards.
    fence(Ordering::SeqCst);
    retired.retain(|&t| {
        let in_use = !poison::ignoring_hazards()
            && threads::slots().any(|s| s.hazard.load(Ordering::Acquire) == t);
        if !in_use {
            // SAFETY: `t` came from Box::into_raw in `publish`, is no longer published (it was
            // swapped out before being retired), and no hazard names it: by the argument in
            // the module docs no reader uses it now or can start to.
            unsafe { quarantine.free(t) };
        }
        in_use
    });
}

/// Runs `f` with the calling thread's cache and the published table, protected by the thread's
/// hazard pointer. Async-signal-safe.
pub(crate) fn with_table<T>(
    f: impl FnOnce(&RuleTable<Rule>, &mut Cache<Native>, &ThreadSlot) -> T,
) -> Result<T, SampleError> {
    let guard = threads::enter()?;
    let slot = guard.slot;
    let mut table = TABLE.load(Ordering::Acquire);
    let mut stable = false;
    for _ in 0..8 {
        slot.hazard.store(table, Ordering::Relaxed);
        // X: orders the hazard store before the confirming load (see the module docs).
        fence(Ordering::SeqCst);
        let now = TABLE.load(Ordering::Acquire);
        if now == table {
            stable = true;
            break;
        }
        table = now;
    }
    if !stable {
        return Err(SampleError::Busy);
    }
    // SAFETY: `table` is null or the published table, and our hazard names it, so `reclaim`
    // will not free it until the guard clears the hazard on drop, after `f` returns.
    let published = unsafe { table.as_ref() }.ok_or(SampleError::NotInitialized)?;
    poison::check(&published.canary);
    // SAFETY: the guard holds the slot's busy flag: this thread alone uses the cache, and a
    // re-entrant signal gets `Busy` instead of a second reference.
    let cache = unsafe { &mut *slot.cache.get() };
    let out = f(&published.table, cache, slot);
    poison::check(&published.canary);
    Ok(out)
}

/// Where freed tables go: dropped at once, or (with `poison-freed-tables`) poisoned and kept a
/// while before their memory is released.
#[derive(Default)]
pub(crate) struct Quarantine {
    #[cfg(feature = "poison-freed-tables")]
    whole: std::collections::VecDeque<*mut Published>,
    #[cfg(feature = "poison-freed-tables")]
    shells: std::collections::VecDeque<*mut Published>,
}

impl Quarantine {
    /// An empty quarantine.
    pub(crate) const fn new() -> Self {
        Quarantine {
            #[cfg(feature = "poison-freed-tables")]
            whole: std::collections::VecDeque::new(),
            #[cfg(feature = "poison-freed-tables")]
            shells: std::collections::VecDeque::new(),
        }
    }

    /// Frees a table.
    ///
    /// # Safety
    /// `t` came from [`publish`], is no longer published, and no reader uses it.
    unsafe fn free(&mut self, t: *mut Published) {
        #[cfg(feature = "poison-freed-tables")]
        {
            /// Freed tables kept whole (rules intact, canary poisoned).
            const KEEP_WHOLE: usize = 16;
            /// Freed shells kept poisoned before their memory is reused.
            const KEEP_SHELLS: usize = 4096;
            // SAFETY: forwarded: no reader may use `t`; one that does (the bug) sees the poison.
            unsafe { (*t).canary.store(poison::WORD, Ordering::SeqCst) };
            self.whole.push_back(t);
            // While hazards are ignored (the test of this check), a reader may hold a freed
            // table for as long as it is descheduled (milliseconds under qemu, hundreds of
            // refreshes): keep every table whole then, so that it sees the poisoned canary
            // rather than freed rules. That test aborts within a fraction of a second.
            while self.whole.len() > KEEP_WHOLE && !poison::ignoring_hazards() {
                let Some(t) = self.whole.pop_front() else {
                    break;
                };
                // SAFETY: the table is ours to drop; its shell is then overwritten (no longer a
                // valid `Published`, never dropped again) and later freed as raw memory.
                unsafe {
                    drop(ptr::read(&(*t).table));
                    ptr::write_bytes(t as *mut u8, poison::BYTE, std::mem::size_of::<Published>());
                }
                self.shells.push_back(t);
            }
            while self.shells.len() > KEEP_SHELLS {
                if let Some(old) = self.shells.pop_front() {
                    // SAFETY: `old` is a Box allocation of a `Published` whose contents were
                    // dropped; freeing it as `MaybeUninit` drops nothing.
                    drop(unsafe { Box::from_raw(old as *mut std::mem::MaybeUninit<Published>) });
                }
            }
        }
        #[cfg(not(feature = "poison-freed-tables"))]
        // SAFETY: forwarded from the caller.
        drop(unsafe { Box::from_raw(t) });
    }
}

// SAFETY: the quarantined pointers are owned allocations, touched only under the state mutex.
unsafe impl Send for Quarantine {}

/// The poison checks, compiled to nothing without the feature.
#[cfg(feature = "poison-freed-tables")]
mod poison {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// The byte freed tables' shells are filled with.
    pub const BYTE: u8 = 0xa5;
    /// A freed table's canary (its shell's bytes once overwritten).
    pub const WORD: u64 = u64::from_ne_bytes([BYTE; 8]);

    static IGNORE_HAZARDS: AtomicBool = AtomicBool::new(false);

    /// Aborts with a message if `canary` is not a live table's. Async-signal-safe (a write to
    /// stderr and `abort`, on the failure path only).
    #[inline(always)]
    pub fn check(canary: &AtomicU64) {
        if canary.load(Ordering::SeqCst) != super::LIVE {
            used_after_free();
        }
    }

    #[cold]
    #[inline(never)]
    fn used_after_free() -> ! {
        const MSG: &[u8] = b"unwind: rule table used after free (poison-freed-tables)\n";
        // SAFETY: write(2) of a static buffer, then abort; both async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::abort();
        }
    }

    /// Whether `reclaim` ignores hazard pointers (a test of the poison check itself).
    pub fn ignoring_hazards() -> bool {
        IGNORE_HAZARDS.load(Ordering::Relaxed)
    }

    /// Makes `reclaim` free retired tables whatever the hazard pointers say, so that tests can
    /// show a premature free is caught. Never use it otherwise.
    pub fn ignore_hazards(on: bool) {
        IGNORE_HAZARDS.store(on, Ordering::Relaxed);
    }
}

#[cfg(not(feature = "poison-freed-tables"))]
mod poison {
    #[inline(always)]
    pub fn check(_: &std::sync::atomic::AtomicU64) {}
    #[inline(always)]
    pub fn ignoring_hazards() -> bool {
        false
    }
}

#[cfg(feature = "poison-freed-tables")]
pub use poison::ignore_hazards;
