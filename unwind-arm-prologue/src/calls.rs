//! Return sites of A32 and Thumb-2 code: the addresses just after its call instructions, which
//! a stack scan accepts as return addresses (`unwind_core::scan`).

/// Appends to `out` the return site of every call instruction in `code` (file address `svma`),
/// with its target for a call to a label, read at every alignment because the instruction set
/// of a stripped library's code is not known:
/// - Thumb (every halfword): `bl`, `blx <label>` (32-bit), `blx <Rm>` (16-bit). The site has
///   bit 0 set, as the return address those calls leave in LR.
/// - A32 (every word): `bl`, `blx <label>`, `blx <Rm>`, unconditional or not.
///
/// A call with an immediate target counts only if `is_code` accepts its target (calls stay in
/// their module: other modules are reached through its PLT), which rejects most of the data and
/// misaligned reads that happen to look like one. A register call cannot be checked so.
pub fn return_sites(
    code: &[u8],
    svma: u64,
    is_code: &dyn Fn(u64) -> bool,
    out: &mut Vec<(u64, Option<u64>)>,
) {
    let half = |i: usize| -> Option<u32> {
        let b = code.get(i..)?.first_chunk::<2>()?;
        Some(u32::from(u16::from_le_bytes(*b)))
    };
    let word = |i: usize| -> Option<u32> {
        let b = code.get(i..)?.first_chunk::<4>()?;
        Some(u32::from_le_bytes(*b))
    };
    let start = usize::from(svma % 2 == 1);
    for i in (start..code.len()).step_by(2) {
        let at = svma.wrapping_add(i as u64);
        let Some(hw1) = half(i) else { break };
        // 16-bit `blx <Rm>`: 0100 0111 1 Rm 000.
        if hw1 & 0xff87 == 0x4780 {
            out.push((at.wrapping_add(2) | 1, None));
        }
        if let Some(hw2) = half(i.wrapping_add(2)) {
            if let Some(target) = thumb_call_target(hw1, hw2, at) {
                if is_code(target) {
                    out.push((at.wrapping_add(4) | 1, Some(target)));
                }
            }
        }
        if at.is_multiple_of(4) {
            if let Some(w) = word(i) {
                match a32_call(w, at) {
                    Some(A32Call::Label(target)) if is_code(target) => {
                        out.push((at.wrapping_add(4), Some(target)));
                    }
                    Some(A32Call::Register) => out.push((at.wrapping_add(4), None)),
                    _ => {}
                }
            }
        }
    }
}

