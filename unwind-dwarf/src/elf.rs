//! CFI from ELF files on disk (object + memmap2).

use std::fs::File;
use std::path::Path;

use object::{Object, ObjectSection};
use unwind_core::table::ModuleRules;

use crate::arch::DwarfArch;
use crate::cfi::{rules_from_sections, CfiSections, LoadStats};
use crate::plt::PltSection;
use crate::{DwarfError, UnreadableSection};

/// `data` with its section header table's offset, count and string-table index set to 0, so
/// that it parses by its program headers; `None` if it is not a little-endian ELF header.
fn without_section_headers(data: &[u8]) -> Option<Vec<u8>> {
    const EI_CLASS: usize = 4;
    const EI_DATA: usize = 5;
    if data.get(..4)? != b"\x7fELF" || *data.get(EI_DATA)? != object::elf::ELFDATA2LSB.0 {
        return None;
    }
    // e_shoff, then e_shnum and e_shstrndx (the last two fields of the header).
    let (shoff, shoff_len, shnum) = match *data.get(EI_CLASS)? {
        c if c == object::elf::ELFCLASS32.0 => (0x20usize, 4usize, 0x30usize),
        c if c == object::elf::ELFCLASS64.0 => (0x28, 8, 0x3c),
        _ => return None,
    };
    let mut copy = data.to_vec();
    copy.get_mut(shoff..shoff.checked_add(shoff_len)?)?.fill(0);
    // e_shnum and e_shstrndx.
    copy.get_mut(shnum..shnum.checked_add(4)?)?.fill(0);
    Some(copy)
}

/// `.eh_frame` of an image without section headers, through `PT_GNU_EH_FRAME`: from the
/// address `.eh_frame_hdr` gives to the end of its loadable segment's file bytes.
fn eh_frame_by_program_headers<'a, Elf>(
    f: &object::read::elf::ElfFile<'a, Elf>,
) -> Option<SectionData<'a>>
where
    Elf: object::read::elf::FileHeader<Endian = object::Endianness>,
{
    use object::read::elf::ProgramHeader as _;
    let endian = f.endian();
    let phdrs = f.elf_program_headers();
    let hdr = phdrs
        .iter()
        .find(|p| p.p_type(endian) == object::elf::PT_GNU_EH_FRAME)?;
    let hdr_bytes = hdr.data(endian, f.data()).ok()?;
    let hdr_svma: u64 = hdr.p_vaddr(endian).into();
    let address_size = if f.is_64() { 8 } else { 4 };
    let eh = crate::eh_frame_address_from_hdr(hdr_bytes, hdr_svma, address_size).ok()?;
    phdrs.iter().find_map(|p| {
        let vaddr: u64 = p.p_vaddr(endian).into();
        let filesz: u64 = p.p_filesz(endian).into();
        if p.p_type(endian) != object::elf::PT_LOAD
            || eh < vaddr
            || eh >= vaddr.saturating_add(filesz)
        {
            return None;
        }
        let bytes = p.data(endian, f.data()).ok()?;
        let at = usize::try_from(eh.checked_sub(vaddr)?).ok()?;
        Some((std::borrow::Cow::Borrowed(bytes.get(at..)?), eh))
    })
}

/// A section's (possibly decompressed) bytes and its file address.
pub(crate) type SectionData<'a> = (std::borrow::Cow<'a, [u8]>, u64);

/// The rules of an ELF file of architecture `A` and what loading them found.
#[derive(Debug)]
pub struct LoadedRules<A: DwarfArch> {
    /// The module's rules, by file address.
    pub rules: ModuleRules<A::Rule>,
    /// Counts of FDEs, rows kept, merged and dropped, and what the architecture adds (ARM: of
    /// EXIDX entries and rows).
    pub stats: LoadStats<A>,
    /// The GNU build id, if the file has one.
    pub build_id: Option<Vec<u8>>,
}

