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
use crate::DwarfError;

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
pub fn rules_from_elf(data: &[u8]) -> Result<LoadedRules, DwarfError> {
    let elf = object::File::parse(data).map_err(DwarfError::Elf)?;
    if elf.architecture() != object::Architecture::X86_64 {
        return Err(DwarfError::UnsupportedArchitecture(elf.architecture()));
    }
    let cfi = CfiData::read(&elf)?;
    let (rules, stats) = rules_from_sections(&cfi.sections(&elf))?;
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
pub fn rules_from_elf_arm(data: &[u8]) -> Result<LoadedRulesArm, DwarfError> {
    let elf = object::File::parse(data).map_err(DwarfError::Elf)?;
    // Big-endian ARM (armeb) is refused too: the tables are read as little-endian.
    if elf.architecture() != object::Architecture::Arm || !elf.is_little_endian() {
        return Err(DwarfError::UnsupportedArchitecture(elf.architecture()));
    }
    let cfi = CfiData::read(&elf)?;
    let sections = cfi.sections(&elf);
    // The index: the section of type SHT_ARM_EXIDX (by name if the type is not found).
    let exidx_section = match &elf {
        object::File::Elf32(f) => f
            .sections()
            .find(|s| s.elf_section_header().sh_type(f.endian()) == object::elf::SHT_ARM_EXIDX),
        _ => None,
    };
    let exidx = match exidx_section {
        Some(s) => Some((s.uncompressed_data().map_err(DwarfError::Elf)?, s.address())),
        None => CfiData::section(&elf, ".ARM.exidx")?,
    };
    let extab = CfiData::section(&elf, ".ARM.extab")?;
    let exidx = exidx.as_ref().map(|(d, exidx_svma)| ExidxSections {
        exidx: d,
        exidx_svma: *exidx_svma,
        extab: extab.as_ref().map(|(d, _)| &d[..]),
        extab_svma: extab.as_ref().map_or(0, |(_, a)| *a),
        text_end: sections.code_range.map(|(_, end)| end),
    });
    let (rules, stats) = rules_from_sections_arm(&sections, exidx.as_ref())?;
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
}

impl<'a> CfiData<'a> {
    fn read(elf: &object::File<'a>) -> Result<Self, DwarfError> {
        let code_range = elf
            .sections()
            .filter(|s| s.kind() == object::SectionKind::Text && s.size() > 0)
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
        Ok(CfiData {
            eh_frame: Self::section(elf, ".eh_frame")?,
            debug_frame: Self::section(elf, ".debug_frame")?,
            plt: crate::plt::plt_sections(elf),
            code_range,
        })
    }

    /// The named section's (decompressed) bytes and file address.
    fn section(elf: &object::File<'a>, name: &str) -> Result<Option<SectionData<'a>>, DwarfError> {
        match elf.section_by_name(name) {
            None => Ok(None),
            Some(s) => {
                let data = s.uncompressed_data().map_err(DwarfError::Elf)?;
                Ok(Some((data, s.address())))
            }
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
