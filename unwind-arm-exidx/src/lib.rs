//! ARM EHABI unwind tables (`.ARM.exidx`, `.ARM.extab`) to `unwind-core` ARM rules.
//!
//! [`rows`] reads every index entry and returns one row per function, from its start to the
//! next entry's start (the last one to [`ExidxSections::text_end`]), with a
//! [`unwind_core::arm::Rule`] whose source is [`Source::Exidx`](unwind_core::arm::Source::Exidx).
//!
//! - [`mod@entry`]: the index and its table entries (inline compact model, compact model with
//!   personality routines 0, 1 and 2 in `.ARM.extab`, and the generic model in GCC's layout).
//! - [`mod@decode`]: the frame unwinding instructions ([`Instruction`]).
//! - [`mod@translate`]: instructions to a rule by simulating the virtual stack pointer.
//!
//! An EHABI entry describes the function body after its prologue and before its epilogue; it
//! has one rule for the whole function. Samples in a prologue or epilogue may unwind wrongly,
//! which is why rules say where they came from.
//!
//! Design decisions:
//! - `EXIDX_CANTUNWIND` entries are not gaps: like any other entry, each covers its range with
//!   a row, whose rule is [`Rule::cant_unwind`] (PC undefined, source EXIDX): a walk that
//!   reaches it stops with `StopReason::CantUnwind`. They are counted in
//!   [`ExidxStats::cant_unwind`], not in [`ExidxStats::rows`].
//! - Consecutive entries leave no gap between them (each runs to the next one's start), unless
//!   [`ExidxSections::functions`] says the entry's function ends earlier: the code after it has
//!   no entry of its own (built without unwind tables) and gets no row. The other addresses
//!   without a row are those of dropped entries ([`ExidxDropReason`], counted in
//!   [`ExidxStats::dropped`]), those before the first entry and those after the last row. What
//!   covers them is the consumer's choice: `unwind-dwarf` lets DWARF CFI and PLT rows win
//!   wherever they have one and clips these rows to the addresses left; where no rule covers a PC,
//!   `unwind-core`'s ARM loop takes the return address from LR in the innermost frame and
//!   otherwise falls back to the frame pointer (`StopReason::NoRule` if that fails its checks).
//! - The last entry runs to `text_end`; without it (or if `text_end` is not above the start)
//!   the last entry is dropped ([`ExidxDropReason::NoEnd`]), except a last `CANTUNWIND` entry,
//!   which is then skipped without a row or a drop (it is usually the linker's sentinel).
//!   Linkers end the index with a `CANTUNWIND` sentinel at the end of the code, so this rarely
//!   loses a function.
//! - Function starts should have bit 0 clear (the assembler refers to section offsets, not to
//!   Thumb symbols); a set bit 0 is cleared (counted in [`ExidxStats::odd_starts`]), because
//!   lookups clear the Thumb bit of PCs.
//! - Entries with the same start: the last one covers the range; the others are empty
//!   ([`ExidxStats::empty`]).
//! - A pop of r13 makes `vsp` a loaded value; it is representable (SP = `Offset`) only if no
//!   instruction other than "finish" follows ([`ExidxDropReason::SpPopped`]).
//! - `vsp = r[n]` is representable if `r[n]` is tracked (r7, r11, r12 or r14) and no tracked
//!   register has been popped before it (their slots are relative to the previous base):
//!   [`ExidxDropReason::VspFromUntrackedRegister`], [`ExidxDropReason::BaseSwitchAfterSave`].
//!
//! # Example
//!
//! A hand-built `.ARM.exidx` with four entries, all in the index itself (no `.ARM.extab`), read
//! into rows; then the rule for a PC is looked up.
//!
//! ```
//! use unwind_arm_exidx::{rows, ExidxDropReason, ExidxSections, EXIDX_CANTUNWIND};
//! use unwind_core::arm::{CfaRule, Reg, RegRule, Rule, Source};
//!
//! // Each 8-byte entry: the function start as a prel31 offset from the word's own address,
//! // then `EXIDX_CANTUNWIND` or an inline compact-model entry (0x80, then 3 opcode bytes).
//! const EXIDX: u64 = 0x1_0000; // the section's file address
//! let entries: [(u64, u32); 4] = [
//!     (0x8000, 0x80a8_b0b0),      // pop {r4, lr}; finish; finish
//!     (0x8100, EXIDX_CANTUNWIND), // a function that cannot be unwound through
//!     (0x8200, 0x8080_00b0),      // "refuse to unwind" opcode: dropped
//!     (0x8300, 0x8003_b0b0),      // vsp += 16; finish; finish
//! ];
//! let mut exidx = Vec::new();
//! for (i, &(start, word)) in entries.iter().enumerate() {
//!     let place = EXIDX + 8 * i as u64;
//!     let prel31 = (start.wrapping_sub(place) as u32) & 0x7fff_ffff;
//!     exidx.extend_from_slice(&prel31.to_le_bytes());
//!     exidx.extend_from_slice(&word.to_le_bytes());
//! }
//! let sections = ExidxSections {
//!     exidx: &exidx,
//!     exidx_svma: EXIDX,
//!     extab: None,
//!     extab_svma: 0,
//!     text_end: Some(0x8400), // where the last function ends
//!     functions: &[],        // no symbols
//! };
//! let (table, stats) = rows(&sections)?;
//! assert_eq!((stats.entries, stats.rows, stats.cant_unwind), (4, 2, 1));
//! assert_eq!(stats.dropped_for(ExidxDropReason::RefuseToUnwind), 1);
//! assert_eq!(table.len(), 3); // two rules and the CANTUNWIND row
//!
//! // Rows are sorted and do not overlap: the PC's row is the last one starting at or below it.
//! let lookup = |pc: u64| -> Option<Rule> {
//!     let i = table.partition_point(|&(start, _, _)| start <= pc);
//!     let (_, end, rule) = *table.get(i.checked_sub(1)?)?;
//!     (pc < end).then_some(rule)
//! };
//! let rule = lookup(0x8042).unwrap();
//! assert_eq!(rule.source, Source::Exidx);
//! assert_eq!(rule.cfa, CfaRule::RegOffset(Reg::Sp, 8)); // CFA = SP + 8
//! assert_eq!(rule.pc, RegRule::Offset(-4)); // return address saved at CFA - 4
//! assert_eq!(rule.lr, RegRule::Offset(-4));
//! let rule = lookup(0x83f0).unwrap();
//! assert_eq!(rule.cfa, CfaRule::RegOffset(Reg::Sp, 16));
//! assert_eq!(rule.pc, RegRule::Register(Reg::Lr)); // return address still in LR
//! // The CANTUNWIND function has a row whose rule stops a walk (`StopReason::CantUnwind`).
//! assert_eq!(lookup(0x8100), Some(Rule::cant_unwind()));
//! // No row: the dropped entry's function, and outside [0x8000, text_end).
//! assert_eq!(lookup(0x8200), None);
//! assert_eq!(lookup(0x7ffe), None);
//! assert_eq!(lookup(0x8400), None);
//! # Ok::<(), unwind_arm_exidx::ExidxError>(())
//! ```