/// Maps `path` (an ELF file of architecture `A`) and reads its unwind information (see
/// [`rules_from_elf`]).
pub fn load_elf_file<A: DwarfArch>(path: &Path) -> Result<LoadedRules<A>, DwarfError> {
    with_mapped_file(path, rules_from_elf::<A>)?
}

/// The little-endian 32-bit word at file address `address` in `elf`'s sections that have
/// contents (one without, such as `.tbss`, is passed over even where its addresses overlap
/// another's); `None` if none holds all four bytes. Reads what REL relocations keep in place.
pub fn word_at(elf: &object::File<'_>, address: u64) -> Option<u32> {
    use object::ObjectSection;
    elf.sections().find_map(|s| {
        let i = usize::try_from(address.checked_sub(s.address())?).ok()?;
        Some(u32::from_le_bytes(*s.data().ok()?.get(i..)?.first_chunk()?))
    })
}

/// Maps the file at `path` and calls `read` with its bytes, which stay mapped only during the
/// call (to read several things from one mapping: [`rules_from_elf`],
/// [`crate::return_sites_from_elf`]).
pub fn with_mapped_file<T>(path: &Path, read: impl FnOnce(&[u8]) -> T) -> Result<T, DwarfError> {
    let file = File::open(path).map_err(DwarfError::Io)?;
    // SAFETY: the mapping is read-only and private, and lives only while `read` parses it; a
    // file truncated concurrently by another process could fault, which is the accepted risk
    // of every mmap-based ELF reader (the alternative is reading whole files into memory).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(DwarfError::Io)?;
    Ok(read(&map))
}

/// Reads the unwind information of an ELF image of architecture `A` held in `data`:
/// `.eh_frame`, `.debug_frame`, rows for its PLT sections, and the architecture's own unwind
/// tables (ARM: `.ARM.exidx` and `.ARM.extab`; see [`crate::rules_from_sections`]). A file of
/// another architecture is [`DwarfError::UnsupportedArchitecture`].
///
/// What is valid is kept: a section that cannot be read (its header points outside the file,
/// or its compressed contents are corrupt) is left out and named in
/// [`crate::CfiStats::unreadable_sections`] (on ARM, without a readable `.ARM.extab`, the
/// entries that point into it are dropped), and a malformed `.ARM.exidx` leaves the DWARF and
/// PLT rows ([`crate::ArmStats::exidx_error`]). The first unreadable section, or the EXIDX
/// error, is the error only when nothing else is left.
pub fn rules_from_elf<A: DwarfArch>(data: &[u8]) -> Result<LoadedRules<A>, DwarfError> {
    let elf = object::File::parse(data).map_err(DwarfError::Elf)?;
    rules_from_parsed::<A>(&elf)
}

/// [`rules_from_elf`] for an ELF image read back from a process's memory (a minidump's, a
/// recorded process's): its section header table, at the file's end, was never loaded, so an
/// image whose headers point past its bytes is read by its program headers (`.eh_frame`
/// through `PT_GNU_EH_FRAME`). A file on disk is read by [`rules_from_elf`], where such
/// headers mean a damaged file and are an error.
pub fn rules_from_memory_image<A: DwarfArch>(data: &[u8]) -> Result<LoadedRules<A>, DwarfError> {
    match object::File::parse(data) {
        Ok(elf) => rules_from_parsed::<A>(&elf),
        Err(e) => {
            let headerless = without_section_headers(data).ok_or(DwarfError::Elf(e))?;
            let elf = object::File::parse(&*headerless).map_err(|_| DwarfError::Elf(e))?;
            rules_from_parsed::<A>(&elf)
        }
    }
}

