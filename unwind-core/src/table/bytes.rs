//! A module's rules as bytes ([`ModuleRules::to_bytes`]) and their checked reader
//! ([`ModuleRules::from_bytes`]): for a cache of rule tables shared by the processes of one
//! profiling run, where the first process to build a module's rules stores them and the others
//! load them instead of parsing the module's CFI again.
//!
//! The reader trusts nothing: whatever the bytes, it answers a table that every lookup and the
//! unwinder can use as one built by [`ModuleRulesBuilder`](super::ModuleRulesBuilder), or an
//! error ([`RulesBytesError`]) naming what was wrong and where. It never panics, and allocates
//! no more than a constant times the input's length (counts are checked against the input
//! before anything is allocated for them). It accepts exactly the encodings that
//! [`ModuleRules::to_bytes`] writes: a table it accepts encodes to the same bytes again.
//!
//! # Format (version 1)
//!
//! Little-endian throughout, without alignment or padding between fields:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic, [`MAGIC`] |
//! | 8 | 4 | format version, [`VERSION`] |
//! | 12 | 4 | the rules' architecture, [`RuleBytes::ARCH`] |
//! | 16 | 4 | bytes of one rule, [`RuleBytes::SIZE`] |
//! | 20 | 4 | `page_shift`: 0 for a table without extents, else 4 to 31 |
//! | 24 | 8 | `base`, the file address extent starts are relative to |
//! | 32 | 40 | [`BuildStats`]: `rows_in`, `extents`, `merged`, `overlapping`, `empty` (`u64` each) |
//! | 72 | 4 | `n`, extent starts (and rule indices) |
//! | 76 | 4 | `p`, page index entries |
//! | 80 | 4 | `d`, dictionary rules |
//! | 84 | 4 | `e`, expressions |
//! | 88 | 4 | `x`, bytes of the expressions |
//! | 92 | 4 `n` | extent starts (`u32`) |
//! | | 2 `n` | rule indices (`u16`, `0xffff` for a gap) |
//! | | 4 `p` | page index (`u32`) |
//! | | `SIZE` `d` | the dictionary, each rule as [`RuleBytes::write`] writes it |
//! | | `x` | the expressions: each an operation count (`u8`, at most [`MAX_OPS`]) and its operations, each a tag byte ([`Op::Reg`] 0 with a register byte, [`Op::Const`] 1 with an `i64`, the others 2 and up in [`Op`]'s order) |
//! | | 8 | checksum of every byte before it |
//!
//! The rules' ready forms ([`TableRule::ready`]) are not stored: the reader makes them from the
//! dictionary, as the builder does, so that the cache's simple forms (whose offsets the
//! unwinder trusts to read unchecked) come from the same code whatever the bytes.

use alloc::vec::Vec;
use core::fmt;

use super::{BuildStats, ModuleRules, TableRule, NO_RULE};
use crate::expr::{Expr, Op, MAX_OPS};

/// The first 8 bytes of a module's rules as bytes.
pub const MAGIC: [u8; 8] = *b"UWRULES\0";

/// The format version [`ModuleRules::to_bytes`] writes and [`ModuleRules::from_bytes`] reads.
pub const VERSION: u32 = 2;

/// Bytes before the arrays.
const HEADER: usize = 92;

/// Bytes of the checksum that ends the encoding.
const CHECKSUM: usize = 8;

/// The largest page size (log2) of a table's page index (the builder's limit).
const MAX_PAGE_SHIFT: u32 = 31;

/// The smallest page size (log2) of a table's page index (the builder's).
const MIN_PAGE_SHIFT: u32 = 4;

/// Why bytes are not a module's rules ([`ModuleRules::from_bytes`]). Offsets are from the start
/// of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RulesBytesError {
    /// The input ends inside the field or array that starts at `offset`.
    Truncated {
        /// Where the field or array that does not fit starts.
        offset: usize,
    },
    /// The input does not start with [`MAGIC`].
    BadMagic,
    /// The input is of another format version than [`VERSION`].
    WrongVersion {
        /// The version the input states.
        found: u32,
    },
    /// The input holds rules of another architecture (or of another rule size).
    WrongArchitecture {
        /// The architecture tag the input states ([`RuleBytes::ARCH`]).
        found: [u8; 4],
    },
    /// The checksum does not match the bytes: they were changed (or torn) after they were
    /// written.
    BadChecksum,
    /// A value the tables cannot have: `what` it is and where.
    Invalid {
        /// What is wrong.
        what: &'static str,
        /// Where the value (or the first of the values that disagree) starts.
        offset: usize,
    },
}

