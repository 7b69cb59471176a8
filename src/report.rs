//! What preloading found: per module and in total.

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use unwind_dwarf::{CfiStats, ExidxError, ExidxStats};

use crate::arch::{Native, RuntimeArch as _};
use crate::modules::ParsedModule;

/// One module of a preload.
#[derive(Clone, Debug)]
pub struct ModuleReport {
    /// Path or name.
    pub name: String,
    /// Extents carrying a rule.
    pub rows: u64,
    /// Distinct rules in its dictionary.
    pub distinct_rules: usize,
    /// Heap bytes of its rules.
    pub bytes: usize,
    /// Bytes of its code (the span of its executable segments; 0 if unknown).
    pub code_bytes: u64,
    /// Of them, bytes without a rule: no unwind table describes them (built without unwind
    /// tables, or padding) and, on ARM, no rule could be read from their instructions (no
    /// symbol says where a function starts); a sample there is unwound by the fallbacks, or
    /// stops.
    pub code_without_rules: u64,
    /// Of its code, bytes whose rules were read from their instructions rather than from an
    /// unwind table (32-bit ARM: functions no table describes, EHABI prologues and epilogues,
    /// `EXIDX_CANTUNWIND` functions confirmed by their exits; always 0 on x86_64).
    pub code_from_instructions: u64,
    /// FDE and row counts, with drops by reason (none if the module has no CFI).
    pub stats: Option<CfiStats>,
    /// 32-bit ARM: what reading `.ARM.exidx` found (entries, rows, drops by reason with the first
    /// dropped entry of each), if the module has it.
    pub exidx: Option<ExidxStats>,
    /// 32-bit ARM: why `.ARM.exidx` could not be read, naming the entry and its offset; the
    /// module's DWARF rows were kept.
    pub exidx_error: Option<ExidxError>,
    /// Why it has no rules, if it has none.
    pub error: Option<String>,
    /// Why its file on disk was not read (it is not the mapped image, or cannot be checked):
    /// rules only the file has (PLT sections, ARM `.debug_frame`) are then missing.
    pub file_note: Option<String>,
    /// Why it was left out of the table although it has rules: its code overlaps another
    /// module's (both named).
    pub overlaps: Option<String>,
    /// Its rules came from an earlier table (not parsed again).
    pub reused: bool,
    /// With stack scanning on ([`crate::set_stack_scanning`]): how many return sites a scan
    /// accepts in its code; `None` when scanning is off or its file could not be read.
    pub return_sites: Option<usize>,
}

/// What [`crate::init`] or [`crate::refresh`] built.
#[derive(Clone, Debug)]
pub struct PreloadReport {
    /// The new table's generation.
    pub generation: u32,
    /// Every module, sorted by address.
    pub modules: Vec<ModuleReport>,
    /// Wall time to discover, parse and publish.
    pub build_time: Duration,
    /// Of it, the time the dynamic loader's lock was held (other threads' `dlopen` and C++
    /// exception unwinding wait for it): module discovery and copies of new modules' unwind
    /// sections, not their parsing.
    pub loader_lock: Duration,
    /// Symbol files the process's JIT compilers listed through the GDB JIT interface whose rules
    /// the table has, as of the last read of its executable mappings.
    pub jit_symbol_files: usize,
    /// Those left out: unreadable, too large, without rules or code range, or describing code
    /// a newer one describes.
    pub jit_symbol_files_unusable: usize,
}

impl PreloadReport {
    pub(crate) fn new(
        generation: u32,
        parsed: &[ParsedModule],
        build_time: Duration,
        loader_lock: Duration,
    ) -> Self {
        let mut modules: Vec<_> = parsed
            .iter()
            .map(|p| ModuleReport {
                name: p.module.name.clone(),
                rows: p.parsed.rules.rows(),
                distinct_rules: p.parsed.rules.dictionary().len(),
                bytes: p.parsed.rules.bytes(),
                code_bytes: p.module.end.saturating_sub(p.module.start),
                code_without_rules: p.parsed.rules.bytes_without_rules(
                    p.module.start.wrapping_sub(p.module.bias),
                    p.module.end.wrapping_sub(p.module.bias),
                ),
                code_from_instructions: p.parsed.rules.bytes_with_rules_where(
                    p.module.start.wrapping_sub(p.module.bias),
                    p.module.end.wrapping_sub(p.module.bias),
                    Native::from_instructions,
                ),
                stats: p.parsed.stats.clone(),
                exidx: p.parsed.exidx.clone(),
                exidx_error: p.parsed.exidx_error,
                error: p.parsed.error.clone(),
                file_note: p.parsed.file_note.clone(),
                overlaps: p.overlaps.clone(),
                reused: p.reused,
                return_sites: p.parsed.return_sites.as_ref().map(|r| r.len()),
            })
            .collect();
        modules.sort_by(|a, b| a.name.cmp(&b.name));
        let (jit_symbol_files, jit_symbol_files_unusable) = crate::gdb_jit::counts();
        PreloadReport {
            generation,
            modules,
            build_time,
            loader_lock,
            jit_symbol_files,
            jit_symbol_files_unusable,
        }
    }

