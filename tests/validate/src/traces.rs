//! Both walks of a sample printed in the shape of Breakpad's `minidump_stackwalk -m`
//! (`unwind_samples::trace`), named by the same symbolizer, so that they can be diffed as text:
//! `NNNN.ours.trace` and `NNNN.breakpad.trace` next to `NNNN.dmp`.

use std::collections::HashMap;
use std::path::PathBuf;

use unwind_dwarf::Architecture;
use unwind_samples::offline::ModuleFile;
use unwind_samples::symbolize::Symbolizer;

use crate::programs::host_path;
use crate::sample::{Sample, SampleModule};
use crate::walk::BreakpadFrame;

/// Symbolizers over the modules' files on this host, one per distinct module list.
#[derive(Default)]
pub struct Traces {
    symbolizers: HashMap<Vec<SampleModule>, Symbolizer>,
}

impl Traces {
    /// The symbolizer for `s`'s module list (made on first use).
    pub fn symbolizer(&mut self, s: &Sample) -> &Symbolizer {
        self.symbolizers
            .entry(s.modules.clone())
            .or_insert_with(|| {
                let modules: Vec<ModuleFile> = s
                    .modules
                    .iter()
                    .map(|m| {
                        let path = host_path(&m.code_file, s.arch);
                        let svma = crate::walk::image_base_svma(&path);
                        ModuleFile {
                            bias: m.base.wrapping_sub(svma.unwrap_or(0)),
                            start: m.base,
                            end: m.base.saturating_add(m.size),
                            path,
                        }
                    })
                    .collect();
                // The vdso's path is the image the agent saved with the samples.
                Symbolizer::new(&modules, None)
            })
    }

    /// Writes both traces of `s`; returns whether their frame lines are identical.
    pub fn write(&mut self, s: &Sample, theirs: &[BreakpadFrame]) -> bool {
        let modules = s.trace_modules();
        let system = s.system.clone();
        let sym = self.symbolizer(s);
        let lookup = unwind_samples::trace::symbolizer_lookup(sym);
        let bp: Vec<u64> = theirs.iter().map(|f| f.address).collect();
        // Frame 0 as the context holds it: an ARM PC has no Thumb bit (CPSR.T says Thumb).
        let mut our_frames = s.ours.clone();
        if let (Architecture::Arm, Some(pc)) = (s.arch, our_frames.first_mut()) {
            *pc &= !1;
        }
        let ours =
            unwind_samples::trace::machine_readable(&system, &modules, &[&our_frames], &lookup);
        let breakpad = unwind_samples::trace::machine_readable(&system, &modules, &[&bp], &lookup);
        let path = |kind: &str| -> PathBuf { s.path.with_extension(format!("{kind}.trace")) };
        let _ = std::fs::write(path("ours"), &ours);
        let _ = std::fs::write(path("breakpad"), &breakpad);
        ours == breakpad
    }
}
