//! Registers from a signal's `ucontext` or from the current frame, and copies of the live stack.

use std::sync::atomic::Ordering;

use unwind_core::Arch as _;
use unwind_samples::Context;

use crate::arch::{self, Native, Regs, RuntimeArch};

use crate::threads;
use crate::SampleError;

/// Bytes below the stack pointer that a leaf function may use without moving it: 128 on
/// x86_64 (the psABI's red zone), 0 on 32-bit ARM (AAPCS has none). A copy of the stack starts
/// this far below SP.
pub const RED_ZONE: u64 = <Native as RuntimeArch>::RED_ZONE;

/// The interrupted thread's registers, from the `ucontext_t` a signal handler gets (on 32-bit
/// ARM the PC has bit 0 set when the interrupted code is Thumb). Async-signal-safe: reads memory
/// only.
///
/// # Safety
/// `ucontext` must point to a valid `ucontext_t` (the handler's third argument).
#[inline(always)]
pub unsafe fn regs_from_ucontext(ucontext: *const libc::c_void) -> Regs {
    // SAFETY: forwarded from the caller's contract.
    unsafe { Native::regs_from_ucontext(ucontext) }
}

/// A stack copied in a signal handler: the registers, and `len` bytes of stack starting at
/// address `base` written at the start of the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapturedStack {
    /// The interrupted registers the unwinder uses.
    pub regs: Regs,
    /// The whole register file (for a minidump): from the `ucontext` for [`capture_signal`],
    /// from `regs` (other registers 0) for [`capture_here`].
    pub context: Context,
    /// Address of the first copied byte (the stack pointer minus the red zone).
    pub base: u64,
    /// Bytes copied.
    pub len: usize,
    /// The captured thread's id (`gettid`, recorded when it registered: no system call here).
    pub thread_id: u32,
}

/// Copies the calling thread's registers (frame 0 inside this function) and as much of its
/// stack as fits in `buf`, like [`capture_signal`] does for an interrupted thread. For tests,
/// benchmarks and offline unwinding of the current thread.
#[inline(never)]
pub fn capture_here(buf: &mut [u8]) -> Result<CapturedStack, SampleError> {
    let regs = arch::current_regs();
    copy_stack(regs, Context::from(regs), buf)
}

/// Copies the interrupted thread's registers (those the unwinder uses and the whole register
/// file, for a minidump) and as much of its stack as fits in `buf` (from the red zone below SP
/// up to the registered stack top), for unwinding later or elsewhere. Async-signal-safe.
///
/// # Safety
/// As for [`crate::unwind_signal`]: `ucontext` is the running handler's context, on the thread
/// to be captured.
pub unsafe fn capture_signal(
    ucontext: *const libc::c_void,
    buf: &mut [u8],
) -> Result<CapturedStack, SampleError> {
    // SAFETY: forwarded from the caller's contract.
    let context = unsafe { Native::context_from_ucontext(ucontext) };
    copy_stack(context.regs::<Native>().unwrap_or_default(), context, buf)
}

/// Copies `[regs.sp - red zone, stack top)` of the calling thread, as much as fits in `buf`.
#[inline(always)]
fn copy_stack(regs: Regs, context: Context, buf: &mut [u8]) -> Result<CapturedStack, SampleError> {
    let guard = threads::enter()?;
    let lo = guard.slot.stack_lo.load(Ordering::Relaxed);
    let hi = guard.slot.stack_hi.load(Ordering::Relaxed);
    let thread_id = guard.slot.tid.load(Ordering::Relaxed) as u32;
    let sp = Native::sp(&regs);
    if !(lo <= sp && sp < hi) {
        return Ok(CapturedStack {
            regs,
            context,
            base: sp,
            len: 0,
            thread_id,
        });
    }
    let base = sp.saturating_sub(RED_ZONE).max(lo);
    let len = usize::try_from(hi - base)
        .unwrap_or(usize::MAX)
        .min(buf.len());
    // SAFETY: `[base, base + len)` is inside the calling thread's registered stack, above the
    // interrupted frame's red zone, hence mapped; `buf` holds at least `len` bytes.
    unsafe { copy_excluding_self(base, buf, len) };
    Ok(CapturedStack {
        regs,
        context,
        base,
        len,
        thread_id,
    })
}

/// Copies the `len` bytes at address `src` into `buf`. `buf` itself may lie inside the source
/// range (a buffer on the stack being copied, as with [`capture_here`]): its own bytes are not
/// read (they would be the copy in progress) and their places in the copy are zero.
///
/// # Safety
/// `[src, src + len)` must be mapped readable memory and `len <= buf.len()`.
unsafe fn copy_excluding_self(src: u64, buf: &mut [u8], len: usize) {
    let dst = buf.as_mut_ptr();
    let (own_lo, own_hi) = (dst as u64, dst as u64 + buf.len() as u64);
    let end = src.saturating_add(len as u64);
    // The source range minus `buf`: at most one piece below it and one above.
    let below = (src, end.min(own_lo).max(src));
    let above = (src.max(own_hi).min(end), end);
    if below.1 < end || above.0 > src {
        // Overlap (or `buf` right at an end): zero first, then copy the disjoint pieces.
        if let Some(b) = buf.get_mut(..len) {
            b.fill(0);
        }
    }
    for (lo, hi) in [below, above] {
        if lo < hi {
            let at = (lo - src) as usize;
            // SAFETY: `[lo, hi)` lies in the caller's readable source range and outside `buf`,
            // and `at + (hi - lo) <= len <= buf.len()`, so the ranges are disjoint and in bounds.
            unsafe {
                std::ptr::copy_nonoverlapping(lo as *const u8, dst.add(at), (hi - lo) as usize)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::copy_excluding_self;

    #[test]
    fn a_buffer_inside_the_copied_range_is_left_out() {
        // The "stack": 64 bytes 0..64; the buffer is bytes 16..48 of it.
        let mut stack: Vec<u8> = (0..64).collect();
        let src = stack.as_ptr() as u64;
        let (head, rest) = stack.split_at_mut(16);
        let (buf, _tail) = rest.split_at_mut(32);
        let _ = head;
        // SAFETY: the 32 bytes at `src` are the vector's own; only `buf`'s bytes overlap.
        unsafe { copy_excluding_self(src, buf, 32) };
        let want: Vec<u8> = (0..16).chain(std::iter::repeat_n(0, 16)).collect();
        assert_eq!(buf, &want[..]);
    }

    #[test]
    fn disjoint_ranges_are_copied_whole() {
        let src: Vec<u8> = (0..40).collect();
        let mut buf = [0xffu8; 48];
        // SAFETY: `src` is 40 readable bytes; `buf` is a separate array.
        unsafe { copy_excluding_self(src.as_ptr() as u64, &mut buf, 40) };
        assert_eq!(&buf[..40], &src[..]);
        assert_eq!(buf[40], 0xff);
    }

    #[test]
    fn capture_here_with_a_buffer_on_the_stack() {
        crate::register_thread().unwrap();
        let mut buf = [0u8; 4096];
        let c = super::capture_here(&mut buf).unwrap();
        assert!(c.len > 0);
        let base = c.base;
        let own = buf.as_ptr() as u64;
        // The buffer sits above this frame's SP, so it is inside the copied range: its part of
        // the copy is zero, and the rest holds real stack words.
        assert!(base <= own && own < base + c.len as u64);
        assert!(buf[..(own - base) as usize].iter().any(|&b| b != 0));
    }
}
