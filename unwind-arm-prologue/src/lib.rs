//! Unwind rules for 32-bit ARM (A32) and Thumb-2 functions, read from their instructions; and,
//! in [`a64`], for 64-bit ARM (A64) functions that no unwind table describes.
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
//! - `EXIDX_CANTUNWIND` entries, which GCC gives every function that cannot throw in code built
//!   without `-funwind-tables` (most of armhf glibc and libstdc++, libgcc's unwinder): a
//!   function's states are used only where its exits confirm the reading
//!   ([`Analysis::confirmed_rules`]): it returns or tail-calls with SP back at the CFA and the
//!   return address where the entry had it, never otherwise. Functions that never return
//!   (`_start`, thread entries) keep the entry's stop.
//!
//! Where the return address is: in LR at the entry, then in its save slot once pushed. A call
//! or any other write to LR while it holds the return address loses it, and so does raising SP
//! above its save slot (a signal handler's frame may overwrite the slot at any moment): such a
//! state gives no rule rather than a wrong caller. `ldr lr, [sp, #n]` from the save slot puts
//! it back in LR. A second push of LR marks a block of saved registers built for other code
//! ([`Analysis::register_blocks`]), whose slots that code may rewrite: its function gets no
//! rule.
//!
//! How the straight-line reading handles control flow:
//! - An instruction with a condition (A32 condition field, Thumb `IT` block, and Thumb's
//!   conditional branches `b<c>`, `cbz`, `cbnz`) does not change the state: when it is not
//!   taken, execution falls through with the frame as it was.
//! - After an instruction that does not fall through (a return, an unconditional branch, an
//!   indirect branch), the next instruction is only reached by a branch: its state is the one
//!   recorded at the first forward branch to it if there is one (shrink-wrapped early exits,
//!   reached before the pushes), else the state before the epilogue that just ended (code
//!   after a mid-function return runs with the body's frame). That last state is a guess
//!   ([`Analysis::guessed`]): the code may be another function no symbol names. A state
//!   recorded at a branch read in a guess is a guess too; the guess ends where a branch read
//!   with a known state lands, or at a function start.
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

