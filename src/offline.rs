//! Rule tables for samples unwound away from the process that took them (on another host, or
//! another architecture: armv7 samples unwind on x86_64): each module's rules are read from its
//! ELF file on disk and placed at the load bias recorded with the sample.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;

use unwind_core::table::{ModuleRules, RuleTable, RuleTableBuilder};
use unwind_core::x86_64::Rule;

/// Where a module was loaded in the sampled process, and the file to read its rules from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleFile {
    /// The ELF file (for the vdso: a copy of its image saved with the sample).
    pub path: PathBuf,
    /// Lowest runtime address of its code.
    pub start: u64,
    /// One past the highest.
    pub end: u64,
    /// Runtime address minus file address.
    pub bias: u64,
}

impl From<&crate::LoadedModule> for ModuleFile {
    fn from(m: &crate::LoadedModule) -> Self {
        ModuleFile {
            path: m.name.clone().into(),
            start: m.start,
            end: m.end,
            bias: m.bias,
        }
    }
}

/// Modules whose file could not be read, with why.
pub type FileErrors = Vec<(PathBuf, unwind_dwarf::DwarfError)>;

/// Builds an x86_64 table (generation `generation`) from module files. A module whose file
/// cannot be read gets no rules (the unwinder falls back to frame pointers there); its error is
/// returned alongside.
pub fn table_from_files(
    modules: &[ModuleFile],
    generation: NonZeroU32,
) -> Result<(RuleTable<Rule>, FileErrors), crate::Error> {
    build(modules, generation, |p| {
        unwind_dwarf::load_elf_file(p).map(|l| l.rules)
    })
}

/// Builds a 32-bit ARM table from module files (`.debug_frame`/`.eh_frame` where present,
/// `.ARM.exidx` elsewhere), for unwinding armv7 samples on any host.
pub fn arm_table_from_files(
    modules: &[ModuleFile],
    generation: NonZeroU32,
) -> Result<(RuleTable<unwind_core::arm::Rule>, FileErrors), crate::Error> {
    build(modules, generation, |p| {
        unwind_dwarf::load_elf_file_arm(p).map(|l| l.rules)
    })
}

fn build<R: Copy>(
    modules: &[ModuleFile],
    generation: NonZeroU32,
    load: impl Fn(&std::path::Path) -> Result<ModuleRules<R>, unwind_dwarf::DwarfError>,
) -> Result<(RuleTable<R>, FileErrors), crate::Error> {
    let mut builder = RuleTableBuilder::new(generation);
    let mut errors = Vec::new();
    for m in modules {
        let rules = load(&m.path).unwrap_or_else(|e| {
            errors.push((m.path.clone(), e));
            ModuleRules::empty()
        });
        builder.add(
            m.start,
            m.end,
            m.bias,
            m.path.display().to_string(),
            Arc::new(rules),
        );
    }
    Ok((builder.build().map_err(crate::Error::Table)?, errors))
}