/// Appends to `out` the functions that Thumb code reaches, decoded one instruction after
/// another over `sweep` (byte offsets into `code`, whose first byte is at file address `svma`)
/// as the processor runs it:
/// - the target of every `bl`, a Thumb function (bit 0 set). Not `blx <label>`'s, to A32 code:
///   compilers call A32 code through the linker's veneers, and A32 code read as Thumb decodes
///   as `blx` (its instructions' high halfwords, `0xe...`, are `blx`'s second halfword);
/// - every address made relative to the PC, as position-independent code passes a callback or
///   an ifunc's resolver returns its choice: `ldr Rd, [pc, #imm]` of a literal, then `add Rd,
///   pc` within [`LITERAL_LIFE`] instructions. Bit 0 set is a Thumb function; clear, an A32
///   one or data, which the caller tells apart by where it points.
///
/// Unlike [`return_sites`], which reads at every alignment, the second halfword of a 32-bit
/// instruction is never read as the first of another, so an instruction is reported only
/// where the instruction stream from the sweep's start has one, not as an artifact of reading
/// code at the wrong alignment. Literals are read from all of `code`: a function's pool may lie
/// past the sweep's end.
pub fn thumb_references(
    code: &[u8],
    svma: u64,
    sweep: core::ops::Range<usize>,
    out: &mut Vec<u64>,
) {
    let half = |i: usize| -> Option<u32> {
        let b = code.get(i..)?.first_chunk::<2>()?;
        Some(u32::from(u16::from_le_bytes(*b)))
    };
    let word_at = |a: u64| -> Option<u32> {
        let i = usize::try_from(a.checked_sub(svma)?).ok()?;
        Some(u32::from_le_bytes(*code.get(i..)?.first_chunk::<4>()?))
    };
    // The literal each register was last loaded with from the pool, and when (instructions
    // decoded so far): a later write to the register is not tracked, so a literal is trusted
    // for a few instructions only.
    let mut literals: [Option<(u32, usize)>; 16] = [None; 16];
    let mut decoded = 0usize;
    let mut i = sweep.start;
    while i < sweep.end {
        let Some(hw1) = half(i) else { break };
        let at = svma.wrapping_add(i as u64);
        // The PC as a literal load reads it: the instruction's address + 4, word-aligned.
        let pool_base = at.wrapping_add(4) & !3;
        decoded = decoded.wrapping_add(1);
        // A 32-bit instruction's first halfword starts 0b11101, 0b11110 or 0b11111.
        if hw1 >> 11 < 0b11101 {
            if hw1 & 0xf800 == 0x4800 {
                // `ldr Rd, [pc, #imm8 * 4]`.
                let rd = ((hw1 >> 8) & 7) as usize;
                let value = word_at(pool_base.wrapping_add(u64::from(hw1 & 0xff) * 4));
                if let Some(slot) = literals.get_mut(rd) {
                    *slot = value.map(|v| (v, decoded));
                }
            } else if hw1 & 0xff78 == 0x4478 {
                // `add Rdn, pc`: Rdn is DN:Rdn.
                let rd = (((hw1 >> 4) & 8) | (hw1 & 7)) as usize;
                if let Some(Some((v, when))) = literals.get(rd) {
                    let value = u64::from(v.wrapping_add(at as u32).wrapping_add(4));
                    if decoded.wrapping_sub(*when) <= LITERAL_LIFE {
                        out.push(value);
                    }
                }
                if let Some(slot) = literals.get_mut(rd) {
                    *slot = None;
                }
            }
            i = i.wrapping_add(2);
            continue;
        }
        let Some(hw2) = half(i.wrapping_add(2)) else {
            break;
        };
        if let Some(target) = thumb_call_target(hw1, hw2, at) {
            // `bl` (bit 12 set) stays in Thumb state.
            if hw2 & 0x1000 != 0 {
                out.push(target | 1);
            }
            // A call does not keep the argument and scratch registers.
            for slot in literals.iter_mut().take(4) {
                *slot = None;
            }
        } else if hw1 & 0xff7f == 0xf85f {
            // `ldr.w Rt, [pc, #+-imm12]` (U, bit 7 of the first halfword, adds).
            let rt = (hw2 >> 12) as usize;
            let offset = u64::from(hw2 & 0xfff);
            let address = if hw1 & 0x80 != 0 {
                pool_base.wrapping_add(offset)
            } else {
                pool_base.wrapping_sub(offset)
            };
            let value = word_at(address);
            if let Some(slot) = literals.get_mut(rt) {
                *slot = value.map(|v| (v, decoded));
            }
        }
        i = i.wrapping_add(4);
    }
}

/// How many instructions after its load a literal is taken to still be in its register by
/// [`thumb_references`]: compilers put the `add Rd, pc` close to the load.
pub const LITERAL_LIFE: usize = 8;

/// The target of a Thumb-2 `bl` or `blx <label>` made of halfwords `hw1`, `hw2` at `at`.
fn thumb_call_target(hw1: u32, hw2: u32, at: u64) -> Option<u64> {
    if hw1 & 0xf800 != 0xf000 || hw2 & 0xc000 != 0xc000 {
        return None;
    }
    let s = (hw1 >> 10) & 1;
    let i1 = !((hw2 >> 13) ^ s) & 1;
    let i2 = !((hw2 >> 11) ^ s) & 1;
    let imm = (s << 24) | (i1 << 23) | (i2 << 22) | ((hw1 & 0x3ff) << 12) | ((hw2 & 0x7ff) << 1);
    // Sign-extend the 25-bit offset.
    let offset = i64::from(((imm << 7) as i32) >> 7);
    let pc = at.wrapping_add(4);
    if hw2 & 0x1000 != 0 {
        // `bl`: T1 encoding, to Thumb code.
        Some(pc.wrapping_add_signed(offset))
    } else if hw2 & 1 == 0 {
        // `blx <label>`: T2 encoding, to A32 code at a word-aligned address.
        Some((pc & !3).wrapping_add_signed(offset))
    } else {
        None
    }
}

