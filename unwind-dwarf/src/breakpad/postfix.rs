//! Our postfix [`Expr`] programs as Breakpad `STACK CFI` postfix text, and the per-address
//! expansion of PC-dependent CFA expressions.
//!
//! Breakpad's language has only `+ - * / % @ ^`, decimal constants, registers, `.cfa` and
//! `.undef`, and no stack operations. A program is translated by running it symbolically: every
//! stack slot holds a constant or the Breakpad text computing it. Stack operations (`dup`,
//! `swap`, ...) move texts around; operations on constants are folded with the same word-size
//! semantics as [`Expr::eval`]; the rest map to Breakpad operators where that is exact
//! (`x << k` is `x 2^k *`, `x >> k` is `x 2^k /`, `x & (2^k - 1)` is `x 2^k %`,
//! `x & -2^k` is `x 2^k @`, `-x` is `x -1 *`, `!x` is `x -1 * -1 +`). Anything else (comparisons
//! or bitwise operations on register values, arithmetic shifts) has no Breakpad form.

use unwind_core::expr::{Expr, Op};

/// How one architecture's expressions are written.
pub(crate) struct Target {
    /// Breakpad names of the tracked registers, indexed by expression register number.
    pub names: &'static [&'static str],
    /// 8 on x86_64, 4 on 32-bit ARM (as [`EvalContext::word_size`]).
    pub word_size: u8,
}

impl Target {
    /// The Breakpad name of expression register `reg` (`?` if it has none).
    pub(crate) fn name(&self, reg: u8) -> &'static str {
        self.names.get(usize::from(reg)).copied().unwrap_or("?")
    }

    fn mask(&self, v: u64) -> u64 {
        if self.word_size == 4 {
            v & u64::from(u32::MAX)
        } else {
            v
        }
    }

    fn signed(&self, v: u64) -> i64 {
        if self.word_size == 4 {
            i64::from(v as u32 as i32)
        } else {
            v as i64
        }
    }

    /// A constant as Breakpad reads it: signed decimal at the word size, so that adding a
    /// negative offset wraps the same way on every word size.
    pub(crate) fn constant(&self, v: u64) -> String {
        self.signed(self.mask(v)).to_string()
    }
}

/// One slot of the symbolic evaluation stack.
#[derive(Clone, Debug)]
enum Val {
    Const(u64),
    Text(String),
}

impl Val {
    fn text(&self, t: &Target) -> String {
        match self {
            Val::Const(c) => t.constant(*c),
            Val::Text(s) => s.clone(),
        }
    }
}

/// `2^k` if `v` is a power of two.
fn log2(v: u64) -> Option<u32> {
    v.is_power_of_two().then(|| v.trailing_zeros())
}

/// Folds a binary operation on constants as [`Expr::eval`] does.
fn fold(op: Op, a: u64, b: u64, t: &Target) -> Option<u64> {
    op.apply(a, b, t.word_size).map(|v| t.mask(v))
}

/// A binary operation with at least one non-constant operand, if Breakpad can write it.
fn binary_text(op: Op, a: &Val, b: &Val, t: &Target) -> Option<String> {
    let (ta, tb) = (a.text(t), b.text(t));
    let c = |v: &Val| match v {
        Val::Const(c) => Some(t.mask(*c)),
        Val::Text(_) => None,
    };
    match op {
        Op::Add if c(b) == Some(0) => Some(ta),
        Op::Add if c(a) == Some(0) => Some(tb),
        Op::Sub if c(b) == Some(0) => Some(ta),
        Op::Add => Some(format!("{ta} {tb} +")),
        Op::Sub => Some(format!("{ta} {tb} -")),
        Op::Mul => Some(format!("{ta} {tb} *")),
        Op::Shl => {
            let k = c(b)?;
            (k < u64::from(t.word_size) * 8).then(|| format!("{ta} {} *", t.constant(1 << k)))
        }
        Op::Shr => {
            // 2^63 is not a Breakpad constant (signed 64-bit).
            let k = c(b)?;
            (k < u64::from(t.word_size) * 8 && k < 63).then(|| format!("{ta} {} /", 1u64 << k))
        }
        Op::And => {
            // One side constant (and commutes).
            let (m, x) = match (c(a), c(b)) {
                (None, Some(m)) => (m, ta),
                (Some(m), None) => (m, tb),
                _ => return None,
            };
            if let Some(k) = m.checked_add(1).and_then(log2).filter(|&k| k < 63) {
                // x & (2^k - 1): the remainder of an unsigned division.
                Some(format!("{x} {} %", 1u64 << k))
            } else {
                // x & -2^k, at the word size: align down.
                let low = (!m) & t.mask(u64::MAX);
                let k = low.checked_add(1).and_then(log2).filter(|&k| k < 63)?;
                Some(format!("{x} {} @", 1u64 << k))
            }
        }
        _ => None,
    }
}

