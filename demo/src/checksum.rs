//! The C function linked into the binary (`c/checksum.c`, built by `build.rs` with the `cc`
//! crate) that calls back into Rust.

use std::ffi::c_void;

/// Bytes hashed per pass of [`c_checksum`] (one pass takes a few tens of microseconds).
pub const DATA_LEN: usize = 128 * 1024;

/// What a pass callback returns to stop [`c_checksum`].
pub const STOP: u64 = u64::MAX;

/// The callback [`c_checksum`] calls after each pass with the pass's seed and hash; it returns
/// the next pass's seed, or [`STOP`].
pub type PassCallback = extern "C" fn(ctx: *mut c_void, seed: u64, hash: u64) -> u64;

extern "C" {
    /// The checksum phase's hot leaf (C): hashes `len` bytes at `data` once per pass, the first
    /// pass with `seed`, calling `on_pass(ctx, seed, hash)` after each until it returns
    /// [`STOP`]. Returns the number of passes.
    pub fn c_checksum(
        data: *const u8,
        len: usize,
        seed: u64,
        on_pass: PassCallback,
        ctx: *mut c_void,
    ) -> u64;
}

/// The data every thread hashes (the same bytes everywhere, so hashes agree across threads).
pub fn make_data() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..DATA_LEN)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 56) as u8
        })
        .collect()
}

/// One pass of [`c_checksum`] over `data` with `seed`: its hash.
pub fn checksum_once(data: &[u8], seed: u64) -> u64 {
    extern "C" fn keep_first(ctx: *mut c_void, _seed: u64, hash: u64) -> u64 {
        // SAFETY: `ctx` is the `&mut u64` that checksum_once passed, alive for the whole call.
        unsafe { *ctx.cast::<u64>() = hash };
        STOP
    }
    let mut hash = 0u64;
    // SAFETY: `data` is valid for `data.len()` bytes for the call; the callback has the
    // declared signature and `ctx` points to `hash`, which outlives the call.
    unsafe {
        c_checksum(
            data.as_ptr(),
            data.len(),
            seed,
            keep_first,
            (&mut hash as *mut u64).cast(),
        )
    };
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_depend_on_the_seed_only() {
        let data = make_data();
        assert_eq!(checksum_once(&data, 1), checksum_once(&make_data(), 1));
        assert_ne!(checksum_once(&data, 1), checksum_once(&data, 2));
    }
}
