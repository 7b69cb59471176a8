//! x86_64 ([`X86_64`]): the tracked registers (PC, SP, FP = rbp), their typed rules, their
//! simple cached forms, and how each applies.
//!
//! The caller's stack pointer is the CFA, by the psABI's definition of the CFA as the value of
//! `rsp` at the call site, so only the CFA, the return address and `rbp` need rules.

use crate::arch::{likely, Arch};
use crate::expr::{EvalContext, Expr, Op};
use crate::memory::Memory;
use crate::stop::{StopReason, Trust};
use crate::table::RuleTable;

/// PCs below this are in the null page, which nothing maps: a PC there was reached by calling
/// a null function pointer (or one a small offset from null).
const NULL_PAGE: u64 = 4096;

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
    /// The value is gone: for the return address, the frame's save slot no longer holds it
    /// (GCC's `__builtin_eh_return` path in libgcc's `_Unwind_RaiseException` and its siblings
    /// has copied an exception handler's registers over the frame's saved ones). The walk
    /// stops there ([`StopReason::ReturnAddressLost`]): the caller is not known.
    Lost,
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
    #[inline]
    pub fn is_end_of_stack(&self) -> bool {
        self.ra == RegRule::Undefined
    }
}

/// The shape of a [`Simple`] rule: which register the CFA is on and whether `rbp` is saved
/// (bits `CFA_ON_FP` and `FP_SAVED` of its value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Shape {
    /// CFA on `rsp`, `rbp` unchanged: the most common rule by far (one comparison in the loop).
    Sp = 0,
    /// CFA on `rsp`, `rbp` saved.
    SpSavedFp = 1,
    /// CFA on `rbp`, `rbp` unchanged.
    Fp = 2,
    /// CFA on `rbp`, `rbp` saved (a frame-pointer function's body).
    FpSavedFp = 3,
}

impl Shape {
    /// Set in the value of the shapes whose CFA is on `rbp`.
    const CFA_ON_FP: u8 = 2;
    /// Set in the value of the shapes that restore `rbp` from the stack.
    const FP_SAVED: u8 = 1;
}

/// A rule of one of the four [`Shape`]s, decoded for the cache: the return address in the word
/// just below the CFA (where a call puts it) and a saved `rbp` between the base register
/// (`rsp`, or `rbp` for the `Fp` shapes) and it. All of a frame's words are then in
/// `[base, CFA)`, which one test admits ([`Memory::contains`]) before the words are read
/// unchecked: cc1's sequence 56.4 -> 50.2 instructions a frame, python3's 51.6 -> 43.7, against
/// a bounds check on every read.
///
/// 8 bytes, 8-aligned, and so is its cached form ([`Cached`](crate::cache::Cached), whose other
/// forms fit beside the shape byte): a cache slot (the form and its address) is 16 bytes, four
/// to a cache line, none across two (at 24 bytes, a quarter of the slots spanned two lines, and
/// the slots took 12 KiB instead of 8). A saved `rbp` more than 64 KiB above the base register
/// is applied from the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(align(8))]
pub struct Simple {
    /// The CFA (the caller's `rsp`) is `base + cfa`; at least 8, and the return address is at
    /// `[base + cfa - 8]`.
    cfa: i32,
    /// The caller's `rbp` is at `[base + fp]`, with `fp <= cfa - 8` (for the `SavedFp` shapes).
    fp: u16,
    shape: Shape,
}

