//! Unwind rules for 32-bit ARM (A32) and Thumb-2 functions, read from their instructions.
//!
//! [`analyze`] reads a function's code once, at load time, and follows the frame from its
//! first instruction: pushes, `sub sp`, `vpush`, a frame pointer set up from SP (`add r7, sp`,
//! `mov r11, sp`), and the epilogues that undo them. For every instruction it gives the frame
//! state before that instruction executes ([`FrameState`]): where the CFA is (SP or the frame
//! pointer plus an offset) and where the caller's LR, r7, r11 and r12 are saved. A state is an
//! `unwind_core` rule ([`FrameState::rule`], source [`Source::Instructions`]).
//!
//! What it is for:
//! - Functions no unwind table describes: C built without `-funwind-tables` (Debian's armhf
//!   default) has no EHABI entries of its own.
//! - EHABI entries, which describe the function body only: in a prologue (before the pushes)
//!   and after an epilogue's pops, the entry's rule reads a stale stack slot. Where the
//!   instructions agree with the entry ([`FrameState::describes`] the entry's rule at some
//!   instruction), `unwind-dwarf` takes their states in the prologue and in the epilogues
//!   ([`Analysis::epilogues`]), and samples there unwind exactly.
//! - A function start known from symbols (`starts` of [`analyze`]) restarts the reading from
//!   the entry frame: one EHABI entry of a stripped library may cover several functions.
//!
//! How the straight-line reading handles control flow:
//! - An instruction with a condition (A32 condition field, Thumb `IT` block) does not change
//!   the state: when it is not taken, execution falls through with the frame as it was.
//! - After an instruction that does not fall through (a return, an unconditional branch, an
//!   indirect branch), the next instruction is only reached by a branch: its state is the one
//!   recorded at the first forward branch to it if there is one (shrink-wrapped early exits,
//!   reached before the pushes), else the state before the epilogue that just ended (code
//!   after a mid-function return runs with the body's frame).
//! - Thumb `tbb`/`tbh` tables are skipped (their end is the lowest target they branch to), and
//!   ranges the caller marks as data (ARM `$d` mapping symbols: literal pools) are skipped.
//! - Any other write to SP (`sub sp, sp, r3` for `alloca`) makes SP unknown; the CFA then
//!   comes from the frame pointer if one was set up, else the state is unknown and gives no
//!   rule. Loads into PC, `bx rN` and other indirect branches end the straight line.
//!
//! [`calls::return_sites`] finds the addresses just after call instructions, which a stack
//! scan accepts as return addresses.
//!
//! Never reads memory at sample time: the code is read from the module's file when its rules
//! are built, so a library unmapped during a sample cannot fault the unwinder.
//!
//! # Example
//!
//! A Thumb function `push {r4, lr}; sub sp, #8; ...; add sp, #8; pop {r4, pc}`:
//!
//! ```
//! use unwind_arm_prologue::{analyze, Isa};
//! use unwind_core::arm::{CfaRule, Reg, RegRule};
//!
//! let code: Vec<u8> = [0xb510u16, 0xb082, 0x2000, 0xb002, 0xbd10]
//!     .iter()
//!     .flat_map(|h| h.to_le_bytes())
//!     .collect();
//! let analysis = analyze(&code, 0x1000, Isa::Thumb, &[], &[]);
//! let rule_at = |pc: u64| {
//!     let (_, _, state) = analysis.rows.iter().find(|(s, e, _)| (*s..*e).contains(&pc))?;
//!     state.rule()
//! };
//! // At the push: the return address is still in LR.
//! assert_eq!(rule_at(0x1000).unwrap().pc, RegRule::Register(Reg::Lr));
//! // In the body: 16 bytes below the CFA, LR saved just below it.
//! let body = rule_at(0x1004).unwrap();
//! assert_eq!((body.cfa, body.pc), (CfaRule::RegOffset(Reg::Sp, 16), RegRule::Offset(-4)));
//! // At the final pop, after `add sp, #8`.
//! assert_eq!(rule_at(0x1008).unwrap().cfa, CfaRule::RegOffset(Reg::Sp, 8));
//! ```

#![warn(missing_docs)]
// Input is untrusted (any bytes may be code): no unchecked arithmetic, indexing or unwrapping
// outside tests.
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

pub mod calls;
pub mod decode;

use std::collections::BTreeMap;

use decode::{Decoded, Effect};
use unwind_core::arm::{CfaRule, Reg, RegRule, Rule, Source};

