//! x86_64: the tracked registers (PC, SP, FP = rbp), their typed rules, and the unwind loop.
//!
//! The caller's stack pointer is the CFA, by the psABI's definition of the CFA as the value of
//! `rsp` at the call site, so only the CFA, the return address and `rbp` need rules.

use crate::cache::Cache;
use crate::expr::{EvalContext, Expr, Op};
use crate::memory::Memory;
use crate::table::RuleTable;
use crate::unwind::{StopReason, Trust, UnwindResult};

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
    /// No value. For the return address this is the explicit end-of-stack rule.
    Undefined,
    /// Unchanged from the callee.
    Same,
    /// Saved at `[CFA + offset]`.
    Offset(i32),
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

#[inline]
fn eval<M: Memory + ?Sized>(
    table: &RuleTable<Rule>,
    module: u16,
    expr: u16,
    regs: &Regs,
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
    e.eval(&ctx, initial).map_err(|err| match err {
        crate::expr::ExprError::ReadFailed => StopReason::ReadFailed,
        _ => StopReason::ExpressionFailed,
    })
}

#[inline]
fn recover<M: Memory + ?Sized>(
    rule: RegRule,
    same: u64,
    cfa: u64,
    table: &RuleTable<Rule>,
    module: u16,
    regs: &Regs,
    mem: &M,
) -> Result<Option<u64>, StopReason> {
    Ok(Some(match rule {
        RegRule::Undefined => return Ok(None),
        RegRule::Same => same,
        RegRule::Offset(o) => mem.read_u64(add(cfa, o)).ok_or(StopReason::ReadFailed)?,
        RegRule::ValOffset(o) => add(cfa, o),
        RegRule::Expr(i) => {
            let a = eval(table, module, i, regs, mem, Some(cfa))?;
            mem.read_u64(a).ok_or(StopReason::ReadFailed)?
        }
        RegRule::ValExpr(i) => eval(table, module, i, regs, mem, Some(cfa))?,
    }))
}

/// Applies `rule` (found in module `module` of `table`, which holds its expressions) to the
/// callee's `regs`: the caller's registers, or why there are none (`EndOfStack` for the
/// end-of-stack rule).
#[inline]
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
        CfaRule::Expr(i) => eval(table, module, i, regs, mem, None)?,
    };
    let pc = match rule.ra {
        RegRule::Undefined => return Err(StopReason::EndOfStack),
        RegRule::Same => return Err(StopReason::BadRule),
        ra => recover(ra, regs.pc, cfa, table, module, regs, mem)?.unwrap_or(0),
    };
    let fp = recover(rule.fp, regs.fp, cfa, table, module, regs, mem)?.unwrap_or(0);
    Ok(Step {
        caller: Regs { pc, sp: cfa, fp },
        trust: Trust::Cfi,
        exact: rule.signal_frame,
    })
}

/// Frame-pointer fallback: `[rbp]` is the caller's `rbp`, `[rbp + 8]` the return address.
/// Accepted only if `rbp` is 8-aligned, not below SP, and both words are readable.
#[inline]
pub fn step_frame_pointer<M: Memory + ?Sized>(regs: &Regs, mem: &M) -> Result<Step, StopReason> {
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
    cache: &mut Cache<Rule>,
    regs: Regs,
    mem: &M,
    pcs: &mut [u64],
    mut trust: Option<&mut [Trust]>,
) -> UnwindResult {
    let mut regs = regs;
    let mut exact = true;
    let mut how = Trust::Context;
    let mut frames = 0usize;
    let stop = loop {
        let Some(slot) = pcs.get_mut(frames) else {
            break StopReason::BufferFull;
        };
        *slot = regs.pc;
        if let Some(t) = trust.as_deref_mut().and_then(|t| t.get_mut(frames)) {
            *t = how;
        }
        frames += 1;
        let addr = if exact {
            regs.pc
        } else {
            regs.pc.wrapping_sub(1)
        };
        let step = match cache.lookup(table, addr) {
            Some((module, rule)) => step_cfi(table, module, &rule, &regs, mem),
            None => step_frame_pointer(&regs, mem),
        };
        let step = match step {
            Ok(s) => s,
            Err(stop) => break stop,
        };
        if step.caller.pc == 0 {
            break StopReason::ZeroReturnAddress;
        }
        if step.caller.sp <= regs.sp {
            break StopReason::SpNotIncreasing;
        }
        regs = step.caller;
        how = step.trust;
        exact = step.exact;
    };
    UnwindResult { frames, stop }
}
