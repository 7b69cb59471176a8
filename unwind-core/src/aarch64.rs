//! 64-bit ARM (AArch64, A64 code): the tracked registers (PC, SP, x29 = the frame pointer,
//! x30 = the link register), their typed rules, their simple cached forms, and how each applies
//! ([`Aarch64`]).
//!
//! The return address is x30's value: the DWARF return-address column is x30, so one rule
//! gives both the caller's x30 and its PC ([`Rule::ra`] and [`Rule::lr`] are equal), except in
//! a signal frame, which restores the interrupted PC and x30 apart. While a function has not
//! saved it (a leaf, a prologue before the frame record's store), the return address is still
//! in x30 ([`RegRule::Same`]).
//!
//! **Pointer authentication.** A function built with `-mbranch-protection` signs x30 on entry
//! (`paciasp`) and authenticates it before returning; in between, the saved return address
//! carries a pointer authentication code in its upper bits, and DWARF says so with
//! `DW_CFA_AARCH64_negate_ra_state` ([`Rule::ra_signed`]). The unwinder strips the code, never
//! authenticates it (an authentication failure faults on cores with FEAT_FPAC, and a signal
//! handler must not fault): it clears the bits of [`Memory::pointer_mask`], the bits that are
//! not address in an instruction pointer of the unwound process (a property of the process,
//! given with its stack, not carried from frame to frame). The runtime finds that mask with
//! `xpaclri` (a hint-space instruction, a no-op on cores without pointer authentication, so
//! the mask is 0 there), and an offline walk takes it from the sample (Linux reports it as
//! `NT_ARM_PAC_MASK`). Every return address is stripped, whether DWARF calls it signed or not
//! (and whether a rule or a fallback found it): a return address that is not signed has no bit
//! set there (code addresses are below the virtual-address size), so its stripping changes
//! nothing, and the walk needs no per-frame test (the cached rule has no signed flag; qemu-aarch64
//! on a Rust workload's 1,500-sample sequence: 41.5 instructions a frame with the test, 39.7
//! without). A stripped value still has to be a return address into a module's code, looked up
//! as any other. The table keeps DWARF's signing state ([`Rule::ra_signed`]) for its other
//! users.

use crate::arch::{likely, returns_into_code, Arch};
use crate::expr::{EvalContext, Expr};
use crate::memory::Memory;
use crate::stop::{StopReason, Trust};
use crate::table::RuleTable;

/// Tracked registers, numbered as [`crate::expr::Op::Reg`] refers to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Reg {
    /// The program counter (DWARF register 32).
    Pc = 0,
    /// The stack pointer (DWARF register 31).
    Sp = 1,
    /// x29, the frame pointer.
    Fp = 2,
    /// x30, the link register (the return-address column).
    Lr = 3,
}

impl Reg {
    /// The tracked register with AArch64 DWARF register number `n`, if tracked.
    pub fn from_dwarf(n: u16) -> Option<Reg> {
        Some(match n {
            29 => Reg::Fp,
            30 => Reg::Lr,
            31 => Reg::Sp,
            32 => Reg::Pc,
            _ => return None,
        })
    }
}

/// The register values of one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// The interrupted instruction (frame 0) or the return address (callers), stripped.
    pub pc: u64,
    /// The stack pointer.
    pub sp: u64,
    /// x29, the frame pointer.
    pub fp: u64,
    /// x30, the link register, as the frame holds it (signed, if it was), where the frame's PC
    /// is exact (frame 0, a signal frame's caller). At any other frame x30 held the frame's own
    /// return address (its PC) when it made its call, and the walk does not track it: steps
    /// leave it unspecified there and read it as the PC ([`Regs::as_seen`]).
    pub lr: u64,
}

impl Regs {
    /// The value of `r`.
    #[inline]
    pub fn get(&self, r: Reg) -> u64 {
        match r {
            Reg::Pc => self.pc,
            Reg::Sp => self.sp,
            Reg::Fp => self.fp,
            Reg::Lr => self.lr,
        }
    }

