//! Fixed-register unwind rules, compact rule tables, a 509-slot direct-mapped rule cache and an
//! allocation-free unwind loop.
//!
//! This crate touches no ELF file, no OS interface and no allocator on the unwind path: tables are
//! built once (allocation allowed) and then evaluated from a signal handler. It is `no_std` so that
//! samples of one architecture can be unwound on a host of another.
//!
//! The pieces:
//! - [`unwind()`]: the unwind loop, written once, generic over an [`Arch`].
//! - [`arch`]: the [`Arch`] trait, what an architecture supplies to the loop.
//! - [`x86_64`]: [`X86_64`], the register set (PC, SP, FP), its typed [`x86_64::Rule`].
//! - [`arm`]: [`Arm`], 32-bit ARM (r15, r14, r13, r12, r11, r7), rules from DWARF or EXIDX.
//! - [`expr`]: a small postfix program for the DWARF expressions that read only tracked registers.
//! - [`table`]: per-module rule dictionaries with sorted extents, and the immutable [`RuleTable`].
//! - [`cache`]: the direct-mapped, generation-stamped [`Cache`].
//! - [`memory`]: bounds-checked reads of a copied stack image or of the live stack.
#![no_std]
#![warn(missing_docs)]

extern crate alloc;

pub mod arch;
pub mod arm;
pub mod cache;
pub mod expr;
pub mod memory;
pub mod table;
pub mod unwind;
pub mod x86_64;

pub use arch::{Arch, Step};
pub use arm::Arm;
pub use cache::{Cache, Cached, RuleRef, CACHE_SLOTS};
pub use memory::{LiveStack, Memory, StackImage};
pub use table::{Found, ModuleRules, ModuleRulesBuilder, RuleTable, RuleTableBuilder, TableModule};
pub use unwind::{unwind, StopReason, Trust, UnwindResult};
pub use x86_64::X86_64;
