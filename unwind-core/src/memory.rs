//! Bounds-checked memory reads for the unwind loop.
//!
//! The unwinder dereferences nothing directly: every read of a saved register or an expression's
//! `deref` goes through [`Memory`], and an address outside the permitted range gives `None`, which
//! ends the walk with [`crate::StopReason::ReadFailed`].

/// A source of little-endian words for the unwinder. Implementations must never read outside the
/// range they were given, and must not allocate, lock or panic.
pub trait Memory {
    /// Reads the 8-byte little-endian word at `addr`, or `None` if any byte is out of range.
    fn read_u64(&self, addr: u64) -> Option<u64>;
    /// Reads the 4-byte little-endian word at `addr`, or `None` if any byte is out of range.
    fn read_u32(&self, addr: u64) -> Option<u32>;
}

/// A copy of (part of) a stack: `bytes[0]` was at address `base`.
#[derive(Clone, Copy, Debug)]
pub struct StackImage<'a> {
    base: u64,
    bytes: &'a [u8],
}

impl<'a> StackImage<'a> {
    /// Wraps `bytes`, which were copied from addresses `base..base + bytes.len()`.
    pub fn new(base: u64, bytes: &'a [u8]) -> Self {
        StackImage { base, bytes }
    }

    /// The address of the first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The copied bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    #[inline]
    fn get<const N: usize>(&self, addr: u64) -> Option<[u8; N]> {
        let start = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        let end = start.checked_add(N)?;
        let bytes = self.bytes.get(start..end)?;
        bytes.try_into().ok()
    }
}

impl Memory for StackImage<'_> {
    #[inline]
    fn read_u64(&self, addr: u64) -> Option<u64> {
        self.get::<8>(addr).map(u64::from_le_bytes)
    }
    #[inline]
    fn read_u32(&self, addr: u64) -> Option<u32> {
        self.get::<4>(addr).map(u32::from_le_bytes)
    }
}

/// The live stack of the current thread, readable only inside `[lo, hi)`.
///
/// In a signal handler `lo` is the interrupted stack pointer minus the red zone and `hi` the top
/// of the thread's registered stack, so nothing below the interrupted frame or outside the stack
/// mapping is ever touched.
#[derive(Clone, Copy, Debug)]
pub struct LiveStack {
    lo: u64,
    hi: u64,
}

impl LiveStack {
    /// Permits reads inside `[lo, hi)`.
    ///
    /// # Safety
    /// Every byte of `[lo, hi)` must be mapped readable memory of this process for as long as the
    /// value is used (for example: a slice of the current thread's own stack, above its current
    /// stack pointer's red zone).
    pub unsafe fn new(lo: u64, hi: u64) -> Self {
        LiveStack { lo, hi }
    }

    /// The lowest readable address.
    pub fn lo(&self) -> u64 {
        self.lo
    }

    /// One past the highest readable address.
    pub fn hi(&self) -> u64 {
        self.hi
    }

    #[inline]
    fn check(&self, addr: u64, len: u64) -> Option<usize> {
        let end = addr.checked_add(len)?;
        if addr >= self.lo && end <= self.hi {
            usize::try_from(addr).ok()
        } else {
            None
        }
    }
}

impl Memory for LiveStack {
    #[inline]
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let p = self.check(addr, 8)?;
        // SAFETY: `check` proved `[addr, addr + 8)` lies inside `[lo, hi)`, which the caller of
        // `LiveStack::new` guaranteed is mapped and readable. The read is unaligned-tolerant.
        Some(u64::from_le(unsafe {
            core::ptr::read_unaligned(p as *const u64)
        }))
    }
    #[inline]
    fn read_u32(&self, addr: u64) -> Option<u32> {
        let p = self.check(addr, 4)?;
        // SAFETY: as in `read_u64`, for 4 bytes.
        Some(u32::from_le(unsafe {
            core::ptr::read_unaligned(p as *const u32)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_reads_inside_and_refuses_outside() {
        let bytes: [u8; 16] = [1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0];
        let m = StackImage::new(0x1000, &bytes);
        assert_eq!(m.read_u64(0x1000), Some(1));
        assert_eq!(m.read_u64(0x1008), Some(2));
        assert_eq!(m.read_u32(0x100c), Some(0));
        assert_eq!(m.read_u64(0x1009), None);
        assert_eq!(m.read_u64(0xfff), None);
        assert_eq!(m.read_u64(u64::MAX - 3), None);
        assert_eq!(m.read_u32(0x100d), None);
    }

    #[test]
    fn live_stack_is_bounded() {
        let words = [7u64, 8, 9];
        let lo = words.as_ptr() as u64;
        // SAFETY: `words` is a live local array covering exactly `[lo, lo + 24)`.
        let m = unsafe { LiveStack::new(lo, lo + 24) };
        assert_eq!(m.read_u64(lo + 16), Some(9));
        assert_eq!(m.read_u64(lo + 17), None);
        assert_eq!(m.read_u64(lo - 8), None);
        assert_eq!(m.read_u64(u64::MAX - 2), None);
    }
}
