//! Unwind rules for 64-bit ARM (A64) functions, read from their instructions: for code that no
//! unwind table describes (C built with `-fno-asynchronous-unwind-tables -fno-unwind-tables`).
//!
//! [`analyze`] follows a function's control flow from its entry (a worklist over its
//! instructions, each reached once), with the frame before each instruction ([`FrameState`]):
//! the CFA as SP (or x29, once set from SP) plus an offset, and where the caller's x30 (the
//! return address) and x29 are: still in their registers, or saved at a known slot. What
//! moves them: `sub`/`add sp` with an immediate, loads and stores with writeback on SP
//! (`stp x29, x30, [sp, #-32]!`, `str x30, [sp, #-16]!`, `ldp x29, x30, [sp], #32`), stores and
//! loads at known slots, `mov x29, sp` / `add x29, sp, #n`, `mov sp, x29`. Anything else that
//! writes SP (`sub sp, sp, x1` for `alloca`, `and sp, x0, #-16`) makes SP unknown (the CFA then
//! comes from x29, if set up); a call or any other write to x30 while it holds the return
//! address loses it, as a write to x29 does to the caller's x29: such states give no rule.
//! Which instructions may write x29 and x30 is decided by encoding class, erring towards "may"
//! (a state then gives no rule, never a wrong one).
//!
//! A reading is kept only where the function's exits confirm it ([`Analysis::confirmed`]): at
//! every `ret` reached, SP is back at the CFA and x30 and x29 hold the caller's values, and at
//! least one exit (a `ret`, or a tail call: `b` to a known function start in that state)
//! does so; two paths that reach one instruction with different frames reject the reading too.
//! Code reached only through an indirect branch (`br`: a jump table) is not read and gives no
//! rule.
//!
//! Never reads memory at sample time: the code is read from the module's file when its rules
//! are built.

use std::collections::BTreeSet;

use unwind_core::aarch64::{CfaRule, RegRule, Rule};

/// SP, in the register fields where the encoding makes 31 the stack pointer.
const SP: u8 = 31;
/// x29, the frame pointer.
const FP: u8 = 29;
/// x30, the link register.
const LR: u8 = 30;

/// Where the caller's value of a register is at one instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Saved {
    /// In the register only (nothing has written it; or it was reloaded from a slot that SP
    /// has since been raised above).
    InRegister,
    /// Saved at CFA + offset (a slot at or above SP).
    At(i64),
    /// In the register and at CFA + offset: just saved, or reloaded from a slot that still
    /// holds it (an epilogue before SP is raised above the slot). Its rule is the slot's,
    /// right at a call too (which overwrites x30 but not the slot).
    Both(i64),
    /// Overwritten, with no copy known.
    Lost,
}

impl Saved {
    /// The register holds the caller's value.
    pub fn in_register(self) -> bool {
        matches!(self, Saved::InRegister | Saved::Both(_))
    }

    /// After the register is written: the slot's copy, if any, is the caller's value.
    fn written(self) -> Saved {
        match self {
            Saved::InRegister => Saved::Lost,
            Saved::Both(o) => Saved::At(o),
            other => other,
        }
    }

    /// After the slot at CFA + `o` is overwritten (or left below SP): only the register's
    /// value remains, if it holds one.
    fn slot_lost(self) -> Saved {
        match self {
            Saved::At(_) => Saved::Lost,
            Saved::Both(_) => Saved::InRegister,
            other => other,
        }
    }

    /// The slot that holds the caller's value, if any.
    fn slot(self) -> Option<i64> {
        match self {
            Saved::At(o) | Saved::Both(o) => Some(o),
            _ => None,
        }
    }
}

/// The frame at one instruction, before it executes, relative to the CFA (SP at the call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameState {
    /// CFA - SP, if known.
    pub sp: Option<i64>,
    /// CFA - x29, while x29 holds a value set from a known SP.
    pub fp: Option<i64>,
    /// The return address (the caller's x30).
    pub lr: Saved,
    /// The caller's x29.
    pub x29: Saved,
    /// x30 holds a signed return address (after `paciasp`, before `autiasp`).
    pub signed: bool,
}