    /// The registers as a rule sees them at a frame whose PC is `exact` or not: at a frame that
    /// made a call (not exact), x30 is that call's return address, the frame's PC (stripped:
    /// its signed form is not kept).
    #[inline]
    pub fn as_seen(&self, exact: bool) -> Regs {
        if exact {
            *self
        } else {
            Regs {
                lr: self.pc,
                ..*self
            }
        }
    }

    /// Values indexed by [`Reg`] number, for expressions.
    fn values(&self) -> [u64; 4] {
        [self.pc, self.sp, self.fp, self.lr]
    }
}

/// How to compute the CFA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CfaRule {
    /// `sp + offset`.
    SpOffset(i32),
    /// `x29 + offset`.
    FpOffset(i32),
    /// The value of expression `n` of the rule's module.
    Expr(u16),
}

/// How to recover a register of the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RegRule {
    /// Saved at `[CFA + offset]`.
    Offset(i32),
    /// No value. For x30 this is the explicit end-of-stack rule.
    Undefined,
    /// Unchanged from the callee (for x30: the return address is still in the link register).
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

/// The rule for one address: the CFA (the caller's SP), the return address (the caller's PC),
/// x30 and x29.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// The CFA; the caller's SP is the CFA.
    pub cfa: CfaRule,
    /// The return address, whose value, stripped, is the caller's PC: the rule of the DWARF
    /// return-address column (x30). `Same`: it is still in the callee's x30.
    pub ra: RegRule,
    /// The caller's x30: the same rule as `ra` (x30 is the return-address column), except
    /// where a signal frame restores the interrupted x30 apart from the interrupted PC.
    pub lr: RegRule,
    /// The caller's x29.
    pub fp: RegRule,
    /// The return address is signed (DWARF's `RA_SIGN_STATE` is 1). Recorded for the table's
    /// users (exports, tests); the walk strips every return address, signed or not.
    pub ra_signed: bool,
    /// The frame is a signal trampoline: the caller's PC is exact (looked up as is).
    pub signal_frame: bool,
    /// Read from the function's instructions (no unwind table describes it), not from CFI.
    pub from_instructions: bool,
}

impl Default for Rule {
    /// The rule at a function's first instruction: nothing saved, the return address in x30.
    fn default() -> Self {
        Rule {
            cfa: CfaRule::SpOffset(0),
            ra: RegRule::Same,
            lr: RegRule::Same,
            fp: RegRule::Same,
            ra_signed: false,
            signal_frame: false,
            from_instructions: false,
        }
    }
}

impl Rule {
    /// True if this is the explicit end-of-stack rule (x30 undefined).
    #[inline]
    pub fn is_end_of_stack(&self) -> bool {
        self.ra == RegRule::Undefined
    }
}

/// The shape of a [`Simple`] rule, as bits of its value: the CFA's base register and which of
/// x29 and x30 are left in their registers. Every combination is a variant (the enum's unused
/// values are what [`Cached`](crate::cache::Cached) stores its other cases in, keeping it 8
/// bytes). A frame record (both saved), nearly every frame that made a call, is 0 or 1: one
/// comparison tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[allow(missing_docs)] // The names spell their bits.
pub enum Shape {
    SpSavedFpLr = 0,
    FpSavedFpLr = 1,
    SpSavedFp = 2,
    FpSavedFp = 3,
    SpSavedLr = 4,
    FpSavedLr = 5,
    Sp = 6,
    Fp = 7,
}

impl Shape {
    /// Set in the shapes whose CFA is on x29.
    const CFA_ON_FP: u8 = 1;
    /// Set in the shapes that leave x30 in its register (the return address is still there).
    const LR_KEPT: u8 = 2;
    /// Set in the shapes that leave x29 in its register.
    const FP_KEPT: u8 = 4;

