//! The functions a module's unwind tables describe: each FDE's range (`.eh_frame`,
//! `.debug_frame`) and, on 32-bit ARM, each `.ARM.exidx` entry's function (to the next entry or
//! the next function symbol; an internal function without an entry or a symbol after it is
//! taken as part of the entry's, which the index cannot tell apart).
//!
//! On 32-bit ARM, the functions between them that calls, PC-relative addresses and function
//! pointers reach are added (the private module `called`), and an entry's function ends at
//! the first of them inside it.
//!
//! Unlike the rules, these need no translation: they name code that has no symbol. A stripped
//! library (`liblzma.so.5`) keeps its unwind tables, so a profiler can show one line per
//! function (`liblzma.so.5+0x15b80`, the function's start) instead of one per sampled address.

use gimli::{BaseAddresses, CieOrFde, DebugFrame, EhFrame, LittleEndian, UnwindSection};
use object::Object;

use crate::elf::CfiData;

/// A function's code: file addresses `start..end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Function {
    /// Its first address (bit 0, ARM's Thumb bit, clear).
    pub start: u64,
    /// One past its last.
    pub end: u64,
}

/// The functions of an ELF file's unwind tables, sorted by start, without duplicates (a
/// function in both `.eh_frame` and `.debug_frame` once), and on 32-bit ARM those between
/// them that calls and pointers reach (see the module's documentation). Malformed entries are
/// skipped: the list is for naming, and a function left out is only named by address. Empty
/// for a file that is not ELF or has no unwind tables.
pub fn functions_of_elf(data: &[u8]) -> Vec<Function> {
    listed(data, true)
}

/// [`functions_of_elf`] without the functions found by calls: what the unwind tables alone
/// say (each `.ARM.exidx` entry's function running to the next entry or symbol).
pub fn functions_of_unwind_tables(data: &[u8]) -> Vec<Function> {
    listed(data, false)
}

fn listed(data: &[u8], with_calls: bool) -> Vec<Function> {
    let Ok(elf) = object::File::parse(data) else {
        return Vec::new();
    };
    let address_size = if elf.is_64() { 8 } else { 4 };
    // The sections the rules are read from, found and decompressed as for them; unreadable
    // ones are left out (the list only names code).
    let mut unreadable = Vec::new();
    let cfi = CfiData::read(&elf, &mut unreadable);
    let sections = cfi.sections(&elf);
    let mut out = Vec::new();
    // `.ARM.exidx`'s functions, whose ends are guesses (the next entry or symbol).
    let mut indexed = Vec::new();
    if let Some(data) = sections.eh_frame {
        let bases = BaseAddresses::default()
            .set_eh_frame(sections.eh_frame_svma)
            .set_text(sections.text_svma)
            .set_got(sections.got_svma);
        let mut eh = EhFrame::new(data, LittleEndian);
        eh.set_address_size(address_size);
        fdes(&eh, &bases, &mut out);
    }
    if let Some(data) = sections.debug_frame {
        let mut debug = DebugFrame::new(data, LittleEndian);
        debug.set_address_size(address_size);
        fdes(&debug, &BaseAddresses::default(), &mut out);
    }
    if let (Some((exidx, exidx_svma)), extab) = crate::arm::exidx_and_extab(&elf, &mut unreadable) {
        let sections = crate::ExidxSections {
            exidx: &exidx,
            exidx_svma,
            extab: extab.as_ref().map(|(d, _)| &d[..]),
            extab_svma: extab.as_ref().map_or(0, |(_, a)| *a),
            text_end: None,
            functions: &[],
        };
        // An entry's function runs to the next entry, or to the next function a symbol names
        // if that comes first (code without an entry follows it: armhf's libc has one from
        // 0xc03f8 to 0xc0a5c, over `gethostbyname_r` at 0xc0730). An `EXIDX_CANTUNWIND` entry is
        // no function: linkers merge a run of them into one, over many functions (one from
        // 0x66048 to 0x6ad90, `malloc` among them), so its range names nothing.
        if let Ok(entries) = unwind_arm_exidx::entries(&sections) {
            let named = crate::elf::function_starts(&elf);
            indexed.extend(
                entries
                    .iter()
                    .zip(entries.iter().skip(1))
                    .filter(|(e, _)| e.model != unwind_arm_exidx::Model::CantUnwind)
                    .map(|(e, next)| {
                        let start = e.start & !1;
                        let symbol = named.get(named.partition_point(|&s| s <= start));
                        let end = symbol.map_or(u64::MAX, |&s| s).min(next.start & !1);
                        Function { start, end }
                    })
                    .filter(|f| f.start < f.end),
            );
        }
    }
    out.sort();
    out.dedup_by_key(|f| f.start);
    indexed.sort();
    indexed.retain(|f| {
        let i = out.partition_point(|o| o.start <= f.start);
        i.checked_sub(1)
            .and_then(|i| out.get(i))
            .is_none_or(|o| o.end <= f.start)
    });
    if with_calls && elf.architecture() == object::Architecture::Arm {
        let called = crate::called::functions_between(&elf, &out, &indexed);
        // A function called inside an entry's guessed range ends that range.
        for f in &mut indexed {
            let i = called.partition_point(|c| c.start <= f.start);
            if let Some(c) = called.get(i).filter(|c| c.start < f.end) {
                f.end = c.start;
            }
        }
        out.extend(called);
    }
    out.extend(indexed);
    out.sort();
    out.dedup_by_key(|f| f.start);
    out
}

