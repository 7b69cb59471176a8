//! Return sites for stack scanning: the addresses just after a module's call instructions
//! ([`unwind_core::ReturnSites`]), found in its executable segments when its rules are built.
//!
//! Each architecture recognizes its calls ([`DwarfArch::return_sites`]): x86_64 and AArch64
//! here, 32-bit ARM in `unwind-arm-prologue` ([`unwind_arm_prologue::calls`]). Neither decodes the code from
//! function starts (variable-length x86 code cannot be decoded backwards, and a stripped ARM
//! library does not say which instruction set its code is in): both try every position, and a
//! call with an immediate target counts only if the target is in the module's code.

use object::{Object, ObjectSegment, SegmentFlags};
use unwind_core::ReturnSites;

use crate::arch::DwarfArch;
use crate::DwarfError;

/// The code a module's return sites are found in, and what tells its functions apart.
#[derive(Clone, Debug, Default)]
pub struct CallSiteSources<'a> {
    /// The executable segments: file address and bytes.
    pub segments: Vec<(u64, &'a [u8])>,
    /// The PLT sections, `[start, end)`: a call into one leaves the module, so its callee is
    /// not known.
    pub plt: Vec<(u64, u64)>,
    /// Function starts known from symbols (`.symtab`, `.dynsym`); the targets of direct calls
    /// within the module are added to them.
    pub function_starts: Vec<u64>,
}

impl<'a> CallSiteSources<'a> {
    /// Those of the ELF file `elf`.
    pub fn of_elf(elf: &object::File<'a>) -> Self {
        let segments = executable_segments(elf);
        let plt = crate::plt::plt_sections(elf)
            .iter()
            .map(|p| (p.svma, p.svma.saturating_add(p.size)))
            .collect();
        let function_starts = crate::elf::function_starts(elf);
        CallSiteSources {
            segments,
            plt,
            function_starts,
        }
    }
}

/// The executable `PT_LOAD` segments of `elf`: file address and bytes.
pub fn executable_segments<'a>(elf: &object::File<'a>) -> Vec<(u64, &'a [u8])> {
    let exec = |s: &object::Segment<'_, '_>| matches!(s.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.contains(object::elf::PF_X));
    elf.segments()
        .filter(exec)
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .collect()
}

/// The return sites of a module's code ([`CallSiteSources`]), with immediate call targets
/// checked against its executable segments. A call's callee is known when it is a direct call
/// to the module's own code (not to its PLT).
pub fn return_sites<A: DwarfArch>(code: &CallSiteSources<'_>) -> Result<ReturnSites, DwarfError> {
    let segments = &code.segments;
    let is_code = |target: u64| crate::elf::in_code(segments, target);
    let mut sites = Vec::new();
    for &(svma, bytes) in segments {
        A::return_sites(bytes, svma, &is_code, &mut sites);
    }
    let in_plt = |t: u64| code.plt.iter().any(|&(lo, hi)| (lo..hi).contains(&t));
    let mut starts = code.function_starts.clone();
    for (_, callee) in &mut sites {
        // ARM: a `blx` target is A32 code, a `bl` target Thumb code; starts have bit 0 clear.
        *callee = callee.map(|c| c & !1).filter(|&c| !in_plt(c));
        starts.extend(*callee);
    }
    let base = segments.iter().map(|&(svma, _)| svma).min().unwrap_or(0);
    ReturnSites::new(base, sites, starts).map_err(DwarfError::Table)
}

/// The return sites of the ELF file in `data` (its executable `PT_LOAD` segments).
pub fn return_sites_from_elf<A: DwarfArch>(data: &[u8]) -> Result<ReturnSites, DwarfError> {
    let elf = object::File::parse(data).map_err(DwarfError::Elf)?;
    return_sites::<A>(&CallSiteSources::of_elf(&elf))
}

/// AArch64 ([`DwarfArch::return_sites`]): the end of every `bl` whose target `is_code` accepts,
/// with that target, and of every register call (`blr`, and the authenticating `blraa`,
/// `blrab`, `blraaz`, `blrabz`). Instructions are 4 bytes, 4-aligned.
pub(crate) fn aarch64(
    code: &[u8],
    svma: u64,
    is_code: &dyn Fn(u64) -> bool,
    out: &mut Vec<(u64, Option<u64>)>,
) {
    // Positions 4-aligned in the address space (a segment's start may not be).
    let skip = usize::try_from(svma.wrapping_neg() & 3).unwrap_or(0);
    let Some(aligned) = code.get(skip..) else {
        return;
    };
    let first = svma.wrapping_add(skip as u64);
    for (i, word) in aligned.chunks_exact(4).enumerate() {
        let Some(&bytes) = word.first_chunk::<4>() else {
            continue;
        };
        let insn = u32::from_le_bytes(bytes);
        let at = first.wrapping_add((i as u64).wrapping_mul(4));
        let end = at.wrapping_add(4);
        if insn & 0xfc00_0000 == 0x9400_0000 {
            // `bl imm26`: a signed word offset.
            let imm = i64::from(((insn << 6) as i32) >> 6).wrapping_mul(4);
            let target = at.wrapping_add_signed(imm);
            if is_code(target) {
                out.push((end, Some(target)));
            }
        } else if insn & 0xffff_fc1f == 0xd63f_0000
            || insn & 0xffff_f81f == 0xd63f_081f
            || insn & 0xffff_f800 == 0xd73f_0800
        {
            out.push((end, None));
        }
    }
}

