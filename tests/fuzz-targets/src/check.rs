//! Invariants every module's rule table must meet, whatever it was built from.

use std::num::NonZeroU32;
use std::sync::Arc;

use unwind_core::table::{ModuleRules, RuleTableBuilder};
use unwind_core::StackImage;
use unwind_dwarf::DwarfArch;

/// The synthetic stack the rules are stepped on: every word is its own address plus one.
pub(crate) const STACK: u64 = 0x7000_0000;

/// A stack image of `words` words at [`STACK`], each word its address + 1 (word size `bytes`).
pub(crate) fn stack_bytes(words: usize, bytes: u8) -> Vec<u8> {
    (0..words as u64)
        .flat_map(|i| {
            let w = STACK + i * u64::from(bytes) + 1;
            w.to_le_bytes()[..usize::from(bytes)].to_vec()
        })
        .collect()
}

/// Checks `rules` (of a module at file addresses, loaded with bias 0): its extents are sorted
/// and disjoint and each looks up to its own rule; it can be exported as Breakpad `STACK CFI`
/// text; and each of its first rules, applied to registers at its start on a synthetic stack,
/// gives a caller or a stop without panicking.
pub(crate) fn table<A: DwarfArch>(rules: ModuleRules<A::Rule>) {
    let mut last = 0;
    for (start, end, rule) in rules.extents() {
        assert!(last <= start && start < end, "extents out of order");
        assert_eq!(rules.lookup(start), Some(rule));
        assert_eq!(rules.lookup(end - 1), Some(rule));
        last = end;
    }
    let mut text = String::new();
    let stats = unwind_dwarf::breakpad::write_stack_cfi::<A>(&rules, 0, &mut text);
    assert!(stats.records() as usize <= text.lines().count());
    let rules = Arc::new(rules);
    let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
    b.add(0, u64::MAX, 0, "fuzz".into(), rules.clone());
    let Ok(table) = b.build() else { return };
    let stack = stack_bytes(0x400, A::WORD_BYTES);
    let image = StackImage::new(STACK, &stack);
    for (start, _, rule) in rules.extents().take(256) {
        let regs = A::scanned_caller(&A::Regs::default(), start, STACK + 0x800);
        let _ = A::step_rule(&table, 0, &rule, &regs, true, &image);
    }
}
