//! x86_64: the tracked registers (PC, SP, FP = rbp), their typed rules, and the unwind loop.
//!
//! The caller's stack pointer is the CFA, by the psABI's definition of the CFA as the value of
//! `rsp` at the call site, so only the CFA, the return address and `rbp` need rules.

use crate::cache::{Cache, CacheRule};
use crate::expr::{EvalContext, Expr, Op};
use crate::memory::Memory;
use crate::table::RuleTable;
use crate::unwind::{stopped, StopReason, Trust, UnwindResult};

/// Tracked registers, numbered as [`crate::expr::Op::Reg`] refers to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Reg {
    /// `rip` (DWARF register 16, the return-address column).
    Pc = 0,
    /// `rsp` (DWARF register 7).
    Sp = 1,
    /// `rbp` (DWARF register 6).
    Fp = 2,
}

/// The register values of one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// Instruction pointer (frame 0) or return address (callers).
    pub pc: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (`rbp`).
    pub fp: u64,
}

/// How to compute the CFA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CfaRule {
    /// `rsp + offset`.
    SpOffset(i32),
    /// `rbp + offset`.
    FpOffset(i32),
    /// The value of expression `n` of the rule's module.
    Expr(u16),
}

/// How to recover a register of the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RegRule {
    /// Saved at `[CFA + offset]` (first: the common case is one comparison in the unwind loop).
    Offset(i32),
    /// No value. For the return address this is the explicit end-of-stack rule.
    Undefined,
    /// Unchanged from the callee.
    Same,
    /// Is `CFA + offset`.
    ValOffset(i32),
    /// Saved at the address computed by expression `n` (with the CFA pushed first).
    Expr(u16),
    /// Is the value of expression `n` (with the CFA pushed first).
    ValExpr(u16),
}

/// The rule for one address: CFA, return address and frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// The CFA; the caller's SP is the CFA.
    pub cfa: CfaRule,
    /// The return address (the caller's PC).
    pub ra: RegRule,
    /// The caller's `rbp`.
    pub fp: RegRule,
    /// The frame is a signal trampoline (CIE augmentation `S`): the caller's PC is the exact
    /// interrupted instruction, so its rule is looked up at the PC, not at `PC - 1`.
    pub signal_frame: bool,
}

impl Default for Rule {
    /// The rule at a function's first instruction: `CFA = rsp + 8`, return address at `CFA - 8`.
    fn default() -> Self {
        Rule {
            cfa: CfaRule::SpOffset(8),
            ra: RegRule::Offset(-8),
            fp: RegRule::Same,
            signal_frame: false,
        }
    }
}

impl Rule {
    /// True if this is the explicit end-of-stack rule (return address undefined).
    pub fn is_end_of_stack(&self) -> bool {
        self.ra == RegRule::Undefined
    }
}

/// A rule as the [`Cache`] holds it: the shapes that cover nearly every frame decoded into
/// flag bits and three offsets, so the unwind loop applies them with one branch on the shape and
/// no further decoding. All three offsets are from the base register (`rsp`, or `rbp` with
/// `CachedRule::CFA_FP`), so the return address and saved `rbp` are read without waiting for
/// the CFA. Any other rule (expressions, signal frames, the end-of-stack rule, ...)
/// is cached as `CachedRule::OTHER` with its dictionary index, and applied from the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachedRule {
    shape: u8,
    cfa: i32,
    ra: i32,
    fp: i32,
}

impl CachedRule {
    /// The CFA is `rbp + cfa` (else `rsp + cfa`).
    const CFA_FP: u8 = 1;
    /// The caller's `rbp` is at `[CFA + fp]` (else unchanged).
    const FP_SAVED: u8 = 2;
    /// Not one of the simple shapes: `ra` holds the rule's dictionary index.
    const OTHER: u8 = 4;
    /// No rule covers the address: fall back to the frame pointer.
    const NONE: u8 = 8;
    /// The end-of-stack rule (return address undefined): the walk is complete.
    const END: u8 = 16;
    /// Any of the rare cases: leave the fast path.
    const SLOW: u8 = CachedRule::OTHER | CachedRule::NONE | CachedRule::END;
}

impl CacheRule<Rule> for CachedRule {
    fn cached(rule: &Rule, index: u16) -> Self {
        if rule.is_end_of_stack() {
            return CachedRule {
                shape: CachedRule::END,
                ..CachedRule::default()
            };
        }
        let (shape, cfa) = match rule.cfa {
            CfaRule::SpOffset(o) => (0, o),
            CfaRule::FpOffset(o) => (CachedRule::CFA_FP, o),
            CfaRule::Expr(_) => (CachedRule::OTHER, 0),
        };
        let (shape, fp) = match rule.fp {
            RegRule::Same => (shape, 0),
            RegRule::Offset(o) => (shape | CachedRule::FP_SAVED, o),
            _ => (CachedRule::OTHER, 0),
        };
        // Offsets from the base register; a sum that overflows takes the slow path.
        let (ra, fp) = match (rule.ra, cfa.checked_add(fp)) {
            (RegRule::Offset(ra), Some(fp)) => (cfa.checked_add(ra), fp),
            _ => (None, 0),
        };
        match ra {
            Some(ra) if shape & CachedRule::OTHER == 0 && !rule.signal_frame => {
                CachedRule { shape, cfa, ra, fp }
            }
            _ => CachedRule {
                shape: CachedRule::OTHER,
                cfa: 0,
                ra: i32::from(index),
                fp: 0,
            },
        }
    }

