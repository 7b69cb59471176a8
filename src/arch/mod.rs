//! What differs between the architectures the runtime supports, behind one module per
//! architecture with the same items, of which the build's target selects one:
//!
//! - `Native`: the architecture's type (`unwind_core::Arch` and `unwind_dwarf::DwarfArch`),
//!   with its `Regs` and `Rule`;
//! - `RED_ZONE` (bytes below SP a leaf may use) and `Phdr` (its ELF program header type);
//! - `regs_from_ucontext`, `context_from_ucontext` (the whole register file, for minidumps),
//!   `regs_of` (the tracked registers of such a context) and `current_regs` (at the caller);
//! - `thread_pointer` (how the signal handler finds the thread's slot without dynamic TLS);
//! - `cpu_info` (the CPU as a minidump's SystemInfo stream describes it);
//! - image discovery: `UNWIND_SEGMENTS` (program header types of its own unwind tables, kept
//!   whole in the image copy), `rules_from_image` (a module's rules from its mapped image or
//!   file), `report_extra` (what the preload report shows besides the CFI statistics) and
//!   `from_instructions` (whether a rule was read from code rather than from a table);
//! - `COPIED_CODE`: functions that code generators copy into executable memory, with rules for
//!   their copies (CPython's perf trampoline on x86_64).
//!
//! Adding an architecture to the runtime means one more such module (see ARCHITECTURE.md).

#[cfg(target_arch = "arm")]
mod arm;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(target_arch = "arm")]
pub use arm::*;
#[cfg(target_arch = "x86_64")]
pub use x86_64::*;

#[cfg(not(any(target_arch = "x86_64", target_arch = "arm")))]
compile_error!("the runtime supports Linux on x86_64 and 32-bit ARM");
