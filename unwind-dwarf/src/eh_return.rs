//! The end of an exception's unwinding, where a frame's saved registers are not its caller's.
//!
//! GCC's unwinder (libgcc's `_Unwind_RaiseException`, `_Unwind_Resume`, `_Unwind_ForcedUnwind`,
//! `_Unwind_Resume_or_Rethrow`) ends with `uw_install_context`: `uw_install_context_1` copies the
//! exception handler's registers over the frame's own save slots, the slots that the frame's
//! CFI names for its caller's registers (the return address included, on every architecture),
//! then `_Unwind_DebugHook` is called (an empty function, a debugger's breakpoint) and
//! `__builtin_eh_return` restores the slots and jumps to the handler. From the first copy on,
//! the CFI gives the handler's function as the frame's caller and the walk goes on from a
//! frame that is not there: measured on a throw-heavy program, 1-3 % of its samples on x86_64
//! and aarch64 had such a wrong caller.
//!
//! The function's return address is still in its frame, though: at its start,
//! `uw_init_context_1` fills the unwinder's own record of the frame (`this_context`, a
//! `struct _Unwind_Context`), whose `cfa` and `ra` fields are the frame's CFA and return
//! address, and nothing writes them again. In the stretch the table reads the return address
//! there, through an expression that first checks the record's `cfa` field against the CFA
//! (a mismatch makes the read fail: the walk stops, `ReadFailed`); the caller's frame pointer
//! is not known there (its save slot is the handler's too) and is left undefined, so a caller
//! that needs it stops rather than follow it. Where the record is not found (its address is
//! read from the first call's argument), or the frame's CFA rule is another than at that call
//! (the epilogue, once the frame is popped), the rule says
//! [`Lost`](unwind_core::x86_64::RegRule::Lost): the walk stops with `ReturnAddressLost`.
//!
//! How the stretch is found, in the code of each FDE that saves the registers that carry an
//! exception's data to its handler ([`EhReturnCode::data_registers`]: a function that calls
//! `__builtin_eh_return` saves them, and no other function saves argument registers):
//! the one direct call in it to a function that only returns is the call to
//! `_Unwind_DebugHook`; the direct call just before it is the call to `uw_install_context_1`.
//! From that call on, everything to the end of the function, and what the code reaches from
//! the hook's return by its branches (on aarch64 the epilogue is shared with the function's
//! ordinary return, which then stops too: a stop, never a wrong frame), is the stretch.
//! A function where this is not found exactly so is counted
//! ([`crate::CfiStats::handler_installs_unrecognised`]) and keeps its CFI.

/// A module's code: its executable segments, as file address and bytes.
pub type Code<'a> = [(u64, &'a [u8])];

/// [`EhReturnCode::reached`]: the instructions reached from `from` (a return site inside the
/// function `[start, end)` of `code`, read at `svma`) by falling through and by branches inside
/// the function, as ranges.
pub type Reached = fn(code: &[u8], svma: u64, from: u64, function: (u64, u64)) -> Vec<(u64, u64)>;

/// [`EhReturnCode::context_address`]: the first argument of the call at `call`, as a DWARF
/// register and an offset, read from `code` (at `svma`) before it.
pub type ContextAddress = fn(code: &[u8], svma: u64, call: u64) -> Option<(u16, i64)>;

/// [`crate::DwarfArch::return_sites`]: the return sites of code, with direct calls' targets.
pub(crate) type ReturnSites = fn(&[u8], u64, &dyn Fn(u64) -> bool, &mut Vec<(u64, Option<u64>)>);

/// How `__builtin_eh_return` functions show in one architecture's code.
#[derive(Clone, Copy, Debug)]
pub struct EhReturnCode {
    /// The DWARF numbers of the registers `__builtin_eh_return` passes an exception's data in
    /// (`EH_RETURN_DATA_REGNO`), all of which such a function saves.
    pub data_registers: &'static [u16],
    /// The length of a direct call instruction (the return site minus this is the call).
    pub call_bytes: u64,
    /// Whether the code at a function's start only returns (`_Unwind_DebugHook`).
    pub only_returns: fn(&[u8]) -> bool,
    /// What the code reaches from the hook's return, where the architecture can follow its
    /// branches; `None` where it cannot (x86_64: its code cannot be decoded from an arbitrary
    /// address without a decoder).
    pub reached: Option<Reached>,
    /// The offset of the `cfa` field in libgcc's `struct _Unwind_Context` (after its array of
    /// `DWARF_FRAME_REGISTERS + 1` register pointers); `ra` follows it.
    pub context_cfa_field: i64,
    /// Where the function keeps its own `struct _Unwind_Context`: the first argument of its
    /// first direct call (to `uw_init_context_1`).
    pub context_address: ContextAddress,
    /// Whether `__builtin_eh_return` stores the handler's address on the stack outside the
    /// frame (x86_64: where the handler's frame will return to, a word of a frame the walk goes
    /// through next); then nothing is read from the stack after the hook returns.
    pub stores_outside_frame: bool,
}

