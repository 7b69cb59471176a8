//! The index table (`.ARM.exidx`) and its exception-handling table entries (`.ARM.extab`):
//! function starts and the unwinding instruction bytes of each entry.
//!
//! Words are little-endian (armel / armhf; big-endian ARM is not supported).

use crate::{ExidxDropReason, ExidxError, ExidxSections};

/// The index entry value of a function that cannot be unwound.
pub const EXIDX_CANTUNWIND: u32 = 1;

/// How an index entry describes its function's unwinding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Model {
    /// `EXIDX_CANTUNWIND`: the function (or the gap up to the next entry) cannot be unwound.
    CantUnwind,
    /// Compact model stored in the index entry itself (personality routine 0, 3 opcode bytes).
    Inline,
    /// Compact model in `.ARM.extab` with personality routine `index` (0, 1 or 2 are defined).
    Compact {
        /// The personality routine index.
        index: u8,
    },
    /// Generic model in `.ARM.extab`: a personality routine's address, then (in GCC's layout,
    /// read by `__gnu_unwind_frame`) a word with the count of additional words in its top byte
    /// and 3 opcode bytes.
    Generic {
        /// The personality routine's file address (e.g. `__gxx_personality_v0`).
        personality: u64,
    },
    /// The entry points outside `.ARM.extab`.
    Invalid,
}

/// One index entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The function's first address, as the entry states it (see [`crate::rows`] for bit 0).
    pub start: u64,
    /// How the entry is encoded.
    pub model: Model,
    /// The unwinding instruction bytes in execution order (padding `0xb0` included), or why
    /// there are none usable. Empty for [`Model::CantUnwind`].
    pub opcodes: Result<Vec<u8>, ExidxDropReason>,
}

/// Sign-extends a 31-bit place-relative offset.
#[inline]
pub fn prel31(word: u32) -> i64 {
    i64::from(((word << 1) as i32) >> 1)
}

/// `place + prel31(word)`, exactly: `place` is a file address plus a few bytes (below 2^65),
/// far inside `i128`, so the sum never wraps.
fn prel31_target(place: i128, word: u32) -> i128 {
    place.wrapping_add(i128::from(prel31(word)))
}

