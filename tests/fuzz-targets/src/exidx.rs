//! ARM EHABI `.ARM.exidx` and `.ARM.extab` bytes: the index entries, their unwind opcodes
//! (personality routines 0, 1, 2 and generic ones) decoded and translated into rules, then
//! merged into a module's table as the loader merges them.

use unwind_dwarf::{rules_from_sections, ArmSections, CfiSections, ExidxSections};

const EXIDX_SVMA: u64 = 0x10_0000;

/// Input: a little-endian `u16`, the index's length in bytes (its top bit set: the code's end
/// and a few functions are known from "symbols", which clip the entries), a little-endian
/// `i32`, where `.ARM.extab` is relative to the index (real tables sliced for the corpus keep
/// their entries' references), then the index, then `.ARM.extab`.
pub fn run(data: &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let Some((delta, rest)) = rest.split_first_chunk::<4>() else {
        return;
    };
    let len = u16::from_le_bytes(*len);
    let with_symbols = len & 0x8000 != 0;
    let n = usize::from(len & 0x7fff).min(rest.len());
    let (exidx, extab) = rest.split_at(n);
    let extab_svma = EXIDX_SVMA.wrapping_add_signed(i64::from(i32::from_le_bytes(*delta)));
    let functions = [(0x100, 0x180), (0x200, 0x300), (0x1000, 0x1010)];
    let sections = ExidxSections {
        exidx,
        exidx_svma: EXIDX_SVMA,
        extab: Some(extab),
        extab_svma,
        text_end: with_symbols.then_some(EXIDX_SVMA),
        functions: if with_symbols { &functions } else { &[] },
    };
    if let Ok((rows, stats)) = unwind_arm_exidx::rows(&sections) {
        let mut last = 0;
        for &(start, end, _) in &rows {
            assert!(last <= start && start < end, "rows out of order");
            last = end;
        }
        assert!(stats.rows as usize <= rows.len());
    }
    let arm = ArmSections::from(sections);
    if let Ok((rules, _)) =
        rules_from_sections::<unwind_dwarf::Arm>(&CfiSections::default(), Some(&arm))
    {
        crate::check::table::<unwind_dwarf::Arm>(rules);
    }
}
