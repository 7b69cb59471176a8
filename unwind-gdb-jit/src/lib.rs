//! The GDB JIT interface: the in-memory ELF files ("symbol files") a JIT compiler lists from its
//! global `__jit_debug_descriptor` to describe the code it generates (Android's ART, LLVM's ORC
//! JIT, LuaJIT built with GDB support), read through any [`Memory`]: a recorded process's memory,
//! or this process's own.
//!
//! A symbol file is an ELF file whose sections have the generated code's own addresses: its
//! `.eh_frame` or `.debug_frame` gives unwind rules at those addresses (load bias 0), its
//! `.symtab` names the code ([`Symfile::code_range`], [`Symfile::functions`]).
//!
//! ```
//! use unwind_gdb_jit::{read_symfiles, Layout, Limits, Pieces};
//!
//! // A 64-bit descriptor at 0x1000 (version 1, no entries yet), in a process's memory.
//! let mut descriptor = vec![0u8; 24];
//! descriptor[0] = 1;
//! let memory = [(0x1000, descriptor)];
//! let list = read_symfiles(&Pieces(&memory), 0x1000, Layout::X86_64, &Limits::default()).unwrap();
//! assert!(list.symfiles.is_empty());
//! ```

mod elf;
mod error;
mod layout;
mod list;

pub use elf::{descriptor_address, Function};
pub use error::JitError;
pub use layout::Layout;
pub use list::{read_symfiles, JitList, Limits, Symfile};

/// The name of the descriptor's global variable.
pub const DESCRIPTOR_SYMBOL: &str = "__jit_debug_descriptor";

/// A process's memory.
pub trait Memory {
    /// Fills `buf` with the bytes at `address`; `false` (and `buf` unspecified) if any of them
    /// cannot be read.
    fn read(&self, address: u64, buf: &mut [u8]) -> bool;
}

/// A process's memory as pieces, each its start address and bytes (a recorded process's, a
/// fuzzer's): a read is served from one piece.
pub struct Pieces<'a, B>(pub &'a [(u64, B)]);

impl<B: AsRef<[u8]>> Memory for Pieces<'_, B> {
    fn read(&self, address: u64, buf: &mut [u8]) -> bool {
        self.0.iter().any(|(at, bytes)| {
            let Some(from) = address
                .checked_sub(*at)
                .and_then(|f| usize::try_from(f).ok())
            else {
                return false;
            };
            match from
                .checked_add(buf.len())
                .and_then(|to| bytes.as_ref().get(from..to))
            {
                Some(part) => {
                    buf.copy_from_slice(part);
                    true
                }
                None => false,
            }
        })
    }
}
