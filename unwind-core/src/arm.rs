//! 32-bit ARM (armv7, ARM and Thumb-2): the tracked registers (r15 = PC, r14 = LR, r13 = SP,
//! r12, r11 = the ARM frame pointer, r7 = the Thumb frame pointer), their typed rules, their
//! simple cached forms, and how each applies ([`Arm`]).
//!
//! Rules come from DWARF CFI, from EHABI unwind tables (`.ARM.exidx`) or from reading a
//! function's instructions; [`Rule::source`] says which, because EXIDX describes a function
//! only after its prologue. Addresses are 32-bit
//! (values are `u32`); PCs are written to the caller's `u64` array like on every architecture.
//! A PC with bit 0 set is Thumb code: lookups clear that bit.

use crate::arch::{returns_into_code, Arch};
use crate::expr::{EvalContext, Expr};
use crate::memory::Memory;
use crate::stop::{StopReason, Trust};
use crate::table::RuleTable;

/// Tracked registers, numbered as [`crate::expr::Op::Reg`] refers to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Reg {
    /// r7, the Thumb frame pointer.
    R7 = 0,
    /// r11, the ARM frame pointer.
    R11 = 1,
    /// r12 (ip).
    R12 = 2,
    /// r13, the stack pointer.
    Sp = 3,
    /// r14, the link register.
    Lr = 4,
    /// r15, the program counter.
    Pc = 5,
}

impl Reg {
    /// The tracked register with ARM register (and DWARF) number `n`, if tracked.
    pub fn from_number(n: u16) -> Option<Reg> {
        Some(match n {
            7 => Reg::R7,
            11 => Reg::R11,
            12 => Reg::R12,
            13 => Reg::Sp,
            14 => Reg::Lr,
            15 => Reg::Pc,
            _ => return None,
        })
    }
}

/// The register values of one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// r15: the interrupted instruction (frame 0) or the return address (callers); bit 0 set
    /// for Thumb code.
    pub pc: u32,
    /// r14, the link register, as the frame holds it where the frame's PC is exact (frame 0, a
    /// signal frame's caller). At any other frame LR held the frame's own return address (its
    /// PC) when it made its call, and every step gives such a caller its PC here, whatever a
    /// rule says of LR.
    pub lr: u32,
    /// r13.
    pub sp: u32,
    /// r12.
    pub r12: u32,
    /// r11.
    pub r11: u32,
    /// r7.
    pub r7: u32,
}

impl Regs {
    /// The value of `r`.
    #[inline]
    pub fn get(&self, r: Reg) -> u32 {
        match r {
            Reg::R7 => self.r7,
            Reg::R11 => self.r11,
            Reg::R12 => self.r12,
            Reg::Sp => self.sp,
            Reg::Lr => self.lr,
            Reg::Pc => self.pc,
        }
    }

    /// Values indexed by [`Reg`] number, for expressions.
    fn values(&self) -> [u64; 6] {
        [self.r7, self.r11, self.r12, self.sp, self.lr, self.pc].map(u64::from)
    }
}

/// How to compute the CFA (the value of SP before the function was called).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CfaRule {
    /// A tracked register plus an offset.
    RegOffset(Reg, i32),
    /// The value of expression `n` of the rule's module.
    Expr(u16),
}

/// How to recover a register of the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RegRule {
    /// Saved at `[CFA + offset]`.
    Offset(i32),
    /// No value. For the PC this is the explicit end-of-stack rule.
    Undefined,
    /// Unchanged from the callee.
    Same,
    /// Is `CFA + offset`.
    ValOffset(i32),
    /// Is the callee's value of another tracked register (the PC of a function that has not
    /// saved its return address is the callee's LR).
    Register(Reg),
    /// Saved at the address computed by expression `n` (with the CFA pushed first).
    Expr(u16),
    /// Is the value of expression `n` (with the CFA pushed first).
    ValExpr(u16),
}

