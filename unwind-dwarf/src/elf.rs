//! CFI from ELF files on disk (object + memmap2).

use std::fs::File;
use std::path::Path;

use object::read::elf::SectionHeader as _;
use object::{Object, ObjectSection};
use unwind_arm_exidx::ExidxSections;
use unwind_core::table::ModuleRules;
use unwind_core::x86_64::Rule;

use crate::arm::{rules_from_sections_arm, ArmStats};
use crate::cfi::{rules_from_sections, CfiSections, CfiStats};
use crate::plt::PltSection;
use crate::{DwarfError, UnreadableSection};

/// A section's (possibly decompressed) bytes and its file address.
type SectionData<'a> = (std::borrow::Cow<'a, [u8]>, u64);

/// The rules of an ELF file and what loading them found.
#[derive(Debug)]
pub struct LoadedRules {
    /// The module's rules, by file address.
    pub rules: ModuleRules<Rule>,
    /// Counts of FDEs, rows kept, merged and dropped.
    pub stats: CfiStats,
    /// The GNU build id, if the file has one.
    pub build_id: Option<Vec<u8>>,
}

/// Maps `path` and reads its `.eh_frame` and `.debug_frame`.
pub fn load_elf_file(path: &Path) -> Result<LoadedRules, DwarfError> {
    let file = File::open(path).map_err(DwarfError::Io)?;
    // SAFETY: the mapping is read-only and private, and lives only while this function parses
    // it; a file truncated concurrently by another process could fault, which is the accepted
    // risk of every mmap-based ELF reader (the alternative is reading whole files into memory).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(DwarfError::Io)?;
    rules_from_elf(&map)
}

/// Reads the CFI of an x86_64 ELF image held in `data`.
///
/// A section that cannot be read (its header points outside the file, or its compressed
/// contents are corrupt) is left out and named in [`CfiStats::unreadable_sections`]; the
/// others are still read. If none is left, the first unreadable one is the error.
pub fn rules_from_elf(data: &[u8]) -> Result<LoadedRules, DwarfError> {
    let elf = object::File::parse(data).map_err(DwarfError::Elf)?;
    if elf.architecture() != object::Architecture::X86_64 {
        return Err(DwarfError::UnsupportedArchitecture(elf.architecture()));
    }
    let mut cfi = CfiData::read(&elf);
    let (rules, mut stats) = cfi.or_unreadable(rules_from_sections(&cfi.sections(&elf)))?;
    stats.unreadable_sections = std::mem::take(&mut cfi.unreadable);
    let build_id = elf.build_id().ok().flatten().map(<[u8]>::to_vec);
    Ok(LoadedRules {
        rules,
        stats,
        build_id,
    })
}

/// The rules of a 32-bit ARM ELF file and what loading them found.
#[derive(Debug)]
pub struct LoadedRulesArm {
    /// The module's rules, by file address.
    pub rules: ModuleRules<unwind_core::arm::Rule>,
    /// Counts of FDEs, rows kept, merged and dropped, and of EXIDX entries and rows.
    pub stats: ArmStats,
    /// The GNU build id, if the file has one.
    pub build_id: Option<Vec<u8>>,
}

/// Maps `path` (a 32-bit ARM ELF file) and reads its `.eh_frame`, `.debug_frame`,
/// `.ARM.exidx` and `.ARM.extab`.
pub fn load_elf_file_arm(path: &Path) -> Result<LoadedRulesArm, DwarfError> {
    let file = File::open(path).map_err(DwarfError::Io)?;
    // SAFETY: as in `load_elf_file`.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(DwarfError::Io)?;
    rules_from_elf_arm(&map)
}

