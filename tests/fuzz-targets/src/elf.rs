//! Whole ELF files, as a module's file is loaded: `object`'s parser, the sections found by
//! name and type, `.eh_frame_hdr`, PLT sections, symbols, ARM code read for its functions'
//! rules, and the return sites a stack scan accepts.

use unwind_dwarf::{ArchVisitor, Architecture, DwarfArch};

/// Input: the file.
pub fn run(data: &[u8]) {
    for arch in Architecture::ALL {
        arch.dispatch(Load(data));
    }
}

struct Load<'a>(&'a [u8]);

impl ArchVisitor for Load<'_> {
    type Output = ();
    fn visit<A: DwarfArch>(self) {
        if let Ok(loaded) = unwind_dwarf::rules_from_elf::<A>(self.0) {
            crate::check::table::<A>(loaded.rules);
        }
        if let Ok(sites) = unwind_dwarf::return_sites_from_elf::<A>(self.0) {
            assert!(sites.len() <= self.0.len());
        }
    }
}
