//! Where the descriptor's and the entries' fields are, by the process's pointer size and the
//! alignment of `uint64_t`.

/// The layout of `struct jit_descriptor` and `struct jit_code_entry` in a process:
///
/// ```c
/// struct jit_code_entry { struct jit_code_entry *next_entry, *prev_entry;
///                         const char *symfile_addr; uint64_t symfile_size;
///                         /* ART: */ uint64_t timestamp; uint32_t seqlock; };
/// struct jit_descriptor { uint32_t version, action_flag;
///                         struct jit_code_entry *relevant_entry, *first_entry;
///                         /* ART: */ uint8_t magic[8] /* "Android2" */; ... };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes in a pointer: 4 or 8.
    pub pointer: u8,
    /// The alignment of `uint64_t`: 8, or 4 on 32-bit x86.
    pub u64_align: u8,
    /// The bits of a pointer that are its address (AArch64's top byte may carry a tag).
    pub address_mask: u64,
}

impl Layout {
    /// x86_64.
    pub const X86_64: Layout = Layout {
        pointer: 8,
        u64_align: 8,
        address_mask: u64::MAX,
    };
    /// AArch64 (the top byte is a tag: top-byte-ignore).
    pub const AARCH64: Layout = Layout {
        pointer: 8,
        u64_align: 8,
        address_mask: 0x00ff_ffff_ffff_ffff,
    };
    /// 32-bit ARM (EABI: `uint64_t` is 8-aligned).
    pub const ARM: Layout = Layout {
        pointer: 4,
        u64_align: 8,
        address_mask: u32::MAX as u64,
    };
    /// 32-bit x86 (`uint64_t` is 4-aligned in structures).
    pub const X86: Layout = Layout {
        pointer: 4,
        u64_align: 4,
        address_mask: u32::MAX as u64,
    };

    fn ptr(self) -> u64 {
        u64::from(self.pointer)
    }

    /// The offset of an entry's `next_entry`.
    pub(crate) fn next(self) -> u64 {
        0
    }

    /// The offset of an entry's `symfile_addr`.
    pub(crate) fn symfile_addr(self) -> u64 {
        2 * self.ptr()
    }

    /// The offset of an entry's `symfile_size`.
    pub(crate) fn symfile_size(self) -> u64 {
        let align = u64::from(self.u64_align);
        (3 * self.ptr()).div_ceil(align) * align
    }

    /// The offset of an ART entry's `seqlock` (after `symfile_size` and `timestamp`).
    pub(crate) fn seqlock(self) -> u64 {
        self.symfile_size() + 16
    }

    /// The offset of the descriptor's `first_entry`.
    pub(crate) fn first_entry(self) -> u64 {
        8 + self.ptr()
    }

    /// The offset of the descriptor's `relevant_entry`.
    pub(crate) fn relevant_entry(self) -> u64 {
        8
    }

    /// The offset of ART's `magic` in the descriptor.
    pub(crate) fn magic(self) -> u64 {
        8 + 2 * self.ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets libunwindstack asserts (`GlobalDebugImpl.h`).
    #[test]
    fn offsets_are_those_of_the_c_structures() {
        assert_eq!(Layout::X86.symfile_size(), 12);
        assert_eq!(Layout::X86.seqlock(), 28);
        assert_eq!(Layout::ARM.symfile_size(), 16);
        assert_eq!(Layout::ARM.seqlock(), 32);
        assert_eq!(Layout::X86_64.symfile_size(), 24);
        assert_eq!(Layout::X86_64.seqlock(), 40);
        assert_eq!(Layout::AARCH64.magic(), 24);
        assert_eq!(Layout::ARM.magic(), 16);
    }
}
