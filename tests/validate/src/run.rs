//! The sample validation of one architecture, end to end: sample the programs, write both
//! symbol stores, walk every minidump with the Breakpad-compatible walker (for each choice of
//! symbol files) and with our unwinder, compare, and tally.

use std::collections::BTreeMap;
use std::path::Path;

use minidump_unwind::Symbolizer;

use crate::compare::{arbitrate, compare, Tally};
use unwind_dwarf::Architecture;

use crate::programs::{minidumps, sample_programs, ProgramRun, Sampling};
use crate::sample::Sample;
use crate::stores::{Stores, Symbols};
use crate::walk::{breakpad_walk, Tables};

/// One program's results.
#[derive(Debug)]
pub struct ProgramResult {
    /// The program.
    pub run: ProgramRun,
    /// Per choice of symbol files.
    pub tallies: BTreeMap<Symbols, Tally>,
}

/// One architecture's results.
#[derive(Debug)]
pub struct ArchResult {
    /// The architecture.
    pub arch: Architecture,
    /// Per program.
    pub programs: Vec<ProgramResult>,
    /// The symbol stores used.
    pub stores: Stores,
}

impl ArchResult {
    /// All programs together, for one choice of symbol files.
    pub fn total(&self, choice: Symbols) -> Tally {
        let mut t = Tally::default();
        for p in &self.programs {
            if let Some(x) = p.tallies.get(&choice) {
                t.add(x);
            }
        }
        t
    }
}

/// Samples `arch`'s programs and validates every sample.
pub fn validate_arch(
    arch: Architecture,
    sampling: &Sampling,
    dump_syms: &Path,
) -> Result<ArchResult, String> {
    let runs = sample_programs(arch, sampling)?;
    validate_runs(arch, runs, dump_syms)
}

/// Validates the minidumps of `runs` (all of architecture `arch`), however they were taken:
/// each must hold the frames its process unwound (`unwind_samples::minidump::UNWOUND_STREAM`).
pub fn validate_runs(
    arch: Architecture,
    runs: Vec<ProgramRun>,
    dump_syms: &Path,
) -> Result<ArchResult, String> {
    let mut loaded = Vec::new();
    for run in runs {
        let mut samples = Vec::new();
        let mut errors = Vec::new();
        for path in minidumps(&run.samples) {
            match Sample::load(&path) {
                Ok(s) => samples.push(s),
                Err(e) => errors.push(e),
            }
        }
        if samples.is_empty() {
            return Err(format!(
                "{} {}: no samples in {} ({errors:?})",
                arch.name(),
                run.name,
                run.samples.display()
            ));
        }
        loaded.push((run, samples, errors));
    }
    let mut modules: Vec<_> = loaded
        .iter()
        .flat_map(|(_, s, _)| s.iter().flat_map(|s| s.modules.iter().cloned()))
        .collect();
    modules.sort();
    modules.dedup();
    let root = crate::tools::workspace_root()
        .join("target")
        .join("validation")
        .join(arch.name())
        .join("symbols");
    let _ = std::fs::remove_dir_all(&root);
    let stores = Stores::build(&root, &modules, arch, dump_syms);
    let symbolizers: Vec<(Symbols, Symbolizer, crate::stores::Supplier)> = Symbols::ALL
        .iter()
        .map(|&c| (c, Symbolizer::new(stores.supplier(c)), stores.supplier(c)))
        .collect();
    let mut tables = Tables::default();
    let mut traces = crate::traces::Traces::default();
    let verbose = std::env::var_os("VALIDATE_VERBOSE").is_some();
    let mut programs = Vec::new();
    for (run, samples, errors) in loaded {
        let mut tallies: BTreeMap<Symbols, Tally> = BTreeMap::new();
        for s in &samples {
            let offline = tables.walk(s);
            if let (true, Some(w)) = (verbose, &offline) {
                if w.frames != s.ours {
                    eprintln!(
                        "{}: the offline walk differs from the handler's: offline {:x?} stop {:?}, handler {:x?} stop {:?}",
                        s.path.display(),
                        w.frames,
                        w.stop,
                        s.ours,
                        s.stop
                    );
                }
            }
            for (choice, symbolizer, supplier) in &symbolizers {
                let tally = tallies.entry(*choice).or_default();
                match breakpad_walk(s, symbolizer) {
                    Ok(theirs) => {
                        let has = |a: u64| s.module_of(a).and_then(|m| supplier.source(m));
                        if *choice == Symbols::Combined && traces.write(s, &theirs) {
                            tally.identical_traces += 1;
                        }
                        let before = tally.identical_stacks;
                        let same = compare(s, &theirs, offline.as_ref(), &has, tally);
                        if let (false, Symbols::Combined, Some(known)) =
                            (same, *choice, run.known.as_ref())
                        {
                            let sym = traces.symbolizer(s);
                            let names = |pcs: &[u64]| frame_names(s, sym, pcs);
                            arbitrate(s, &theirs, known, &names, tally);
                        }
                        if verbose && tally.identical_stacks == before {
                            eprintln!(
                                "{} {:?}: ours {:x?} stop {:?}",
                                s.path.display(),
                                choice,
                                s.ours,
                                s.stop
                            );
                            for f in &theirs {
                                eprintln!(
                                    "   {:#x} {:?} {:?} {:?}",
                                    f.address,
                                    f.trust,
                                    f.function,
                                    s.module_of(f.address).map(|m| m.name())
                                );
                            }
                        }
                    }
                    Err(e) => tally.errors.push(format!("{}: {e}", s.path.display())),
                }
            }
        }
        for t in tallies.values_mut() {
            t.errors.extend(errors.iter().cloned());
        }
        programs.push(ProgramResult { run, tallies });
    }
    Ok(ArchResult {
        arch,
        programs,
        stores,
    })
}

/// `(module file name, function)` of each frame (frame 0 at its PC, callers at their call
/// site), as the programs test names the frames of the agent's reports: `?+0x...` for an
/// address in a module without a symbol there, `?!0x...` for one in no module.
pub fn frame_names(
    s: &Sample,
    sym: &unwind_samples::symbolize::Symbolizer,
    pcs: &[u64],
) -> Vec<(String, String)> {
    pcs.iter()
        .enumerate()
        .map(|(i, &pc)| {
            let symbol = match (i, s.arch) {
                (0, Architecture::Arm) => sym.lookup(pc & !1),
                (0, _) => sym.lookup(pc),
                _ => sym.lookup_return_address(pc),
            };
            match symbol {
                Some(found) => {
                    let module = found.module.rsplit('/').next().unwrap_or(found.module);
                    let function = found
                        .function
                        .map_or_else(|| format!("?+{:#x}", found.offset), str::to_string);
                    (module.to_string(), function)
                }
                None => ("?".to_string(), format!("?!{pc:#x}")),
            }
        })
        .collect()
}
