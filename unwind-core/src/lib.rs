//! Fixed-register unwind rules, compact rule tables, a 509-slot direct-mapped rule cache (with a
//! second level) and an allocation-free unwind loop.
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
//! - [`aarch64`]: [`Aarch64`], 64-bit ARM (PC, SP, x29, x30), return addresses stripped of
//!   their pointer authentication codes.
//! - [`expr`]: a small postfix program for the DWARF expressions that read only tracked registers.
//! - [`table`]: per-module rule dictionaries with sorted extents, and the immutable [`RuleTable`];
//!   [`table::bytes`], a module's rules as bytes and their checked reader.
//! - [`cache`]: the direct-mapped, generation-stamped [`Cache`].
//! - [`memory`]: bounds-checked reads of a copied stack image or of the live stack.
//! - [`scan`]: stack scanning for return addresses, the opt-in last fallback.
//!
//! A table of two functions, a copied stack, and a walk through it:
//!
//! ```
//! use std::num::NonZeroU32;
//! use std::sync::Arc;
//! use unwind_core::table::{ModuleRulesBuilder, RuleTableBuilder};
//! use unwind_core::x86_64::{CfaRule, RegRule, Regs, Rule};
//! use unwind_core::{unwind, Cache, StackImage, StopReason, X86_64};
//!
//! let rule = |cfa, ra| Rule { cfa, ra, fp: RegRule::Same, signal_frame: false };
//! // `leaf` at [0x1000, 0x1100): CFA = rsp + 16, return address at CFA - 8.
//! // `start` at [0x2000, 0x2100): return address undefined (the outermost frame).
//! let mut rules = ModuleRulesBuilder::new();
//! rules.push(0x1000, 0x1100, rule(CfaRule::SpOffset(16), RegRule::Offset(-8))).unwrap();
//! rules.push(0x2000, 0x2100, rule(CfaRule::SpOffset(8), RegRule::Undefined)).unwrap();
//! let mut table = RuleTableBuilder::new(NonZeroU32::MIN);
//! table.add(0x1000, 0x2100, 0, "demo".into(), Arc::new(rules.build().unwrap()));
//! let table = table.build().unwrap();
//!
//! // The stack: leaf's frame at 0x7000, holding the return address into `start`.
//! let mut stack = [0u8; 64];
//! stack[8..16].copy_from_slice(&0x2010u64.to_le_bytes());
//! let image = StackImage::new(0x7000, &stack);
//!
//! let mut cache = Cache::<X86_64>::new(); // per thread, reused across walks
//! let mut pcs = [0u64; 16];
//! let regs = Regs { pc: 0x1050, sp: 0x7000, fp: 0 };
//! let r = unwind(&table, &mut cache, regs, &image, &mut pcs, None);
//! assert_eq!(r.stop, StopReason::EndOfStack);
//! assert_eq!(&pcs[..r.frames], &[0x1050, 0x2010]);
//! ```
#![no_std]
#![warn(missing_docs)]

extern crate alloc;

pub mod aarch64;
pub mod arch;
pub mod arm;
pub mod cache;
pub mod expr;
pub mod memory;
mod prefetch;
pub mod scan;
mod stop;
pub mod table;
pub mod unwind;
pub mod x86_64;

pub use aarch64::Aarch64;
pub use arch::{Arch, Step};
pub use arm::Arm;
pub use cache::{
    Cache, Cached, RuleRef, CACHE_SLOTS, EXTENT_GRANULE_BITS, EXTENT_SETS, EXTENT_WAYS,
    SECOND_LEVEL_SETS, SECOND_LEVEL_WAYS,
};
pub use memory::{LiveStack, Memory, StackImage};
pub use scan::{CallFit, ReturnSites};
pub use table::{
    Extent, Found, FoundExtent, ModuleRules, ModuleRulesBuilder, RuleTable, RuleTableBuilder,
    TableModule,
};
pub use unwind::{unwind, StopReason, Trust, UnwindResult};
pub use x86_64::X86_64;
