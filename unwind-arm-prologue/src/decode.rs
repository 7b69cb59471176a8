//! What one instruction does to the frame: the few A32 and Thumb-2 encodings that move SP, save
//! or restore registers, set up a frame pointer, return or branch. Everything else is
//! [`Effect::None`], except other writes to SP, which make SP unknown ([`Effect::SpUnknown`]).

// The arithmetic here is on masked instruction fields (at most 24 bits wide, times 4 at most)
// and on `i32`s converted from `u32`s below 2^31: none of it can overflow.
#![allow(clippy::arithmetic_side_effects)]

/// One decoded instruction: its length, whether it executes only under a condition, and its
/// effect on the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Length in bytes (2 or 4).
    pub len: u8,
    /// It has a condition (A32 condition field, or inside a Thumb `IT` block): when it is not
    /// taken, execution falls through with the frame unchanged.
    pub conditional: bool,
    /// What it does.
    pub effect: Effect,
}

/// What an instruction does to the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing the rules track.
    None,
    /// `push` (`stmdb sp!`): the registers of the mask (bit `n` = `r[n]`) stored below SP,
    /// the lowest-numbered at the lowest address, and SP lowered by 4 per register.
    Push(u16),
    /// `pop` (`ldmia sp!`): the registers loaded from SP upwards, SP raised by 4 per register.
    /// With bit 15 (PC) it returns.
    Pop(u16),
    /// SP += the value (a negative value allocates: `sub sp`, `vpush`).
    SpAdd(i32),
    /// `r[fp] = SP + offset` (a frame pointer set up from SP).
    SetFp {
        /// The register: 7 or 11.
        fp: u8,
        /// Added to SP.
        offset: i32,
    },
    /// `SP = r[fp] + offset` (SP restored from the frame pointer in an epilogue).
    SpFromFp {
        /// The register: 7 or 11.
        fp: u8,
        /// Added to it.
        offset: i32,
    },
    /// `r[fp] += offset` (`adds r7, #16` before `mov sp, r7` in an epilogue).
    FpAdd {
        /// The register: 7 or 11.
        fp: u8,
        /// Added to it.
        offset: i32,
    },
    /// `ldr rN, [sp, #offset]` (no writeback) into LR, r7 or r11: where it reads the
    /// register's save slot, the caller's value is back in the register.
    LoadSp {
        /// The register: 7, 11 or 14.
        reg: u8,
        /// Added to SP.
        offset: i32,
    },
    /// Writes LR or the frame-pointer candidates (r7, r11) of the mask in a way not followed:
    /// a frame pointer held in one is lost, and so is a return address still in LR (a call
    /// writes LR).
    Writes(u16),
    /// Any other write to SP (`sub sp, sp, r3` for `alloca`, `mov sp, r4`, ...).
    SpUnknown,
    /// `bx lr` or `mov pc, lr`.
    Return,
    /// A direct branch (not a call) to the address.
    Branch(u64),
    /// A branch whose target is not known here (`bx r3`, `ldr pc, ...`, a load into PC).
    IndirectBranch,
    /// Thumb `tbb`/`tbh` (`half` for `tbh`): a table of forward branch offsets follows.
    TableBranch {
        /// `tbh` (halfword entries), not `tbb` (byte entries).
        half: bool,
    },
    /// Thumb `it`: the next `n` instructions are conditional.
    It(u8),
    /// `udf` (a permanently undefined instruction, which compilers put after calls that do
    /// not return): it does not fall through.
    Trap,
}

/// Sign-extends the low `bits` bits of `v`.
fn sign_extend(v: u32, bits: u32) -> i64 {
    let shift = 32 - bits;
    i64::from(((v << shift) as i32) >> shift)
}

/// `addr + offset` (wrapping: a branch in a 32-bit address space).
fn target(addr: u64, offset: i64) -> u64 {
    addr.wrapping_add_signed(offset) & 0xffff_ffff
}

/// A value that fits: SP adjustments in real code are far below 2^31.
fn imm(v: u32) -> Option<i32> {
    i32::try_from(v).ok()
}

