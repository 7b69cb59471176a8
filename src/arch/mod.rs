//! What differs between the architectures the runtime supports: the [`RuntimeArch`] trait,
//! implemented in one module per architecture for its `unwind_core` type, and compiled on every
//! host (so that a mistake in any architecture's module shows in every build and every lint);
//! the build's target picks [`Native`]. What only the running CPU can do (read its own
//! registers and thread pointer, identify itself: `current_regs`, `thread_pointer`,
//! `cpu_info`) is compiled for the native architecture only.
//!
//! Adding an architecture to the runtime means one more such module (see ARCHITECTURE.md).

use std::ffi::{c_void, CStr};

use unwind_core::table::ModuleRules;
use unwind_core::Arch;
use unwind_dwarf::{CfiSections, DwarfArch, DwarfError, ExidxError, ExidxStats, LoadStats};
use unwind_samples::{Context, ContextArch};

mod aarch64;
mod arm;
mod x86_64;

/// The architecture this build unwinds.
#[cfg(target_arch = "aarch64")]
pub use unwind_core::Aarch64 as Native;
/// The architecture this build unwinds.
#[cfg(target_arch = "arm")]
pub use unwind_core::Arm as Native;
/// The architecture this build unwinds.
#[cfg(target_arch = "x86_64")]
pub use unwind_core::X86_64 as Native;

#[cfg(all(feature = "minidump", target_arch = "aarch64"))]
pub use aarch64::cpu_info;
#[cfg(target_arch = "aarch64")]
pub use aarch64::{current_regs, thread_pointer};
#[cfg(all(feature = "minidump", target_arch = "arm"))]
pub use arm::cpu_info;
#[cfg(target_arch = "arm")]
pub use arm::{current_regs, thread_pointer};
#[cfg(all(feature = "minidump", target_arch = "x86_64"))]
pub use x86_64::cpu_info;
#[cfg(target_arch = "x86_64")]
pub use x86_64::{current_regs, thread_pointer};

/// An ARM processor (32- or 64-bit) for a minidump's SystemInfo stream: `architecture` at
/// `level` (the architecture version) and the hardware capabilities (user space cannot read
/// MIDR without the kernel's help, so no cpuid).
#[cfg(all(
    feature = "minidump",
    any(target_arch = "arm", target_arch = "aarch64")
))]
fn arm_cpu_info(
    architecture: minidump_common::format::ProcessorArchitecture,
    level: u16,
) -> unwind_samples::minidump::Processor {
    use scroll::{Pwrite, LE};
    // SAFETY: getauxval has no preconditions.
    let hwcaps = unsafe { libc::getauxval(libc::AT_HWCAP) } as u32;
    let info = minidump_common::format::ARMCpuInfo {
        cpuid: 0,
        elf_hwcaps: hwcaps,
    };
    let mut data = [0u8; 24];
    let _ = data.pwrite_with(info, 0, LE);
    unwind_samples::minidump::Processor {
        architecture,
        level,
        revision: 0,
        cpu: data,
    }
}

/// The program header type of this build's ELF files (what `dl_iterate_phdr` gives).
#[cfg(target_pointer_width = "64")]
pub type Phdr = libc::Elf64_Phdr;
/// The program header type of this build's ELF files (what `dl_iterate_phdr` gives).
#[cfg(target_pointer_width = "32")]
pub type Phdr = libc::Elf32_Phdr;

#[cfg(not(any(target_arch = "x86_64", target_arch = "arm", target_arch = "aarch64")))]
compile_error!("the runtime supports Linux on x86_64, 32-bit ARM and aarch64");

/// The registers the native architecture's unwinder tracks.
pub type Regs = <Native as Arch>::Regs;
/// The native architecture's unwind rule.
pub type Rule = <Native as Arch>::Rule;

/// A function that a code generator copies into executable memory, as is, again and again, and
/// the rules of its copies.
pub(crate) struct CopiedCode<R: 'static> {
    /// The exported symbol of the function in the generator's module.
    pub symbol: &'static CStr,
    /// Its machine code: only a function with exactly these bytes is taken for it (another
    /// version may be another function).
    pub bytes: &'static [u8],
    /// Its rows: `(from, to, rule)`, offsets in the function.
    pub rows: &'static [(u8, u8, R)],
}

