//! `.eh_frame` and `.debug_frame` bytes into rule tables, for any architecture: gimli's
//! parser, our translation of its rows, DWARF expressions compiled to postfix programs.

use unwind_dwarf::{rules_from_sections, CfiSections, DwarfArch};

/// Input: a selector byte (bit 0: 32-bit ARM, else bit 3: aarch64, else x86_64; bit 1:
/// `.debug_frame`, else `.eh_frame`; bit 2: with a code range, outside which FDEs are skipped),
/// then the section.
pub fn run(data: &[u8]) {
    let Some((&selector, section)) = data.split_first() else {
        return;
    };
    let debug = selector & 2 != 0;
    let sections = CfiSections {
        eh_frame: (!debug).then_some(section),
        debug_frame: debug.then_some(section),
        eh_frame_svma: 0x40_0000,
        text_svma: 0x1000,
        got_svma: 0x80_0000,
        code_range: (selector & 4 != 0).then_some((0x1000, 0x40_0000)),
        ..CfiSections::default()
    };
    match (selector & 1, selector & 8) {
        (1, _) => load::<unwind_dwarf::Arm>(&sections),
        (_, 8) => load::<unwind_dwarf::Aarch64>(&sections),
        _ => load::<unwind_dwarf::X86_64>(&sections),
    }
}

fn load<A: DwarfArch>(sections: &CfiSections<'_>) {
    if let Ok((rules, _)) = rules_from_sections::<A>(sections, None) {
        crate::check::table::<A>(rules);
    }
}