/// Translates `expr` into Breakpad postfix text. With `initial_cfa`, `.cfa` is pushed first
/// (register rules). Values left below the result are dropped (Breakpad wants exactly one, and
/// the texts have no side effects). `None` if some operation has no Breakpad form.
pub(crate) fn translate(expr: &Expr, t: &Target, initial_cfa: bool) -> Option<String> {
    let mut stack: Vec<Val> = Vec::new();
    if initial_cfa {
        stack.push(Val::Text(".cfa".into()));
    }
    for op in expr.ops() {
        match *op {
            Op::Nop => {}
            Op::Reg(r) => stack.push(Val::Text((*t.names.get(usize::from(r))?).into())),
            Op::Const(c) => stack.push(Val::Const(t.mask(c as u64))),
            Op::Deref => {
                let a = stack.pop()?;
                stack.push(Val::Text(format!("{} ^", a.text(t))));
            }
            Op::Neg | Op::Not => {
                let v = match stack.pop()? {
                    Val::Const(c) if *op == Op::Neg => Val::Const(t.mask(c.wrapping_neg())),
                    Val::Const(c) => Val::Const(t.mask(!c)),
                    Val::Text(s) if *op == Op::Neg => Val::Text(format!("{s} -1 *")),
                    Val::Text(s) => Val::Text(format!("{s} -1 * -1 +")),
                };
                stack.push(v);
            }
            Op::Dup => {
                let a = stack.last()?.clone();
                stack.push(a);
            }
            Op::Drop => {
                stack.pop()?;
            }
            Op::Swap => {
                let n = stack.len();
                if n < 2 {
                    return None;
                }
                stack.swap(n - 1, n - 2);
            }
            Op::Over => {
                let a = stack.get(stack.len().checked_sub(2)?)?.clone();
                stack.push(a);
            }
            binary => {
                let b = stack.pop()?;
                let a = stack.pop()?;
                let v = match (&a, &b) {
                    (Val::Const(x), Val::Const(y)) => Val::Const(fold(binary, *x, *y, t)?),
                    _ => Val::Text(binary_text(binary, &a, &b, t)?),
                };
                stack.push(v);
            }
        }
    }
    stack.pop().map(|v| v.text(t))
}

/// True if `expr` reads register `reg`.
pub(crate) fn reads(expr: &Expr, reg: u8) -> bool {
    expr.ops().contains(&Op::Reg(reg))
}

/// Why a PC-dependent CFA expression could not be expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExpandError {
    /// The range is larger than [`MAX_EXPANSION`] bytes.
    TooLarge,
    /// At some address the value is not `SP + k` for one `k` independent of the other
    /// registers, of memory and of the load bias.
    NotLinear,
}

/// The largest range expanded address by address.
pub(crate) const MAX_EXPANSION: u64 = 1 << 16;