/// Where a rule came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Source {
    /// DWARF CFI: exact at every instruction.
    #[default]
    Dwarf,
    /// EHABI `.ARM.exidx`: describes the function after its prologue only; samples in a
    /// prologue or epilogue may unwind wrongly.
    Exidx,
    /// Read from the function's instructions when the module was loaded (prologue and
    /// epilogue analysis, `unwind-arm-prologue`): for functions that no table describes, and
    /// for EXIDX functions whose instructions agree with their entry (then exact in the
    /// prologue and epilogues too).
    Instructions,
}

/// The rule for one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// The CFA.
    pub cfa: CfaRule,
    /// The caller's PC (the return address).
    pub pc: RegRule,
    /// The caller's LR.
    pub lr: RegRule,
    /// The caller's SP (usually `ValOffset(0)`: the CFA).
    pub sp: RegRule,
    /// The caller's r12.
    pub r12: RegRule,
    /// The caller's r11.
    pub r11: RegRule,
    /// The caller's r7.
    pub r7: RegRule,
    /// Where the rule came from.
    pub source: Source,
    /// The frame is a signal trampoline: the caller's PC is exact (looked up as is).
    pub signal_frame: bool,
}

impl Default for Rule {
    /// The rule at a function's first instruction: nothing pushed, return address in LR.
    fn default() -> Self {
        Rule {
            cfa: CfaRule::RegOffset(Reg::Sp, 0),
            pc: RegRule::Register(Reg::Lr),
            lr: RegRule::Same,
            sp: RegRule::ValOffset(0),
            r12: RegRule::Same,
            r11: RegRule::Same,
            r7: RegRule::Same,
            source: Source::Dwarf,
            signal_frame: false,
        }
    }
}

impl Rule {
    /// The rule of an EHABI `EXIDX_CANTUNWIND` entry: the function cannot be unwound through.
    /// (On ARM Linux these mark entry points such as `start_thread`, and glibc's functions built
    /// without unwind tables.)
    pub fn cant_unwind() -> Self {
        Rule {
            pc: RegRule::Undefined,
            source: Source::Exidx,
            ..Rule::default()
        }
    }

    /// True for the explicit end-of-stack rule and for [`Rule::cant_unwind`] (PC undefined).
    #[inline]
    pub fn is_end_of_stack(&self) -> bool {
        self.pc == RegRule::Undefined
    }

    /// Why a walk stops at this rule, if it does: `CantUnwind` for an EXIDX rule, `EndOfStack`
    /// for DWARF's undefined return address.
    #[inline]
    fn stop(&self) -> Option<StopReason> {
        match (self.pc, self.source) {
            (RegRule::Undefined, Source::Exidx) => Some(StopReason::CantUnwind),
            (RegRule::Undefined, Source::Dwarf) => Some(StopReason::EndOfStack),
            _ => None,
        }
    }
}

/// The register the CFA of a [`Simple`] rule is based on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Base {
    /// r13.
    Sp = 0,
    /// r7 (Thumb frame pointer).
    R7 = 1,
    /// r11 (ARM frame pointer).
    R11 = 2,
}

/// A rule of the common shapes (CFA on SP, r7 or r11 plus an offset; the PC, r7 and r11 each
/// saved at an offset or unchanged, the PC possibly still in LR; r12 and SP as usual), decoded
/// for the cache: flag bits and offsets from the CFA's base register. The caller's LR is not
/// part of it: a caller found through its return address made a call, and its LR is its PC
/// ([`Regs::lr`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Simple {
    base: Base,
    /// Which registers are saved (`PC_SAVED`, ...).
    saved: u8,
    /// The CFA (the caller's SP) is `base + cfa`.
    cfa: i32,
    /// The return address is at `[base + pc]` (with `PC_SAVED`; else it is in LR).
    pc: i32,
    /// The caller's r7 is at `[base + r7]` (with `R7_SAVED`).
    r7: i32,
    /// The caller's r11 is at `[base + r11]` (with `R11_SAVED`).
    r11: i32,
}

impl Simple {
    /// The PC is saved at `[base + pc]` (else it is the callee's LR).
    const PC_SAVED: u8 = 1;
    /// r7 is saved at `[base + r7]` (else unchanged).
    const R7_SAVED: u8 = 4;
    /// r11 is saved at `[base + r11]` (else unchanged).
    const R11_SAVED: u8 = 8;