impl fmt::Display for RulesBytesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RulesBytesError::Truncated { offset } => {
                write!(
                    f,
                    "rule table bytes end inside the field at offset {offset}"
                )
            }
            RulesBytesError::BadMagic => f.write_str("not a rule table (bad magic)"),
            RulesBytesError::WrongVersion { found } => {
                write!(f, "rule table format version {found}, expected {VERSION}")
            }
            RulesBytesError::WrongArchitecture { found } => {
                write!(f, "rule table of another architecture ({found:?})")
            }
            RulesBytesError::BadChecksum => f.write_str("rule table bytes fail their checksum"),
            RulesBytesError::Invalid { what, offset } => {
                write!(f, "invalid rule table: {what} at offset {offset}")
            }
        }
    }
}

impl core::error::Error for RulesBytesError {}

/// A rule type's fixed-size byte form, for [`ModuleRules::to_bytes`] and
/// [`ModuleRules::from_bytes`]. The encoding of a rule is its fields in order, each enum as a
/// tag byte ([`RuleReader::tag`]) and a 4-byte payload ([`RuleReader::payload`]) that is zero
/// where the variant has no value.
pub trait RuleBytes: TableRule {
    /// The architecture tag in the header: bytes of one architecture's rules are refused as
    /// another's.
    const ARCH: [u8; 4];
    /// Bytes of one encoded rule: [`write`](Self::write) appends exactly this many and
    /// [`read`](Self::read) reads exactly this many.
    const SIZE: usize;
    /// Appends the rule's [`SIZE`](Self::SIZE) bytes to `out`.
    fn write(&self, out: &mut Vec<u8>);
    /// Reads a rule from `r`, refusing every value the rule type cannot have (an unknown tag, a
    /// nonzero unused payload, a register the architecture does not track): reading what
    /// [`write`](Self::write) wrote gives the rule back, and whatever `read` accepts,
    /// [`write`](Self::write) writes again byte for byte.
    fn read(r: &mut RuleReader<'_>) -> Result<Self, RulesBytesError>;
    /// Calls `each` with every expression index the rule refers to (the reader checks that each
    /// is an expression of the table).
    fn exprs(&self, each: impl FnMut(u16));
}

/// Appends `tag` and `payload` (an enum's variant and its value) to `out`: the form
/// [`RuleReader::tag`] and [`RuleReader::payload`] read.
pub fn write_tagged(out: &mut Vec<u8>, tag: u8, payload: u32) {
    out.push(tag);
    out.extend_from_slice(&payload.to_le_bytes());
}

/// Reads the fields of one encoded rule ([`RuleBytes::read`]), each checked; offsets in its
/// errors are those of the whole input.
#[derive(Debug)]
pub struct RuleReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> RuleReader<'a> {
    fn new(bytes: &'a [u8], at: usize) -> Self {
        RuleReader { bytes, at }
    }

    /// The offset of the next byte.
    pub fn offset(&self) -> usize {
        self.at
    }

