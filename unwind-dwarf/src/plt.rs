//! Rules for PLT stubs that no FDE describes.
//!
//! GNU ld writes CFI for the x86_64 `.plt` (the PLT CFA expression); lld, the default linker of
//! Rust on x86_64 Linux, writes none, and neither writes any for the 32-bit ARM `.plt`. A sample
//! whose PC is in a PLT stub then has no rule, and the frame-pointer fallback would skip the
//! caller. The stubs' behaviour is fixed by each psABI, so the rules are synthesized from the
//! section headers where no FDE covers them. Each architecture names the PLT sections it knows
//! and their [`PltKind`] ([`crate::DwarfArch::PLT_SECTIONS`]) and gives their rows
//! ([`crate::DwarfArch::plt_rows`]):
//! - x86_64 `.plt` (16-byte lazy entries): `PLT0` pushes once more than the others:
//!   `CFA = rsp + 16` for its first 6 bytes, `rsp + 24` after; entry `n` pushes its index at
//!   offset 6 (taking effect at 11): `CFA = rsp + 8 + ((rip & 15) >= 11) * 8`, the expression
//!   GNU ld emits. `.plt.sec`, `.plt.got` (only `endbr64` and an indirect `jmp`):
//!   `CFA = rsp + 8`. In every case the return address is at `CFA - 8` and `rbp` is untouched.
//! - 32-bit ARM `.plt`: the entries use only `ip` and leave the return address in LR; `PLT0`
//!   pushes LR with its first instruction, so the return address is at `[sp]` from its second
//!   until it jumps to the resolver with its fourth.

use object::{Object, ObjectSection};

use crate::arch::Architecture;

/// A PLT section of a module, by file address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PltSection {
    /// File address of the section.
    pub svma: u64,
    /// Size in bytes.
    pub size: u64,
    /// How its stubs use the stack.
    pub kind: PltKind,
}

/// The two shapes of PLT sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PltKind {
    /// `.plt`: the lazy-binding header `PLT0` (which jumps to the resolver), then the entries
    /// (on x86_64, 16-byte entries that push a relocation index before jumping to `PLT0`).
    Lazy,
    /// (x86_64) `.plt.sec`, `.plt.got`: entries that only jump.
    Jump,
}

/// The PLT sections named in an ELF file's section headers: those its architecture knows
/// ([`crate::DwarfArch::PLT_SECTIONS`]; none for a file of another architecture).
pub fn plt_sections(elf: &object::File<'_>) -> Vec<PltSection> {
    let known = Architecture::of_elf(elf).map_or(&[][..], Architecture::plt_sections);
    elf.sections()
        .filter_map(|s| {
            let name = s.name().ok()?;
            let &(_, kind) = known.iter().find(|(n, _)| *n == name)?;
            (s.size() > 0).then_some(PltSection {
                svma: s.address(),
                size: s.size(),
                kind,
            })
        })
        .collect()
}

/// Reads the PLT sections of the ELF file at `path` (section headers only).
pub fn plt_sections_of_file(path: &std::path::Path) -> Result<Vec<PltSection>, crate::DwarfError> {
    crate::with_mapped_file(path, |data| {
        let elf = object::File::parse(data).map_err(crate::DwarfError::Elf)?;
        Ok(plt_sections(&elf))
    })?
}

/// `ranges` sorted, with those that overlap or touch merged into one.
pub(crate) fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// `[start, end)` minus the sorted, possibly overlapping `covered` ranges.
pub(crate) fn uncovered(start: u64, end: u64, covered: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = start;
    let first = covered.partition_point(|r| r.1 <= start);
    for &(s, e) in covered.get(first..).unwrap_or(&[]) {
        if s >= end {
            break;
        }
        if s > at {
            out.push((at, s));
        }
        at = at.max(e);
    }
    if at < end {
        out.push((at, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthesized_plt_rules_unwind_every_stub_offset() {
        use unwind_core::x86_64::Regs;
        use unwind_core::{Arch, X86_64};
        use unwind_core::{Found, RuleTableBuilder, StackImage};
        let plt = [
            PltSection {
                svma: 0x1000,
                size: 0x30,
                kind: PltKind::Lazy,
            },
            PltSection {
                svma: 0x2000,
                size: 0x10,
                kind: PltKind::Jump,
            },
        ];
        let (rules, stats) = crate::rules_from_sections::<crate::X86_64>(
            &crate::CfiSections {
                plt: &plt,
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(stats.cfi.plt_rows, 4);
        let mut b = RuleTableBuilder::new(core::num::NonZeroU32::new(1).unwrap());
        b.add(0, u64::MAX, 0, "m".into(), std::sync::Arc::new(rules));
        let table = b.build().unwrap();
        // A stack whose word at address `a` is `a + 1` (so the return address found tells
        // which slot was read).
        let base = 0x8000u64;
        let bytes: Vec<u8> = (0..64u64)
            .flat_map(|i| (base + i * 8 + 1).to_le_bytes())
            .collect();
        let mem = StackImage::new(base, &bytes);
        let sp = base + 0x40;
        // (pc, extra words pushed by the stub before this instruction)
        let cases = [
            (0x1000, 1), // PLT0: push GOT+8 (the entry's push is already on the stack)
            (0x1006, 2), // PLT0: jmp *GOT+16
            (0x1010, 0), // entry 1: jmp *GOT
            (0x1016, 0), // entry 1: push $index
            (0x101b, 1), // entry 1: jmp PLT0
            (0x1020, 0), // entry 2
            (0x2008, 0), // .plt.sec
        ];
        for (pc, pushed) in cases {
            let Found { module, rule } = table
                .lookup(pc)
                .unwrap_or_else(|| panic!("no rule at {pc:#x}"));
            let regs = Regs { pc, sp, fp: 7 };
            let step = X86_64::step_rule(&table, module, &rule, &regs, true, &mem).unwrap();
            let ra_slot = sp + 8 * pushed;
            assert_eq!(step.caller.pc, ra_slot + 1, "pc {pc:#x}");
            assert_eq!(step.caller.sp, ra_slot + 8, "pc {pc:#x}");
            assert_eq!(step.caller.fp, 7);
        }
        assert!(table.lookup(0x1030).is_none());
    }

    #[test]
    fn uncovered_ranges() {
        assert_eq!(uncovered(0, 100, &[]), [(0, 100)]);
        assert_eq!(uncovered(0, 100, &[(0, 100)]), []);
        assert_eq!(
            uncovered(0, 100, &[(10, 20), (15, 30), (90, 200)]),
            [(0, 10), (30, 90)]
        );
        assert_eq!(uncovered(50, 60, &[(0, 10), (70, 80)]), [(50, 60)]);
    }
}
