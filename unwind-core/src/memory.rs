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
    /// [`read_u32`](Self::read_u32) at a 32-bit address, which 32-bit architectures' walks use:
    /// never a different word, and `None` at least wherever `read_u32` gives `None`.
    /// Implementations check the bounds in 32-bit arithmetic on 32-bit machines: on armv7 the
    /// 64-bit check took two more instructions and two more spilled registers a read (the
    /// armv7 samples under qemu-arm: 72.7 instructions a frame with it, 62.4 without).
    #[inline(always)]
    fn read_u32_at(&self, addr: u32) -> Option<u32> {
        self.read_u32(u64::from(addr))
    }
    /// Whether every byte of `[from, to)` may be read (an empty range, `to <= from`, may answer
    /// either way): one test for all the words of a frame, which [`load_u64`](Self::load_u64)
    /// then reads unchecked. The default answers `false`, and the walk then reads word by word
    /// with [`read_u64`](Self::read_u64).
    #[inline(always)]
    fn contains(&self, from: u64, to: u64) -> bool {
        let _ = (from, to);
        false
    }
    /// The 8-byte little-endian word at `addr`, unchecked where the implementation's
    /// [`contains`](Self::contains) can answer `true`. The default reads with
    /// [`read_u64`](Self::read_u64) (0 outside the range).
    ///
    /// # Safety
    /// `[addr, addr + 8)` is inside a range `[from, to)` for which `contains` answered `true`.
    #[inline(always)]
    unsafe fn load_u64(&self, addr: u64) -> u64 {
        self.read_u64(addr).unwrap_or(0)
    }
    /// The bits of an instruction address that are not address in the process whose stack
    /// this is: on aarch64, the pointer authentication code's field (and the top byte where
    /// the kernel puts it there), which the unwinder clears from every return address (never
    /// authenticating one; an unsigned return address has no bit there). A property
    /// of the process, not of a frame: the runtime finds it with `xpaclri`, an offline walk
    /// takes it from the sample. The default (and the value without pointer authentication,
    /// and on every other architecture) is 0.
    #[inline(always)]
    fn pointer_mask(&self) -> u64 {
        0
    }
    /// Whether a caller whose stack pointer `caller_sp` does not lie above its callee's
    /// `callee_sp` is on another stack this memory knows the walk may switch to (a runtime's
    /// stack switch: from the system stack to the goroutine that called into C, in a Go
    /// program). The default (one stack): no.
    #[inline(always)]
    fn switches_stack(&self, callee_sp: u64, caller_sp: u64) -> bool {
        let _ = (callee_sp, caller_sp);
        false
    }
}

/// The bounds of 4-byte reads at 32-bit addresses, for a range whose 4-byte reads are at
/// offsets below `limit4` from `lo`, checked in 32-bit arithmetic.
#[derive(Clone, Copy, Debug)]
struct Bounds32 {
    lo: u32,
    /// `limit4` clamped to what lies below 2^32, so that an address below `lo` wraps to at
    /// least this; 0 for a range starting at or above 2^32.
    limit: u32,
}

impl Bounds32 {
    fn new(lo: u64, limit4: u64) -> Self {
        match u32::try_from(lo) {
            Ok(lo32) => {
                let below_4g = (1u64 << 32) - lo;
                // A limit of 2^32 (lo = 0) is clamped to u32::MAX: one address fewer, never more.
                let limit = u32::try_from(limit4.min(below_4g)).unwrap_or(u32::MAX);
                Bounds32 { lo: lo32, limit }
            }
            Err(_) => Bounds32 { lo: 0, limit: 0 },
        }
    }

    /// Whether the 4 bytes at `addr` may be read: only where `u64::from(addr) - lo < limit4`,
    /// without wrapping.
    #[inline(always)]
    fn admits(self, addr: u32) -> bool {
        addr.wrapping_sub(self.lo) < self.limit
    }

    /// Whether the 4 bytes at 32-bit `addr` may be read from a range at `lo` whose 4-byte reads
    /// are at offsets below `limit4` (the values these bounds were made from): checked in
    /// 32-bit arithmetic on 32-bit machines, in 64-bit elsewhere, where it is as cheap (and the
    /// 32-bit check cost 2 instructions a frame more on the armv7 sequence replayed on x86_64).
    #[inline(always)]
    fn admits_at(self, addr: u32, lo: u64, limit4: u64) -> bool {
        if cfg!(target_pointer_width = "32") {
            self.admits(addr)
        } else {
            u64::from(addr).wrapping_sub(lo) < limit4
        }
    }
}

