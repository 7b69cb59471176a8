//! Memory in 2 MiB pages for the registered threads' rule caches, which are never freed (a
//! thread's slot, with its cache, passes to a later thread when its owner exits).
//!
//! A signal handler meets its cache with cold TLBs as well as cold CPU caches: a thread's slot
//! and cache levels are about 410 KiB on x86_64 (one slot line, 8 KiB of cache slots, 272 KiB
//! of second-level sets, 128 KiB of extents), 100-odd pages of 4 KiB, and a miss that reaches
//! the levels pays a page walk for each line it reads there. Touching one byte of each of those
//! pages before the walk (a diagnostic build, in the profiler's handler) took 20 % of cc1's
//! walk cycles and 12 % of python3's: so the levels come from 2 MiB chunks mapped with
//! `MADV_HUGEPAGE` (5 threads' to a chunk on x86_64, 2 on ARM). The slots (8 KiB of cache
//! slots, two pages) come from the allocator: registering a thread then touches no chunk, and
//! a chunk's huge page is committed (2 MiB zeroed, about 0.2 ms) at the first lookup that
//! reaches its levels, not in the many short processes of a shell script that are never
//! sampled (it was a tenth of their start under `unwind-profiler record`).
//!
//! Allocation is a lock-free bump of one word (a chunk's base plus the offset in it; a chunk
//! is 2 MiB-aligned, so the word names both), as registration must be: a `fork`ed child can
//! always register. A thread that finds the chunk full maps another; if another thread's got
//! there first, it unmaps its own. The chunks are capped ([`MAX_CHUNKS`]): a huge page is
//! committed whole at its first touch, where 4 KiB pages are committed as a cache's lookups
//! reach them, so a program of many threads gets huge pages for its first ones only. Where the
//! kernel refuses `MADV_HUGEPAGE` (no transparent huge pages), nothing is mapped here and the
//! callers allocate as before.

use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The size and alignment of a chunk: one huge page on x86_64 and on ARM with LPAE.
const CHUNK: usize = 2 << 20;

/// Chunks mapped at most (16 MiB: 40 threads' cache levels on x86_64).
const MAX_CHUNKS: usize = 8;

/// The next free byte: the current chunk's base plus the offset in it, kept below the chunk's
/// end (so that the word's chunk is the one it points into); 0 before the first chunk.
static CURSOR: AtomicUsize = AtomicUsize::new(0);

/// Chunks mapped so far (or `MAX_CHUNKS` once the kernel refused huge pages).
static CHUNKS: AtomicUsize = AtomicUsize::new(0);

/// Room for one `T` in a 2 MiB page, never freed; `None` once the chunks are used up, if the
/// kernel has no huge pages to give, or for a `T` too large for a chunk. Not async-signal-safe
/// (it may map memory).
pub(crate) fn alloc<T>() -> Option<&'static mut MaybeUninit<T>> {
    let size = std::mem::size_of::<T>();
    let align = std::mem::align_of::<T>();
    if size == 0 || size >= CHUNK || align > 4096 {
        return None;
    }
    let mut cur = CURSOR.load(Ordering::Acquire);
    loop {
        let (at, from) = if cur == 0 {
            (None, 0)
        } else {
            let start = cur.next_multiple_of(align);
            (Some(start), cur & !(CHUNK - 1))
        };
        if let Some(start) = at.filter(|&s| s + size < from + CHUNK) {
            match CURSOR.compare_exchange_weak(
                cur,
                start + size,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // SAFETY: `[start, start + size)` is inside a chunk mapped read-write and never
                // unmapped, aligned for `T`, and no other caller is given any byte of it (the
                // cursor moved past it by this exchange).
                Ok(_) => return Some(unsafe { &mut *(start as *mut MaybeUninit<T>) }),
                Err(now) => {
                    cur = now;
                    continue;
                }
            }
        }
        // The chunk is full (or there is none): map another, if the cap allows.
        if CHUNKS.fetch_add(1, Ordering::Relaxed) >= MAX_CHUNKS {
            CHUNKS.store(MAX_CHUNKS, Ordering::Relaxed);
            return None;
        }
        let base = map_chunk()?;
        match CURSOR.compare_exchange(cur, base + size, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: as above: the new chunk's first `size` bytes, its base 2 MiB-aligned.
            Ok(_) => return Some(unsafe { &mut *(base as *mut MaybeUninit<T>) }),
            Err(now) => {
                // Another thread moved the cursor (into a chunk of its own, or further in the
                // old one): give this chunk back and try there.
                // SAFETY: `base` is a whole chunk this call mapped and gave to no one.
                unsafe { libc::munmap(base as *mut libc::c_void, CHUNK) };
                CHUNKS.fetch_sub(1, Ordering::Relaxed);
                cur = now;
            }
        }
    }
}

