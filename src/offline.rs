//! Rule tables for samples unwound away from the process that took them: each module's rules
//! are read from its ELF file on disk and placed at the load bias recorded with the sample.

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

/// Builds a table (generation `generation`) from module files. A module whose file cannot be
/// read gets no rules (the unwinder falls back to frame pointers there); its error is returned
/// alongside.
pub fn table_from_files(
    modules: &[ModuleFile],
    generation: NonZeroU32,
) -> Result<(RuleTable<Rule>, FileErrors), crate::Error> {
    let mut builder = RuleTableBuilder::new(generation);
    let mut errors = Vec::new();
    for m in modules {
        let rules = match unwind_dwarf::load_elf_file(&m.path) {
            Ok(loaded) => loaded.rules,
            Err(e) => {
                errors.push((m.path.clone(), e));
                ModuleRules::empty()
            }
        };
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
