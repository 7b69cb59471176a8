//! The library's allocator: blocks of 1 MiB and more in 2 MiB pages, the rest from the C
//! library's `malloc` as before, called directly ([`crate::malloc::real_alloc`]), not through
//! this library's interposed one: the profiler's own allocations are never sampled as the
//! program's.
//!
//! In the signal handler every line a walk reads is cold, and so is its page's translation: a
//! large module's rule table (cc1: 594,336 rows, several MiB of arrays) spans hundreds of 4 KiB
//! pages, so a table lookup's dependent loads each begin with a page walk, itself a chain of
//! cold loads. In 2 MiB pages the table takes a few TLB entries instead. Transparent huge pages
//! back only 2 MiB-aligned ranges, and in the `madvise` mode (several distributions' default)
//! only those marked `MADV_HUGEPAGE` before they are touched; so each such block is its own
//! aligned mapping, marked at once. Where the kernel has no huge pages to give (THP `never`,
//! fragmented memory), the mapping is made of 4 KiB pages as before.
//!
//! Only blocks of 1 MiB and more: a block rounds up to a whole 2 MiB page, which the first
//! touch fills, so smaller ones (each thread's rule cache: 400 KiB on x86_64) would each cost
//! up to 2 MiB of memory. The large ones are the rule tables' arrays of large modules, built
//! once at start (and after a `dlopen`), and buffers used after the program ends.
//!
//! Measured in the profiler's summary (`gcc -O2 -c` on the generated 400-function file, and
//! python3 on `benches/workloads/python-cpu.py`; 8 rounds alternating with the same build
//! without this allocator): cc1 0.84-0.97 times the unwind time a frame (every round lower;
//! median 0.94), python3 within the runs' spread. On cc1 one block (of the 4.2 MiB of tables)
//! is this large, and the process's peak memory grows by 2-4 MiB. The threads' caches are not
//! allocated here: the library places them in 2 MiB pages of its own, several to a page.

use std::alloc::{GlobalAlloc, Layout};

#[cfg(feature = "alloc-hooks")]
use crate::malloc::{real_alloc, real_release};

/// The C library's `malloc` (or `posix_memalign` for a larger alignment), as `System` calls it:
/// without the hooks, the exported functions are the real ones.
#[cfg(not(feature = "alloc-hooks"))]
fn real_alloc(size: usize, align: usize) -> *mut u8 {
    if align <= 16 && align <= size {
        // SAFETY: malloc of a non-zero size (a Layout's).
        unsafe { libc::malloc(size).cast() }
    } else {
        let mut out = ptr::null_mut();
        // SAFETY: posix_memalign with an out-pointer of ours and a power-of-two alignment of at
        // least a pointer's.
        let rc = unsafe { libc::posix_memalign(&mut out, align.max(size_of::<usize>()), size) };
        if rc == 0 {
            out.cast()
        } else {
            ptr::null_mut()
        }
    }
}

/// The C library's `free`.
#[cfg(not(feature = "alloc-hooks"))]
fn real_release(p: *mut u8) {
    // SAFETY: a block of `real_alloc`'s.
    unsafe { libc::free(p.cast()) }
}
use std::ptr;

/// A huge page.
const HUGE: usize = 2 << 20;

/// The smallest block mapped in huge pages.
const LARGE: usize = 1 << 20;

/// Blocks of [`LARGE`] bytes and more in their own 2 MiB-aligned mappings marked
/// `MADV_HUGEPAGE`; the others from the C library's allocator.
pub struct LargeInHugePages;

/// True if a block of `layout` is mapped here (the same answer at allocation and release).
fn is_large(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= HUGE
}

/// `size` rounded up to whole huge pages: the mapping of a large block.
fn mapped_len(size: usize) -> usize {
    size.div_ceil(HUGE) * HUGE
}

/// A new zeroed mapping of `mapped_len(size)` bytes at a 2 MiB boundary, marked for huge
/// pages ([`unwind_in_process::map_huge`]; refused without THP, when the block is in 4 KiB
/// pages, still correct); null if the system refuses the mapping.
fn map(size: usize) -> *mut u8 {
    unwind_in_process::map_huge(size).map_or(ptr::null_mut(), |(p, _)| p.as_ptr())
}

// SAFETY: every block is either from `System` (small layouts, released to it) or a mapping of
// its own of at least its size, aligned to 2 MiB (at least the layout's alignment), released by
// `munmap` of the same length; `is_large` classifies a layout the same way each time.
unsafe impl GlobalAlloc for LargeInHugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            map(layout.size())
        } else {
            real_alloc(layout.size(), layout.align())
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            // Anonymous mappings are zeroed.
            map(layout.size())
        } else {
            let p = real_alloc(layout.size(), layout.align());
            if !p.is_null() {
                // SAFETY: a fresh block of at least `layout.size()` bytes.
                unsafe { ptr::write_bytes(p, 0, layout.size()) };
            }
            p
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        if is_large(layout) {
            // SAFETY: `block` is a mapping `map` made for this layout's size, no longer used.
            unsafe { libc::munmap(block.cast(), mapped_len(layout.size())) };
        } else {
            real_release(block)
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `new_size` rounded to the alignment does not overflow.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (is_large(layout), is_large(new)) {
            (true, true) if mapped_len(layout.size()) == mapped_len(new_size) => block,
            _ => {
                // SAFETY: `new` has a non-zero size (the caller's contract).
                let moved = unsafe { self.alloc(new) };
                if !moved.is_null() {
                    // SAFETY: both blocks hold at least the smaller size, and are distinct.
                    unsafe {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Large blocks are 2 MiB-aligned, zeroed, writable to their end, and survive growth and
    /// shrinking across the threshold with their contents.
    #[test]
    fn large_blocks_are_aligned_and_keep_their_contents() {
        let a = LargeInHugePages;
        let layout = Layout::from_size_align(LARGE + 12_345, 8).unwrap();
        // SAFETY: a non-zero layout; the block is used within its size and released once.
        unsafe {
            let p = a.alloc_zeroed(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % HUGE, 0);
            assert!(std::slice::from_raw_parts(p, layout.size())
                .iter()
                .all(|&b| b == 0));
            for i in 0..layout.size() {
                *p.add(i) = i as u8;
            }
            let q = a.realloc(p, layout, 3 * HUGE + 1);
            assert_eq!(q as usize % HUGE, 0);
            assert!((0..layout.size()).all(|i| *q.add(i) == i as u8));
            let bigger = Layout::from_size_align(3 * HUGE + 1, 8).unwrap();
            let r = a.realloc(q, bigger, 1000);
            assert!((0..1000).all(|i| *r.add(i) == i as u8));
            a.dealloc(r, Layout::from_size_align(1000, 8).unwrap());
        }
    }

    #[test]
    fn only_blocks_of_a_mebibyte_and_more_are_mapped() {
        assert!(!is_large(Layout::from_size_align(LARGE - 1, 8).unwrap()));
        assert!(is_large(Layout::from_size_align(LARGE, 8).unwrap()));
        assert_eq!(mapped_len(LARGE), HUGE);
        assert_eq!(mapped_len(HUGE + 1), 2 * HUGE);
    }
}
