//! CFI from ELF files on disk (object + memmap2).

use std::fs::File;
use std::path::Path;

use object::{Object, ObjectSection};
use unwind_core::table::ModuleRules;
use unwind_core::x86_64::Rule;

use crate::cfi::{rules_from_sections, CfiSections, CfiStats};
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
    let section = |name: &str| -> Result<Option<SectionData<'_>>, DwarfError> {
        match elf.section_by_name(name) {
            None => Ok(None),
            Some(s) => {
                let data = s.uncompressed_data().map_err(DwarfError::Elf)?;
                Ok(Some((data, s.address())))
            }
        }
    };
    let eh_frame = section(".eh_frame")?;
    let debug_frame = section(".debug_frame")?;
    let addr = |name: &str| elf.section_by_name(name).map_or(0, |s| s.address());
    let plt = crate::plt::plt_sections(&elf);
    let code_range = elf
        .sections()
        .filter(|s| s.kind() == object::SectionKind::Text && s.size() > 0)
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    let sections = CfiSections {
        plt: &plt,
        code_range,
        eh_frame: eh_frame.as_ref().map(|(d, _)| &d[..]),
        eh_frame_svma: eh_frame.as_ref().map_or(0, |(_, a)| *a),
        debug_frame: debug_frame.as_ref().map(|(d, _)| &d[..]),
        text_svma: addr(".text"),
        got_svma: addr(".got"),
    };
    let (rules, stats) = rules_from_sections(&sections)?;
    let build_id = elf.build_id().ok().flatten().map(<[u8]>::to_vec);
    Ok(LoadedRules {
        rules,
        stats,
        build_id,
    })
}
