//! Postfix expression programs ([`unwind_core::expr::Expr`]), built from operations or compiled
//! from DWARF expression bytes, evaluated over a stack image: whatever the program, evaluation
//! ends, reads only through the image, and fails exactly when the program's static stack check
//! ([`Expr::stack_depth`]) says it must.

use unwind_core::expr::{EvalContext, Expr, ExprError, Op};
use unwind_core::StackImage;

use crate::check::{stack_bytes, STACK};

/// Input: a selector byte (bit 0: 32-bit words, else 64-bit; bit 1: a value is pushed first;
/// bit 2: the rest is a DWARF expression to compile, else operations, one byte each with
/// their operands after them).
pub fn run(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let word_size = if selector & 1 != 0 { 4 } else { 8 };
    let initial = selector & 2 != 0;
    let expr = if selector & 4 != 0 {
        compile(rest, word_size, initial)
    } else {
        Expr::new(&ops(rest)).ok()
    };
    let Some(expr) = expr else { return };
    let stack = stack_bytes(0x100, word_size);
    let image = StackImage::new(STACK, &stack);
    let regs = [
        0x1234,
        STACK + 0x40,
        STACK + 0x80,
        STACK + 0xc0,
        7,
        0x4000_1001,
    ];
    let ctx = EvalContext {
        regs: &regs,
        memory: &image,
        word_size,
    };
    let result = expr.eval(&ctx, initial.then_some(STACK + 0x20));
    match expr.stack_depth(initial) {
        // A program the static check accepts never under- or overflows its stack.
        Ok(_) => assert!(
            !matches!(
                result,
                Err(ExprError::StackOverflow | ExprError::StackUnderflow)
            ),
            "{expr:?}: {result:?}"
        ),
        Err(_) => assert!(result.is_err(), "{expr:?}: {result:?}"),
    }
    if let (Ok(v), 4) = (result, word_size) {
        assert!(v <= u64::from(u32::MAX), "{expr:?}: {v:#x}");
    }
}

/// Operations from bytes: each byte picks an operation; `Reg` takes the next byte as its
/// register, `Const` the next eight as its value.
fn ops(mut bytes: &[u8]) -> Vec<Op> {
    let mut out = Vec::new();
    while let Some((&b, rest)) = bytes.split_first() {
        bytes = rest;
        let op = match b % 25 {
            0 => {
                let Some((&r, rest)) = bytes.split_first() else {
                    break;
                };
                bytes = rest;
                Op::Reg(r % 8)
            }
            1 => {
                let Some((v, rest)) = bytes.split_first_chunk::<8>() else {
                    break;
                };
                bytes = rest;
                Op::Const(i64::from_le_bytes(*v))
            }
            2 => Op::Deref,
            3 => Op::Add,
            4 => Op::Sub,
            5 => Op::Mul,
            6 => Op::And,
            7 => Op::Or,
            8 => Op::Xor,
            9 => Op::Shl,
            10 => Op::Shr,
            11 => Op::Shra,
            12 => Op::Neg,
            13 => Op::Not,
            14 => Op::Ge,
            15 => Op::Gt,
            16 => Op::Le,
            17 => Op::Lt,
            18 => Op::Eq,
            19 => Op::Ne,
            20 => Op::Dup,
            21 => Op::Drop,
            22 => Op::Swap,
            23 => Op::Over,
            _ => Op::Nop,
        };
        out.push(op);
    }
    out
}

/// A DWARF expression compiled as the loaders compile CFA and register expressions (registers
/// 0..=7 are tracked, as x86_64's and ARM's low registers would be).
fn compile(bytes: &[u8], word_size: u8, pushes_cfa: bool) -> Option<Expr> {
    let encoding = gimli::Encoding {
        address_size: word_size,
        format: gimli::Format::Dwarf32,
        version: 4,
    };
    let expr = gimli::Expression(gimli::EndianSlice::new(bytes, gimli::LittleEndian));
    unwind_dwarf::compile_expression(expr, encoding, pushes_cfa, |r| {
        (r.0 < 8).then_some(r.0 as u8)
    })
}
