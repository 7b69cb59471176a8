//! The runtime on x86_64: registers from a `ucontext` and from the current frame, the thread
//! pointer, the CPU's identification for minidumps, and how a module's unwind tables are read
//! from its mapped image (`.eh_frame` through `PT_GNU_EH_FRAME`).

use std::ffi::c_void;

use unwind_core::table::ModuleRules;
use unwind_core::x86_64::{Regs, Rule};
use unwind_core::X86_64;
use unwind_dwarf::{DwarfError, ExidxError, ExidxStats, LoadStats};
use unwind_samples::Context;

use super::{ucontext_word, CopiedCode, ImageTables, RuntimeArch};

/// Where `uc_mcontext` starts in the kernel's (and glibc's) `ucontext_t`: after `uc_flags`,
/// `uc_link` and the 24-byte `stack_t`. Its general registers come first, in glibc's `REG_*`
/// order.
const MCONTEXT: usize = 40;

/// glibc's `REG_*` indices (`<sys/ucontext.h>`), the kernel's `struct sigcontext` order.
mod reg {
    pub const R8: usize = 0;
    pub const R9: usize = 1;
    pub const R10: usize = 2;
    pub const R11: usize = 3;
    pub const R12: usize = 4;
    pub const R13: usize = 5;
    pub const R14: usize = 6;
    pub const R15: usize = 7;
    pub const RDI: usize = 8;
    pub const RSI: usize = 9;
    pub const RBP: usize = 10;
    pub const RBX: usize = 11;
    pub const RDX: usize = 12;
    pub const RAX: usize = 13;
    pub const RCX: usize = 14;
    pub const RSP: usize = 15;
    pub const RIP: usize = 16;
    pub const EFL: usize = 17;
}

/// General register `i` ([`reg`]) of a `ucontext_t`.
///
/// # Safety
/// `ucontext` must point to a valid x86_64 `ucontext_t`.
#[inline(always)]
unsafe fn greg(ucontext: *const c_void, i: usize) -> u64 {
    // SAFETY: the caller guarantees a valid ucontext_t, whose 23 general registers include `i`.
    unsafe { ucontext_word::<8>(ucontext, MCONTEXT, i) }
}

impl RuntimeArch for X86_64 {
    /// Bytes below the stack pointer that leaf functions may use without moving it (psABI).
    const RED_ZONE: u64 = 128;

    /// None: `.eh_frame` is found through `PT_GNU_EH_FRAME`.
    const UNWIND_SEGMENTS: &'static [u32] = &[];

    const COPIED_CODE: &'static [CopiedCode<Rule>] = &[CPYTHON_TRAMPOLINE];

    #[inline(always)]
    unsafe fn regs_from_ucontext(ucontext: *const c_void) -> Regs {
        // SAFETY: the caller guarantees a valid ucontext_t.
        let get = |i| unsafe { greg(ucontext, i) };
        Regs {
            pc: get(reg::RIP),
            sp: get(reg::RSP),
            fp: get(reg::RBP),
        }
    }

    unsafe fn context_from_ucontext(ucontext: *const c_void) -> Context {
        // SAFETY: the caller guarantees a valid ucontext_t.
        let get = |i| unsafe { greg(ucontext, i) };
        // CONTEXT_AMD64 order.
        let order = [
            reg::RAX,
            reg::RCX,
            reg::RDX,
            reg::RBX,
            reg::RSP,
            reg::RBP,
            reg::RSI,
            reg::RDI,
            reg::R8,
            reg::R9,
            reg::R10,
            reg::R11,
            reg::R12,
            reg::R13,
            reg::R14,
            reg::R15,
            reg::RIP,
        ];
        let mut regs = [0u64; 17];
        for (r, &i) in regs.iter_mut().zip(&order) {
            *r = get(i);
        }
        Context::X86_64 {
            regs,
            eflags: get(reg::EFL) as u32,
        }
    }

    /// `.eh_frame` from the image copy (the file is not needed: every x86_64 compiler emits
    /// `.eh_frame`, and it is mapped).
    fn rules_from_image(
        tables: ImageTables<'_>,
        _file: Option<&[u8]>,
    ) -> Result<(ModuleRules<Rule>, LoadStats<X86_64>), DwarfError> {
        unwind_dwarf::rules_from_sections::<X86_64>(&tables.cfi?, None)
    }

    /// x86_64 has no EHABI index.
    fn report_extra(_: &()) -> (Option<ExidxStats>, Option<ExidxError>) {
        (None, None)
    }

    /// x86_64's rules never are.
    fn from_instructions(_: &Rule) -> bool {
        false
    }
}

/// The registers at this point of the caller (always inlined, so they agree with the
/// caller's own CFI at that instruction).
#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
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

/// CPython's perf trampoline (`-X perf` and `-X perf_jit`, 3.12 and 3.13), which the
/// interpreter copies over and over into executable memory, one copy per Python function, and
/// calls with the function's frame: `sub $8, %rsp; call *%rcx; add $8, %rsp; ret`. It keeps no
/// frame pointer and its copies have no unwind table; its rows are these.
const CPYTHON_TRAMPOLINE: CopiedCode<Rule> = CopiedCode {
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

/// This CPU for a minidump's SystemInfo stream, with family, model and stepping as Breakpad's Linux
/// writer records them, and the cpuid vendor and features.
#[cfg(all(feature = "minidump", target_arch = "x86_64"))]
pub fn cpu_info() -> unwind_samples::minidump::Processor {
    use minidump_common::format as md;
    use scroll::{Pwrite, LE};
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
    unwind_samples::minidump::Processor {
        architecture: md::ProcessorArchitecture::PROCESSOR_ARCHITECTURE_AMD64,
        level: u16::try_from(family).unwrap_or(u16::MAX),
        revision: u16::try_from((model << 8) | stepping).unwrap_or(u16::MAX),
        cpu: data,
    }
}