/// A copy of (part of) a stack: `bytes[0]` was at address `base`.
#[derive(Clone, Copy, Debug)]
pub struct StackImage<'a> {
    base: u64,
    bytes: &'a [u8],
    /// `bytes.as_ptr() - base` (wrapping): the byte of address `a` is at `origin + a`, one
    /// addition on the unwind loop's critical path instead of two.
    origin: *const u8,
    /// Offsets below this can be read as 8 bytes (`bytes.len() - 7`, or 0).
    limit8: u64,
    /// Offsets below this can be read as 4 bytes (`bytes.len() - 3`, or 0).
    limit4: u64,
    /// `base` and `limit4` for 32-bit addresses.
    bounds32: Bounds32,
    /// One past the last byte's address (`base + bytes.len()`, at most `u64::MAX`).
    end: u64,
    /// [`Memory::pointer_mask`].
    pointer_mask: u64,
}

impl<'a> StackImage<'a> {
    /// Wraps `bytes`, which were copied from addresses `base..base + bytes.len()`.
    pub fn new(base: u64, bytes: &'a [u8]) -> Self {
        let len = bytes.len() as u64;
        let limit4 = len.saturating_sub(3);
        StackImage {
            base,
            bytes,
            origin: bytes.as_ptr().wrapping_sub(base as usize),
            limit8: len.saturating_sub(7),
            limit4,
            bounds32: Bounds32::new(base, limit4),
            end: base.saturating_add(len),
            pointer_mask: 0,
        }
    }

    /// The image with the sampled process's pointer mask ([`Memory::pointer_mask`]).
    pub fn with_pointer_mask(self, pointer_mask: u64) -> Self {
        StackImage {
            pointer_mask,
            ..self
        }
    }

    /// The address of the first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The copied bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

// SAFETY: `origin` is derived from the shared slice `bytes` and only read through; the image is
// as shareable as `&[u8]`.
unsafe impl Send for StackImage<'_> {}
// SAFETY: as above.
unsafe impl Sync for StackImage<'_> {}

impl Memory for StackImage<'_> {
    #[inline(always)]
    fn pointer_mask(&self) -> u64 {
        self.pointer_mask
    }
    #[inline(always)]
    fn contains(&self, from: u64, to: u64) -> bool {
        self.base <= from && to <= self.end
    }
    #[inline(always)]
    unsafe fn load_u64(&self, addr: u64) -> u64 {
        // SAFETY: the caller's: `[addr, addr + 8)` is inside `[base, end)`, which is `bytes`
        // (`origin + addr` is `bytes.as_ptr() + (addr - base)`). The read tolerates misalignment.
        u64::from_le(unsafe {
            core::ptr::read_unaligned(self.origin.wrapping_add(addr as usize) as *const u64)
        })
    }
    #[inline(always)]
    fn read_u64(&self, addr: u64) -> Option<u64> {
        // Below `base` the offset wraps to a huge value, so one comparison checks both ends.
        if addr.wrapping_sub(self.base) < self.limit8 {
            // SAFETY: `addr - base < len - 7`, so the 8 bytes at `origin + addr`, which is
            // `bytes.as_ptr() + (addr - base)`, are inside `bytes`.
            Some(u64::from_le(unsafe {
                core::ptr::read_unaligned(self.origin.wrapping_add(addr as usize) as *const u64)
            }))
        } else {
            None
        }
    }
    #[inline(always)]
    fn read_u32(&self, addr: u64) -> Option<u32> {
        // SAFETY: `addr - base < len - 3`: the 4 bytes are inside `bytes`.
        (addr.wrapping_sub(self.base) < self.limit4)
            .then(|| unsafe { self.load_u32(addr as usize) })
    }
    #[inline(always)]
    fn read_u32_at(&self, addr: u32) -> Option<u32> {
        // SAFETY: `Bounds32::admits_at`: `addr - base < len - 3`, the 4 bytes are inside `bytes`.
        self.bounds32
            .admits_at(addr, self.base, self.limit4)
            .then(|| unsafe { self.load_u32(addr as usize) })
    }
}

impl StackImage<'_> {
    /// The 4 bytes at `addr`, at `origin + addr`: `bytes.as_ptr() + (addr - base)`.
    ///
    /// # Safety
    /// They must be inside `bytes`: `base <= addr` and `addr - base <= len - 4`.
    #[inline(always)]
    unsafe fn load_u32(&self, addr: usize) -> u32 {
        // SAFETY: the caller's; the read tolerates misalignment.
        u32::from_le(unsafe {
            core::ptr::read_unaligned(self.origin.wrapping_add(addr) as *const u32)
        })
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
    /// Offsets from `lo` below this can be read as 8 bytes (`hi - lo - 7`, or 0).
    limit8: u64,
    /// Offsets from `lo` below this can be read as 4 bytes (`hi - lo - 3`, or 0).
    limit4: u64,
    /// `lo` and `limit4` for 32-bit addresses.
    bounds32: Bounds32,
    /// [`Memory::pointer_mask`].
    pointer_mask: u64,
}