/// A32 `ARMExpandImm`.
fn arm_expand_imm(imm12: u32) -> u32 {
    (imm12 & 0xff).rotate_right((imm12 >> 8) * 2)
}

/// Thumb `ThumbExpandImm`.
fn thumb_expand_imm(imm12: u32) -> u32 {
    let b = imm12 & 0xff;
    if imm12 >> 10 == 0 {
        match (imm12 >> 8) & 3 {
            0 => b,
            1 => b << 16 | b,
            2 => b << 24 | b << 8,
            _ => b << 24 | b << 16 | b << 8 | b,
        }
    } else {
        (0x80 | (imm12 & 0x7f)).rotate_right(imm12 >> 7)
    }
}

/// SP += or -= `v`, if it fits.
fn sp_add(v: u32, negate: bool) -> Effect {
    match imm(v) {
        Some(v) if negate => Effect::SpAdd(-v),
        Some(v) => Effect::SpAdd(v),
        None => Effect::SpUnknown,
    }
}

/// The frame-pointer registers: r7 (Thumb) and r11 (ARM).
fn is_fp(r: u32) -> bool {
    r == 7 || r == 11
}

/// Decodes the A32 instruction `w` at `addr`.
pub fn arm(w: u32, addr: u64) -> Decoded {
    let cond = w >> 28;
    let effect = match arm_effect(w, addr) {
        Effect::None => writes(arm_writes(w)),
        e => e,
    };
    Decoded {
        len: 4,
        conditional: cond != 0xe,
        effect,
    }
}

