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

fn word_at(bytes: &[u8], offset: u64) -> Option<u32> {
    let o = usize::try_from(offset).ok()?;
    let b = bytes.get(o..o.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The bytes of a word, most significant first.
fn msb_first(word: u32) -> [u8; 4] {
    word.to_be_bytes()
}

/// Appends `count` words at `offset` of `extab`, most significant byte first.
fn push_words(out: &mut Vec<u8>, extab: &[u8], offset: u64, count: u32) -> Option<()> {
    for k in 0..u64::from(count) {
        out.extend_from_slice(&msb_first(word_at(extab, offset + 4 * k)?));
    }
    Some(())
}

/// The model and opcode bytes of the `.ARM.extab` entry at file address `addr`.
fn table_entry(
    sections: &ExidxSections<'_>,
    addr: i64,
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
    if w0 & 0x8000_0000 != 0 {
        let index = ((w0 >> 24) & 0x7f) as u8;
        let model = Model::Compact { index };
        let bytes = msb_first(w0);
        let opcodes = match index {
            0 => Ok(bytes[1..].to_vec()),
            1 | 2 => {
                let count = (w0 >> 16) & 0xff;
                let mut out = Vec::with_capacity(2 + 4 * count as usize);
                out.extend_from_slice(&bytes[2..]);
                push_words(&mut out, extab, offset + 4, count)
                    .map(|()| out)
                    .ok_or(ExidxDropReason::ExtabTruncated)
            }
            _ => Err(ExidxDropReason::BadPersonalityIndex),
        };
        (model, opcodes)
    } else {
        let personality = u64::from((addr as u32).wrapping_add(prel31(w0) as u32));
        let model = Model::Generic { personality };
        let opcodes = (|| {
            let w1 = word_at(extab, offset + 4)?;
            let count = w1 >> 24;
            let mut out = Vec::with_capacity(3 + 4 * count as usize);
            out.extend_from_slice(&msb_first(w1)[1..]);
            push_words(&mut out, extab, offset + 8, count)?;
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
    if !exidx.len().is_multiple_of(8) {
        return Err(ExidxError::BadLength { len: exidx.len() });
    }
    if !sections.exidx_svma.is_multiple_of(4) {
        return Err(ExidxError::Misaligned {
            svma: sections.exidx_svma,
        });
    }
    let mut out = Vec::with_capacity(exidx.len() / 8);
    let mut prev: Option<u64> = None;
    for (index, chunk) in exidx.chunks_exact(8).enumerate() {
        let w0 = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        let w1 = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        let out_of_range = ExidxError::AddressOutOfRange { index };
        // The address of the entry's first word (checked: the section may sit anywhere).
        let here = sections
            .exidx_svma
            .checked_add(8 * index as u64)
            .and_then(|a| i64::try_from(a).ok())
            .ok_or(out_of_range)?;
        let start = here + prel31(w0);
        let start = u32::try_from(start).map_err(|_| out_of_range)?;
        let start = u64::from(start);
        if prev.is_some_and(|p| start & !1 < p) {
            return Err(ExidxError::NotSorted { index });
        }
        prev = Some(start & !1);
        let (model, opcodes) = if w1 == EXIDX_CANTUNWIND {
            (Model::CantUnwind, Ok(Vec::new()))
        } else if w1 & 0x8000_0000 != 0 {
            let opcodes = if (w1 >> 24) & 0x7f == 0 {
                Ok(msb_first(w1)[1..].to_vec())
            } else {
                Err(ExidxDropReason::BadPersonalityIndex)
            };
            (Model::Inline, opcodes)
        } else {
            table_entry(sections, here + 4 + prel31(w1))
        };
        out.push(Entry {
            start,
            model,
            opcodes,
        });
    }
    Ok(out)
}