/// An A32 call instruction.
enum A32Call {
    /// `bl` or `blx` to this address.
    Label(u64),
    /// `blx <Rm>`.
    Register,
}

/// The A32 call that word `w` at `at` is, if it is one.
fn a32_call(w: u32, at: u64) -> Option<A32Call> {
    let cond = w >> 28;
    // Offset in words, sign-extended from 24 bits, then in bytes.
    let offset = i64::from(((w << 8) as i32) >> 6);
    let pc = at.wrapping_add(8);
    if cond != 0xf && w & 0x0f00_0000 == 0x0b00_0000 {
        Some(A32Call::Label(pc.wrapping_add_signed(offset)))
    } else if cond == 0xf && w & 0x0e00_0000 == 0x0a00_0000 {
        // `blx <label>`: the H bit adds a halfword (the target is Thumb code).
        let h = u64::from((w >> 23) & 2);
        Some(A32Call::Label(
            pc.wrapping_add_signed(offset).wrapping_add(h),
        ))
    } else if cond != 0xf && w & 0x0fff_fff0 == 0x012f_ff30 {
        Some(A32Call::Register)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(code: &[u8], svma: u64) -> Vec<u64> {
        let mut out = Vec::new();
        return_sites(code, svma, &|t| (0x1000..0x3000).contains(&t), &mut out);
        out.into_iter().map(|(site, _)| site).collect()
    }

    /// Encodings as GNU as writes them (`arm-linux-gnueabihf-objdump -d`).
    #[test]
    fn calls_of_both_instruction_sets() {
        // Thumb at 0x1000: `bl 0x1100` = f000 f87e; `blx r3` = 4798; `blx 0x1200` = f000 e8fc
        // (from 0x1006: Align(0x100a, 4) = 0x1008, + 0x1f8).
        let thumb: Vec<u8> = [0xf000u16, 0xf87e, 0x4798, 0xf000, 0xe8fc]
            .iter()
            .flat_map(|h| h.to_le_bytes())
            .collect();
        assert_eq!(sites(&thumb, 0x1000), [0x1005, 0x1007, 0x100b]);
        let mut out = Vec::new();
        return_sites(&thumb, 0x1000, &|_| true, &mut out);
        assert_eq!(
            out,
            [
                (0x1005, Some(0x1100)),
                (0x1007, None),
                (0x100b, Some(0x1200))
            ]
        );
        // A32 at 0x2000: `bl 0x1000` = ebfffbfe; `blx r2` = e12fff32; `blxne r1` = 112fff31;
        // `mov r0, r1` = e1a00001 (no call); `blx 0x210c` (Thumb) = fa00003d.
        let a32: Vec<u8> = [
            0xebff_fbfeu32,
            0xe12f_ff32,
            0x112f_ff31,
            0xe1a0_0001,
            0xfa00_003d,
        ]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
        let found = sites(&a32, 0x2000);
        for site in [0x2004, 0x2008, 0x200c, 0x2014] {
            assert!(found.contains(&site), "{site:#x} not in {found:x?}");
        }
        assert!(!found.contains(&0x2010), "{found:x?}");
        // A call out of the accepted code is not a site.
        let far: Vec<u8> = 0xeb00_1000u32.to_le_bytes().to_vec();
        assert_eq!(sites(&far, 0x2000), Vec::<u64>::new());
    }

    /// The sweep reads instructions where the processor does: a `bl` hidden across two
    /// instructions (the second half of a 32-bit one and the first half of the next) is not a
    /// call, which reading at every alignment takes it for.
    #[test]
    fn the_thumb_sweep_reads_only_real_instructions() {
        // At 0x1000: `bl 0x1100` = f000 f87e; `blx 0x1200` from 0x1004 (Align(0x1008, 4) +
        // 0x1f8) = f000 e8fc, not reported; `movs r0, #0` = 2000.
        let code: Vec<u8> = [0xf000u16, 0xf87e, 0xf000, 0xe8fc, 0x2000]
            .iter()
            .flat_map(|h| h.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        thumb_references(&code, 0x1000, 0..code.len(), &mut out);
        assert_eq!(out, [0x1101]);
        // `orr.w ip, ip, #0x700` = f44c 6ce0 then `bl` = f000 f800: from 0x1000, halfword
        // 0x1002 (6ce0) is the orr's second half, so only the `bl` at 0x1004 is a call. Read
        // from 0x1002, `6ce0` is a 16-bit load and the `bl` is still found, at the same place.
        let code: Vec<u8> = [0xf44cu16, 0x6ce0, 0xf000, 0xf800]
            .iter()
            .flat_map(|h| h.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        thumb_references(&code, 0x1000, 0..code.len(), &mut out);
        assert_eq!(out, [0x1009]);
        // A `bl` whose first halfword is the second half of a 32-bit instruction: `f7ff` after
        // `e92d` (`stmdb sp!, {...}`, whose register list it is) is not a call from 0x1000,
        // though `f7ff fffe` read alone is one.
        let code: Vec<u8> = [0xe92du16, 0xf7ff, 0xfffe, 0x2000]
            .iter()
            .flat_map(|h| h.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        thumb_references(&code, 0x1000, 0..code.len(), &mut out);
        assert_eq!(out, Vec::<u64>::new());
        let mut every = Vec::new();
        return_sites(&code, 0x1000, &|_| true, &mut every);
        assert!(!every.is_empty(), "reading at every alignment finds it");
    }

    /// An address made relative to the PC, as GCC passes a callback: `ldr r0, [pc, #4]` at
    /// 0x1000 loads the word at Align(0x1004, 4) + 4 = 0x1008, and `add r0, pc` at 0x1004 adds
    /// 0x1008. Not once the load is more than `LITERAL_LIFE` (8) instructions back.
    #[test]
    fn pc_relative_addresses_are_references() {
        // `ldr r0, [pc, #imm]`, `nops` nops, `add r0, pc`, nops to the word at 0x1018 (0x1008
        // with no nop), which holds 0x2001 less the `add`'s PC: the references found.
        let found = |nops: usize| -> Vec<u64> {
            let pool: u32 = if nops == 1 { 0x1008 } else { 0x1018 };
            let mut halves = vec![0x4800 | ((pool - 0x1004) / 4) as u16];
            halves.extend(std::iter::repeat_n(0xbf00, nops));
            let add_pc = 0x1000 + 2 * halves.len() as u32 + 4;
            halves.push(0x4478);
            while 0x1000 + 2 * (halves.len() as u32) < pool {
                halves.push(0xbf00);
            }
            let mut code: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
            code.extend((0x2001 - add_pc).to_le_bytes());
            let mut out = Vec::new();
            // The sweep stops before the pool; the literal is read from all of `code`.
            thumb_references(&code, 0x1000, 0..(pool - 0x1000) as usize, &mut out);
            out
        };
        assert_eq!(found(1), [0x2001]);
        assert_eq!(LITERAL_LIFE, 8);
        // The `add` 8 instructions after the load: trusted; 9: not.
        assert_eq!(found(7), [0x2001]);
        assert_eq!(found(8), Vec::<u64>::new());
    }

    #[test]
    fn targets_decode_as_the_architecture_manual_says() {
        // `bl` backwards by 4 bytes from 0x1000: PC 0x1004 - 8 = 0xffc.
        assert_eq!(thumb_call_target(0xf7ff, 0xfffc, 0x1000), Some(0xffc));
        // Thumb `blx` at 0x1002: Align(0x1006, 4) + 4.
        assert_eq!(thumb_call_target(0xf000, 0xe802, 0x1002), Some(0x1008));
        assert!(a32_call(0xe1a0_0001, 0).is_none());
        assert!(matches!(
            a32_call(0xebff_fffe, 0x1000),
            Some(A32Call::Label(0x1000))
        ));
    }
}