/// [`rules_from_elf`] of a parsed file.
fn rules_from_parsed<A: DwarfArch>(elf: &object::File<'_>) -> Result<LoadedRules<A>, DwarfError> {
    if !A::accepts_elf(elf) {
        return Err(DwarfError::UnsupportedArchitecture(elf.architecture()));
    }
    let mut unreadable = Vec::new();
    let mut cfi = CfiData::read(elf, &mut unreadable);
    cfi.go = crate::go::read::<A>(elf, &cfi.code);
    let result = A::with_extra_sections(elf, cfi.code_range, &mut unreadable, |extra| {
        rules_from_sections::<A>(&cfi.sections(elf), extra)
    });
    // A module left without unwind information only because sections could not be read gets
    // the first of them as its error.
    let (rules, mut stats) = match (result, unreadable.first()) {
        (Err(DwarfError::NoCfi), Some(&first)) => Err(DwarfError::UnreadableSection(first)),
        (result, _) => result,
    }?;
    stats.cfi.unreadable_sections = unreadable;
    // The signal return trampoline's rows wherever its instructions are (the aarch64 vdso's
    // CFI of it skips the interrupted function).
    let rules = if A::SIGNAL_TRAMPOLINES.is_empty() {
        rules
    } else {
        crate::sigreturn::SignalTrampoline::replacing_in_elf(A::SIGNAL_TRAMPOLINES, rules, elf)
    };
    let build_id = elf.build_id().ok().flatten().map(<[u8]>::to_vec);
    Ok(LoadedRules {
        rules,
        stats,
        build_id,
    })
}

/// The sections an ELF file's DWARF CFI is read from.
pub(crate) struct CfiData<'a> {
    eh_frame: Option<SectionData<'a>>,
    debug_frame: Option<SectionData<'a>>,
    plt: Vec<PltSection>,
    code_range: Option<(u64, u64)>,
    /// The executable segments ([`crate::eh_return`] reads the code).
    code: Vec<(u64, &'a [u8])>,
    /// What a Go executable's function table adds ([`crate::go`]), once looked for.
    go: crate::go::GoTables,
}

impl<'a> CfiData<'a> {
    /// Reads them; those that cannot be read are left out and recorded in `unreadable`. An
    /// image without section headers gives `.eh_frame` through `PT_GNU_EH_FRAME` and its code
    /// range by its executable segments, as a process's loaded image does.
    pub(crate) fn read(elf: &object::File<'a>, unreadable: &mut Vec<UnreadableSection>) -> Self {
        use object::ObjectSegment;
        let exec = |s: &object::Segment<'_, '_>| matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.contains(object::elf::PF_X));
        let code_range = elf
            .sections()
            .filter(|s| s.kind() == object::SectionKind::Text && s.size() > 0)
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
            .or_else(|| {
                elf.segments()
                    .filter(exec)
                    .map(|s| (s.address(), s.address().saturating_add(s.size())))
                    .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
            });
        let mut eh_frame = section_named(elf, ".eh_frame", unreadable).or_else(|| {
            if elf.sections().next().is_some() {
                return None;
            }
            match elf {
                object::File::Elf32(f) => eh_frame_by_program_headers(f),
                object::File::Elf64(f) => eh_frame_by_program_headers(f),
                _ => None,
            }
        });
        let mut debug_frame = section_named(elf, ".debug_frame", unreadable);
        if eh_frame.is_none() && debug_frame.is_none() {
            (eh_frame, debug_frame) = mini_debug_info_cfi(elf, unreadable);
        }
        CfiData {
            eh_frame,
            debug_frame,
            plt: crate::plt::plt_sections(elf),
            code_range,
            code: crate::return_sites::executable_segments(elf),
            go: crate::go::GoTables::default(),
        }
    }

    pub(crate) fn sections<'s>(&'s self, elf: &object::File<'a>) -> CfiSections<'s> {
        let addr = |name: &str| elf.section_by_name(name).map_or(0, |s| s.address());
        CfiSections {
            plt: &self.plt,
            code_range: self.code_range,
            code: &self.code,
            go: Some(&self.go).filter(|g| !g.is_empty()),
            eh_frame: self.eh_frame.as_ref().map(|(d, _)| &d[..]),
            eh_frame_svma: self.eh_frame.as_ref().map_or(0, |(_, a)| *a),
            debug_frame: self.debug_frame.as_ref().map(|(d, _)| &d[..]),
            text_svma: addr(".text"),
            got_svma: addr(".got"),
        }
    }
}

