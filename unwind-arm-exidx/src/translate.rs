//! Turning an entry's unwinding instructions into one [`Rule`] by simulating the virtual stack
//! pointer symbolically.
//!
//! `vsp` is kept as a base register (SP at first) plus a byte offset. A pop records each
//! tracked register (r7, r11, r12, r13, r14, r15) at `base + offset` and advances the offset by 4;
//! other pops and `vsp` additions only move the offset. At the end the CFA is `base + offset`
//! and every saved register is at `CFA + (saved offset - final offset)`.

use unwind_core::arm::{CfaRule, Reg, RegRule, Rule, Source};

use crate::decode::{DecodeError, Instruction};
use crate::ExidxDropReason;

/// The symbolic virtual register state.
struct State {
    /// The register `vsp` was last set from (its value in the callee: it has not been popped).
    base: Reg,
    /// `vsp - base`, in bytes.
    offset: i64,
    /// Where each tracked register (indexed by [`Reg`]) was popped from, as `vsp - base` then.
    saved: [Option<i64>; 6],
    /// r13 has been popped: `vsp` is now a value loaded from the stack.
    sp_popped: bool,
}

impl State {
    /// Pops the core registers of `mask` (bit `n` = `r[n]`), lowest first.
    fn pop(&mut self, mask: u16) {
        for n in 0..16u16 {
            if mask & (1 << n) != 0 {
                if let Some(slot) = Reg::from_number(n).and_then(|r| self.saved.get_mut(r as usize))
                {
                    *slot = Some(self.offset);
                }
                // Far from saturating: `translate_decoded` keeps offsets within 2^40.
                self.offset = self.offset.saturating_add(4);
            }
        }
        // The loaded r13 replaces vsp only after the whole instruction.
        if mask & (1 << 13) != 0 {
            self.sp_popped = true;
        }
    }

    fn saved(&self, r: Reg) -> Result<Option<RegRule>, ExidxDropReason> {
        self.saved
            .get(r as usize)
            .copied()
            .flatten()
            .map(|o| {
                i32::try_from(o.saturating_sub(self.offset))
                    .map(RegRule::Offset)
                    .map_err(|_| ExidxDropReason::OffsetOutOfRange)
            })
            .transpose()
    }

    fn rule(&self) -> Result<Rule, ExidxDropReason> {
        let cfa = i32::try_from(self.offset).map_err(|_| ExidxDropReason::OffsetOutOfRange)?;
        let same = |r: Option<RegRule>| r.unwrap_or(RegRule::Same);
        let lr = self.saved(Reg::Lr)?;
        Ok(Rule {
            cfa: CfaRule::RegOffset(self.base, cfa),
            // Without a popped PC the caller's PC is the (virtual) LR after the instructions.
            pc: self
                .saved(Reg::Pc)?
                .or(lr)
                .unwrap_or(RegRule::Register(Reg::Lr)),
            lr: same(lr),
            sp: self.saved(Reg::Sp)?.unwrap_or(RegRule::ValOffset(0)),
            r12: same(self.saved(Reg::R12)?),
            r11: same(self.saved(Reg::R11)?),
            r7: same(self.saved(Reg::R7)?),
            source: Source::Exidx,
            signal_frame: false,
        })
    }
}

/// Translates a decoded instruction list (as [`crate::decode()`] returns it) into a rule, or says
/// why it cannot be represented.
pub fn translate<I: IntoIterator<Item = Instruction>>(
    instructions: I,
) -> Result<Rule, ExidxDropReason> {
    translate_decoded(instructions.into_iter().map(Ok))
}

/// [`translate`] over a lazy decoder: a decoding error counts only if reached.
pub(crate) fn translate_decoded<I: Iterator<Item = Result<Instruction, DecodeError>>>(
    instructions: I,
) -> Result<Rule, ExidxDropReason> {
    let mut s = State {
        base: Reg::Sp,
        offset: 0,
        saved: [None; 6],
        sp_popped: false,
    };
    for ins in instructions {
        let ins = ins.map_err(|e| match e {
            DecodeError::Truncated { .. } => ExidxDropReason::Truncated,
            DecodeError::Overflow { .. } => ExidxDropReason::OffsetOutOfRange,
        })?;
        match ins {
            Instruction::Finish => break,
            Instruction::RefuseToUnwind => return Err(ExidxDropReason::RefuseToUnwind),
            Instruction::Spare(_) => return Err(ExidxDropReason::Spare),
            Instruction::Reserved(_) => return Err(ExidxDropReason::Reserved),
            Instruction::SetVspFromReg(13 | 15) => return Err(ExidxDropReason::Reserved),
            Instruction::RaAuthModifier => continue,
            _ => {}
        }
        // Everything else reads or moves vsp, which is a loaded value after a pop of r13.
        if s.sp_popped {
            return Err(ExidxDropReason::SpPopped);
        }
        match ins {
            Instruction::VspSub(n) => s.offset = s.offset.saturating_sub(i64::from(n)),
            Instruction::PopMask(mask) => s.pop(mask),
            Instruction::PopLowMask(mask) => s.pop(u16::from(mask & 0x0f)),
            Instruction::PopR4ToRn { n, lr } => {
                let range = (4..=n.min(15)).fold(0u16, |m, r| m | (1 << r));
                s.pop(range | if lr { 1 << 14 } else { 0 });
            }
            Instruction::SetVspFromReg(n) => {
                let r = Reg::from_number(u16::from(n))
                    .ok_or(ExidxDropReason::VspFromUntrackedRegister)?;
                if s.saved.iter().any(Option::is_some) {
                    return Err(ExidxDropReason::BaseSwitchAfterSave);
                }
                s.base = r;
                s.offset = 0;
            }
            other => {
                // Only vsp moves are left (the other instructions were handled above).
                let n = other.vsp_advance().ok_or(ExidxDropReason::Reserved)?;
                s.offset = s.offset.saturating_add(i64::from(n));
            }
        }
        // Keep far inside i64; the final offsets are checked against i32.
        if s.offset.unsigned_abs() > 1 << 40 {
            return Err(ExidxDropReason::OffsetOutOfRange);
        }
    }
    s.rule()
}