/// x86_64: the data in `rax` and `rdx`; `call rel32`; `_Unwind_DebugHook` is `ret`, after an
/// `endbr64` where built for CET.
pub const X86_64: EhReturnCode = EhReturnCode {
    data_registers: &[0, 1],
    call_bytes: 5,
    only_returns: |code| {
        let code = code.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa]).unwrap_or(code);
        let code = code.strip_prefix(&[0xf3]).unwrap_or(code);
        code.first() == Some(&0xc3)
    },
    reached: None,
    context_cfa_field: 18 * 8,
    context_address: x86_64_context_address,
    stores_outside_frame: true,
};

/// The register number (0-15) in a REX-prefixed instruction's ModRM `reg` field.
fn rex_reg(rex: u8, modrm: u8) -> u8 {
    ((modrm >> 3) & 7) | if rex & 4 != 0 { 8 } else { 0 }
}

/// [`EhReturnCode::context_address`] for x86_64: `lea disp(%rbp), %rdi`, or `lea disp(%rbp),
/// %R` and then `mov %R, %rdi`, before the call (the last such, bytes tried at every position:
/// a wrong reading is caught at run time by the record's `cfa` check).
fn x86_64_context_address(code: &[u8], svma: u64, call: u64) -> Option<(u16, i64)> {
    let end = usize::try_from(call.checked_sub(svma)?).ok()?;
    let code = code.get(..end)?;
    let byte = |i: usize, k: usize| i.checked_add(k).and_then(|j| code.get(j).copied());
    // `lea disp8/disp32(%rbp), R`: REX.W (REX.R for r8-r15), 8d, ModRM mod 01/10, rm 101.
    let lea = |i: usize| -> Option<(u8, i64)> {
        let (rex, op, modrm) = (byte(i, 0)?, byte(i, 1)?, byte(i, 2)?);
        if rex & 0xfb != 0x48 || op != 0x8d || modrm & 7 != 5 {
            return None;
        }
        let disp = match modrm >> 6 {
            1 => i64::from(byte(i, 3)? as i8),
            2 => {
                let at = i.checked_add(3)?;
                let b = code.get(at..at.checked_add(4)?)?;
                i64::from(i32::from_le_bytes(b.try_into().ok()?))
            }
            _ => return None,
        };
        Some((rex_reg(rex, modrm), disp))
    };
    // `mov R, %rdi`: REX.W (REX.R for r8-r15), 89, ModRM 11 R 111.
    let mov_to_rdi = |i: usize| -> Option<u8> {
        let (rex, op, modrm) = (byte(i, 0)?, byte(i, 1)?, byte(i, 2)?);
        (rex & 0xfb == 0x48 && op == 0x89 && modrm & 0xc7 == 0xc7).then_some(rex_reg(rex, modrm))
    };
    let mut leas: Vec<(u8, i64)> = Vec::new();
    let mut found = None;
    for i in 0..code.len() {
        if let Some(l) = lea(i) {
            if l.0 == 7 {
                found = Some(l.1);
            }
            leas.push(l);
        } else if let Some(r) = mov_to_rdi(i) {
            found = leas.iter().rev().find(|l| l.0 == r).map(|l| l.1).or(found);
        }
    }
    // DWARF register 6 is rbp.
    found.map(|disp| (6, disp))
}

/// AArch64: the data in x0 to x3; `bl`; `_Unwind_DebugHook` is `ret`, after hint-space
/// instructions (`nop`, `bti`); branches followed.
pub const AARCH64: EhReturnCode = EhReturnCode {
    data_registers: &[0, 1, 2, 3],
    call_bytes: 4,
    only_returns: |code| {
        for w in a64_words(code).take(3) {
            if w == A64_RET {
                return true;
            }
            if w & 0xffff_f01f != 0xd503_201f {
                return false;
            }
        }
        false
    },
    reached: Some(a64_reached),
    context_cfa_field: 98 * 8,
    context_address: a64_context_address,
    stores_outside_frame: false,
};