fn arm_effect(w: u32, addr: u64) -> Effect {
    if w & 0xfff0_00f0 == 0xe7f0_00f0 {
        return Effect::Trap; // udf
    }
    if w >> 28 == 0xf {
        // The unconditional space: `blx imm` is a call (it writes LR); `pld` and the others
        // do not move SP.
        return match w & 0x0e00_0000 {
            0x0a00_0000 => Effect::Writes(1 << 14),
            _ => Effect::None,
        };
    }
    let rn = (w >> 16) & 0xf;
    let rd = (w >> 12) & 0xf;
    let op = w & 0x0fff_ffff;
    match w & 0x0fff_0000 {
        0x092d_0000 => return Effect::Push((w & 0xffff) as u16),
        0x08bd_0000 => return Effect::Pop((w & 0xffff) as u16),
        _ => {}
    }
    match op & 0x0fff_0fff {
        0x052d_0004 => return Effect::Push(1 << rd),
        0x049d_0004 => return Effect::Pop(1 << rd),
        _ => {}
    }
    match op {
        0x012f_ff1e | 0x01a0_f00e => return Effect::Return,
        _ => {}
    }
    if op & 0x0fff_fff0 == 0x012f_ff10 {
        return Effect::IndirectBranch; // bx rm
    }
    if op & 0x0fff_fff0 == 0x012f_ff30 || op & 0x0f00_0000 == 0x0b00_0000 {
        return Effect::Writes(1 << 14); // blx rm, bl: calls
    }
    if op & 0x0fff_0000 == 0x059d_0000 && matches!(rd, 7 | 11 | 14) {
        // ldr rt, [sp, #imm12]
        return Effect::LoadSp {
            reg: rd as u8,
            offset: (w & 0xfff) as i32,
        };
    }
    if op & 0x0fbf_0e00 == 0x0d2d_0a00 {
        return Effect::SpAdd(-(((w & 0xff) * 4) as i32)); // vpush
    }
    if op & 0x0fbf_0e00 == 0x0cbd_0a00 {
        return Effect::SpAdd(((w & 0xff) * 4) as i32); // vpop
    }
    if op & 0x0f00_0000 == 0x0a00_0000 {
        return Effect::Branch(target(addr, 8 + sign_extend(w & 0x00ff_ffff, 24) * 4));
    }
    // Data processing (not multiplies or extra loads and stores).
    if w & 0x0c00_0000 == 0 && !(w & 0x0200_0000 == 0 && w & 0x90 == 0x90) {
        let opcode = (w >> 21) & 0xf;
        if (8..=11).contains(&opcode) {
            // tst, teq, cmp, cmn (or the miscellaneous space): no destination.
            return Effect::None;
        }
        let immediate = w & 0x0200_0000 != 0;
        let value = arm_expand_imm(w & 0xfff);
        let plain_mov = opcode == 0b1101 && w & 0xff0 == 0; // mov rd, rm
        let rm = w & 0xf;
        return match rd {
            13 => match (immediate, opcode, rn) {
                (true, 0b0100, 13) => sp_add(value, false),
                (true, 0b0010, 13) => sp_add(value, true),
                (true, 0b0100, r) if is_fp(r) => {
                    imm(value).map_or(Effect::SpUnknown, |offset| Effect::SpFromFp {
                        fp: r as u8,
                        offset,
                    })
                }
                (true, 0b0010, r) if is_fp(r) => {
                    imm(value).map_or(Effect::SpUnknown, |v| Effect::SpFromFp {
                        fp: r as u8,
                        offset: -v,
                    })
                }
                (false, _, _) if plain_mov && is_fp(rm) => Effect::SpFromFp {
                    fp: rm as u8,
                    offset: 0,
                },
                _ => Effect::SpUnknown,
            },
            15 if opcode == 0b1101 && !immediate && rm == 14 && plain_mov => Effect::Return,
            15 => Effect::IndirectBranch,
            r if is_fp(r) => match (immediate, opcode, rn) {
                (true, 0b0100, 13) => imm(value).map_or(Effect::None, |offset| Effect::SetFp {
                    fp: r as u8,
                    offset,
                }),
                (true, 0b0100 | 0b0010, n) if n == r => {
                    imm(value).map_or(Effect::None, |v| Effect::FpAdd {
                        fp: r as u8,
                        offset: if opcode == 0b0010 { -v } else { v },
                    })
                }
                (false, _, _) if plain_mov && rm == 13 => Effect::SetFp {
                    fp: r as u8,
                    offset: 0,
                },
                _ => Effect::None,
            },
            _ => Effect::None,
        };
    }
    // Loads and stores of one register.
    if w & 0x0c00_0000 == 0x0400_0000 {
        let load = w & 0x0010_0000 != 0;
        let writeback = w & 0x0100_0000 == 0 || w & 0x0020_0000 != 0;
        if load && rd == 15 {
            return Effect::IndirectBranch;
        }
        if rn == 13 && writeback {
            return Effect::SpUnknown;
        }
        return Effect::None;
    }
    // Loads and stores of several registers.
    if w & 0x0e00_0000 == 0x0800_0000 {
        let load = w & 0x0010_0000 != 0;
        if load && w & 0x8000 != 0 {
            return Effect::IndirectBranch;
        }
        if rn == 13 && w & 0x0020_0000 != 0 {
            return Effect::SpUnknown;
        }
    }
    Effect::None
}

/// Decodes the Thumb instruction starting with halfword `hw1` (`hw2` is the next halfword,
/// needed if the instruction is 32-bit: `None` if the code ends there) at `addr`. The caller
/// knows the `IT` blocks and sets [`Decoded::conditional`].
pub fn thumb(hw1: u16, hw2: Option<u16>, addr: u64) -> Option<Decoded> {
    let wide = matches!(hw1 >> 11, 0b11101..=0b11111);
    let (len, effect) = if wide {
        let (h1, h2) = (u32::from(hw1), u32::from(hw2?));
        match thumb32(h1, h2, addr) {
            Effect::None => (4, writes(thumb32_writes(h1, h2))),
            e => (4, e),
        }
    } else {
        let h = u32::from(hw1);
        match thumb16(h, addr) {
            Effect::None => (2, writes(thumb16_writes(h))),
            e => (2, e),
        }
    };
    // Conditional branches (B<c> T1 and T3, cbz, cbnz) fall through when not taken; other
    // instructions are conditional only inside an `IT` block, which the caller follows.
    let conditional = match (wide, effect) {
        (_, Effect::Branch(_)) if !wide => {
            (hw1 & 0xf000 == 0xd000 && (hw1 >> 8) & 0xf < 0xe) || hw1 & 0xf500 == 0xb100
        }
        (_, Effect::Branch(_)) => hw2.is_some_and(|h2| h2 & 0x1000 == 0),
        _ => false,
    };
    Some(Decoded {
        len,
        conditional,
        effect,
    })
}