/// The little-endian word at byte `offset` of `bytes`.
fn word_at(bytes: &[u8], offset: u64) -> Option<u32> {
    let o = usize::try_from(offset).ok()?;
    let b: [u8; 4] = bytes.get(o..o.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// The bytes of a word, most significant first.
fn msb_first(word: u32) -> [u8; 4] {
    word.to_be_bytes()
}

/// Appends `count` words at `offset` of `extab`, most significant byte first.
fn push_words(out: &mut Vec<u8>, extab: &[u8], offset: u64, count: u32) -> Option<()> {
    for k in 0..u64::from(count) {
        let at = offset.checked_add(k.checked_mul(4)?)?;
        out.extend_from_slice(&msb_first(word_at(extab, at)?));
    }
    Some(())
}

/// Capacity for `fixed` opcode bytes and `count` more words.
fn capacity(fixed: usize, count: u32) -> usize {
    usize::try_from(count)
        .unwrap_or(0)
        .saturating_mul(4)
        .saturating_add(fixed)
}

/// The model and opcode bytes of the `.ARM.extab` entry at file address `addr` (computed
/// from a prel31 offset: possibly negative or beyond 64 bits).
fn table_entry(
    sections: &ExidxSections<'_>,
    addr: i128,
) -> (Model, Result<Vec<u8>, ExidxDropReason>) {
    let invalid = (Model::Invalid, Err(ExidxDropReason::ExtabOutOfRange));
    let Some(extab) = sections.extab else {
        return invalid;
    };
    let Some(offset) = u64::try_from(addr)
        .ok()
        .and_then(|a| a.checked_sub(sections.extab_svma))
    else {
        return invalid;
    };
    let Some(w0) = word_at(extab, offset) else {
        return invalid;
    };
    // `offset` is inside `extab`, so `offset + 8` cannot overflow; checked anyway.
    let next = |n: u64| offset.checked_add(n);
    let [b0, b1, b2, b3] = msb_first(w0);
    if w0 & 0x8000_0000 != 0 {
        let index = b0 & 0x7f;
        let model = Model::Compact { index };
        let opcodes = match index {
            0 => Ok(vec![b1, b2, b3]),
            1 | 2 => {
                let count = u32::from(b1);
                let mut out = Vec::with_capacity(capacity(2, count));
                out.extend_from_slice(&[b2, b3]);
                next(4)
                    .and_then(|at| push_words(&mut out, extab, at, count))
                    .map(|()| out)
                    .ok_or(ExidxDropReason::ExtabTruncated)
            }
            _ => Err(ExidxDropReason::BadPersonalityIndex),
        };
        (model, opcodes)
    } else {
        // The personality routine's address, in the 32-bit address space of the module.
        let personality = u64::from((addr as u32).wrapping_add(prel31(w0) as u32));
        let model = Model::Generic { personality };
        let opcodes = (|| {
            let w1 = word_at(extab, next(4)?)?;
            let [count, o1, o2, o3] = msb_first(w1);
            let count = u32::from(count);
            let mut out = Vec::with_capacity(capacity(3, count));
            out.extend_from_slice(&[o1, o2, o3]);
            push_words(&mut out, extab, next(8)?, count)?;
            Some(out)
        })()
        .ok_or(ExidxDropReason::GenericNoOpcodes);
        (model, opcodes)
    }
}

/// Reads every index entry, in section order.
///
/// Errors concern the index as a whole: a length that is not a multiple of 8, a section address
/// that is not 4-aligned, a function start outside the 32-bit address space, or starts that
/// decrease (bit 0 ignored). Problems of single entries are in [`Entry::opcodes`].
pub fn entries(sections: &ExidxSections<'_>) -> Result<Vec<Entry>, ExidxError> {
    let exidx = sections.exidx;
    let (chunks, rest) = exidx.as_chunks::<8>();
    if !rest.is_empty() {
        return Err(ExidxError::BadLength { len: exidx.len() });
    }
    if !sections.exidx_svma.is_multiple_of(4) {
        return Err(ExidxError::Misaligned {
            svma: sections.exidx_svma,
        });
    }
    let mut out = Vec::with_capacity(chunks.len());
    let mut prev: Option<u64> = None;
    for (index, chunk) in chunks.iter().enumerate() {
        let [a0, a1, a2, a3, c0, c1, c2, c3] = *chunk;
        let w0 = u32::from_le_bytes([a0, a1, a2, a3]);
        let w1 = u32::from_le_bytes([c0, c1, c2, c3]);
        // The address of the entry's first word: the section may sit anywhere (an ELF64 file
        // with `EM_ARM` has 64-bit section addresses), so the arithmetic is exact.
        let here = i128::from(sections.exidx_svma).wrapping_add(i128::from(entry_offset(index)));
        let start = prel31_target(here, w0);
        let start = u32::try_from(start).map_err(|_| ExidxError::AddressOutOfRange {
            index,
            place: sections.exidx_svma.wrapping_add(entry_offset(index)),
            prel31: prel31(w0),
        })?;
        let start = u64::from(start);
        if let Some(p) = prev.filter(|&p| start & !1 < p) {
            return Err(ExidxError::NotSorted {
                index,
                start,
                previous: p,
            });
        }
        prev = Some(start & !1);
        let (model, opcodes) = if w1 == EXIDX_CANTUNWIND {
            (Model::CantUnwind, Ok(Vec::new()))
        } else if w1 & 0x8000_0000 != 0 {
            let [b0, b1, b2, b3] = msb_first(w1);
            let opcodes = if b0 & 0x7f == 0 {
                Ok(vec![b1, b2, b3])
            } else {
                Err(ExidxDropReason::BadPersonalityIndex)
            };
            (Model::Inline, opcodes)
        } else {
            // The second word's place is the entry's address + 4.
            table_entry(sections, prel31_target(here.wrapping_add(4), w1))
        };
        out.push(Entry {
            start,
            model,
            opcodes,
        });
    }
    Ok(out)
}

/// The byte offset of entry `index` in `.ARM.exidx` (saturating: indices come from slices).
pub(crate) fn entry_offset(index: usize) -> u64 {
    u64::try_from(index).unwrap_or(u64::MAX).saturating_mul(8)
}
