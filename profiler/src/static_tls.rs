//! A few bytes of each thread's own, in the static TLS block, reached by the initial-exec
//! model: the thread pointer plus an offset the loader wrote into the GOT, with no call.
//!
//! Rust's `thread_local!` in a shared object uses the general-dynamic model, whose
//! `__tls_get_addr` may call `malloc` (to grow a thread's vector of TLS blocks after a
//! `dlopen`): from inside an interposed `malloc`, that recurses. The initial-exec model never
//! calls anything; its cost is that a shared object using it takes a few bytes of the static
//! TLS block, which a library loaded at start (`LD_PRELOAD`, or linked) always has, and one
//! `dlopen`ed later takes from the loader's reserve (glibc keeps hundreds of bytes for this).
//!
//! The variable is defined here in assembly (`.tbss`, hidden: each shared object or program
//! that links this crate has its own, never another's), and its address computed per
//! architecture the way compilers emit initial-exec accesses.

/// Bytes of the block, zeroed in every new thread.
pub(crate) const BYTES: usize = 64;

/// Defines the block; `$kind` is the assembler's prefix of a type (`@` on x86_64, `%` on ARM,
/// where `@` starts a comment).
macro_rules! define_block {
    ($kind:literal) => {
        core::arch::global_asm!(
            concat!(
                ".pushsection .tbss.unwind_profiler_thread_block,\"awT\",",
                $kind,
                "nobits"
            ),
            ".p2align 3",
            ".globl unwind_profiler_thread_block",
            ".hidden unwind_profiler_thread_block",
            concat!(".type unwind_profiler_thread_block, ", $kind, "object"),
            ".size unwind_profiler_thread_block, 64",
            "unwind_profiler_thread_block:",
            ".zero 64",
            ".popsection",
        );
    };
}

#[cfg(target_arch = "x86_64")]
define_block!("@");
#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
define_block!("%");

/// The calling thread's block: [`BYTES`] bytes, 8-aligned, zeroed when the thread started
/// (copied from its parent's by `fork`). Async-signal-safe, allocates nothing, calls nothing.
#[inline(always)]
pub(crate) fn block() -> *mut u8 {
    let p: *mut u8;
    // SAFETY (each arm): reads the thread pointer register and the GOT entry the loader filled
    // with the variable's offset from it; writes only the output registers.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr [rip + unwind_profiler_thread_block@GOTTPOFF]",
            "add {p}, qword ptr fs:[0]",
            p = out(reg) p,
            options(pure, readonly, nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!(
            "adrp {p}, :gottprel:unwind_profiler_thread_block",
            "ldr {p}, [{p}, #:gottprel_lo12:unwind_profiler_thread_block]",
            "mrs {t}, tpidr_el0",
            "add {p}, {p}, {t}",
            p = out(reg) p,
            t = out(reg) _,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    #[cfg(target_arch = "arm")]
    unsafe {
        // The literal holds the GOT entry's distance from the `ldr` that reads it (the PC
        // reads 8 ahead in ARM state).
        core::arch::asm!(
            "ldr {p}, 3f",
            "1: ldr {p}, [pc, {p}]",
            "b 2f",
            "3: .word unwind_profiler_thread_block(gottpoff) + (3b - 1b - 8)",
            "2: mrc p15, 0, {t}, c13, c0, 3",
            "add {p}, {p}, {t}",
            p = out(reg) p,
            t = out(reg) _,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_has_its_own_zeroed_block() {
        let mine = block();
        assert_eq!(mine as usize % 8, 0);
        // SAFETY: the block is this thread's, BYTES long.
        unsafe { mine.write_bytes(0xa5, BYTES) };
        let (theirs, zeroed) = std::thread::spawn(|| {
            let b = block();
            // SAFETY: as above.
            let zeroed = unsafe { std::slice::from_raw_parts(b, BYTES) }
                .iter()
                .all(|&x| x == 0);
            (b as usize, zeroed)
        })
        .join()
        .unwrap();
        assert_ne!(theirs, mine as usize);
        assert!(zeroed);
        // SAFETY: as above.
        assert!(unsafe { std::slice::from_raw_parts(block(), BYTES) }
            .iter()
            .all(|&x| x == 0xa5));
    }
}