    /// An [`RulesBytesError::Invalid`] error for the value that starts at `offset`.
    pub fn invalid(what: &'static str, offset: usize) -> RulesBytesError {
        RulesBytesError::Invalid { what, offset }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], RulesBytesError> {
        let truncated = RulesBytesError::Truncated { offset: self.at };
        let end = self.at.checked_add(N).ok_or(truncated)?;
        let bytes = self.bytes.get(self.at..end).ok_or(truncated)?;
        let bytes = *bytes.first_chunk::<N>().ok_or(truncated)?;
        self.at = end;
        Ok(bytes)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, RulesBytesError> {
        self.take::<1>().map(|[b]| b)
    }

    /// The next `u16`.
    pub fn u16(&mut self) -> Result<u16, RulesBytesError> {
        self.take().map(u16::from_le_bytes)
    }

    /// The next `u32`.
    pub fn u32(&mut self) -> Result<u32, RulesBytesError> {
        self.take().map(u32::from_le_bytes)
    }

    /// The next `u64`.
    pub fn u64(&mut self) -> Result<u64, RulesBytesError> {
        self.take().map(u64::from_le_bytes)
    }

    /// The next `i64`.
    pub fn i64(&mut self) -> Result<i64, RulesBytesError> {
        self.take().map(i64::from_le_bytes)
    }

    /// The next byte as a boolean: 0 or 1, anything else is `what` invalid.
    pub fn bool(&mut self, what: &'static str) -> Result<bool, RulesBytesError> {
        let at = self.at;
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Self::invalid(what, at)),
        }
    }

    /// The next byte as an enum's tag: below `count`, anything else is `what` invalid.
    pub fn tag(&mut self, what: &'static str, count: u8) -> Result<u8, RulesBytesError> {
        let at = self.at;
        let tag = self.u8()?;
        if tag < count {
            Ok(tag)
        } else {
            Err(Self::invalid(what, at))
        }
    }

    /// The 4-byte payload after a tag ([`write_tagged`]), read as `read` decodes it; a payload
    /// it refuses (`None`) is `what` invalid.
    pub fn payload<T>(
        &mut self,
        what: &'static str,
        read: impl FnOnce(u32) -> Option<T>,
    ) -> Result<T, RulesBytesError> {
        let at = self.at;
        read(self.u32()?).ok_or(Self::invalid(what, at))
    }
}

/// The decoders of [`RuleReader::payload`]'s common payloads.
pub mod payload {
    /// A signed offset.
    pub fn offset(v: u32) -> Option<i32> {
        Some(v as i32)
    }

    /// An expression index (the high half zero).
    pub fn index(v: u32) -> Option<u16> {
        u16::try_from(v).ok()
    }

    /// No value: zero.
    pub fn none(v: u32) -> Option<()> {
        (v == 0).then_some(())
    }
}

/// The operations without an operand, in the order of their tags (from 2: 0 is [`Op::Reg`], 1
/// [`Op::Const`]).
const PLAIN_OPS: [Op; 23] = [
    Op::Deref,
    Op::Add,
    Op::Sub,
    Op::Mul,
    Op::And,
    Op::Or,
    Op::Xor,
    Op::Shl,
    Op::Shr,
    Op::Shra,
    Op::Neg,
    Op::Not,
    Op::Ge,
    Op::Gt,
    Op::Le,
    Op::Lt,
    Op::Eq,
    Op::Ne,
    Op::Dup,
    Op::Drop,
    Op::Swap,
    Op::Over,
    Op::Nop,
];

/// The tag of [`Op::Reg`].
const OP_REG: u8 = 0;
/// The tag of [`Op::Const`].
const OP_CONST: u8 = 1;
/// The tag of `PLAIN_OPS[0]`.
const OP_PLAIN: u8 = 2;

fn write_expr(e: &Expr, out: &mut Vec<u8>) {
    let ops = e.ops();
    // `Expr` holds at most MAX_OPS (24) operations.
    out.push(ops.len() as u8);
    for &op in ops {
        out.push(op_tag(op));
        match op {
            Op::Reg(r) => out.push(r),
            Op::Const(c) => out.extend_from_slice(&c.to_le_bytes()),
            _ => {}
        }
    }
}

/// The tag of an operation: [`OP_REG`], [`OP_CONST`], or for the others their place in
/// [`PLAIN_OPS`] from [`OP_PLAIN`] (a test checks that they agree). Exhaustive, so that a new
/// operation needs a tag here.
fn op_tag(op: Op) -> u8 {
    match op {
        Op::Reg(_) => OP_REG,
        Op::Const(_) => OP_CONST,
        Op::Deref => OP_PLAIN,
        Op::Add => OP_PLAIN + 1,
        Op::Sub => OP_PLAIN + 2,
        Op::Mul => OP_PLAIN + 3,
        Op::And => OP_PLAIN + 4,
        Op::Or => OP_PLAIN + 5,
        Op::Xor => OP_PLAIN + 6,
        Op::Shl => OP_PLAIN + 7,
        Op::Shr => OP_PLAIN + 8,
        Op::Shra => OP_PLAIN + 9,
        Op::Neg => OP_PLAIN + 10,
        Op::Not => OP_PLAIN + 11,
        Op::Ge => OP_PLAIN + 12,
        Op::Gt => OP_PLAIN + 13,
        Op::Le => OP_PLAIN + 14,
        Op::Lt => OP_PLAIN + 15,
        Op::Eq => OP_PLAIN + 16,
        Op::Ne => OP_PLAIN + 17,
        Op::Dup => OP_PLAIN + 18,
        Op::Drop => OP_PLAIN + 19,
        Op::Swap => OP_PLAIN + 20,
        Op::Over => OP_PLAIN + 21,
        Op::Nop => OP_PLAIN + 22,
    }
}