    const ALL: [Shape; 8] = [
        Shape::SpSavedFpLr,
        Shape::FpSavedFpLr,
        Shape::SpSavedFp,
        Shape::FpSavedFp,
        Shape::SpSavedLr,
        Shape::FpSavedLr,
        Shape::Sp,
        Shape::Fp,
    ];
}

/// A rule of one of the 8 [`Shape`]s, decoded for the cache: the CFA at a non-negative offset
/// below 64 KiB from its base register (SP or x29), x29 and x30 each unchanged or saved between
/// the base register and the CFA. All of a frame's words are then in `[base, CFA)`, which one
/// test admits ([`Memory::contains`]) before they are read unchecked, as on x86_64. Debian 12's
/// arm64 libc: 69 % of rows save both x29 and x30 on a CFA on SP (a frame record), 27 % save
/// nothing (x30 still holds the return address), 2 % have the CFA on x29. 8 bytes, 8-aligned,
/// and so is its cached form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(align(8))]
pub struct Simple {
    /// The CFA (the caller's SP) is `base + cfa`.
    cfa: u16,
    /// The caller's x29 is at `[base + fp]`, with `fp <= cfa - 8` (unless `FP_KEPT`).
    fp: u16,
    /// The caller's x30 is at `[base + lr]`, with `lr <= cfa - 8` (unless `LR_KEPT`).
    lr: u16,
    shape: Shape,
}

impl Simple {
    #[inline]
    fn of(rule: &Rule) -> Option<Simple> {
        if rule.signal_frame || rule.lr != rule.ra {
            return None;
        }
        let (on_fp, cfa) = match rule.cfa {
            CfaRule::SpOffset(o) => (false, o),
            CfaRule::FpOffset(o) => (true, o),
            CfaRule::Expr(_) => return None,
        };
        let cfa16 = u16::try_from(cfa).ok()?;
        // A saved register's offset from the base register, inside `[base, CFA - 8]`. One
        // unsigned comparison for `0 <= at <= cfa - 8` (a sum that overflows is negative, and
        // refused with the rest; so is any offset when `cfa < 8`).
        let saved = |r: RegRule| -> Option<Option<u16>> {
            match r {
                RegRule::Same => Some(None),
                RegRule::Offset(o) => match cfa.wrapping_add(o) {
                    at if cfa >= 8 && at as u32 <= (cfa - 8) as u32 => Some(Some(at as u16)),
                    _ => None,
                },
                _ => None,
            }
        };
        let fp = saved(rule.fp)?;
        let lr = saved(rule.ra)?;
        let flag = |set: bool, bit: u8| if set { bit } else { 0 };
        let bits = flag(on_fp, Shape::CFA_ON_FP)
            | flag(fp.is_none(), Shape::FP_KEPT)
            | flag(lr.is_none(), Shape::LR_KEPT);
        Some(Simple {
            cfa: cfa16,
            fp: fp.unwrap_or(0),
            lr: lr.unwrap_or(0),
            shape: Shape::ALL[usize::from(bits)],
        })
    }
}

/// The outcome of one step on AArch64.
pub type Step = crate::arch::Step<Regs>;

/// `ra` without the pointer authentication code (and top byte) of the process `mem` is of.
#[inline(always)]
fn strip<M: Memory + ?Sized>(mem: &M, ra: u64) -> u64 {
    ra & !mem.pointer_mask()
}

/// x30 (`lr`) as the return address of the frame at `pc`, where a rule says it is still there
/// (`Same`). At a frame that made a call x30 holds that call's return address, the frame's own
/// PC: the caller is not known ([`StopReason::ReturnAddressLost`]). Every frame whose PC is not
/// `exact` made a call (and its `lr` is not tracked, [`Regs::lr`]); at an exact one, x30 may
/// still be found equal to the PC.
#[inline(always)]
fn ra_in_x30<M: Memory + ?Sized>(
    mem: &M,
    exact: bool,
    pc: u64,
    lr: u64,
) -> Result<u64, StopReason> {
    if !exact || strip(mem, lr) == pc {
        return Err(StopReason::ReturnAddressLost);
    }
    Ok(lr)
}