/// Whether the 16-bit Thumb instruction `h` is plain: it does nothing to the frame and writes
/// neither r7 nor LR ([`thumb`] gives [`Effect::None`]), so the reading can pass over it
/// without decoding it. Most instructions are (loads, stores and arithmetic on other
/// registers); the answer is conservative (`false` for whole classes the decoder looks at).
pub fn thumb16_is_plain(h: u16) -> bool {
    let r7 = |r: u16| r & 7 == 7;
    match h >> 11 {
        // Shifts, add/sub (register, 3-bit immediate): Rd in bits 2:0.
        0b00000..=0b00011 => !r7(h),
        // mov, add, sub with an 8-bit immediate: Rd in bits 10:8; cmp writes nothing.
        0b00100 | 0b00110 | 0b00111 => !r7(h >> 8),
        0b00101 => true,
        // Data processing on low registers (high registers, bx and blx are decoded).
        0b01000 => h & 0xfc00 == 0x4000 && !r7(h),
        // ldr literal: Rt in bits 10:8.
        0b01001 => !r7(h >> 8),
        // Loads and stores with a register or an immediate offset: Rt in bits 2:0.
        0b01010..=0b10001 => !r7(h),
        // str sp-relative.
        0b10010 => true,
        // ldr sp-relative, adr, add Rd, sp: Rd in bits 10:8.
        0b10011..=0b10101 => !r7(h >> 8),
        // stm.
        0b11000 => true,
        // ldm: the register list.
        0b11001 => h & 0x80 == 0,
        // SP adjustments, push, pop, cbz, it, branches, udf, 32-bit instructions.
        _ => false,
    }
}

fn thumb16(h: u32, addr: u64) -> Effect {
    // adds / subs r7, r7, #imm3 and adds / subs r7, #imm8: how an epilogue gets from r7 back
    // to the value SP needs.
    let fp_add = match (h & 0xfe00, h & 0xff00) {
        (0x1c00 | 0x1e00, _) if h & 0x3f == 0x3f => Some(((h >> 6) & 7, h & 0x200 != 0)),
        (_, 0x3700 | 0x3f00) => Some((h & 0xff, h & 0x0800 != 0)),
        _ => None,
    };
    if let Some((v, sub)) = fp_add {
        let v = v as i32;
        return Effect::FpAdd {
            fp: 7,
            offset: if sub { -v } else { v },
        };
    }
    match h & 0xfe00 {
        0xb400 => return Effect::Push((h & 0xff | (h & 0x100) << 6) as u16),
        0xbc00 => return Effect::Pop((h & 0xff | (h & 0x100) << 7) as u16),
        _ => {}
    }
    match h & 0xff80 {
        0xb000 => return Effect::SpAdd(((h & 0x7f) * 4) as i32),
        0xb080 => return Effect::SpAdd(-(((h & 0x7f) * 4) as i32)),
        _ => {}
    }
    if h & 0xff00 == 0xaf00 {
        // add r7, sp, #imm
        return Effect::SetFp {
            fp: 7,
            offset: ((h & 0xff) * 4) as i32,
        };
    }
    if h & 0xff00 == 0xbf00 && h & 0xf != 0 {
        return Effect::It(4 - (h & 0xf).trailing_zeros() as u8);
    }
    // add / mov with high registers; bx / blx.
    if h & 0xfc00 == 0x4400 {
        let rd = (h >> 4) & 8 | h & 7;
        let rm = (h >> 3) & 0xf;
        return match (h >> 8) & 3 {
            0 => match rd {
                13 => Effect::SpUnknown,
                15 => Effect::IndirectBranch,
                _ => Effect::None,
            },
            2 => match (rd, rm) {
                (13, r) if is_fp(r) => Effect::SpFromFp {
                    fp: r as u8,
                    offset: 0,
                },
                (13, _) => Effect::SpUnknown,
                (15, 14) => Effect::Return,
                (15, _) => Effect::IndirectBranch,
                (r, 13) if is_fp(r) => Effect::SetFp {
                    fp: r as u8,
                    offset: 0,
                },
                _ => Effect::None,
            },
            3 if h & 0x80 == 0 => match rm {
                14 => Effect::Return,
                _ => Effect::IndirectBranch,
            },
            _ => Effect::None, // cmp, blx
        };
    }
    if h & 0xff00 == 0xde00 {
        return Effect::Trap;
    }
    if h & 0xff00 == 0x9f00 {
        // ldr r7, [sp, #imm8 * 4]
        return Effect::LoadSp {
            reg: 7,
            offset: ((h & 0xff) * 4) as i32,
        };
    }
    if h & 0xf000 == 0xd000 && (h >> 8) & 0xf < 0xe {
        return Effect::Branch(target(addr, 4 + sign_extend(h & 0xff, 8) * 2));
    }
    if h & 0xf800 == 0xe000 {
        return Effect::Branch(target(addr, 4 + sign_extend(h & 0x7ff, 11) * 2));
    }
    if h & 0xf500 == 0xb100 {
        // cbz / cbnz
        let offset = (h >> 3) & 0x1f | (h >> 4) & 0x20;
        return Effect::Branch(target(addr, 4 + i64::from(offset) * 2));
    }
    Effect::None
}

