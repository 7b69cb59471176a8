//! Registers from a signal's `ucontext` or from the current frame, and copies of the live stack.

use std::sync::atomic::Ordering;

use crate::arch::{self, Regs};
use crate::minidump::Context;

use crate::threads;
use crate::SampleError;

pub use crate::arch::{regs_from_ucontext, RED_ZONE};

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
}

/// Copies the calling thread's registers (frame 0 inside this function) and as much of its
/// stack as fits in `buf`, like [`capture_signal`] does for an interrupted thread. For tests,
/// benchmarks and offline unwinding of the current thread.
#[inline(never)]
pub fn capture_here(buf: &mut [u8]) -> Result<CapturedStack, SampleError> {
    let regs = arch::current_regs();
    copy_stack(regs, Context::from_regs(&regs), buf)
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
    let context = unsafe { arch::context_from_ucontext(ucontext) };
    copy_stack(arch::regs_of(&context), context, buf)
}

/// Copies `[regs.sp - red zone, stack top)` of the calling thread, as much as fits in `buf`.
#[inline(always)]
fn copy_stack(regs: Regs, context: Context, buf: &mut [u8]) -> Result<CapturedStack, SampleError> {
    let guard = threads::enter()?;
    let lo = guard.slot.stack_lo.load(Ordering::Relaxed);
    let hi = guard.slot.stack_hi.load(Ordering::Relaxed);
    let sp = arch::sp(&regs);
    if !(lo <= sp && sp < hi) {
        return Ok(CapturedStack {
            regs,
            context,
            base: sp,
            len: 0,
        });
    }
    let base = sp.saturating_sub(RED_ZONE).max(lo);
    let len = usize::try_from(hi - base)
        .unwrap_or(usize::MAX)
        .min(buf.len());
    // SAFETY: `[base, base + len)` is inside the calling thread's registered stack, above the
    // interrupted frame's red zone, hence mapped; `buf` holds at least `len` bytes and cannot
    // overlap the live frames being copied (it is the caller's own buffer).
    unsafe { std::ptr::copy_nonoverlapping(base as *const u8, buf.as_mut_ptr(), len) };
    Ok(CapturedStack {
        regs,
        context,
        base,
        len,
    })
}
