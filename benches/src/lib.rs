//! Captured stacks for the benchmarks: a recursion of known depth through functions of
//! different frame sizes, copied from the live stack of the calling thread.

use std::hint::black_box;

/// A stack captured at the bottom of a recursion: registers and a copy of the stack bytes.
pub struct Captured {
    /// Registers at the capture point.
    pub regs: unwind::Regs,
    /// Address of `bytes[0]`.
    pub base: u64,
    /// The copied stack.
    pub bytes: Vec<u8>,
}

impl Captured {
    /// The copy as `Memory` for the unwinder.
    pub fn image(&self) -> unwind_core::StackImage<'_> {
        unwind_core::StackImage::new(self.base, &self.bytes)
    }
}

#[inline(never)]
fn recurse_a(depth: u32, buf: &mut Vec<u8>) -> unwind::CapturedStack {
    let pad = black_box([depth; 4]);
    let r = if depth == 0 {
        unwind::capture_here(buf).expect("capture")
    } else {
        recurse_b(depth - 1, buf)
    };
    black_box(pad);
    r
}

#[inline(never)]
fn recurse_b(depth: u32, buf: &mut Vec<u8>) -> unwind::CapturedStack {
    let pad = black_box([u64::from(depth); 9]);
    let r = if depth == 0 {
        unwind::capture_here(buf).expect("capture")
    } else {
        recurse_a(depth - 1, buf)
    };
    black_box(pad);
    r
}

/// Captures the calling (registered) thread's stack `depth` frames below here.
pub fn capture_recursion(depth: u32) -> Captured {
    let mut buf = vec![0u8; 256 * 1024];
    let c = recurse_a(depth, &mut buf);
    buf.truncate(c.len);
    Captured {
        regs: c.regs,
        base: c.base,
        bytes: buf,
    }
}