impl FrameState {
    /// A function's first instruction: nothing pushed, the return address in x30.
    pub const ENTRY: FrameState = FrameState {
        sp: Some(0),
        fp: None,
        lr: Saved::InRegister,
        x29: Saved::InRegister,
        signed: false,
    };

    /// The rule this state gives (marked [`Rule::from_instructions`]), if the CFA and both
    /// registers are known. The CFA is taken from SP where known, else from x29.
    pub fn rule(&self) -> Option<Rule> {
        let cfa = match (self.sp, self.fp) {
            (Some(s), _) => CfaRule::SpOffset(i32::try_from(s).ok()?),
            (None, Some(f)) => CfaRule::FpOffset(i32::try_from(f).ok()?),
            (None, None) => return None,
        };
        let reg = |s: Saved| match s {
            Saved::InRegister => Some(RegRule::Same),
            Saved::At(o) | Saved::Both(o) => Some(RegRule::Offset(i32::try_from(o).ok()?)),
            Saved::Lost => None,
        };
        let ra = reg(self.lr)?;
        Some(Rule {
            cfa,
            ra,
            lr: ra,
            fp: reg(self.x29)?,
            ra_signed: self.signed,
            signal_frame: false,
            from_instructions: true,
        })
    }

    /// A function may leave from here: SP back at the CFA, x30 and x29 the caller's.
    pub fn is_exit(&self) -> bool {
        self.sp == Some(0) && self.lr.in_register() && self.x29.in_register()
    }

    /// The frame that holds on two paths that meet: what both know (a value known on one
    /// path only is unknown; a register in its register and its slot on one path and only in
    /// the slot on the other is in the slot), or `None` if they contradict each other (SP at
    /// two offsets, the return address in x30 on one path and only in a slot on the other).
    /// The signing state is this one's: it changes no rule's addresses.
    fn join(&self, other: &FrameState) -> Option<FrameState> {
        fn known(a: Option<i64>, b: Option<i64>) -> Result<Option<i64>, ()> {
            match (a, b) {
                (Some(x), Some(y)) if x != y => Err(()),
                (Some(x), Some(_)) => Ok(Some(x)),
                _ => Ok(None),
            }
        }
        fn saved(a: Saved, b: Saved) -> Option<Saved> {
            use Saved::*;
            Some(match (a, b) {
                _ if a == b => a,
                (Both(o), At(p)) | (At(o), Both(p)) if o == p => At(o),
                (Both(_), InRegister) | (InRegister, Both(_)) => InRegister,
                (Lost, _) | (_, Lost) => Lost,
                _ => return None,
            })
        }
        Some(FrameState {
            sp: known(self.sp, other.sp).ok()?,
            fp: known(self.fp, other.fp).ok()?,
            lr: saved(self.lr, other.lr)?,
            x29: saved(self.x29, other.x29)?,
            signed: self.signed,
        })
    }

    /// CFA minus the value of register `r`, where known (SP and x29 only).
    fn cfa_minus(&self, r: u8) -> Option<i64> {
        match r {
            SP => self.sp,
            FP => self.fp,
            _ => None,
        }
    }

    /// Register `r` is written with a value that is not the caller's (31: SP, unknown).
    fn clobber(&mut self, r: u8) {
        match r {
            FP => {
                self.fp = None;
                self.x29 = self.x29.written();
            }
            LR => self.lr = self.lr.written(),
            SP => self.set_sp(None),
            _ => {}
        }
    }

    /// SP becomes CFA - `k`. A slot below the new SP may be overwritten at any moment (by a
    /// signal handler's frame): a register saved there is lost.
    fn set_sp(&mut self, k: Option<i64>) {
        self.sp = k.filter(|&k| k >= 0);
        if let Some(k) = self.sp {
            for saved in [&mut self.lr, &mut self.x29] {
                if saved.slot().is_some_and(|o| o < k.saturating_neg()) {
                    *saved = saved.slot_lost();
                }
            }
        }
    }

    /// Register `rd` becomes CFA - `k` (from an add or sub of an immediate to SP or x29).
    fn set_from_cfa(&mut self, rd: u8, k: Option<i64>) {
        match rd {
            SP => self.set_sp(k),
            FP => {
                self.clobber(FP);
                self.fp = k;
            }
            r => self.clobber(r),
        }
    }

