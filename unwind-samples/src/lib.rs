//! Stack samples away from the process that took them: everything here builds and runs on any
//! host, for samples of any architecture the unwinder supports (x86_64 and 32-bit ARM).
//!
//! - [`context`]: a thread's whole register file as a minidump stores it ([`Context`]);
//! - [`minidump`]: a sample written as a minidump, with the frames the in-process unwinder found
//!   in a user stream, for Breakpad-compatible walkers to walk the same sample;
//! - [`trace`]: stacks in the shape of Breakpad's `minidump_stackwalk -m`;
//! - [`symbolize`]: function names for addresses, from ELF symbol tables;
//! - [`debug_files`]: where a module's file and its separate debug file are (a symbol root,
//!   build ids, `.gnu_debuglink`, `.gnu_debugaltlink`);
//! - [`offline`]: rule tables rebuilt from module files ([`offline::table_from_files`]), and
//!   the armv7 sample file format ([`offline::ArmSample`]);
//! - [`sequence`]: consecutive samples of a process, for replaying in order ([`sequence::Sequence`]);
//! - [`jitdump`]: the records of perf's jitdump files, in which JIT compilers describe their code;
//! - the `unwind-syms` binary: Breakpad symbol files from ELF files.
//!
//! [`minidump`] and [`trace`] are the default feature `minidump` (minidump-common and scroll);
//! without it the rest builds alone.
//!
//! The in-process side (registers from a signal's `ucontext`, stack copies, the modules of the
//! running process) is the `unwind-in-process` crate.
//!
//! ```
//! use unwind_samples::minidump::{self, SampleDump, SystemInfo, Unwound};
//! use unwind_samples::Context;
//! use unwind_core::StopReason;
//!
//! // A 32-bit ARM sample, written as a minidump on whatever host runs this.
//! let regs = unwind_core::arm::Regs { pc: 0x1001, lr: 0x2000, sp: 0x7f00_0000, ..Default::default() };
//! let context = Context::from(regs);
//! assert_eq!(context.arm_regs(), Some(regs)); // the Thumb bit travels in CPSR
//! let system = SystemInfo::unknown(&context);
//! let stack = [0u8; 64];
//! let bytes = minidump::write(&SampleDump {
//!     system: &system,
//!     context,
//!     thread_id: 1,
//!     stack_base: 0x7f00_0000,
//!     stack: &stack,
//!     modules: &[],
//!     unwound: Some(Unwound { pcs: &[0x1001, 0x2000], stop: StopReason::EndOfStack }),
//! });
//! assert_eq!(&bytes[..4], b"MDMP");
//! ```

#![warn(missing_docs)]

pub mod context;
pub mod debug_files;
pub mod jitdump;
#[cfg(feature = "minidump")]
pub mod minidump;
pub mod offline;
pub mod plt_names;
pub mod sequence;
pub mod symbolize;
#[cfg(test)]
mod test_elf;
#[cfg(feature = "minidump")]
pub mod trace;

pub use context::{Context, ContextArch};
