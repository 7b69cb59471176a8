//! The runtime on 32-bit ARM: registers from a `ucontext` and from the current frame, the
//! thread pointer, the CPU's identification for minidumps, and how a module's unwind tables are
//! read (`.ARM.exidx` through `PT_ARM_EXIDX`, `.eh_frame`, or the file's `.debug_frame`).

use std::ffi::c_void;

use unwind_core::arm::{Regs, Rule, Source};
use unwind_core::table::ModuleRules;
use unwind_core::Arm;
use unwind_dwarf::{ArmStats, DwarfError, ExidxError, ExidxStats, LoadStats};
use unwind_samples::Context;

use super::{ucontext_word, CopiedCode, ImageTables, RuntimeArch};

/// Where `uc_mcontext` starts in the kernel's (and glibc's) `ucontext_t`: after `uc_flags`,
/// `uc_link` and the 12-byte `stack_t`.
const MCONTEXT: usize = 20;

/// Word `i` of `uc_mcontext` (`trap_no`, `error_code`, `oldmask`, then r0 to r15 and CPSR).
///
/// # Safety
/// `ucontext` must point to a valid 32-bit ARM `ucontext_t`.
#[inline(always)]
unsafe fn word(ucontext: *const c_void, i: usize) -> u32 {
    // SAFETY: the caller guarantees a valid ucontext_t, whose mcontext holds 21 words.
    unsafe { ucontext_word::<4>(ucontext, MCONTEXT, i) as u32 }
}

/// Register `r` (0 to 15) of a `ucontext_t`'s `uc_mcontext`.
///
/// # Safety
/// As [`word`].
#[inline(always)]
unsafe fn reg(ucontext: *const c_void, r: usize) -> u32 {
    // SAFETY: as the caller's; r0 is the fourth word.
    unsafe { word(ucontext, 3 + r) }
}

/// The `arm_cpsr` word of `uc_mcontext`, after r15.
const CPSR: usize = 3 + 16;

impl RuntimeArch for Arm {
    /// AAPCS has no red zone.
    const RED_ZONE: u64 = 0;

    /// `PT_ARM_EXIDX` (its `.ARM.extab` entries lie in the same segment).
    const UNWIND_SEGMENTS: &'static [u32] = &[object::elf::PT_ARM_EXIDX.0];

    /// None known on 32-bit ARM (CPython's perf trampolines are for x86_64 and aarch64 only).
    const COPIED_CODE: &'static [CopiedCode<Rule>] = &[];

    /// The PC gets bit 0 set when CPSR says Thumb.
    #[inline(always)]
    unsafe fn regs_from_ucontext(ucontext: *const c_void) -> Regs {
        // SAFETY: the caller guarantees a valid ucontext_t.
        let r = |i| unsafe { reg(ucontext, i) };
        // CPSR bit 5 (T): the interrupted code is Thumb.
        // SAFETY: as above.
        let thumb = (unsafe { word(ucontext, CPSR) } >> 5) & 1;
        Regs {
            pc: r(15) | thumb,
            lr: r(14),
            sp: r(13),
            r12: r(12),
            r11: r(11),
            r7: r(7),
        }
    }

    /// r15 without the Thumb bit, which CPSR holds.
    unsafe fn context_from_ucontext(ucontext: *const c_void) -> Context {
        let mut iregs = [0u32; 16];
        for (i, v) in iregs.iter_mut().enumerate() {
            // SAFETY: the caller guarantees a valid ucontext_t.
            *v = unsafe { reg(ucontext, i) };
        }
        Context::Arm {
            iregs,
            // SAFETY: as above.
            cpsr: unsafe { word(ucontext, CPSR) },
        }
    }

    /// `.ARM.exidx` with the `.ARM.extab` entries it points to, and `.eh_frame` where present,
    /// which wins where both describe code; or, when the file on disk is the mapped image, the
    /// file, whose `.debug_frame` is exact in prologues and epilogues where EXIDX is not.
    fn rules_from_image(
        tables: ImageTables<'_>,
        file: Option<&[u8]>,
    ) -> Result<(ModuleRules<Rule>, LoadStats<Arm>), DwarfError> {
        if let Some(Ok(loaded)) = file.map(unwind_dwarf::rules_from_elf::<Arm>) {
            return Ok((loaded.rules, loaded.stats));
        }
        let sections = tables.cfi?;
        let mut exidx_sections = None;
        if let Some(x) = tables
            .segments
            .iter()
            .find(|s| s.p_type == object::elf::PT_ARM_EXIDX.0)
        {
            let bytes = x.bytes.ok_or(DwarfError::NoCfi)?;
            // `.ARM.extab` is not a segment: its entries lie in the same loadable segment,
            // which is handed over whole (prel31 pointers into it are resolved against its
            // range).
            let (seg_lo, segment) = x.loadable.ok_or(DwarfError::NoCfi)?;
            exidx_sections = Some(unwind_dwarf::ExidxSections {
                exidx: bytes,
                exidx_svma: x.svma,
                extab: Some(segment),
                extab_svma: seg_lo,
                text_end: Some(tables.code.1),
                // The mapped image has no section headers, so no symbol table: every entry
                // covers up to the next one (a module read from its file knows where functions
                // end).
                functions: &[],
            });
        }
        unwind_dwarf::rules_from_sections::<Arm>(&sections, exidx_sections.map(Into::into).as_ref())
    }

    fn report_extra(stats: &ArmStats) -> (Option<ExidxStats>, Option<ExidxError>) {
        (stats.exidx.clone(), stats.exidx_error)
    }

    /// Rules read by `unwind-arm-prologue`.
    fn from_instructions(rule: &Rule) -> bool {
        rule.source == Source::Instructions
    }
}

/// The registers at this point of the caller (always inlined).
#[cfg(target_arch = "arm")]
#[inline(always)]
pub fn current_regs() -> Regs {
    let (pc, lr, sp, r12, r11, r7): (u32, u32, u32, u32, u32, u32);
    // SAFETY: copies registers (the PC by `adr` of this very instruction) into outputs;
    // touches no memory and changes no other state.
    unsafe {
        std::arch::asm!(
            "adr {pc}, .",
            "mov {lr}, lr",
            "mov {sp}, sp",
            "mov {r12}, r12",
            "mov {r11}, r11",
            "mov {r7}, r7",
            pc = out(reg) pc,
            lr = out(reg) lr,
            sp = out(reg) sp,
            r12 = out(reg) r12,
            r11 = out(reg) r11,
            r7 = out(reg) r7,
            options(nomem, nostack, preserves_flags),
        );
    }
    Regs {
        pc,
        lr,
        sp,
        r12,
        r11,
        r7,
    }
}

/// The calling thread's thread pointer. Async-signal-safe: one register read.
#[cfg(target_arch = "arm")]
#[inline(always)]
pub fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads TPIDRURO, the user read-only thread ID register the kernel loads with the
    // thread pointer (ARMv6K and later; armv7 has it); no memory is touched.
    unsafe {
        std::arch::asm!(
            "mrc p15, 0, {}, c13, c0, 3",
            out(reg) tp,
            options(nomem, nostack, preserves_flags, pure)
        );
    }
    tp
}

/// This CPU for a minidump's SystemInfo stream. No cpuid (user space cannot read MIDR): level 7
/// (ARMv7) and the hardware capabilities.
#[cfg(all(feature = "minidump", target_arch = "arm"))]
pub fn cpu_info() -> unwind_samples::minidump::Processor {
    super::arm_cpu_info(
        minidump_common::format::ProcessorArchitecture::PROCESSOR_ARCHITECTURE_ARM,
        7,
    )
}
