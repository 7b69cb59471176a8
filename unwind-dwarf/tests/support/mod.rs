//! What the gimli differentials (x86_64 in gimli_differential.rs, 32-bit ARM in arm.rs, aarch64
//! in aarch64.rs) share:
//! the comparison of a section's rows with our table ([`compare`]), gimli's evaluation of a
//! DWARF expression on the synthetic registers and stack, and the LEB128 encoders of the random
//! CFI generators.

pub mod compare;
pub mod random;

use gimli::{EndianSlice, Evaluation, EvaluationResult, LittleEndian, Operation, Register, Value};
use unwind_core::memory::Memory;
use unwind_core::StackImage;

/// The result of evaluating one value for gimli's row, in the word type `W` of the target.
pub enum Val<W> {
    Ok(W),
    ReadFailed,
    MustDrop(&'static str),
    Error(gimli::Error),
}

/// Reads `size` bytes (little-endian, zero-extended) from the synthetic stack.
pub fn read_image(image: &StackImage<'_>, address: u64, size: u8) -> Option<u64> {
    match size {
        8 => image.read_u64(address),
        4 => image.read_u32(address).map(u64::from),
        1 | 2 => {
            let off = usize::try_from(address.checked_sub(image.base())?).ok()?;
            let bytes = image
                .bytes()
                .get(off..off.checked_add(usize::from(size))?)?;
            Some(
                bytes
                    .iter()
                    .rev()
                    .fold(0u64, |v, &b| (v << 8) | u64::from(b)),
            )
        }
        _ => None,
    }
}

/// Evaluates a DWARF expression with gimli against the synthetic stack and the registers
/// `reg` gives (`None`: a register the tables do not track), the result masked by `mask`
/// (`!0` on 64-bit targets, `0xffff_ffff` on 32-bit ones).
pub fn gimli_expr(
    expr: gimli::Expression<EndianSlice<'_, LittleEndian>>,
    encoding: gimli::Encoding,
    reg: impl Fn(Register) -> Option<u64>,
    image: &StackImage<'_>,
    initial: Option<u64>,
    mask: u64,
) -> Val<u64> {
    let masked = mask_shift_amounts(expr.0, encoding, mask);
    let mut eval = Evaluation::new(EndianSlice::new(&masked, LittleEndian), encoding);
    eval.set_max_iterations(10_000);
    if let Some(v) = initial {
        eval.set_initial_value(v);
    }
    let mut read_failed = false;
    let mut untracked: Option<&'static str> = None;
    let mut state = eval.evaluate();
    loop {
        let r = match state {
            Err(e) => {
                // A failed read (answered with 0 to keep going) came first: that is the result.
                return match untracked {
                    Some(u) => Val::MustDrop(u),
                    None if read_failed => Val::ReadFailed,
                    None => Val::Error(e),
                };
            }
            Ok(r) => r,
        };
        state = match r {
            EvaluationResult::Complete => break,
            EvaluationResult::RequiresMemory {
                address,
                size,
                space,
                base_type,
            } => {
                if space.is_some() || base_type.0 != 0 {
                    untracked.get_or_insert("typed or address-space deref");
                }
                let v = read_image(image, address, size).unwrap_or_else(|| {
                    read_failed = true;
                    0
                });
                eval.resume_with_memory(Value::Generic(v))
            }
            EvaluationResult::RequiresRegister {
                register,
                base_type,
            } => {
                if base_type.0 != 0 {
                    untracked.get_or_insert("typed register");
                }
                let v = reg(register).unwrap_or_else(|| {
                    untracked.get_or_insert("expression reads an untracked register");
                    0
                });
                eval.resume_with_register(Value::Generic(v))
            }
            _ => return Val::MustDrop("expression needs a non-register context"),
        };
    }
    if let Some(u) = untracked {
        return Val::MustDrop(u);
    }
    // A location description (register or pieces) rather than a value.
    let Some(value) = eval.value_result() else {
        return Val::MustDrop("expression is a location description");
    };
    if read_failed {
        return Val::ReadFailed;
    }
    match value.to_u64(mask) {
        Ok(v) => Val::Ok(v),
        Err(e) => Val::Error(e),
    }
}

/// Recovers a register of a 64-bit target's caller from gimli's `rule` (`None`: the column has
/// no rule, whose value is `missing`; `same`: the value of "same value"), expressions evaluated
/// with the registers `reg` gives.
#[allow(clippy::too_many_arguments, dead_code)] // (The ARM differential has 32-bit words.)
pub fn gimli_reg<'a, S: gimli::UnwindSection<EndianSlice<'a, LittleEndian>>>(
    rule: Option<gimli::RegisterRule<usize>>,
    missing: Option<u64>,
    same: Option<u64>,
    cfa: u64,
    section: &S,
    encoding: gimli::Encoding,
    reg: impl Fn(Register) -> Option<u64>,
    image: &StackImage<'_>,
) -> Val<u64> {
    use gimli::RegisterRule;
    let expr = |e: &gimli::UnwindExpression<usize>| match e.get(section) {
        Ok(x) => gimli_expr(x, encoding, &reg, image, Some(cfa), !0),
        Err(e) => Val::Error(e),
    };
    match rule {
        None => match missing {
            Some(v) => Val::Ok(v),
            None => Val::MustDrop("no rule"),
        },
        Some(RegisterRule::Undefined) => Val::Ok(0),
        Some(RegisterRule::SameValue) => match same {
            Some(v) => Val::Ok(v),
            None => Val::MustDrop("same-value return address"),
        },
        Some(RegisterRule::Offset(o)) => match image.read_u64(cfa.wrapping_add(o as u64)) {
            Some(v) => Val::Ok(v),
            None => Val::ReadFailed,
        },
        Some(RegisterRule::ValOffset(o)) => Val::Ok(cfa.wrapping_add(o as u64)),
        Some(RegisterRule::Expression(e)) => match expr(&e) {
            Val::Ok(a) => match image.read_u64(a) {
                Some(v) => Val::Ok(v),
                None => Val::ReadFailed,
            },
            other => other,
        },
        Some(RegisterRule::ValExpression(e)) => expr(&e),
        Some(RegisterRule::Register(_)) => Val::MustDrop("register rule"),
        Some(RegisterRule::Architectural) => Val::MustDrop("architectural rule"),
        Some(RegisterRule::Constant(_)) => Val::MustDrop("constant rule"),
    }
}

/// gimli (0.34) keeps generic values above the address size (`DW_OP_not` of a 32-bit value
/// sets the upper 32 bits) and its shifts read the shift amount unmasked, where DWARF's generic
/// type is address-sized: on a 32-bit target `DW_OP_lit1 DW_OP_not DW_OP_not DW_OP_shl` shifts
/// by 1 in DWARF and by `0xffff_ffff_0000_0001` (giving 0) in gimli. So that gimli's answer is
/// DWARF's, each shift of a narrower-than-64-bit target is preceded here by `DW_OP_const4u
/// mask; DW_OP_and` (gimli's `and` masks). Expressions with branches are left as they are (their
/// offsets would move); the random generators make none for 32-bit targets.
fn mask_shift_amounts(
    expr: EndianSlice<'_, LittleEndian>,
    encoding: gimli::Encoding,
    mask: u64,
) -> Vec<u8> {
    let bytes = expr.slice().to_vec();
    if mask == !0 {
        return bytes;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = expr;
    while !rest.is_empty() {
        let start = bytes.len() - rest.len();
        let op = match Operation::parse(&mut rest, encoding) {
            Ok(op) => op,
            // Undecodable from here: gimli fails at the same byte either way.
            Err(_) => {
                out.extend_from_slice(&bytes[start..]);
                return out;
            }
        };
        match op {
            Operation::Bra { .. } | Operation::Skip { .. } => return bytes,
            Operation::Shl | Operation::Shr | Operation::Shra => {
                out.push(gimli::constants::DW_OP_const4u.0);
                out.extend_from_slice(&(mask as u32).to_le_bytes());
                out.push(gimli::constants::DW_OP_and.0);
            }
            _ => {}
        }
        out.extend_from_slice(&bytes[start..bytes.len() - rest.len()]);
    }
    out
}

/// Appends `v` as unsigned LEB128.
pub fn uleb(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Appends `v` as signed LEB128.
pub fn sleb(mut v: i64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        let done = (v == 0 && b & 0x40 == 0) || (v == -1 && b & 0x40 != 0);
        if done {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}