#[inline]
fn add(base: u64, offset: i32) -> u64 {
    base.wrapping_add(offset as i64 as u64)
}

#[inline]
fn read<M: Memory + ?Sized>(mem: &M, addr: u64) -> Result<u64, StopReason> {
    mem.read_u64(addr).ok_or(StopReason::ReadFailed)
}

/// Evaluates expression `expr` of `module` (rare: signal trampolines; kept out of the hot
/// loop).
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
    let vals = regs.values();
    let ctx = EvalContext {
        regs: &vals,
        memory: mem,
        word_size: 8,
    };
    e.eval(&ctx, initial).map_err(StopReason::from)
}

/// Recovers one register: `same` is the callee's value of that register.
#[allow(clippy::too_many_arguments)]
fn recover<M: Memory + ?Sized>(
    rule: RegRule,
    same: u64,
    cfa: u64,
    table: &RuleTable<Rule>,
    module: u16,
    regs: Regs,
    mem: &M,
) -> Result<u64, StopReason> {
    Ok(match rule {
        RegRule::Offset(o) => read(mem, add(cfa, o))?,
        RegRule::Undefined => 0,
        RegRule::Same => same,
        RegRule::ValOffset(o) => add(cfa, o),
        RegRule::Expr(i) => {
            let a = eval(table, module, i, regs, mem, Some(cfa))?;
            read(mem, a)?
        }
        RegRule::ValExpr(i) => eval(table, module, i, regs, mem, Some(cfa))?,
        RegRule::Lost => return Err(StopReason::ReturnAddressLost),
    })
}

/// [`Aarch64::step_simple`] for a frame whose words are not all readable: each word read on its
/// own, so that the walk ends as it would with the rule from the table. The callee's PC, x30
/// and x29 come as scalars: a `Regs` by value would keep the loop's registers in memory.
#[cold]
#[inline(never)]
fn step_simple_checked<M: Memory + ?Sized>(
    rule: &Simple,
    base: u64,
    cfa: u64,
    exact: bool,
    (pc, lr, fp): (u64, u64, u64),
    mem: &M,
) -> Result<Regs, StopReason> {
    let shape = rule.shape as u8;
    let lr = if shape & Shape::LR_KEPT == 0 {
        read(mem, base.wrapping_add(u64::from(rule.lr)))?
    } else {
        ra_in_x30(mem, exact, pc, lr)?
    };
    let fp = if shape & Shape::FP_KEPT == 0 {
        read(mem, base.wrapping_add(u64::from(rule.fp)))?
    } else {
        fp
    };
    Ok(Regs {
        pc: strip(mem, lr),
        sp: cfa,
        fp,
        lr,
    })
}

/// Frame-record fallback (AAPCS64): x29 points to a record of the caller's x29 and the return
/// address (`[x29]`, `[x29 + 8]`). Accepted only if x29 is 8-aligned, not below SP, and both
/// words are readable. The record may be anywhere in its frame, so the caller's SP is not known:
/// it is taken to be just above the record (`x29 + 16`, as framehop and the eBPF profilers
/// take it), its lowest possible value.
fn step_frame_record<M: Memory + ?Sized>(regs: Regs, mem: &M) -> Result<Step, StopReason> {
    let fp = regs.fp;
    if !fp.is_multiple_of(8) || fp < regs.sp {
        return Err(StopReason::NoRule);
    }
    let caller_fp = mem.read_u64(fp).ok_or(StopReason::NoRule)?;
    let lr = mem
        .read_u64(fp.checked_add(8).ok_or(StopReason::NoRule)?)
        .ok_or(StopReason::NoRule)?;
    Ok(Step {
        caller: Regs {
            pc: strip(mem, lr),
            sp: fp.checked_add(16).ok_or(StopReason::NoRule)?,
            fp: caller_fp,
            lr,
        },
        trust: Trust::FramePointer,
        exact: false,
    })
}