/// Expands a CFA expression that reads the PC over file addresses `start..end`: at each address
/// it is evaluated with the PC at that address (and at that address plus page-aligned load
/// biases), every other register symbolic, and must give `SP + k` for one `k`. Returns
/// `(start, end, k)` for each run of addresses with the same `k`.
pub(crate) fn expand_cfa(
    expr: &Expr,
    t: &Target,
    pc: u8,
    sp: u8,
    start: u64,
    end: u64,
) -> Result<Vec<(u64, u64, i64)>, ExpandError> {
    if end.saturating_sub(start) > MAX_EXPANSION {
        return Err(ExpandError::TooLarge);
    }
    if usize::from(sp) >= t.names.len() || sp == pc {
        return Err(ExpandError::NotLinear);
    }
    let mut out: Vec<(u64, u64, i64)> = Vec::new();
    for a in start..end {
        let mut k: Option<i64> = None;
        for bias in [0u64, 0x7f00_0000, 0x2000_0000] {
            let v = linear_eval(expr, t, pc, t.mask(a.wrapping_add(bias)))?;
            // Coefficients are kept masked: SP's must be 1, every other 0.
            let only_sp = v
                .coeffs
                .iter()
                .enumerate()
                .all(|(r, &c)| c == u64::from(r == usize::from(sp)));
            if !only_sp {
                return Err(ExpandError::NotLinear);
            }
            let this = t.signed(v.constant);
            if k.is_some_and(|k| k != this) {
                return Err(ExpandError::NotLinear);
            }
            k = Some(this);
        }
        let k = k.ok_or(ExpandError::NotLinear)?;
        match out.last_mut() {
            Some(last) if last.1 == a && last.2 == k => last.1 = a + 1,
            _ => out.push((a, a + 1, k)),
        }
    }
    Ok(out)
}

/// A value linear in the registers other than the PC: `constant + sum(coeffs[r] * reg r)`,
/// modulo 2^(8 * word size).
#[derive(Clone, Debug)]
struct Linear {
    constant: u64,
    coeffs: Vec<u64>,
}

impl Linear {
    fn is_constant(&self) -> bool {
        self.coeffs.iter().all(|&c| c == 0)
    }

    /// `self * k`.
    fn scaled(mut self, k: u64, t: &Target) -> Linear {
        self.constant = t.mask(self.constant.wrapping_mul(k));
        for c in &mut self.coeffs {
            *c = t.mask(c.wrapping_mul(k));
        }
        self
    }

    /// `self + sign * other`, `sign` being 1 or -1 (as `u64::MAX`).
    fn plus(mut self, other: &Linear, sign: u64, t: &Target) -> Linear {
        self.constant = t.mask(
            self.constant
                .wrapping_add(other.constant.wrapping_mul(sign)),
        );
        for (c, o) in self.coeffs.iter_mut().zip(&other.coeffs) {
            *c = t.mask(c.wrapping_add(o.wrapping_mul(sign)));
        }
        self
    }
}