fn thumb32(h1: u32, h2: u32, addr: u64) -> Effect {
    match h1 {
        0xe92d if h2 & 0xa000 == 0 => return Effect::Push(h2 as u16),
        0xe8bd if h2 & 0x2000 == 0 => return Effect::Pop(h2 as u16),
        0xf84d if h2 & 0x0fff == 0x0d04 => return Effect::Push(1 << (h2 >> 12)),
        0xf85d if h2 & 0x0fff == 0x0b04 => return Effect::Pop(1 << (h2 >> 12)),
        _ => {}
    }
    let rn = h1 & 0xf;
    let rd = (h2 >> 8) & 0xf;
    // vpush / vpop (vstmdb sp! / vldmia sp!, single or double registers).
    if h2 & 0x0e00 == 0x0a00 {
        match h1 & 0xffbf {
            0xed2d => return Effect::SpAdd(-(((h2 & 0xff) * 4) as i32)),
            0xecbd => return Effect::SpAdd(((h2 & 0xff) * 4) as i32),
            _ => {}
        }
    }
    if h1 & 0xfff0 == 0xf7f0 && h2 & 0xf000 == 0xa000 {
        return Effect::Trap; // udf.w
    }
    // tbb / tbh
    if h1 & 0xfff0 == 0xe8d0 && h2 & 0xffe0 == 0xf000 {
        return Effect::TableBranch {
            half: h2 & 0x10 != 0,
        };
    }
    // Branches: b.w (T4), b<cond>.w (T3); bl and blx are calls.
    if h1 & 0xf800 == 0xf000 && h2 & 0x8000 != 0 {
        let s = (h1 >> 10) & 1;
        let (j1, j2) = ((h2 >> 13) & 1, (h2 >> 11) & 1);
        return match h2 & 0x5000 {
            0x1000 => {
                let (i1, i2) = (!(j1 ^ s) & 1, !(j2 ^ s) & 1);
                let v = s << 24 | i1 << 23 | i2 << 22 | (h1 & 0x3ff) << 12 | (h2 & 0x7ff) << 1;
                Effect::Branch(target(addr, 4 + sign_extend(v, 25)))
            }
            0x0000 if (h1 >> 6) & 0xf < 0xe => {
                let v = s << 20 | j2 << 19 | j1 << 18 | (h1 & 0x3f) << 12 | (h2 & 0x7ff) << 1;
                Effect::Branch(target(addr, 4 + sign_extend(v, 21)))
            }
            // bl, blx: calls write LR.
            0x4000 | 0x5000 => Effect::Writes(1 << 14),
            _ => Effect::None,
        };
    }
    // Data processing, modified immediate (add.w / sub.w) and plain immediate (addw / subw).
    if h1 & 0xf800 == 0xf000 && h2 & 0x8000 == 0 {
        let imm12 = (h1 & 0x400) << 1 | (h2 & 0x7000) >> 4 | h2 & 0xff;
        let (value, add, sub) = if h1 & 0x0200 == 0 {
            let op = (h1 >> 5) & 0xf;
            (thumb_expand_imm(imm12), op == 0b1000, op == 0b1101)
        } else {
            let op = (h1 >> 4) & 0x1f;
            (imm12, op == 0b00000, op == 0b01010)
        };
        let flags_only = h1 & 0x0200 == 0 && h1 & 0x10 != 0 && rd == 15; // tst, cmp, ...
        return match rd {
            _ if flags_only => Effect::None,
            13 if rn == 13 && (add || sub) => sp_add(value, sub),
            13 if is_fp(rn) && (add || sub) => {
                imm(value).map_or(Effect::SpUnknown, |v| Effect::SpFromFp {
                    fp: rn as u8,
                    offset: if sub { -v } else { v },
                })
            }
            13 => Effect::SpUnknown,
            r if is_fp(r) && rn == 13 && add => {
                imm(value).map_or(Effect::None, |offset| Effect::SetFp {
                    fp: r as u8,
                    offset,
                })
            }
            r if is_fp(r) && rn == r && (add || sub) => {
                imm(value).map_or(Effect::None, |v| Effect::FpAdd {
                    fp: r as u8,
                    offset: if sub { -v } else { v },
                })
            }
            _ => Effect::None,
        };
    }
    // Data processing, shifted register: mov.w sp, r7 / mov.w r7, sp; others writing SP.
    if h1 & 0xfe00 == 0xea00 {
        let rm = h2 & 0xf;
        let op = (h1 >> 5) & 0xf;
        let plain_mov = op == 0b0010 && rn == 15 && h2 & 0x70f0 == 0;
        let flags_only = h1 & 0x10 != 0 && rd == 15;
        return match rd {
            _ if flags_only => Effect::None,
            13 if plain_mov && is_fp(rm) => Effect::SpFromFp {
                fp: rm as u8,
                offset: 0,
            },
            13 => Effect::SpUnknown,
            r if is_fp(r) && plain_mov && rm == 13 => Effect::SetFp {
                fp: r as u8,
                offset: 0,
            },
            _ => Effect::None,
        };
    }
    // Loads and stores of several registers (ldm / stm) with SP written back, or a load into PC.
    if h1 & 0xfe40 == 0xe800 {
        if h1 & 0x10 != 0 && h2 & 0x8000 != 0 {
            return Effect::IndirectBranch;
        }
        if rn == 13 && h1 & 0x20 != 0 {
            return Effect::SpUnknown;
        }
        return Effect::None;
    }
    // ldrd / strd with SP written back.
    if h1 & 0xfe40 == 0xe840 {
        if rn == 13 && h1 & 0x20 != 0 {
            return Effect::SpUnknown;
        }
        return Effect::None;
    }
    // ldr.w rt, [sp, #imm12] into a register whose save slot it may read.
    if h1 == 0xf8dd && matches!(h2 >> 12, 7 | 11 | 14) {
        return Effect::LoadSp {
            reg: (h2 >> 12) as u8,
            offset: (h2 & 0xfff) as i32,
        };
    }
    // Single loads and stores: a load into PC, or SP written back (pre/post-indexed).
    if h1 & 0xfe00 == 0xf800 {
        let rt = h2 >> 12;
        let load = h1 & 0x10 != 0;
        let indexed = h1 & 0x80 == 0 && h2 & 0x0800 != 0;
        let writeback = indexed && h2 & 0x0100 != 0;
        // A word load into PC (`ldrb` with Rt = 15 is `pld`).
        if load && rt == 15 && h1 & 0x60 == 0x40 {
            return Effect::IndirectBranch;
        }
        if rn == 13 && writeback {
            return Effect::SpUnknown;
        }
    }
    Effect::None
}

