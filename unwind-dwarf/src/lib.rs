//! DWARF call-frame information (`.eh_frame`, `.debug_frame`) translated into `unwind-core` rule
//! tables for the fixed registers, for every architecture through one trait, [`DwarfArch`]
//! ([`X86_64`], [`Arm`], [`Aarch64`]).
//!
//! Every row of every FDE is evaluated with gimli once, at load time, and translated into the
//! architecture's typed rule ([`unwind_core::x86_64::Rule`], [`unwind_core::arm::Rule`],
//! [`unwind_core::aarch64::Rule`]); rows
//! that cannot be expressed (a CFA on an untracked register, an expression reading other
//! registers) are dropped and counted by [`DropReason`]. Identical neighbouring rows are merged
//! by the table builder. PLT stubs without CFI get synthesized rows ([`plt`]); 32-bit ARM adds
//! the rows of its EHABI tables (`.ARM.exidx`, read by `unwind-arm-exidx`) where no FDE
//! describes an address ([`ArmStats`]); 32-bit ARM and AArch64 add rows read from the
//! instructions of the symbol table's functions that no table describes (`unwind-arm-prologue`;
//! [`ArmCode`], [`A64Code`], [`Aarch64Stats`]).
//!
//! Sources: an ELF file ([`load_elf_file`], [`rules_from_elf`]) or the sections of a module
//! already mapped in memory ([`CfiSections`], found from `PT_GNU_EH_FRAME` with
//! [`eh_frame_address_from_hdr`], and [`rules_from_sections`]). Malformed input gives a
//! [`DwarfError`] or counted drops, never a panic. Every loader is generic over the
//! architecture (`load_elf_file::<X86_64>`, `rules_from_sections::<Arm>`); a tool that learns
//! the architecture at run time uses [`Architecture`] (from an ELF file's `e_machine`) and
//! [`Architecture::dispatch`], as [`breakpad::symbol_file_for_elf`] does.
//!
//! ```
//! use unwind_dwarf::{rules_from_sections, CfiSections, X86_64};
//!
//! // One CIE and one FDE, as a compiler writes them into `.eh_frame` for a function at 0x1000
//! // of 16 bytes: CFA = rsp + 8, return address at CFA - 8, then `push rbp` at 0x1001.
//! let cie = [
//!     0x14, 0, 0, 0, 0, 0, 0, 0, // length 20, CIE id 0
//!     1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x1b, // version, "zR", code 1, data -8, RA 16, pcrel sdata4
//!     0x0c, 7, 8, 0x90, 1, 0, 0, // DW_CFA_def_cfa rsp+8; DW_CFA_offset rip, 1*-8; padding
//! ];
//! let mut eh_frame = cie.to_vec();
//! let fde_at = eh_frame.len() as i32;
//! let pc_begin = 0x1000 - (fde_at + 8); // pcrel: relative to the field, at section address 0
//! eh_frame.extend_from_slice(&[0x14, 0, 0, 0]); // length 20
//! eh_frame.extend_from_slice(&(fde_at + 4).to_le_bytes()); // CIE pointer (back to offset 0)
//! eh_frame.extend_from_slice(&pc_begin.to_le_bytes());
//! eh_frame.extend_from_slice(&[16, 0, 0, 0, 0]); // pc_range 16, no augmentation data
//! eh_frame.extend_from_slice(&[0x41, 0x0e, 16, 0x86, 2, 0, 0]); // advance 1; cfa+16; rbp at cfa-16
//!
//! let sections = CfiSections { eh_frame: Some(&eh_frame), ..CfiSections::default() };
//! let (rules, stats) = rules_from_sections::<X86_64>(&sections, None).unwrap();
//! assert_eq!(stats.cfi.fdes, 1);
//! assert_eq!(rules.rows(), 2); // [0x1000, 0x1001) and [0x1001, 0x1010)
//! ```
//!
//! # Adding an architecture
//!
//! Implement [`DwarfArch`] (and its sealing trait) for the architecture's `unwind-core` type,
//! in one module; add an [`Architecture`] variant, listed in [`Architecture::ALL`] and matched
//! in [`Architecture::dispatch`] (the repository's ARCHITECTURE.md lists the other layers). The
//! trait's items:
//! - identity: `ARCHITECTURE`, `ELF_MACHINE`, `ADDRESS_SIZE`, and `accepts_elf` where the
//!   default (the machine, little-endian) is not enough (the name and rule type are
//!   `unwind_core::Arch`'s `NAME` and `Rule`); `ArchStats`, what loading adds to [`CfiStats`]
//!   (`()` for nothing);
//! - DWARF: `tracked` (the DWARF registers it tracks, as expression registers) and `translate`
//!   (one gimli row to a rule or a [`DropReason`]); `VENDOR` where its CFI has vendor
//!   instructions (AArch64's `DW_CFA_AARCH64_negate_ra_state`);
//! - PLT: `PLT_SECTIONS` (the sections it knows and their [`plt::PltKind`]) and `plt_rows`;
//! - Breakpad: `BREAKPAD_NAME`, `BREAKPAD_REGISTERS`, `EXPRESSION_PC_SP`,
//!   `BREAKPAD_OTHER_REGISTERS` and `stack_cfi` (a rule in `STACK CFI` terms);
//! - an extra rule source, if it has one: `ExtraSections` ([`NoExtraSource`] otherwise), and
//!   `with_extra_sections` and `merge_extra` (their defaults add nothing).