/// x86_64 ([`DwarfArch::return_sites`]): the end of every `call rel32` (`e8`) whose target
/// `is_code` accepts, with that target, and of every `call r/m64` (`ff /2`, each ModRM form
/// with its length).
pub(crate) fn x86_64(
    code: &[u8],
    svma: u64,
    is_code: &dyn Fn(u64) -> bool,
    out: &mut Vec<(u64, Option<u64>)>,
) {
    for (i, &b) in code.iter().enumerate() {
        let at = svma.wrapping_add(i as u64);
        // The bytes after the opcode (`i` is an index of `code`: `i + 1` does not overflow).
        let Some(rest) = code.get(i.wrapping_add(1)..) else {
            continue;
        };
        match b {
            0xe8 => {
                if let Some(rel) = rest.first_chunk::<4>() {
                    let end = at.wrapping_add(5);
                    let target = end.wrapping_add_signed(i64::from(i32::from_le_bytes(*rel)));
                    if is_code(target) {
                        out.push((end, Some(target)));
                    }
                }
            }
            0xff => {
                let Some(&modrm) = rest.first() else {
                    continue;
                };
                if (modrm >> 3) & 7 != 2 {
                    continue;
                }
                let len = call_rm_length(modrm, rest.get(1).copied());
                // The instruction must fit: opcode and `len - 1` bytes after it.
                if rest.len() >= len.saturating_sub(1) {
                    out.push((at.wrapping_add(len as u64), None));
                }
            }
            _ => {}
        }
    }
}

/// The length of `ff /2` with this ModRM byte (and the SIB byte after it, if any): opcode,
/// ModRM, SIB and displacement (2 to 7 bytes).
fn call_rm_length(modrm: u8, sib: Option<u8>) -> usize {
    let (mode, rm) = (modrm >> 6, modrm & 7);
    // SIB with base 101 and mode 00: a 32-bit displacement instead of a base register.
    let sib_disp32 = rm == 4 && mode == 0 && sib.is_some_and(|s| s & 7 == 5);
    let sib_len = if rm == 4 && mode != 3 { 1 } else { 0 };
    let disp = match mode {
        0 if rm == 5 || sib_disp32 => 4,
        1 => 1,
        2 => 4,
        _ => 0,
    };
    2usize.saturating_add(sib_len).saturating_add(disp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(code: &[u8]) -> Vec<u64> {
        let mut out = Vec::new();
        x86_64(code, 0x1000, &|t| (0x1000..0x2000).contains(&t), &mut out);
        out.into_iter().map(|(site, _)| site).collect()
    }

    /// GNU as's encodings (`-march=armv8.3-a`), at 0x1000: every call form is found, with a
    /// `bl` into the code given its target and one outside it left out; branches that do not
    /// link are not calls.
    #[test]
    fn aarch64_calls() {
        let words: [u32; 10] = [
            0x9400_0001, // bl 0x1004
            0xd63f_0020, // blr x1
            0xd63f_087f, // blraaz x3
            0xd73f_0c45, // blrab x2, x5
            0xd73f_08ff, // blraa x7, sp
            0xd503_201f, // nop
            0xd65f_03c0, // ret
            0xd61f_0060, // br x3
            0x17ff_fff9, // b 0x1004
            0x97ff_f800, // bl (0x2000 before it: outside the code)
        ];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = Vec::new();
        aarch64(&code, 0x1000, &|t| (0x1000..0x2000).contains(&t), &mut out);
        assert_eq!(
            out,
            [
                (0x1004, Some(0x1004)),
                (0x1008, None),
                (0x100c, None),
                (0x1010, None),
                (0x1014, None),
            ]
        );
        // A segment starting off a 4-byte boundary: positions stay aligned to the addresses.
        let mut out = Vec::new();
        aarch64(&[0, 0, 0x20, 0x00, 0x3f, 0xd6], 0xffe, &|_| true, &mut out);
        assert_eq!(out, [(0x1004, None)]);
    }

    /// Each call form as GNU as assembles it, followed by `nop`s.
    #[test]
    fn every_call_form_ends_where_the_instruction_does() {
        for (bytes, len) in [
            (&[0xe8, 0x10, 0x00, 0x00, 0x00][..], 5), // call 0x1015
            (&[0xff, 0xd0], 2),                       // call *%rax
            (&[0x41, 0xff, 0xd3], 3),                 // call *%r11
            (&[0xff, 0x10], 2),                       // call *(%rax)
            (&[0xff, 0x14, 0x24], 3),                 // call *(%rsp)
            (&[0xff, 0x15, 0, 0, 0, 0], 6),           // call *0x0(%rip)
            (&[0xff, 0x50, 0x08], 3),                 // call *0x8(%rax)
            (&[0xff, 0x54, 0x24, 0x08], 4),           // call *0x8(%rsp)
            (&[0xff, 0x90, 0, 1, 0, 0], 6),           // call *0x100(%rax)
            (&[0xff, 0x94, 0xc8, 0, 1, 0, 0], 7),     // call *0x100(%rax,%rcx,8)
            (&[0xff, 0x14, 0xc5, 0, 1, 0, 0], 7),     // call *0x100(,%rax,8)
        ] {
            let mut code = bytes.to_vec();
            code.extend([0x90; 4]);
            assert!(
                sites(&code).contains(&(0x1000 + len)),
                "{bytes:x?}: {:x?}",
                sites(&code)
            );
        }
        // `jmp *%rax` (ff /4), `inc %eax` (ff /0) and a call out of the module are not calls.
        assert_eq!(sites(&[0xff, 0xe0, 0x90]), Vec::<u64>::new());
        assert_eq!(sites(&[0xff, 0xc0, 0x90]), Vec::<u64>::new());
        assert_eq!(sites(&[0xe8, 0, 0, 0, 0x10, 0x90]), Vec::<u64>::new());
    }
}
