//! The runtime on 64-bit ARM: registers from a `ucontext` and from the current frame, the
//! pointer authentication mask, the thread pointer, the CPU's identification for minidumps,
//! how a module's unwind tables are read from its mapped image (`.eh_frame` through
//! `PT_GNU_EH_FRAME`), and the kernel's signal return trampoline.

use std::ffi::c_void;

use unwind_core::aarch64::{Regs, Rule};
use unwind_core::table::ModuleRules;
use unwind_core::Aarch64;
use unwind_dwarf::{DwarfError, ExidxError, ExidxStats, LoadStats};
use unwind_samples::Context;

use super::{ucontext_word, CopiedCode, ImageTables, RuntimeArch};

/// Where `regs[0]` is in the `ucontext_t` (its layout: [`unwind_dwarf::sigreturn`]).
const REGS: usize = unwind_dwarf::sigreturn::AARCH64_UCONTEXT_REGS;
/// Indices of the `sigcontext` words after `regs[0]` (`regs[i]` is word `i`).
const SP: usize = 31;
const PC: usize = 32;
const PSTATE: usize = 33;

/// Word `i` of the `sigcontext` counted from `regs[0]`.
///
/// # Safety
/// `ucontext` must point to a valid aarch64 `ucontext_t`.
#[inline(always)]
unsafe fn word(ucontext: *const c_void, i: usize) -> u64 {
    // SAFETY: the caller guarantees a valid ucontext_t, whose sigcontext holds 34 words from
    // regs[0] on.
    unsafe { ucontext_word::<8>(ucontext, REGS, i) }
}

impl RuntimeArch for Aarch64 {
    /// AAPCS64 has no red zone.
    const RED_ZONE: u64 = 0;

    /// None: `.eh_frame` is found through `PT_GNU_EH_FRAME`.
    const UNWIND_SEGMENTS: &'static [u32] = &[];

    /// None yet (CPython's aarch64 perf trampoline is a candidate).
    const COPIED_CODE: &'static [CopiedCode<Rule>] = &[];

    #[inline(always)]
    unsafe fn regs_from_ucontext(ucontext: *const c_void) -> Regs {
        // SAFETY: the caller guarantees a valid ucontext_t.
        let w = |i| unsafe { word(ucontext, i) };
        Regs {
            pc: w(PC),
            sp: w(SP),
            fp: w(29),
            lr: w(30),
        }
    }

    unsafe fn context_from_ucontext(ucontext: *const c_void) -> Context {
        let mut iregs = [0u64; 31];
        for (i, v) in iregs.iter_mut().enumerate() {
            // SAFETY: the caller guarantees a valid ucontext_t.
            *v = unsafe { word(ucontext, i) };
        }
        // SAFETY: as above.
        let w = |i| unsafe { word(ucontext, i) };
        Context::Aarch64 {
            iregs,
            sp: w(SP),
            pc: w(PC),
            cpsr: w(PSTATE) as u32,
            pointer_mask: pointer_mask(),
        }
    }

    /// `.eh_frame` from the image copy, as on x86_64 (every aarch64 compiler emits it); and,
    /// when the file on disk is the mapped image, rows read from the instructions of the
    /// functions of its symbol table that no FDE describes (code built without unwind tables).
    fn rules_from_image(
        tables: ImageTables<'_>,
        file: Option<&[u8]>,
    ) -> Result<(ModuleRules<Rule>, LoadStats<Aarch64>), DwarfError> {
        let sections = tables.cfi?;
        let elf = file.and_then(|f| object::File::parse(f).ok());
        let code = elf
            .as_ref()
            .map(|elf| unwind_dwarf::A64Code::read(elf, Some(tables.code.1)))
            .filter(|code| !code.functions.is_empty());
        unwind_dwarf::rules_from_sections::<Aarch64>(&sections, code.as_ref())
    }

    /// This process's ([`pointer_mask`]).
    #[inline(always)]
    fn pointer_mask() -> u64 {
        pointer_mask()
    }

    /// aarch64 has no EHABI index.
    fn report_extra(_: &unwind_dwarf::Aarch64Stats) -> (Option<ExidxStats>, Option<ExidxError>) {
        (None, None)
    }

    /// Rules read by `unwind_arm_prologue::a64`.
    fn from_instructions(rule: &Rule) -> bool {
        rule.from_instructions
    }
}

/// The bits of an instruction address that are not address in this process: the pointer
/// authentication code's field and the top byte, as `xpaclri` clears them; 0 on a core without
/// pointer authentication, where `xpaclri` (a hint) does nothing. Found by stripping an address
/// with every bit set but 55 (which selects the upper or lower address range, and which
/// `xpaclri` keeps). Async-signal-safe: three instructions.
#[inline(always)]
pub fn pointer_mask() -> u64 {
    #[cfg(target_arch = "aarch64")]
    {
        let probe: u64 = !(1 << 55);
        let stripped: u64;
        // SAFETY: `xpaclri` (`hint #7`) strips the pointer authentication code of x30 in place
        // and does nothing else; it never faults (a no-op without FEAT_PAuth). x30 is declared
        // clobbered by taking it as the in/out operand.
        unsafe {
            std::arch::asm!(
                "hint #7",
                inout("x30") probe => stripped,
                options(nomem, nostack, preserves_flags, pure)
            );
        }
        probe & !stripped
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        0
    }
}

/// The registers at this point of the caller (always inlined).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub fn current_regs() -> Regs {
    let (pc, sp, fp, lr): (u64, u64, u64, u64);
    // SAFETY: copies registers (the PC by `adr` of this very instruction) into outputs;
    // touches no memory and changes no other state.
    unsafe {
        std::arch::asm!(
            "adr {pc}, .",
            "mov {sp}, sp",
            "mov {fp}, x29",
            "mov {lr}, x30",
            pc = out(reg) pc,
            sp = out(reg) sp,
            fp = out(reg) fp,
            lr = out(reg) lr,
            options(nomem, nostack, preserves_flags),
        );
    }
    Regs { pc, sp, fp, lr }
}

/// The calling thread's thread pointer. Async-signal-safe: one register read.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads TPIDR_EL0, the thread ID register the kernel loads with the thread
    // pointer; no memory is touched.
    unsafe {
        std::arch::asm!(
            "mrs {}, tpidr_el0",
            out(reg) tp,
            options(nomem, nostack, preserves_flags, pure)
        );
    }
    tp
}

/// This CPU for a minidump's SystemInfo stream: level 8 (ARMv8) and the hardware capabilities
/// (user space cannot read MIDR without the kernel's help).
#[cfg(all(feature = "minidump", target_arch = "aarch64"))]
pub fn cpu_info() -> unwind_samples::minidump::Processor {
    super::arm_cpu_info(
        minidump_common::format::ProcessorArchitecture::PROCESSOR_ARCHITECTURE_ARM64,
        8,
    )
}