impl Simple {
    #[inline]
    fn of(rule: &Rule) -> Option<Simple> {
        if rule.signal_frame {
            return None;
        }
        let (on_fp, cfa) = match rule.cfa {
            CfaRule::SpOffset(o) => (false, o),
            CfaRule::FpOffset(o) => (true, o),
            CfaRule::Expr(_) => return None,
        };
        // The return address just below the CFA, which is above the base register: where a
        // call puts it. A rule that says otherwise is applied from the table.
        if rule.ra != RegRule::Offset(-8) || cfa < 8 {
            return None;
        }
        let (saved, fp) = match rule.fp {
            RegRule::Same => (false, 0),
            // An offset from the base register. A saved `rbp` outside the frame's words (below
            // `rsp` once an epilogue has popped it) is applied from the table.
            // One unsigned comparison for `0 <= fp <= cfa - 8` (`cfa >= 8`): a sum that
            // overflows is negative (`cfa` is positive), and so is refused with the rest.
            RegRule::Offset(o) => match cfa.wrapping_add(o) {
                fp if fp as u32 <= (cfa - 8) as u32 => (true, u16::try_from(fp).ok()?),
                _ => return None,
            },
            _ => return None,
        };
        let shape = match (on_fp, saved) {
            (false, false) => Shape::Sp,
            (false, true) => Shape::SpSavedFp,
            (true, false) => Shape::Fp,
            (true, true) => Shape::FpSavedFp,
        };
        Some(Simple { shape, cfa, fp })
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

/// The outcome of one step on x86_64.
pub type Step = crate::arch::Step<Regs>;

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
        RegRule::Lost => return Err(StopReason::ReturnAddressLost),
    })
}

