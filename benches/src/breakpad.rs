//! The Breakpad-compatible walker of rust-minidump (`minidump-unwind`), reading `STACK CFI`
//! from `dump_syms` symbol files, set up from a sample's modules.
//!
//! Symbol files are found by module file name (`SYMS/<file name>.sym`) rather than by debug id,
//! so that a sample needs no minidump here; a symbol file is loaded on first use and cached by
//! the symbolizer, so the walks measured after a warm-up exclude symbol-file loading.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use minidump::format::CONTEXT_AMD64;
use minidump::{
    Endian, MinidumpContext, MinidumpMemory, MinidumpModule, MinidumpModuleList,
    MinidumpRawContext, Module, UnifiedMemory,
};
use minidump_unwind::{
    walk_stack, CallStack, FileError, FileKind, LocateSymbolsResult, SymbolError, SymbolFile,
    SymbolSupplier, Symbolizer, SystemInfo,
};
use object::{Object, ObjectSegment};

use crate::sample::Sample;

/// Symbol files by module path.
struct ByName {
    files: HashMap<String, PathBuf>,
}

#[async_trait::async_trait]
impl SymbolSupplier for ByName {
    async fn locate_symbols(
        &self,
        module: &(dyn Module + Sync),
    ) -> Result<LocateSymbolsResult, SymbolError> {
        let path = self
            .files
            .get(module.code_file().as_ref())
            .ok_or(SymbolError::NotFound)?;
        let bytes = std::fs::read(path)?;
        Ok(LocateSymbolsResult {
            symbols: SymbolFile::from_bytes(&bytes)?,
            extra_debug_info: None,
        })
    }

    async fn locate_file(
        &self,
        _module: &(dyn Module + Sync),
        _kind: FileKind,
    ) -> Result<PathBuf, FileError> {
        Err(FileError::NotFound)
    }
}

/// The symbol file `dump_syms` writes for `module` in `syms`.
pub fn sym_path(syms: &Path, module: &Path) -> PathBuf {
    let name = module
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    syms.join(format!("{name}.sym"))
}

/// A module's image base (where its lowest `PT_LOAD` is mapped), which `STACK CFI` addresses
/// are relative to.
fn image_base(path: &Path, bias: u64) -> Option<u64> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let lowest = file.segments().map(|s| s.address()).min()?;
    Some(bias.wrapping_add(lowest))
}

/// The walker with a sample's modules and their symbol files.
pub struct Breakpad {
    modules: MinidumpModuleList,
    symbolizer: Symbolizer,
    system: SystemInfo,
}

impl Breakpad {
    /// Sets up the modules of `sample` with the symbol files found in `syms`.
    pub fn new(sample: &Sample, syms: &Path) -> Self {
        let mut files = HashMap::new();
        let mut modules = Vec::new();
        for m in &sample.modules {
            let base = image_base(&m.path, m.bias).unwrap_or(m.start);
            let size = u32::try_from(m.end.saturating_sub(base)).unwrap_or(u32::MAX);
            let name = m.path.to_string_lossy().into_owned();
            let sym = sym_path(syms, &m.path);
            if sym.exists() {
                files.insert(name.clone(), sym);
            }
            modules.push(MinidumpModule::new(base, size, &name));
        }
        Breakpad {
            modules: MinidumpModuleList::from_modules(modules),
            symbolizer: Symbolizer::new(ByName { files }),
            system: SystemInfo {
                os: minidump::system_info::Os::Linux,
                os_version: None,
                os_build: None,
                cpu: minidump::system_info::Cpu::X86_64,
                cpu_info: None,
                cpu_microcode_version: None,
                cpu_count: 1,
            },
        }
    }

    /// One walk of `sample`; writes each frame's instruction address into `pcs` and returns
    /// the frame count.
    #[inline(never)]
    pub fn unwind(&self, sample: &Sample, pcs: &mut [u64]) -> usize {
        let raw = CONTEXT_AMD64 {
            rip: sample.regs.pc,
            rsp: sample.regs.sp,
            rbp: sample.regs.fp,
            ..CONTEXT_AMD64::default()
        };
        let mut stack =
            CallStack::with_context(MinidumpContext::from_raw(MinidumpRawContext::Amd64(raw)));
        let memory = MinidumpMemory {
            desc: Default::default(),
            base_address: sample.base,
            size: sample.stack.len() as u64,
            bytes: &sample.stack,
            endian: Endian::Little,
        };
        unwind_validate::walk::block_on(walk_stack(
            0,
            (),
            &mut stack,
            Some(UnifiedMemory::Memory(&memory)),
            &self.modules,
            &self.system,
            &self.symbolizer,
        ));
        for (slot, frame) in pcs.iter_mut().zip(&stack.frames) {
            *slot = frame.instruction;
        }
        stack.frames.len().min(pcs.len())
    }
}