impl crate::table::TableRule for Rule {
    type Ready = crate::cache::Ready<Simple>;

    fn ready(&self) -> Self::Ready {
        crate::cache::Ready::of::<Aarch64>(self)
    }
}

/// The byte form of AArch64 rules: the CFA rule, the return address's, x30's and x29's rules
/// (each a tag and a 4-byte payload: an offset, an expression index or nothing), the
/// signed-return-address, signal-frame and from-instructions flags, 23 bytes.
impl crate::table::RuleBytes for Rule {
    const ARCH: [u8; 4] = *b"a64\0";
    const SIZE: usize = 23;

    fn write(&self, out: &mut alloc::vec::Vec<u8>) {
        use crate::table::bytes::write_tagged;
        let (tag, payload) = match self.cfa {
            CfaRule::SpOffset(o) => (0, o as u32),
            CfaRule::FpOffset(o) => (1, o as u32),
            CfaRule::Expr(i) => (2, u32::from(i)),
        };
        write_tagged(out, tag, payload);
        for r in [self.ra, self.lr, self.fp] {
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
        out.push(u8::from(self.ra_signed));
        out.push(u8::from(self.signal_frame));
        out.push(u8::from(self.from_instructions));
    }

    fn read(
        r: &mut crate::table::bytes::RuleReader<'_>,
    ) -> Result<Self, crate::table::RulesBytesError> {
        use crate::table::bytes::payload::{index, none, offset};
        const CFA: &str = "aarch64 CFA rule";
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
        let ra = reg("aarch64 return address rule")?;
        let lr = reg("aarch64 x30 rule")?;
        let fp = reg("aarch64 x29 rule")?;
        let ra_signed = r.bool("aarch64 signed return address flag")?;
        let signal_frame = r.bool("aarch64 signal frame flag")?;
        let from_instructions = r.bool("aarch64 rule source flag")?;
        Ok(Rule {
            cfa,
            ra,
            lr,
            fp,
            ra_signed,
            signal_frame,
            from_instructions,
        })
    }

    fn exprs(&self, mut each: impl FnMut(u16)) {
        if let CfaRule::Expr(i) = self.cfa {
            each(i);
        }
        for r in [self.ra, self.lr, self.fp] {
            if let RegRule::Expr(i) | RegRule::ValExpr(i) = r {
                each(i);
            }
        }
    }
}

/// The AArch64 architecture: rules from DWARF CFI; return addresses stripped of their pointer
/// authentication code and looked up at `PC - 1`; a leaf's return address in x30, then the
/// frame-record chain of x29, as fallbacks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Aarch64;

impl Arch for Aarch64 {
    const NAME: &'static str = "aarch64";
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

    /// `PC - 1` is inside the call instruction (`bl`, `blr`) the return address follows. The PC
    /// is already stripped (the walk stores return addresses so).
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