    fn none() -> Self {
        CachedRule {
            shape: CachedRule::NONE,
            ..CachedRule::default()
        }
    }
}

/// The CFA of a lazy-binding PLT entry, as binutils describes `.plt`:
/// `rsp + 8 + (((rip & 15) >= 11) << 3)`. Each 16-byte entry pushes its relocation index at
/// offset 6, which takes effect from offset 11.
pub fn plt_cfa_expression() -> Expr {
    let ops = [
        Op::Reg(Reg::Sp as u8),
        Op::Const(8),
        Op::Add,
        Op::Reg(Reg::Pc as u8),
        Op::Const(15),
        Op::And,
        Op::Const(11),
        Op::Ge,
        Op::Const(3),
        Op::Shl,
        Op::Add,
    ];
    Expr::new(&ops).expect("11 operations fit in an expression")
}

/// The outcome of one step: the caller's registers, how they were found, and whether the
/// caller's PC is exact (after a signal frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The caller's registers; `caller.sp` is the CFA.
    pub caller: Regs,
    /// How they were found.
    pub trust: Trust,
    /// True after a signal frame: look the caller's rule up at its PC, not at `PC - 1`.
    pub exact: bool,
}

#[inline]
fn add(base: u64, offset: i32) -> u64 {
    base.wrapping_add(offset as i64 as u64)
}

/// Evaluates expression `expr` of `module` (rare: PLT stubs, signal trampolines; kept out of
/// the hot loop).
#[cold]
#[inline(never)]
fn eval<M: Memory + ?Sized>(
    table: &RuleTable<Rule>,
    module: u16,
    expr: u16,
    regs: Regs,
    mem: &M,
    initial: Option<u64>,
) -> Result<u64, StopReason> {
    let e: &Expr = table.expr(module, expr).ok_or(StopReason::BadRule)?;
    let vals = [regs.pc, regs.sp, regs.fp];
    let ctx = EvalContext {
        regs: &vals,
        memory: mem,
        word_size: 8,
    };
    e.eval(&ctx, initial).map_err(StopReason::from)
}

/// The rarer register rules (everything but `Offset`, handled inline by the caller).
/// `Undefined` gives 0; `same` is the callee's value of the register.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn recover_rare<M: Memory + ?Sized>(
    rule: RegRule,
    same: u64,
    cfa: u64,
    table: &RuleTable<Rule>,
    module: u16,
    regs: Regs,
    mem: &M,
) -> Result<u64, StopReason> {
    Ok(match rule {
        RegRule::Undefined => 0,
        RegRule::Same => same,
        RegRule::Offset(o) => mem.read_u64(add(cfa, o)).ok_or(StopReason::ReadFailed)?,
        RegRule::ValOffset(o) => add(cfa, o),
        RegRule::Expr(i) => {
            let a = eval(table, module, i, regs, mem, Some(cfa))?;
            mem.read_u64(a).ok_or(StopReason::ReadFailed)?
        }
        RegRule::ValExpr(i) => eval(table, module, i, regs, mem, Some(cfa))?,
    })
}

/// Applies `rule` (found in module `module` of `table`, which holds its expressions) to the
/// callee's `regs`: the caller's registers, or why there are none (`EndOfStack` for the
/// end-of-stack rule). The common rules (CFA on SP or FP, return address and FP saved at
/// `CFA + offset` or unchanged) are handled inline; the rest out of line.
#[inline(always)]
pub fn step_cfi<M: Memory + ?Sized>(
    table: &RuleTable<Rule>,
    module: u16,
    rule: &Rule,
    regs: &Regs,
    mem: &M,
) -> Result<Step, StopReason> {
    let cfa = match rule.cfa {
        CfaRule::SpOffset(o) => add(regs.sp, o),
        CfaRule::FpOffset(o) => add(regs.fp, o),
        CfaRule::Expr(i) => eval(table, module, i, *regs, mem, None)?,
    };
    let pc = match rule.ra {
        RegRule::Offset(o) => mem.read_u64(add(cfa, o)).ok_or(StopReason::ReadFailed)?,
        RegRule::Undefined => return Err(StopReason::EndOfStack),
        RegRule::Same => return Err(StopReason::BadRule),
        ra => recover_rare(ra, regs.pc, cfa, table, module, *regs, mem)?,
    };
    let fp = match rule.fp {
        RegRule::Same => regs.fp,
        RegRule::Offset(o) => mem.read_u64(add(cfa, o)).ok_or(StopReason::ReadFailed)?,
        fp => recover_rare(fp, regs.fp, cfa, table, module, *regs, mem)?,
    };
    Ok(Step {
        caller: Regs { pc, sp: cfa, fp },
        trust: Trust::Cfi,
        exact: rule.signal_frame,
    })
}

