//! Rule tables for samples unwound away from the process that took them (on another host, or
//! another architecture: armv7 samples unwind on x86_64): each module's rules are read from its
//! ELF file on disk and placed at the load bias recorded with the sample.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;

use unwind_core::table::{ModuleRules, RuleTable, RuleTableBuilder, TableError};

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

/// Modules whose file could not be read, with why.
pub type FileErrors = Vec<(PathBuf, unwind_dwarf::DwarfError)>;

/// Builds a table (generation `generation`) of architecture `A` from module files, on any host:
/// [`unwind_dwarf::X86_64`], or [`unwind_dwarf::Arm`] (`.debug_frame`/`.eh_frame` where present,
/// `.ARM.exidx` elsewhere) for unwinding armv7 samples. A module whose file cannot be read gets
/// no rules (the unwinder falls back to frame pointers there); its error is returned alongside.
pub fn table_from_files<A: unwind_dwarf::DwarfArch>(
    modules: &[ModuleFile],
    generation: NonZeroU32,
) -> Result<(RuleTable<A::Rule>, FileErrors), TableError> {
    table_from_files_with::<A>(modules, generation, false)
}

/// [`table_from_files`], with stack scanning on if `scan` (each module's return sites read
/// from its file: [`unwind_dwarf::return_sites_from_elf`]).
pub fn table_from_files_with<A: unwind_dwarf::DwarfArch>(
    modules: &[ModuleFile],
    generation: NonZeroU32,
    scan: bool,
) -> Result<(RuleTable<A::Rule>, FileErrors), TableError> {
    let mut builder = RuleTableBuilder::new(generation);
    builder.scan_stack(scan);
    let mut errors = Vec::new();
    for m in modules {
        // One mapping of the file for its rules and, when scanning, its return sites.
        let (rules, return_sites) = unwind_dwarf::with_mapped_file(&m.path, |data| {
            let sites = scan.then(|| unwind_dwarf::return_sites_from_elf::<A>(data).ok());
            (
                unwind_dwarf::rules_from_elf::<A>(data),
                sites.flatten().map(Arc::new),
            )
        })
        .unwrap_or_else(|e| (Err(e), None));
        let rules = match rules {
            Ok(loaded) => loaded.rules,
            Err(e) => {
                errors.push((m.path.clone(), e));
                ModuleRules::empty()
            }
        };
        builder
            .add(
                m.start,
                m.end,
                m.bias,
                m.path.display().to_string(),
                Arc::new(rules),
            )
            .return_sites = return_sites;
    }
    Ok((builder.build()?, errors))
}

/// ARM registers from the words the sample formats write, in the order `pc lr sp r12 r11 r7`.
pub(crate) fn arm_regs([pc, lr, sp, r12, r11, r7]: [u32; 6]) -> unwind_core::arm::Regs {
    unwind_core::arm::Regs {
        pc,
        lr,
        sp,
        r12,
        r11,
        r7,
    }
}

/// An armv7 sample as the test agent writes it: registers, a copy of the stack, the PCs found
/// in the signal handler, and the modules (paths as the sampled process saw them).
///
/// File format: text lines `regs arm PC LR SP R12 R11 R7`, `stack BASE LEN`, `pcs A,B,...`,
/// `module START END BIAS PATH`, then `---` and the stack bytes.
#[derive(Clone, Debug, Default)]
pub struct ArmSample {
    /// The interrupted registers.
    pub regs: unwind_core::arm::Regs,
    /// Address of `bytes[0]`.
    pub base: u64,
    /// The stack copy.
    pub bytes: Vec<u8>,
    /// The PCs the unwinder found when the sample was taken.
    pub pcs: Vec<u64>,
    /// The modules of the sampled process.
    pub modules: Vec<ModuleFile>,
}

impl ArmSample {
    /// Reads a sample; module paths are looked up under `sysroot` first when given (samples
    /// taken under `qemu-arm -L SYSROOT` name the files as the guest saw them).
    pub fn load(path: &std::path::Path, sysroot: Option<&std::path::Path>) -> Option<Self> {
        let data = std::fs::read(path).ok()?;
        let split = data.windows(4).position(|w| w == b"---\n")?;
        let head = std::str::from_utf8(&data[..split]).ok()?;
        let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok();
        let mut s = ArmSample {
            bytes: data[split + 4..].to_vec(),
            ..ArmSample::default()
        };
        for line in head.lines() {
            let f: Vec<&str> = line.splitn(5, ' ').collect();
            match f.first().copied() {
                Some("regs") => {
                    let v: Vec<u32> = line
                        .split(' ')
                        .skip(2)
                        .filter_map(hex)
                        .map(|x| x as u32)
                        .collect();
                    s.regs = arm_regs(v.as_slice().try_into().ok()?);
                }
                Some("stack") => s.base = hex(f.get(1)?)?,
                Some("pcs") => s.pcs = f.get(1)?.split(',').filter_map(hex).collect(),
                Some("module") => {
                    let recorded = PathBuf::from(*f.get(4)?);
                    let path = sysroot
                        .map(|r| r.join(recorded.strip_prefix("/").unwrap_or(&recorded)))
                        .filter(|p| p.exists())
                        .unwrap_or(recorded);
                    s.modules.push(ModuleFile {
                        path,
                        start: hex(f.get(1)?)?,
                        end: hex(f.get(2)?)?,
                        bias: hex(f.get(3)?)?,
                    });
                }
                _ => {}
            }
        }
        Some(s)
    }
}