    /// A store of `len` bytes at CFA + `o` overwrites the slots it covers.
    fn overwrite(&mut self, o: Option<i64>, len: i64) {
        for saved in [&mut self.lr, &mut self.x29] {
            if let Some(s) = saved.slot() {
                // Unknown addresses are taken to be outside the save area, which compilers
                // address only from SP or x29.
                if o.is_some_and(|o| o < s.saturating_add(8) && s < o.saturating_add(len)) {
                    *saved = saved.slot_lost();
                }
            }
        }
    }

    /// Register `r` (64 bits) is stored at CFA + `o`: a save if it holds the caller's value.
    /// Only a slot of the function's own frame counts, between SP and the CFA: one below SP may
    /// be overwritten at any moment, one at or above the CFA is the caller's memory.
    fn save(&mut self, r: u8, o: Option<i64>) {
        let sp = self.sp;
        let saved = match r {
            LR => &mut self.lr,
            FP => &mut self.x29,
            _ => return,
        };
        let in_frame = |o: i64| {
            o.checked_add(8).is_some_and(|end| end <= 0)
                && sp.is_some_and(|k| o >= k.saturating_neg())
        };
        if saved.in_register() {
            if let Some(o) = o.filter(|&o| in_frame(o)) {
                *saved = Saved::Both(o);
            }
        }
    }

    /// Register `r` (64 bits) is loaded from CFA + `o`: a restore if that is its slot.
    fn restore(&mut self, r: u8, o: Option<i64>) {
        let slot = match r {
            LR => self.lr,
            FP => self.x29,
            _ => return,
        };
        let restored = slot.slot().filter(|&s| Some(s) == o);
        self.clobber(r);
        if let Some(s) = restored {
            match r {
                LR => self.lr = Saved::Both(s),
                _ => self.x29 = Saved::Both(s),
            }
        }
    }
}

/// A load or store addressed from a base register plus an immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Access {
    load: bool,
    /// The registers transferred are general registers (not SIMD and FP ones).
    general: bool,
    /// Each transfer is 64 bits of a general register: a save or a restore.
    full: bool,
    /// The registers transferred, in address order.
    rt: [u8; 2],
    /// How many (1 or 2).
    count: u8,
    /// Bytes each.
    size: i64,
    base: u8,
    /// The first transfer's address minus the base register's value (before the writeback).
    offset: i64,
    /// What the instruction adds to the base register, if it writes it back.
    writeback: Option<i64>,
}

/// What one instruction does, as far as the frame is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Insn {
    /// `rd = rn + imm` (64-bit `add`/`sub` of an immediate, flags not set; 31 is SP).
    AddImm { rd: u8, rn: u8, imm: i64 },
    /// A load or store at a base register plus an immediate.
    Mem(Access),
    /// `b`, `b.cond`, `cbz`, `cbnz`, `tbz`, `tbnz` to `target`.
    Branch { target: u64, conditional: bool },
    /// `bl`, `blr` and their authenticating forms: x30 is written, execution falls through.
    Call,
    /// `br` and its authenticating forms: no fall through, target unknown.
    Jump,
    /// `ret`, `retaa`, `retab`.
    Return,
    /// Does not fall through and does not return (`eret`, `udf`).
    Halt,
    /// `paciasp`-like (true) or `autiasp`-like (false): x30 signed or authenticated in place.
    Sign(bool),
    /// Anything else: the general registers it may write, and whether it writes SP.
    Other { writes: [u8; 3], sp: bool },
}

/// No register (an unused slot of [`Insn::Other`]'s list).
const NONE: u8 = 32;

/// `v`'s low `n` bits, sign-extended.
fn sext(v: u32, n: u32) -> i64 {
    let shift = 64u32.saturating_sub(n);
    (i64::from(v) << shift) >> shift
}

/// The field of `n` bits at bit `lo` (as a register number when 5 bits).
fn field(i: u32, lo: u32, n: u32) -> u32 {
    (i >> lo) & ((1u32 << n).wrapping_sub(1))
}

