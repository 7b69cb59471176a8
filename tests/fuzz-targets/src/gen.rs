//! Rules, expressions and registers of any architecture from fuzzer bytes
//! ([`arbitrary::Unstructured`]), for the targets that build tables by hand.

use arbitrary::{Result, Unstructured};
use unwind_core::expr::{Expr, Op};
use unwind_core::{aarch64, arm, x86_64};
use unwind_dwarf::DwarfArch;

/// An architecture whose rules and registers the fuzzer can choose.
pub(crate) trait Gen: DwarfArch {
    /// How many registers expressions may name (`Op::Reg(0)` to `Op::Reg(TRACKED - 1)`).
    const TRACKED: u8;
    /// A rule; expression indices below `exprs` refer to the module's expressions (others are
    /// left as they come, some out of range).
    fn rule(u: &mut Unstructured<'_>, exprs: u16) -> Result<Self::Rule>;
    /// Registers: PC from `pcs`, SP from `sps` (or any value), the rest any value or from `sps`.
    fn regs(u: &mut Unstructured<'_>, pcs: &[u64], sps: &[u64]) -> Result<Self::Regs>;
    /// The rule marks a signal frame (its caller's PC is exact).
    fn signal_frame(rule: &Self::Rule) -> bool;
    /// The callee registers as Breakpad names them, with their values.
    fn breakpad_registers(regs: &Self::Regs) -> Vec<(&'static str, u64)>;
}

/// A stack offset: usually a small multiple of the word size, sometimes any value.
fn offset(u: &mut Unstructured<'_>, word: i32) -> Result<i32> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => u.arbitrary()?,
        _ => i32::from(u.int_in_range(-32i8..=32)?) * word,
    })
}

fn expr_index(u: &mut Unstructured<'_>, exprs: u16) -> Result<u16> {
    match u.ratio(1, 8)? {
        true => u.arbitrary(),
        false => u.int_in_range(0..=exprs.saturating_sub(1)),
    }
}

/// An expression program of up to 16 operations over registers `0..regs`.
pub(crate) fn expr(u: &mut Unstructured<'_>, regs: u8) -> Result<Expr> {
    let n = u.int_in_range(1..=16usize)?;
    let mut ops = Vec::with_capacity(n);
    for _ in 0..n {
        ops.push(match u.int_in_range(0..=24u8)? {
            0..=3 => Op::Reg(u.int_in_range(0..=regs)?),
            4..=6 => Op::Const(match u.arbitrary()? {
                true => u.arbitrary()?,
                false => i64::from(u.int_in_range(-64i8..=64)?),
            }),
            7 | 8 => Op::Deref,
            9 | 10 => Op::Add,
            11 => Op::Sub,
            12 => Op::And,
            13 => Op::Shl,
            14 => Op::Shr,
            15 => Op::Ge,
            16 => Op::Lt,
            17 => Op::Mul,
            18 => Op::Or,
            19 => Op::Dup,
            20 => Op::Swap,
            21 => Op::Over,
            22 => Op::Drop,
            23 => Op::Neg,
            _ => Op::Not,
        });
    }
    Ok(Expr::new(&ops).unwrap_or_else(|_| unreachable!("16 operations at most")))
}

impl Gen for unwind_dwarf::X86_64 {
    const TRACKED: u8 = 3;

    fn rule(u: &mut Unstructured<'_>, exprs: u16) -> Result<x86_64::Rule> {
        use x86_64::{CfaRule, RegRule};
        let reg = |u: &mut Unstructured<'_>| -> Result<RegRule> {
            Ok(match u.int_in_range(0..=9u8)? {
                0..=4 => RegRule::Offset(offset(u, 8)?),
                5 => RegRule::Undefined,
                6 => RegRule::Same,
                7 => RegRule::ValOffset(offset(u, 8)?),
                8 => RegRule::Expr(expr_index(u, exprs)?),
                _ => RegRule::ValExpr(expr_index(u, exprs)?),
            })
        };
        Ok(x86_64::Rule {
            cfa: match u.int_in_range(0..=5u8)? {
                0..=2 => CfaRule::SpOffset(offset(u, 8)?),
                3 | 4 => CfaRule::FpOffset(offset(u, 8)?),
                _ => CfaRule::Expr(expr_index(u, exprs)?),
            },
            ra: reg(u)?,
            fp: reg(u)?,
            signal_frame: u.ratio(1, 16)?,
        })
    }

    fn regs(u: &mut Unstructured<'_>, pcs: &[u64], sps: &[u64]) -> Result<x86_64::Regs> {
        Ok(x86_64::Regs {
            pc: pick(u, pcs)?,
            sp: pick(u, sps)?,
            fp: pick(u, sps)?,
        })
    }

    fn signal_frame(rule: &x86_64::Rule) -> bool {
        rule.signal_frame
    }

    fn breakpad_registers(regs: &x86_64::Regs) -> Vec<(&'static str, u64)> {
        vec![("$rip", regs.pc), ("$rsp", regs.sp), ("$rbp", regs.fp)]
    }
}

impl Gen for unwind_dwarf::Arm {
    const TRACKED: u8 = 6;

