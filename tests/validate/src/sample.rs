//! A sample read back from its minidump: the registers, the stack copy, the modules, and the
//! frames our unwinder found in the signal handler (`unwind_samples::minidump::UNWOUND_STREAM`).

use std::path::{Path, PathBuf};

use minidump::format::CONTEXT_AMD64;
use minidump::{
    Minidump, MinidumpMemoryList, MinidumpModuleList, MinidumpRawContext, MinidumpSystemInfo,
    MinidumpThreadList, Module,
};
use unwind_dwarf::Architecture;
use unwind_in_process::StopReason;
use unwind_samples::Context;

/// A module of the sampled process.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SampleModule {
    /// The path the sampled process saw.
    pub code_file: String,
    /// Where its image starts (Breakpad's module base).
    pub base: u64,
    /// Bytes of image.
    pub size: u64,
    /// Breakpad debug id (33 hex digits), from the CodeView record's build id.
    pub debug_id: String,
}

impl SampleModule {
    /// The file name, as symbol stores key it.
    pub fn name(&self) -> &str {
        self.code_file.rsplit('/').next().unwrap_or(&self.code_file)
    }

    /// Whether `addr` is inside the image.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.size
    }
}

/// One sample.
pub struct Sample {
    /// The minidump file.
    pub path: PathBuf,
    /// Its bytes (kept for the Breakpad walker).
    pub bytes: Vec<u8>,
    /// Architecture (from the context).
    pub arch: Architecture,
    /// Registers.
    pub context: Context,
    /// Address of `stack[0]`.
    pub stack_base: u64,
    /// The stack copy.
    pub stack: Vec<u8>,
    /// Modules, as listed.
    pub modules: Vec<SampleModule>,
    /// Frames found in the signal handler: frame 0's PC, then return addresses.
    pub ours: Vec<u64>,
    /// Why our walk stopped.
    pub stop: StopReason,
    /// OS and CPU, as the trace header prints them.
    pub system: unwind_samples::trace::System,
}

impl Sample {
    /// Reads a sample's minidump.
    pub fn load(path: &Path) -> Result<Sample, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let err =
            |what: &str, e: &dyn std::fmt::Display| format!("{}: {what}: {e}", path.display());
        let dump = Minidump::read(&bytes[..]).map_err(|e| err("minidump", &e))?;
        let system: MinidumpSystemInfo = dump.get_stream().map_err(|e| err("system info", &e))?;
        let csd = system.csd_version();
        let trace_system =
            unwind_samples::trace::System::from_minidump(&system.raw, csd.as_deref());
        let threads: MinidumpThreadList = dump.get_stream().map_err(|e| err("threads", &e))?;
        let thread = threads
            .threads
            .first()
            .ok_or_else(|| err("threads", &"none"))?;
        let context = thread
            .context(&system, None)
            .ok_or_else(|| err("context", &"missing"))?;
        let (arch, context) = match &context.raw {
            MinidumpRawContext::Amd64(c) => (Architecture::X86_64, amd64(c)),
            MinidumpRawContext::Arm(c) => (
                Architecture::Arm,
                Context::Arm {
                    iregs: c.iregs,
                    cpsr: c.cpsr,
                },
            ),
            MinidumpRawContext::Arm64(c) => (
                Architecture::Aarch64,
                Context::Aarch64 {
                    iregs: c.iregs,
                    sp: c.sp,
                    pc: c.pc,
                    cpsr: c.cpsr,
                    // Written apart by the sampled process (`CONTEXT_ARM64` has no place for it).
                    pointer_mask: dump
                        .get_raw_stream(unwind_samples::minidump::POINTER_MASK_STREAM)
                        .ok()
                        .and_then(unwind_samples::minidump::parse_pointer_mask)
                        .unwrap_or(0),
                },
            ),
            _ => return Err(err("context", &"not x86_64, ARM or aarch64")),
        };
        let memory: MinidumpMemoryList = dump.get_stream().map_err(|e| err("memory", &e))?;
        let stack_start = thread.raw.stack.start_of_memory_range;
        let region = memory
            .by_addr()
            .find(|m| m.base_address == stack_start)
            .ok_or_else(|| err("stack", &"no memory region at the thread's stack"))?;
        let (stack_base, stack) = (region.base_address, region.bytes.to_vec());
        let list: MinidumpModuleList = dump.get_stream().map_err(|e| err("modules", &e))?;
        let modules = list
            .iter()
            .map(|m| SampleModule {
                code_file: m.code_file().into_owned(),
                base: m.base_address(),
                size: m.size(),
                debug_id: m
                    .debug_identifier()
                    .map_or_else(String::new, |d| d.breakpad().to_string()),
            })
            .collect();
        let raw = dump
            .get_raw_stream(unwind_samples::minidump::UNWOUND_STREAM)
            .map_err(|e| err("unwound stream", &e))?;
        let (ours, stop) = unwind_samples::minidump::parse_unwound(raw)
            .ok_or_else(|| err("unwound stream", &"malformed"))?;
        drop(dump);
        Ok(Sample {
            path: path.to_path_buf(),
            bytes,
            arch,
            context,
            stack_base,
            stack,
            modules,
            ours,
            stop,
            system: trace_system,
        })
    }

    /// The modules as trace lines name them (the main program first, as in the minidump).
    pub fn trace_modules(&self) -> Vec<unwind_samples::trace::TraceModule> {
        self.modules
            .iter()
            .map(|m| unwind_samples::trace::TraceModule {
                code_file: m.code_file.clone(),
                version: String::new(),
                debug_file: m.code_file.clone(),
                debug_id: m.debug_id.clone(),
                base: m.base,
                size: m.size,
            })
            .collect()
    }

    /// The module holding `addr`.
    pub fn module_of(&self, addr: u64) -> Option<&SampleModule> {
        self.modules.iter().find(|m| m.contains(addr))
    }
}

/// An x86_64 minidump context in the order of [`Context::X86_64`].
fn amd64(c: &CONTEXT_AMD64) -> Context {
    Context::X86_64 {
        regs: [
            c.rax, c.rcx, c.rdx, c.rbx, c.rsp, c.rbp, c.rsi, c.rdi, c.r8, c.r9, c.r10, c.r11,
            c.r12, c.r13, c.r14, c.r15, c.rip,
        ],
        eflags: c.eflags,
    }
}
