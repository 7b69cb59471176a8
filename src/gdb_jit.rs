//! Code a JIT compiler describes through the GDB JIT interface (`__jit_debug_descriptor`: LLVM's
//! ORC JIT, LuaJIT built with GDB support, Android's ART): each symbol file it lists is an ELF
//! image at the code's own addresses, whose CFI gives that code's rules (load bias 0) and whose
//! symbol table names it. Read at each refresh, from this process's memory with
//! `process_vm_readv` (which fails, rather than faults, on memory freed meanwhile), by
//! [`unwind_gdb_jit`], which reads a list the JIT changes meanwhile again.
//!
//! The descriptor is found where gdb finds it: by its symbol, exported by any loaded module
//! ([`crate::exported`]) or in the executable's own symbol table (a JIT linked into the program
//! without `-rdynamic`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::arch::Native;
use crate::jitdump::Described;
use unwind_gdb_jit::{Function, Layout, Limits, Memory};

/// The layout of the descriptor and its entries in this process.
#[cfg(target_arch = "x86_64")]
const LAYOUT: Layout = Layout::X86_64;
#[cfg(target_arch = "aarch64")]
const LAYOUT: Layout = Layout::AARCH64;
#[cfg(target_arch = "arm")]
const LAYOUT: Layout = Layout::ARM;

/// What a refresh reads at most: symbol files are small (one function or one compiled module
/// each), and this runs in the profiled program.
const LIMITS: Limits = Limits {
    entries: 100_000,
    symfile_bytes: 16 << 20,
    total_bytes: 256 << 20,
    tries: 16,
};

/// This process's memory.
struct Own;

impl Memory for Own {
    fn read(&self, address: u64, buf: &mut [u8]) -> bool {
        crate::mappings::read_own_into(address, buf)
    }
}

/// The code the process's JIT compilers describe: each symbol file's code range, rules and
/// functions.
#[derive(Default)]
pub(crate) struct JitCode {
    /// Rules by code range (as a jitdump file's are).
    pub described: Vec<Described>,
    /// The functions the symbol files name.
    pub functions: Vec<Function>,
    /// Symbol files that could not be used: unreadable, too large, or without rules or code
    /// range.
    pub unusable: usize,
}

/// The symbol files of every descriptor of the process (see the module docs). `program_bias`
/// is the executable's load bias.
pub(crate) fn read(program_bias: Option<u64>) -> JitCode {
    PROGRAM_BIAS.store(program_bias.unwrap_or(NO_BIAS), Ordering::Relaxed);
    let mut code = JitCode::default();
    for descriptor in descriptors(program_bias) {
        let Ok(list) = unwind_gdb_jit::read_symfiles(&Own, descriptor, LAYOUT, &LIMITS) else {
            continue;
        };
        code.unusable += list.unreadable + list.too_large;
        for symfile in &list.symfiles {
            let rules = unwind_dwarf::rules_from_memory_image::<Native>(&symfile.relocated());
            match (symfile.code_range(), rules) {
                (Some((start, end)), Ok(loaded)) if start < end => {
                    code.described.push(Described {
                        start,
                        end,
                        rules: loaded.rules,
                    });
                    code.functions.extend(symfile.functions());
                }
                _ => code.unusable += 1,
            }
        }
    }
    // Newest first in the list: an older file for the same code is left out.
    let mut kept: Vec<Described> = Vec::with_capacity(code.described.len());
    for d in code.described {
        if kept.iter().any(|k| k.start < d.end && d.start < k.end) {
            code.unusable += 1;
        } else {
            kept.push(d);
        }
    }
    kept.sort_by_key(|d| d.start);
    code.described = kept;
    code.functions.sort_by_key(|f| f.start);
    if let Ok(mut f) = FUNCTIONS.lock() {
        f.clone_from(&code.functions);
    }
    USED.store(code.described.len(), Ordering::Relaxed);
    UNUSABLE.store(code.unusable, Ordering::Relaxed);
    code
}

/// Symbol files used and left out at the last [`read`].
static USED: AtomicUsize = AtomicUsize::new(0);
static UNUSABLE: AtomicUsize = AtomicUsize::new(0);

/// The symbol files whose rules the last [`read`] gave, and those it left out.
pub(crate) fn counts() -> (usize, usize) {
    (
        USED.load(Ordering::Relaxed),
        UNUSABLE.load(Ordering::Relaxed),
    )
}

/// The functions the symbol files named at the last [`read`].
static FUNCTIONS: Mutex<Vec<Function>> = Mutex::new(Vec::new());

/// The functions the process's JIT compilers named through the GDB JIT interface at the last
/// refresh, sorted by start.
pub(crate) fn functions() -> Vec<Function> {
    FUNCTIONS.lock().map(|f| f.clone()).unwrap_or_default()
}

/// The executable's load bias at the last [`read`] ([`NO_BIAS`]: none known).
static PROGRAM_BIAS: AtomicU64 = AtomicU64::new(NO_BIAS);
const NO_BIAS: u64 = u64::MAX;

/// The executable's load bias at the last [`read`], if known.
fn program_bias() -> Option<u64> {
    Some(PROGRAM_BIAS.load(Ordering::Relaxed)).filter(|&b| b != NO_BIAS)
}

/// The descriptors' addresses: those the loaded modules export (found without `dlsym`, which
/// would leave its error for the program's `dlerror`), and the executable's own.
fn descriptors(program_bias: Option<u64>) -> Vec<u64> {
    let mut out = crate::exported::exported(c"__jit_debug_descriptor");
    out.dedup();
    if let (Some(vaddr), Some(bias)) = (program_descriptor(), program_bias) {
        let at = bias.wrapping_add(vaddr);
        if !out.contains(&at) {
            out.push(at);
        }
    }
    out
}

/// The file address of `__jit_debug_descriptor` in the executable's symbol tables, read once.
fn program_descriptor() -> Option<u64> {
    static FOUND: OnceLock<Option<u64>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        unwind_dwarf::with_mapped_file(std::path::Path::new("/proc/self/exe"), |elf| {
            unwind_gdb_jit::descriptor_address(elf)
        })
        .ok()
        .flatten()
    })
}

/// Whether the process has a GDB JIT interface's descriptor (a JIT compiler linked in or
/// loaded), as of the last [`read`].
pub(crate) fn present() -> bool {
    !descriptors(program_bias()).is_empty()
}

/// The descriptors' state words at the last [`changed`]: whether the JIT registered or
/// removed code since.
static LAST_STATE: Mutex<Vec<(u64, [u8; 24])>> = Mutex::new(Vec::new());

/// Whether a JIT's list changed since the last call (the words it sets at every change:
/// `action_flag`, `relevant_entry`, `first_entry`): a few reads, for a caller deciding whether
/// to [`crate::refresh`].
pub(crate) fn changed() -> bool {
    let now: Vec<(u64, [u8; 24])> = descriptors(program_bias())
        .into_iter()
        .map(|d| {
            // version, action_flag, relevant_entry and first_entry: no more (the next bytes
            // are another variable's).
            let mut words = [0u8; 24];
            let len = 8 + 2 * usize::from(LAYOUT.pointer);
            let _ = Own.read(d, &mut words[..len]);
            (d, words)
        })
        .collect();
    let Ok(mut last) = LAST_STATE.lock() else {
        return true;
    };
    let changed = *last != now;
    *last = now;
    changed
}