    fn rule(u: &mut Unstructured<'_>, exprs: u16) -> Result<arm::Rule> {
        use arm::{CfaRule, Reg, RegRule, Source};
        let any_reg = |u: &mut Unstructured<'_>| -> Result<Reg> {
            Ok(*u.choose(&[Reg::R7, Reg::R11, Reg::R12, Reg::Sp, Reg::Lr, Reg::Pc])?)
        };
        let reg = |u: &mut Unstructured<'_>| -> Result<RegRule> {
            Ok(match u.int_in_range(0..=10u8)? {
                0..=3 => RegRule::Offset(offset(u, 4)?),
                4 => RegRule::Undefined,
                5 | 6 => RegRule::Same,
                7 => RegRule::ValOffset(offset(u, 4)?),
                8 => RegRule::Register(any_reg(u)?),
                9 => RegRule::Expr(expr_index(u, exprs)?),
                _ => RegRule::ValExpr(expr_index(u, exprs)?),
            })
        };
        Ok(arm::Rule {
            cfa: match u.int_in_range(0..=5u8)? {
                0..=4 => CfaRule::RegOffset(any_reg(u)?, offset(u, 4)?),
                _ => CfaRule::Expr(expr_index(u, exprs)?),
            },
            pc: reg(u)?,
            lr: reg(u)?,
            sp: match u.ratio(3, 4)? {
                true => RegRule::ValOffset(0),
                false => reg(u)?,
            },
            r12: reg(u)?,
            r11: reg(u)?,
            r7: reg(u)?,
            source: *u.choose(&[Source::Dwarf, Source::Exidx, Source::Instructions])?,
            signal_frame: u.ratio(1, 16)?,
        })
    }

    fn regs(u: &mut Unstructured<'_>, pcs: &[u64], sps: &[u64]) -> Result<arm::Regs> {
        let word =
            |u: &mut Unstructured<'_>, from: &[u64]| -> Result<u32> { Ok(pick(u, from)? as u32) };
        Ok(arm::Regs {
            pc: word(u, pcs)?,
            lr: word(u, pcs)?,
            sp: word(u, sps)?,
            r12: word(u, sps)?,
            r11: word(u, sps)?,
            r7: word(u, sps)?,
        })
    }

    fn signal_frame(rule: &arm::Rule) -> bool {
        rule.signal_frame
    }

    fn breakpad_registers(regs: &arm::Regs) -> Vec<(&'static str, u64)> {
        [
            ("pc", regs.pc),
            ("lr", regs.lr),
            ("sp", regs.sp),
            ("r12", regs.r12),
            ("r11", regs.r11),
            ("r7", regs.r7),
        ]
        .into_iter()
        .map(|(n, v)| (n, u64::from(v)))
        .collect()
    }
}

impl Gen for unwind_dwarf::Aarch64 {
    const TRACKED: u8 = 4;

    fn rule(u: &mut Unstructured<'_>, exprs: u16) -> Result<aarch64::Rule> {
        use aarch64::{CfaRule, RegRule};
        let reg = |u: &mut Unstructured<'_>| -> Result<RegRule> {
            Ok(match u.int_in_range(0..=9u8)? {
                0..=4 => RegRule::Offset(offset(u, 8)?),
                5 => RegRule::Undefined,
                6 => RegRule::Same,
                7 => RegRule::ValOffset(offset(u, 8)?),
                8 => RegRule::Expr(expr_index(u, exprs)?),
                _ => RegRule::ValExpr(expr_index(u, exprs)?),
            })
        };
        let ra = reg(u)?;
        Ok(aarch64::Rule {
            cfa: match u.int_in_range(0..=5u8)? {
                0..=2 => CfaRule::SpOffset(offset(u, 8)?),
                3 | 4 => CfaRule::FpOffset(offset(u, 8)?),
                _ => CfaRule::Expr(expr_index(u, exprs)?),
            },
            ra,
            // x30 is the return-address column: the same rule but in signal frames.
            lr: match u.ratio(7, 8)? {
                true => ra,
                false => reg(u)?,
            },
            fp: reg(u)?,
            ra_signed: u.arbitrary()?,
            signal_frame: u.ratio(1, 16)?,
            from_instructions: false,
        })
    }

    fn regs(u: &mut Unstructured<'_>, pcs: &[u64], sps: &[u64]) -> Result<aarch64::Regs> {
        Ok(aarch64::Regs {
            pc: pick(u, pcs)?,
            sp: pick(u, sps)?,
            fp: pick(u, sps)?,
            lr: pick(u, pcs)?,
        })
    }

    fn signal_frame(rule: &aarch64::Rule) -> bool {
        rule.signal_frame
    }

    fn breakpad_registers(regs: &aarch64::Regs) -> Vec<(&'static str, u64)> {
        vec![
            ("pc", regs.pc),
            ("sp", regs.sp),
            ("x29", regs.fp),
            ("x30", regs.lr),
        ]
    }
}

/// One of `from` (plus a small offset), or any value.
pub(crate) fn pick(u: &mut Unstructured<'_>, from: &[u64]) -> Result<u64> {
    if from.is_empty() || u.ratio(1, 8)? {
        return u.arbitrary();
    }
    let base = *u.choose(from)?;
    Ok(base.wrapping_add(u64::from(u.int_in_range(0..=64u8)?)))
}