// Input is untrusted (a crafted file must give an error or counted drops, never a panic): no
// unchecked arithmetic, indexing or unwrapping in the parsers outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::arithmetic_side_effects,
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]
#![warn(missing_docs)]

mod aarch64;
mod arch;
mod arm;
mod arm_code;
// The exporter writes rule tables already built (not file bytes): its arithmetic is on
// addresses the table guarantees ordered (extents below the image base are skipped) and on
// counters, and its indexing is on arrays indexed by its own enums.
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
pub mod breakpad;
mod called;
mod cfi;
mod compile;
pub mod eh_return;
mod elf;
pub mod functions;
pub mod go;
mod lazy_binding;
pub mod mini_debug_info;
pub mod plt;
pub mod return_sites;
pub mod sigreturn;
mod x86_64;

pub use aarch64::{A64Code, Aarch64Stats};
pub use arch::{ArchVisitor, Architecture, DwarfArch, NoExtraSource};
pub use arm::ArmStats;
pub use arm_code::{ArmCode, ArmFunction, ArmSections};
pub use cfi::{
    rules_from_sections, BadEntry, BadEntryKind, CfiSection, CfiSections, CfiStats, DropReason,
    FdeOutsideCode, LoadStats, RowSource,
};
pub use compile::compile_expression;
pub use elf::{
    debug_frame, load_elf_file, rules_from_elf, rules_from_memory_image, with_mapped_file, word_at,
    LoadedRules,
};
pub use return_sites::{return_sites, return_sites_from_elf, CallSiteSources};
pub use unwind_arm_exidx::{DroppedEntry, ExidxDropReason, ExidxError, ExidxSections, ExidxStats};
pub use unwind_arm_prologue::Isa;
pub use unwind_core::{Aarch64, Arm, X86_64};

use std::fmt;

/// A section of an ELF file whose contents could not be read (its header points outside the
/// file, or its compressed contents are corrupt). The loaders leave it out and read the other
/// sections ([`CfiStats::unreadable_sections`]); if nothing else is left, it is the error
/// ([`DwarfError::UnreadableSection`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnreadableSection {
    /// The section's name (`.eh_frame`, `.debug_frame`, `.ARM.exidx`, `.ARM.extab`).
    pub name: &'static str,
    /// Its file address.
    pub address: u64,
    /// Its file offset and size as its section header states them (`None` for a section
    /// without file contents).
    pub file_range: Option<(u64, u64)>,
    /// What was wrong.
    pub error: SectionError,
}

/// Why a section's contents could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionError {
    /// Its header points outside the file, or its zlib/zstd-compressed contents are corrupt.
    Object(object::Error),
    /// It is in the module's MiniDebugInfo (`.gnu_debugdata`), which could not be read.
    MiniDebugInfo(mini_debug_info::MiniDebugInfoError),
}

impl fmt::Display for SectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SectionError::Object(e) => e.fmt(f),
            SectionError::MiniDebugInfo(e) => e.fmt(f),
        }
    }
}

impl fmt::Display for UnreadableSection {
    /// `.ARM.extab (file offset 0x1000, size 0x20): Invalid ELF section size or offset`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.file_range {
            Some((offset, size)) => write!(
                f,
                "{} (file offset {offset:#x}, size {size:#x}): {}",
                self.name, self.error
            ),
            None => write!(
                f,
                "{} (address {:#x}): {}",
                self.name, self.address, self.error
            ),
        }
    }
}