impl LiveStack {
    /// Permits reads inside `[lo, hi)`.
    ///
    /// # Safety
    /// Every byte of `[lo, hi)` must be mapped readable memory of this process for as long as the
    /// value is used (for example: a slice of the current thread's own stack, above its current
    /// stack pointer's red zone).
    pub unsafe fn new(lo: u64, hi: u64) -> Self {
        let span = hi.saturating_sub(lo);
        let limit4 = span.saturating_sub(3);
        LiveStack {
            lo,
            hi,
            limit8: span.saturating_sub(7),
            limit4,
            bounds32: Bounds32::new(lo, limit4),
            pointer_mask: 0,
        }
    }

    /// The stack with this process's pointer mask ([`Memory::pointer_mask`]).
    pub fn with_pointer_mask(self, pointer_mask: u64) -> Self {
        LiveStack {
            pointer_mask,
            ..self
        }
    }

    /// The lowest readable address.
    pub fn lo(&self) -> u64 {
        self.lo
    }

    /// One past the highest readable address.
    pub fn hi(&self) -> u64 {
        self.hi
    }
}

impl Memory for LiveStack {
    #[inline(always)]
    fn pointer_mask(&self) -> u64 {
        self.pointer_mask
    }
    #[inline(always)]
    fn contains(&self, from: u64, to: u64) -> bool {
        self.lo <= from && to <= self.hi
    }
    #[inline(always)]
    unsafe fn load_u64(&self, addr: u64) -> u64 {
        // SAFETY: the caller's: `[addr, addr + 8)` is inside `[lo, hi)`, which the caller of
        // `LiveStack::new` guaranteed is mapped and readable. The read tolerates misalignment.
        u64::from_le(unsafe { core::ptr::read_unaligned(addr as usize as *const u64) })
    }
    #[inline(always)]
    fn read_u64(&self, addr: u64) -> Option<u64> {
        // Below `lo` the offset wraps to a huge value, so one comparison checks both ends.
        if addr.wrapping_sub(self.lo) < self.limit8 {
            // SAFETY: `lo <= addr` and `addr + 8 <= hi`, inside the range the caller of
            // `LiveStack::new` guaranteed is mapped and readable. The read tolerates misalignment.
            Some(u64::from_le(unsafe {
                core::ptr::read_unaligned(addr as usize as *const u64)
            }))
        } else {
            None
        }
    }
    #[inline(always)]
    fn read_u32(&self, addr: u64) -> Option<u32> {
        // SAFETY: `lo <= addr` and `addr + 4 <= hi`.
        (addr.wrapping_sub(self.lo) < self.limit4).then(|| unsafe { self.load_u32(addr as usize) })
    }
    #[inline(always)]
    fn read_u32_at(&self, addr: u32) -> Option<u32> {
        // SAFETY: `Bounds32::admits_at`: `lo <= addr` and `addr + 4 <= hi`.
        self.bounds32
            .admits_at(addr, self.lo, self.limit4)
            .then(|| unsafe { self.load_u32(addr as usize) })
    }
}

impl LiveStack {
    /// The 4 bytes at `addr`.
    ///
    /// # Safety
    /// They must be inside `[lo, hi)`, which the caller of [`LiveStack::new`] guaranteed is
    /// mapped and readable.
    #[inline(always)]
    unsafe fn load_u32(&self, addr: usize) -> u32 {
        // SAFETY: the caller's; the read tolerates misalignment.
        u32::from_le(unsafe { core::ptr::read_unaligned(addr as *const u32) })
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
        assert_eq!(m.read_u32(0x100c), Some(0));
        let short = [1u8, 2, 3];
        let m = StackImage::new(0x1000, &short);
        assert_eq!(m.read_u32(0x1000), None);
        assert_eq!(m.read_u64(0x1000), None);
        let empty = StackImage::new(0, &[]);
        assert_eq!(empty.read_u64(0), None);
        assert_eq!(empty.read_u64(u64::MAX), None);
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
        assert_eq!(m.read_u32(lo + 20), Some(0));
        assert_eq!(m.read_u32(lo + 21), None);
        // SAFETY: an empty range permits no read at all.
        let none = unsafe { LiveStack::new(lo, lo) };
        assert_eq!(none.read_u64(lo), None);
        // SAFETY: an inverted range is treated as empty.
        let inverted = unsafe { LiveStack::new(lo + 8, lo) };
        assert_eq!(inverted.read_u64(lo), None);
    }

