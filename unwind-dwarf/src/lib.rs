//! DWARF call-frame information (`.eh_frame`, `.debug_frame`) translated into `unwind-core` rule
//! tables for the fixed registers.
//!
//! Every row of every FDE is evaluated with gimli once, at load time, and translated into a
//! typed rule ([`unwind_core::x86_64::Rule`]); rows that cannot be expressed (a CFA on an
//! untracked register, an expression reading other registers) are dropped and counted by
//! [`DropReason`]. Identical neighbouring rows are merged by the table builder.
//!
//! 32-bit ARM modules ([`rules_from_sections_arm`], [`load_elf_file_arm`]) give
//! [`unwind_core::arm::Rule`]s from DWARF CFI where an FDE describes the address and from the
//! EHABI tables (`.ARM.exidx`, read by `unwind-arm-exidx`) elsewhere.
//!
//! Sources: an ELF file ([`load_elf_file`], [`rules_from_elf`]) or the sections of a module
//! already mapped in memory ([`CfiSections`], found from `PT_GNU_EH_FRAME` with
//! [`eh_frame_address_from_hdr`]). Malformed input gives a [`DwarfError`] or counted drops,
//! never a panic.

mod arm;
pub mod breakpad;
mod cfi;
mod compile;
mod elf;
pub mod plt;
mod x86_64;

pub use arm::{rules_from_sections_arm, ArmStats};
pub use cfi::{rules_from_sections, CfiSections, CfiStats, DropReason};
pub use compile::compile_expression;
pub use elf::{
    load_elf_file, load_elf_file_arm, rules_from_elf, rules_from_elf_arm, LoadedRules,
    LoadedRulesArm,
};
pub use unwind_arm_exidx::ExidxSections;

use std::fmt;

/// Why CFI could not be loaded.
#[derive(Debug)]
pub enum DwarfError {
    /// The file could not be opened or mapped.
    Io(std::io::Error),
    /// The ELF file is malformed.
    Elf(object::Error),
    /// The ELF file is for another architecture.
    UnsupportedArchitecture(object::Architecture),
    /// `.eh_frame_hdr` is malformed or does not point at `.eh_frame` directly.
    BadEhFrameHdr(gimli::Error),
    /// The module has neither `.eh_frame` nor `.debug_frame` (nor, for ARM, `.ARM.exidx`).
    NoCfi,
    /// The rules could not be encoded.
    Table(unwind_core::table::TableError),
    /// `.ARM.exidx` (or `.ARM.extab`) is malformed.
    Exidx(unwind_arm_exidx::ExidxError),
}

impl fmt::Display for DwarfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DwarfError::Io(e) => write!(f, "cannot read the file: {e}"),
            DwarfError::Elf(e) => write!(f, "malformed ELF file: {e}"),
            DwarfError::UnsupportedArchitecture(a) => write!(f, "unsupported architecture {a:?}"),
            DwarfError::BadEhFrameHdr(e) => write!(f, "malformed .eh_frame_hdr: {e}"),
            DwarfError::NoCfi => f.write_str("no .eh_frame, .debug_frame or .ARM.exidx"),
            DwarfError::Table(e) => write!(f, "cannot encode the rule table: {e}"),
            DwarfError::Exidx(e) => write!(f, "malformed .ARM.exidx: {e}"),
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
    let bases = gimli::BaseAddresses::default().set_eh_frame_hdr(hdr_svma);
    let parsed = gimli::EhFrameHdr::new(hdr, gimli::LittleEndian)
        .parse(&bases, address_size)
        .map_err(DwarfError::BadEhFrameHdr)?;
    match parsed.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => Ok(a),
        gimli::Pointer::Indirect(_) => Err(DwarfError::BadEhFrameHdr(
            gimli::Error::UnsupportedPointerEncoding(gimli::constants::DW_EH_PE_indirect),
        )),
    }
}