/// Appends the range of every FDE of `section` that parses.
fn fdes<'a, S: UnwindSection<gimli::EndianSlice<'a, LittleEndian>>>(
    section: &S,
    bases: &BaseAddresses,
    out: &mut Vec<Function>,
) where
    S::Offset: gimli::UnwindOffset,
{
    let mut entries = section.entries(bases);
    // A malformed entry ends the walk: its length cannot be trusted to find the next.
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else {
            continue;
        };
        let start = fde.initial_address();
        let end = start.saturating_add(fde.len());
        if start < end {
            out.push(Function { start, end });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every function of this crate in the test binary's symbol table starts a listed function
    /// that covers its code (Rust emits unwind information for each), and the list is sorted.
    #[test]
    fn the_test_binarys_functions_start_at_its_symbols() {
        use object::ObjectSymbol;
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let functions = functions_of_elf(&data);
        assert!(functions.len() > 100, "{}", functions.len());
        assert!(functions.windows(2).all(|w| w[0].start < w[1].start));
        let elf = object::File::parse(&*data).unwrap();
        let mut checked = 0;
        for sym in elf.symbols() {
            let name = sym.name().unwrap_or("");
            if sym.kind() != object::SymbolKind::Text || sym.size() == 0 {
                continue;
            }
            if !name.contains("12unwind_dwarf") {
                continue;
            }
            let start = sym.address() & !1;
            let i = functions.partition_point(|f| f.start <= start);
            assert!(i > 0, "{name} before every function");
            let f = functions[i - 1];
            assert_eq!(f.start, start, "{name}");
            assert!(f.end >= start + sym.size(), "{name}: {f:?}");
            checked += 1;
        }
        assert!(checked >= 50, "only {checked} functions of this crate");
    }

    /// A stripped ARM library (armhf's C library, installed with the cross toolchain by
    /// scripts/setup) has only `.ARM.exidx`: many of its exported functions start a listed
    /// function, and none lies inside a listed function that starts elsewhere (merged
    /// `EXIDX_CANTUNWIND` runs are left out).
    #[test]
    fn an_arm_librarys_functions_come_from_its_index() {
        use object::ObjectSymbol;
        let path = "/usr/arm-linux-gnueabihf/lib/libc.so.6";
        let Ok(data) = std::fs::read(path) else {
            unwind_test_support::missing(path);
            return;
        };
        let functions = functions_of_elf(&data);
        let elf = object::File::parse(&*data).unwrap();
        let mut starting = 0;
        for sym in elf.dynamic_symbols() {
            if sym.kind() != object::SymbolKind::Text || sym.is_undefined() || sym.size() == 0 {
                continue;
            }
            let start = sym.address() & !1;
            let i = functions.partition_point(|f| f.start <= start);
            if let Some(f) = i.checked_sub(1).map(|i| functions[i]) {
                if start < f.end {
                    assert_eq!(f.start, start, "{:?} inside {f:x?}", sym.name());
                    starting += 1;
                }
            }
        }
        assert!(
            starting >= 100,
            "{starting} exported functions start a listed one"
        );
    }

    #[test]
    fn not_elf_gives_none() {
        assert!(functions_of_elf(b"not an ELF file").is_empty());
        assert!(functions_of_elf(&[]).is_empty());
    }
}