    /// One range test for the frame's words (`[base, CFA)`), then at most two reads; the
    /// return address stripped (as every one is).
    #[inline(always)]
    fn step_simple<M: Memory + ?Sized>(
        rule: &Simple,
        regs: &Regs,
        exact: bool,
        mem: &M,
    ) -> Result<Regs, StopReason> {
        let shape = rule.shape as u8;
        let base = if shape & Shape::CFA_ON_FP != 0 {
            regs.fp
        } else {
            regs.sp
        };
        let (cfa, carry) = base.overflowing_add(u64::from(rule.cfa));
        if !likely(!carry && mem.contains(base, cfa)) {
            return step_simple_checked(rule, base, cfa, exact, (regs.pc, regs.lr, regs.fp), mem);
        }
        let (fp, lr) = if likely(shape <= Shape::FpSavedFpLr as u8) {
            // SAFETY: `[base, cfa)` is readable (`contains`), and `Simple::of` put both words
            // inside it: `base + at` with `0 <= at <= cfa - 8` (no carry: `base + cfa` did not
            // overflow).
            unsafe {
                (
                    mem.load_u64(base + u64::from(rule.fp)),
                    mem.load_u64(base + u64::from(rule.lr)),
                )
            }
        } else {
            let lr = if shape & Shape::LR_KEPT == 0 {
                // SAFETY: as above, for x30's word.
                unsafe { mem.load_u64(base + u64::from(rule.lr)) }
            } else {
                ra_in_x30(mem, exact, regs.pc, regs.lr)?
            };
            let fp = if shape & Shape::FP_KEPT == 0 {
                // SAFETY: as above, for x29's word.
                unsafe { mem.load_u64(base + u64::from(rule.fp)) }
            } else {
                regs.fp
            };
            (fp, lr)
        };
        // The caller's x30 is left as it was: the caller made a call, so it is not tracked
        // ([`Regs::lr`]). Writing it kept one more register live in the loop (callgrind, the
        // same 1,500 samples: 44.9 instructions a frame against 43.1).
        Ok(Regs {
            pc: strip(mem, lr),
            sp: cfa,
            fp,
            lr: regs.lr,
        })
    }

    /// Applies `rule` (found in module `module` of `table`) to the callee's `regs`: the caller's
    /// registers, or why there are none (`EndOfStack` for the end-of-stack rule).
    fn step_rule<M: Memory + ?Sized>(
        table: &RuleTable<Rule>,
        module: u16,
        rule: &Rule,
        regs: &Regs,
        exact: bool,
        mem: &M,
    ) -> Result<Step, StopReason> {
        let regs = regs.as_seen(exact);
        let cfa = match rule.cfa {
            CfaRule::SpOffset(o) => add(regs.sp, o),
            CfaRule::FpOffset(o) => add(regs.fp, o),
            CfaRule::Expr(i) => eval(table, module, i, regs, mem, None)?,
        };
        if rule.is_end_of_stack() {
            return Err(StopReason::EndOfStack);
        }
        let r = |rule: RegRule, same: u64| recover(rule, same, cfa, table, module, regs, mem);
        let ra = match rule.ra {
            RegRule::Same => ra_in_x30(mem, exact, regs.pc, regs.lr)?,
            ra => r(ra, regs.lr)?,
        };
        let lr = if rule.lr == rule.ra {
            ra
        } else {
            r(rule.lr, regs.lr)?
        };
        let fp = r(rule.fp, regs.fp)?;
        Ok(Step {
            caller: Regs {
                pc: strip(mem, ra),
                sp: cfa,
                fp,
                lr,
            },
            trust: Trust::Cfi,
            exact: rule.signal_frame,
        })
    }

    /// An interrupted frame (frame 0, a signal frame's caller) without a rule is first
    /// assumed to be a leaf whose return address is still in x30 ([`Trust::LinkRegister`]) if
    /// x30, stripped, returns into code; else it is unwound by its frame record.
    fn step_without_rule<M: Memory + ?Sized>(
        table: &RuleTable<Rule>,
        regs: &Regs,
        exact: bool,
        mem: &M,
    ) -> Result<Step, StopReason> {
        let ra = strip(mem, regs.lr);
        if exact && ra != 0 && ra != regs.pc {
            let caller = Regs { pc: ra, ..*regs };
            if returns_into_code::<Self>(table, &caller) {
                return Ok(Step {
                    caller,
                    trust: Trust::LinkRegister,
                    exact: false,
                });
            }
        }
        step_frame_record(*regs, mem)
    }

