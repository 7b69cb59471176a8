//! Sampling the program's allocations where they happen: in its allocator's entry points (the
//! preload library's `malloc` and friends) or in a Rust program's global allocator
//! ([`Sampled`]).
//!
//! - **Which allocations**: each thread counts down the bytes it allocates to its next sample
//!   point, drawn as [`byte_sampling`](crate::byte_sampling) describes; the path of an
//!   allocation not sampled is a load, a subtraction and a store. The countdowns live in each
//!   thread's static TLS block, reached without a call (`static_tls`): Rust's thread-locals in
//!   a shared object go through `__tls_get_addr`, which may call `malloc`, which is where this
//!   runs; so every thread has one, however many there are.
//! - **A sample**: the thread's stack, walked from the allocator hook's own frame with
//!   [`unwind_in_process::unwind_here`], goes into the thread's ring with the size and an id
//!   (see [`sampler::sample_allocation`]): no allocation,
//!   lock or system call. The collector weighs it by the unbiased estimate of what it stands
//!   for ([`byte_sampling::estimate`](crate::byte_sampling::estimate)).
//! - **What is still live**: the sampled addresses, with their ids, in a fixed-capacity
//!   lock-free table ([`LiveHeap`]), kept in the process record (which `record` reads): `free`
//!   removes its address if it is there, the collector reads which ids remain. A `free` of an
//!   address never sampled is a load from a 32 KiB filter.
//! - **Never the profiler's own**: threads of the profiler, and the profiler's marked work in
//!   the program's threads, are not sampled; an allocation made while this thread is already
//!   in the sampling path (a signal handler that allocates) is not either. Each allocation not
//!   sampled at its sample point is counted by reason.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize};

use crate::{sampler, static_tls};

/// Sampled addresses the live table holds at most.
pub const LIVE_CAPACITY: usize = 1 << 16;
/// Addresses per bucket of the live table: a bucket is one 64-byte line of keys.
const BUCKET: usize = 8;
/// Counters of the filter a `free` looks at first.
const FILTER: usize = 1 << 15;

/// The sampled allocations still live, by address: what the collector counts as in use.
///
/// Buckets of eight addresses, each address with the id of its sample; an address is in
/// the bucket its hash names or nowhere (a full bucket refuses it, counted in `overflow`), so a
/// lookup reads one line. In front, a counting filter: a `free` whose counter is zero was
/// never sampled. Zeroed memory is an empty table. Every operation is a few atomic loads and
/// stores: async-signal-safe, and safe after `fork` (nothing is held).
#[repr(C)]
pub struct LiveHeap {
    /// How many live addresses hash to each counter (saturating at 255, then never lowered).
    filter: [AtomicU8; FILTER],
    /// The addresses (0: free).
    keys: [AtomicU64; LIVE_CAPACITY],
    /// The id of each address's sample (0 while its key is being set or cleared).
    ids: [AtomicU64; LIVE_CAPACITY],
    /// Sampled allocations that found their bucket full (counted, not tracked).
    pub overflow: AtomicU64,
    /// The last id given out.
    next_id: AtomicU64,
}

impl LiveHeap {
    /// An empty table.
    pub const fn zero() -> LiveHeap {
        LiveHeap {
            filter: [const { AtomicU8::new(0) }; FILTER],
            keys: [const { AtomicU64::new(0) }; LIVE_CAPACITY],
            ids: [const { AtomicU64::new(0) }; LIVE_CAPACITY],
            overflow: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
        }
    }