/// [`Effect::Writes`] for the frame-pointer candidates and LR in `mask`, if any.
fn writes(mask: u16) -> Effect {
    match mask & (1 << 7 | 1 << 11 | 1 << 14) {
        0 => Effect::None,
        m => Effect::Writes(m),
    }
}

/// The registers a 16-bit Thumb instruction writes (of those [`thumb16`] leaves as
/// [`Effect::None`]), as a mask; only r7 (the one frame pointer it can write) and LR matter.
fn thumb16_writes(h: u32) -> u16 {
    let low = |r: u32| 1u16 << (r & 7);
    match h >> 11 {
        // Shifts, add/sub (register and 3-bit immediate): Rd in bits 2:0.
        0b00000..=0b00011 => low(h),
        // mov / add / sub with an 8-bit immediate (cmp, 0b00101, writes nothing).
        0b00100 | 0b00110 | 0b00111 => low(h >> 8),
        // Data processing: Rd in bits 2:0, except tst, cmp and cmn.
        0b01000 if h & 0xfc00 == 0x4000 => match (h >> 6) & 0xf {
            0b1000 | 0b1010 | 0b1011 => 0,
            _ => low(h),
        },
        // add / mov with high registers (cmp and bx write nothing): Rd is D:Rdn.
        0b01000 if h & 0xfc00 == 0x4400 && matches!((h >> 8) & 3, 0 | 2) => {
            1 << ((h >> 4) & 8 | h & 7)
        }
        // blx rm: a call.
        0b01000 if h & 0xff80 == 0x4780 => 1 << 14,
        // ldr literal, ldr sp-relative, adr: Rt in bits 10:8.
        0b01001 | 0b10011 | 0b10100 => low(h >> 8),
        // Loads with a register offset (ldrsb, ldr, ldrh, ldrb, ldrsh).
        0b01010 | 0b01011 if (h >> 9) & 7 >= 3 => low(h),
        // Loads with an immediate offset (bit 11 set).
        0b01101 | 0b01111 | 0b10001 => low(h),
        // Sign and zero extension, byte reversal: Rd in bits 2:0.
        0b10110 if h & 0xff00 == 0xb200 => low(h),
        0b10111 if h & 0xff00 == 0xba00 => low(h),
        // ldm: the register list.
        0b11001 => (h & 0xff) as u16,
        _ => 0,
    }
}