/// Runs `expr` as [`Expr::eval`] would with the PC equal to `pc_value` and every other register
/// unknown, keeping each value as a [`Linear`] form of those registers: exact for sums,
/// differences, negations and products or left shifts by constants, and any operation on
/// constants (folded as the evaluator folds them). Anything else on a register's value (memory,
/// comparisons, masks), and every error the evaluator could meet, is `NotLinear`.
fn linear_eval(expr: &Expr, t: &Target, pc: u8, pc_value: u64) -> Result<Linear, ExpandError> {
    use unwind_core::expr::STACK_DEPTH;
    let n = t.names.len();
    let constant = |c: u64| Linear {
        constant: t.mask(c),
        coeffs: vec![0; n],
    };
    let mut stack: Vec<Linear> = Vec::with_capacity(STACK_DEPTH);
    let push = |stack: &mut Vec<Linear>, v: Linear| {
        if stack.len() >= STACK_DEPTH {
            return Err(ExpandError::NotLinear);
        }
        stack.push(v);
        Ok(())
    };
    let pop = |stack: &mut Vec<Linear>| stack.pop().ok_or(ExpandError::NotLinear);
    for op in expr.ops() {
        match *op {
            Op::Nop => {}
            Op::Reg(r) if r == pc => push(&mut stack, constant(pc_value))?,
            Op::Reg(r) => {
                let mut v = constant(0);
                *v.coeffs
                    .get_mut(usize::from(r))
                    .ok_or(ExpandError::NotLinear)? = 1;
                push(&mut stack, v)?;
            }
            Op::Const(c) => push(&mut stack, constant(c as u64))?,
            Op::Deref => return Err(ExpandError::NotLinear),
            // -x; !x is -x - 1.
            Op::Neg | Op::Not => {
                let mut v = pop(&mut stack)?.scaled(u64::MAX, t);
                if *op == Op::Not {
                    v.constant = t.mask(v.constant.wrapping_sub(1));
                }
                push(&mut stack, v)?;
            }
            Op::Dup => {
                let a = pop(&mut stack)?;
                push(&mut stack, a.clone())?;
                push(&mut stack, a)?;
            }
            Op::Drop => {
                pop(&mut stack)?;
            }
            Op::Swap | Op::Over => {
                let b = pop(&mut stack)?;
                let a = pop(&mut stack)?;
                if *op == Op::Swap {
                    push(&mut stack, b)?;
                    push(&mut stack, a)?;
                } else {
                    push(&mut stack, a.clone())?;
                    push(&mut stack, b)?;
                    push(&mut stack, a)?;
                }
            }
            binary => {
                let b = pop(&mut stack)?;
                let a = pop(&mut stack)?;
                let v = match binary {
                    _ if a.is_constant() && b.is_constant() => constant(
                        binary
                            .apply(a.constant, b.constant, t.word_size)
                            .ok_or(ExpandError::NotLinear)?,
                    ),
                    Op::Add => a.plus(&b, 1, t),
                    Op::Sub => a.plus(&b, u64::MAX, t),
                    Op::Mul if b.is_constant() => a.scaled(b.constant, t),
                    Op::Mul if a.is_constant() => b.scaled(a.constant, t),
                    // x << k is x * 2^k (0 once k reaches the word size, as the evaluator's
                    // masked result).
                    Op::Shl if b.is_constant() => {
                        let k = u32::try_from(b.constant).unwrap_or(u32::MAX);
                        a.scaled(1u64.checked_shl(k).unwrap_or(0), t)
                    }
                    _ => return Err(ExpandError::NotLinear),
                };
                push(&mut stack, v)?;
            }
        }
    }
    pop(&mut stack)
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: Target = Target {
        names: &["$rip", "$rsp", "$rbp"],
        word_size: 8,
    };
    const ARM: Target = Target {
        names: &["r7", "r11", "r12", "sp", "lr", "pc"],
        word_size: 4,
    };

    fn e(ops: &[Op]) -> Expr {
        Expr::new(ops).unwrap()
    }

    #[test]
    fn restore_rt_expressions() {
        // CFA = *(rsp + 160); rip saved at rsp + 168 (the CFA pushed first, unused).
        let cfa = e(&[Op::Reg(1), Op::Const(160), Op::Add, Op::Deref]);
        assert_eq!(translate(&cfa, &X86, false).unwrap(), "$rsp 160 + ^");
        let ra = e(&[Op::Reg(1), Op::Const(168), Op::Add]);
        assert_eq!(translate(&ra, &X86, true).unwrap(), "$rsp 168 +");
    }

    #[test]
    fn folding_and_stack_operations() {
        let x = e(&[
            Op::Const(2),
            Op::Const(3),
            Op::Shl,
            Op::Reg(2),
            Op::Swap,
            Op::Sub,
            Op::Dup,
            Op::Drop,
        ]);
        assert_eq!(translate(&x, &X86, false).unwrap(), "$rbp 16 -");
        let masks = e(&[
            Op::Reg(1),
            Op::Const(15),
            Op::And,
            Op::Reg(1),
            Op::Const(-16),
            Op::And,
            Op::Add,
        ]);
        assert_eq!(
            translate(&masks, &X86, false).unwrap(),
            "$rsp 16 % $rsp 16 @ +"
        );
        // ARM masks are 32-bit: 0xfffffff8 aligns down to 8.
        let align = e(&[Op::Reg(3), Op::Const(0xffff_fff8), Op::And]);
        assert_eq!(translate(&align, &ARM, false).unwrap(), "sp 8 @");
        let neg = e(&[Op::Reg(3), Op::Const(-4), Op::Add, Op::Neg]);
        assert_eq!(translate(&neg, &ARM, false).unwrap(), "sp -4 + -1 *");
        // The CFA pushed first and used.
        let over = e(&[Op::Dup, Op::Const(8), Op::Sub, Op::Swap, Op::Drop]);
        assert_eq!(translate(&over, &X86, true).unwrap(), ".cfa 8 -");
    }

    #[test]
    fn unexpressible_programs_are_refused() {
        let plt = unwind_core::x86_64::plt_cfa_expression();
        assert_eq!(translate(&plt, &X86, false), None);
        assert_eq!(
            translate(&e(&[Op::Reg(1), Op::Reg(2), Op::Or]), &X86, false),
            None
        );
        assert_eq!(translate(&e(&[Op::Reg(9)]), &X86, false), None);
        assert_eq!(translate(&e(&[Op::Add]), &X86, false), None);
        assert_eq!(translate(&e(&[]), &X86, false), None);
    }

    #[test]
    fn plt_expression_expands_per_address() {
        let plt = unwind_core::x86_64::plt_cfa_expression();
        let rows = expand_cfa(&plt, &X86, 0, 1, 0x1010, 0x1030).unwrap();
        assert_eq!(
            rows,
            [
                (0x1010, 0x101b, 8),
                (0x101b, 0x1020, 16),
                (0x1020, 0x102b, 8),
                (0x102b, 0x1030, 16)
            ]
        );
        // Depends on rbp: not SP + k.
        let fp = e(&[Op::Reg(0), Op::Reg(2), Op::Add]);
        assert_eq!(
            expand_cfa(&fp, &X86, 0, 1, 0, 4),
            Err(ExpandError::NotLinear)
        );
        // Depends on the absolute PC (the load bias).
        let pc = e(&[Op::Reg(1), Op::Reg(0), Op::Add]);
        assert_eq!(
            expand_cfa(&pc, &X86, 0, 1, 0, 4),
            Err(ExpandError::NotLinear)
        );
        // Another register, moved in step with SP (fuzz/regressions/stack_cfi: an LR that
        // the sampling variants moved with SP read as SP + 16 MiB).
        let lr = e(&[Op::Reg(5), Op::Reg(4)]);
        assert_eq!(
            expand_cfa(&lr, &ARM, 5, 3, 0, 4),
            Err(ExpandError::NotLinear)
        );
        // Registers that cancel out are no dependence; one that only shifts out is one, and
        // is refused.
        let cancel = e(&[
            Op::Reg(1),
            Op::Reg(2),
            Op::Add,
            Op::Reg(2),
            Op::Sub,
            Op::Reg(0),
            Op::Drop,
        ]);
        assert_eq!(
            expand_cfa(&cancel, &X86, 0, 1, 0x10, 0x12),
            Ok(vec![(0x10, 0x12, 0)])
        );
        let shifted = e(&[Op::Reg(1), Op::Reg(2), Op::Const(1), Op::And, Op::Add]);
        assert_eq!(
            expand_cfa(&shifted, &X86, 0, 1, 0, 4),
            Err(ExpandError::NotLinear)
        );
        // Reads memory.
        let deref = e(&[Op::Reg(1), Op::Deref]);
        assert_eq!(
            expand_cfa(&deref, &X86, 0, 1, 0, 4),
            Err(ExpandError::NotLinear)
        );
        assert_eq!(
            expand_cfa(&plt, &X86, 0, 1, 0, MAX_EXPANSION + 1),
            Err(ExpandError::TooLarge)
        );
    }
}
