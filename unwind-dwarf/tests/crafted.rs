//! Crafted ELF files: no panic on any input, and what is valid in a file is kept when another
//! of its unwind sections is malformed.
//!
//! - An ELF64 file with `e_machine = EM_ARM` and a `.ARM.exidx` at a huge address (the prel31
//!   arithmetic once overflowed there).
//! - Arbitrary bytes, and arbitrary section tables, as ARM and x86_64 ELF files.
//! - A file whose `.ARM.extab` (or `.debug_frame`) section header points outside the file
//!   keeps its other sections' rows and names the unreadable section.
//! - The table builder with arbitrary rows (any `u64` bounds).

use std::collections::BTreeSet;

use object::elf::{
    FileClass, Machine, SectionFlags, SectionType, ELFCLASS32, ELFCLASS64, ELFDATA2LSB, ELFMAG,
    ELFOSABI_NONE, EM_ARM, EM_X86_64, ET_DYN, EV_CURRENT, SHF_ALLOC, SHF_EXECINSTR, SHT_ARM_EXIDX,
    SHT_NULL, SHT_PROGBITS, SHT_STRTAB,
};
use proptest::prelude::*;
use unwind_arm_exidx::ExidxError;
use unwind_core::arm::Source;
use unwind_core::table::{ModuleRulesBuilder, TableError};
use unwind_dwarf::{
    rules_from_elf, rules_from_sections, Arm, CfiSections, DwarfError, ExidxSections,
    UnreadableSection, X86_64,
};

/// One section of a crafted file.
#[derive(Clone, Debug)]
struct Sec {
    name: String,
    kind: SectionType,
    flags: SectionFlags,
    addr: u64,
    data: Vec<u8>,
    /// Replaces the section header's file offset (to point it outside the file).
    offset: Option<u64>,
    /// Replaces the section header's size.
    size: Option<u64>,
}

fn sec(name: &str, kind: SectionType, addr: u64, data: Vec<u8>) -> Sec {
    let flags = match name {
        ".text" => SHF_ALLOC | SHF_EXECINSTR,
        _ => SHF_ALLOC,
    };
    Sec {
        name: name.into(),
        kind,
        flags,
        addr,
        data,
        offset: None,
        size: None,
    }
}