/// A program header of a module's image, as an architecture's
/// [`RuntimeArch::rules_from_image`] reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment<'a> {
    /// `p_type`.
    pub p_type: u32,
    /// `p_vaddr` (an SVMA).
    pub svma: u64,
    /// Its bytes in the image copy (`p_memsz` of them, or as many as the copy holds); `None`
    /// if the copy holds none.
    pub bytes: Option<&'a [u8]>,
    /// The loadable segment of the copy holding it: its SVMA and its bytes.
    pub loadable: Option<(u64, &'a [u8])>,
}

/// What the runtime reads of a module's mapped image before its architecture turns it into
/// rules: its DWARF CFI sections (or why they could not be read), the program headers of the
/// architecture's own tables ([`RuntimeArch::UNWIND_SEGMENTS`]) and its code range.
pub(crate) struct ImageTables<'a> {
    /// `.eh_frame` (through `PT_GNU_EH_FRAME`), the PLT sections and the code range.
    pub cfi: Result<CfiSections<'a>, DwarfError>,
    /// The segments of [`RuntimeArch::UNWIND_SEGMENTS`] types.
    pub segments: Vec<Segment<'a>>,
    /// The module's code, `[start, end)` in SVMAs.
    pub code: (u64, u64),
}

/// What the runtime needs of an architecture besides its rules ([`DwarfArch`]) and its
/// registers in a minidump's context ([`ContextArch`]): how a signal's `ucontext` holds its
/// registers, what the stack looks like below SP, how a module's mapped image gives its tables,
/// and what the preload report says of them.
pub(crate) trait RuntimeArch: DwarfArch + ContextArch {
    /// Bytes below the stack pointer that a leaf function may use without moving it.
    const RED_ZONE: u64;

    /// The program header types of this architecture's own unwind tables, whose segments the
    /// image copy keeps whole.
    const UNWIND_SEGMENTS: &'static [u32];

    /// The functions run-time code generators copy as they are, with their rules (see
    /// [`crate::mappings`]).
    const COPIED_CODE: &'static [CopiedCode<Self::Rule>];

    /// The interrupted thread's registers, from the `ucontext_t` a signal handler gets (the
    /// kernel's layout for this architecture). Async-signal-safe: reads memory only.
    ///
    /// # Safety
    /// `ucontext` must point to a valid `ucontext_t` of this architecture.
    unsafe fn regs_from_ucontext(ucontext: *const c_void) -> Self::Regs;

    /// This process's pointer mask (`unwind_core::Memory::pointer_mask`): the bits of an
    /// instruction address that are not address. 0 (the default) but on aarch64 with pointer
    /// authentication. Async-signal-safe.
    #[inline(always)]
    fn pointer_mask() -> u64 {
        0
    }

    /// The interrupted thread's whole register file, for minidumps. Async-signal-safe.
    ///
    /// # Safety
    /// As [`RuntimeArch::regs_from_ucontext`].
    unsafe fn context_from_ucontext(ucontext: *const c_void) -> Context;

    /// A module's rules: from `tables`, read from its mapped image, or from `file` (its file on
    /// disk, when that is the mapped image) where the architecture prefers it.
    fn rules_from_image(
        tables: ImageTables<'_>,
        file: Option<&[u8]>,
    ) -> Result<(ModuleRules<Self::Rule>, LoadStats<Self>), DwarfError>;

    /// What loading found besides the CFI statistics, for the preload report: the EHABI index's
    /// statistics and error (none but on 32-bit ARM).
    fn report_extra(stats: &Self::ArchStats) -> (Option<ExidxStats>, Option<ExidxError>);

    /// Whether a rule was read from its function's instructions, not from an unwind table.
    fn from_instructions(rule: &Self::Rule) -> bool;
}

