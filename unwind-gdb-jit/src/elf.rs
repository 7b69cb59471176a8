//! What the ELF files say: where a module's descriptor is, and what a symbol file describes.

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionFlags, SymbolKind};

use crate::{Symfile, DESCRIPTOR_SYMBOL};

/// The file address of `__jit_debug_descriptor` in the ELF file `elf` (its `.dynsym` or
/// `.symtab`), if it defines it: the module's load bias plus this is the descriptor's address.
/// Only data symbols of the descriptor's size (16 or 24 bytes, more with ART's fields) have
/// their names read: a large executable's symbol tables (node's: 185,000 symbols) are scanned
/// in a few milliseconds, not tens.
pub fn descriptor_address(elf: &[u8]) -> Option<u64> {
    let file = object::File::parse(elf).ok()?;
    file.dynamic_symbols()
        .chain(file.symbols())
        .filter(|s| s.kind() == SymbolKind::Data && (16..=64).contains(&s.size()))
        .find(|s| s.is_definition() && s.name() == Ok(DESCRIPTOR_SYMBOL))
        .map(|s| s.address())
}

/// A function a symbol file names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Its first byte's address (ARM's Thumb bit clear).
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
    /// Its name as the JIT wrote it (ART: `boolean Main.bar(boolean)`).
    pub name: String,
}

impl Symfile {
    /// The addresses of the code the file describes: from the lowest to the highest byte of its
    /// executable sections (their contents are the process's, so usually `SHT_NOBITS` here),
    /// or of its executable segments; `None` if it is not an ELF file or describes no code.
    pub fn code_range(&self) -> Option<(u64, u64)> {
        let file = object::File::parse(&*self.bytes).ok()?;
        let executable = |flags: SectionFlags| matches!(flags, SectionFlags::Elf { sh_flags, .. } if sh_flags.contains(object::elf::SHF_EXECINSTR));
        let range = |a: u64, size: u64| (a, a.saturating_add(size));
        file.sections()
            .filter(|s| executable(s.flags()) && s.size() > 0)
            .map(|s| range(s.address(), s.size()))
            .chain(
                file.segments()
                    .filter(|s| {
                        matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.contains(object::elf::PF_X))
                    })
                    .filter(|s| s.size() > 0)
                    .map(|s| range(s.address(), s.size())),
            )
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
    }

    /// The file with its unwind sections (`.eh_frame`, `.debug_frame`) relocated, if it is a
    /// relocatable object (`ET_REL`: LLVM's RuntimeDyld registers the object it loaded with
    /// its sections' addresses set where it placed them, but the relocations of those sections
    /// unapplied, as gdb applies them): each relocation of an absolute or PC-relative kind,
    /// 32 or 64 bits, resolved against the symbols' sections' addresses. Any other file as it
    /// is.
    pub fn relocated(&self) -> std::borrow::Cow<'_, [u8]> {
        use std::borrow::Cow;
        let Ok(file) = object::File::parse(&*self.bytes) else {
            return Cow::Borrowed(&self.bytes);
        };
        if file.kind() != object::ObjectKind::Relocatable {
            return Cow::Borrowed(&self.bytes);
        }
        let mut out = self.bytes.clone();
        for name in [".eh_frame", ".debug_frame"] {
            let Some(section) = file.section_by_name(name) else {
                continue;
            };
            let Some((file_offset, size)) = section.file_range() else {
                continue;
            };
            for (offset, r) in section.relocations() {
                let Some((relative, width)) = kind_of(file.architecture(), &r) else {
                    continue;
                };
                if offset.saturating_add(width as u64) > size {
                    continue;
                }
                let Some(value) =
                    relocation_value(&file, &section, offset, &r, relative, width, &self.bytes)
                else {
                    continue;
                };
                let at = (file_offset + offset) as usize;
                if let Some(place) = out.get_mut(at..at + width) {
                    place.copy_from_slice(&value.to_le_bytes()[..width]);
                }
            }
        }
        Cow::Owned(out)
    }

    /// The functions its `.symtab` defines, sorted by start (a function without a size ends at
    /// the next one, or at the code's end). In a relocatable object (see [`Symfile::relocated`])
    /// a symbol's value is an offset in its section.
    pub fn functions(&self) -> Vec<Function> {
        let Ok(file) = object::File::parse(&*self.bytes) else {
            return Vec::new();
        };
        let relocatable = file.kind() == object::ObjectKind::Relocatable;
        let mut out: Vec<Function> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
            .filter_map(|s| {
                let name = s.name().ok()?;
                // ARM's mapping symbols ($a, $t, $d) name no function.
                if name.starts_with('$') {
                    return None;
                }
                let section = match (relocatable, s.section_index()) {
                    (false, _) => 0,
                    (true, Some(i)) => file.section_by_index(i).ok()?.address(),
                    (true, None) => return None,
                };
                let start = section.wrapping_add(s.address()) & !1;
                Some(Function {
                    start,
                    end: start.saturating_add(s.size()),
                    name: name.to_string(),
                })
            })
            .collect();
        out.sort_by_key(|f| f.start);
        let code_end = self.code_range().map(|r| r.1);
        for i in 0..out.len() {
            if out[i].end == out[i].start {
                let next = out.get(i + 1).map(|f| f.start).or(code_end);
                out[i].end = next.unwrap_or(out[i].start).max(out[i].start);
            }
        }
        out
    }
}