/// Why CFI could not be loaded. The `Display` text names the section and the offset where
/// there is one, and what was wrong.
#[derive(Debug)]
pub enum DwarfError {
    /// The file could not be opened or mapped.
    Io(std::io::Error),
    /// The ELF headers (file header, section or program header table) are malformed.
    Elf(object::Error),
    /// The ELF file is for another architecture.
    UnsupportedArchitecture(object::Architecture),
    /// `.eh_frame_hdr` is malformed or does not point at `.eh_frame` directly.
    BadEhFrameHdr {
        /// Its file address.
        svma: u64,
        /// The byte offset in it of the field that is wrong (the version at 0, a pointer
        /// encoding at 1 to 3, the `.eh_frame` pointer at 4; for a truncated header, its
        /// length).
        offset: u64,
        /// What was wrong.
        error: gimli::Error,
    },
    /// The module has neither `.eh_frame` nor `.debug_frame` (nor, for ARM, `.ARM.exidx`).
    NoCfi,
    /// The rules could not be encoded (more than 65,535 distinct rules or expressions).
    Table(unwind_core::table::TableError),
    /// The module's rows span more than 4 GiB (a corrupt FDE, without a code range to skip
    /// it): the rows with the lowest start and the highest end.
    RangeTooLarge {
        /// Where the row with the lowest start came from.
        lowest: RowSource,
        /// Where the row with the highest end came from.
        highest: RowSource,
    },
    /// `.ARM.exidx` is malformed and the module has no other unwind information (with DWARF
    /// CFI or PLT rows, the error is in [`ArmStats::exidx_error`] instead).
    Exidx(unwind_arm_exidx::ExidxError),
    /// The ELF file's unwind sections could not be read (the first one is named) and it has no
    /// other unwind information.
    UnreadableSection(UnreadableSection),
}

impl fmt::Display for DwarfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DwarfError::Io(e) => write!(f, "cannot read the file: {e}"),
            DwarfError::Elf(e) => write!(f, "malformed ELF headers: {e}"),
            DwarfError::UnsupportedArchitecture(a) => write!(f, "unsupported architecture {a:?}"),
            DwarfError::BadEhFrameHdr {
                svma,
                offset,
                error,
            } => write!(
                f,
                "malformed .eh_frame_hdr (at {svma:#x}) at offset {offset:#x}: {error}"
            ),
            DwarfError::NoCfi => f.write_str("no .eh_frame, .debug_frame or .ARM.exidx"),
            DwarfError::Table(e) => write!(f, "cannot encode the rule table: {e}"),
            DwarfError::RangeTooLarge { lowest, highest } => write!(
                f,
                "the unwind rows span more than 4 GiB, from {lowest} to {highest}"
            ),
            // The error names `.ARM.exidx` and the entry itself.
            DwarfError::Exidx(e) => write!(f, "malformed {e}"),
            DwarfError::UnreadableSection(s) => write!(f, "unreadable section {s}"),
        }
    }
}

impl std::error::Error for DwarfError {}

impl From<unwind_core::table::TableError> for DwarfError {
    fn from(e: unwind_core::table::TableError) -> Self {
        DwarfError::Table(e)
    }
}

/// The address of `.eh_frame` from an `.eh_frame_hdr` found at file address `hdr_svma`
/// (the `PT_GNU_EH_FRAME` segment of a loaded module), for a module with `address_size`-byte
/// addresses (8 on x86_64, 4 on 32-bit ARM).
pub fn eh_frame_address_from_hdr(
    hdr: &[u8],
    hdr_svma: u64,
    address_size: u8,
) -> Result<u64, DwarfError> {
    let bad = |error: gimli::Error| DwarfError::BadEhFrameHdr {
        svma: hdr_svma,
        offset: eh_frame_hdr_error_offset(hdr, error),
        error,
    };
    let bases = gimli::BaseAddresses::default().set_eh_frame_hdr(hdr_svma);
    let parsed = gimli::EhFrameHdr::new(hdr, gimli::LittleEndian)
        .parse(&bases, address_size)
        .map_err(bad)?;
    match parsed.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => Ok(a),
        gimli::Pointer::Indirect(_) => Err(bad(gimli::Error::UnsupportedPointerEncoding(
            gimli::constants::DW_EH_PE_indirect,
        ))),
    }
}

/// The offset in `.eh_frame_hdr` of the field gimli's `error` is about: the header is a version
/// byte, three pointer-encoding bytes (of the `.eh_frame` pointer, the FDE count and the
/// table), then the `.eh_frame` pointer at offset 4.
fn eh_frame_hdr_error_offset(hdr: &[u8], error: gimli::Error) -> u64 {
    let len = u64::try_from(hdr.len()).unwrap_or(u64::MAX);
    match error {
        gimli::Error::UnknownVersion(_) => 0,
        // Only the `.eh_frame` pointer is required.
        gimli::Error::CannotParseOmitPointerEncoding => 1,
        gimli::Error::UnexpectedEof(_) => len,
        gimli::Error::UnknownPointerEncoding(e) | gimli::Error::UnsupportedPointerEncoding(e) => {
            // The first encoding byte that has the offending value (the `.eh_frame` pointer's
            // for an indirect pointer).
            let is = |i: usize| hdr.get(i).is_some_and(|&b| b == e.0);
            let indirect = e == gimli::constants::DW_EH_PE_indirect;
            (1..4)
                .find(|&i| !indirect && is(i))
                .map_or(1, |i| u64::try_from(i).unwrap_or(1))
        }
        _ => 4.min(len),
    }
}