/// The registers a 32-bit Thumb instruction writes (of those [`thumb32`] leaves as
/// [`Effect::None`]), as a mask, as far as the frame pointers r7 and r11 go.
fn thumb32_writes(h1: u32, h2: u32) -> u16 {
    let rd = 1u16 << ((h2 >> 8) & 0xf);
    let rt = 1u16 << (h2 >> 12);
    if h1 & 0xf800 == 0xf000 && h2 & 0x8000 == 0 {
        // Data processing with an immediate (tst, teq, cmp, cmn have Rd = 15).
        return rd;
    }
    match h1 >> 8 {
        // Data processing with a shifted register.
        0xea | 0xeb => rd,
        // Register-controlled shifts, extends, multiplies, divides.
        0xfa | 0xfb => rd,
        // Single loads.
        0xf8 | 0xf9 if h1 & 0x10 != 0 => rt,
        // ldm (the list) and ldrd (two registers).
        0xe8 | 0xe9 if h1 & 0x10 != 0 => match h1 & 0x40 {
            0 => h2 as u16,
            _ => rt | rd,
        },
        _ => 0,
    }
}

/// The registers an A32 instruction writes (of those [`arm_effect`] leaves as
/// [`Effect::None`]), as a mask, as far as the frame pointers r7 and r11 go.
fn arm_writes(w: u32) -> u16 {
    let rd = 1u16 << ((w >> 12) & 0xf);
    if w >> 28 == 0xf {
        return 0;
    }
    match (w >> 25) & 7 {
        // Multiplies: Rd in bits 19:16.
        0b000 if w & 0x0f00_00f0 == 0x90 => 1 << ((w >> 16) & 0xf),
        // Data processing: tst, teq, cmp, cmn (and the miscellaneous space) write no Rd.
        0b000 | 0b001 => match (w >> 21) & 0xf {
            0b1000..=0b1011 => 0,
            _ => rd,
        },
        // Single loads.
        0b010 | 0b011 if w & 0x0010_0000 != 0 => rd,
        // ldm.
        0b100 if w & 0x0010_0000 != 0 => w as u16,
        _ => 0,
    }
}