    #[inline(always)]
    fn hash(address: u64) -> u64 {
        // Allocations are at least 8-aligned: the low bits carry nothing.
        (address >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    /// The filter counter of `address`: its bits above a block's 16-byte alignment, unhashed
    /// (two instructions on every `free`; blocks live at once are spread over them). Below
    /// [`FILTER`].
    #[inline(always)]
    fn filter_index(address: u64) -> usize {
        (address >> 4) as usize % FILTER
    }

    #[inline(always)]
    fn filter_of(&self, address: u64) -> &AtomicU8 {
        let i = Self::filter_index(address);
        // `i < FILTER`; the fallback keeps the path free of a panic.
        self.filter.get(i).unwrap_or(&self.filter[0])
    }

    #[inline(always)]
    fn bucket(&self, address: u64) -> usize {
        // Other bits of the hash than the filter's top ones.
        let buckets = (LIVE_CAPACITY / BUCKET) as u64;
        ((Self::hash(address) >> 20) % buckets) as usize * BUCKET
    }

    /// Adds `address` (not 0) and returns the new id of its sample, or 0 if its bucket is full.
    /// An address already there was freed without its `free` being seen (the allocator gave it
    /// out again): its entry takes the new id.
    pub fn insert(&self, address: u64) -> u64 {
        let first = self.bucket(address);
        for i in first..first + BUCKET {
            let (Some(key), Some(id)) = (self.keys.get(i), self.ids.get(i)) else {
                break;
            };
            if key.load(Relaxed) == address {
                let new = self.next_id.fetch_add(1, Relaxed).wrapping_add(1).max(1);
                id.store(new, Release);
                return new;
            }
        }
        for i in first..first + BUCKET {
            let (Some(key), Some(id)) = (self.keys.get(i), self.ids.get(i)) else {
                break;
            };
            if key.compare_exchange(0, address, Acquire, Relaxed).is_ok() {
                let new = self.next_id.fetch_add(1, Relaxed).wrapping_add(1).max(1);
                id.store(new, Release);
                let f = self.filter_of(address);
                let _ = f.fetch_update(Relaxed, Relaxed, |n| n.checked_add(1));
                return new;
            }
        }
        self.overflow.fetch_add(1, Relaxed);
        0
    }

    /// Removes `address` if it is there; whether it was.
    #[inline(always)]
    pub fn remove(&self, address: u64) -> bool {
        let f = self.filter_of(address);
        if f.load(Relaxed) == 0 {
            return false;
        }
        self.remove_slow(address, f)
    }

    #[inline(never)]
    fn remove_slow(&self, address: u64, f: &AtomicU8) -> bool {
        let first = self.bucket(address);
        for i in first..first + BUCKET {
            let (Some(key), Some(id)) = (self.keys.get(i), self.ids.get(i)) else {
                break;
            };
            if key.load(Relaxed) == address {
                // The id first: a reader never sees this key's old id on the next address.
                id.store(0, Release);
                key.store(0, Release);
                let _ = f.fetch_update(Relaxed, Relaxed, |n| {
                    (n != u8::MAX).then(|| n.saturating_sub(1))
                });
                return true;
            }
        }
        false
    }

    /// Calls `f` with the id of every live sampled allocation. Reads memory the program may
    /// write (under `record`): the ids are only compared with those the collector received.
    pub fn live_ids(&self, mut f: impl FnMut(u64)) {
        for (key, id) in self.keys.iter().zip(&self.ids) {
            if key.load(Acquire) != 0 {
                let id = id.load(Acquire);
                if id != 0 {
                    f(id);
                }
            }
        }
    }
}

/// One thread's countdown (see the module docs), in the thread's own static TLS block
/// ([`static_tls`]): zeroed in a new thread, written by that thread only (and by its signal
/// handlers, which run to completion inside it).
#[repr(C)]
struct ThreadEntry {
    /// Bytes left before the next sample point.
    left: AtomicI64,
    /// The random state of its draws; 0 until the thread's first allocation draws its first
    /// point.
    random: AtomicU64,
    /// Its record's index in the sampler plus one (0: not looked up yet).
    slot: AtomicUsize,
    /// Set while the thread is in the sampling path.
    busy: AtomicBool,
    /// Set for the profiler's own threads, never sampled.
    ours: AtomicBool,
    /// Set while the thread is inside an allocator function that counts its allocation itself
    /// (see [`counted_once`]).
    nested: AtomicBool,
}

const _: () = assert!(
    std::mem::size_of::<ThreadEntry>() <= static_tls::BYTES
        && std::mem::align_of::<ThreadEntry>() <= 8
);

/// Whether allocations are sampled.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The filter of the live table that holds this process's sampled addresses, once one was
/// sampled into the current process record (null until then: a `free` looks at nothing).
static LIVE_FILTER: AtomicPtr<AtomicU8> = AtomicPtr::new(std::ptr::null_mut());
/// The mean spacing of sample points, in bytes.
static MEAN: AtomicU64 = AtomicU64::new(crate::byte_sampling::DEFAULT_MEAN);

/// Starts sampling allocations, one sample point every `mean` bytes on average. Called once
/// sampling runs (the records, rings and tables exist).
pub fn enable(mean: u64) {
    MEAN.store(mean.max(1), Relaxed);
    ENABLED.store(true, Release);
}

/// Stops sampling allocations (frees of sampled ones are still tracked).
pub fn disable() {
    ENABLED.store(false, Release);
}

/// Whether allocations are being sampled.
#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Relaxed)
}

/// The mean spacing of sample points, in bytes.
pub fn mean() -> u64 {
    MEAN.load(Relaxed)
}

/// The calling thread's entry. The reference is used only while the calling function runs
/// on this thread (the entry lives as long as the thread).
#[inline(always)]
fn entry() -> &'static ThreadEntry {
    // SAFETY: the block is this thread's, `static_tls::BYTES` long and 8-aligned (checked
    // above against the entry's size and alignment); it is only ever written as an entry, whose
    // fields are atomics for which zero is valid.
    unsafe { &*static_tls::block().cast::<ThreadEntry>() }
}

