//! 32-bit ARM (armv7, ARM and Thumb-2): the tracked registers (r15 = PC, r14 = LR, r13 = SP,
//! r12, r11 = the ARM frame pointer, r7 = the Thumb frame pointer), their typed rules, and the
//! unwind loop.
//!
//! Rules come from DWARF CFI or from EHABI unwind tables (`.ARM.exidx`); [`Rule::source`] says
//! which, because EXIDX describes a function only after its prologue. Addresses are 32-bit
//! (values are `u32`); PCs are written to the caller's `u64` array like on every architecture.
//! A PC with bit 0 set is Thumb code: lookups clear that bit.

use crate::cache::{Cache, CacheRule};
use crate::expr::{EvalContext, Expr};
use crate::memory::Memory;
use crate::table::RuleTable;
use crate::unwind::{stopped, StopReason, Trust, UnwindResult};

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
    /// r14.
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
    pub fn is_end_of_stack(&self) -> bool {
        self.pc == RegRule::Undefined
    }

    /// Why a walk stops at this rule, if it does: `CantUnwind` for an EXIDX rule, `EndOfStack`
    /// for DWARF's undefined return address.
    fn stop(&self) -> Option<StopReason> {
        match (self.pc, self.source) {
            (RegRule::Undefined, Source::Exidx) => Some(StopReason::CantUnwind),
            (RegRule::Undefined, Source::Dwarf) => Some(StopReason::EndOfStack),
            _ => None,
        }
    }
}

/// A rule as the [`Cache`] holds it: the common shapes (CFA on SP, r7 or r11 plus an offset;
/// PC, LR, r7 and r11 each saved at an offset or unchanged; r12 and SP as usual) decoded into
/// flag bits and offsets from the CFA's base register. Any other rule is cached as
/// `CachedRule::OTHER` with its dictionary index and applied from the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachedRule {
    shape: u16,
    base: u8,
    cfa: i32,
    pc: i32,
    lr: i32,
    r7: i32,
    r11: i32,
}

impl CachedRule {
    /// The PC is saved at `[base + pc]` (else it is the callee's LR).
    const PC_SAVED: u16 = 1;
    /// LR is saved at `[base + lr]` (else unchanged).
    const LR_SAVED: u16 = 2;
    /// r7 is saved at `[base + r7]` (else unchanged).
    const R7_SAVED: u16 = 4;
    /// r11 is saved at `[base + r11]` (else unchanged).
    const R11_SAVED: u16 = 8;
    /// Not a simple shape: `pc` holds the rule's dictionary index.
    const OTHER: u16 = 16;
    /// No rule covers the address.
    const NONE: u16 = 32;
    /// The end-of-stack rule (with [`CachedRule::CANT`]: EXIDX's "cannot unwind").
    const END: u16 = 64;
    /// With [`CachedRule::END`]: the stop is `CantUnwind`.
    const CANT: u16 = 128;
    /// The caller's LR is its PC (both restored from the same slot): one read, not two.
    const LR_IS_PC: u16 = 256;
    /// Any of the rare cases.
    const SLOW: u16 = CachedRule::OTHER | CachedRule::NONE | CachedRule::END;

    fn other(index: u16) -> Self {
        CachedRule {
            shape: CachedRule::OTHER,
            pc: i32::from(index),
            ..CachedRule::default()
        }
    }
}

impl CacheRule<Rule> for CachedRule {
    fn cached(rule: &Rule, index: u16) -> Self {
        if let Some(stop) = rule.stop() {
            let cant = if stop == StopReason::CantUnwind {
                CachedRule::CANT
            } else {
                0
            };
            return CachedRule {
                shape: CachedRule::END | cant,
                ..CachedRule::default()
            };
        }
        let CfaRule::RegOffset(base, cfa) = rule.cfa else {
            return CachedRule::other(index);
        };
        if !matches!(base, Reg::Sp | Reg::R7 | Reg::R11)
            || rule.sp != RegRule::ValOffset(0)
            || rule.r12 != RegRule::Same
            || rule.signal_frame
        {
            return CachedRule::other(index);
        }
        let mut c = CachedRule {
            shape: 0,
            base: base as u8,
            cfa,
            ..CachedRule::default()
        };
        let lr_is_pc = matches!(rule.pc, RegRule::Offset(_)) && rule.lr == rule.pc;
        if lr_is_pc {
            c.shape |= CachedRule::LR_IS_PC;
        }
        // Each saved register: its offset from the base register.
        let mut saved = |r: RegRule, flag: u16, slot: &mut i32| -> bool {
            match r {
                RegRule::Same => true,
                RegRule::Offset(o) => match cfa.checked_add(o) {
                    Some(v) => {
                        *slot = v;
                        c.shape |= flag;
                        true
                    }
                    None => false,
                },
                _ => false,
            }
        };
        let (mut pc, mut lr, mut r7, mut r11) = (0, 0, 0, 0);
        let pc_ok = match rule.pc {
            RegRule::Register(Reg::Lr) => true,
            RegRule::Offset(_) => saved(rule.pc, CachedRule::PC_SAVED, &mut pc),
            _ => false,
        };
        let ok = pc_ok
            && (lr_is_pc || saved(rule.lr, CachedRule::LR_SAVED, &mut lr))
            && saved(rule.r7, CachedRule::R7_SAVED, &mut r7)
            && saved(rule.r11, CachedRule::R11_SAVED, &mut r11);
        if !ok {
            return CachedRule::other(index);
        }
        c.pc = pc;
        c.lr = lr;
        c.r7 = r7;
        c.r11 = r11;
        c
    }