fn reg(i: u32, lo: u32) -> u8 {
    field(i, lo, 5) as u8
}

/// `pc + words * 4`.
fn target(pc: u64, words: i64) -> u64 {
    pc.wrapping_add_signed(words.wrapping_mul(4))
}

/// Decodes the instruction `i` at `pc`.
fn decode(i: u32, pc: u64) -> Insn {
    let rd = reg(i, 0);
    let rn = reg(i, 5);
    let writes = |a: u8| Insn::Other {
        writes: [a, NONE, NONE],
        sp: false,
    };
    // Branches, exception generation and system instructions.
    if i & 0x7C00_0000 == 0x1400_0000 {
        return if i >> 31 == 1 {
            Insn::Call
        } else {
            Insn::Branch {
                target: target(pc, sext(field(i, 0, 26), 26)),
                conditional: false,
            }
        };
    }
    if i & 0xFF00_0000 == 0x5400_0000 || i & 0x7E00_0000 == 0x3400_0000 {
        // b.cond (and bc.cond), cbz, cbnz: imm19.
        return Insn::Branch {
            target: target(pc, sext(field(i, 5, 19), 19)),
            conditional: true,
        };
    }
    if i & 0x7E00_0000 == 0x3600_0000 {
        // tbz, tbnz: imm14.
        return Insn::Branch {
            target: target(pc, sext(field(i, 5, 14), 14)),
            conditional: true,
        };
    }
    if i & 0xFE00_0000 == 0xD600_0000 {
        // Unconditional branch (register): opc's low bits say br, blr or ret; eret and drps
        // set bit 23.
        if field(i, 23, 1) == 1 {
            return Insn::Halt;
        }
        return match field(i, 21, 2) {
            0 => Insn::Jump,
            1 => Insn::Call,
            2 => Insn::Return,
            _ => Insn::Halt,
        };
    }
    if i & 0xFFFF_F01F == 0xD503_201F {
        // Hints: the pointer-authentication ones that sign or authenticate x30.
        return match field(i, 5, 7) {
            0x18..=0x1B => Insn::Sign(true),
            0x1C..=0x1F => Insn::Sign(false),
            _ => writes(NONE),
        };
    }
    if i & 0xFFF0_0000 == 0xD530_0000 || i & 0xFFF8_0000 == 0xD528_0000 {
        // mrs, sysl.
        return writes(rd);
    }
    if i & 0xFF00_0000 == 0xD400_0000 || i & 0xFFC0_0000 == 0xD500_0000 {
        // svc and other exceptions (execution continues after them), other system
        // instructions.
        return writes(NONE);
    }
    if i & 0x1C00_0000 == 0x1000_0000 {
        return data_processing_immediate(i, rd, rn);
    }
    if i & 0x0E00_0000 == 0x0A00_0000 {
        // Data processing (register): only add/sub (extended register) can write SP.
        let sp = i & 0x1F20_0000 == 0x0B20_0000 && field(i, 29, 1) == 0 && rd == SP;
        return Insn::Other {
            writes: [rd, NONE, NONE],
            sp,
        };
    }
    if i & 0x0E00_0000 == 0x0E00_0000 {
        // SIMD and FP: only conversions to general registers (fmov, fcvtzs, ...) and the
        // element moves (umov, smov) write one.
        let to_general = i & 0x5F20_FC00 == 0x1E20_0000 || i & 0x9FE0_8400 == 0x0E00_0400;
        return writes(if to_general { rd } else { NONE });
    }
    if i & 0x0A00_0000 == 0x0800_0000 {
        return load_store(i, rd, rn);
    }
    if i & 0x1E00_0000 == 0 && i >> 31 == 0 {
        // udf and the unallocated space.
        return Insn::Halt;
    }
    // SVE and SME: `addvl sp, sp, #n` writes SP.
    Insn::Other {
        writes: [rd, NONE, NONE],
        sp: rd == SP,
    }
}