#![warn(missing_docs)]
// Input is untrusted (a crafted file must give an error, never a panic): no unchecked
// arithmetic, indexing or unwrapping outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::arithmetic_side_effects,
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

use core::fmt;

pub mod decode;
pub mod entry;
pub mod translate;

pub use decode::{decode, DecodeError, Decoder, Instruction};
use entry::entry_offset;
pub use entry::{entries, prel31, Entry, Model, EXIDX_CANTUNWIND};
pub use translate::translate;

use unwind_core::arm::Rule;

/// The EHABI sections of one module, with their file (stated) virtual addresses.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExidxSections<'a> {
    /// `.ARM.exidx` contents.
    pub exidx: &'a [u8],
    /// Its file address (prel31 offsets are relative to each word's address).
    pub exidx_svma: u64,
    /// `.ARM.extab` contents, if the module has them (any range of the file's loaded bytes
    /// that contains the table entries will do).
    pub extab: Option<&'a [u8]>,
    /// Its file address.
    pub extab_svma: u64,
    /// Where the last function ends (the end of the code), if known.
    pub text_end: Option<u64>,
    /// Known functions as `[start, end)` file addresses (bit 0 clear), sorted by start, from
    /// the file's symbol table; empty where it has none (a stripped file: its `.dynsym` lists
    /// only exported functions, which would cut entries short of the internal functions they
    /// cover). An entry whose function is listed and ends
    /// before the next entry's start gets a row only to that end: the code after it, up to the
    /// next entry, is code that no table describes (objects built without
    /// `-funwind-tables`), counted in [`ExidxStats::bytes_without_entry`]. See [`rows`].
    pub functions: &'a [(u64, u64)],
}