/// A new chunk, marked `MADV_HUGEPAGE`; `None` if the mapping fails or the kernel refuses the
/// advice (then no chunk is mapped again).
fn map_chunk() -> Option<usize> {
    let (base, advised) = map_huge(CHUNK)?;
    if !advised {
        // SAFETY: the chunk was mapped by `map_huge` and given to no one.
        unsafe { libc::munmap(base.as_ptr().cast(), CHUNK) };
        CHUNKS.store(MAX_CHUNKS, Ordering::Relaxed);
        return None;
    }
    Some(base.as_ptr() as usize)
}

/// A new private anonymous mapping (zeroed, read-write) of `len` bytes rounded up to whole
/// 2 MiB pages, at a 2 MiB boundary and advised `MADV_HUGEPAGE` before any touch, which is
/// what transparent huge pages need in their `madvise` mode; with whether the kernel took the
/// advice (without THP it does not, and the mapping is then of 4 KiB pages). `None` if the
/// mapping fails. Release it with `munmap` of the rounded length. For a profiler's allocator
/// that puts its large blocks in huge pages, as the library does its threads' caches.
pub fn map_huge(len: usize) -> Option<(NonNull<u8>, bool)> {
    let len = len.checked_next_multiple_of(CHUNK)?;
    // Another huge page's worth more, to cut an aligned mapping out of it.
    let over = len.checked_add(CHUNK)?;
    // SAFETY: a private anonymous mapping at an address of the kernel's choosing.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = p as usize;
    let base = start.next_multiple_of(CHUNK);
    let (head, tail) = (base - start, start + over - (base + len));
    // SAFETY: the head and tail are the ends of the mapping just made, outside `[base, base +
    // len)`; advice changes no contents.
    let advised = unsafe {
        if head != 0 {
            libc::munmap(p, head);
        }
        if tail != 0 {
            libc::munmap((base + len) as *mut libc::c_void, tail);
        }
        libc::madvise(base as *mut libc::c_void, len, libc::MADV_HUGEPAGE) == 0
    };
    NonNull::new(base as *mut u8).map(|b| (b, advised))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocations are aligned, disjoint, inside one 2 MiB-aligned chunk each, and stop at the
    /// cap (six 300 KiB blocks to a chunk).
    #[test]
    fn allocations_are_aligned_disjoint_and_capped() {
        #[repr(C, align(64))]
        struct Block([u8; 300 << 10]);
        let mut got: Vec<usize> = Vec::new();
        while let Some(b) = alloc::<Block>() {
            let at = b.as_mut_ptr() as usize;
            assert_eq!(at % 64, 0);
            // Inside one chunk.
            assert_eq!(at & !(CHUNK - 1), (at + (300 << 10) - 1) & !(CHUNK - 1));
            // Writable.
            // SAFETY: the block is ours.
            unsafe { b.as_mut_ptr().cast::<u8>().write_bytes(7, 300 << 10) };
            got.push(at);
            assert!(got.len() <= MAX_CHUNKS * 6, "no cap");
        }
        // The kernel gives the advice wherever it has transparent huge pages (Linux on x86_64
        // and ARM, qemu-user included); the other tests of this binary take a few blocks at most.
        assert!(got.len() >= 2, "{} blocks", got.len());
        got.sort_unstable();
        assert!(got.windows(2).all(|w| w[1] - w[0] >= 300 << 10), "overlap");
        assert!(alloc::<Block>().is_none());
    }
}

#[cfg(test)]
mod map_tests {
    use super::*;

    /// A mapping is 2 MiB-aligned, zeroed and writable to its rounded end; x86_64 and ARM
    /// Linux (and qemu-user) take the advice.
    #[test]
    fn a_huge_mapping_is_aligned_and_whole() {
        let (p, advised) = map_huge(CHUNK + 1).expect("mapped");
        assert!(advised);
        let at = p.as_ptr();
        assert_eq!(at as usize % CHUNK, 0);
        // SAFETY: the mapping is 2 * CHUNK bytes (rounded up), ours, unmapped once below.
        unsafe {
            let whole = std::slice::from_raw_parts_mut(at, 2 * CHUNK);
            assert!(whole.iter().all(|&b| b == 0));
            whole.fill(1);
            assert_eq!(libc::munmap(at.cast(), 2 * CHUNK), 0);
        }
        assert!(map_huge(usize::MAX - 5).is_none());
    }
}