/// Data processing (immediate): `add`/`sub`, logical, move wide, bitfield, `adr`.
fn data_processing_immediate(i: u32, rd: u8, rn: u8) -> Insn {
    let sf = field(i, 31, 1) == 1;
    let sets_flags = field(i, 29, 1) == 1;
    if i & 0x1F80_0000 == 0x1100_0000 {
        // add/sub (immediate): Rd is SP unless flags are set (cmp, cmn write xzr).
        let imm = i64::from(field(i, 10, 12));
        let imm = if field(i, 22, 1) == 1 {
            imm.wrapping_shl(12)
        } else {
            imm
        };
        let imm = if field(i, 30, 1) == 1 {
            imm.wrapping_neg()
        } else {
            imm
        };
        if sets_flags {
            return Insn::Other {
                writes: [if rd == SP { NONE } else { rd }, NONE, NONE],
                sp: false,
            };
        }
        if sf {
            return Insn::AddImm { rd, rn, imm };
        }
        return Insn::Other {
            writes: [rd, NONE, NONE],
            sp: rd == SP,
        };
    }
    // add/sub with tags, and logical (immediate) other than ands, write SP as Rd 31.
    let tags = i & 0x1F80_0000 == 0x1180_0000;
    let logical = i & 0x1F80_0000 == 0x1200_0000 && field(i, 29, 2) != 3;
    Insn::Other {
        writes: [rd, NONE, NONE],
        sp: (tags || logical) && rd == SP,
    }
}

/// Loads and stores.
fn load_store(i: u32, rt: u8, rn: u8) -> Insn {
    let v = field(i, 26, 1) == 1;
    let rt2 = reg(i, 10);
    if i & 0x3A00_0000 == 0x2800_0000 {
        // Load/store pair: opc, V, the mode (no-allocate, post-index, offset, pre-index), L.
        let opc = field(i, 30, 2);
        let load = field(i, 22, 1) == 1;
        let scale: i64 = match (v, opc, load) {
            (false, 0, _) | (false, 1, true) | (true, 0, _) => 4,
            (false, 2, _) | (true, 1, _) => 8,
            (false, 1, false) | (true, 2, _) => 16,
            _ => {
                return Insn::Other {
                    writes: [rt, rt2, NONE],
                    sp: rn == SP,
                }
            }
        };
        let imm = sext(field(i, 15, 7), 7).wrapping_mul(scale);
        let (offset, writeback) = match field(i, 23, 2) {
            1 => (0, Some(imm)),
            3 => (imm, Some(imm)),
            _ => (imm, None),
        };
        // stgp stores two 8-byte registers, its immediate scaled by 16.
        let size = if !v && opc == 1 && !load { 8 } else { scale };
        return Insn::Mem(Access {
            load,
            general: !v,
            full: !v && opc == 2,
            rt: [rt, rt2],
            count: 2,
            size,
            base: rn,
            offset,
            writeback,
        });
    }
    let size = field(i, 30, 2);
    let opc = field(i, 22, 2);
    let prefetch = !v && size == 3 && opc == 2;
    let single = |offset: i64, writeback: Option<i64>| {
        let bytes: i64 = if v && opc & 2 != 0 && size == 0 {
            16
        } else {
            1i64 << size
        };
        let load = if v { opc & 1 == 1 } else { opc != 0 };
        if prefetch {
            return Insn::Other {
                writes: [NONE; 3],
                sp: false,
            };
        }
        Insn::Mem(Access {
            load,
            general: !v,
            full: !v && size == 3 && opc < 2,
            rt: [rt, NONE],
            count: 1,
            size: bytes,
            base: rn,
            offset,
            writeback,
        })
    };
    if i & 0x3B20_0000 == 0x3800_0000 {
        // Immediate: unscaled, post-index, unprivileged, pre-index (imm9).
        let imm = sext(field(i, 12, 9), 9);
        return match field(i, 10, 2) {
            1 => single(0, Some(imm)),
            3 => single(imm, Some(imm)),
            _ => single(imm, None),
        };
    }
    if i & 0x3B00_0000 == 0x3900_0000 {
        // Unsigned immediate (imm12, scaled by the size).
        let bytes: i64 = if v && opc & 2 != 0 && size == 0 {
            16
        } else {
            1i64 << size
        };
        return single(i64::from(field(i, 10, 12)).wrapping_mul(bytes), None);
    }
    if i & 0x3B00_0000 == 0x1800_0000 || i & 0x3B20_0C00 == 0x3820_0800 {
        // Literal, register offset: a load writes Rt (from no stack slot), a store writes no
        // register and is taken to address no save slot.
        let load = if v {
            false
        } else if i & 0x3B00_0000 == 0x1800_0000 {
            field(i, 30, 2) != 3
        } else {
            opc != 0 && !prefetch
        };
        let general_load = load && !v;
        return Insn::Other {
            writes: [if general_load { rt } else { NONE }, NONE, NONE],
            sp: false,
        };
    }
    // The rest (exclusives, atomics, ordered, ldraa/ldrab, SIMD structures, MTE tags): every
    // register field may be written, and the base too where the class writes it back.
    let ldra_writeback = i & 0xFF20_0400 == 0xF820_0400 && field(i, 11, 1) == 1;
    let structure_post_index = i & 0xBF80_0000 == 0x0C80_0000 || i & 0xBF80_0000 == 0x0D80_0000;
    let tag_writeback = i & 0xFF20_0000 == 0xD920_0000 && field(i, 10, 1) == 1;
    let writeback = ldra_writeback || structure_post_index || tag_writeback;
    Insn::Other {
        writes: [rt, rt2, reg(i, 16)],
        sp: writeback && rn == SP,
    }
}

