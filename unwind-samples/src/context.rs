//! A thread's whole integer register file as a minidump stores it ([`Context`]), for samples of
//! any architecture on any host, and its conversions to and from the registers the unwinder
//! tracks.

/// The register names of [`Context::X86_64`]'s `regs`, in `CONTEXT_AMD64` order.
pub const X86_64_REGISTERS: [&str; 17] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rip",
];

/// Index of `rsp` in [`Context::X86_64`]'s `regs`.
pub const X86_64_RSP: usize = 4;
/// Index of `rbp` in [`Context::X86_64`]'s `regs`.
pub const X86_64_RBP: usize = 5;
/// Index of `rip` in [`Context::X86_64`]'s `regs`.
pub const X86_64_RIP: usize = 16;

/// CPSR bit 5: the thread executes Thumb code.
pub const ARM_CPSR_THUMB: u32 = 1 << 5;

/// A thread's whole integer register file, as a minidump stores it. Architecture-independent, so
/// that an armv7 sample can be written or read on an x86_64 host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// x86_64.
    X86_64 {
        /// rax rcx rdx rbx rsp rbp rsi rdi r8..r15 rip ([`X86_64_REGISTERS`], `CONTEXT_AMD64`
        /// order).
        regs: [u64; 17],
        /// The flags register.
        eflags: u32,
    },
    /// 32-bit ARM.
    Arm {
        /// r0..r15; r15 is the PC without the Thumb bit (which is [`ARM_CPSR_THUMB`] in `cpsr`).
        iregs: [u32; 16],
        /// The program status register.
        cpsr: u32,
    },
    /// 64-bit ARM.
    Aarch64 {
        /// x0..x30 (x29 the frame pointer, x30 the link register), `CONTEXT_ARM64` order.
        iregs: [u64; 31],
        /// The stack pointer.
        sp: u64,
        /// The program counter.
        pc: u64,
        /// The processor state (PSTATE as `CPSR`).
        cpsr: u32,
        /// The bits of an instruction address that are not address in the sampled process (its
        /// pointer authentication code and top byte: `NT_ARM_PAC_MASK`'s `insn_mask`), 0 where
        /// return addresses are not signed. Not a register, and not in a minidump's
        /// `CONTEXT_ARM64`: the unwinder needs it to strip signed return addresses.
        pointer_mask: u64,
    },
}

impl Context {
    /// The instruction pointer (ARM: without the Thumb bit).
    pub fn pc(&self) -> u64 {
        match self {
            Context::X86_64 { regs, .. } => regs[X86_64_RIP],
            Context::Arm { iregs, .. } => u64::from(iregs[15]),
            Context::Aarch64 { pc, .. } => *pc,
        }
    }

    /// The stack pointer.
    pub fn sp(&self) -> u64 {
        match self {
            Context::X86_64 { regs, .. } => regs[X86_64_RSP],
            Context::Arm { iregs, .. } => u64::from(iregs[13]),
            Context::Aarch64 { sp, .. } => *sp,
        }
    }

    /// The registers architecture `A`'s unwinder starts from, if this is a context of `A`.
    #[inline]
    pub fn regs<A: ContextArch>(&self) -> Option<A::Regs> {
        A::regs(self)
    }

    /// The registers our x86_64 unwinder starts from, if this is an x86_64 context
    /// ([`Context::regs`] of [`unwind_core::X86_64`]).
    pub fn x86_64_regs(&self) -> Option<unwind_core::x86_64::Regs> {
        self.regs::<unwind_core::X86_64>()
    }

    /// The registers our ARM unwinder starts from (the PC with bit 0 set for Thumb code), if
    /// this is an ARM context ([`Context::regs`] of [`unwind_core::Arm`]).
    pub fn arm_regs(&self) -> Option<unwind_core::arm::Regs> {
        self.regs::<unwind_core::Arm>()
    }

    /// The registers our aarch64 unwinder starts from, if this is an aarch64 context
    /// ([`Context::regs`] of [`unwind_core::Aarch64`]).
    pub fn aarch64_regs(&self) -> Option<unwind_core::aarch64::Regs> {
        self.regs::<unwind_core::Aarch64>()
    }

    /// The sampled process's pointer mask (aarch64's `pointer_mask`; 0 elsewhere): what an
    /// unwind of the sample gives its memory (`unwind_core::Memory::pointer_mask`).
    pub fn pointer_mask(&self) -> u64 {
        match self {
            Context::Aarch64 { pointer_mask, .. } => *pointer_mask,
            _ => 0,
        }
    }

    /// Breakpad's name of this context's CPU: `amd64`, `arm` or `arm64`.
    pub fn cpu_name(&self) -> &'static str {
        match self {
            Context::X86_64 { .. } => "amd64",
            Context::Arm { .. } => "arm",
            Context::Aarch64 { .. } => "arm64",
        }
    }
}

/// An architecture whose registers a [`Context`] holds: how the registers its unwinder tracks
/// come out of a context and go back into one. Implemented by each architecture's
/// `unwind_core` type, so that code generic over the architecture reads and writes any
/// architecture's samples.
pub trait ContextArch: unwind_core::Arch {
    /// The registers the unwinder starts from, if `context` is of this architecture.
    fn regs(context: &Context) -> Option<Self::Regs>;

    /// The full context of the registers the unwinder tracks, every other register 0.
    fn context(regs: Self::Regs) -> Context;
}

