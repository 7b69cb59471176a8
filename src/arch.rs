//! What differs between the architectures the runtime supports: the register set, its rules and
//! unwind loop, how registers are read from a signal's `ucontext` or from the current frame, and
//! how a loaded module's unwind tables are found in its image.

#[cfg(target_arch = "x86_64")]
mod imp {
    pub use unwind_core::x86_64::{unwind, CachedRule, Regs, Rule};

    /// Bytes below the stack pointer that leaf functions may use without moving it (psABI).
    pub const RED_ZONE: u64 = 128;

    /// The program header type of this architecture's ELF files.
    pub type Phdr = libc::Elf64_Phdr;

    /// The stack pointer of `regs`.
    #[inline(always)]
    pub fn sp(regs: &Regs) -> u64 {
        regs.sp
    }

    /// The interrupted thread's registers.
    ///
    /// # Safety
    /// `ucontext` must point to a valid `ucontext_t`.
    pub unsafe fn regs_from_ucontext(ucontext: *const libc::c_void) -> Regs {
        // SAFETY: the caller guarantees a valid ucontext_t.
        let uc = unsafe { &*(ucontext as *const libc::ucontext_t) };
        let g = &uc.uc_mcontext.gregs;
        let get = |i: libc::c_int| {
            usize::try_from(i)
                .ok()
                .and_then(|i| g.get(i))
                .map_or(0, |&v| v as u64)
        };
        Regs {
            pc: get(libc::REG_RIP),
            sp: get(libc::REG_RSP),
            fp: get(libc::REG_RBP),
        }
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
    pub use unwind_core::arm::{unwind, CachedRule, Regs, Rule};

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