/// The base register of `a` after its writeback, if it has one (`base_k`: CFA minus the base
/// register's value before).
fn writeback(state: &mut FrameState, a: &Access, base_k: Option<i64>) {
    let Some(wb) = a.writeback else {
        return;
    };
    let k = base_k.and_then(|k| k.checked_sub(wb));
    match a.base {
        SP => state.set_sp(k),
        FP => {
            state.clobber(FP);
            state.fp = k;
        }
        _ => {}
    }
}

/// Applies a non-branching instruction to `state`.
fn apply(state: &mut FrameState, insn: &Insn) {
    match *insn {
        Insn::AddImm { rd, rn, imm } => {
            let k = state.cfa_minus(rn).and_then(|k| k.checked_sub(imm));
            state.set_from_cfa(rd, k);
        }
        Insn::Mem(a) => {
            let base_k = state.cfa_minus(a.base);
            // The first transfer's address as CFA + o.
            let first = base_k.and_then(|k| a.offset.checked_sub(k));
            // A store's slots are judged against SP after its writeback (`stp x29, x30,
            // [sp, #-16]!` stores into the frame it makes); a load's against SP before it (the
            // epilogue's `ldp x29, x30, [sp], #16` reads them back as it releases them).
            if !a.load {
                writeback(state, &a, base_k);
            }
            for (n, &r) in a.rt.iter().take(usize::from(a.count)).enumerate() {
                let o = first.and_then(|f| f.checked_add(a.size.checked_mul(n as i64)?));
                match (a.load, a.general, a.full) {
                    (true, true, true) => state.restore(r, o),
                    (true, true, false) => state.clobber(r),
                    (true, false, _) => {}
                    (false, general, full) => {
                        state.overwrite(o, a.size);
                        if general && full {
                            state.save(r, o);
                        }
                    }
                }
            }
            if a.load {
                writeback(state, &a, base_k);
            }
        }
        Insn::Call => state.clobber(LR),
        Insn::Sign(signed) => state.signed = signed,
        Insn::Other { writes, sp } => {
            for r in writes {
                // 31 in these fields is xzr.
                if r < SP {
                    state.clobber(r);
                }
            }
            if sp {
                state.clobber(SP);
            }
        }
        Insn::Branch { .. } | Insn::Jump | Insn::Return | Insn::Halt => {}
    }
}

/// What reading a function found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// The function's first instruction's address.
    pub start: u64,
    /// The state before each instruction (`start + 4 * n`), where reached.
    pub states: Vec<Option<FrameState>>,
    /// Exits reached with the caller's frame restored (returns, tail calls).
    pub exits: usize,
    /// The first `ret` reached in a state that is not an exit: the reading is wrong.
    pub refuted_at: Option<u64>,
    /// The first instruction reached with two different frames.
    pub conflict_at: Option<u64>,
}