fn read_expr(r: &mut RuleReader<'_>) -> Result<Expr, RulesBytesError> {
    let at = r.offset();
    let len = usize::from(r.u8()?);
    if len > MAX_OPS {
        return Err(RuleReader::invalid("expression longer than MAX_OPS", at));
    }
    let mut ops = [Op::Nop; MAX_OPS];
    for op in ops.iter_mut().take(len) {
        let at = r.offset();
        *op = match r.u8()? {
            OP_REG => Op::Reg(r.u8()?),
            OP_CONST => Op::Const(r.i64()?),
            tag => *PLAIN_OPS
                .get(usize::from(tag.wrapping_sub(OP_PLAIN)))
                .ok_or(RuleReader::invalid("expression operation", at))?,
        };
    }
    Expr::new(ops.get(..len).unwrap_or(&[]))
        .map_err(|_| RuleReader::invalid("expression longer than MAX_OPS", at))
}

/// The checksum of `bytes`: four multiply-rotate hashes, each of every fourth 8-byte word (each
/// step a bijection of its state for a given word, so that any change of one word changes it),
/// mixed into one. Four independent chains: each step waits for a multiplication, and a
/// process reads these files back at its start.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |h: u64, w: u64| (h.rotate_left(23) ^ w).wrapping_mul(K);
    let (blocks, rest) = bytes.as_chunks::<32>();
    let seed = mix(0x243f_6a88_85a3_08d3, bytes.len() as u64);
    let mut h = [seed, seed ^ 1, seed ^ 2, seed ^ 3];
    for block in blocks {
        let (words, _) = block.as_chunks::<8>();
        for (h, w) in h.iter_mut().zip(words) {
            *h = mix(*h, u64::from_le_bytes(*w));
        }
    }
    let (words, tail) = rest.as_chunks::<8>();
    let mut last = [0u8; 8];
    for (d, s) in last.iter_mut().zip(tail) {
        *d = *s;
    }
    let mut sum = h.iter().fold(seed, |acc, &h| mix(acc, h));
    for w in words.iter().chain([&last]) {
        sum = mix(sum, u64::from_le_bytes(*w));
    }
    sum ^ (sum >> 29)
}

/// Writes the checksum of `bytes` (all but their last 8) into their last 8.
fn seal(bytes: &mut [u8]) {
    let Some(body) = bytes.len().checked_sub(CHECKSUM) else {
        return;
    };
    let sum = checksum(&bytes[..body]);
    bytes[body..].copy_from_slice(&sum.to_le_bytes());
}

/// Checks that `starts` and `rules` are a table's extents (none, or at least two starts, each
/// above the one before from 0, and a rule index for each: a dictionary index or a gap, the
/// first not a gap, never twice the same in a row, the last a gap ending the last extent), and
/// that `extents` counts the extents with a rule.
/// `at` is the offset of the starts, `rules_at` of the rule indices.
fn check_extents(
    starts: &[u32],
    rules: &[u16],
    dict_len: usize,
    extents: u64,
    at: usize,
    rules_at: usize,
) -> Result<(), RulesBytesError> {
    // The common case first, in passes without early exits (which the compiler vectorizes);
    // only a table that fails one is gone through again for the first fault and its offset.
    let increasing = starts.windows(2).fold(true, |ok, w| ok & (w[0] < w[1]));
    let repeated = rules.windows(2).fold(false, |bad, w| bad | (w[0] == w[1]));
    // In 16-bit lanes: the dictionary has at most NO_RULE rules, the arrays fewer than 2^32
    // entries (their counts are u32s).
    let dict = u16::try_from(dict_len).unwrap_or(NO_RULE);
    let in_dict = rules
        .iter()
        .fold(true, |ok, &r| ok & ((r == NO_RULE) | (r < dict)));
    let gaps = rules.iter().fold(0u32, |n, &r| n + u32::from(r == NO_RULE));
    let with_rule = (rules.len() as u64).wrapping_sub(u64::from(gaps));
    if increasing
        && !repeated
        && in_dict
        && with_rule == extents
        && starts.first().is_none_or(|&f| f == 0)
        && (starts.is_empty() || (starts.len() >= 2 && rules.first() != Some(&NO_RULE)))
        && rules.last().is_none_or(|&r| r == NO_RULE)
    {
        return Ok(());
    }
    find_extents_fault(starts, rules, dict_len, extents, at, rules_at)
}