/// A little-endian ELF file (ELF64 if `class64`) with no program headers and the given
/// sections (after the null section; `.shstrtab` last).
fn elf(class64: bool, machine: Machine, sections: &[Sec]) -> Vec<u8> {
    let mut shstrtab = vec![0u8];
    let mut names = Vec::new();
    for s in sections
        .iter()
        .map(|s| s.name.as_str())
        .chain([".shstrtab"])
    {
        names.push(shstrtab.len() as u32);
        shstrtab.extend(s.as_bytes());
        shstrtab.push(0);
    }
    let ehsize = if class64 { 64 } else { 52 };
    let mut out = vec![0u8; ehsize];
    // Section contents, each 8-aligned.
    let mut placed = Vec::new();
    for data in sections.iter().map(|s| &s.data[..]).chain([&shstrtab[..]]) {
        while out.len() % 8 != 0 {
            out.push(0);
        }
        placed.push((out.len() as u64, data.len() as u64));
        out.extend(data);
    }
    while out.len() % 8 != 0 {
        out.push(0);
    }
    let shoff = out.len() as u64;
    let shnum = sections.len() + 2;
    let mut header = |name: u32, kind: u32, flags: u64, addr: u64, off: u64, size: u64| {
        let mut h = Vec::new();
        h.extend(name.to_le_bytes());
        h.extend(kind.to_le_bytes());
        if class64 {
            h.extend(flags.to_le_bytes());
            h.extend(addr.to_le_bytes());
            h.extend(off.to_le_bytes());
            h.extend(size.to_le_bytes());
            h.extend([0u8; 8]); // link, info
            h.extend(1u64.to_le_bytes()); // addralign
            h.extend(0u64.to_le_bytes()); // entsize
        } else {
            for v in [flags, addr, off, size] {
                h.extend((v as u32).to_le_bytes());
            }
            h.extend([0u8; 8]);
            h.extend(1u32.to_le_bytes());
            h.extend(0u32.to_le_bytes());
        }
        out.extend(h);
    };
    header(0, SHT_NULL.0, 0, 0, 0, 0);
    for (i, s) in sections.iter().enumerate() {
        let (off, size) = placed[i];
        header(
            names[i],
            s.kind.0,
            s.flags.0,
            s.addr,
            s.offset.unwrap_or(off),
            s.size.unwrap_or(size),
        );
    }
    let (off, size) = placed[sections.len()];
    header(names[sections.len()], SHT_STRTAB.0, 0, 0, off, size);
    // The ELF header.
    let mut h = Vec::new();
    let class: FileClass = if class64 { ELFCLASS64 } else { ELFCLASS32 };
    h.extend(ELFMAG);
    h.extend([class.0, ELFDATA2LSB.0, EV_CURRENT.0, ELFOSABI_NONE.0]);
    h.extend([0u8; 8]);
    h.extend(ET_DYN.0.to_le_bytes());
    h.extend(machine.0.to_le_bytes());
    h.extend(u32::from(EV_CURRENT.0).to_le_bytes());
    if class64 {
        h.extend(0u64.to_le_bytes()); // entry
        h.extend(0u64.to_le_bytes()); // phoff
        h.extend(shoff.to_le_bytes());
    } else {
        h.extend(0u32.to_le_bytes());
        h.extend(0u32.to_le_bytes());
        h.extend((shoff as u32).to_le_bytes());
    }
    h.extend(0u32.to_le_bytes()); // flags
    h.extend((ehsize as u16).to_le_bytes());
    h.extend((if class64 { 56u16 } else { 32 }).to_le_bytes()); // phentsize
    h.extend(0u16.to_le_bytes()); // phnum
    h.extend((if class64 { 64u16 } else { 40 }).to_le_bytes()); // shentsize
    h.extend((shnum as u16).to_le_bytes());
    h.extend(((shnum - 1) as u16).to_le_bytes()); // shstrndx
    assert_eq!(h.len(), ehsize);
    out[..ehsize].copy_from_slice(&h);
    out
}

/// An `.ARM.exidx` at `svma` with one entry per `(prel31 word, second word)`.
fn exidx_words(entries: &[(u32, u32)]) -> Vec<u8> {
    entries
        .iter()
        .flat_map(|&(a, b)| a.to_le_bytes().into_iter().chain(b.to_le_bytes()))
        .collect()
}

/// The prel31 word at `place` that points at `target` (32-bit arithmetic).
fn p31(target: u64, place: u64) -> u32 {
    (target.wrapping_sub(place) as u32) & 0x7fff_ffff
}

/// A `.debug_frame` (32-bit addresses) with GCC's ARM CIE and one FDE per `(start, len)`,
/// each `def_cfa_offset 8; r14 at cfa-4` after its first instruction.
fn arm_debug_frame(fdes: &[(u32, u32)]) -> Vec<u8> {
    let mut cie = Vec::new();
    cie.extend(0xffff_ffffu32.to_le_bytes());
    cie.extend([1, 0, 2, 0x7c, 14, 0x0c, 13, 0]);
    let mut out = Vec::new();
    out.extend((cie.len() as u32).to_le_bytes());
    out.extend(&cie);
    for &(start, len) in fdes {
        let mut fde = Vec::new();
        fde.extend(0u32.to_le_bytes());
        fde.extend(start.to_le_bytes());
        fde.extend(len.to_le_bytes());
        fde.extend([0x41, 0x0e, 8, 0x8e, 1, 0, 0, 0]);
        out.extend((fde.len() as u32).to_le_bytes());
        out.extend(&fde);
    }
    out
}

