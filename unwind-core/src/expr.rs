//! A small postfix expression form for the DWARF expressions that read only tracked registers.
//!
//! DWARF expressions are compiled once, at preload time, into an [`Expr`]: at most
//! [`MAX_OPS`] operations without branches, evaluated with a fixed stack of [`STACK_DEPTH`]
//! words. Evaluation is therefore bounded, allocation-free and reads memory only through
//! [`Memory`]. Two expressions every x86_64 Linux process needs:
//! - the PLT CFA: `rsp + 8 + ((rip & 15) >= 11) << 3`;
//! - glibc's `__restore_rt` signal trampoline: `CFA = *(rsp + 160)`, `rip` saved at `rsp + 168`.

use crate::memory::Memory;

/// Operations in an expression program. Registers are numbered by the architecture's tracked
/// register set (for x86_64: 0 = PC, 1 = SP, 2 = FP; see [`crate::x86_64::Reg`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Op {
    /// Push the value of tracked register `n` in the frame being unwound.
    Reg(u8),
    /// Push a constant.
    Const(i64),
    /// Pop an address, push the word read there (8 bytes on 64-bit, 4 on 32-bit targets).
    Deref,
    /// Pop b, pop a, push a + b.
    Add,
    /// Pop b, pop a, push a - b.
    Sub,
    /// Pop b, pop a, push a * b.
    Mul,
    /// Pop b, pop a, push a & b.
    And,
    /// Pop b, pop a, push a | b.
    Or,
    /// Pop b, pop a, push a ^ b.
    Xor,
    /// Pop b, pop a, push a << b (0 when b >= 64).
    Shl,
    /// Pop b, pop a, push a >> b, logical (0 when b >= 64).
    Shr,
    /// Pop b, pop a, push a >> b, arithmetic.
    Shra,
    /// Pop a, push -a.
    Neg,
    /// Pop a, push !a.
    Not,
    /// Pop b, pop a, push 1 if a >= b (signed) else 0.
    Ge,
    /// Pop b, pop a, push 1 if a > b (signed) else 0.
    Gt,
    /// Pop b, pop a, push 1 if a <= b (signed) else 0.
    Le,
    /// Pop b, pop a, push 1 if a < b (signed) else 0.
    Lt,
    /// Pop b, pop a, push 1 if a == b else 0.
    Eq,
    /// Pop b, pop a, push 1 if a != b else 0.
    Ne,
    /// Push a copy of the top.
    Dup,
    /// Pop and discard.
    Drop,
    /// Exchange the top two.
    Swap,
    /// Push a copy of the second from the top.
    Over,
    /// Does nothing (fills unused slots).
    #[default]
    Nop,
}

/// The maximum number of operations in one expression.
pub const MAX_OPS: usize = 24;
/// The depth of the evaluation stack.
pub const STACK_DEPTH: usize = 8;

/// A compiled expression: a fixed-size postfix program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Expr {
    ops: [Op; MAX_OPS],
    len: u8,
}

/// Why an expression could not be built or evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExprError {
    /// More than [`MAX_OPS`] operations.
    TooLong,
    /// More than [`STACK_DEPTH`] values on the stack.
    StackOverflow,
    /// An operation found too few values on the stack, or the program left none.
    StackUnderflow,
    /// A `Reg` named a register the architecture does not track.
    BadRegister,
    /// A `Deref` address was outside the readable memory.
    ReadFailed,
}

/// What an expression may read while it runs.
pub struct EvalContext<'a, M: Memory + ?Sized> {
    /// Values of the tracked registers, indexed by register number.
    pub regs: &'a [u64],
    /// Stack memory.
    pub memory: &'a M,
    /// Word size in bytes: 8 on x86_64, 4 on 32-bit ARM (values are masked to 32 bits).
    pub word_size: u8,
}

impl Expr {
    /// Builds an expression from operations.
    pub fn new(ops: &[Op]) -> Result<Self, ExprError> {
        if ops.len() > MAX_OPS {
            return Err(ExprError::TooLong);
        }
        let mut expr = Expr {
            ops: [Op::Nop; MAX_OPS],
            len: ops.len() as u8,
        };
        expr.ops[..ops.len()].copy_from_slice(ops);
        Ok(expr)
    }

