//! Crafted ELF files: no panic on any input, and what is valid in a file is kept when another
//! of its unwind sections is malformed.
//!
//! - An ELF64 file with `e_machine = EM_ARM` and a `.ARM.exidx` at a huge address (the prel31
//!   arithmetic once overflowed there).
//! - Arbitrary bytes, and arbitrary section tables, as ARM and x86_64 ELF files.
//! - A file whose `.ARM.extab` (or `.debug_frame`) section header points outside the file
//!   keeps its other sections' rows and names the unreadable section.
//! - The table builder with arbitrary rows (any `u64` bounds).

use unwind_dwarf::{rules_from_elf_arm, DwarfError};

/// `EM_ARM`.
const EM_ARM: u16 = 40;
const SHT_PROGBITS: u32 = 1;
const SHT_STRTAB: u32 = 3;
const SHT_ARM_EXIDX: u32 = 0x7000_0001;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;

/// One section of a crafted file.
#[derive(Clone, Debug)]
struct Sec {
    name: String,
    kind: u32,
    flags: u64,
    addr: u64,
    data: Vec<u8>,
    /// Replaces the section header's file offset (to point it outside the file).
    offset: Option<u64>,
    /// Replaces the section header's size.
    size: Option<u64>,
}

fn sec(name: &str, kind: u32, addr: u64, data: Vec<u8>) -> Sec {
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
fn elf(class64: bool, machine: u16, sections: &[Sec]) -> Vec<u8> {
    let mut shstrtab = vec![0u8];
    let mut names = Vec::new();
    for s in sections.iter().map(|s| s.name.as_str()).chain([".shstrtab"]) {
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
    header(0, 0, 0, 0, 0, 0);
    for (i, s) in sections.iter().enumerate() {
        let (off, size) = placed[i];
        header(
            names[i],
            s.kind,
            s.flags,
            s.addr,
            s.offset.unwrap_or(off),
            s.size.unwrap_or(size),
        );
    }
    let (off, size) = placed[sections.len()];
    header(names[sections.len()], SHT_STRTAB, 0, 0, off, size);
    // The ELF header.
    let mut h = Vec::new();
    h.extend([0x7f, b'E', b'L', b'F', if class64 { 2 } else { 1 }, 1, 1, 0]);
    h.extend([0u8; 8]);
    h.extend(3u16.to_le_bytes()); // ET_DYN
    h.extend(machine.to_le_bytes());
    h.extend(1u32.to_le_bytes());
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

/// Before the fix, `rules_from_elf_arm` on this file overflowed `i64` in the prel31
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
                sec(".ARM.extab", SHT_PROGBITS, svma.wrapping_add(0x100), vec![0; 16]),
            ],
        );
        let r = rules_from_elf_arm(&file);
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