/// Before the fix, `rules_from_elf::<Arm>` on this file overflowed `i64` in the prel31
/// arithmetic (a panic in debug builds): ELF64 with `EM_ARM` lets section addresses exceed
/// 32 bits, and the entry's place plus a positive prel31 offset passes `i64::MAX`.
#[test]
fn elf64_arm_with_exidx_at_a_huge_address() {
    for (svma, words) in [
        // The place is i64::MAX - 7: + 0x10 overflows.
        (0x7fff_ffff_ffff_fff8u64, (0x10u32, 0x80b0_b0b0u32)),
        (0x7fff_ffff_ffff_fffc - 8, (0x7fff_fff0, 0x7fff_fff0)),
        // Above i64::MAX and at the top of the address space.
        (0xffff_ffff_ffff_fff8, (0x10, 0x80b0_b0b0)),
        (0x8000_0000_0000_0000, (0x4000_0000, 0x10)),
        // A 33-bit address: the start is outside the 32-bit address space.
        (0x1_0000_0000, (0x10, 0x80b0_b0b0)),
    ] {
        let index = exidx_words(&[words]);
        let file = elf(
            true,
            EM_ARM,
            &[
                sec(".ARM.exidx", SHT_ARM_EXIDX, svma, index.clone()),
                sec(
                    ".ARM.extab",
                    SHT_PROGBITS,
                    svma.wrapping_add(0x100),
                    vec![0; 16],
                ),
            ],
        );
        let r = rules_from_elf::<Arm>(&file);
        // The index is the only unwind information: its error is the file's error, and it names
        // the section and the entry.
        match r {
            Err(DwarfError::Exidx(e)) => {
                let msg = DwarfError::Exidx(e).to_string();
                assert!(msg.contains(".ARM.exidx"), "{msg}");
                assert!(msg.contains("entry 0"), "{msg}");
                println!("{svma:#x} {words:x?}: {msg}");
            }
            other => panic!("{svma:#x}: expected an EXIDX error, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keeping what is valid (issue 9, item 15).

/// The DWARF rows of [`arm_debug_frame`] for one FDE at `0x1000..0x1020`, as loaded alone.
fn dwarf_only() -> unwind_core::table::ModuleRules<unwind_core::arm::Rule> {
    let df = arm_debug_frame(&[(0x1000, 0x20)]);
    let (rules, stats) = rules_from_sections::<Arm>(
        &CfiSections {
            debug_frame: Some(&df),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    assert_eq!(stats.cfi.fdes, 1);
    rules
}

/// A malformed `.ARM.exidx` (a length that is not a multiple of 8, or unsorted entries) next
/// to a valid `.debug_frame`: the DWARF rows are kept, exactly as without the index, and the
/// EXIDX error is reported; with the index alone, the error is the module's.
#[test]
fn exidx_error_keeps_the_dwarf_rows() {
    let df = arm_debug_frame(&[(0x1000, 0x20)]);
    let alone = dwarf_only();
    let svma = 0x5000u64;
    let good = exidx_words(&[
        (p31(0x1000, svma), 0x80b0_b0b0),
        (p31(0x1040, svma + 8), 0x80b0_b0b0),
    ]);
    let unsorted = exidx_words(&[
        (p31(0x1040, svma), 0x80b0_b0b0),
        (p31(0x1000, svma + 8), 0x80b0_b0b0),
    ]);
    let cases: [(&str, &[u8], ExidxError, &[&str]); 2] = [
        (
            "length 12",
            &good[..12],
            ExidxError::BadLength { len: 12 },
            &[".ARM.exidx", "length 12", "offset 0x8"],
        ),
        (
            "unsorted",
            &unsorted,
            ExidxError::NotSorted {
                index: 1,
                start: 0x1000,
                previous: 0x1040,
            },
            &[".ARM.exidx", "entry 1", "offset 0x8", "0x1000", "0x1040"],
        ),
    ];
    for (what, index, expected, words) in cases {
        let ex = ExidxSections {
            exidx: index,
            exidx_svma: svma,
            text_end: Some(0x1080),
            functions: &[],
            ..Default::default()
        };
        let (rules, stats) = rules_from_sections::<Arm>(
            &CfiSections {
                debug_frame: Some(&df),
                ..Default::default()
            },
            Some(&ex.into()),
        )
        .unwrap_or_else(|e| panic!("{what}: the DWARF rows were lost: {e}"));
        assert_eq!(stats.arch.exidx_error, Some(expected), "{what}");
        assert!(stats.arch.exidx.is_none(), "{what}");
        let msg = expected.to_string();
        for w in words {
            assert!(msg.contains(w), "{what}: {msg:?} lacks {w:?}");
        }
        println!("{what}: kept {} DWARF extents; {msg}", rules.rows());
        // Every address: the same rule as DWARF alone (no EXIDX row anywhere).
        for a in (0xff0..0x1090).step_by(2) {
            assert_eq!(rules.lookup(a), alone.lookup(a), "{what}: {a:#x}");
        }
        assert_eq!(rules.lookup(0x1002).map(|r| r.source), Some(Source::Dwarf));
        // The index alone: nothing else to keep.
        match rules_from_sections::<Arm>(&CfiSections::default(), Some(&ex.into())) {
            Err(DwarfError::Exidx(e)) => assert_eq!(e, expected, "{what}"),
            other => panic!("{what}: expected the EXIDX error, got {other:?}"),
        }
        // With a symbol table whose function's code cannot be read: still nothing kept, so
        // still the index's error (not an empty module without one).
        let code = unwind_dwarf::ArmCode {
            functions: vec![unwind_dwarf::ArmFunction {
                start: 0x1000,
                end: 0x1040,
                isa: unwind_dwarf::Isa::Thumb,
            }],
            ..Default::default()
        };
        let with_code = unwind_dwarf::ArmSections {
            exidx: Some(ex),
            code: Some(&code),
        };
        match rules_from_sections::<Arm>(&CfiSections::default(), Some(&with_code)) {
            Err(DwarfError::Exidx(e)) => assert_eq!(e, expected, "{what}: with code"),
            other => panic!("{what}: with code: expected the EXIDX error, got {other:?}"),
        }
    }
}

/// The sections of a small ARM file: `.text` at 0x1000 (0x100 bytes), an FDE for
/// `0x1000..0x1020`, EXIDX entries at 0x1000 (inline), 0x1040 (in `.ARM.extab`) and 0x1080
/// (inline).
fn arm_file_sections() -> Vec<Sec> {
    let (exidx_svma, extab_svma) = (0x2000u64, 0x3000u64);
    let index = exidx_words(&[
        (p31(0x1000, exidx_svma), 0x80b0_b0b0),
        (
            p31(0x1040, exidx_svma + 8),
            p31(extab_svma, exidx_svma + 12),
        ),
        (p31(0x1080, exidx_svma + 16), 0x80b0_b0b0),
    ]);
    vec![
        sec(".text", SHT_PROGBITS, 0x1000, vec![0; 0x100]),
        sec(
            ".debug_frame",
            SHT_PROGBITS,
            0,
            arm_debug_frame(&[(0x1000, 0x20)]),
        ),
        sec(".ARM.exidx", SHT_ARM_EXIDX, exidx_svma, index),
        sec(
            ".ARM.extab",
            SHT_PROGBITS,
            extab_svma,
            0x80b0_b0b0u32.to_le_bytes().to_vec(),
        ),
    ]
}

/// Points the named section's header outside the file.
fn break_header(sections: &mut [Sec], name: &str) {
    let s = sections.iter_mut().find(|s| s.name == name).unwrap();
    s.offset = Some(0x10_0000);
}

/// `rules_from_elf::<Arm>` keeps what is valid when one section's header is corrupt: before,
/// any unreadable section (or a malformed index) failed the whole file.
#[test]
fn arm_file_with_an_unreadable_section_keeps_the_rest() {
    let source = |r: &unwind_dwarf::LoadedRules<Arm>, a: u64| r.rules.lookup(a).map(|r| r.source);
    let clean = rules_from_elf::<Arm>(&elf(false, EM_ARM, &arm_file_sections())).unwrap();
    assert!(clean.stats.cfi.unreadable_sections.is_empty());
    assert_eq!(clean.stats.arch.exidx.as_ref().map(|e| e.rows), Some(3));
    for (a, expected) in [
        (0x1000, Source::Dwarf),
        (0x1020, Source::Exidx),
        (0x1040, Source::Exidx),
        (0x1080, Source::Exidx),
    ] {
        assert_eq!(source(&clean, a), Some(expected), "clean {a:#x}");
    }
    let unreadable = |r: &unwind_dwarf::LoadedRules<Arm>| -> Vec<&'static str> {
        r.stats
            .cfi
            .unreadable_sections
            .iter()
            .map(|u| u.name)
            .collect()
    };

    // `.ARM.extab` unreadable: the DWARF rows and the inline entries stay; the entry in
    // `.ARM.extab` is dropped with a reason.
    let mut secs = arm_file_sections();
    break_header(&mut secs, ".ARM.extab");
    let r = rules_from_elf::<Arm>(&elf(false, EM_ARM, &secs)).unwrap();
    assert_eq!(unreadable(&r), [".ARM.extab"]);
    let msg = r.stats.cfi.unreadable_sections[0].to_string();
    assert!(
        msg.contains(".ARM.extab") && msg.contains("0x100000"),
        "{msg}"
    );
    println!("unreadable .ARM.extab: {msg}");
    let exidx = r.stats.arch.exidx.as_ref().unwrap();
    assert_eq!(
        exidx.dropped_for(unwind_arm_exidx::ExidxDropReason::ExtabOutOfRange),
        1
    );
    assert_eq!(exidx.first_dropped[0].index, 1);
    assert_eq!(source(&r, 0x1000), Some(Source::Dwarf));
    assert_eq!(source(&r, 0x1040), None);
    assert_eq!(source(&r, 0x1080), Some(Source::Exidx));

    // `.debug_frame` unreadable: EXIDX describes the first function instead.
    let mut secs = arm_file_sections();
    break_header(&mut secs, ".debug_frame");
    let r = rules_from_elf::<Arm>(&elf(false, EM_ARM, &secs)).unwrap();
    assert_eq!(unreadable(&r), [".debug_frame"]);
    assert_eq!(r.stats.cfi.fdes, 0);
    assert_eq!(source(&r, 0x1000), Some(Source::Exidx));
    assert_eq!(source(&r, 0x1040), Some(Source::Exidx));

    // `.ARM.exidx` unreadable: the DWARF rows stay.
    let mut secs = arm_file_sections();
    break_header(&mut secs, ".ARM.exidx");
    let r = rules_from_elf::<Arm>(&elf(false, EM_ARM, &secs)).unwrap();
    assert_eq!(unreadable(&r), [".ARM.exidx"]);
    assert!(r.stats.arch.exidx.is_none());
    assert_eq!(source(&r, 0x1000), Some(Source::Dwarf));
    assert_eq!(source(&r, 0x1040), None);

    // A malformed index (20 bytes): the DWARF rows stay, the error is reported.
    let mut secs = arm_file_sections();
    secs[2].data.truncate(20);
    let r = rules_from_elf::<Arm>(&elf(false, EM_ARM, &secs)).unwrap();
    assert_eq!(
        r.stats.arch.exidx_error,
        Some(ExidxError::BadLength { len: 20 })
    );
    assert_eq!(source(&r, 0x1000), Some(Source::Dwarf));
    assert_eq!(source(&r, 0x1080), None);

    // Nothing readable left: the first unreadable section is the error.
    let mut secs = arm_file_sections();
    break_header(&mut secs, ".debug_frame");
    break_header(&mut secs, ".ARM.exidx");
    match rules_from_elf::<Arm>(&elf(false, EM_ARM, &secs)) {
        Err(DwarfError::UnreadableSection(UnreadableSection { name, .. })) => {
            assert_eq!(name, ".debug_frame")
        }
        other => panic!("expected an unreadable section, got {other:?}"),
    }
    let e = rules_from_elf::<Arm>(&elf(false, EM_ARM, &secs)).unwrap_err();
    println!("nothing readable: {e}");
    assert!(e.to_string().contains(".debug_frame"), "{e}");
}

/// A `.debug_frame` (64-bit addresses) for x86_64: one FDE for `0x1000..0x1010` with the
/// entry rule (CFA = rsp + 8, return address at CFA - 8).
fn x86_debug_frame() -> Vec<u8> {
    let mut out = Vec::new();
    let cie: &[u8] = &[
        0xff, 0xff, 0xff, 0xff, 1, 0, 1, 0x78, 16, 0x0c, 7, 8, 0x90, 1, 0, 0,
    ];
    out.extend((cie.len() as u32).to_le_bytes());
    out.extend(cie);
    let mut fde = Vec::new();
    fde.extend(0u32.to_le_bytes());
    fde.extend(0x1000u64.to_le_bytes());
    fde.extend(0x10u64.to_le_bytes());
    fde.extend([0, 0, 0, 0]);
    out.extend((fde.len() as u32).to_le_bytes());
    out.extend(fde);
    out
}

/// The same for x86_64 files: an unreadable `.eh_frame` leaves `.debug_frame`.
#[test]
fn x86_64_file_with_an_unreadable_eh_frame_keeps_debug_frame() {
    let secs = || {
        vec![
            sec(".text", SHT_PROGBITS, 0x1000, vec![0; 0x100]),
            sec(".eh_frame", SHT_PROGBITS, 0x2000, vec![0; 4]),
            sec(".debug_frame", SHT_PROGBITS, 0, x86_debug_frame()),
        ]
    };
    let clean = rules_from_elf::<X86_64>(&elf(true, EM_X86_64, &secs())).unwrap();
    assert_eq!(clean.stats.cfi.fdes, 1);
    let mut broken = secs();
    broken[1].size = Some(u64::MAX / 2);
    let r = rules_from_elf::<X86_64>(&elf(true, EM_X86_64, &broken)).unwrap();
    assert_eq!(r.stats.cfi.fdes, 1);
    assert_eq!(r.stats.cfi.unreadable_sections.len(), 1);
    assert_eq!(r.stats.cfi.unreadable_sections[0].name, ".eh_frame");
    println!("{}", r.stats.cfi.unreadable_sections[0]);
    for a in 0xff0..0x1020 {
        assert_eq!(r.rules.lookup(a), clean.rules.lookup(a), "{a:#x}");
    }
    assert!(r.rules.lookup(0x1008).is_some());
}

// ---------------------------------------------------------------------------------------------
// Arbitrary input (issue 9, item 13).

/// An address: small, near a 32-bit or 64-bit boundary, or anything.
fn arb_address() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..0x1_0000,
        (0u64..0x100).prop_map(|d| 0xffff_ffffu64.wrapping_sub(d)),
        (0u64..0x100).prop_map(|d| u64::MAX - d),
        (0u64..0x100).prop_map(|d| (i64::MAX as u64).wrapping_sub(d)),
        any::<u64>(),
    ]
}

/// A section's bytes, address, and whether its header points outside the file.
type ArbSection = (Vec<u8>, u64, bool);

/// One optional section: bytes (random, or the valid ones of [`arm_file_sections`]), an
/// address, and whether its header points outside the file.
fn arb_section(valid: Vec<u8>) -> impl Strategy<Value = Option<ArbSection>> {
    proptest::option::of((
        prop_oneof![
            Just(valid),
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(|v| v.repeat(8)),
        ],
        arb_address(),
        proptest::bool::weighted(0.2),
    ))
}

const NAMES: [&str; 4] = [".debug_frame", ".ARM.exidx", ".ARM.extab", ".eh_frame"];

/// ELF64 or not, the sections named [`NAMES`], and the address of `.text`.
fn arb_arm_file() -> impl Strategy<Value = (bool, Vec<Option<ArbSection>>, u64)> {
    let valid = arm_file_sections();
    (
        any::<bool>(),
        (
            arb_section(valid[1].data.clone()),
            arb_section(valid[2].data.clone()),
            arb_section(valid[3].data.clone()),
            arb_section(vec![0; 4]),
        ),
        arb_address(),
    )
        .prop_map(|(class64, (a, b, c, d), text)| (class64, vec![a, b, c, d], text))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1024,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// ARM ELF files (ELF32 and ELF64) with any of the unwind sections, at any address, with
    /// valid or random contents, and headers possibly pointing outside the file: never a panic;
    /// exactly the sections with broken headers are named unreadable; an EXIDX error is the
    /// file's only when no other source was readable.
    #[test]
    fn arbitrary_arm_files((class64, sections, text) in arb_arm_file()) {
        let mut secs = vec![sec(".text", SHT_PROGBITS, text, vec![0; 0x100])];
        let mut broken = BTreeSet::new();
        for (name, s) in NAMES.iter().zip(&sections) {
            let Some((data, addr, bad)) = s else { continue };
            let kind = if *name == ".ARM.exidx" { SHT_ARM_EXIDX } else { SHT_PROGBITS };
            let mut x = sec(name, kind, *addr, data.clone());
            // (A section of size 0 has no contents to read wherever it points.)
            if *bad && !data.is_empty() {
                // Outside the file for ELF32 and ELF64 alike.
                x.offset = Some(0xffff_0000);
                broken.insert(*name);
            }
            secs.push(x);
        }
        let file = elf(class64, EM_ARM, &secs);
        match rules_from_elf::<Arm>(&file) {
            Ok(r) => {
                let named: BTreeSet<&str> =
                    r.stats.cfi.unreadable_sections.iter().map(|u| u.name).collect();
                prop_assert_eq!(&named, &broken);
                // With a readable index, either its statistics or its error.
                let readable_index = sections[1].is_some() && !broken.contains(".ARM.exidx");
                prop_assert_eq!(
                    readable_index,
                    r.stats.arch.exidx.is_some() || r.stats.arch.exidx_error.is_some()
                );
                prop_assert!(!(r.stats.arch.exidx.is_some() && r.stats.arch.exidx_error.is_some()));
                for b in &r.stats.cfi.first_bad_entries {
                    prop_assert!(b.to_string().contains(b.section.name()));
                }
            }
            Err(DwarfError::UnreadableSection(u)) => {
                prop_assert!(broken.contains(u.name), "{u} not broken");
                prop_assert!(u.to_string().contains(u.name));
            }
            Err(DwarfError::Exidx(e)) => {
                // Only when nothing else could be read.
                for name in [".debug_frame", ".eh_frame"] {
                    let i = NAMES.iter().position(|n| *n == name).unwrap();
                    prop_assert!(
                        sections[i].is_none() || broken.contains(name),
                        "{} readable",
                        name
                    );
                }
                prop_assert!(e.to_string().contains(".ARM.exidx"));
            }
            Err(DwarfError::NoCfi) => {
                // `.ARM.extab` alone is no unwind information.
                prop_assert!(sections[0].is_none() && sections[1].is_none() && sections[3].is_none());
            }
            Err(DwarfError::RangeTooLarge { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    /// Arbitrary bytes as an ARM file, some behind a valid ELF32 or ELF64 ARM header, and a
    /// valid file with random bytes overwritten: never a panic.
    #[test]
    fn arbitrary_bytes_as_arm_files(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        header in 0u8..3,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..16),
    ) {
        let mut d = bytes.clone();
        let valid = elf(header == 1, EM_ARM, &arm_file_sections());
        match header {
            0 => {}
            1 | 2 if d.len() >= 64 => d[..64].copy_from_slice(&valid[..64]),
            _ => {}
        }
        let _ = rules_from_elf::<Arm>(&d);
        let mut v = valid;
        for (i, b) in flips {
            let n = v.len();
            v[i % n] = b;
        }
        if let Ok(r) = rules_from_elf::<Arm>(&v) {
            for (s, e, _) in r.rules.extents() {
                prop_assert!(s < e);
            }
        }
    }

    /// Arbitrary EHABI sections (any addresses, `u64::MAX` included): `Ok` or an EXIDX error,
    /// with DWARF rows kept.
    #[test]
    fn arbitrary_exidx_next_to_dwarf(
        index in proptest::collection::vec(any::<u8>(), 0..96),
        extab in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
        exidx_svma in arb_address(),
        extab_svma in arb_address(),
        text_end in proptest::option::of(arb_address()),
    ) {
        let df = arm_debug_frame(&[(0x1000, 0x20)]);
        let ex = ExidxSections {
            exidx: &index,
            exidx_svma,
            extab: extab.as_deref(),
            extab_svma,
            text_end,
            functions: &[],
        };
        let sections = CfiSections { debug_frame: Some(&df), ..Default::default() };
        match rules_from_sections::<Arm>(&sections, Some(&ex.into())) {
            Ok((rules, stats)) => {
                prop_assert_eq!(rules.lookup(0x1002).map(|r| r.source), Some(Source::Dwarf));
                prop_assert!(stats.arch.exidx.is_some() != stats.arch.exidx_error.is_some());
            }
            // EXIDX rows spread over more than 4 GiB cannot be encoded.
            Err(e @ DwarfError::RangeTooLarge { .. }) => {
                prop_assert!(e.to_string().contains(".ARM.exidx row"), "{}", e);
            }
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    /// The table builder with any rows (rules are [`ByteRule`]s): `Ok` with sorted, disjoint
    /// extents, each carrying the
    /// rule of a row that covers it, or `RangeTooLarge` when the rows span more than 4 GiB.
    #[test]
    fn table_builder_with_any_rows(
        rows in proptest::collection::vec((arb_address(), arb_address(), 0u8..4), 0..12),
    ) {
        let mut b = ModuleRulesBuilder::new();
        for &(s, e, r) in &rows {
            b.push(s, e, ByteRule(r)).unwrap();
        }
        let nonempty: Vec<_> = rows.iter().filter(|r| r.0 < r.1).collect();
        match b.build() {
            Ok(m) => {
                let mut prev = 0u64;
                for (s, e, r) in m.extents() {
                    prop_assert!(s < e && s >= prev);
                    prev = e;
                    prop_assert!(
                        nonempty.iter().any(|x| x.0 <= s && s < x.1 && x.2 == r.0),
                        "extent {:#x}..{:#x} {} not from a row", s, e, r.0
                    );
                    prop_assert_eq!(m.lookup(s), Some(r));
                }
            }
            Err(TableError::RangeTooLarge) => {
                // The builder counts from the lowest start of a non-empty row.
                let lo = nonempty.iter().map(|r| r.0).min().unwrap();
                let hi = nonempty.iter().map(|r| r.1).max().unwrap();
                prop_assert!(hi - lo > u64::from(u32::MAX), "{:#x}..{:#x}", lo, hi);
            }
            Err(e) => prop_assert!(false, "{e}"),
        }
    }
}

/// A rule that is a byte, for the table builder's property test; its ready form is itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ByteRule(u8);

impl unwind_core::table::TableRule for ByteRule {
    type Ready = u8;
    fn ready(&self) -> u8 {
        self.0
    }
}