/// `.eh_frame` and `.debug_frame` of `elf`'s MiniDebugInfo ([`crate::mini_debug_info`]), where
/// ART keeps the CFI of compiled Java code. Read only for a file with neither section itself:
/// distributions' MiniDebugInfo holds symbols only, and decompressing it for every library
/// loaded would cost more than reading its rules.
fn mini_debug_info_cfi<'a>(
    elf: &object::File<'_>,
    unreadable: &mut Vec<UnreadableSection>,
) -> (Option<SectionData<'a>>, Option<SectionData<'a>>) {
    let inner = match crate::mini_debug_info::of_elf(elf) {
        None => return (None, None),
        Some(Ok(inner)) => inner,
        Some(Err(error)) => {
            let s = elf.section_by_name(".gnu_debugdata");
            unreadable.push(UnreadableSection {
                name: ".gnu_debugdata",
                address: s.as_ref().map_or(0, |s| s.address()),
                file_range: s.and_then(|s| s.file_range()),
                error: crate::SectionError::MiniDebugInfo(error),
            });
            return (None, None);
        }
    };
    let Ok(inner_elf) = object::File::parse(&*inner) else {
        return (None, None);
    };
    // Sections the inner file only lists (`SHT_NOBITS`: their bytes are the module's) are
    // empty here.
    let mut owned = |name| {
        section_named(&inner_elf, name, unreadable)
            .filter(|(data, _)| !data.is_empty())
            .map(|(data, address)| (std::borrow::Cow::Owned(data.into_owned()), address))
    };
    (owned(".eh_frame"), owned(".debug_frame"))
}

/// `elf`'s `.debug_frame`, decompressed: a section no segment loads, so only a module's file has
/// it (Go's linker writes Go code's CFI there, `.eh_frame` covering only the C code); for a file
/// with neither section, its MiniDebugInfo's (ART's compiled code). `None` if the file has
/// none, or if it cannot be read (then recorded in `unreadable`).
pub fn debug_frame<'a>(
    elf: &object::File<'a>,
    unreadable: &mut Vec<UnreadableSection>,
) -> Option<std::borrow::Cow<'a, [u8]>> {
    section_named(elf, ".debug_frame", unreadable)
        .or_else(|| {
            elf.section_by_name(".eh_frame")
                .is_none()
                .then(|| mini_debug_info_cfi(elf, unreadable).1)
                .flatten()
        })
        .map(|(data, _)| data)
}

/// The named section's (decompressed) bytes and file address; `None` if the file has no such
/// section, or if it cannot be read (then recorded in `unreadable`).
pub(crate) fn section_named<'a>(
    elf: &object::File<'a>,
    name: &'static str,
    unreadable: &mut Vec<UnreadableSection>,
) -> Option<SectionData<'a>> {
    section_data(&elf.section_by_name(name)?, name, unreadable)
}

/// A section's (decompressed) bytes and file address, or `None` (recorded in `unreadable`
/// under `name`) if they cannot be read.
pub(crate) fn section_data<'a, S: ObjectSection<'a>>(
    s: &S,
    name: &'static str,
    unreadable: &mut Vec<UnreadableSection>,
) -> Option<SectionData<'a>> {
    match s.uncompressed_data() {
        Ok(data) => Some((data, s.address())),
        Err(error) => {
            unreadable.push(UnreadableSection {
                name,
                address: s.address(),
                file_range: s.file_range(),
                error: crate::SectionError::Object(error),
            });
            None
        }
    }
}

/// The start of every function `elf`'s symbol tables (`.symtab` and `.dynsym`) define, with
/// bit 0 (ARM's Thumb bit) clear, sorted and without duplicates. ARM's `$a`/`$t`/`$d` mapping
/// symbols are not functions.
pub(crate) fn function_starts(elf: &object::File<'_>) -> Vec<u64> {
    let mut starts: Vec<u64> = function_ranges(elf).into_iter().map(|(s, _)| s).collect();
    starts.dedup();
    starts
}

