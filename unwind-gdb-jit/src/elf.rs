//! What the ELF files say: where a module's descriptor is, and what a symbol file describes.

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionFlags, SymbolKind};

use crate::{Symfile, DESCRIPTOR_SYMBOL};

/// The file address of `__jit_debug_descriptor` in the ELF file `elf` (its `.dynsym` or
/// `.symtab`), if it defines it: the module's load bias plus this is the descriptor's address.
pub fn descriptor_address(elf: &[u8]) -> Option<u64> {
    let file = object::File::parse(elf).ok()?;
    file.dynamic_symbols()
        .chain(file.symbols())
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

    /// The functions its `.symtab` defines, sorted by start (a function without a size ends at
    /// the next one, or at the code's end).
    pub fn functions(&self) -> Vec<Function> {
        let Ok(file) = object::File::parse(&*self.bytes) else {
            return Vec::new();
        };
        let mut out: Vec<Function> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
            .filter_map(|s| {
                let name = s.name().ok()?;
                // ARM's mapping symbols ($a, $t, $d) name no function.
                if name.starts_with('$') {
                    return None;
                }
                let start = s.address() & !1;
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