/// Runs `call`, the real function behind a hook that counts its allocation itself (`calloc`,
/// `realloc`, the aligned ones): whatever allocations `call` makes through the hooked
/// `malloc` (musl's `calloc` and `posix_memalign` call it) are neither counted down nor
/// sampled, so that the caller's allocation counts once.
#[inline(always)]
pub fn counted_once<T>(call: impl FnOnce() -> T) -> T {
    let e = entry();
    let (left, outer) = (e.left.load(Relaxed), e.nested.load(Relaxed));
    e.nested.store(true, Relaxed);
    let out = call();
    // Kept set for an outer hook's call (musl's `posix_memalign` calls `aligned_alloc`).
    e.nested.store(outer, Relaxed);
    e.left.store(left, Relaxed);
    out
}

/// Marks the calling thread as the profiler's own: its allocations are never sampled.
pub fn this_thread_is_ours() {
    entry().ours.store(true, Relaxed);
}

/// Notes an allocation of `size` bytes at `address` made by the caller of the calling
/// function: samples it if a sample point falls in it. `skip`: the frames of the hook between
/// this call and the code that allocated (the hook itself is 1).
///
/// Async-signal-safe, never allocates. Call it after the allocation succeeded.
#[inline(always)]
pub fn allocated(address: *mut u8, size: usize, skip: usize) {
    if !address.is_null() && count_down(size) {
        sample_point(address, size, skip);
    }
}

/// [`allocated`] in two halves, for a hook that counts down before it calls the real function
/// (so that it can jump to it, keeping no frame): counts `size` bytes down and says whether a
/// sample point falls in them; if so, the hook calls [`sample_point`] with the block the real
/// function returned. Async-signal-safe, never allocates.
#[inline(always)]
pub fn count_down(size: usize) -> bool {
    if !ENABLED.load(Relaxed) {
        return false;
    }
    let e = entry();
    // `left` is at least 0 between allocations and no block reaches 2^63 bytes: the
    // difference cannot wrap.
    let left = e.left.load(Relaxed).wrapping_sub(size as i64);
    e.left.store(left, Relaxed);
    left < 0
}