/// [`check_extents`]'s checks one by one, for the first that fails: the error naming it.
fn find_extents_fault(
    starts: &[u32],
    rules: &[u16],
    dict_len: usize,
    extents: u64,
    at: usize,
    rules_at: usize,
) -> Result<(), RulesBytesError> {
    let invalid = RuleReader::invalid;
    // The extent count's offset in the header (`BuildStats::extents`).
    const EXTENTS_AT: usize = 40;
    let Some((&first, _)) = starts.split_first() else {
        return match extents {
            0 => Ok(()),
            _ => Err(invalid("extent count", EXTENTS_AT)),
        };
    };
    if first != 0 {
        return Err(invalid("extent starts not from 0", at));
    }
    if starts.len() < 2 {
        return Err(invalid("a single extent start", at));
    }
    if rules.first() == Some(&NO_RULE) {
        return Err(invalid("first extent a gap", rules_at));
    }
    for (i, w) in starts.windows(2).enumerate() {
        if w[0] >= w[1] {
            return Err(invalid("extent starts not increasing", at + 4 * (i + 1)));
        }
    }
    let mut with_rule = 0u64;
    let mut prev = NO_RULE;
    for (i, &r) in rules.iter().enumerate() {
        let at = rules_at + 2 * i;
        if r != NO_RULE && usize::from(r) >= dict_len {
            return Err(invalid("rule index past the dictionary", at));
        }
        if r == prev {
            return Err(invalid("extent with the rule of the one before", at));
        }
        with_rule += u64::from(r != NO_RULE);
        prev = r;
    }
    if prev != NO_RULE {
        return Err(invalid(
            "last extent start not a gap",
            rules_at + 2 * (rules.len() - 1),
        ));
    }
    if with_rule != extents {
        return Err(invalid("extent count", EXTENTS_AT));
    }
    Ok(())
}

/// Checks that `pages` is the page index of `starts` with pages of `1 << shift` bytes: an entry
/// for every page up to the one holding the last start, and one more, each the extent holding
/// the page's first byte (as `super::page_index` makes it). `at` is the offset of the pages.
fn check_pages(
    starts: &[u32],
    pages: &[u32],
    shift: u32,
    at: usize,
) -> Result<(), RulesBytesError> {
    let invalid = RuleReader::invalid;
    let Some(&end) = starts.last() else {
        return if pages.is_empty() && shift == 0 {
            Ok(())
        } else {
            Err(invalid("page index of a table without extents", 20))
        };
    };
    if !(MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT).contains(&shift) {
        return Err(invalid("page size", 20));
    }
    let count = (u64::from(end) >> shift) + 2;
    if pages.len() as u64 != count {
        return Err(invalid("page count", 76));
    }
    // Each entry on its own, without early exits: the last extent starting at or before the
    // page's first byte. Only a failing index is gone through again for its first fault.
    let fits = pages.iter().enumerate().fold(true, |ok, (p, &entry)| {
        let first = (p as u64) << shift;
        let e = entry as usize;
        let starts_before = starts.get(e).is_some_and(|&s| u64::from(s) <= first);
        let next_after = starts.get(e + 1).is_none_or(|&s| u64::from(s) > first);
        ok & starts_before & next_after
    });
    if fits {
        return Ok(());
    }
    let mut i = 0usize;
    for (p, &entry) in pages.iter().enumerate() {
        let first = (p as u64) << shift;
        while starts.get(i + 1).is_some_and(|&s| u64::from(s) <= first) {
            i += 1;
        }
        if entry as usize != i {
            return Err(invalid("page index entry", at + 4 * p));
        }
    }
    Ok(())
}