    #[inline]
    fn of(rule: &Rule) -> Option<Simple> {
        let CfaRule::RegOffset(base, cfa) = rule.cfa else {
            return None;
        };
        let base = match base {
            Reg::Sp => Base::Sp,
            Reg::R7 => Base::R7,
            Reg::R11 => Base::R11,
            _ => return None,
        };
        if rule.sp != RegRule::ValOffset(0) || rule.r12 != RegRule::Same || rule.signal_frame {
            return None;
        }
        let mut c = Simple {
            base,
            saved: 0,
            cfa,
            pc: 0,
            r7: 0,
            r11: 0,
        };
        // Each saved register: its offset from the base register.
        let saved = |r: RegRule, flag: u8, flags: &mut u8| -> Option<i32> {
            match r {
                RegRule::Same => Some(0),
                RegRule::Offset(o) => {
                    *flags |= flag;
                    cfa.checked_add(o)
                }
                _ => None,
            }
        };
        let mut flags = 0;
        c.pc = match rule.pc {
            RegRule::Register(Reg::Lr) => 0,
            RegRule::Offset(_) => saved(rule.pc, Simple::PC_SAVED, &mut flags)?,
            _ => return None,
        };
        c.r7 = saved(rule.r7, Simple::R7_SAVED, &mut flags)?;
        c.r11 = saved(rule.r11, Simple::R11_SAVED, &mut flags)?;
        c.saved = flags;
        Some(c)
    }
}

/// The outcome of one step on 32-bit ARM.
pub type Step = crate::arch::Step<Regs>;

#[inline]
fn add(base: u32, offset: i32) -> u32 {
    base.wrapping_add(offset as u32)
}

#[inline]
fn read<M: Memory + ?Sized>(mem: &M, addr: u32) -> Result<u32, StopReason> {
    mem.read_u32_at(addr).ok_or(StopReason::ReadFailed)
}

#[cold]
#[inline(never)]
fn eval<M: Memory + ?Sized>(
    table: &RuleTable<Rule>,
    module: u16,
    expr: u16,
    regs: Regs,
    mem: &M,
    initial: Option<u32>,
) -> Result<u32, StopReason> {
    let e: &Expr = table.expr(module, expr).ok_or(StopReason::BadRule)?;
    let vals = regs.values();
    let ctx = EvalContext {
        regs: &vals,
        memory: mem,
        word_size: 4,
    };
    e.eval(&ctx, initial.map(u64::from))
        .map(|v| v as u32)
        .map_err(StopReason::from)
}

/// Recovers one register: `same` is the callee's value of that register.
#[allow(clippy::too_many_arguments)]
fn recover<M: Memory + ?Sized>(
    rule: RegRule,
    same: u32,
    cfa: u32,
    table: &RuleTable<Rule>,
    module: u16,
    regs: Regs,
    mem: &M,
) -> Result<u32, StopReason> {
    Ok(match rule {
        RegRule::Offset(o) => read(mem, add(cfa, o))?,
        RegRule::Undefined => 0,
        RegRule::Same => same,
        RegRule::ValOffset(o) => add(cfa, o),
        RegRule::Register(r) => regs.get(r),
        RegRule::Expr(i) => {
            let a = eval(table, module, i, regs, mem, Some(cfa))?;
            read(mem, a)?
        }
        RegRule::ValExpr(i) => eval(table, module, i, regs, mem, Some(cfa))?,
    })
}

/// LR (`lr`) as the return address of the frame at `pc`, where a rule says it is still there.
/// At a frame that made a call LR holds that call's return address, the frame's own PC: the
/// caller is not known ([`StopReason::ReturnAddressLost`]). Every frame whose PC is not exact
/// made a call, and the steps gave it LR = PC ([`Regs::lr`]): the test needs no exactness.
#[inline(always)]
fn ra_in_lr(pc: u32, lr: u32) -> Result<u32, StopReason> {
    if lr == pc {
        return Err(StopReason::ReturnAddressLost);
    }
    Ok(lr)
}

