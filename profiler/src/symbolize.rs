//! Symbolization, after sampling: addresses to functions (inlined ones included), files and
//! lines with `addr2line`, demangled; symbol tables where there is no debug information.
//!
//! Debug information is looked for in the module's file and, by build id, in
//! `/usr/lib/debug/.build-id/` (where distributions install it, e.g. Debian's `libc6-dbg`),
//! which `addr2line`'s loader does not search itself.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::profile::{Frame, Module};
use unwind_samples::offline::ModuleFile;
use unwind_samples::symbolize::has_file;

/// The files of one module that can name its addresses.
struct Sources {
    /// Loaders for the separate debug file (first) and the module's own file.
    loaders: Vec<addr2line::Loader>,
}

/// Symbolizes addresses in the modules of a profile.
pub struct Symbolizer {
    modules: Vec<Module>,
    sources: HashMap<usize, Sources>,
    /// Symbol tables (dynamic ones included) and the vdso's image: the fallback for names.
    symbols: unwind_samples::symbolize::Symbolizer,
}

/// The separate debug file for a build id, if installed.
fn debug_file(build_id: &str) -> Option<PathBuf> {
    if build_id.len() < 3 {
        return None;
    }
    let p = Path::new("/usr/lib/debug/.build-id")
        .join(&build_id[..2])
        .join(format!("{}.debug", &build_id[2..]));
    p.is_file().then_some(p)
}

impl Symbolizer {
    /// A symbolizer for `modules`; `vdso_image` names the vdso's functions.
    pub fn new(modules: &[Module], vdso_image: Option<&[u8]>) -> Symbolizer {
        let files: Vec<ModuleFile> = modules
            .iter()
            .map(|m| ModuleFile {
                path: PathBuf::from(&m.path),
                start: m.start,
                end: m.end,
                bias: m.bias,
            })
            .collect();
        Symbolizer {
            modules: modules.to_vec(),
            sources: HashMap::new(),
            symbols: unwind_samples::symbolize::Symbolizer::new(&files, vdso_image),
        }
    }

    fn sources(&mut self, module: usize) -> &Sources {
        let m = &self.modules[module];
        let (path, build_id) = (m.path.clone(), m.build_id.clone());
        self.sources.entry(module).or_insert_with(|| {
            let loaders = debug_file(&build_id)
                .into_iter()
                .chain(Some(PathBuf::from(path)).filter(|p| has_file(p) && p.is_file()))
                .filter_map(|p| addr2line::Loader::new(&p).ok())
                .collect();
            Sources { loaders }
        })
    }

    /// The frames at `address` in `module` (innermost first; never empty). A return address
    /// (`leaf` false) is looked up one byte back, inside its call instruction.
    pub fn frames(&mut self, module: Option<usize>, address: u64, leaf: bool) -> Vec<Frame> {
        let probe_at = code_address(address, leaf);
        let Some(mi) = module.filter(|&i| i < self.modules.len()) else {
            return vec![unknown(address)];
        };
        let bias = self.modules[mi].bias;
        let probe = probe_at.wrapping_sub(bias);
        let mut frames = Vec::new();
        for loader in &self.sources(mi).loaders {
            if let Ok(mut iter) = loader.find_frames(probe) {
                while let Ok(Some(f)) = iter.next() {
                    let Some(name) = f.function.as_ref().and_then(|n| n.demangle().ok()) else {
                        continue;
                    };
                    frames.push(Frame {
                        function: name.into_owned(),
                        file: f.location.as_ref().and_then(|l| l.file).map(str::to_owned),
                        line: f.location.as_ref().and_then(|l| l.line),
                    });
                }
            }
            if !frames.is_empty() {
                return frames;
            }
        }
        // No debug information: the symbol tables.
        for loader in &self.sources(mi).loaders {
            if let Some(name) = loader.find_symbol(probe) {
                return vec![symbol_frame(name)];
            }
        }
        if let Some(f) = self.symbols.lookup(probe_at).and_then(|s| s.function) {
            return vec![symbol_frame(f)];
        }
        let m = &self.modules[mi];
        vec![Frame {
            function: format!("{}+{:#x}", basename(&m.path), probe),
            file: None,
            line: None,
        }]
    }
}

fn symbol_frame(name: &str) -> Frame {
    Frame {
        function: addr2line::demangle_auto(name.into(), None).into_owned(),
        file: None,
        line: None,
    }
}

fn unknown(address: u64) -> Frame {
    Frame {
        function: format!("[unknown]+{address:#x}"),
        file: None,
        line: None,
    }
}

/// The address whose code a frame is in: a leaf's PC, or for a return address the byte before
/// it (inside the call instruction: the return address itself may start another function).
pub fn code_address(pc: u64, leaf: bool) -> u64 {
    if leaf {
        pc
    } else {
        pc.saturating_sub(1)
    }
}

/// The file name of a path.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