/// True if no two of `items` (at most 65,536) are equal: their indices sorted by item, 2 bytes
/// an item.
fn distinct<T: Ord>(items: &[T]) -> bool {
    let mut order: Vec<u16> = (0..items.len()).map(|i| i as u16).collect();
    let item = |i: u16| items.get(usize::from(i));
    order.sort_unstable_by(|&a, &b| item(a).cmp(&item(b)));
    order.windows(2).all(|w| item(w[0]) != item(w[1]))
}

impl<R: RuleBytes> ModuleRules<R> {
    /// The table as bytes, in the format of [`VERSION`] ([module docs](self)), for
    /// [`from_bytes`](Self::from_bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut exprs = Vec::new();
        for e in &self.exprs {
            write_expr(e, &mut exprs);
        }
        let len = HEADER
            + self.starts.len() * 6
            + self.pages.len() * 4
            + self.dict.len() * R::SIZE
            + exprs.len()
            + CHECKSUM;
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&MAGIC);
        // Counts fit their u32 fields: the builder's starts and pages are indexed by u32, its
        // dictionary and expressions by u16.
        let u32s = [
            VERSION,
            u32::from_le_bytes(R::ARCH),
            R::SIZE as u32,
            u32::from(self.page_shift),
        ];
        for v in u32s {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let s = &self.stats;
        for v in [
            self.base,
            s.rows_in,
            s.extents,
            s.merged,
            s.overlapping,
            s.empty,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for n in [
            self.starts.len(),
            self.pages.len(),
            self.dict.len(),
            self.exprs.len(),
            exprs.len(),
        ] {
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        for s in &self.starts {
            out.extend_from_slice(&s.to_le_bytes());
        }
        for r in &self.rules {
            out.extend_from_slice(&r.to_le_bytes());
        }
        for p in &self.pages {
            out.extend_from_slice(&p.to_le_bytes());
        }
        for r in &self.dict {
            let before = out.len();
            r.write(&mut out);
            debug_assert_eq!(out.len() - before, R::SIZE, "RuleBytes::SIZE");
        }
        out.extend_from_slice(&exprs);
        out.extend_from_slice(&[0; CHECKSUM]);
        seal(&mut out);
        debug_assert_eq!(out.len(), len);
        out
    }

    /// The table that [`to_bytes`](Self::to_bytes) wrote into `bytes`, checked: every index,
    /// order, count and value that lookups, the rule cache and the unwinder rely on
    /// ([module docs](self)). Refuses bytes of another format version or another architecture.
    /// Allocates no more than a constant times `bytes.len()`: the arrays as large as their bytes,
    /// the dictionary with its ready forms about twice its bytes, and the expressions at most
    /// 264 bytes for each byte of theirs (an empty expression is one byte; real ones are 10 to
    /// 60 bytes). A count is checked against the input's length before anything is allocated
    /// for it.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, RulesBytesError> {
        let invalid = RuleReader::invalid;
        let mut r = RuleReader::new(bytes, 0);
        if r.take::<8>()? != MAGIC {
            return Err(RulesBytesError::BadMagic);
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(RulesBytesError::WrongVersion { found: version });
        }
        let arch = r.take::<4>()?;
        if arch != R::ARCH {
            return Err(RulesBytesError::WrongArchitecture { found: arch });
        }
        if r.u32()? as usize != R::SIZE {
            return Err(RulesBytesError::WrongArchitecture { found: arch });
        }
        let page_shift = r.u32()?;
        let base = r.u64()?;
        let stats = BuildStats {
            rows_in: r.u64()?,
            extents: r.u64()?,
            merged: r.u64()?,
            overlapping: r.u64()?,
            empty: r.u64()?,
        };
        let [n, p, d, e, x] = [r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?].map(u64::from);

        // Where each array starts, checked against the input before anything is allocated.
        let sizes = [n * 4, n * 2, p * 4, d * R::SIZE as u64, x, CHECKSUM as u64];
        let mut offsets = [0usize; 7];
        let mut end = HEADER as u64;
        offsets[0] = HEADER;
        for (i, size) in sizes.iter().enumerate() {
            let truncated = RulesBytesError::Truncated { offset: offsets[i] };
            // At most 2^32 * 2^32 * ...: u64 arithmetic is checked anyway.
            end = end.checked_add(*size).ok_or(truncated)?;
            if end > bytes.len() as u64 {
                return Err(truncated);
            }
            // `end` is at most `bytes.len()`: a usize.
            offsets[i + 1] = end as usize;
        }
        let [starts_at, rules_at, pages_at, dict_at, exprs_at, sum_at, total] = offsets;
        if total != bytes.len() {
            return Err(invalid("bytes after the table", total));
        }
        if checksum(&bytes[..sum_at]) != RuleReader::new(bytes, sum_at).u64()? {
            return Err(RulesBytesError::BadChecksum);
        }

        // The counts fit the input, so these allocations are bounded by its length.
        let (n, p, d, e) = (n as usize, p as usize, d as usize, e as usize);
        let starts: Vec<u32> = bytes[starts_at..rules_at]
            .as_chunks::<4>()
            .0
            .iter()
            .map(|b| u32::from_le_bytes(*b))
            .collect();
        let rules: Vec<u16> = bytes[rules_at..pages_at]
            .as_chunks::<2>()
            .0
            .iter()
            .map(|b| u16::from_le_bytes(*b))
            .collect();
        let pages: Vec<u32> = bytes[pages_at..dict_at]
            .as_chunks::<4>()
            .0
            .iter()
            .map(|b| u32::from_le_bytes(*b))
            .collect();
        debug_assert_eq!((starts.len(), rules.len(), pages.len()), (n, n, p));

        // The dictionary: at most NO_RULE rules (indices below it), each valid and distinct.
        if d > usize::from(NO_RULE) {
            return Err(invalid("dictionary larger than 65535 rules", 80));
        }
        let mut dict = Vec::with_capacity(d);
        let mut rr = RuleReader::new(&bytes[..exprs_at], dict_at);
        for _ in 0..d {
            let at = rr.offset();
            dict.push(R::read(&mut rr)?);
            if rr.offset() - at != R::SIZE {
                return Err(invalid("rule of another size than RuleBytes::SIZE", at));
            }
        }

        // Expressions: at most 65536 (indices are u16), each at least its length byte, filling
        // their bytes exactly.
        if e > usize::from(u16::MAX) + 1 || e as u64 > x {
            return Err(invalid("expression count", 84));
        }
        let mut exprs = Vec::with_capacity(e);
        let mut er = RuleReader::new(&bytes[..sum_at], exprs_at);
        for _ in 0..e {
            exprs.push(read_expr(&mut er)?);
        }
        if er.offset() != sum_at {
            return Err(invalid("bytes after the expressions", er.offset()));
        }

        // Every expression a rule refers to exists.
        for (i, rule) in dict.iter().enumerate() {
            let mut bad = false;
            rule.exprs(|x| bad |= usize::from(x) >= exprs.len());
            if bad {
                return Err(invalid(
                    "expression index past the expressions",
                    dict_at + i * R::SIZE,
                ));
            }
        }
        // Distinct, as the builder interns them.
        if !distinct(&dict) {
            return Err(invalid("dictionary rule twice", dict_at));
        }
        if !distinct(&exprs) {
            return Err(invalid("expression twice", exprs_at));
        }

        check_extents(
            &starts,
            &rules,
            dict.len(),
            stats.extents,
            starts_at,
            rules_at,
        )?;
        check_pages(&starts, &pages, page_shift, pages_at)?;
        match starts.last() {
            None if base != 0 => return Err(invalid("base of a table without extents", 24)),
            // Every extent's file address is a u64 (`extent_at` adds the start to the base).
            Some(&end) if base.checked_add(u64::from(end)).is_none() => {
                return Err(invalid("extents past the address space", 24));
            }
            _ => {}
        }

        Ok(ModuleRules {
            base,
            covered: super::covered_bytes(&starts, &rules),
            starts,
            rules,
            pages,
            // Checked: at most MAX_PAGE_SHIFT.
            page_shift: page_shift as u8,
            ready: dict.iter().map(R::ready).collect(),
            dict,
            exprs,
            stats,
        })
    }
}

#[cfg(test)]
mod tests;