impl Analysis {
    /// The reading holds: at least one exit confirms it, and nothing contradicts it.
    pub fn confirmed(&self) -> bool {
        self.exits > 0 && self.refuted_at.is_none() && self.conflict_at.is_none()
    }

    /// `(start, end, rule)` for each run of instructions with one rule, sorted; empty unless
    /// [`Analysis::confirmed`].
    pub fn rules(&self) -> Vec<(u64, u64, Rule)> {
        let mut rows: Vec<(u64, u64, Rule)> = Vec::new();
        if !self.confirmed() {
            return rows;
        }
        let mut at = self.start;
        for state in &self.states {
            let next = at.saturating_add(4);
            if let Some(rule) = state.and_then(|s| s.rule()) {
                match rows.last_mut() {
                    Some(last) if last.1 == at && last.2 == rule => last.1 = next,
                    _ => rows.push((at, next, rule)),
                }
            }
            at = next;
        }
        rows
    }
}

/// Reads the function whose code is `code`, at address `start`. `is_entry` says which
/// addresses are the module's known function entries (its symbols, its PLT stubs): a `b` to one
/// with the frame restored leaves the function (a tail call).
pub fn analyze(code: &[u8], start: u64, is_entry: impl Fn(u64) -> bool) -> Analysis {
    let words: Vec<u32> = code
        .chunks_exact(4)
        .map(|w| <[u8; 4]>::try_from(w).map_or(0, u32::from_le_bytes))
        .collect();
    let mut analysis = Analysis {
        start,
        states: vec![None; words.len()],
        ..Analysis::default()
    };
    if words.is_empty() {
        return analysis;
    }
    let index_of = |addr: u64| -> Option<usize> {
        let off = addr.checked_sub(start)?;
        let n = usize::try_from(off / 4).ok()?;
        (off % 4 == 0 && n < words.len()).then_some(n)
    };
    let mut pending: BTreeSet<usize> = BTreeSet::new();
    // Each instruction's state is set once and then only weakened (a value known becomes
    // unknown, a register held twice is held once), a bounded number of times: the worklist
    // ends.
    let enter = |analysis: &mut Analysis, pending: &mut BTreeSet<usize>, n: usize, s| {
        let Some(slot) = analysis.states.get_mut(n) else {
            return;
        };
        let joined = match slot {
            None => Some(s),
            Some(old) => old.join(&s),
        };
        match joined {
            Some(j) if *slot != Some(j) => {
                *slot = Some(j);
                pending.insert(n);
            }
            Some(_) => {}
            None => {
                let at = start.saturating_add((n as u64).saturating_mul(4));
                analysis.conflict_at.get_or_insert(at);
            }
        }
    };
    enter(&mut analysis, &mut pending, 0, FrameState::ENTRY);
    while let Some(n) = pending.pop_first() {
        let (Some(&word), Some(Some(before))) = (words.get(n), analysis.states.get(n).copied())
        else {
            continue;
        };
        let pc = start.saturating_add((n as u64).saturating_mul(4));
        let insn = decode(word, pc);
        let mut after = before;
        apply(&mut after, &insn);
        let falls_through = match insn {
            Insn::Branch {
                target,
                conditional,
            } => {
                match index_of(target) {
                    Some(t) => enter(&mut analysis, &mut pending, t, after),
                    // Out of the function: a tail call if it lands on a function's entry with
                    // the frame restored; anything else (a jump to a cold part) says nothing.
                    None if !conditional && is_entry(target) && after.is_exit() => {
                        analysis.exits = analysis.exits.saturating_add(1);
                    }
                    None => {}
                }
                conditional
            }
            Insn::Return => {
                if after.is_exit() {
                    analysis.exits = analysis.exits.saturating_add(1);
                } else {
                    analysis.refuted_at.get_or_insert(pc);
                }
                false
            }
            Insn::Jump | Insn::Halt => false,
            _ => true,
        };
        if falls_through {
            if let Some(next) = n.checked_add(1).filter(|&m| m < words.len()) {
                enter(&mut analysis, &mut pending, next, after);
            }
        }
    }
    analysis
}

#[cfg(test)]
mod tests;