/// The sample of an allocation of `size` bytes at `address` (null if the real function failed:
/// then only the next point is drawn) in which [`count_down`] found a sample point. `skip` as
/// for [`allocated`].
#[inline(always)]
pub fn sample_point(address: *mut u8, size: usize, skip: usize) {
    // Inlined: a frame of its own here might be a tail call or not, and `skip` would not know.
    sampled(entry(), address as u64, size as u64, skip);
}

/// Notes that the allocation at `address` is freed (before the allocator gets it back, so that
/// the address is not given out again while the table still holds it). Async-signal-safe.
#[inline(always)]
pub fn freed(address: *mut u8) {
    if may_be_sampled(address) {
        freed_sampled(address);
    }
}

/// Whether the block at `address` may be a sampled one, which its `free` must then remove from
/// the live table ([`freed`]); `false` for nearly every block: a load of the live table's
/// filter. Async-signal-safe.
#[inline(always)]
pub fn may_be_sampled(address: *mut u8) -> bool {
    let filter = LIVE_FILTER.load(Relaxed);
    if filter.is_null() {
        return false;
    }
    // SAFETY: `filter` is the first of the `FILTER` counters of a process record's live table
    // (set in `sampled`); records are never unmapped; the index is below `FILTER`.
    unsafe { (*filter.add(LiveHeap::filter_index(address as u64))).load(Relaxed) != 0 }
}

/// [`freed`] for a block the filter does not rule out.
#[cold]
#[inline(never)]
fn freed_sampled(address: *mut u8) {
    if !address.is_null() {
        sampler::process().live.remove(address as u64);
    }
}

/// Forgets which live table samples went to: called when the process record changes (the
/// process joined `record`, or is a forked child), whose table starts empty.
pub fn process_record_changed() {
    LIVE_FILTER.store(std::ptr::null_mut(), Relaxed);
}