/// The `[start, end)` of every function `elf`'s symbol tables define (as
/// [`function_starts`]; `end == start` for a symbol without a size), sorted, without
/// duplicates.
pub(crate) fn function_ranges(elf: &object::File<'_>) -> Vec<(u64, u64)> {
    use object::{ObjectSymbol, SymbolKind};
    let mut ranges: Vec<(u64, u64)> = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .filter(|s| s.name().is_ok_and(|n| !n.starts_with('$')))
        .map(|s| {
            let start = s.address() & !1;
            (start, start.saturating_add(s.size()))
        })
        .collect();
    ranges.sort_unstable();
    ranges.dedup();
    ranges
}

/// The functions `elf`'s symbol table (`.symtab`) defines, as `[start, end)` file addresses
/// with bit 0 (ARM's Thumb bit) clear and whether that bit was set (a Thumb function), sorted
/// by start; empty if the file is stripped. A
/// function symbol without a size (one written in assembly, like `_start`) ends where the next
/// function starts (the last such one at `code_end`, if known). Symbols of other kinds (data,
/// ARM's `$a`/`$t`/`$d` mapping symbols) are not functions.
///
/// `.dynsym` is not used: it lists exported functions only, so in a stripped library the code
/// after one is usually its internal functions, which its EHABI entry covers on purpose (armhf
/// glibc's `start_thread` lies in the `EXIDX_CANTUNWIND` range of an exported function: cut
/// there, every thread's walk would end with `NoRule` instead of at its outermost frame).
pub(crate) fn function_symbols(
    elf: &object::File<'_>,
    code_end: Option<u64>,
) -> Vec<(u64, u64, bool)> {
    use object::{ObjectSymbol, SymbolKind};
    let mut found: Vec<(u64, u64, bool)> = elf
        .symbols()
        .filter(|s| {
            s.kind() == SymbolKind::Text
                && s.is_definition()
                && !s.name().is_ok_and(|n| n.starts_with('$'))
        })
        .map(|s| (s.address() & !1, s.size(), s.address() & 1 != 0))
        .collect();
    found.sort_unstable();
    found.dedup_by_key(|f| (f.0, f.1));
    let starts: Vec<u64> = found.iter().map(|f| f.0).collect();
    found
        .iter()
        .filter_map(|&(start, size, thumb)| {
            let end = if size > 0 {
                start.checked_add(size)?
            } else {
                let next = starts.partition_point(|&s| s <= start);
                starts.get(next).copied().or(code_end)?
            };
            (end > start).then_some((start, end, thumb))
        })
        .collect()
}

/// `elf`'s executable sections' contents, by file address, sorted (empty ones left out).
pub(crate) fn code_sections<'a>(elf: &object::File<'a>) -> Vec<(u64, &'a [u8])> {
    use object::SectionKind;
    let mut sections: Vec<(u64, &'a [u8])> = elf
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .filter(|(_, d)| !d.is_empty())
        .collect();
    sections.sort_unstable_by_key(|s| s.0);
    sections
}

/// Whether `addr` lies in one of `sections`.
pub(crate) fn in_code(sections: &[(u64, &[u8])], addr: u64) -> bool {
    sections
        .iter()
        .any(|&(svma, bytes)| addr.wrapping_sub(svma) < bytes.len() as u64)
}

/// The bytes of `[start, end)` in `sections` (sorted by address), if one section holds them
/// all.
pub(crate) fn code_bytes<'a>(
    sections: &[(u64, &'a [u8])],
    start: u64,
    end: u64,
) -> Option<&'a [u8]> {
    let i = sections.partition_point(|s| s.0 <= start);
    let &(base, data) = sections.get(i.checked_sub(1)?)?;
    let lo = usize::try_from(start.checked_sub(base)?).ok()?;
    let hi = usize::try_from(end.checked_sub(base)?).ok()?;
    data.get(lo..hi)
}