    /// Every word of a range `contains` admits reads unchecked as the checked read does, and
    /// the range is inside the memory, for images anywhere (ends near 0 and 2^64 included) and
    /// for a live stack.
    fn admitted_words_read_as_checked(m: &dyn Memory, lo: u64, hi: u64, from: u64, to: u64) {
        if !m.contains(from, to) || to <= from {
            return;
        }
        assert!(
            lo <= from && to <= hi,
            "[{from:#x}, {to:#x}) admitted outside [{lo:#x}, {hi:#x})"
        );
        let mut addr = from;
        while addr.checked_add(8).is_some_and(|e| e <= to) {
            // SAFETY: `[addr, addr + 8)` is inside `[from, to)`, which `contains` admitted.
            assert_eq!(m.read_u64(addr), Some(unsafe { m.load_u64(addr) }));
            addr += 1;
        }
    }

    proptest::proptest! {
        #[test]
        fn admitted_ranges_are_inside_and_read_as_checked(
            base in base_strategy(),
            len in 0usize..40,
            delta in -48i64..48,
            size in 0u64..64,
        ) {
            let bytes: alloc::vec::Vec<u8> = (0..len as u8).collect();
            let image = StackImage::new(base, &bytes);
            let from = base.wrapping_add(delta as u64);
            let to = from.wrapping_add(size);
            admitted_words_read_as_checked(&image, base, base.saturating_add(len as u64), from, to);
            let words: alloc::vec::Vec<u64> = (0..(len as u64).div_ceil(8)).collect();
            let lo = words.as_ptr() as u64;
            let hi = lo + 8 * words.len() as u64;
            // SAFETY: `words` is a live array covering exactly `[lo, hi)`.
            let live = unsafe { LiveStack::new(lo, hi) };
            let from = lo.wrapping_add(delta as u64);
            admitted_words_read_as_checked(&live, lo, hi, from, from.wrapping_add(size));
        }
    }

    /// A base near 0, near 2^32 (where the 32-bit bounds are clamped) or above it.
    fn base_strategy() -> impl proptest::strategy::Strategy<Value = u64> {
        use proptest::prelude::*;
        prop_oneof![0u64..64, (1u64 << 32) - 80..(1u64 << 32) + 8, any::<u64>(),]
    }

    proptest::proptest! {
        /// The 32-bit reads answer as the 64-bit ones at every 32-bit address around the image,
        /// wherever the image lies (the clamp to u32::MAX needs 4 GiB of image, not met here).
        #[test]
        fn reads_at_32_bit_addresses_answer_as_64_bit_ones(
            base in base_strategy(),
            len in 0usize..40,
            delta in -48i64..48,
        ) {
            let bytes: alloc::vec::Vec<u8> = (0..len as u8).collect();
            let m = StackImage::new(base, &bytes);
            let addr = (base as i64).wrapping_add(delta) as u64 as u32;
            proptest::prop_assert_eq!(m.read_u32_at(addr), m.read_u32(u64::from(addr)));
            // The 32-bit check itself, which only 32-bit machines use: it admits exactly the
            // addresses the 64-bit check admits (the load after it is `read_u32`'s).
            proptest::prop_assert_eq!(
                m.bounds32.admits(addr),
                u64::from(addr).wrapping_sub(base) < m.limit4
            );
        }
    }

    #[test]
    fn reads_at_32_bit_addresses_near_4_gib() {
        let bytes = [0xaau8; 16];
        // The image crosses 2^32: every 32-bit address from its base up reads inside it (the
        // word at u32::MAX is bytes 7 to 10), and 0 is not its address 2^32.
        let m = StackImage::new((1 << 32) - 8, &bytes);
        for a in u32::MAX - 7..=u32::MAX {
            assert!(m.bounds32.admits(a), "{a:#x}");
            assert_eq!(m.read_u32_at(a), Some(0xaaaa_aaaa), "{a:#x}");
        }
        assert!(!m.bounds32.admits(0));
        assert_eq!(m.read_u32_at(0), None);
        assert!(!m.bounds32.admits(u32::MAX - 8));
        assert_eq!(m.read_u32_at(u32::MAX - 8), None);
        // Above 2^32 nothing is readable at a 32-bit address.
        let high = StackImage::new(1 << 32, &bytes);
        assert!(!high.bounds32.admits(0));
        assert!(!high.bounds32.admits(4));
        assert_eq!(high.read_u32_at(0), None);
        // The live stack's bounds are the same computation.
        let words = [7u32, 8, 9];
        let lo = words.as_ptr() as u64;
        // SAFETY: `words` is a live local array covering exactly `[lo, lo + 12)`.
        let live = unsafe { LiveStack::new(lo, lo + 12) };
        if let Ok(lo32) = u32::try_from(lo) {
            assert!(live.bounds32.admits(lo32 + 8));
            assert_eq!(live.read_u32_at(lo32 + 8), Some(9));
            assert!(!live.bounds32.admits(lo32 + 9));
            assert_eq!(live.read_u32_at(lo32 + 9), None);
        } else {
            assert!(!live.bounds32.admits(lo as u32));
            assert_eq!(live.read_u32_at(lo as u32), None);
        }
    }
}