/// Why an index entry gave no row. Dropped entries leave a gap (no row; see the crate
/// documentation for what covers it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExidxDropReason {
    /// The instructions start with (or reach) "refuse to unwind" (`0x80 0x00`).
    RefuseToUnwind,
    /// A spare (unallocated) opcode.
    Spare,
    /// A reserved opcode (`0x9d`, `0x9f`).
    Reserved,
    /// A multi-byte instruction runs past the end of the entry's bytes.
    Truncated,
    /// The compact model's personality routine index is not 0, 1 or 2 (0 for inline entries).
    BadPersonalityIndex,
    /// The entry points outside `.ARM.extab` (or the module has none).
    ExtabOutOfRange,
    /// A compact-model table entry's additional words run past the end of `.ARM.extab`.
    ExtabTruncated,
    /// A generic-model table entry has no readable opcode word (or its additional words run past
    /// the end of `.ARM.extab`).
    GenericNoOpcodes,
    /// `vsp = r[n]` with `r[n]` a register the rules do not track.
    VspFromUntrackedRegister,
    /// `vsp = r[n]` after a tracked register was popped relative to the previous `vsp`.
    BaseSwitchAfterSave,
    /// r13 was popped and another instruction follows.
    SpPopped,
    /// An offset does not fit in 32 bits.
    OffsetOutOfRange,
    /// The last entry, and the end of the code is not known.
    NoEnd,
}

impl ExidxDropReason {
    /// Every reason, in a fixed order (the order of [`ExidxStats::dropped`]).
    pub const ALL: [ExidxDropReason; 13] = [
        ExidxDropReason::RefuseToUnwind,
        ExidxDropReason::Spare,
        ExidxDropReason::Reserved,
        ExidxDropReason::Truncated,
        ExidxDropReason::BadPersonalityIndex,
        ExidxDropReason::ExtabOutOfRange,
        ExidxDropReason::ExtabTruncated,
        ExidxDropReason::GenericNoOpcodes,
        ExidxDropReason::VspFromUntrackedRegister,
        ExidxDropReason::BaseSwitchAfterSave,
        ExidxDropReason::SpPopped,
        ExidxDropReason::OffsetOutOfRange,
        ExidxDropReason::NoEnd,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            ExidxDropReason::RefuseToUnwind => "refuse-to-unwind",
            ExidxDropReason::Spare => "spare-opcode",
            ExidxDropReason::Reserved => "reserved-opcode",
            ExidxDropReason::Truncated => "truncated",
            ExidxDropReason::BadPersonalityIndex => "bad-personality-index",
            ExidxDropReason::ExtabOutOfRange => "extab-out-of-range",
            ExidxDropReason::ExtabTruncated => "extab-truncated",
            ExidxDropReason::GenericNoOpcodes => "generic-no-opcodes",
            ExidxDropReason::VspFromUntrackedRegister => "vsp-from-untracked-register",
            ExidxDropReason::BaseSwitchAfterSave => "base-switch-after-save",
            ExidxDropReason::SpPopped => "sp-popped",
            ExidxDropReason::OffsetOutOfRange => "offset-out-of-range",
            ExidxDropReason::NoEnd => "no-end",
        }
    }
}

impl fmt::Display for ExidxDropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What reading a module's index found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExidxStats {
    /// Index entries.
    pub entries: u64,
    /// `EXIDX_CANTUNWIND` entries (each gives a [`Rule::cant_unwind`] row, not counted in
    /// `rows`).
    pub cant_unwind: u64,
    /// Compact-model entries inline in the index.
    pub inline: u64,
    /// Compact-model entries in `.ARM.extab`.
    pub extab: u64,
    /// Generic-model entries (a personality routine) in `.ARM.extab`.
    pub generic: u64,
    /// Entries whose range is empty (the next entry has the same start).
    pub empty: u64,
    /// Function starts with bit 0 set (cleared).
    pub odd_starts: u64,
    /// Rows produced with a rule to unwind by (`CANTUNWIND` rows not included).
    pub rows: u64,
    /// Rows (`CANTUNWIND` ones included) that end at their function's end, before the next
    /// entry ([`ExidxSections::functions`]).
    pub clipped: u64,
    /// Of them, `CANTUNWIND` rows: usually `_start`'s, or a linker's terminator, which would
    /// otherwise cover table-less code after it and stop every walk there.
    pub clipped_cant_unwind: u64,
    /// Bytes of code the clipped rows leave without a row: functions that no entry describes.
    pub bytes_without_entry: u64,
    /// Entries dropped, by reason (indexed like [`ExidxDropReason::ALL`]).
    pub dropped: [u64; ExidxDropReason::ALL.len()],
    /// The first entry dropped for each reason, in the order found (at most one per reason):
    /// where to look in the file.
    pub first_dropped: Vec<DroppedEntry>,
}

