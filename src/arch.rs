//! What differs between the architectures the runtime supports: the register set, its rules and
//! unwind loop, how registers are read from a signal's `ucontext` or from the current frame, and
//! how a loaded module's unwind tables are found in its image.

#[cfg(target_arch = "x86_64")]
mod imp {
    pub use unwind_core::x86_64::{Regs, Rule};
    /// The architecture this build unwinds.
    pub use unwind_core::X86_64 as Native;

    use crate::minidump::Context;

    /// Bytes below the stack pointer that leaf functions may use without moving it (psABI).
    pub const RED_ZONE: u64 = 128;

    /// The program header type of this architecture's ELF files.
    pub type Phdr = libc::Elf64_Phdr;

    /// The stack pointer of `regs`.
    #[inline(always)]
    pub fn sp(regs: &Regs) -> u64 {
        regs.sp
    }

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

    /// The full context of `regs`: rip, rsp and rbp; every other register 0.
    pub fn context_from_regs(regs: &Regs) -> Context {
        let mut r = [0u64; 17];
        r[crate::minidump::X86_64_RIP] = regs.pc;
        r[crate::minidump::X86_64_RSP] = regs.sp;
        r[crate::minidump::X86_64_RBP] = regs.fp;
        Context::X86_64 { regs: r, eflags: 0 }
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
}

#[cfg(target_arch = "arm")]
mod imp {
    pub use unwind_core::arm::{Regs, Rule};
    /// The architecture this build unwinds.
    pub use unwind_core::Arm as Native;

    use crate::minidump::Context;

    /// AAPCS has no red zone.
    pub const RED_ZONE: u64 = 0;

    /// The program header type of this architecture's ELF files.
    pub type Phdr = libc::Elf32_Phdr;

    /// The stack pointer of `regs`.
    #[inline(always)]
    pub fn sp(regs: &Regs) -> u64 {
        u64::from(regs.sp)
    }

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

    /// The full context of `regs` (pc, lr, sp, r12, r11, r7; every other register 0). A PC with
    /// bit 0 set becomes a PC without it and CPSR's Thumb bit.
    pub fn context_from_regs(regs: &Regs) -> Context {
        let mut iregs = [0u32; 16];
        iregs[15] = regs.pc & !1;
        iregs[14] = regs.lr;
        iregs[13] = regs.sp;
        iregs[12] = regs.r12;
        iregs[11] = regs.r11;
        iregs[7] = regs.r7;
        let cpsr = if regs.pc & 1 != 0 {
            crate::minidump::ARM_CPSR_THUMB
        } else {
            0
        };
        Context::Arm { iregs, cpsr }
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
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "arm")))]
compile_error!("the `unwind` runtime supports Linux on x86_64 and 32-bit ARM");

pub use imp::*;