pub mod a64;
pub mod calls;
pub mod decode;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

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
    /// LR itself still holds the return address: nothing (a call, a load) has overwritten it
    /// since the entry, or it was reloaded from a save slot. Where it does not and no save slot
    /// above SP holds it (a slot below SP may be overwritten by a signal handler's frame at any
    /// moment), the return address is lost and the state gives no rule.
    pub lr_holds_return: bool,
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
        lr_holds_return: true,
    };

    /// The CFA: from SP while SP is known, else from the frame pointer.
    fn cfa(&self) -> Option<CfaRule> {
        match (self.sp, self.fp) {
            (Some(sp), _) => Some(CfaRule::RegOffset(Reg::Sp, sp)),
            (None, Some((fp, k))) => Some(CfaRule::RegOffset(fp, k)),
            (None, None) => None,
        }
    }

    /// The rule for this state (source [`Source::Instructions`]), or `None` if the CFA or the
    /// return address is not known here.
    pub fn rule(&self) -> Option<Rule> {
        if self.lr_lost() {
            return None;
        }
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
        cfa && !self.lr_lost() && *rule == same
    }

    /// The return address is nowhere known (see [`FrameState::lr_holds_return`]).
    pub fn lr_lost(&self) -> bool {
        self.lr.is_none() && !self.lr_holds_return
    }

    /// Whether the frame is the entry's again, as it must be where the function returns or
    /// tail-calls: SP back at the CFA, the return address in LR.
    fn at_entry(&self) -> bool {
        self.sp == Some(0) && self.lr.is_none() && self.lr_holds_return
    }

    /// Whether `pop` of `mask` (with PC) here returns to the caller: it loads PC from the
    /// return address's save slot and leaves SP at the CFA.
    fn pops_return(&self, mask: u16) -> bool {
        let n = mask.count_ones() as i32; // at most 16
                                          // PC, the highest register, is loaded from the highest slot, just below the CFA.
        self.sp == Some(n.wrapping_mul(4)) && self.lr == Some(-4)
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
                        if r == 14 {
                            // LR saves the return address only while it holds it; a second
                            // save is a register block (see `Analysis::register_blocks`).
                            if self.lr_holds_return && self.lr.is_none() {
                                self.lr = Some(at);
                            }
                        } else if let Some(slot) = self.slot(r) {
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
                    if r == 14 {
                        // LR popped holds the return address if it was saved.
                        self.lr_holds_return = self.lr.is_some();
                    }
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
            Effect::LoadSp { reg, offset } => {
                let n = u32::from(reg);
                // The load's address, relative to the CFA.
                let from = self.sp.and_then(|sp| offset.checked_sub(sp));
                if from.is_some() && n == 14 && from == self.lr {
                    // The return address is back in LR.
                    self.lr_holds_return = true;
                    return self;
                }
                match self.slot(n) {
                    // The caller's value is back in the register.
                    Some(slot) if slot.is_some() && *slot == from => *slot = None,
                    _ => return self.apply(Effect::Writes(1 << n)),
                }
                if self
                    .fp
                    .is_some_and(|(r, _)| Some(r) == Reg::from_number(reg.into()))
                {
                    self.fp = None;
                }
            }
            Effect::Writes(mask) => {
                if self.fp.is_some_and(|(r, _)| {
                    (r == Reg::R7 && mask & 0x80 != 0) || (r == Reg::R11 && mask & 0x800 != 0)
                }) {
                    self.fp = None;
                }
                if mask & 1 << 14 != 0 {
                    self.lr_holds_return = false;
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
        // A save slot below SP may be overwritten by a signal handler's frame at any moment: a
        // register saved there has no known value.
        if let Some(sp) = self.sp {
            let below = |o: Option<i32>| o.is_some_and(|o| o < sp.wrapping_neg());
            for slot in [&mut self.lr, &mut self.r7, &mut self.r11, &mut self.r12] {
                if below(*slot) {
                    *slot = None;
                }
            }
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
    /// Where the reading started from a function's entry frame: the start of the code, and
    /// each function start met ([`analyze`]'s `starts`).
    pub entries: Vec<u64>,
    /// Where the code leaves its function, read with a known frame: returns (conditional or
    /// not) and unconditional branches out of the code read (tail calls), each with whether
    /// the frame there is the entry's again (SP back at the CFA, and the return address
    /// loaded from its save slot or still in LR). A reading that leaves through an exit that
    /// is not is a misreading (another instruction set, code that is not a function's start).
    pub exits: Vec<(u64, bool)>,
    /// Of [`Analysis::exits`], those that return (load PC from the return address or branch
    /// to it), not branches out of the code: a misreading leaves through branches more often
    /// than through a return with the entry's frame.
    pub returns: Vec<u64>,
    /// Where LR is pushed while a save slot already holds the return address: not a frame's
    /// prologue but a block of saved registers built for other code to read and rewrite (the
    /// wrappers of libgcc's ARM unwinder, `_Unwind_RaiseException` and its siblings, pass theirs
    /// to `__gnu_Unwind_RaiseException`, which rewrites the saved PC and LR as it unwinds):
    /// no slot of it can be trusted, and its function is never confirmed.
    pub register_blocks: Vec<u64>,
    /// Ranges whose state is a guess: after an instruction that does not fall through, code
    /// that no forward branch read with a known state leads to and no function start names (the
    /// body's frame, or the state of a branch read in the guess, is assumed; it may be another
    /// function that no symbol names), up to where such a branch or a function start is met.
    pub guessed: Vec<(u64, u64)>,
}

impl Analysis {
    /// The rows as rules: ranges whose CFA or return address is unknown are left out, and so
    /// are the functions with a register block ([`Analysis::register_blocks`]); adjacent equal
    /// rules merged.
    pub fn rules(&self) -> Vec<(u64, u64, Rule)> {
        let mut out = Vec::new();
        for (from, to) in self.functions() {
            if !self.has_register_block(from, to) {
                self.push_rules(from, to, &[], &mut out);
            }
        }
        out
    }

    /// `[start, end)` of each function read: from each of [`Analysis::entries`] to the next.
    fn functions(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.entries.iter().enumerate().map(|(i, &from)| {
            let to = self.entries.get(i.saturating_add(1));
            (from, to.copied().unwrap_or(u64::MAX))
        })
    }

    fn has_register_block(&self, from: u64, to: u64) -> bool {
        self.register_blocks.iter().any(|b| (from..to).contains(b))
    }

    /// Pushes the rules of the rows inside `[from, to)`, outside `skip` (sorted), onto `out`,
    /// merging equal neighbours.
    fn push_rules(&self, from: u64, to: u64, skip: &[(u64, u64)], out: &mut Vec<(u64, u64, Rule)>) {
        // Rows are in address order.
        let lo = self.rows.partition_point(|r| r.1 <= from);
        let hi = self.rows.partition_point(|r| r.0 < to);
        for &(start, end, state) in self.rows.get(lo..hi).unwrap_or(&[]) {
            let (start, end) = (start.max(from), end.min(to));
            let Some(rule) = state.rule().filter(|_| start < end) else {
                continue;
            };
            for (s, e) in outside(start, end, skip) {
                match out.last_mut() {
                    Some((_, le, r)) if *le == s && *r == rule => *le = e,
                    _ => out.push((s, e, rule)),
                }
            }
        }
    }

    /// Whether some instruction's state is described by `rule` (see
    /// [`FrameState::describes`]).
    pub fn agrees_with(&self, rule: &Rule) -> bool {
        self.rows.iter().any(|(_, _, s)| s.describes(rule))
    }

    /// The rules of the functions whose reading its exits confirm, for code that no table
    /// describes usefully (an EHABI `EXIDX_CANTUNWIND` entry covers functions that cannot
    /// throw, not only the ends of stacks): from each of [`Analysis::entries`] to the next is
    /// one function, confirmed when at least one of its exits returns and every one leaves the
    /// entry's frame ([`Analysis::exits`], [`Analysis::returns`]). [`Analysis::guessed`]
    /// ranges are left out. A function that never returns (`_start`, a thread's entry, code
    /// after `clone`) has no exit, and gets no rule; nor does one that only branches out (a
    /// misreading of the other instruction set does that by chance: an A32 `b` is a Thumb-2
    /// `and.w`'s second halfword and the next instruction's first).
    pub fn confirmed_rules(&self) -> Vec<(u64, u64, Rule)> {
        let mut out = Vec::new();
        for (from, to) in self.functions() {
            // Exits are in address order.
            let lo = self.exits.partition_point(|e| e.0 < from);
            let hi = self.exits.partition_point(|e| e.0 < to);
            let exits = self.exits.get(lo..hi).unwrap_or(&[]);
            let returns = self.returns.partition_point(|&r| r < to)
                > self.returns.partition_point(|&r| r < from);
            if !returns || exits.iter().any(|e| !e.1) || self.has_register_block(from, to) {
                continue;
            }
            self.push_rules(from, to, &self.guessed, &mut out);
        }
        out
    }

    /// Appends the analysis of the code that follows this one's.
    fn append(&mut self, next: Analysis) {
        for (s, e, state) in next.rows {
            self.push(s, e, state);
        }
        self.epilogues.extend(next.epilogues);
        self.instructions = self.instructions.saturating_add(next.instructions);
        self.entries.extend(next.entries);
        self.exits.extend(next.exits);
        self.returns.extend(next.returns);
        self.register_blocks.extend(next.register_blocks);
        self.guessed.extend(next.guessed);
    }

    fn push(&mut self, start: u64, end: u64, state: FrameState) {
        match self.rows.last_mut() {
            Some((_, e, s)) if *e == start && *s == state => *e = end,
            _ => self.rows.push((start, end, state)),
        }
    }
}

/// The states recorded at forward branches, by target, for the straight-line reading, each with
/// whether it was recorded while the reading was a guess (see [`Analysis::guessed`]): a state
/// read from a guess is one too. A heap of `(target, order)` over the states in the order
/// recorded, so that passed targets are dropped as the reading moves on (the reading only moves
/// forward).
#[derive(Default)]
struct Targets {
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    states: Vec<(FrameState, bool)>,
}

impl Targets {
    fn record(&mut self, target: u64, state: FrameState, guessed: bool) {
        self.heap.push(Reverse((target, self.states.len())));
        self.states.push((state, guessed));
    }

    /// The state recorded for `addr` (the first one recorded from a known state, else the
    /// first one recorded at all) and whether it is a guess, dropping every target up to it.
    fn take(&mut self, addr: u64) -> Option<(FrameState, bool)> {
        let mut found: Option<(FrameState, bool)> = None;
        while let Some(&Reverse((t, i))) = self.heap.peek() {
            if t > addr {
                break;
            }
            self.heap.pop();
            if t != addr {
                continue;
            }
            // The heap pops equal targets in the order recorded.
            match (found, self.states.get(i).copied()) {
                (None, Some(s)) => found = Some(s),
                (Some((_, true)), Some(s @ (_, false))) => found = Some(s),
                _ => {}
            }
        }
        found
    }

    /// Whether a target at or before `addr` is still waiting to be taken.
    fn pending_at(&self, addr: u64) -> bool {
        self.heap.peek().is_some_and(|&Reverse((t, _))| t <= addr)
    }
}

/// The parts of `[start, end)` outside `ranges` (sorted, not overlapping).
fn outside(start: u64, end: u64, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = start;
    let first = ranges.partition_point(|r| r.1 <= start);
    for &(s, e) in ranges.get(first..).unwrap_or(&[]) {
        if s >= end {
            break;
        }
        if s > at {
            out.push((at, s));
        }
        at = at.max(e);
    }
    if at < end {
        out.push((at, end));
    }
    out
}

/// Reads the function whose code is `code`, at address `start` (bit 0 clear), written in
/// `isa`. `data` lists `[start, end)` ranges inside it that hold data, not code (from `$d`
/// mapping symbols), sorted; they are skipped. `starts` lists addresses inside it where other
/// functions start (symbols: a stripped library's EHABI entry may cover several functions),
/// sorted; the frame there is a function's entry again.
pub fn analyze(code: &[u8], start: u64, isa: Isa, data: &[(u64, u64)], starts: &[u64]) -> Analysis {
    analyze_functions(code, start, isa, data, starts, 1)
}

/// Like [`analyze`], for [`Analysis::confirmed_rules`], which leaves out code read as a guess:
/// code reached only by a backward branch (a loop's body placed before its test, which
/// compilers enter by a jump to the test) is a guess on the first reading; the state at each
/// backward branch read with a known state is the state at its target, and the function is
/// read again with those states, until none is new (at most [`MAX_READINGS`] times in all).
/// The exits read in that code then count too.
pub fn analyze_to_confirm(
    code: &[u8],
    start: u64,
    isa: Isa,
    data: &[(u64, u64)],
    starts: &[u64],
) -> Analysis {
    analyze_functions(code, start, isa, data, starts, MAX_READINGS)
}

/// How many times [`analyze_to_confirm`] reads a function at most.
pub const MAX_READINGS: usize = 4;

/// Reads each function of the code on its own (the reading starts afresh at each start
/// anyway), so that reading one again reads only it, at most `readings` times.
fn analyze_functions(
    code: &[u8],
    start: u64,
    isa: Isa,
    data: &[(u64, u64)],
    starts: &[u64],
    readings: usize,
) -> Analysis {
    let end = start.saturating_add(code.len() as u64);
    let mut out = Analysis::default();
    let mut bounds: Vec<u64> = Vec::with_capacity(starts.len().saturating_add(2));
    bounds.push(start);
    bounds.extend(starts.iter().copied().filter(|&s| start < s && s < end));
    bounds.push(end);
    for w in bounds.windows(2) {
        let &[from, to] = w else { continue };
        // start <= from < to <= end.
        let offset = |a: u64| usize::try_from(a.wrapping_sub(start)).ok();
        let Some(function) = offset(from)
            .zip(offset(to))
            .and_then(|(lo, hi)| code.get(lo..hi))
        else {
            continue;
        };
        out.append(read_function(function, from, isa, data, readings));
    }
    out
}

/// One function's code, read again with the states found at backward branches into code read
/// as a guess, until none is new or it was read `readings` times.
fn read_function(
    code: &[u8],
    start: u64,
    isa: Isa,
    data: &[(u64, u64)],
    readings: usize,
) -> Analysis {
    let mut seeds: Vec<(u64, FrameState)> = Vec::new();
    let (mut out, mut backward) = read(code, start, isa, data, &seeds);
    for _ in 1..readings {
        // Reading again only adds exits (in code that was a guess): a function already left
        // through a bad exit, or holding a register block, is never confirmed.
        if out.exits.iter().any(|e| !e.1) || !out.register_blocks.is_empty() {
            break;
        }
        let before = seeds.len();
        for (t, state) in backward {
            let in_guess = out.guessed.iter().any(|&(s, e)| s <= t && t < e);
            if in_guess && seeds.iter().all(|s| s.0 != t) {
                seeds.push((t, state));
            }
        }
        if seeds.len() == before {
            break;
        }
        seeds.sort_by_key(|s| s.0);
        (out, backward) = read(code, start, isa, data, &seeds);
    }
    out
}

/// One straight-line reading of one function's code, with the states known at `seeds` (sorted
/// by address; backward branches' targets). Returns the analysis and the backward branches
/// read with a known state, as (target, state).
fn read(
    code: &[u8],
    start: u64,
    isa: Isa,
    data: &[(u64, u64)],
    seeds: &[(u64, FrameState)],
) -> (Analysis, Vec<(u64, FrameState)>) {
    let mut out = Analysis {
        entries: vec![start],
        ..Analysis::default()
    };
    let mut backward = Vec::new();
    let seed_at = |addr: u64| {
        seeds
            .binary_search_by_key(&addr, |s| s.0)
            .ok()
            .and_then(|i| seeds.get(i))
            .map(|s| s.1)
    };
    let end = start.saturating_add(code.len() as u64);
    let mut state = FrameState::ENTRY;
    // The state is a guess (see `Analysis::guessed`) from this address on, if it is.
    let mut guessed_from: Option<u64> = None;
    // The state may differ from the last row's.
    let mut changed = true;
    // The state before the epilogue under way began, and where its rows begin, if one is.
    let mut resume: Option<FrameState> = None;
    let mut epilogue_from = start;
    // The states at forward branches, by target.
    let mut targets = Targets::default();
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
                                                        // Most instructions are plain (see `decode::thumb16_is_plain`): their row is the
                                                        // previous instruction's state, and nothing else changes. Not while the reading is a
                                                        // guess that a branch from known code may end here.
        let ends_guess = guessed_from.is_some()
            && (targets.pending_at(addr) || (!seeds.is_empty() && seed_at(addr).is_some()));
        if isa == Isa::Thumb && !after_jump && !ends_guess {
            let plain = code
                .get(offset..offset.saturating_add(2))
                .and_then(|b| Some(u16::from_le_bytes([*b.first()?, *b.get(1)?])))
                .filter(|&h| decode::thumb16_is_plain(h));
            if plain.is_some() {
                let next = addr.saturating_add(2).min(end);
                match out.rows.last_mut() {
                    Some((_, e, _)) if !changed && *e == addr => *e = next,
                    _ => out.push(addr, next, state),
                }
                changed = false;
                out.instructions = out.instructions.saturating_add(1);
                it_left = it_left.saturating_sub(1);
                addr = next;
                continue;
            }
        }
        let Some(ins) = decode_at(code, offset, addr, isa) else {
            break;
        };
        let next = addr.saturating_add(u64::from(ins.len));
        let known = if after_jump || ends_guess {
            match (targets.take(addr), seed_at(addr)) {
                // A branch from known code lands here: its state is known.
                (Some((s, false)), _) | (_, Some(s)) => {
                    state = s;
                    changed = true;
                    true
                }
                // Reached only from code read as a guess: its state is one too.
                (Some((s, true)), None) if after_jump => {
                    state = s;
                    changed = true;
                    guessed_from.get_or_insert(addr);
                    false
                }
                (Some(_), None) => false,
                (None, None) => {
                    if after_jump {
                        guessed_from.get_or_insert(addr);
                    }
                    false
                }
            }
        } else {
            false
        };
        if known {
            if let Some(from) = guessed_from.take() {
                out.guessed.push((from, addr));
            }
        }
        after_jump = false;
        match out.rows.last_mut() {
            // Most instructions leave the frame as it was: extend the row without comparing.
            Some((_, e, _)) if !changed && *e == addr => *e = next.min(end),
            _ => out.push(addr, next.min(end), state),
        }
        changed = false;
        out.instructions = out.instructions.saturating_add(1);
        let conditional = ins.conditional || it_left > 0;
        it_left = it_left.saturating_sub(1);
        let exit = match ins.effect {
            Effect::Return => Some(state.at_entry()),
            Effect::Pop(mask) if mask & 0x8000 != 0 => Some(state.pops_return(mask)),
            Effect::Branch(t) if !conditional && !(start..end).contains(&t) => {
                Some(state.at_entry())
            }
            _ => None,
        };
        if let (Some(good), None) = (exit, guessed_from) {
            out.exits.push((addr, good));
            if !matches!(ins.effect, Effect::Branch(_)) {
                out.returns.push(addr);
            }
        }
        let mut skip_to = next;
        match ins.effect {
            Effect::It(n) => it_left = n,
            Effect::Branch(t) if t > addr && t < end => {
                targets.record(t, state, guessed_from.is_some());
            }
            // A loop's branch back, read with a known state.
            Effect::Branch(t) if t <= addr && t >= start && guessed_from.is_none() => {
                backward.push((t, state));
            }
            Effect::TableBranch { half } if !conditional => {
                let guessed = guessed_from.is_some();
                skip_to = table_end(code, start, next, half, |t| {
                    targets.record(t, state, guessed);
                })
                .unwrap_or(end);
            }
            _ => {}
        }
        if let (Effect::Push(mask), Some(_)) = (ins.effect, state.lr) {
            if mask & 1 << 14 != 0 && guessed_from.is_none() {
                out.register_blocks.push(addr);
            }
        }
        if !conditional && ins.effect != Effect::None {
            let before = state;
            state = state.apply(ins.effect);
            changed = state != before;
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
                    changed = true;
                }
            }
        }
        addr = skip_to;
    }
    if let Some(from) = guessed_from {
        out.guessed.push((from, addr.min(end)));
    }
    (out, backward)
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