    fn none() -> Self {
        CachedRule {
            shape: CachedRule::NONE,
            ..CachedRule::default()
        }
    }
}

/// The outcome of one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The caller's registers.
    pub caller: Regs,
    /// How they were found.
    pub trust: Trust,
    /// True after a signal frame: look the caller's rule up at its PC exactly.
    pub exact: bool,
}

#[inline]
fn add(base: u32, offset: i32) -> u32 {
    base.wrapping_add(offset as u32)
}

#[inline]
fn read<M: Memory + ?Sized>(mem: &M, addr: u32) -> Result<u32, StopReason> {
    mem.read_u32(u64::from(addr)).ok_or(StopReason::ReadFailed)
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

/// Applies `rule` (found in module `module` of `table`) to the callee's `regs`: the caller's
/// registers, or why there are none (`EndOfStack` for the end-of-stack rule).
pub fn step_cfi<M: Memory + ?Sized>(
    table: &RuleTable<Rule>,
    module: u16,
    rule: &Rule,
    regs: &Regs,
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
    let caller = Regs {
        pc: r(rule.pc, regs.pc)?,
        lr: r(rule.lr, regs.lr)?,
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

/// Frame-pointer fallback with the AAPCS frame record: `[fp]` is the caller's frame pointer,
/// `[fp + 4]` its return address; `fp` is r7 in Thumb code (PC bit 0 set), r11 in ARM code.
/// Accepted only if `fp` is 4-aligned, not below SP, and both words are readable.
pub fn step_frame_pointer<M: Memory + ?Sized>(regs: Regs, mem: &M) -> Result<Step, StopReason> {
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

/// Applies a simple cached rule.
#[inline(always)]
fn step_cached<M: Memory + ?Sized>(
    c: &CachedRule,
    regs: &Regs,
    mem: &M,
) -> Result<Regs, StopReason> {
    let base = match c.base {
        b if b == Reg::Sp as u8 => regs.sp,
        b if b == Reg::R7 as u8 => regs.r7,
        _ => regs.r11,
    };
    let saved = |flag: u16, off: i32, same: u32| {
        if c.shape & flag != 0 {
            read(mem, add(base, off))
        } else {
            Ok(same)
        }
    };
    let pc = saved(CachedRule::PC_SAVED, c.pc, regs.lr)?;
    let lr = if c.shape & CachedRule::LR_IS_PC != 0 {
        pc
    } else {
        saved(CachedRule::LR_SAVED, c.lr, regs.lr)?
    };
    Ok(Regs {
        pc,
        lr,
        sp: add(base, c.cfa),
        r12: regs.r12,
        r11: saved(CachedRule::R11_SAVED, c.r11, regs.r11)?,
        r7: saved(CachedRule::R7_SAVED, c.r7, regs.r7)?,
    })
}

/// Applies a rule that is not a simple shape, fetched from the table by index.
#[cold]
#[inline(never)]
fn step_other<M: Memory + ?Sized>(
    table: &RuleTable<Rule>,
    module: u16,
    index: i32,
    regs: Regs,
    mem: &M,
) -> Result<Step, StopReason> {
    let index = u16::try_from(index).map_err(|_| StopReason::BadRule)?;
    let rule = table.rule(module, index).ok_or(StopReason::BadRule)?;
    step_cfi(table, module, rule, &regs, mem)
}

/// Unwinds from `regs`, writing each frame's PC into `pcs` (frame 0 first; callers' return
/// addresses as found, Thumb bit included).
///
/// Lookups clear the Thumb bit and use the PC itself for frame 0 and after signal frames,
/// `return address - 1` (inside the call instruction, ARM or Thumb) for callers. A frame 0
/// without a rule is first assumed to be a leaf whose return address is still in LR
/// ([`Trust::LinkRegister`]), then unwound by its frame pointer. SP must not decrease, and must
/// increase after frame 0 (a leaf's caller can have the same SP). Never allocates, locks or
/// panics; the loop runs at most `pcs.len()` times.
pub fn unwind<M: Memory + ?Sized>(
    table: &RuleTable<Rule>,
    cache: &mut Cache<CachedRule>,
    regs: Regs,
    mem: &M,
    pcs: &mut [u64],
    trust: Option<&mut [Trust]>,
) -> UnwindResult {
    match trust {
        None => walk::<M, false>(table, cache, regs, mem, pcs, &mut []),
        Some(trust) => walk::<M, true>(table, cache, regs, mem, pcs, trust),
    }
}

#[inline(always)]
fn walk<M: Memory + ?Sized, const TRUST: bool>(
    table: &RuleTable<Rule>,
    cache: &mut Cache<CachedRule>,
    regs: Regs,
    mem: &M,
    pcs: &mut [u64],
    trust: &mut [Trust],
) -> UnwindResult {
    let mut regs = regs;
    let mut adjust = 0u32;
    let mut how = Trust::Context;
    cache.prepare(table);
    let mut i = 0;
    while let Some(slot) = pcs.get_mut(i) {
        *slot = u64::from(regs.pc);
        if TRUST {
            if let Some(t) = trust.get_mut(i) {
                *t = how;
            }
        }
        let key = u64::from((regs.pc & !1).wrapping_sub(adjust));
        let Some((module, c)) = cache.lookup_prepared(table, key) else {
            return stopped(cache, i, StopReason::BadRule);
        };
        let caller = if c.shape & !CachedRule::R11_SAVED
            == CachedRule::PC_SAVED | CachedRule::LR_IS_PC
            && c.base == Reg::Sp as u8
        {
            // The most common rule of a non-leaf function: CFA on SP, the return address
            // saved (it is also the caller's LR), r11 saved or not (frame pointers), r7 as is.
            adjust = 1;
            how = Trust::Cfi;
            let r11 = if c.shape & CachedRule::R11_SAVED != 0 {
                read(mem, add(regs.sp, c.r11))
            } else {
                Ok(regs.r11)
            };
            read(mem, add(regs.sp, c.pc)).and_then(|pc| {
                Ok(Regs {
                    pc,
                    lr: pc,
                    sp: add(regs.sp, c.cfa),
                    r11: r11?,
                    ..regs
                })
            })
        } else if c.shape & CachedRule::SLOW == 0 {
            adjust = 1;
            how = Trust::Cfi;
            step_cached(c, &regs, mem)
        } else if c.shape & CachedRule::END != 0 {
            let stop = if c.shape & CachedRule::CANT != 0 {
                StopReason::CantUnwind
            } else {
                StopReason::EndOfStack
            };
            return stopped(cache, i, stop);
        } else {
            let step = if c.shape & CachedRule::NONE == 0 {
                step_other(table, module, c.pc, regs, mem)
            } else if i == 0 && regs.lr != 0 && regs.lr != regs.pc {
                // A leaf without a rule: its return address is still in LR.
                Ok(Step {
                    caller: Regs {
                        pc: regs.lr,
                        ..regs
                    },
                    trust: Trust::LinkRegister,
                    exact: false,
                })
            } else {
                step_frame_pointer(regs, mem)
            };
            step.map(|s| {
                adjust = u32::from(!s.exact);
                how = s.trust;
                s.caller
            })
        };
        let caller = match caller {
            Ok(c) => c,
            Err(stop) => return stopped(cache, i, stop),
        };
        if caller.pc == 0 {
            return stopped(cache, i, StopReason::ZeroReturnAddress);
        }
        if caller.sp < regs.sp || (caller.sp == regs.sp && i > 0) {
            return stopped(cache, i, StopReason::SpNotIncreasing);
        }
        regs = caller;
        i += 1;
    }
    cache.count_lookups(pcs.len() as u64);
    UnwindResult {
        frames: pcs.len(),
        stop: StopReason::BufferFull,
    }
}