/// The instruction set a function is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// A32 (ARM state): 4-byte instructions.
    Arm,
    /// Thumb-2 (Thumb state): 2- and 4-byte instructions. Thumb functions' symbols have bit 0
    /// set.
    Thumb,
}

/// The frame at one instruction, before it executes, relative to the CFA (SP at the call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameState {
    /// CFA - SP, if known.
    pub sp: Option<i32>,
    /// The frame pointer (r7 or r11) and CFA - its value, once set up from a known SP.
    pub fp: Option<(Reg, i32)>,
    /// Where the caller's LR (the return address) is saved: at CFA + offset; in LR if `None`.
    pub lr: Option<i32>,
    /// Where the caller's r7 is saved (CFA + offset); unchanged if `None`.
    pub r7: Option<i32>,
    /// Where the caller's r11 is saved.
    pub r11: Option<i32>,
    /// Where the caller's r12 is saved.
    pub r12: Option<i32>,
}

impl FrameState {
    /// At a function's first instruction: nothing pushed, the return address in LR.
    pub const ENTRY: FrameState = FrameState {
        sp: Some(0),
        fp: None,
        lr: None,
        r7: None,
        r11: None,
        r12: None,
    };

    /// The CFA: from SP while SP is known, else from the frame pointer.
    fn cfa(&self) -> Option<CfaRule> {
        match (self.sp, self.fp) {
            (Some(sp), _) => Some(CfaRule::RegOffset(Reg::Sp, sp)),
            (None, Some((fp, k))) => Some(CfaRule::RegOffset(fp, k)),
            (None, None) => None,
        }
    }

    /// The rule for this state (source [`Source::Instructions`]), or `None` if the CFA is not
    /// known here.
    pub fn rule(&self) -> Option<Rule> {
        Some(self.rule_with(self.cfa()?))
    }

    /// This state's rule with `cfa` as its CFA.
    fn rule_with(&self, cfa: CfaRule) -> Rule {
        let saved = |o: Option<i32>| o.map_or(RegRule::Same, RegRule::Offset);
        Rule {
            cfa,
            pc: self.lr.map_or(RegRule::Register(Reg::Lr), RegRule::Offset),
            lr: saved(self.lr),
            sp: RegRule::ValOffset(0),
            r12: saved(self.r12),
            r11: saved(self.r11),
            r7: saved(self.r7),
            source: Source::Instructions,
            signal_frame: false,
        }
    }

    /// Whether `rule` (of any source) finds the same CFA, by SP or by the frame pointer, and
    /// the same saved registers as this state.
    pub fn describes(&self, rule: &Rule) -> bool {
        let cfa = match rule.cfa {
            CfaRule::RegOffset(Reg::Sp, k) => self.sp == Some(k),
            CfaRule::RegOffset(r, k) => self.fp == Some((r, k)),
            CfaRule::Expr(_) => false,
        };
        let same = Rule {
            source: rule.source,
            ..self.rule_with(rule.cfa)
        };
        cfa && *rule == same
    }

    /// The slot of tracked register `n`, if tracked.
    fn slot(&mut self, n: u32) -> Option<&mut Option<i32>> {
        match n {
            7 => Some(&mut self.r7),
            11 => Some(&mut self.r11),
            12 => Some(&mut self.r12),
            14 => Some(&mut self.lr),
            _ => None,
        }
    }