/// Frame-pointer fallback: `[rbp]` is the caller's `rbp`, `[rbp + 8]` the return address.
/// Accepted only if `rbp` is 8-aligned, not below SP, and both words are readable.
#[inline(never)]
pub fn step_frame_pointer<M: Memory + ?Sized>(regs: Regs, mem: &M) -> Result<Step, StopReason> {
    let fp = regs.fp;
    if !fp.is_multiple_of(8) || fp < regs.sp {
        return Err(StopReason::NoRule);
    }
    let caller_fp = mem.read_u64(fp).ok_or(StopReason::NoRule)?;
    let ra = mem
        .read_u64(fp.checked_add(8).ok_or(StopReason::NoRule)?)
        .ok_or(StopReason::NoRule)?;
    Ok(Step {
        caller: Regs {
            pc: ra,
            sp: fp.checked_add(16).ok_or(StopReason::NoRule)?,
            fp: caller_fp,
        },
        trust: Trust::FramePointer,
        exact: false,
    })
}

/// Unwinds from `regs`, writing each frame's PC into `pcs` (frame 0 first: the interrupted
/// instruction; then return addresses as found on the stack, not adjusted).
///
/// Rules are looked up through `cache` at the PC for frame 0 and after signal frames, at
/// `return address - 1` for callers. Every memory read goes through `mem`. If `trust` is given,
/// its element `i` receives how frame `i` was found. Never allocates, locks or panics; the loop
/// runs at most `pcs.len()` times.
pub fn unwind<M: Memory + ?Sized>(
    table: &RuleTable<Rule>,
    cache: &mut Cache<CachedRule>,
    regs: Regs,
    mem: &M,
    pcs: &mut [u64],
    trust: Option<&mut [Trust]>,
) -> UnwindResult {
    // Two instantiations: without a trust slice the loop has fewer live values.
    match trust {
        None => walk::<M, false>(table, cache, regs, mem, pcs, &mut []),
        Some(trust) => walk::<M, true>(table, cache, regs, mem, pcs, trust),
    }
}

/// Applies a simple cached rule: one branch on the shape, at most two bounds-checked reads.
#[inline(always)]
fn step_cached<M: Memory + ?Sized>(
    c: &CachedRule,
    regs: &Regs,
    mem: &M,
) -> Result<Regs, StopReason> {
    // A branch, not a select: the common case (CFA on rsp) is predicted and its address
    // arithmetic need not wait for the shape byte to load.
    let base = if c.shape & CachedRule::CFA_FP == 0 {
        regs.sp
    } else {
        regs.fp
    };
    let cfa = add(base, c.cfa);
    let pc = mem
        .read_u64(add(base, c.ra))
        .ok_or(StopReason::ReadFailed)?;
    let fp = if c.shape & CachedRule::FP_SAVED != 0 {
        mem.read_u64(add(base, c.fp))
            .ok_or(StopReason::ReadFailed)?
    } else {
        regs.fp
    };
    Ok(Regs { pc, sp: cfa, fp })
}

/// Applies a rule that is not one of the simple shapes, fetched from the table by index.
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
    // Subtracted from the PC for the lookup: 0 for frame 0 and after a signal frame (the PC is
    // the exact instruction), 1 for return addresses (the call is the byte before).
    let mut adjust = 0u64;
    let mut how = Trust::Context;
    cache.prepare(table);
    let mut i = 0;
    while let Some(slot) = pcs.get_mut(i) {
        *slot = regs.pc;
        if TRUST {
            if let Some(t) = trust.get_mut(i) {
                *t = how;
            }
        }
        let Some((module, c)) = cache.lookup_prepared(table, regs.pc.wrapping_sub(adjust)) else {
            return stopped(cache, i, StopReason::BadRule);
        };
        let caller = if c.shape == 0 {
            // The most common rule by far: CFA on rsp, rbp unchanged. One comparison.
            adjust = 1;
            how = Trust::Cfi;
            let cfa = add(regs.sp, c.cfa);
            mem.read_u64(add(regs.sp, c.ra))
                .map(|pc| Regs {
                    pc,
                    sp: cfa,
                    fp: regs.fp,
                })
                .ok_or(StopReason::ReadFailed)
        } else if c.shape & CachedRule::SLOW == 0 {
            adjust = 1;
            how = Trust::Cfi;
            step_cached(c, &regs, mem)
        } else if c.shape & CachedRule::END != 0 {
            return stopped(cache, i, StopReason::EndOfStack);
        } else {
            let step = if c.shape & CachedRule::NONE == 0 {
                step_other(table, module, c.ra, regs, mem)
            } else {
                step_frame_pointer(regs, mem)
            };
            step.map(|s| {
                adjust = u64::from(!s.exact);
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
        if caller.sp <= regs.sp {
            return stopped(cache, i, StopReason::SpNotIncreasing);
        }
        regs = caller;
        i += 1;
    }
    cache.count_lookups(pcs.len() as u64);
    let (frames, stop) = (pcs.len(), StopReason::BufferFull);
    UnwindResult { frames, stop }
}
