//! DWARF expressions to `unwind-core` postfix programs.

use gimli::{Encoding, Expression, Operation, Reader, ReaderOffset, Register};
use unwind_core::expr::{Expr, Op};

/// Compiles `expr` if it reads only registers that `reg` maps to tracked-register numbers, uses
/// no branches, calls or typed operations, and fits the evaluation stack (`pushes_cfa`: the CFA
/// is pushed first, as for register rules). Returns `None` otherwise.
pub fn compile_expression<R: Reader>(
    expr: Expression<R>,
    encoding: Encoding,
    pushes_cfa: bool,
    reg: impl Fn(Register) -> Option<u8>,
) -> Option<Expr> {
    let mut ops = [Op::Nop; unwind_core::expr::MAX_OPS];
    let mut n = 0usize;
    let mut emit = |op: Op| -> Option<()> {
        *ops.get_mut(n)? = op;
        // `n` < `MAX_OPS` here.
        n = n.saturating_add(1);
        Some(())
    };
    let mut iter = expr.operations(encoding);
    while let Some(op) = iter.next().ok()? {
        match op {
            Operation::RegisterOffset {
                register,
                offset,
                base_type,
            } if base_type.0 == R::Offset::from_u8(0) => {
                emit(Op::Reg(reg(register)?))?;
                if offset != 0 {
                    emit(Op::Const(offset))?;
                    emit(Op::Add)?;
                }
            }
            Operation::UnsignedConstant { value } => emit(Op::Const(value as i64))?,
            Operation::SignedConstant { value } => emit(Op::Const(value))?,
            Operation::PlusConstant { value } => {
                emit(Op::Const(value as i64))?;
                emit(Op::Add)?;
            }
            Operation::Deref {
                base_type,
                size,
                space: false,
            } if base_type.0 == R::Offset::from_u8(0) && size == encoding.address_size => {
                emit(Op::Deref)?
            }
            Operation::Plus => emit(Op::Add)?,
            Operation::Minus => emit(Op::Sub)?,
            Operation::Mul => emit(Op::Mul)?,
            Operation::And => emit(Op::And)?,
            Operation::Or => emit(Op::Or)?,
            Operation::Xor => emit(Op::Xor)?,
            Operation::Shl => emit(Op::Shl)?,
            Operation::Shr => emit(Op::Shr)?,
            Operation::Shra => emit(Op::Shra)?,
            Operation::Neg => emit(Op::Neg)?,
            Operation::Not => emit(Op::Not)?,
            Operation::Ge => emit(Op::Ge)?,
            Operation::Gt => emit(Op::Gt)?,
            Operation::Le => emit(Op::Le)?,
            Operation::Lt => emit(Op::Lt)?,
            Operation::Eq => emit(Op::Eq)?,
            Operation::Ne => emit(Op::Ne)?,
            Operation::Pick { index: 0 } => emit(Op::Dup)?,
            Operation::Pick { index: 1 } => emit(Op::Over)?,
            Operation::Drop => emit(Op::Drop)?,
            Operation::Swap => emit(Op::Swap)?,
            Operation::Nop => {}
            _ => return None,
        }
    }
    let compiled = Expr::new(ops.get(..n)?).ok()?;
    compiled.stack_depth(pushes_cfa).ok()?;
    Some(compiled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gimli::{EndianSlice, Format, LittleEndian};

    const ENC: Encoding = Encoding {
        format: Format::Dwarf32,
        version: 1,
        address_size: 8,
    };

    fn x86(r: Register) -> Option<u8> {
        use unwind_core::x86_64::Reg;
        match r {
            gimli::X86_64::RA => Some(Reg::Pc as u8),
            gimli::X86_64::RSP => Some(Reg::Sp as u8),
            gimli::X86_64::RBP => Some(Reg::Fp as u8),
            _ => None,
        }
    }

    fn compile(bytes: &[u8]) -> Option<Expr> {
        compile_expression(
            Expression(EndianSlice::new(bytes, LittleEndian)),
            ENC,
            false,
            x86,
        )
    }

    #[test]
    fn plt_expression_compiles() {
        // As emitted by binutils for .plt: breg7 8; breg16 0; lit15; and; lit11; ge; lit3; shl; plus
        let e = compile(&[
            0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22,
        ])
        .unwrap();
        assert_eq!(e.ops(), unwind_core::x86_64::plt_cfa_expression().ops());
    }

    #[test]
    fn untracked_registers_and_branches_are_refused() {
        // breg3 (rbx) 0
        assert!(compile(&[0x73, 0x00]).is_none());
        // lit0; bra +0
        assert!(compile(&[0x30, 0x28, 0x00, 0x00]).is_none());
        // truncated: breg7 without its operand
        assert!(compile(&[0x77]).is_none());
        // deref of 4 bytes (deref_size 4)
        assert!(compile(&[0x77, 0x00, 0x94, 0x04]).is_none());
        // deeper than the evaluation stack: lit0 x9
        assert!(compile(&[0x30; 9]).is_none());
        // leaves nothing: breg7 0; drop
        assert!(compile(&[0x77, 0x00, 0x13]).is_none());
    }
}