    /// The state after `effect` (which executes unconditionally).
    fn apply(mut self, effect: Effect) -> FrameState {
        match effect {
            Effect::Push(mask) => {
                let n = mask.count_ones() as i32; // at most 16
                self.sp = self.sp.and_then(|sp| sp.checked_add(n.wrapping_mul(4)));
                if let Some(sp) = self.sp {
                    // The lowest-numbered register is stored at the new SP.
                    let mut at = sp.wrapping_neg();
                    for r in (0..16).filter(|r| mask & (1 << r) != 0) {
                        if let Some(slot) = self.slot(r) {
                            // A register saved twice: the first save holds the caller's value.
                            slot.get_or_insert(at);
                        }
                        at = at.wrapping_add(4);
                    }
                }
            }
            Effect::Pop(mask) => {
                let n = mask.count_ones() as i32;
                self.sp = self.sp.and_then(|sp| sp.checked_sub(n.wrapping_mul(4)));
                for r in (0..16).filter(|r| mask & (1 << r) != 0) {
                    if let Some(slot) = self.slot(r) {
                        *slot = None;
                    }
                    if self
                        .fp
                        .is_some_and(|(fp, _)| Some(fp) == Reg::from_number(r as u16))
                    {
                        self.fp = None;
                    }
                }
            }
            Effect::SpAdd(v) => self.sp = self.sp.and_then(|sp| sp.checked_sub(v)),
            Effect::SetFp { fp, offset } => {
                self.fp = match (self.sp, Reg::from_number(u16::from(fp))) {
                    (Some(sp), Some(r)) => sp.checked_sub(offset).map(|k| (r, k)),
                    _ => None,
                }
            }
            Effect::SpFromFp { fp, offset } => {
                self.sp = match self.fp {
                    Some((r, k)) if Some(r) == Reg::from_number(u16::from(fp)) => {
                        k.checked_sub(offset)
                    }
                    _ => None,
                }
            }
            Effect::FpAdd { fp, offset } => {
                self.fp = match self.fp {
                    Some((r, k)) if Some(r) == Reg::from_number(u16::from(fp)) => {
                        k.checked_sub(offset).map(|k| (r, k))
                    }
                    other => other,
                }
            }
            Effect::Writes(mask) => {
                if self.fp.is_some_and(|(r, _)| {
                    (r == Reg::R7 && mask & 0x80 != 0) || (r == Reg::R11 && mask & 0x800 != 0)
                }) {
                    self.fp = None;
                }
            }
            Effect::SpUnknown => self.sp = None,
            Effect::None
            | Effect::Return
            | Effect::Branch(_)
            | Effect::IndirectBranch
            | Effect::TableBranch { .. }
            | Effect::It(_)
            | Effect::Trap => {}
        }
        // SP above the CFA: not a frame this reading understands.
        if self.sp.is_some_and(|sp| sp < 0) {
            self.sp = None;
        }
        self
    }
}

/// What [`analyze`] found: the frame state at every instruction it read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// `[start, end)` address ranges with their state, in address order; adjacent ranges with
    /// the same state are merged. Data ranges and the bytes of a last incomplete instruction
    /// have none.
    pub rows: Vec<(u64, u64, FrameState)>,
    /// The epilogues read to their end (a return or a tail branch): `[start, end)` from the
    /// instruction after the first one that raised SP to the end of the return, with the state
    /// before the epilogue began (the body's).
    pub epilogues: Vec<(u64, u64, FrameState)>,
    /// Instructions read.
    pub instructions: u64,
}

impl Analysis {
    /// The rows as rules: ranges whose CFA is unknown are left out, adjacent equal rules merged.
    pub fn rules(&self) -> Vec<(u64, u64, Rule)> {
        let mut out: Vec<(u64, u64, Rule)> = Vec::new();
        for &(start, end, state) in &self.rows {
            let Some(rule) = state.rule() else { continue };
            match out.last_mut() {
                Some((_, e, r)) if *e == start && *r == rule => *e = end,
                _ => out.push((start, end, rule)),
            }
        }
        out
    }

    /// Whether some instruction's state is described by `rule` (see
    /// [`FrameState::describes`]).
    pub fn agrees_with(&self, rule: &Rule) -> bool {
        self.rows.iter().any(|(_, _, s)| s.describes(rule))
    }

    fn push(&mut self, start: u64, end: u64, state: FrameState) {
        match self.rows.last_mut() {
            Some((_, e, s)) if *e == start && *s == state => *e = end,
            _ => self.rows.push((start, end, state)),
        }
    }
}