const A64_RET: u32 = 0xd65f_03c0;

/// The instruction words of A64 code.
fn a64_words(code: &[u8]) -> impl Iterator<Item = u32> + '_ {
    code.chunks_exact(4)
        .filter_map(|w| Some(u32::from_le_bytes(w.try_into().ok()?)))
}

/// [`EhReturnCode::context_address`] for AArch64: `add x0, sp, #imm`, or `add xN, sp, #imm`
/// and then `mov x0, xN`, before the call (the last such).
fn a64_context_address(code: &[u8], svma: u64, call: u64) -> Option<(u16, i64)> {
    let end = usize::try_from(call.checked_sub(svma)?).ok()?;
    let mut adds: Vec<(u32, i64)> = Vec::new();
    let mut found = None;
    for w in a64_words(code.get(..end)?) {
        if w & 0xffc0_03e0 == 0x9100_03e0 {
            // `add xd, sp, #imm12` (unshifted).
            let (rd, imm) = (w & 31, i64::from((w >> 10) & 0xfff));
            if rd == 0 {
                found = Some(imm);
            }
            adds.push((rd, imm));
        } else if w & 0xffe0_ffff == 0xaa00_03e0 {
            // `mov x0, xm` (`orr x0, xzr, xm`).
            let rm = (w >> 16) & 31;
            found = adds.iter().rev().find(|a| a.0 == rm).map(|a| a.1).or(found);
        }
    }
    // DWARF register 31 is sp.
    found.map(|imm| (31, imm))
}

/// The instructions at most this many steps from the hook's return site are followed.
const MAX_STEPS: usize = 64;

/// The target of the A64 branch `w` at `at` whose signed word offset is `bits` wide at bit
/// `shift`.
fn a64_target(w: u32, at: u64, bits: u32, shift: u32) -> u64 {
    // The field moved to the top of the word, then shifted back with its sign.
    let up = 32u32.wrapping_sub(bits);
    let imm = i64::from((((w >> shift) << up) as i32) >> up);
    at.wrapping_add_signed(imm.wrapping_mul(4))
}

/// [`EhReturnCode::reached`] for AArch64: every instruction from `from` by fall-through, `b`,
/// and both ways of conditional branches (`b.cond`, `cbz`, `cbnz`, `tbz`, `tbnz`), up to a
/// return (`ret`, `retaa`, `retab`) or an indirect branch, inside the function.
fn a64_reached(code: &[u8], svma: u64, from: u64, (start, end): (u64, u64)) -> Vec<(u64, u64)> {
    let word = |at: u64| -> Option<u32> {
        let i = usize::try_from(at.checked_sub(svma)?).ok()?;
        let b = code.get(i..i.checked_add(4)?)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    };
    let inside = |at: u64| (start..end).contains(&at) && at.is_multiple_of(4);
    let mut seen: Vec<u64> = Vec::new();
    let mut todo = vec![from];
    while let Some(at) = todo.pop() {
        if !inside(at) || seen.contains(&at) || seen.len() >= MAX_STEPS {
            continue;
        }
        let Some(w) = word(at) else { continue };
        seen.push(at);
        let next = at.wrapping_add(4);
        if w & 0xfc00_0000 == 0x1400_0000 {
            todo.push(a64_target(w, at, 26, 0)); // b
        } else if w & 0xff00_0010 == 0x5400_0000 || w & 0x7e00_0000 == 0x3400_0000 {
            todo.extend([a64_target(w, at, 19, 5), next]); // b.cond, cbz, cbnz
        } else if w & 0x7e00_0000 == 0x3600_0000 {
            todo.extend([a64_target(w, at, 14, 5), next]); // tbz, tbnz
        } else if !(w == A64_RET
            || w & 0xffff_fbff == 0xd65f_0bff // retaa, retab
            || w & 0xff9f_f800 == 0xd61f_0000)
        // (br, and the authenticating forms: the end of the path.)
        {
            todo.push(next);
        }
    }
    seen.sort_unstable();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for at in seen {
        let after = at.wrapping_add(4);
        match ranges.last_mut() {
            Some(last) if last.1 == at => last.1 = after,
            _ => ranges.push((at, after)),
        }
    }
    ranges
}

