//! The dynamic linker's lazy-binding trampolines (glibc's `_dl_runtime_resolve_xsavec` and its
//! siblings on x86_64), whose CFA is on a register the fixed-register rules do not track.
//!
//! A trampoline pushes `rbx`, keeps its frame's address in it (`mov %rsp, %rbx`), realigns the
//! stack for `xsave` by an amount known only at run time, and calls `_dl_fixup`: its CFI says
//! `CFA = rbx + c`. Walks stopped there (`NoRule`) whenever a sample caught a symbol being
//! resolved. At the one place a walk meets such a frame as a caller, `_dl_fixup`'s return
//! address, `rbx` is known after all: `_dl_fixup` saves it in its own frame, at an offset its CFI
//! gives from its CFA, which is the trampoline's stack pointer. So the row at that return site
//! (only at the call instruction's last byte: never an interrupted instruction's address) reads
//! the CFA as `[sp + k] + c`. `_dl_fixup`'s rows before it saves `rbx` (its first instructions:
//! the slot holds an older value there) stop walks instead (`ReturnAddressLost`).
//! The trampoline's other instructions, where only the interrupted `rbx` says where its frame
//! is, keep no rule.

use crate::eh_return::Code;

/// A function whose CFA is on the trampoline register in some rows: `[start, end)` and those
/// rows, `(start, end, offset)`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trampoline {
    pub start: u64,
    pub end: u64,
    pub rows: Vec<(u64, u64, i64)>,
}

/// A function that saves the trampoline register at one offset from its CFA: its start, the
/// offset, and where the saving is done (its first row that says so).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saver {
    pub start: u64,
    pub offset: i64,
    pub saved_from: u64,
}

/// What to add to a module's rows for one trampoline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Crossing {
    /// The byte that the return address from the trampoline's call follows: the row for it.
    pub return_site: (u64, u64),
    /// The trampoline's CFA there is `[sp + slot] + cfa_offset`.
    pub slot: i64,
    /// See `slot`.
    pub cfa_offset: i64,
    /// The callee's start and where it has saved the register: rows between stop walks.
    pub unsaved: (u64, u64),
}

/// The crossing of `trampoline`: its one direct call, to a function of `savers` (sorted by
/// start), in a row whose CFA is on the register; `None` if it has not exactly that.
pub(crate) fn crossing(
    trampoline: &Trampoline,
    savers: &[Saver],
    code: &Code<'_>,
    return_sites: crate::eh_return::ReturnSites,
    call_bytes: u64,
) -> Option<Crossing> {
    let (_, direct) =
        crate::eh_return::direct_calls(code, (trampoline.start, trampoline.end), return_sites)?;
    let &[(ret, target)] = direct.as_slice() else {
        return None;
    };
    let call = ret.checked_sub(call_bytes)?;
    let &(_, _, cfa_offset) = trampoline.rows.iter().find(|r| r.0 <= call && call < r.1)?;
    let i = savers.partition_point(|s| s.start < target);
    let saver = savers.get(i).filter(|s| s.start == target)?;
    Some(Crossing {
        return_site: (ret.checked_sub(1)?, ret),
        slot: saver.offset,
        cfa_offset,
        unsaved: (saver.start, saver.saved_from),
    })
}

/// The CFA expression of a crossing: `[sp + slot] + cfa_offset`, with `sp` the tracked stack
/// pointer register `sp`.
pub(crate) fn cfa_expression(
    sp: u8,
    slot: i64,
    cfa_offset: i64,
) -> Option<unwind_core::expr::Expr> {
    use unwind_core::expr::Op::{Add, Const, Deref, Reg};
    unwind_core::expr::Expr::new(&[Reg(sp), Const(slot), Add, Deref, Const(cfa_offset), Add]).ok()
}