/// An index entry that gave no row, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DroppedEntry {
    /// The entry's index in `.ARM.exidx` (its byte offset is `8 * index`).
    pub index: usize,
    /// Its function start (bit 0 cleared).
    pub start: u64,
    /// Why it gave no row.
    pub reason: ExidxDropReason,
}

impl DroppedEntry {
    /// The entry's byte offset in `.ARM.exidx`.
    pub fn offset(&self) -> u64 {
        entry_offset(self.index)
    }
}

impl fmt::Display for DroppedEntry {
    /// `.ARM.exidx entry 3 (offset 0x18, function 0x8010): extab-out-of-range`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            ".ARM.exidx entry {} (offset {:#x}, function {:#x}): {}",
            self.index,
            self.offset(),
            self.start,
            self.reason
        )
    }
}

impl ExidxStats {
    /// Entries dropped for `reason`.
    pub fn dropped_for(&self, reason: ExidxDropReason) -> u64 {
        self.dropped.get(reason as usize).copied().unwrap_or(0)
    }

    /// All dropped entries.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// `(reason, count)` for every reason with a non-zero count.
    pub fn drops(&self) -> impl Iterator<Item = (ExidxDropReason, u64)> + '_ {
        ExidxDropReason::ALL
            .iter()
            .map(|&r| (r, self.dropped_for(r)))
            .filter(|&(_, n)| n > 0)
    }

    /// Counts entry `index` (function `start`) as dropped for `reason`.
    fn drop(&mut self, index: usize, start: u64, reason: ExidxDropReason) {
        if let Some(n) = self.dropped.get_mut(reason as usize) {
            *n = n.saturating_add(1);
        }
        if !self.first_dropped.iter().any(|d| d.reason == reason) {
            self.first_dropped.push(DroppedEntry {
                index,
                start,
                reason,
            });
        }
    }
}

/// Why a module's index could not be read at all. The `Display` text names `.ARM.exidx`, the
/// entry (index and byte offset) where there is one, and what was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExidxError {
    /// `.ARM.exidx` is not a whole number of 8-byte entries.
    BadLength {
        /// Its length in bytes.
        len: usize,
    },
    /// `.ARM.exidx`'s address is not 4-aligned.
    Misaligned {
        /// The address.
        svma: u64,
    },
    /// Entry `index`'s function start is outside the 32-bit address space.
    AddressOutOfRange {
        /// The entry.
        index: usize,
        /// The file address of the entry's first word (wrapped past `u64::MAX`).
        place: u64,
        /// The first word's prel31 offset, which added to `place` gives the function start.
        prel31: i64,
    },
    /// Entry `index` starts below its predecessor (the index must be sorted).
    NotSorted {
        /// The entry.
        index: usize,
        /// Its function start (bit 0 as stated).
        start: u64,
        /// The previous entry's function start (bit 0 cleared).
        previous: u64,
    },
}

impl ExidxError {
    /// The entry the error is about, if it is about one.
    pub fn index(&self) -> Option<usize> {
        match *self {
            ExidxError::AddressOutOfRange { index, .. } | ExidxError::NotSorted { index, .. } => {
                Some(index)
            }
            ExidxError::BadLength { .. } | ExidxError::Misaligned { .. } => None,
        }
    }

    /// The byte offset in `.ARM.exidx` where the problem is: the entry's, or for a bad length
    /// the incomplete last entry's.
    pub fn offset(&self) -> Option<u64> {
        match *self {
            ExidxError::BadLength { len } => Some(entry_offset(len / 8)),
            ExidxError::Misaligned { .. } => None,
            ExidxError::AddressOutOfRange { index, .. } | ExidxError::NotSorted { index, .. } => {
                Some(entry_offset(index))
            }
        }
    }
}