/// Frame-pointer fallback: `[rbp]` is the caller's `rbp`, `[rbp + 8]` the return address.
/// Accepted only if `rbp` is 8-aligned, not below SP, and both words are readable.
#[inline(never)]
fn step_frame_pointer<M: Memory + ?Sized>(regs: Regs, mem: &M) -> Result<Step, StopReason> {
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

/// [`X86_64::step_simple`] for a frame whose words are not all readable (a stack cut short, a
/// frame pointer gone astray, a memory without [`Memory::contains`]): each word read on its own,
/// so that the walk ends as it would with the rule from the table. The registers come by value:
/// a reference would keep the loop's registers in memory.
#[cold]
#[inline(never)]
fn step_simple_checked<M: Memory + ?Sized>(
    rule: &Simple,
    base: u64,
    cfa: u64,
    fp: u64,
    mem: &M,
) -> Result<Regs, StopReason> {
    let read = |a| mem.read_u64(a).ok_or(StopReason::ReadFailed);
    let pc = read(cfa.wrapping_sub(8))?;
    let fp = if rule.shape as u8 & Shape::FP_SAVED != 0 {
        read(add(base, i32::from(rule.fp)))?
    } else {
        fp
    };
    Ok(Regs { pc, sp: cfa, fp })
}

impl crate::table::TableRule for Rule {
    type Ready = crate::cache::Ready<Simple>;

    fn ready(&self) -> Self::Ready {
        crate::cache::Ready::of::<X86_64>(self)
    }
}

/// The byte form of x86_64 rules: the CFA rule, the return address's and `rbp`'s rules (each a
/// tag and a 4-byte payload: an offset, an expression index or nothing) and the signal-frame
/// flag, 16 bytes.
impl crate::table::RuleBytes for Rule {
    const ARCH: [u8; 4] = *b"x64\0";
    const SIZE: usize = 16;

    fn write(&self, out: &mut alloc::vec::Vec<u8>) {
        use crate::table::bytes::write_tagged;
        let (tag, payload) = match self.cfa {
            CfaRule::SpOffset(o) => (0, o as u32),
            CfaRule::FpOffset(o) => (1, o as u32),
            CfaRule::Expr(i) => (2, u32::from(i)),
        };
        write_tagged(out, tag, payload);
        for r in [self.ra, self.fp] {
            let (tag, payload) = match r {
                RegRule::Offset(o) => (0, o as u32),
                RegRule::Undefined => (1, 0),
                RegRule::Same => (2, 0),
                RegRule::ValOffset(o) => (3, o as u32),
                RegRule::Expr(i) => (4, u32::from(i)),
                RegRule::ValExpr(i) => (5, u32::from(i)),
                RegRule::Lost => (6, 0),
            };
            write_tagged(out, tag, payload);
        }
        out.push(u8::from(self.signal_frame));
    }

    fn read(
        r: &mut crate::table::bytes::RuleReader<'_>,
    ) -> Result<Self, crate::table::RulesBytesError> {
        use crate::table::bytes::payload::{index, none, offset};
        const CFA: &str = "x86_64 CFA rule";
        let cfa = match r.tag(CFA, 3)? {
            0 => CfaRule::SpOffset(r.payload(CFA, offset)?),
            1 => CfaRule::FpOffset(r.payload(CFA, offset)?),
            _ => CfaRule::Expr(r.payload(CFA, index)?),
        };
        let mut reg = |what| {
            Ok(match r.tag(what, 7)? {
                0 => RegRule::Offset(r.payload(what, offset)?),
                1 => r.payload(what, none).map(|()| RegRule::Undefined)?,
                2 => r.payload(what, none).map(|()| RegRule::Same)?,
                3 => RegRule::ValOffset(r.payload(what, offset)?),
                4 => RegRule::Expr(r.payload(what, index)?),
                5 => RegRule::ValExpr(r.payload(what, index)?),
                _ => r.payload(what, none).map(|()| RegRule::Lost)?,
            })
        };
        let ra = reg("x86_64 return address rule")?;
        let fp = reg("x86_64 rbp rule")?;
        let signal_frame = r.bool("x86_64 signal frame flag")?;
        Ok(Rule {
            cfa,
            ra,
            fp,
            signal_frame,
        })
    }

    fn exprs(&self, mut each: impl FnMut(u16)) {
        if let CfaRule::Expr(i) = self.cfa {
            each(i);
        }
        for r in [self.ra, self.fp] {
            if let RegRule::Expr(i) | RegRule::ValExpr(i) = r {
                each(i);
            }
        }
    }
}

/// The x86_64 architecture: 64-bit PC, SP and `rbp`; return addresses looked up at `PC - 1`;
/// the frame-pointer chain as the fallback.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct X86_64;

impl Arch for X86_64 {
    const NAME: &'static str = "x86_64";
    const WORD_BYTES: u8 = 8;
    type Regs = Regs;
    type Rule = Rule;
    type Simple = Simple;

    #[inline(always)]
    fn pc(regs: &Regs) -> u64 {
        regs.pc
    }

    #[inline(always)]
    fn sp(regs: &Regs) -> u64 {
        regs.sp
    }

    #[inline(always)]
    fn lookup_address(regs: &Regs, exact: bool) -> u64 {
        regs.pc.wrapping_sub(u64::from(!exact))
    }

    #[inline]
    fn stop(rule: &Rule) -> Option<StopReason> {
        match rule.ra {
            RegRule::Undefined => Some(StopReason::EndOfStack),
            RegRule::Lost => Some(StopReason::ReturnAddressLost),
            _ => None,
        }
    }

    #[inline]
    fn simple(rule: &Rule) -> Option<Simple> {
        Simple::of(rule)
    }

    #[inline]
    fn is_signal_frame(rule: &Rule) -> bool {
        rule.signal_frame
    }

    /// One range test for the frame's words (`[base, CFA)`), then at most two reads; a frame
    /// whose words are not all readable is read word by word, with the same outcome as
    /// [`step_rule`](Arch::step_rule) for the rule.
    #[inline(always)]
    fn step_simple<M: Memory + ?Sized>(
        rule: &Simple,
        regs: &Regs,
        _exact: bool,
        mem: &M,
    ) -> Result<Regs, StopReason> {
        let shape = rule.shape as u8;
        let base = if shape & Shape::CFA_ON_FP != 0 {
            regs.fp
        } else {
            regs.sp
        };
        // `Simple::of` made the offset at least 8: without a carry, `base < cfa`.
        let (cfa, carry) = base.overflowing_add(rule.cfa as u64);
        if !likely(!carry && mem.contains(base, cfa)) {
            return step_simple_checked(rule, base, cfa, regs.fp, mem);
        }
        // SAFETY: `[base, cfa)` is readable (`contains`) and not empty (no carry, offset at
        // least 8), and `Simple::of` put both words inside it: the return address at `cfa - 8`,
        // the saved `rbp` at `base + fp` with `0 <= fp <= cfa - 8`.
        let pc = unsafe { mem.load_u64(cfa - 8) };
        let fp = if shape & Shape::FP_SAVED != 0 {
            // SAFETY: as above.
            unsafe { mem.load_u64(add(base, i32::from(rule.fp))) }
        } else {
            regs.fp
        };
        Ok(Regs { pc, sp: cfa, fp })
    }

    /// Applies `rule` (found in module `module` of `table`, which holds its expressions) to the
    /// callee's `regs`: the caller's registers, or why there are none (`EndOfStack` for the
    /// end-of-stack rule). The common rules (CFA on SP or FP, return address and FP saved at
    /// `CFA + offset` or unchanged) are handled inline; the rest out of line.
    #[inline(always)]
    fn step_rule<M: Memory + ?Sized>(
        table: &RuleTable<Rule>,
        module: u16,
        rule: &Rule,
        regs: &Regs,
        _exact: bool,
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

    /// An interrupted PC in the null page (a call through a null function pointer, or a
    /// null object's method table: the call faulted before its target ran) returns to the
    /// address the call pushed, at SP ([`Trust::LinkRegister`]); any other frame without a
    /// rule is unwound by its frame pointer.
    fn step_without_rule<M: Memory + ?Sized>(
        _table: &RuleTable<Rule>,
        regs: &Regs,
        exact: bool,
        mem: &M,
    ) -> Result<Step, StopReason> {
        if exact && regs.pc < NULL_PAGE {
            let pc = mem.read_u64(regs.sp).ok_or(StopReason::ReadFailed)?;
            let caller = Regs {
                pc,
                sp: regs.sp.checked_add(8).ok_or(StopReason::ReadFailed)?,
                fp: regs.fp,
            };
            return Ok(Step {
                caller,
                trust: Trust::LinkRegister,
                exact: false,
            });
        }
        step_frame_pointer(*regs, mem)
    }

    #[inline]
    fn scanned_caller(regs: &Regs, ret: u64, sp: u64) -> Regs {
        Regs {
            pc: ret,
            sp,
            fp: regs.fp,
        }
    }

    /// Strictly: a call pushes the return address, so even a leaf's CFA is above its SP.
    #[inline(always)]
    fn sp_increases(caller: &Regs, callee: &Regs, _exact: bool) -> bool {
        caller.sp > callee.sp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cached;

    /// A cached rule keeps every word of its frame inside `[base, CFA)`: the return address
    /// just below the CFA, a saved `rbp` from the base to it; the rest stays in the table.
    #[test]
    fn simple_rules_keep_their_words_inside_the_frame() {
        let rule = |cfa: i32, ra: i32, fp: RegRule| Rule {
            cfa: CfaRule::SpOffset(cfa),
            ra: RegRule::Offset(ra),
            fp,
            signal_frame: false,
        };
        let fp_at = |cfa, o| Simple::of(&rule(cfa, -8, RegRule::Offset(o))).map(|s| s.fp);
        assert_eq!(fp_at(16, -16), Some(0));
        assert_eq!(fp_at(16, -8), Some(8));
        assert_eq!(
            fp_at(65_560, -25),
            Some(65_535),
            "the highest saved rbp kept"
        );
        assert_eq!(
            fp_at(65_560, -24),
            None,
            "64 KiB above the base: from the table"
        );
        assert_eq!(fp_at(16, -24), None, "below the base register");
        assert_eq!(fp_at(16, 0), None, "at the CFA");
        assert_eq!(fp_at(16, i32::MAX), None, "an offset that overflows");
        assert_eq!(fp_at(i32::MAX, i32::MIN), None);
        assert!(Simple::of(&rule(16, -8, RegRule::Same)).is_some());
        assert!(
            Simple::of(&rule(16, -16, RegRule::Same)).is_none(),
            "not below the CFA"
        );
        assert!(
            Simple::of(&rule(4, -8, RegRule::Same)).is_none(),
            "CFA below 8"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(core::mem::size_of::<Simple>(), 8);
        assert_eq!(core::mem::size_of::<Cached<Simple>>(), 8);
    }
}
