//! The runtime on x86_64: registers from a `ucontext` and from the current frame, the thread
//! pointer, the CPU's identification for minidumps, and how a module's unwind tables are read
//! from its mapped image (`.eh_frame` through `PT_GNU_EH_FRAME`).

use minidump_common::format as md;
use scroll::{Pwrite, LE};
use unwind_dwarf::plt::PltSection;
use unwind_dwarf::DwarfError;
use unwind_samples::minidump::Processor;

use crate::mappings::CopiedCode;
use crate::modules::{cfi_sections, ImageCopy, Read};

pub use unwind_core::x86_64::{Regs, Rule};
/// The architecture this build unwinds.
pub use unwind_core::X86_64 as Native;

use unwind_samples::Context;

/// Bytes below the stack pointer that leaf functions may use without moving it (psABI).
pub const RED_ZONE: u64 = 128;

/// The program header type of this architecture's ELF files.
pub type Phdr = libc::Elf64_Phdr;

/// General register `i` (`libc::REG_*`) of a `ucontext_t`, 0 if there is no such register.
///
/// # Safety
/// `ucontext` must point to a valid `ucontext_t`.
#[inline(always)]
unsafe fn greg(ucontext: *const libc::c_void, i: libc::c_int) -> u64 {
    // SAFETY: the caller guarantees a valid ucontext_t.
    let uc = unsafe { &*(ucontext as *const libc::ucontext_t) };
    usize::try_from(i)
        .ok()
        .and_then(|i| uc.uc_mcontext.gregs.get(i))
        .map_or(0, |&v| v as u64)
}

/// The interrupted thread's registers.
///
/// # Safety
/// `ucontext` must point to a valid `ucontext_t`.
pub unsafe fn regs_from_ucontext(ucontext: *const libc::c_void) -> Regs {
    // SAFETY: the caller guarantees a valid ucontext_t.
    let get = |i| unsafe { greg(ucontext, i) };
    Regs {
        pc: get(libc::REG_RIP),
        sp: get(libc::REG_RSP),
        fp: get(libc::REG_RBP),
    }
}

/// The interrupted thread's whole register file. Async-signal-safe (reads memory only).
///
/// # Safety
/// `ucontext` must point to a valid `ucontext_t`.
pub unsafe fn context_from_ucontext(ucontext: *const libc::c_void) -> Context {
    // SAFETY: the caller guarantees a valid ucontext_t.
    let get = |i| unsafe { greg(ucontext, i) };
    // CONTEXT_AMD64 order.
    let order = [
        libc::REG_RAX,
        libc::REG_RCX,
        libc::REG_RDX,
        libc::REG_RBX,
        libc::REG_RSP,
        libc::REG_RBP,
        libc::REG_RSI,
        libc::REG_RDI,
        libc::REG_R8,
        libc::REG_R9,
        libc::REG_R10,
        libc::REG_R11,
        libc::REG_R12,
        libc::REG_R13,
        libc::REG_R14,
        libc::REG_R15,
        libc::REG_RIP,
    ];
    let mut regs = [0u64; 17];
    for (r, &i) in regs.iter_mut().zip(&order) {
        *r = get(i);
    }
    Context::X86_64 {
        regs,
        eflags: get(libc::REG_EFL) as u32,
    }
}

/// The registers the unwinder uses, from a context of this architecture.
#[inline(always)]
pub fn regs_of(context: &Context) -> Regs {
    context.x86_64_regs().unwrap_or_default()
}

/// The registers at this point of the caller (always inlined, so they agree with the
/// caller's own CFI at that instruction).
#[inline(always)]
pub fn current_regs() -> Regs {
    let (pc, sp, fp): (u64, u64, u64);
    // SAFETY: reads rip (by lea), rsp and rbp; touches no memory and changes no other state.
    unsafe {
        std::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {fp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            fp = out(reg) fp,
            options(nomem, nostack, preserves_flags),
        );
    }
    Regs { pc, sp, fp }
}

/// The calling thread's thread pointer. Async-signal-safe: one load.
#[inline(always)]
pub fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: the x86_64 TLS ABI (as glibc and musl implement it) stores the thread pointer at
    // offset 0 of the thread control block `%fs` points to; the load has no side effect.
    unsafe {
        std::arch::asm!(
            "mov {}, qword ptr fs:[0]",
            out(reg) tp,
            options(nostack, readonly, preserves_flags, pure)
        );
    }
    tp
}