/// Reads the unwind information of a 32-bit ARM ELF image held in `data`: DWARF CFI where an
/// FDE describes an address, EHABI (`.ARM.exidx`) elsewhere (see
/// [`crate::rules_from_sections_arm`]).
///
/// What is valid is kept: an unreadable section is left out (named in
/// `stats.cfi.unreadable_sections`; without a readable `.ARM.extab`, the entries that point into
/// it are dropped), and a malformed `.ARM.exidx` leaves the DWARF and PLT rows
/// ([`ArmStats::exidx_error`]). The first unreadable section, or the EXIDX error, is the error
/// only when nothing else is left.
pub fn rules_from_elf_arm(data: &[u8]) -> Result<LoadedRulesArm, DwarfError> {
    let elf = object::File::parse(data).map_err(DwarfError::Elf)?;
    // Big-endian ARM (armeb) is refused too: the tables are read as little-endian.
    if elf.architecture() != object::Architecture::Arm || !elf.is_little_endian() {
        return Err(DwarfError::UnsupportedArchitecture(elf.architecture()));
    }
    let mut cfi = CfiData::read(&elf);
    // The index: the section of type SHT_ARM_EXIDX (by name if the type is not found).
    let exidx_section = match &elf {
        object::File::Elf32(f) => f
            .sections()
            .find(|s| s.elf_section_header().sh_type(f.endian()) == object::elf::SHT_ARM_EXIDX)
            .map(|s| CfiData::data_of(&s, ".ARM.exidx", &mut cfi.unreadable)),
        _ => None,
    };
    let exidx = match exidx_section {
        Some(data) => data,
        None => CfiData::section(&elf, ".ARM.exidx", &mut cfi.unreadable),
    };
    let extab = CfiData::section(&elf, ".ARM.extab", &mut cfi.unreadable);
    let sections = cfi.sections(&elf);
    let exidx = exidx.as_ref().map(|(d, exidx_svma)| ExidxSections {
        exidx: d,
        exidx_svma: *exidx_svma,
        extab: extab.as_ref().map(|(d, _)| &d[..]),
        extab_svma: extab.as_ref().map_or(0, |(_, a)| *a),
        text_end: sections.code_range.map(|(_, end)| end),
    });
    let (rules, mut stats) =
        cfi.or_unreadable(rules_from_sections_arm(&sections, exidx.as_ref()))?;
    stats.cfi.unreadable_sections = std::mem::take(&mut cfi.unreadable);
    let build_id = elf.build_id().ok().flatten().map(<[u8]>::to_vec);
    Ok(LoadedRulesArm {
        rules,
        stats,
        build_id,
    })
}

/// The sections an ELF file's CFI is read from.
struct CfiData<'a> {
    eh_frame: Option<SectionData<'a>>,
    debug_frame: Option<SectionData<'a>>,
    plt: Vec<PltSection>,
    code_range: Option<(u64, u64)>,
    /// Sections that could not be read, left out.
    unreadable: Vec<UnreadableSection>,
}

impl<'a> CfiData<'a> {
    fn read(elf: &object::File<'a>) -> Self {
        let code_range = elf
            .sections()
            .filter(|s| s.kind() == object::SectionKind::Text && s.size() > 0)
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
        let mut unreadable = Vec::new();
        CfiData {
            eh_frame: Self::section(elf, ".eh_frame", &mut unreadable),
            debug_frame: Self::section(elf, ".debug_frame", &mut unreadable),
            plt: crate::plt::plt_sections(elf),
            code_range,
            unreadable,
        }
    }

    /// The named section's (decompressed) bytes and file address; `None` if the file has no
    /// such section, or if it cannot be read (then recorded in `unreadable`).
    fn section(
        elf: &object::File<'a>,
        name: &'static str,
        unreadable: &mut Vec<UnreadableSection>,
    ) -> Option<SectionData<'a>> {
        Self::data_of(&elf.section_by_name(name)?, name, unreadable)
    }

    /// A section's (decompressed) bytes and file address, or `None` (recorded in
    /// `unreadable` under `name`) if they cannot be read.
    fn data_of<S: ObjectSection<'a>>(
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
                    error,
                });
                None
            }
        }
    }

    /// `result`, except that a module left without unwind information only because sections
    /// could not be read gets the first of them as its error.
    fn or_unreadable<T>(&self, result: Result<T, DwarfError>) -> Result<T, DwarfError> {
        match (result, self.unreadable.first()) {
            (Err(DwarfError::NoCfi), Some(&first)) => Err(DwarfError::UnreadableSection(first)),
            (result, _) => result,
        }
    }

    fn sections<'s>(&'s self, elf: &object::File<'a>) -> CfiSections<'s> {
        let addr = |name: &str| elf.section_by_name(name).map_or(0, |s| s.address());
        CfiSections {
            plt: &self.plt,
            code_range: self.code_range,
            eh_frame: self.eh_frame.as_ref().map(|(d, _)| &d[..]),
            eh_frame_svma: self.eh_frame.as_ref().map_or(0, |(_, a)| *a),
            debug_frame: self.debug_frame.as_ref().map(|(d, _)| &d[..]),
            text_svma: addr(".text"),
            got_svma: addr(".got"),
        }
    }
}