/// Reads the function whose code is `code`, at address `start` (bit 0 clear), written in
/// `isa`. `data` lists `[start, end)` ranges inside it that hold data, not code (from `$d`
/// mapping symbols), sorted; they are skipped. `starts` lists addresses inside it where other
/// functions start (symbols: a stripped library's EHABI entry may cover several functions),
/// sorted; the frame there is a function's entry again.
pub fn analyze(code: &[u8], start: u64, isa: Isa, data: &[(u64, u64)], starts: &[u64]) -> Analysis {
    let mut out = Analysis::default();
    let end = start.saturating_add(code.len() as u64);
    let mut state = FrameState::ENTRY;
    // The state before the epilogue under way began, and where its rows begin, if one is.
    let mut resume: Option<FrameState> = None;
    let mut epilogue_from = start;
    let mut next_start = 0usize;
    // The states at forward branches, by target.
    let mut targets: BTreeMap<u64, FrameState> = BTreeMap::new();
    // The previous instruction did not fall through.
    let mut after_jump = false;
    // Instructions left in the current Thumb `IT` block.
    let mut it_left = 0u8;
    let mut addr = start;
    while addr < end {
        if let Some(&(_, data_end)) = data.iter().find(|&&(s, e)| s <= addr && addr < e) {
            addr = data_end.max(addr.saturating_add(1));
            after_jump = true;
            continue;
        }
        let offset = addr.wrapping_sub(start) as usize; // addr < end = start + code.len()
        let Some(ins) = decode_at(code, offset, addr, isa) else {
            break;
        };
        let next = addr.saturating_add(u64::from(ins.len));
        while starts.get(next_start).is_some_and(|&s| s < addr) {
            next_start = next_start.saturating_add(1);
        }
        if starts.get(next_start) == Some(&addr) {
            // Another function: nothing of this one's frame carries over.
            state = FrameState::ENTRY;
            resume = None;
            targets.clear();
            it_left = 0;
        } else if after_jump {
            state = targets.remove(&addr).unwrap_or(state);
        }
        after_jump = false;
        out.push(addr, next.min(end), state);
        out.instructions = out.instructions.saturating_add(1);
        let conditional = ins.conditional || it_left > 0;
        it_left = it_left.saturating_sub(1);
        let mut skip_to = next;
        match ins.effect {
            Effect::It(n) => it_left = n,
            Effect::Branch(t) if t > addr && t < end => {
                targets.entry(t).or_insert(state);
            }
            Effect::TableBranch { half } if !conditional => {
                skip_to = table_end(code, start, next, half, |t| {
                    targets.entry(t).or_insert(state);
                })
                .unwrap_or(end);
            }
            _ => {}
        }
        if !conditional {
            let before = state;
            state = state.apply(ins.effect);
            match ins.effect {
                Effect::Push(_) => resume = None,
                Effect::SpAdd(v) if v < 0 => resume = None,
                Effect::Pop(_) | Effect::SpAdd(_) | Effect::SpFromFp { .. } if resume.is_none() => {
                    resume = Some(before);
                    epilogue_from = next;
                }
                _ => {}
            }
            let jumps = match ins.effect {
                Effect::Pop(mask) => mask & 0x8000 != 0,
                Effect::Return
                | Effect::Branch(_)
                | Effect::IndirectBranch
                | Effect::TableBranch { .. }
                | Effect::Trap => true,
                _ => false,
            };
            if jumps {
                after_jump = true;
                // Code after the epilogue runs with the body's frame.
                if let Some(body) = resume.take() {
                    if epilogue_from < next {
                        out.epilogues.push((epilogue_from, next.min(end), body));
                    }
                    state = body;
                }
            }
        }
        addr = skip_to;
    }
    out
}

/// The instruction at `code[offset..]` (address `addr`), if complete.
fn decode_at(code: &[u8], offset: usize, addr: u64, isa: Isa) -> Option<Decoded> {
    let half = |o: usize| -> Option<u16> {
        let b = code.get(o..o.checked_add(2)?)?;
        Some(u16::from_le_bytes([*b.first()?, *b.get(1)?]))
    };
    match isa {
        Isa::Arm => {
            let lo = half(offset)?;
            let hi = half(offset.checked_add(2)?)?;
            Some(decode::arm(u32::from(hi) << 16 | u32::from(lo), addr))
        }
        Isa::Thumb => decode::thumb(half(offset)?, offset.checked_add(2).and_then(half), addr),
    }
}

/// The end of the `tbb` (`half` false) or `tbh` table at `table` (the address after the
/// instruction, which is also the base its offsets count from, in halfwords): the lowest target
/// of the entries read before it. Each target is passed to `target`. `None` if the code ends
/// first.
fn table_end(
    code: &[u8],
    start: u64,
    table: u64,
    half: bool,
    mut target: impl FnMut(u64),
) -> Option<u64> {
    let size = if half { 2 } else { 1 };
    let mut end = u64::MAX;
    let mut at = table;
    while at < end {
        let o = usize::try_from(at.checked_sub(start)?).ok()?;
        let entry = match half {
            false => u64::from(*code.get(o)?),
            true => u64::from(u16::from_le_bytes([
                *code.get(o)?,
                *code.get(o.checked_add(1)?)?,
            ])),
        };
        let t = table.checked_add(entry.checked_mul(2)?)?;
        // A target inside the table read so far would make the table end before this entry.
        if t > at {
            target(t);
            end = end.min(t);
        }
        at = at.checked_add(size)?;
    }
    // The next instruction is halfword-aligned.
    at.checked_add(at & 1)
}

#[cfg(test)]
mod tests;