    /// Extents carrying a rule, over all modules.
    pub fn rows(&self) -> u64 {
        self.modules.iter().map(|m| m.rows).sum()
    }

    /// Sum of the modules' distinct rules.
    pub fn distinct_rules(&self) -> usize {
        self.modules.iter().map(|m| m.distinct_rules).sum()
    }

    /// Heap bytes of all rules.
    pub fn bytes(&self) -> usize {
        self.modules.iter().map(|m| m.bytes).sum()
    }

    /// Bytes per kept row.
    pub fn bytes_per_row(&self) -> f64 {
        self.bytes() as f64 / self.rows().max(1) as f64
    }
}

impl fmt::Display for ModuleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} rows, {} distinct rules, {:.2} bytes/row",
            self.name,
            self.rows,
            self.distinct_rules,
            self.bytes as f64 / self.rows.max(1) as f64
        )?;
        if self.code_bytes > 0 {
            write!(
                f,
                ", {} of {} code bytes ({:.1} %) without rules",
                self.code_without_rules,
                self.code_bytes,
                100.0 * self.code_without_rules as f64 / self.code_bytes as f64
            )?;
            if self.code_from_instructions > 0 {
                write!(
                    f,
                    ", {} ({:.1} %) with rules read from instructions",
                    self.code_from_instructions,
                    100.0 * self.code_from_instructions as f64 / self.code_bytes as f64
                )?;
            }
        }
        if let Some(n) = self.return_sites {
            write!(f, ", {n} return sites for scanning")?;
        }
        if let Some(s) = &self.stats {
            write!(
                f,
                ", {} FDEs, {} merged, {} dropped, {} PLT rows synthesized",
                s.fdes,
                s.table.merged,
                s.dropped_total(),
                s.plt_rows
            )?;
            for (reason, n) in s.drops() {
                write!(f, " [{}: {n}]", reason.name())?;
            }
            if s.handler_installs > 0 {
                write!(
                    f,
                    ", {} exception handler installs stopped",
                    s.handler_installs
                )?;
            }
            if s.handler_installs_unrecognised > 0 {
                write!(
                    f,
                    ", {} exception handler installs not recognised",
                    s.handler_installs_unrecognised
                )?;
            }
            if s.bad_entries > 0 {
                write!(f, ", {} bad entries", s.bad_entries)?;
                if let Some(first) = s.first_bad_entries.first() {
                    write!(f, " (first: {first})")?;
                }
            }
            if s.fdes_outside_code > 0 {
                write!(f, ", {} FDEs outside the code", s.fdes_outside_code)?;
                if let Some(first) = &s.first_fde_outside_code {
                    write!(f, " (first: {first})")?;
                }
            }
            for u in &s.unreadable_sections {
                write!(f, ", unreadable: {u}")?;
            }
        }
        if let Some(x) = &self.exidx {
            write!(
                f,
                ", .ARM.exidx: {} entries, {} rows, {} cantunwind",
                x.entries, x.rows, x.cant_unwind
            )?;
            if x.clipped > 0 {
                write!(
                    f,
                    " ({} rows end at their function's symbol, {} of them cantunwind, leaving {} \
                     bytes of functions without an entry)",
                    x.clipped, x.clipped_cant_unwind, x.bytes_without_entry
                )?;
            }
            for d in &x.first_dropped {
                let n = x.dropped_for(d.reason);
                write!(f, " [{} {n} dropped, first: {d}]", d.reason)?;
            }
        }
        if let Some(e) = &self.exidx_error {
            write!(f, ", .ARM.exidx unreadable (DWARF rows kept): {e}")?;
        }
        if let Some(e) = &self.error {
            write!(f, ", no rules: {e}")?;
        }
        if let Some(o) = &self.overlaps {
            write!(f, ", LEFT OUT: {o}")?;
        }
        if let Some(n) = &self.file_note {
            write!(f, ", file not read: {n}")?;
        }
        if self.reused {
            f.write_str(" (reused)")?;
        }
        Ok(())
    }
}