/// A function's bytes and its direct calls, `(return address, target)` in address order.
pub(crate) type DirectCalls<'a> = (&'a [u8], Vec<(u64, u64)>);

/// The bytes of the function `[start, end)` of `code`, and its direct calls; `None` if one
/// segment does not hold it.
pub(crate) fn direct_calls<'a>(
    code: &Code<'a>,
    range: (u64, u64),
    return_sites: ReturnSites,
) -> Option<DirectCalls<'a>> {
    let function = crate::elf::code_bytes(code, range.0, range.1)?;
    let direct = calls(code, range, return_sites)?
        .into_iter()
        .filter_map(|(ret, target)| Some((ret, target?)))
        .collect();
    Some((function, direct))
}

/// The calls of the function `[start, end)` of `code`, `(return address, target if direct)` in
/// address order; `None` if one segment does not hold it.
pub(crate) fn calls(
    code: &Code<'_>,
    (start, end): (u64, u64),
    return_sites: ReturnSites,
) -> Option<Vec<(u64, Option<u64>)>> {
    let function = crate::elf::code_bytes(code, start, end)?;
    let mut sites = Vec::new();
    return_sites(
        function,
        start,
        &|t| crate::elf::in_code(code, t),
        &mut sites,
    );
    sites.retain(|&(ret, _)| ret <= end);
    Some(sites)
}

/// Why [`install_stretches`] found none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotFound {
    /// No call to a function that only returns: the part of a function that installs
    /// nothing (its cold part, whose calls are to `abort`).
    NoHook,
    /// Calls to such functions, but not one, or no call just before it, or the code is not
    /// at hand.
    Unrecognised,
}

/// What [`install_stretches`] found in one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Install {
    /// The stretches that run after the handler's registers were copied over the function's
    /// save slots, sorted and disjoint.
    pub stretches: Vec<(u64, u64)>,
    /// The function's own context record, if found: the address of its first direct call, and
    /// the record's address there as a DWARF register and an offset.
    pub context: Option<(u64, u16, i64)>,
    /// Where the record must not be used (`[hook's return, end)` where
    /// [`EhReturnCode::stores_outside_frame`]; else empty). Stretches are cut at its start.
    pub no_context: (u64, u64),
}

/// The stretches of the function `[start, end)` (an FDE that saves every one of
/// `arch.data_registers`) that run after the handler's registers were copied over its save
/// slots, with where its context record is; or why there are none.
pub(crate) fn install_stretches(
    arch: &EhReturnCode,
    return_sites: ReturnSites,
    code: &Code<'_>,
    (start, end): (u64, u64),
) -> Result<Install, NotFound> {
    let unrecognised = NotFound::Unrecognised;
    let (function, direct) = direct_calls(code, (start, end), return_sites).ok_or(unrecognised)?;
    let only_returns = |target: u64| {
        crate::elf::code_bytes(code, target, target.saturating_add(16))
            .is_some_and(|b| (arch.only_returns)(b))
    };
    let mut hooks = direct
        .iter()
        .enumerate()
        .filter(|(_, &(_, target))| only_returns(target));
    let (h, &(hook_return, _)) = hooks.next().ok_or(NotFound::NoHook)?;
    if hooks.next().is_some() {
        return Err(unrecognised);
    }
    let &(install_return, _) = h
        .checked_sub(1)
        .and_then(|i| direct.get(i))
        .ok_or(unrecognised)?;
    let install_call = install_return
        .checked_sub(arch.call_bytes)
        .ok_or(unrecognised)?;
    // uw_frob_return_addr (a few loads) lies between the two calls.
    let hook_call = hook_return.saturating_sub(arch.call_bytes);
    if hook_call.saturating_sub(install_return) > 64 {
        return Err(unrecognised);
    }
    let mut stretches = vec![(install_call, end)];
    if let Some(reached) = arch.reached {
        stretches.extend(reached(function, start, hook_return, (start, end)));
    }
    let merged = crate::plt::merged(stretches);
    let no_context = if arch.stores_outside_frame {
        (hook_return, end)
    } else {
        (0, 0)
    };
    // A stretch is cut where the record stops being read, so that each part is one or the
    // other.
    let stretches = merged
        .into_iter()
        .flat_map(|(s, e)| match no_context.0 {
            cut if s < cut && cut < e => vec![(s, cut), (cut, e)],
            _ => vec![(s, e)],
        })
        .collect();
    let context = direct.first().and_then(|&(first_return, _)| {
        let call = first_return.checked_sub(arch.call_bytes)?;
        let (base, offset) = (arch.context_address)(function, start, call)?;
        Some((call, base, offset))
    });
    Ok(Install {
        stretches,
        context,
        no_context,
    })
}

