//! A JIT's GDB interface as the profiled program leaves it in its memory: the descriptor, the
//! list of entries and the symbol files they point to, read by `unwind-gdb-jit` (through a
//! fuzzed memory), and each symbol file as the unwinder takes it (relocated if relocatable,
//! its code range, its functions, its rules). Also the MiniDebugInfo decompressor
//! (`unwind_dwarf::mini_debug_info`) on the same bytes: a module's file is as untrusted.

use unwind_dwarf::{ArchVisitor, Architecture, DwarfArch};
use unwind_gdb_jit::{Layout, Limits, Pieces};

/// Where the fuzzed memory (and the descriptor, at its start) is.
const BASE: u64 = 0x1000;

/// Input: a layout selector byte, then the memory at 0x1000 (the descriptor first).
pub fn run(data: &[u8]) {
    let _ = unwind_dwarf::mini_debug_info::decompress(data)
        .map(|d| assert!(d.len() <= unwind_dwarf::mini_debug_info::MAX_DECOMPRESSED));
    let Some((&selector, memory)) = data.split_first() else {
        return;
    };
    let layout =
        [Layout::X86_64, Layout::AARCH64, Layout::ARM, Layout::X86][usize::from(selector % 4)];
    let limits = Limits {
        entries: 64,
        symfile_bytes: 1 << 16,
        total_bytes: 1 << 18,
        tries: 2,
    };
    let Ok(list) = unwind_gdb_jit::read_symfiles(&Pieces(&[(BASE, memory)]), BASE, layout, &limits)
    else {
        return;
    };
    assert!(list.symfiles.len() + list.too_large + list.unreadable <= limits.entries);
    let total: usize = list.symfiles.iter().map(|s| s.bytes.len()).sum();
    assert!(total as u64 <= limits.total_bytes);
    for symfile in &list.symfiles {
        // Every byte of a symbol file is the region's.
        assert!(symfile.bytes.len() <= memory.len());
        if let Some((start, end)) = symfile.code_range() {
            assert!(start <= end);
        }
        for f in symfile.functions() {
            assert!(f.start <= f.end, "{f:?}");
        }
        let image = symfile.relocated();
        assert_eq!(image.len(), symfile.bytes.len());
        for arch in Architecture::ALL {
            arch.dispatch(Load(&image));
        }
    }
}

struct Load<'a>(&'a [u8]);

impl ArchVisitor for Load<'_> {
    type Output = ();
    fn visit<A: DwarfArch>(self) {
        if let Ok(loaded) = unwind_dwarf::rules_from_memory_image::<A>(self.0) {
            crate::check::table::<A>(loaded.rules);
        }
    }
}