impl fmt::Display for PreloadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "preload: {} modules, {} rows, {} distinct rules, {:.2} bytes/row, {} bytes, {:.1} ms \
             ({:.1} ms holding the loader's lock) (generation {})",
            self.modules.len(),
            self.rows(),
            self.distinct_rules(),
            self.bytes_per_row(),
            self.bytes(),
            self.build_time.as_secs_f64() * 1e3,
            self.loader_lock.as_secs_f64() * 1e3,
            self.generation
        )?;
        if self.jit_symbol_files + self.jit_symbol_files_unusable > 0 {
            writeln!(
                f,
                "  GDB JIT interface: {} symbol files' rules, {} left out",
                self.jit_symbol_files, self.jit_symbol_files_unusable
            )?;
        }
        for m in &self.modules {
            writeln!(f, "  {m}")?;
        }
        Ok(())
    }
}

/// Loads the unwind tables of an ELF file of this architecture the way preload would and
/// reports them, with the time taken.
pub fn preload_file(path: &Path) -> Result<(ModuleReport, Duration), unwind_dwarf::DwarfError> {
    let started = Instant::now();
    let loaded = unwind_dwarf::load_elf_file::<crate::arch::Native>(path)?;
    let elapsed = started.elapsed();
    let (exidx, exidx_error) = Native::report_extra(&loaded.stats.arch);
    let (lo, hi) = loaded.stats.code_range.unwrap_or((0, 0));
    Ok((
        ModuleReport {
            name: path.display().to_string(),
            rows: loaded.rules.rows(),
            distinct_rules: loaded.rules.dictionary().len(),
            bytes: loaded.rules.bytes(),
            code_bytes: hi.saturating_sub(lo),
            code_without_rules: loaded.rules.bytes_without_rules(lo, hi),
            code_from_instructions: loaded.rules.bytes_with_rules_where(
                lo,
                hi,
                Native::from_instructions,
            ),
            stats: Some(loaded.stats.cfi),
            exidx,
            exidx_error,
            error: None,
            file_note: None,
            overlaps: None,
            reused: false,
            return_sites: None,
        },
        elapsed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use unwind_dwarf::{DroppedEntry, ExidxDropReason};

    #[test]
    fn exidx_findings_are_in_the_module_line_with_section_and_offset() {
        let mut exidx = ExidxStats {
            entries: 40,
            rows: 30,
            cant_unwind: 9,
            clipped: 2,
            clipped_cant_unwind: 1,
            bytes_without_entry: 0x180,
            ..ExidxStats::default()
        };
        exidx.dropped[ExidxDropReason::ExtabOutOfRange as usize] = 1;
        exidx.first_dropped.push(DroppedEntry {
            index: 5,
            start: 0x8010,
            reason: ExidxDropReason::ExtabOutOfRange,
        });
        let report = ModuleReport {
            name: "/lib/libbad.so".into(),
            rows: 12,
            distinct_rules: 3,
            bytes: 100,
            code_bytes: 0x1000,
            code_without_rules: 0x200,
            code_from_instructions: 0x400,
            stats: None,
            exidx: Some(exidx),
            exidx_error: Some(ExidxError::NotSorted {
                index: 3,
                start: 0x100,
                previous: 0x200,
            }),
            error: None,
            file_note: None,
            overlaps: None,
            reused: false,
            return_sites: Some(1234),
        };
        let line = report.to_string();
        assert!(line.contains(", 1234 return sites for scanning"), "{line}");
        assert!(line.starts_with("/lib/libbad.so: 12 rows"), "{line}");
        assert!(
            line.contains(
                ", 512 of 4096 code bytes (12.5 %) without rules, 1024 (25.0 %) with rules read \
                 from instructions"
            ),
            "{line}"
        );
        assert!(
            line.contains(
                ", .ARM.exidx: 40 entries, 30 rows, 9 cantunwind (2 rows end at their function's \
                 symbol, 1 of them cantunwind, leaving 384 bytes of functions without an entry) \
                 [extab-out-of-range 1 dropped, first: .ARM.exidx entry 5 (offset 0x28, function \
                 0x8010): extab-out-of-range]"
            ),
            "{line}"
        );
        assert!(
            line.contains(
                ", .ARM.exidx unreadable (DWARF rows kept): .ARM.exidx entry 3 (offset 0x18): \
                 function start 0x100 is below"
            ),
            "{line}"
        );
    }
}