/// Frame-pointer fallback with the AAPCS frame record: `[fp]` is the caller's frame pointer,
/// `[fp + 4]` its return address; `fp` is r7 in Thumb code (PC bit 0 set), r11 in ARM code.
/// Accepted only if `fp` is 4-aligned, not below SP, and both words are readable.
fn step_frame_pointer<M: Memory + ?Sized>(regs: Regs, mem: &M) -> Result<Step, StopReason> {
    let thumb = regs.pc & 1 != 0;
    let fp = if thumb { regs.r7 } else { regs.r11 };
    if !fp.is_multiple_of(4) || fp < regs.sp {
        return Err(StopReason::NoRule);
    }
    let next = read(mem, fp).map_err(|_| StopReason::NoRule)?;
    let ra =
        read(mem, fp.checked_add(4).ok_or(StopReason::NoRule)?).map_err(|_| StopReason::NoRule)?;
    let mut caller = Regs {
        pc: ra,
        lr: ra,
        sp: fp.checked_add(8).ok_or(StopReason::NoRule)?,
        ..regs
    };
    if thumb {
        caller.r7 = next;
    } else {
        caller.r11 = next;
    }
    Ok(Step {
        caller,
        trust: Trust::FramePointer,
        exact: false,
    })
}

impl crate::table::TableRule for Rule {
    type Ready = crate::cache::Ready<Simple>;

    fn ready(&self) -> Self::Ready {
        crate::cache::Ready::of::<Arm>(self)
    }
}

/// The tracked registers in [`Reg`]'s order: a register's number in the byte form of rules.
const REGS: [Reg; 6] = [Reg::R7, Reg::R11, Reg::R12, Reg::Sp, Reg::Lr, Reg::Pc];

/// The register numbered `n` in the byte form of rules ([`REGS`]).
fn reg_of(n: u32) -> Option<Reg> {
    REGS.get(usize::try_from(n).ok()?).copied()
}

/// The byte form of ARM rules: the CFA rule (a tag, a register and a 4-byte payload), the six
/// registers' rules (each a tag and a 4-byte payload: an offset, a register, an expression
/// index or nothing), the source and the signal-frame flag, 38 bytes.
impl crate::table::RuleBytes for Rule {
    const ARCH: [u8; 4] = *b"arm\0";
    const SIZE: usize = 38;

    fn write(&self, out: &mut alloc::vec::Vec<u8>) {
        use crate::table::bytes::write_tagged;
        let (tag, reg, payload) = match self.cfa {
            CfaRule::RegOffset(r, o) => (0, r as u8, o as u32),
            CfaRule::Expr(i) => (1, 0, u32::from(i)),
        };
        out.push(tag);
        write_tagged(out, reg, payload);
        for r in [self.pc, self.lr, self.sp, self.r12, self.r11, self.r7] {
            let (tag, payload) = match r {
                RegRule::Offset(o) => (0, o as u32),
                RegRule::Undefined => (1, 0),
                RegRule::Same => (2, 0),
                RegRule::ValOffset(o) => (3, o as u32),
                RegRule::Register(r) => (4, u32::from(r as u8)),
                RegRule::Expr(i) => (5, u32::from(i)),
                RegRule::ValExpr(i) => (6, u32::from(i)),
            };
            write_tagged(out, tag, payload);
        }
        out.push(match self.source {
            Source::Dwarf => 0,
            Source::Exidx => 1,
            Source::Instructions => 2,
        });
        out.push(u8::from(self.signal_frame));
    }

