//! Random call-frame instructions for the gimli differentials of 64-bit targets (x86_64,
//! aarch64): each generator takes the DWARF registers its instructions and expressions name.

#![allow(dead_code)] // (The ARM differential has generators of its own, for 32-bit words.)

use proptest::prelude::*;

use super::{sleb, uleb};

/// One DWARF expression operation, encoded.
pub fn expr_op(reg: impl Strategy<Value = u8> + Clone + 'static) -> impl Strategy<Value = Vec<u8>> {
    let small = prop_oneof![-32i64..32, (-64i64..64).prop_map(|v| v * 8), any::<i64>()];
    prop_oneof![
        // DW_OP_breg<n> offset
        4 => (reg, small.clone()).prop_map(|(r, o)| {
            // DW_OP_bregx for registers past 31 (AArch64's PC).
            let mut v = if r < 32 { vec![0x70 + r] } else { vec![0x92, r] };
            sleb(o, &mut v);
            v
        }),
        // DW_OP_lit<n>
        3 => (0u8..32).prop_map(|n| vec![0x30 + n]),
        // DW_OP_const1u, const1s, const8u, constu, consts
        1 => any::<u8>().prop_map(|n| vec![0x08, n]),
        1 => any::<u8>().prop_map(|n| vec![0x09, n]),
        1 => any::<u64>().prop_map(|n| {
            let mut v = vec![0x0e];
            v.extend(n.to_le_bytes());
            v
        }),
        1 => any::<u64>().prop_map(|n| {
            let mut v = vec![0x10];
            uleb(n, &mut v);
            v
        }),
        1 => small.clone().prop_map(|n| {
            let mut v = vec![0x11];
            sleb(n, &mut v);
            v
        }),
        // DW_OP_plus_uconst
        2 => (0u64..512).prop_map(|n| {
            let mut v = vec![0x23];
            uleb(n, &mut v);
            v
        }),
        // DW_OP_deref; deref_size 8 and 4
        3 => Just(vec![0x06]),
        1 => Just(vec![0x94, 0x08]),
        1 => Just(vec![0x94, 0x04]),
        // Arithmetic, logic, shifts, comparisons, stack operations, nop, and a few operations
        // our compiler refuses (div, mod, abs, rot, pick 2, skip, reg6, call_frame_cfa).
        8 => prop::sample::select(vec![
            0x22u8, 0x1c, 0x1e, 0x1a, 0x21, 0x27, 0x24, 0x25, 0x26, 0x1f, 0x20, 0x2a, 0x2b,
            0x2c, 0x2d, 0x29, 0x2e, 0x12, 0x13, 0x14, 0x16, 0x96, 0x1b, 0x1d, 0x19, 0x17,
            0x56, 0x9c,
        ])
        .prop_map(|op| vec![op]),
        1 => (0u8..3).prop_map(|i| vec![0x15, i]),
        1 => Just(vec![0x2f, 0x00, 0x00]),
    ]
}

/// At most 7 operations: with the CFA pushed first, no expression can need more than the 8
/// words of our evaluation stack (deeper ones: `expression_deeper_than_the_eval_stack`).
pub fn expr_bytes(
    reg: impl Strategy<Value = u8> + Clone + 'static,
) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(expr_op(reg), 1..8).prop_map(|ops| ops.concat())
}

/// One call-frame instruction, encoded (data alignment -8, code alignment 1).
pub fn cfa_insn(
    reg: impl Strategy<Value = u8> + Clone + 'static,
) -> impl Strategy<Value = Vec<u8>> {
    let with_expr = |op: u8| {
        (reg.clone(), expr_bytes(reg.clone())).prop_map(move |(r, e)| {
            let mut v = vec![op, r];
            uleb(e.len() as u64, &mut v);
            v.extend(e);
            v
        })
    };
    prop_oneof![
        // DW_CFA_advance_loc
        16 => (1u8..8).prop_map(|d| vec![0x40 | d]),
        // DW_CFA_def_cfa reg, off; def_cfa_sf; def_cfa_offset; def_cfa_offset_sf;
        // def_cfa_register
        2 => (reg.clone(), 0u64..300).prop_map(|(r, o)| {
            let mut v = vec![0x0c, r];
            uleb(o, &mut v);
            v
        }),
        1 => (reg.clone(), -40i64..40).prop_map(|(r, o)| {
            let mut v = vec![0x12, r];
            sleb(o, &mut v);
            v
        }),
        3 => prop_oneof![0u64..300, any::<u64>()].prop_map(|o| {
            let mut v = vec![0x0e];
            uleb(o, &mut v);
            v
        }),
        1 => (-40i64..40).prop_map(|o| {
            let mut v = vec![0x13];
            sleb(o, &mut v);
            v
        }),
        1 => reg.clone().prop_map(|r| vec![0x0d, r]),
        // DW_CFA_offset reg, n (CFA - 8n); offset_extended_sf; val_offset
        3 => (reg.clone(), 0u64..40).prop_map(|(r, n)| {
            let mut v = vec![0x80 | r];
            uleb(n, &mut v);
            v
        }),
        1 => (reg.clone(), -40i64..40).prop_map(|(r, n)| {
            let mut v = vec![0x11, r];
            sleb(n, &mut v);
            v
        }),
        1 => (reg.clone(), 0u64..40).prop_map(|(r, n)| {
            let mut v = vec![0x14, r];
            uleb(n, &mut v);
            v
        }),
        // DW_CFA_restore, undefined, same_value, register
        1 => reg.clone().prop_map(|r| vec![0xc0 | r]),
        1 => reg.clone().prop_map(|r| vec![0x07, r]),
        1 => reg.clone().prop_map(|r| vec![0x08, r]),
        1 => (reg.clone(), reg.clone()).prop_map(|(a, b)| vec![0x09, a, b]),
        // DW_CFA_remember_state / restore_state (unbalanced ones make gimli fail the FDE)
        1 => Just(vec![0x0a]),
        1 => Just(vec![0x0b]),
        // DW_CFA_def_cfa_expression, expression, val_expression
        2 => expr_bytes(reg.clone()).prop_map(|e| {
            let mut v = vec![0x0f];
            uleb(e.len() as u64, &mut v);
            v.extend(e);
            v
        }),
        2 => with_expr(0x10),
        2 => with_expr(0x16),
        // DW_CFA_nop, GNU_args_size
        1 => Just(vec![0x00]),
        1 => (0u64..64).prop_map(|n| {
            let mut v = vec![0x2e];
            uleb(n, &mut v);
            v
        }),
    ]
}

/// Mostly drops the instructions gimli would refuse (restore_state without remember_state, CFA
/// offset or register changes while the CFA is an expression), so that most FDEs yield rows;
/// one case in ten keeps them.
pub fn sanitize(pieces: Vec<Vec<u8>>, keep_invalid: bool) -> Vec<u8> {
    if keep_invalid {
        return pieces.concat();
    }
    let mut out = Vec::new();
    let mut cfa_is_expr = false;
    let mut saved: Vec<bool> = Vec::new();
    for p in pieces {
        match p[0] {
            0x0a => saved.push(cfa_is_expr),
            0x0b => match saved.pop() {
                Some(e) => cfa_is_expr = e,
                None => continue,
            },
            0x0d | 0x0e | 0x13 if cfa_is_expr => continue,
            0x0c | 0x12 => cfa_is_expr = false,
            0x0f => cfa_is_expr = true,
            _ => {}
        }
        out.extend(p);
    }
    out
}