    /// The operations.
    pub fn ops(&self) -> &[Op] {
        self.ops.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// The deepest the evaluation stack gets, found without running the program (it has no
    /// branches). `initial` counts a value pushed before the first operation. Programs that
    /// would under- or overflow fail here, so they can be refused when tables are built.
    pub fn stack_depth(&self, initial: bool) -> Result<usize, ExprError> {
        let mut depth = usize::from(initial);
        let mut max = depth;
        for op in self.ops() {
            let (pops, pushes) = match op {
                Op::Nop => (0, 0),
                Op::Reg(_) | Op::Const(_) => (0, 1),
                Op::Deref | Op::Neg | Op::Not => (1, 1),
                Op::Dup => (1, 2),
                Op::Drop => (1, 0),
                Op::Swap => (2, 2),
                Op::Over => (2, 3),
                _ => (2, 1),
            };
            depth = depth.checked_sub(pops).ok_or(ExprError::StackUnderflow)? + pushes;
            max = max.max(depth);
        }
        if depth == 0 {
            return Err(ExprError::StackUnderflow);
        }
        if max > STACK_DEPTH {
            return Err(ExprError::StackOverflow);
        }
        Ok(max)
    }

    /// Runs the program. `initial`, if given, is pushed first (DWARF pushes the CFA before a
    /// register's `DW_CFA_expression`). Returns the value on top of the stack at the end.
    pub fn eval<M: Memory + ?Sized>(
        &self,
        ctx: &EvalContext<'_, M>,
        initial: Option<u64>,
    ) -> Result<u64, ExprError> {
        let mask = if ctx.word_size == 4 {
            u64::from(u32::MAX)
        } else {
            u64::MAX
        };
        let mut stack = [0u64; STACK_DEPTH];
        let mut sp = 0usize;
        let push = |stack: &mut [u64; STACK_DEPTH], sp: &mut usize, v: u64| {
            let slot = stack.get_mut(*sp).ok_or(ExprError::StackOverflow)?;
            *slot = v & mask;
            *sp += 1;
            Ok::<(), ExprError>(())
        };
        let pop = |stack: &[u64; STACK_DEPTH], sp: &mut usize| {
            let i = sp.checked_sub(1).ok_or(ExprError::StackUnderflow)?;
            *sp = i;
            stack.get(i).copied().ok_or(ExprError::StackUnderflow)
        };
        if let Some(v) = initial {
            push(&mut stack, &mut sp, v)?;
        }
        for op in self.ops() {
            match *op {
                Op::Nop => {}
                Op::Reg(r) => {
                    let v = *ctx.regs.get(usize::from(r)).ok_or(ExprError::BadRegister)?;
                    push(&mut stack, &mut sp, v)?;
                }
                Op::Const(c) => push(&mut stack, &mut sp, c as u64)?,
                Op::Deref => {
                    let a = pop(&stack, &mut sp)?;
                    let v = if ctx.word_size == 4 {
                        ctx.memory.read_u32(a).map(u64::from)
                    } else {
                        ctx.memory.read_u64(a)
                    };
                    push(&mut stack, &mut sp, v.ok_or(ExprError::ReadFailed)?)?;
                }
                Op::Neg | Op::Not => {
                    let a = pop(&stack, &mut sp)?;
                    let v = if *op == Op::Neg { a.wrapping_neg() } else { !a };
                    push(&mut stack, &mut sp, v)?;
                }
                Op::Dup => {
                    let a = pop(&stack, &mut sp)?;
                    push(&mut stack, &mut sp, a)?;
                    push(&mut stack, &mut sp, a)?;
                }
                Op::Drop => {
                    pop(&stack, &mut sp)?;
                }
                Op::Swap | Op::Over => {
                    let b = pop(&stack, &mut sp)?;
                    let a = pop(&stack, &mut sp)?;
                    if *op == Op::Swap {
                        push(&mut stack, &mut sp, b)?;
                        push(&mut stack, &mut sp, a)?;
                    } else {
                        push(&mut stack, &mut sp, a)?;
                        push(&mut stack, &mut sp, b)?;
                        push(&mut stack, &mut sp, a)?;
                    }
                }
                binary => {
                    let b = pop(&stack, &mut sp)?;
                    let a = pop(&stack, &mut sp)?;
                    let v = apply_binary(binary, a, b, ctx.word_size)
                        .ok_or(ExprError::StackUnderflow)?;
                    push(&mut stack, &mut sp, v)?;
                }
            }
        }
        pop(&stack, &mut sp)
    }
}

impl Op {
    /// This binary operation on `a` and `b` (`a op b`, comparisons signed at `word_size`
    /// bytes; shift amounts of 64 or more, and negative ones, shift everything out), as
    /// [`Expr::eval`] computes it, before masking to the word size; `None` for an operation
    /// that is not binary. For tools that fold constants the way the evaluator would.
    #[inline]
    pub fn apply(self, a: u64, b: u64, word_size: u8) -> Option<u64> {
        apply_binary(self, a, b, word_size)
    }
}

/// [`Op::apply`], a free function for the evaluator's loop.
#[inline]
fn apply_binary(op: Op, a: u64, b: u64, word_size: u8) -> Option<u64> {
    let (sa, sb) = signed(a, b, word_size);
    Some(match op {
        Op::Add => a.wrapping_add(b),
        Op::Sub => a.wrapping_sub(b),
        Op::Mul => a.wrapping_mul(b),
        Op::And => a & b,
        Op::Or => a | b,
        Op::Xor => a ^ b,
        Op::Shl => a.checked_shl(shift(b)).unwrap_or(0),
        Op::Shr => a.checked_shr(shift(b)).unwrap_or(0),
        Op::Shra => sa.checked_shr(shift(b)).unwrap_or(sa >> 63) as u64,
        Op::Ge => u64::from(sa >= sb),
        Op::Gt => u64::from(sa > sb),
        Op::Le => u64::from(sa <= sb),
        Op::Lt => u64::from(sa < sb),
        Op::Eq => u64::from(a == b),
        Op::Ne => u64::from(a != b),
        _ => return None,
    })
}

fn shift(b: u64) -> u32 {
    u32::try_from(b).unwrap_or(u32::MAX)
}

/// Sign-extends operands for comparisons at the target's word size.
fn signed(a: u64, b: u64, word_size: u8) -> (i64, i64) {
    if word_size == 4 {
        (i64::from(a as u32 as i32), i64::from(b as u32 as i32))
    } else {
        (a as i64, b as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::StackImage;

    fn plt() -> Expr {
        crate::x86_64::plt_cfa_expression()
    }

    #[test]
    fn plt_cfa_expression() {
        let mem = StackImage::new(0, &[]);
        for (pc, expected) in [(0x1000, 0x7008), (0x100a, 0x7008), (0x100b, 0x7010)] {
            let regs = [pc, 0x7000, 0];
            let ctx = EvalContext {
                regs: &regs,
                memory: &mem,
                word_size: 8,
            };
            assert_eq!(plt().eval(&ctx, None), Ok(expected));
        }
    }

    #[test]
    fn deref_is_bounds_checked() {
        let mut bytes = [0u8; 176];
        bytes[160..168].copy_from_slice(&0x9999u64.to_le_bytes());
        let mem = StackImage::new(0x1000, &bytes);
        let e = Expr::new(&[Op::Reg(1), Op::Const(160), Op::Add, Op::Deref]).unwrap();
        let regs = [0, 0x1000, 0];
        let ctx = EvalContext {
            regs: &regs,
            memory: &mem,
            word_size: 8,
        };
        assert_eq!(e.eval(&ctx, None), Ok(0x9999));
        let regs = [0, 0x1100, 0];
        let ctx = EvalContext {
            regs: &regs,
            memory: &mem,
            word_size: 8,
        };
        assert_eq!(e.eval(&ctx, None), Err(ExprError::ReadFailed));
    }

    #[test]
    fn malformed_programs_fail_cleanly() {
        let mem = StackImage::new(0, &[]);
        let regs = [1, 2, 3];
        let ctx = EvalContext {
            regs: &regs,
            memory: &mem,
            word_size: 8,
        };
        assert_eq!(
            Expr::new(&[Op::Add]).unwrap().eval(&ctx, None),
            Err(ExprError::StackUnderflow)
        );
        assert_eq!(
            Expr::new(&[Op::Reg(9)]).unwrap().eval(&ctx, None),
            Err(ExprError::BadRegister)
        );
        assert_eq!(
            Expr::new(&[Op::Dup; 9]).unwrap().eval(&ctx, Some(1)),
            Err(ExprError::StackOverflow)
        );
        assert_eq!(Expr::new(&[Op::Nop; MAX_OPS + 1]), Err(ExprError::TooLong));
        assert_eq!(
            Expr::new(&[]).unwrap().eval(&ctx, None),
            Err(ExprError::StackUnderflow)
        );
        let shifts = Expr::new(&[Op::Const(1), Op::Const(200), Op::Shl]).unwrap();
        assert_eq!(shifts.eval(&ctx, None), Ok(0));
    }

    #[test]
    fn static_depth_matches_evaluation() {
        assert_eq!(plt().stack_depth(false), Ok(3));
        assert_eq!(
            Expr::new(&[Op::Const(0); 8]).unwrap().stack_depth(false),
            Ok(8)
        );
        assert_eq!(
            Expr::new(&[Op::Const(0); 8]).unwrap().stack_depth(true),
            Err(ExprError::StackOverflow)
        );
        assert_eq!(
            Expr::new(&[Op::Add]).unwrap().stack_depth(true),
            Err(ExprError::StackUnderflow)
        );
        assert_eq!(
            Expr::new(&[Op::Drop]).unwrap().stack_depth(true),
            Err(ExprError::StackUnderflow)
        );
        assert_eq!(Expr::new(&[Op::Deref]).unwrap().stack_depth(true), Ok(1));
    }

    #[test]
    fn word_size_four_masks_and_sign_extends() {
        let mem = StackImage::new(0, &[]);
        let regs = [0xffff_fff0, 0, 0];
        let ctx = EvalContext {
            regs: &regs,
            memory: &mem,
            word_size: 4,
        };
        let e = Expr::new(&[Op::Reg(0), Op::Const(0x20), Op::Add]).unwrap();
        assert_eq!(e.eval(&ctx, None), Ok(0x10));
        let lt = Expr::new(&[Op::Reg(0), Op::Const(0), Op::Lt]).unwrap();
        assert_eq!(lt.eval(&ctx, None), Ok(1));
    }
}