/// The sample of an allocation whose bytes hold a sample point.
#[cold]
#[inline(never)]
fn sampled(e: &ThreadEntry, address: u64, size: u64, skip: usize) {
    if e.nested.load(Relaxed) {
        // Inside a hooked function that counts the allocation itself (its countdown is put
        // back when the function returns).
        return;
    }
    if e.random.load(Relaxed) == 0 {
        // The thread's first allocation: its first point, drawn now, and this allocation
        // counted towards it.
        let seed = (unwind_in_process::thread_pointer() as u64) ^ sampler::now_ns().rotate_left(32);
        let (left, random) = crate::byte_sampling::ByteSampler::new(mean(), seed).parts();
        e.random.store(random, Relaxed);
        let left = left.wrapping_sub(size as i64);
        e.left.store(left, Relaxed);
        if left >= 0 {
            return;
        }
    }
    // The next point, from this allocation's end (memoryless).
    let mut draw = crate::byte_sampling::ByteSampler::from_parts(
        0,
        e.random.load(Relaxed),
        MEAN.load(Relaxed),
    );
    let _ = draw.sample(1);
    let (left, random) = draw.parts();
    e.left.store(left, Relaxed);
    e.random.store(random, Relaxed);
    if e.ours.load(Relaxed) || address == 0 {
        return;
    }
    // A signal handler's allocation while this thread samples: the handler runs to completion
    // before the interrupted sample goes on, so a plain flag is enough.
    if e.busy.load(Relaxed) {
        sampler::process().alloc_dropped(sampler::AllocDrop::Busy);
        return;
    }
    e.busy.store(true, Relaxed);
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    let live = &sampler::process().live;
    let id = live.insert(address);
    LIVE_FILTER.store(live.filter.as_ptr().cast_mut(), Relaxed);
    // Frames: `unwind_here`, `sample_allocation`, this one, then the hook's.
    let stored = sampler::sample_allocation(&e.slot, size, id, 3 + skip);
    if !stored && id != 0 {
        live.remove(address);
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    e.busy.store(false, Relaxed);
}

/// A global allocator that samples the allocations of `A` (a Rust program's
/// `#[global_allocator]`), as the preload library samples `malloc`'s:
///
/// ```no_run
/// use unwind_profiler::alloc_sampling::Sampled;
/// #[global_allocator]
/// static ALLOCATOR: Sampled<std::alloc::System> = Sampled(std::alloc::System);
/// ```
///
/// Allocations are sampled while a [`Profiler`](crate::Profiler) runs with
/// [`Config::alloc_interval`](crate::Config::alloc_interval) set; otherwise each call is `A`'s
/// and a load.
pub struct Sampled<A>(pub A);

// SAFETY: every block is `A`'s, returned to `A` with its layout; the sampling reads and writes
// only the profiler's own tables.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Sampled<A> {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from the caller's contract.
        let p = unsafe { self.0.alloc(layout) };
        allocated(p, layout.size(), 1);
        p
    }

    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from the caller's contract.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        allocated(p, layout.size(), 1);
        p
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        freed(ptr);
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        freed(ptr);
        // SAFETY: forwarded from the caller's contract.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if p.is_null() {
            // The old block is still the program's; it is not tracked any more (a sample
            // lost, not a lie).
            return p;
        }
        allocated(p, new_size, 1);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty table on the heap (over a MiB: built on the stack first, it overflows a test
    /// thread's in a debug build).
    fn empty_table() -> Box<LiveHeap> {
        let layout = Layout::new::<LiveHeap>();
        // SAFETY: a zeroed block of the table's layout is an empty table (atomics only), owned
        // by the box.
        unsafe {
            let p = std::alloc::alloc_zeroed(layout).cast::<LiveHeap>();
            assert!(!p.is_null());
            Box::from_raw(p)
        }
    }

    #[test]
    fn the_live_table_finds_what_it_holds_and_forgets_what_is_removed() {
        let t = empty_table();
        let addresses: Vec<u64> = (1..=5000u64).map(|i| i * 48 + 0x5555_0000).collect();
        let ids: Vec<u64> = addresses.iter().map(|&a| t.insert(a)).collect();
        assert!(ids.iter().all(|&id| id != 0));
        let mut seen = Vec::new();
        t.live_ids(|id| seen.push(id));
        seen.sort();
        assert_eq!(seen, (1..=5000).collect::<Vec<u64>>());
        for &a in addresses.iter().step_by(2) {
            assert!(t.remove(a));
            assert!(!t.remove(a));
        }
        assert!(!t.remove(0x1234_5678));
        let mut left = 0;
        t.live_ids(|_| left += 1);
        assert_eq!(left, 2500);
        assert_eq!(t.overflow.load(Relaxed), 0);
        // An address given out again without a free seen: one entry, the new sample's.
        let again = t.insert(addresses[1]);
        let mut live = Vec::new();
        t.live_ids(|id| live.push(id));
        assert_eq!(live.len(), 2500);
        assert!(live.contains(&again) && !live.contains(&ids[1]));
        assert!(t.remove(addresses[1]));
        assert!(!t.remove(addresses[1]));
    }

    #[test]
    fn a_full_bucket_refuses_and_counts() {
        let t = empty_table();
        let bucket = t.bucket(0x1000);
        let same: Vec<u64> = (1..1_000_000u64)
            .map(|i| 0x1000 + i * 8)
            .filter(|&a| t.bucket(a) == bucket)
            .take(BUCKET + 2)
            .collect();
        let ids: Vec<u64> = same.iter().map(|&a| t.insert(a)).collect();
        assert_eq!(ids.iter().filter(|&&id| id == 0).count(), 2);
        assert_eq!(t.overflow.load(Relaxed), 2);
        // The refused ones are not found; a removal makes room.
        assert!(!t.remove(same[BUCKET]));
        assert!(t.remove(same[0]));
        assert_ne!(t.insert(same[BUCKET]), 0);
    }
}