/// The value relocation `r` at `offset` in `section` of the relocatable `file` (whose bytes are
/// `bytes`) puts there: the symbol's address (its section's, plus its value) plus the addend
/// (read from the place where the relocation has none of its own), less the place's address if
/// PC-relative; `None` for another kind of relocation.
fn relocation_value(
    file: &object::File<'_>,
    section: &object::Section<'_, '_>,
    offset: u64,
    r: &object::Relocation,
    relative: bool,
    width: usize,
    bytes: &[u8],
) -> Option<u64> {
    let symbol = match r.target() {
        object::RelocationTarget::Symbol(i) => file.symbol_by_index(i).ok()?,
        _ => return None,
    };
    let base = file
        .section_by_index(symbol.section_index()?)
        .ok()?
        .address();
    let target = base.wrapping_add(symbol.address());
    let addend = if r.has_implicit_addend() {
        let (file_offset, _) = section.file_range()?;
        let at = usize::try_from(file_offset.checked_add(offset)?).ok()?;
        let mut b = [0u8; 8];
        b.get_mut(..width)?
            .copy_from_slice(bytes.get(at..at.checked_add(width)?)?);
        // Sign-extended: a 32-bit addend may be negative.
        match width {
            4 => i64::from(i32::from_le_bytes(b[..4].try_into().ok()?)),
            _ => i64::from_le_bytes(b),
        }
    } else {
        r.addend()
    };
    let value = target.wrapping_add(addend as u64);
    Some(if relative {
        value.wrapping_sub(section.address().wrapping_add(offset))
    } else {
        value
    })
}

/// Whether relocation `r` of a file of `arch` is PC-relative, and its width in bytes, for the
/// kinds unwind sections use (data words, absolute or PC-relative, 32 or 64 bits); `None` for
/// any other. By the ELF type (the `object` crate classifies only some of them).
fn kind_of(arch: object::Architecture, r: &object::Relocation) -> Option<(bool, usize)> {
    use object::Architecture as A;
    let object::RelocationFlags::Elf { r_type } = r.flags() else {
        return None;
    };
    match (arch, r_type.0) {
        // R_X86_64_64, _PC32, _32, _32S, _PC64.
        (A::X86_64, 1) => Some((false, 8)),
        (A::X86_64, 2) => Some((true, 4)),
        (A::X86_64, 10 | 11) => Some((false, 4)),
        (A::X86_64, 24) => Some((true, 8)),
        // R_AARCH64_ABS64, _ABS32, _PREL64, _PREL32.
        (A::Aarch64, 257) => Some((false, 8)),
        (A::Aarch64, 258) => Some((false, 4)),
        (A::Aarch64, 260) => Some((true, 8)),
        (A::Aarch64, 261) => Some((true, 4)),
        // R_ARM_ABS32, R_ARM_REL32.
        (A::Arm, 2) => Some((false, 4)),
        (A::Arm, 3) => Some((true, 4)),
        _ => None,
    }
}