impl ContextArch for unwind_core::X86_64 {
    #[inline]
    fn regs(context: &Context) -> Option<unwind_core::x86_64::Regs> {
        match context {
            Context::X86_64 { regs, .. } => Some(unwind_core::x86_64::Regs {
                pc: regs[X86_64_RIP],
                sp: regs[X86_64_RSP],
                fp: regs[X86_64_RBP],
            }),
            _ => None,
        }
    }

    /// rip, rsp and rbp.
    fn context(regs: unwind_core::x86_64::Regs) -> Context {
        let mut r = [0u64; 17];
        r[X86_64_RIP] = regs.pc;
        r[X86_64_RSP] = regs.sp;
        r[X86_64_RBP] = regs.fp;
        Context::X86_64 { regs: r, eflags: 0 }
    }
}

impl ContextArch for unwind_core::Arm {
    /// The PC with bit 0 set for Thumb code (CPSR's T bit).
    #[inline]
    fn regs(context: &Context) -> Option<unwind_core::arm::Regs> {
        match context {
            Context::Arm { iregs, cpsr } => Some(unwind_core::arm::Regs {
                pc: iregs[15] | u32::from(cpsr & ARM_CPSR_THUMB != 0),
                lr: iregs[14],
                sp: iregs[13],
                r12: iregs[12],
                r11: iregs[11],
                r7: iregs[7],
            }),
            _ => None,
        }
    }

    /// pc, lr, sp, r12, r11, r7. A PC with bit 0 set becomes a PC without it and CPSR's Thumb
    /// bit.
    fn context(regs: unwind_core::arm::Regs) -> Context {
        let mut iregs = [0u32; 16];
        iregs[15] = regs.pc & !1;
        iregs[14] = regs.lr;
        iregs[13] = regs.sp;
        iregs[12] = regs.r12;
        iregs[11] = regs.r11;
        iregs[7] = regs.r7;
        let cpsr = if regs.pc & 1 != 0 { ARM_CPSR_THUMB } else { 0 };
        Context::Arm { iregs, cpsr }
    }
}

/// Index of x29 (the frame pointer) in [`Context::Aarch64`]'s `iregs`.
pub const AARCH64_FP: usize = 29;
/// Index of x30 (the link register) in [`Context::Aarch64`]'s `iregs`.
pub const AARCH64_LR: usize = 30;

impl ContextArch for unwind_core::Aarch64 {
    #[inline]
    fn regs(context: &Context) -> Option<unwind_core::aarch64::Regs> {
        match context {
            Context::Aarch64 { iregs, sp, pc, .. } => Some(unwind_core::aarch64::Regs {
                pc: *pc,
                sp: *sp,
                fp: iregs[AARCH64_FP],
                lr: iregs[AARCH64_LR],
            }),
            _ => None,
        }
    }

    /// pc, sp, x29 and x30 (the pointer mask 0: it is the process's, not a register).
    fn context(regs: unwind_core::aarch64::Regs) -> Context {
        let mut iregs = [0u64; 31];
        iregs[AARCH64_FP] = regs.fp;
        iregs[AARCH64_LR] = regs.lr;
        Context::Aarch64 {
            iregs,
            sp: regs.sp,
            pc: regs.pc,
            cpsr: 0,
            pointer_mask: 0,
        }
    }
}

impl From<unwind_core::aarch64::Regs> for Context {
    /// [`ContextArch::context`] of [`unwind_core::Aarch64`].
    fn from(regs: unwind_core::aarch64::Regs) -> Context {
        <unwind_core::Aarch64 as ContextArch>::context(regs)
    }
}

impl From<unwind_core::x86_64::Regs> for Context {
    /// [`ContextArch::context`] of [`unwind_core::X86_64`].
    fn from(regs: unwind_core::x86_64::Regs) -> Context {
        <unwind_core::X86_64 as ContextArch>::context(regs)
    }
}

impl From<unwind_core::arm::Regs> for Context {
    /// [`ContextArch::context`] of [`unwind_core::Arm`].
    fn from(regs: unwind_core::arm::Regs) -> Context {
        <unwind_core::Arm as ContextArch>::context(regs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_regs_carry_the_thumb_bit() {
        let mut iregs = [0u32; 16];
        iregs[15] = 0x1000;
        let c = Context::Arm {
            iregs,
            cpsr: ARM_CPSR_THUMB,
        };
        assert_eq!(c.arm_regs().map(|r| r.pc), Some(0x1001));
        assert_eq!(c.pc(), 0x1000);
        assert_eq!(c.x86_64_regs(), None);
        let regs = c.arm_regs().unwrap();
        assert_eq!(Context::from(regs), c);
    }

    #[test]
    fn aarch64_regs_round_trip() {
        let regs = unwind_core::aarch64::Regs {
            pc: 0x55_0000_1000,
            sp: 0xffff_f000_0000,
            fp: 0xffff_f000_0040,
            lr: 0x0035_0055_0000_2000,
        };
        let c = Context::from(regs);
        assert_eq!(c.aarch64_regs(), Some(regs));
        assert_eq!(c.pointer_mask(), 0);
        assert_eq!((c.pc(), c.sp(), c.cpu_name()), (regs.pc, regs.sp, "arm64"));
        assert_eq!((c.arm_regs(), c.x86_64_regs()), (None, None));
    }

    #[test]
    fn x86_64_regs_round_trip() {
        let regs = unwind_core::x86_64::Regs {
            pc: 0x401000,
            sp: 0x7ffe_0000,
            fp: 0x7ffe_0040,
        };
        let c = Context::from(regs);
        assert_eq!(c.x86_64_regs(), Some(regs));
        assert_eq!((c.pc(), c.sp()), (0x401000, 0x7ffe_0000));
        assert_eq!(c.arm_regs(), None);
    }
}