    fn read(
        r: &mut crate::table::bytes::RuleReader<'_>,
    ) -> Result<Self, crate::table::RulesBytesError> {
        use crate::table::bytes::payload::{index, none, offset};
        use crate::table::bytes::RuleReader;
        const CFA: &str = "ARM CFA rule";
        let cfa = match r.tag(CFA, 2)? {
            0 => {
                let at = r.offset();
                let reg = reg_of(u32::from(r.u8()?))
                    .ok_or(RuleReader::invalid("ARM CFA register", at))?;
                CfaRule::RegOffset(reg, r.payload(CFA, offset)?)
            }
            _ => {
                r.tag("ARM CFA register of an expression", 1)?;
                CfaRule::Expr(r.payload(CFA, index)?)
            }
        };
        let mut reg = |what| {
            Ok(match r.tag(what, 7)? {
                0 => RegRule::Offset(r.payload(what, offset)?),
                1 => r.payload(what, none).map(|()| RegRule::Undefined)?,
                2 => r.payload(what, none).map(|()| RegRule::Same)?,
                3 => RegRule::ValOffset(r.payload(what, offset)?),
                4 => RegRule::Register(r.payload(what, reg_of)?),
                5 => RegRule::Expr(r.payload(what, index)?),
                _ => RegRule::ValExpr(r.payload(what, index)?),
            })
        };
        let pc = reg("ARM pc rule")?;
        let lr = reg("ARM lr rule")?;
        let sp = reg("ARM sp rule")?;
        let r12 = reg("ARM r12 rule")?;
        let r11 = reg("ARM r11 rule")?;
        let r7 = reg("ARM r7 rule")?;
        let source = match r.tag("ARM rule source", 3)? {
            0 => Source::Dwarf,
            1 => Source::Exidx,
            _ => Source::Instructions,
        };
        let signal_frame = r.bool("ARM signal frame flag")?;
        Ok(Rule {
            cfa,
            pc,
            lr,
            sp,
            r12,
            r11,
            r7,
            source,
            signal_frame,
        })
    }

    fn exprs(&self, mut each: impl FnMut(u16)) {
        if let CfaRule::Expr(i) = self.cfa {
            each(i);
        }
        for r in [self.pc, self.lr, self.sp, self.r12, self.r11, self.r7] {
            if let RegRule::Expr(i) | RegRule::ValExpr(i) = r {
                each(i);
            }
        }
    }
}

/// The 32-bit ARM architecture (ARM and Thumb-2 code): rules from DWARF CFI or EXIDX; the
/// Thumb bit cleared for lookups; a leaf's return address in LR, then the frame record of r7
/// (Thumb) or r11 (ARM) as fallbacks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Arm;

impl Arch for Arm {
    const NAME: &'static str = "arm";
    const WORD_BYTES: u8 = 4;
    type Regs = Regs;
    type Rule = Rule;
    type Simple = Simple;

    #[inline(always)]
    fn pc(regs: &Regs) -> u64 {
        u64::from(regs.pc)
    }

    #[inline(always)]
    fn sp(regs: &Regs) -> u64 {
        u64::from(regs.sp)
    }

    /// `return address - 1` lies inside the call instruction, ARM or Thumb.
    #[inline(always)]
    fn lookup_address(regs: &Regs, exact: bool) -> u64 {
        u64::from((regs.pc & !1).wrapping_sub(u32::from(!exact)))
    }

    #[inline]
    fn stop(rule: &Rule) -> Option<StopReason> {
        rule.stop()
    }

    #[inline]
    fn simple(rule: &Rule) -> Option<Simple> {
        Simple::of(rule)
    }

    #[inline]
    fn is_signal_frame(rule: &Rule) -> bool {
        rule.signal_frame
    }

    #[inline(always)]
    fn step_simple<M: Memory + ?Sized>(
        rule: &Simple,
        regs: &Regs,
        _exact: bool,
        mem: &M,
    ) -> Result<Regs, StopReason> {
        if rule.saved & !Simple::R11_SAVED == Simple::PC_SAVED && rule.base == Base::Sp {
            // The most common rule of a non-leaf function: CFA on SP, the return address
            // saved, r11 saved or not (frame pointers), r7 as is.
            let r11 = if rule.saved & Simple::R11_SAVED != 0 {
                read(mem, add(regs.sp, rule.r11))?
            } else {
                regs.r11
            };
            let pc = read(mem, add(regs.sp, rule.pc))?;
            return Ok(Regs {
                pc,
                lr: pc,
                sp: add(regs.sp, rule.cfa),
                r11,
                ..*regs
            });
        }
        let base = match rule.base {
            Base::Sp => regs.sp,
            Base::R7 => regs.r7,
            Base::R11 => regs.r11,
        };
        let saved = |flag: u8, off: i32, same: u32| {
            if rule.saved & flag != 0 {
                read(mem, add(base, off))
            } else {
                Ok(same)
            }
        };
        let pc = if rule.saved & Simple::PC_SAVED != 0 {
            read(mem, add(base, rule.pc))?
        } else {
            ra_in_lr(regs.pc, regs.lr)?
        };
        Ok(Regs {
            pc,
            lr: pc,
            sp: add(base, rule.cfa),
            r12: regs.r12,
            r11: saved(Simple::R11_SAVED, rule.r11, regs.r11)?,
            r7: saved(Simple::R7_SAVED, rule.r7, regs.r7)?,
        })
    }