/// The program header types of this architecture's own unwind tables, whose segments the
/// image copy keeps whole: none (`.eh_frame` is found through `PT_GNU_EH_FRAME`).
pub const UNWIND_SEGMENTS: &[u32] = &[];

/// Reads the unwind tables of a module: `.eh_frame` from the image copy (the file is not
/// needed: every x86_64 compiler emits `.eh_frame`, and it is mapped).
pub fn rules_from_image(
    image: &ImageCopy,
    _file: Option<&[u8]>,
    hdr: Option<&Phdr>,
    _phdrs: &[Phdr],
    plt: &[PltSection],
    code: (u64, u64),
) -> Result<Read, DwarfError> {
    let sections = cfi_sections(image, hdr, plt, code)?;
    let (rules, stats) = unwind_dwarf::rules_from_sections::<Native>(&sections, None)?;
    Ok(Read::new(rules, stats))
}

/// What loading found besides the CFI statistics, for the preload report: the EHABI index's
/// statistics and error (x86_64 has none).
pub fn report_extra(
    _: &(),
) -> (
    Option<unwind_dwarf::ExidxStats>,
    Option<unwind_dwarf::ExidxError>,
) {
    (None, None)
}

/// CPython's perf trampoline (`-X perf` and `-X perf_jit`, 3.12 and 3.13), which the
/// interpreter copies over and over into executable memory, one copy per Python function, and
/// calls with the function's frame: `sub $8, %rsp; call *%rcx; add $8, %rsp; ret`. It keeps no
/// frame pointer and its copies have no unwind table; its rows are these.
const CPYTHON_TRAMPOLINE: CopiedCode = CopiedCode {
    symbol: c"_Py_trampoline_func_start",
    bytes: &[
        0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3,
    ],
    rows: &[
        (0, 4, sp_frame(8)),
        (4, 10, sp_frame(16)),
        (10, 11, sp_frame(8)),
    ],
};

/// The rule of a frame whose CFA is `rsp + cfa`, with the return address just below it and
/// `rbp` untouched.
const fn sp_frame(cfa: i32) -> Rule {
    use unwind_core::x86_64::{CfaRule, RegRule};
    Rule {
        cfa: CfaRule::SpOffset(cfa),
        ra: RegRule::Offset(-8),
        fp: RegRule::Same,
        signal_frame: false,
    }
}

/// The code that run-time code generators copy from a function of theirs (see
/// [`crate::mappings`]).
pub const COPIED_CODE: &[CopiedCode] = &[CPYTHON_TRAMPOLINE];

/// Whether a rule was read from its function's instructions (x86_64's never are).
pub fn from_instructions(_: &Rule) -> bool {
    false
}

/// This CPU for a minidump's SystemInfo stream, with family, model and stepping as Breakpad's Linux
/// writer records them, and the cpuid vendor and features.
pub fn cpu_info() -> Processor {
    use std::arch::x86_64::__cpuid;
    // SAFETY: cpuid exists on every x86_64 CPU; leaves 0 and 1 are always valid.
    #[allow(unused_unsafe)]
    let (l0, l1) = unsafe { (__cpuid(0), __cpuid(1)) };
    let eax = l1.eax;
    let stepping = eax & 0xf;
    let mut model = (eax >> 4) & 0xf;
    let mut family = (eax >> 8) & 0xf;
    if family == 0xf {
        family += (eax >> 20) & 0xff;
    }
    if family == 0x6 || family >= 0xf {
        model += ((eax >> 16) & 0xf) << 4;
    }
    let info = md::X86CpuInfo {
        vendor_id: [l0.ebx, l0.edx, l0.ecx],
        version_information: eax,
        feature_information: l1.edx,
        amd_extended_cpu_features: 0,
    };
    let mut data = [0u8; 24];
    let _ = data.pwrite_with(info, 0, LE);
    Processor {
        architecture: md::ProcessorArchitecture::PROCESSOR_ARCHITECTURE_AMD64,
        level: u16::try_from(family).unwrap_or(u16::MAX),
        revision: u16::try_from((model << 8) | stepping).unwrap_or(u16::MAX),
        cpu: data,
    }
}