/// The expression (the CFA pushed first) for the address of the return address in a context
/// record whose `cfa` field lies `cfa_field` bytes from the CFA: `ra`'s address (the next
/// word) where that field holds the CFA, else an address 2^40 bytes away that no read permits.
pub(crate) fn return_address_in_context(cfa_field: i64) -> Option<unwind_core::expr::Expr> {
    use unwind_core::expr::Op::{Add, Const, Deref, Dup, Mul, Ne, Over};
    unwind_core::expr::Expr::new(&[
        Dup,
        Const(cfa_field),
        Add,
        Deref,
        Over,
        Ne,
        Const(1 << 40),
        Mul,
        Add,
        Const(cfa_field.checked_add(8)?),
        Add,
    ])
    .ok()
}

/// `rows` (sorted, disjoint, of one function) with the parts inside `stretches` given
/// `rewrite` of the part's start and the row's rule, and the parts of `stretches` no row
/// covers given `lost` of the function's first rule (rows dropped there, say for a CFA on an
/// untracked register: nothing is known there).
pub(crate) fn lose_return_address<R: Copy>(
    rows: &[(u64, u64, R)],
    stretches: &[(u64, u64)],
    rewrite: impl Fn(u64, R) -> R,
    lost: impl Fn(R) -> R,
) -> Vec<(u64, u64, R)> {
    let mut out = Vec::new();
    let Some(&(_, _, first)) = rows.first() else {
        return out;
    };
    // Cut points: every row and stretch boundary.
    let mut cuts: Vec<u64> = rows
        .iter()
        .flat_map(|r| [r.0, r.1])
        .chain(stretches.iter().flat_map(|s| [s.0, s.1]))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    for pair in cuts.windows(2) {
        let &[s, e] = pair else { continue };
        let row = rows.iter().find(|r| r.0 <= s && e <= r.1).map(|r| r.2);
        let inside = stretches.iter().any(|t| t.0 <= s && e <= t.1);
        match (row, inside) {
            (Some(r), false) => out.push((s, e, r)),
            (Some(r), true) => out.push((s, e, rewrite(s, r))),
            (None, true) => out.push((s, e, lost(first))),
            (None, false) => {}
        }
    }
    out
}

/// libgcc's ARM EHABI entry points (`_Unwind_RaiseException`, `_Unwind_Resume`,
/// `_Unwind_Resume_or_Rethrow`, `_Unwind_ForcedUnwind`, `_Unwind_Backtrace`: `UNWIND_WRAPPER`
/// in its `libunwind.S`) push the caller's registers as a `phase2_vrs` block, `r0`-`r12` then
/// the entry SP, LR and PC (LR again in Thumb code), and call the `__gnu_` function with a
/// pointer to it. They are marked `EXIDX_CANTUNWIND`, and their LR slot cannot be trusted the
/// way a save slot is: the second phase of the unwinding steps that very block from frame to
/// frame, so after its first step the slots hold the next frame's registers. The block is the
/// caller's, untouched, while its SP slot still holds the CFA and its PC slot the same value
/// as its LR slot (the `__gnu_` function's first act sets the PC slot from the LR slot; a
/// frame step writes LR before SP, and PC from LR after): the return address is read from the
/// LR slot only then (`arm_wrapper_expression`), else the walk stops (`ReadFailed`).
pub mod arm_wrapper {
    use unwind_core::arm::{CfaRule, Reg, RegRule, Rule, Source};
    use unwind_core::expr::{Expr, Op};

    use crate::Isa;