    /// Applies `rule` (found in module `module` of `table`) to the callee's `regs`: the caller's
    /// registers, or why there are none (`EndOfStack` for the end-of-stack rule).
    fn step_rule<M: Memory + ?Sized>(
        table: &RuleTable<Rule>,
        module: u16,
        rule: &Rule,
        regs: &Regs,
        _exact: bool,
        mem: &M,
    ) -> Result<Step, StopReason> {
        let regs = *regs;
        let cfa = match rule.cfa {
            CfaRule::RegOffset(r, o) => add(regs.get(r), o),
            CfaRule::Expr(i) => eval(table, module, i, regs, mem, None)?,
        };
        if let Some(stop) = rule.stop() {
            return Err(stop);
        }
        let r = |rule: RegRule, same: u32| recover(rule, same, cfa, table, module, regs, mem);
        let pc = match rule.pc {
            RegRule::Register(Reg::Lr) => ra_in_lr(regs.pc, regs.lr)?,
            pc => r(pc, regs.pc)?,
        };
        let caller = Regs {
            pc,
            // A signal frame's caller was interrupted (its LR is the register); any other
            // caller made a call ([`Regs::lr`]).
            lr: if rule.signal_frame {
                r(rule.lr, regs.lr)?
            } else {
                pc
            },
            sp: r(rule.sp, regs.sp)?,
            r12: r(rule.r12, regs.r12)?,
            r11: r(rule.r11, regs.r11)?,
            r7: r(rule.r7, regs.r7)?,
        };
        Ok(Step {
            caller,
            trust: Trust::Cfi,
            exact: rule.signal_frame,
        })
    }

    /// A frame 0 without a rule is first assumed to be a leaf whose return address is still in
    /// LR ([`Trust::LinkRegister`]) if LR returns into code, else unwound by its frame record.
    fn step_without_rule<M: Memory + ?Sized>(
        table: &RuleTable<Rule>,
        regs: &Regs,
        exact: bool,
        mem: &M,
    ) -> Result<Step, StopReason> {
        if exact && regs.lr != 0 && regs.lr != regs.pc {
            let caller = Regs {
                pc: regs.lr,
                ..*regs
            };
            if returns_into_code::<Self>(table, &caller) {
                return Ok(Step {
                    caller,
                    trust: Trust::LinkRegister,
                    exact: false,
                });
            }
        }
        step_frame_pointer(*regs, mem)
    }

    /// `ret` keeps its Thumb bit, as a return site does, and is the caller's LR too
    /// ([`Regs::lr`]). An `sp` past 4 GiB (a word read at the top of the address space) wraps
    /// to 0, which the stack-pointer check refuses.
    #[inline]
    fn scanned_caller(regs: &Regs, ret: u64, sp: u64) -> Regs {
        Regs {
            pc: ret as u32,
            lr: ret as u32,
            sp: sp as u32,
            ..*regs
        }
    }

    /// SP must not decrease, and must increase after any frame but an interrupted one (frame
    /// 0, a signal frame's caller: a leaf's caller can have the same SP).
    #[inline(always)]
    fn sp_increases(caller: &Regs, callee: &Regs, exact: bool) -> bool {
        caller.sp > callee.sp || (caller.sp == callee.sp && exact)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cached;

    #[test]
    fn sizes() {
        assert_eq!(core::mem::size_of::<Simple>(), 20);
        assert_eq!(core::mem::size_of::<Cached<Simple>>(), 20);
    }
}
