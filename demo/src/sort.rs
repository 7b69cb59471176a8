//! The sort phase's Rust leaf, and the inlined helper it is called through.
//!
//! [`sort_leaf`] is written with `while` loops, plain operators and `as` casts only: iterator
//! adaptors, `wrapping_*`/`rotate_*` methods and `From` conversions would be inlined from `core`
//! and symbolized as inlined frames *above* the leaf, splitting its samples among them.

/// Elements sorted per call (an insertion sort of this many takes a few tens of microseconds).
pub const SORT_LEN: usize = 512;

/// Fills `buf` from `seed` and sorts it with [`sort_leaf`]; returns a digest of the result.
///
/// `#[inline(always)]`: it is inlined into [`crate::phases::sort_phase`], so a profile shows it
/// as an inlined frame between the leaf and that function.
#[inline(always)]
pub fn fill_and_sort(buf: &mut [u32; SORT_LEN], seed: u64) -> u64 {
    let digest = sort_leaf(buf, seed);
    digest ^ buf[0] as u64 ^ ((buf[SORT_LEN - 1] as u64) << 32)
}

/// The sort phase's hot leaf: fills `buf` with xorshift numbers from `seed`, insertion-sorts
/// it, and returns a position-weighted digest of the sorted values.
#[inline(never)]
pub fn sort_leaf(buf: &mut [u32; SORT_LEN], seed: u64) -> u64 {
    let mut x = (seed << 1) ^ 0x2545_f491_4f6c_dd1d;
    let mut i = 0;
    while i < SORT_LEN {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (x >> 32) as u32;
        i += 1;
    }
    i = 1;
    while i < SORT_LEN {
        let key = buf[i];
        let mut j = i;
        while j > 0 && buf[j - 1] > key {
            buf[j] = buf[j - 1];
            j -= 1;
        }
        buf[j] = key;
        i += 1;
    }
    let mut digest: u64 = 0;
    i = 0;
    while i < SORT_LEN {
        // The low 64 bits of the product: u128 cannot overflow, so no overflow check either.
        digest = ((digest ^ (buf[i] as u64 * (i as u64 + 1))) as u128 * 0x0100_0000_01b3) as u64;
        i += 1;
    }
    digest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_and_is_deterministic() {
        let mut a = [0u32; SORT_LEN];
        let mut b = [7u32; SORT_LEN];
        assert_eq!(fill_and_sort(&mut a, 3), fill_and_sort(&mut b, 3));
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert_ne!(fill_and_sort(&mut a, 3), fill_and_sort(&mut b, 4));
    }
}
