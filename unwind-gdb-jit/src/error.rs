//! Why a JIT's list could not be read.

use std::fmt;

/// Why a JIT's list of symbol files could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JitError {
    /// The descriptor (or an entry) at this address cannot be read.
    Unreadable {
        /// The address.
        address: u64,
    },
    /// The descriptor's version is not 1, the only one GDB defines.
    UnknownVersion(u32),
    /// The list comes back to an entry already read.
    Loop {
        /// The entry's address.
        address: u64,
    },
    /// The list has more entries than [`crate::Limits::entries`].
    TooManyEntries,
    /// The list kept changing while it was read, on every try.
    KeptChanging,
}

impl fmt::Display for JitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JitError::Unreadable { address } => {
                write!(f, "JIT descriptor list: cannot read memory at {address:#x}")
            }
            JitError::UnknownVersion(v) => {
                write!(f, "JIT descriptor list: unknown version {v} (not 1)")
            }
            JitError::Loop { address } => {
                write!(
                    f,
                    "JIT descriptor list: loops back to the entry at {address:#x}"
                )
            }
            JitError::TooManyEntries => {
                f.write_str("JIT descriptor list: more entries than the limit")
            }
            JitError::KeptChanging => {
                f.write_str("JIT descriptor list: changed while it was read, on every try")
            }
        }
    }
}

impl std::error::Error for JitError {}