impl fmt::Display for ExidxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExidxError::BadLength { len } => write!(
                f,
                ".ARM.exidx: length {len} is not a multiple of 8 (an incomplete entry at offset {:#x})",
                entry_offset(len / 8)
            ),
            ExidxError::Misaligned { svma } => {
                write!(f, ".ARM.exidx: its address {svma:#x} is not 4-aligned")
            }
            ExidxError::AddressOutOfRange {
                index,
                place,
                prel31,
            } => {
                let (sign, magnitude) = if prel31 < 0 { ('-', prel31.unsigned_abs()) } else { ('+', prel31.unsigned_abs()) };
                write!(
                    f,
                    ".ARM.exidx entry {index} (offset {:#x}): function start {place:#x} {sign} {magnitude:#x} is outside the 32-bit address space",
                    entry_offset(index)
                )
            }
            ExidxError::NotSorted {
                index,
                start,
                previous,
            } => write!(
                f,
                ".ARM.exidx entry {index} (offset {:#x}): function start {start:#x} is below the previous entry's {previous:#x} (the index must be sorted)",
                entry_offset(index)
            ),
        }
    }
}

impl std::error::Error for ExidxError {}

/// A row: file addresses `[start, end)` and their rule.
pub type Row = (u64, u64, Rule);

/// One row per function: `(start, end, rule)` in file addresses, sorted by start; `CANTUNWIND`
/// entries get [`Rule::cant_unwind`], dropped entries are left out (gaps). Identical
/// neighbouring rules are not merged here (the table builder does).
///
/// A row runs to the next entry's start, unless [`ExidxSections::functions`] lists a function
/// at the entry's start that ends before it: an entry says nothing about the code after its
/// function, and that code, with no entry of its own, was built without unwind tables. It is
/// left without a row, so that the unwinder's fallbacks apply there instead of the wrong
/// function's rule or, for a `CANTUNWIND` entry (`_start`'s in a program built without
/// `-funwind-tables`), a stop.
pub fn rows(sections: &ExidxSections<'_>) -> Result<(Vec<Row>, ExidxStats), ExidxError> {
    let entries = entries(sections)?;
    let mut stats = ExidxStats::default();
    let mut out = Vec::with_capacity(entries.len());
    let count = |n: &mut u64| *n = n.saturating_add(1);
    let mut iter = entries.iter().enumerate().peekable();
    while let Some((i, e)) = iter.next() {
        count(&mut stats.entries);
        match e.model {
            Model::CantUnwind => count(&mut stats.cant_unwind),
            Model::Inline => count(&mut stats.inline),
            Model::Compact { .. } => count(&mut stats.extab),
            Model::Generic { .. } => count(&mut stats.generic),
            Model::Invalid => {}
        }
        if e.start & 1 != 0 {
            count(&mut stats.odd_starts);
        }
        let start = e.start & !1;
        let end = match iter.peek() {
            Some((_, next)) => next.start & !1,
            None => match sections.text_end {
                Some(end) if end > start => end,
                // A final CANTUNWIND entry is usually the linker's sentinel: nothing to lose.
                _ if e.model == Model::CantUnwind => continue,
                _ => {
                    stats.drop(i, start, ExidxDropReason::NoEnd);
                    continue;
                }
            },
        };
        if end <= start {
            count(&mut stats.empty);
            continue;
        }
        let end = match function_end(sections.functions, start) {
            Some(f) if f > start && f < end => {
                count(&mut stats.clipped);
                if e.model == Model::CantUnwind {
                    count(&mut stats.clipped_cant_unwind);
                }
                stats.bytes_without_entry = stats
                    .bytes_without_entry
                    .saturating_add(end.saturating_sub(f));
                f
            }
            _ => end,
        };
        if e.model == Model::CantUnwind {
            // Not a gap: the tables say the function cannot be unwound through, and the
            // unwinder stops there (counted in `cant_unwind`, not in `rows`).
            out.push((start, end, Rule::cant_unwind()));
            continue;
        }
        let rule = match &e.opcodes {
            Ok(bytes) => translate::translate_decoded(Decoder::new(bytes)),
            Err(reason) => Err(*reason),
        };
        match rule {
            Ok(rule) => {
                out.push((start, end, rule));
                count(&mut stats.rows);
            }
            Err(reason) => stats.drop(i, start, reason),
        }
    }
    Ok((out, stats))
}

/// The end of the function listed at `start` in `functions` (sorted by start), the largest if
/// several start there.
fn function_end(functions: &[(u64, u64)], start: u64) -> Option<u64> {
    let first = functions.partition_point(|f| f.0 < start);
    functions
        .get(first..)?
        .iter()
        .take_while(|f| f.0 == start)
        .map(|f| f.1)
        .max()
}

#[cfg(test)]
mod tests;
