//! The runtime on 32-bit ARM: registers from a `ucontext` and from the current frame, the
//! thread pointer, the CPU's identification for minidumps, and how a module's unwind tables are
//! read (`.ARM.exidx` through `PT_ARM_EXIDX`, `.eh_frame`, or the file's `.debug_frame`).

use minidump_common::format as md;
use scroll::{Pwrite, LE};
use unwind_dwarf::plt::PltSection;
use unwind_dwarf::{ArmStats, DwarfError, ExidxError, ExidxStats};
use unwind_samples::minidump::Processor;

use crate::modules::{cfi_sections, Image as _, ImageCopy, Read};

pub use unwind_core::arm::{Regs, Rule};
/// The architecture this build unwinds.
pub use unwind_core::Arm as Native;

use unwind_samples::Context;

/// AAPCS has no red zone.
pub const RED_ZONE: u64 = 0;

/// The program header type of this architecture's ELF files.
pub type Phdr = libc::Elf32_Phdr;

/// The interrupted thread's registers; the PC gets bit 0 set when CPSR says Thumb.
///
/// # Safety
/// `ucontext` must point to a valid `ucontext_t`.
pub unsafe fn regs_from_ucontext(ucontext: *const libc::c_void) -> Regs {
    // SAFETY: the caller guarantees a valid ucontext_t.
    let m = unsafe { &(*(ucontext as *const libc::ucontext_t)).uc_mcontext };
    // CPSR bit 5 (T): the interrupted code is Thumb.
    let thumb = (m.arm_cpsr >> 5) & 1;
    Regs {
        pc: m.arm_pc | thumb,
        lr: m.arm_lr,
        sp: m.arm_sp,
        r12: m.arm_ip,
        r11: m.arm_fp,
        r7: m.arm_r7,
    }
}

/// The interrupted thread's whole register file (r15 without the Thumb bit, which CPSR
/// holds). Async-signal-safe (reads memory only).
///
/// # Safety
/// `ucontext` must point to a valid `ucontext_t`.
pub unsafe fn context_from_ucontext(ucontext: *const libc::c_void) -> Context {
    // SAFETY: the caller guarantees a valid ucontext_t.
    let m = unsafe { &(*(ucontext as *const libc::ucontext_t)).uc_mcontext };
    Context::Arm {
        iregs: [
            m.arm_r0, m.arm_r1, m.arm_r2, m.arm_r3, m.arm_r4, m.arm_r5, m.arm_r6, m.arm_r7,
            m.arm_r8, m.arm_r9, m.arm_r10, m.arm_fp, m.arm_ip, m.arm_sp, m.arm_lr, m.arm_pc,
        ],
        cpsr: m.arm_cpsr,
    }
}

/// The registers the unwinder uses, from a context of this architecture.
#[inline(always)]
pub fn regs_of(context: &Context) -> Regs {
    context.arm_regs().unwrap_or_default()
}

/// The registers at this point of the caller (always inlined).
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

/// The code that run-time code generators copy from a function of theirs (see
/// [`crate::mappings`]): none known on 32-bit ARM (CPython's perf trampolines are for x86_64
/// and aarch64 only).
pub const COPIED_CODE: &[crate::mappings::CopiedCode] = &[];

/// The program header types of this architecture's own unwind tables, whose segments the
/// image copy keeps whole: `PT_ARM_EXIDX` (its `.ARM.extab` entries lie in the same segment).
pub const UNWIND_SEGMENTS: &[u32] = &[object::elf::PT_ARM_EXIDX.0];

/// Reads the unwind tables of a module: `.ARM.exidx` with the `.ARM.extab` entries it points
/// to, and `.eh_frame` where present, which wins where both describe code; or, when the file on
/// disk is the mapped image, the file, whose `.debug_frame` is exact in prologues and epilogues
/// where EXIDX is not.
pub fn rules_from_image(
    image: &ImageCopy,
    file: Option<&[u8]>,
    hdr: Option<&Phdr>,
    phdrs: &[Phdr],
    plt: &[PltSection],
    code: (u64, u64),
) -> Result<Read, DwarfError> {
    if let Some(Ok(loaded)) = file.map(unwind_dwarf::rules_from_elf::<Native>) {
        return Ok(Read::new(loaded.rules, loaded.stats));
    }
    let sections = cfi_sections(image, hdr, plt, code)?;
    let mut exidx_sections = None;
    if let Some(x) = phdrs
        .iter()
        .find(|p| p.p_type == object::elf::PT_ARM_EXIDX.0)
    {
        let svma = u64::from(x.p_vaddr);
        let (bytes, (seg_lo, _)) = image.from(svma).ok_or(DwarfError::NoCfi)?;
        let len = usize::try_from(u64::from(x.p_memsz))
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        // `.ARM.extab` is not a segment: its entries lie in the same segment, which is handed
        // over whole (prel31 pointers into it are resolved against its range).
        let (segment, _) = image.from(seg_lo).ok_or(DwarfError::NoCfi)?;
        exidx_sections = Some(unwind_dwarf::ExidxSections {
            exidx: bytes.get(..len).unwrap_or(bytes),
            exidx_svma: svma,
            extab: Some(segment),
            extab_svma: seg_lo,
            text_end: Some(code.1),
            // The mapped image has no section headers, so no symbol table: every entry covers
            // up to the next one (a module read from its file knows where functions end).
            functions: &[],
        });
    }
    unwind_dwarf::rules_from_sections::<Native>(&sections, exidx_sections.map(Into::into).as_ref())
        .map(|(rules, stats)| Read::new(rules, stats))
}

/// What loading found besides the CFI statistics, for the preload report: the EHABI index's
/// statistics and error.
pub fn report_extra(stats: &ArmStats) -> (Option<ExidxStats>, Option<ExidxError>) {
    (stats.exidx.clone(), stats.exidx_error)
}

/// Whether a rule was read from its function's instructions (`unwind-arm-prologue`), not from
/// an unwind table.
pub fn from_instructions(rule: &Rule) -> bool {
    rule.source == unwind_core::arm::Source::Instructions
}

/// This CPU for a minidump's SystemInfo stream. No cpuid (user space cannot read MIDR): level 7
/// (ARMv7) and the hardware capabilities.
pub fn cpu_info() -> Processor {
    // SAFETY: getauxval has no preconditions.
    let hwcaps = unsafe { libc::getauxval(libc::AT_HWCAP) } as u32;
    let info = md::ARMCpuInfo {
        cpuid: 0,
        elf_hwcaps: hwcaps,
    };
    let mut data = [0u8; 24];
    let _ = data.pwrite_with(info, 0, LE);
    Processor {
        architecture: md::ProcessorArchitecture::PROCESSOR_ARCHITECTURE_ARM,
        level: 7,
        revision: 0,
        cpu: data,
    }
}