    /// The wrapper's instructions in Thumb-2 code (as halfwords) and in ARM code (as words),
    /// `None` for the `add rN, sp, #4` (N: the argument count) and the `bl`, which vary.
    const THUMB: [Option<u16>; 17] = [
        Some(0x46ec), // mov ip, sp
        Some(0xb500), // push {lr}
        Some(0xe92d),
        Some(0x5000), // push {ip, lr}
        Some(0xe92d),
        Some(0x1fff), // push {r0-r12}
        Some(0xf04f),
        Some(0x0300), // mov.w r3, #0
        Some(0xe92d),
        Some(0x000c), // push {r2, r3}
        None,         // add rN, sp, #4
        None,
        None, // bl __gnu_...
        Some(0xf8dd),
        Some(0xe040), // ldr.w lr, [sp, #64]
        Some(0xb012), // add sp, #72
        Some(0x4770), // bx lr
    ];
    const ARM: [Option<u32>; 9] = [
        Some(0xe92d_e000), // stmfd sp!, {sp, lr, pc}
        Some(0xe92d_1fff), // stmfd sp!, {r0-r12}
        Some(0xe3a0_3000), // mov r3, #0
        Some(0xe92d_000c), // stmfd sp!, {r2, r3}
        None,              // add rN, sp, #4
        None,              // bl __gnu_...
        Some(0xe59d_e040), // ldr lr, [sp, #64]
        Some(0xe28d_d048), // add sp, sp, #72
        Some(0xe12f_ff1e), // bx lr
    ];

    /// The length of the wrapper in `isa` that `code` starts with, if it does.
    pub(crate) fn length(code: &[u8], isa: Isa) -> Option<u64> {
        match isa {
            Isa::Thumb => {
                let halves = code.chunks_exact(2).map(|h| {
                    u16::from_le_bytes([
                        h.first().copied().unwrap_or(0),
                        h.get(1).copied().unwrap_or(0),
                    ])
                });
                let n = THUMB
                    .iter()
                    .zip(halves)
                    .take_while(|(want, got)| want.is_none_or(|w| w == *got))
                    .count();
                let &[imm, op] = code.get(20..22)? else {
                    return None;
                };
                // `add rN, sp, #4` (T1: 1010 1 Rd imm8).
                (n == THUMB.len() && op & 0xf8 == 0xa8 && imm == 1).then_some(34)
            }
            Isa::Arm => {
                let words = code
                    .chunks_exact(4)
                    .filter_map(|w| Some(u32::from_le_bytes(w.try_into().ok()?)));
                let n = ARM
                    .iter()
                    .zip(words)
                    .take_while(|(want, got)| want.is_none_or(|w| w == *got))
                    .count();
                let add = u32::from_le_bytes(code.get(16..20)?.try_into().ok()?);
                (n == ARM.len() && add & 0xffff_0fff == 0xe28d_0004).then_some(36)
            }
        }
    }

    /// The expression (the CFA pushed first, 32-bit words) for the address of the LR slot of
    /// the block (`CFA - 8`) where its SP slot (`CFA - 12`) holds the CFA and its PC slot
    /// (`CFA - 4`) holds what the LR slot holds; else address 0, which no read permits.
    pub(crate) fn arm_wrapper_expression() -> Option<Expr> {
        use Op::{Add, Const, Deref, Dup, Eq, Mul, Over};
        Expr::new(&[
            Const(-8),
            Add, // lr slot
            Dup,
            Deref, // [lr slot, lr]
            Over,
            Const(4),
            Add,
            Deref, // [lr slot, lr, pc]
            Eq,
            Mul, // lr slot, or 0
            Dup,
            Const(-4),
            Add,
            Deref, // [lr slot, sp]
            Over,
            Const(8),
            Add, // [lr slot, sp, CFA]
            Eq,
            Mul, // lr slot, or 0
        ])
        .ok()
    }