/// Reads the `BYTES`-byte word `index` of the general registers of a `ucontext_t` whose
/// `uc_mcontext` starts `mcontext` bytes in: how every architecture's module reads a signal's
/// registers without the target's `libc` types (which exist for the native target only).
///
/// # Safety
/// `ucontext` must point to a `ucontext_t` holding that word.
#[inline(always)]
unsafe fn ucontext_word<const BYTES: usize>(
    ucontext: *const c_void,
    mcontext: usize,
    index: usize,
) -> u64 {
    let at = mcontext + index * BYTES;
    // SAFETY: the caller guarantees the word is inside the ucontext_t; unaligned reads are
    // allowed (the kernel aligns it anyway).
    unsafe {
        let p = ucontext.cast::<u8>().add(at);
        match BYTES {
            8 => p.cast::<u64>().read_unaligned(),
            _ => u64::from(p.cast::<u32>().read_unaligned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pointer mask where the tests run: on x86_64 and ARM none; on aarch64 a field in bits
    /// 48 to 63 without bit 55 where the kernel reports pointer authentication (`HWCAP_PACA`:
    /// `qemu-aarch64 -cpu max` implements it, with a 48-bit address space, leaving the top
    /// byte to TBI: bits 48 to 54), and none where it does not.
    #[test]
    fn the_pointer_mask_is_the_pac_field() {
        let mask = aarch64::pointer_mask();
        #[cfg(target_arch = "aarch64")]
        {
            // SAFETY: getauxval has no preconditions.
            let paca = unsafe { libc::getauxval(libc::AT_HWCAP) } & libc::HWCAP_PACA != 0;
            assert_eq!(mask & !0xff7f_0000_0000_0000, 0, "{mask:#x}");
            assert_eq!(mask != 0, paca, "mask {mask:#x}, HWCAP_PACA {paca}");
        }
        #[cfg(not(target_arch = "aarch64"))]
        assert_eq!(mask, 0);
    }

    /// The native module reads each register where the target's `libc` puts it (the other
    /// architectures' modules are checked the same way by their own targets' runs, armv7 under
    /// qemu-arm).
    #[test]
    fn registers_are_read_where_libc_puts_them() {
        // SAFETY: ucontext_t is plain data; all zeros is a valid value.
        let mut uc: libc::ucontext_t = unsafe { std::mem::zeroed() };
        #[cfg(target_arch = "x86_64")]
        let (want_regs, want_context) = {
            for (i, g) in uc.uc_mcontext.gregs.iter_mut().enumerate() {
                *g = 0x1000 + i as i64;
            }
            let g = |r: libc::c_int| 0x1000 + r as u64;
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
            (
                Regs {
                    pc: g(libc::REG_RIP),
                    sp: g(libc::REG_RSP),
                    fp: g(libc::REG_RBP),
                },
                Context::X86_64 {
                    regs: order.map(g),
                    eflags: g(libc::REG_EFL) as u32,
                },
            )
        };
        #[cfg(target_arch = "arm")]
        let (want_regs, want_context) = {
            let m = &mut uc.uc_mcontext;
            let fields = [
                &mut m.arm_r0,
                &mut m.arm_r1,
                &mut m.arm_r2,
                &mut m.arm_r3,
                &mut m.arm_r4,
                &mut m.arm_r5,
                &mut m.arm_r6,
                &mut m.arm_r7,
                &mut m.arm_r8,
                &mut m.arm_r9,
                &mut m.arm_r10,
                &mut m.arm_fp,
                &mut m.arm_ip,
                &mut m.arm_sp,
                &mut m.arm_lr,
                &mut m.arm_pc,
            ];
            for (i, f) in fields.into_iter().enumerate() {
                *f = 0x1000 + i as u32 * 4;
            }
            // Thumb.
            m.arm_cpsr = 0x20;
            let r = |i: u32| 0x1000 + i * 4;
            (
                Regs {
                    pc: r(15) | 1,
                    lr: r(14),
                    sp: r(13),
                    r12: r(12),
                    r11: r(11),
                    r7: r(7),
                },
                Context::Arm {
                    iregs: std::array::from_fn(|i| r(i as u32)),
                    cpsr: 0x20,
                },
            )
        };
        #[cfg(target_arch = "aarch64")]
        let (want_regs, want_context) = {
            let m = &mut uc.uc_mcontext;
            for (i, r) in m.regs.iter_mut().enumerate() {
                *r = 0x1000 + i as u64 * 8;
            }
            m.sp = 0x2000;
            m.pc = 0x3000;
            m.pstate = 0x6000_0000;
            let mask = aarch64::pointer_mask();
            (
                Regs {
                    pc: 0x3000,
                    sp: 0x2000,
                    fp: 0x1000 + 29 * 8,
                    lr: 0x1000 + 30 * 8,
                },
                Context::Aarch64 {
                    iregs: std::array::from_fn(|i| 0x1000 + i as u64 * 8),
                    sp: 0x2000,
                    pc: 0x3000,
                    cpsr: 0x6000_0000,
                    pointer_mask: mask,
                },
            )
        };
        let p = (&uc as *const libc::ucontext_t).cast::<c_void>();
        // SAFETY: `p` points to a valid ucontext_t.
        let (regs, context) = unsafe {
            (
                <Native as RuntimeArch>::regs_from_ucontext(p),
                Native::context_from_ucontext(p),
            )
        };
        assert_eq!(regs, want_regs);
        assert_eq!(context, want_context);
        assert_eq!(context.regs::<Native>(), Some(want_regs));
    }
}