    /// `ret` was stripped by the scan (a signed return address on the stack is found by its
    /// address bits).
    #[inline]
    fn scanned_caller(regs: &Regs, ret: u64, sp: u64) -> Regs {
        Regs {
            pc: ret,
            sp,
            lr: ret,
            ..*regs
        }
    }

    /// SP must not decrease, and must increase after any frame but an interrupted one (a
    /// leaf's caller has the same SP).
    #[inline(always)]
    fn sp_increases(caller: &Regs, callee: &Regs, exact: bool) -> bool {
        caller.sp > callee.sp || (caller.sp == callee.sp && exact)
    }

    /// The PC stripped as return addresses are ([`Memory::pointer_mask`]).
    #[inline(always)]
    fn first_frame<M: Memory + ?Sized>(regs: Regs, mem: &M) -> Regs {
        Regs {
            pc: strip(mem, regs.pc),
            ..regs
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cached;

    fn rule(cfa: CfaRule, ra: RegRule, fp: RegRule) -> Rule {
        Rule {
            cfa,
            ra,
            lr: ra,
            fp,
            ra_signed: false,
            signal_frame: false,
            from_instructions: false,
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(core::mem::size_of::<Regs>(), 32);
        assert_eq!(core::mem::size_of::<Simple>(), 8);
        assert_eq!(core::mem::size_of::<Cached<Simple>>(), 8);
    }

    /// Every shape is the variant its bits say, so that the bit tests in `step_simple` read
    /// what `Simple::of` meant.
    #[test]
    fn shapes_are_their_bits() {
        for (i, s) in Shape::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
        }
    }

    /// A cached rule keeps every word of its frame inside `[base, CFA)`; the rest stays in the
    /// table.
    #[test]
    fn simple_rules_keep_their_words_inside_the_frame() {
        let record = |cfa: i32, fp: i32, lr: i32| {
            Simple::of(&rule(
                CfaRule::SpOffset(cfa),
                RegRule::Offset(lr),
                RegRule::Offset(fp),
            ))
        };
        let s = record(32, -32, -24).unwrap();
        assert_eq!((s.cfa, s.fp, s.lr, s.shape), (32, 0, 8, Shape::SpSavedFpLr));
        assert!(record(16, -16, -8).is_some());
        assert!(record(16, -16, 0).is_none(), "x30 at the CFA");
        assert!(record(16, -24, -8).is_none(), "x29 below the base");
        assert!(record(65_535, -65_535, -65_527).is_some());
        assert!(
            record(65_536, -16, -8).is_none(),
            "a CFA 64 KiB up: the table"
        );
        assert!(record(-16, -16, -8).is_none(), "a CFA below the base");
        assert!(
            record(16, i32::MAX, -8).is_none(),
            "an offset that overflows"
        );
        let leaf = Simple::of(&Rule::default()).unwrap();
        assert_eq!((leaf.cfa, leaf.shape), (0, Shape::Sp));
        let on_fp = Simple::of(&Rule {
            cfa: CfaRule::FpOffset(16),
            ra: RegRule::Offset(-8),
            lr: RegRule::Offset(-8),
            fp: RegRule::Offset(-16),
            ra_signed: true,
            signal_frame: false,
            from_instructions: false,
        })
        .unwrap();
        assert_eq!(on_fp.shape, Shape::FpSavedFpLr, "signed or not: one shape");
        let mut rule = rule(CfaRule::SpOffset(16), RegRule::ValOffset(0), RegRule::Same);
        assert!(Simple::of(&rule).is_none(), "x30 = CFA: the table");
        rule.ra = RegRule::Same;
        assert!(
            Simple::of(&rule).is_none(),
            "x30 apart from the PC: the table"
        );
        rule.lr = RegRule::Same;
        assert!(Simple::of(&rule).is_some());
        rule.signal_frame = true;
        assert!(Simple::of(&rule).is_none(), "a signal frame: the table");
    }
}