    /// The rows of the wrapper at `start` of `code` (its bytes from there) in `isa`, the
    /// return address read through expression `expr` ([`arm_wrapper_expression`]) while the
    /// block is pushed; `None` if the code there is not the wrapper.
    pub(crate) fn rows(
        code: &[u8],
        start: u64,
        isa: Isa,
        expr: u16,
    ) -> Option<Vec<(u64, u64, Rule)>> {
        let len = length(code, isa)?;
        let at = |cfa: i32| Rule {
            cfa: CfaRule::RegOffset(Reg::Sp, cfa),
            source: Source::Instructions,
            ..Rule::default()
        };
        let block = Rule {
            pc: RegRule::Expr(expr),
            lr: RegRule::Expr(expr),
            ..at(72)
        };
        // (offset, rule) from each offset to the next; the last to `len`.
        let steps: &[(u64, Rule)] = match isa {
            Isa::Thumb => &[
                (0, at(0)),
                (4, at(4)),
                (8, at(12)),
                (12, at(64)),
                (20, block),
                (32, at(0)),
            ],
            Isa::Arm => &[
                (0, at(0)),
                (4, at(12)),
                (8, at(64)),
                (16, block),
                (32, at(0)),
            ],
        };
        let mut rows = Vec::with_capacity(steps.len());
        for (i, &(offset, rule)) in steps.iter().enumerate() {
            let next = steps.get(i.wrapping_add(1)).map_or(len, |s| s.0);
            rows.push((start.wrapping_add(offset), start.wrapping_add(next), rule));
        }
        Some(rows)
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use unwind_core::expr::EvalContext;
        use unwind_core::StackImage;

        /// Debian 12's armhf libgcc_s.so.1, `_Unwind_RaiseException` at 0x167c8 (Thumb-2).
        const RAISE: [u8; 34] = [
            0xec, 0x46, 0x00, 0xb5, 0x2d, 0xe9, 0x00, 0x50, 0x2d, 0xe9, 0xff, 0x1f, 0x4f, 0xf0,
            0x00, 0x03, 0x2d, 0xe9, 0x0c, 0x00, 0x01, 0xa9, 0xff, 0xf7, 0x91, 0xfb, 0xdd, 0xf8,
            0x40, 0xe0, 0x12, 0xb0, 0x70, 0x47,
        ];

        #[test]
        fn thumb_wrapper_rows() {
            let got = rows(&RAISE, 0x167c8, Isa::Thumb, 3).expect("the wrapper");
            assert_eq!(got.len(), 6);
            assert_eq!(got[4].0, 0x167c8 + 20);
            assert_eq!(got[4].2.pc, RegRule::Expr(3));
            assert_eq!(
                got[5],
                (
                    0x167c8 + 32,
                    0x167c8 + 34,
                    Rule {
                        source: Source::Instructions,
                        ..Rule::default()
                    }
                )
            );
            assert!(rows(&RAISE, 0x167c8, Isa::Arm, 3).is_none());
            let mut other = RAISE;
            other[26] = 0; // not `ldr.w lr, [sp, #64]`
            assert!(rows(&other, 0x167c8, Isa::Thumb, 3).is_none());
        }

        /// The block as pushed reads; a block whose SP slot or PC slot moved on does not.
        #[test]
        fn the_block_is_read_only_while_untouched() {
            let e = arm_wrapper_expression().expect("fits");
            let base = 0x1000u64;
            let cfa = base + 72;
            let word = |v: &mut Vec<u8>, at: u64, x: u32| {
                let i = (at - base) as usize;
                v[i..i + 4].copy_from_slice(&x.to_le_bytes());
            };
            let eval = |bytes: &Vec<u8>| {
                let image = StackImage::new(base, bytes);
                let ctx = EvalContext {
                    regs: &[0; 16],
                    memory: &image,
                    word_size: 4,
                };
                e.eval(&ctx, Some(cfa))
            };
            let mut v = vec![0u8; 72];
            word(&mut v, cfa - 12, cfa as u32);
            word(&mut v, cfa - 8, 0x4321);
            word(&mut v, cfa - 4, 0x4321);
            assert_eq!(eval(&v), Ok(cfa - 8));
            let mut moved = v.clone();
            word(&mut moved, cfa - 12, (cfa + 16) as u32);
            // Address 0, whose read fails as the rule reads it.
            assert_eq!(eval(&moved), Ok(0));
            // (Here the second check already reads below address 0, and fails.)
            let mut half = v.clone();
            word(&mut half, cfa - 8, 0x5555);
            assert_eq!(eval(&half), Err(unwind_core::expr::ExprError::ReadFailed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libgcc_s.so.1's `_Unwind_RaiseException` of Debian 12 (arm64), at e724..e8a4: its
    /// install call at e888, the hook call at e898, the branch at e8a0 back into the shared
    /// epilogue e7f0..e82c; the hook at e720.
    #[test]
    fn aarch64_raise_exception() {
        let words: &[(u64, u32)] = &[
            (0xe720, 0xd65f_03c0), // _Unwind_DebugHook: ret
            (0xe7ec, 0xd280_0004), // mov x4, #0
            (0xe7f0, 0x2a02_03e0), // mov w0, w2
            (0xe7f4, 0xa940_7bfd), // ldp x29, x30, [sp]
            (0xe824, 0x913b_03ff), // add sp, sp, #0xec0
            (0xe828, 0x8b24_63ff), // add sp, sp, x4
            (0xe82c, 0xd65f_03c0), // ret
            (0xe880, 0xaa13_03e1), // mov x1, x19
            (0xe884, 0xaa15_03e0), // mov x0, x21
            (0xe888, 0x97ff_f6ea), // bl c430 (uw_install_context_1)
            (0xe88c, 0xaa00_03e4), // mov x4, x0
            (0xe890, 0xf943_cbe0), // ldr x0, [sp, #1936]
            (0xe894, 0xf943_cfe1), // ldr x1, [sp, #1944]
            (0xe898, 0x97ff_ffa2), // bl e720 (_Unwind_DebugHook)
            (0xe89c, 0xf900_07a1), // str x1, [x29, #8]
            (0xe8a0, 0x17ff_ffd4), // b e7f0
        ];
        let base = 0xc400u64;
        let mut image = vec![0u8; 0xe8a4 - base as usize];
        // Filler: `add x0, x0, #1`, which neither calls nor branches.
        for w in image.chunks_exact_mut(4) {
            w.copy_from_slice(&0x9100_0400u32.to_le_bytes());
        }
        // Between e7f4 and e824, more restores (ldp): the filler stands for them.
        for &(at, w) in words {
            let i = (at - base) as usize;
            image[i..i + 4].copy_from_slice(&w.to_le_bytes());
        }
        let code = [(base, &image[..])];
        let got = install_stretches(
            &AARCH64,
            crate::return_sites::aarch64,
            &code,
            (0xe724, 0xe8a4),
        );
        let got = got.map(|i| i.stretches);
        assert_eq!(got, Ok(vec![(0xe7f0, 0xe830), (0xe888, 0xe8a4)]));
        // Without the hook (the only callee that only returns), nothing is recognised.
        let mut no_hook = image.clone();
        let i = (0xe720 - base) as usize;
        no_hook[i..i + 4].copy_from_slice(&0xd503_201fu32.to_le_bytes());
        let code = [(base, &no_hook[..])];
        let got = install_stretches(
            &AARCH64,
            crate::return_sites::aarch64,
            &code,
            (0xe724, 0xe8a4),
        );
        assert_eq!(got.map(|i| i.stretches), Err(NotFound::NoHook));
    }

    /// x86_64's shape (Debian 12's libgcc_s.so.1): the install call, three moves, the hook
    /// call (`endbr64; ret`), the rest to the function's end.
    #[test]
    fn x86_64_install_call_and_hook() {
        let base = 0x1000u64;
        let mut image = vec![0x90u8; 0x100];
        image[0..5].copy_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0xc3]); // hook at 0x1000
        image[0x10] = 0xc3; // another function at 0x1010: `ret` too, never called
                            // At 0x1040: call 0x1080 (install); three moves (9 bytes); call 0x1000 (hook).
        let call = |image: &mut Vec<u8>, at: usize, target: u64| {
            let rel = (target as i64 - (base as i64 + at as i64 + 5)) as i32;
            image[at] = 0xe8;
            image[at + 1..at + 5].copy_from_slice(&rel.to_le_bytes());
        };
        call(&mut image, 0x40, 0x1080);
        image[0x45..0x4e].copy_from_slice(&[0x48, 0x89, 0xc2, 0x48, 0x89, 0xc6, 0x48, 0x89, 0xc7]);
        call(&mut image, 0x4e, 0x1000);
        call(&mut image, 0x30, 0x1080); // an earlier call to the same function
        let code = [(base, &image[..])];
        let got = install_stretches(
            &X86_64,
            crate::return_sites::x86_64,
            &code,
            (0x1020, 0x1070),
        );
        let got = got.map(|i| i.stretches);
        assert_eq!(got, Ok(vec![(0x1040, 0x1053), (0x1053, 0x1070)]));
    }

    #[test]
    fn rows_in_stretches_are_lost() {
        let rows = [(0x10, 0x20, 1u8), (0x20, 0x30, 2), (0x38, 0x40, 3)];
        let got = lose_return_address(&rows, &[(0x18, 0x3c)], |_, r| r + 100, |r| r + 200);
        assert_eq!(
            got,
            vec![
                (0x10, 0x18, 1),
                (0x18, 0x20, 101),
                (0x20, 0x30, 102),
                (0x30, 0x38, 201),
                (0x38, 0x3c, 103),
                (0x3c, 0x40, 3),
            ]
        );
    }
}
