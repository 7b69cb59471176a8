//! The Breakpad `STACK CFI` exporter: a module's rules, chosen by the fuzzer (expressions
//! included), are written as symbol-file text, which must parse back with rust-minidump's
//! `breakpad-symbols` (the parser behind `minidump-stackwalk`). At the start of every extent
//! the parsed records are evaluated by its walker, and where both they and our rule give a
//! caller, the return address is the same (and on x86_64 the CFA, which is the caller's SP).

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;

use arbitrary::{Result, Unstructured};
use breakpad_symbols::{FrameWalker, SimpleModule, SymbolFile};
use unwind_core::table::{ModuleRulesBuilder, RuleTableBuilder};
use unwind_core::StackImage;

use crate::check::{stack_bytes, STACK};
use crate::gen::Gen;

/// Input: bytes for [`arbitrary::Unstructured`]: the architecture, then the rules.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    // Bit 0: 32-bit ARM (as when this byte was a `bool`); else bit 1: aarch64; else x86_64.
    let _ = match u.arbitrary::<u8>() {
        Ok(b) if b & 1 != 0 => export::<unwind_dwarf::Arm>(&mut u),
        Ok(b) if b & 2 != 0 => export::<unwind_dwarf::Aarch64>(&mut u),
        Ok(_) => export::<unwind_dwarf::X86_64>(&mut u),
        Err(e) => Err(e),
    };
}

fn export<A: Gen>(u: &mut Unstructured<'_>) -> Result<()> {
    let mut rules = ModuleRulesBuilder::new();
    let regs_tracked = A::TRACKED - 1;
    let exprs = u.int_in_range(0..=4u16)?;
    for _ in 0..exprs {
        let _ = rules.add_expr(crate::gen::expr(u, regs_tracked)?);
    }
    let mut at = 0x1000u64;
    for _ in 0..u.int_in_range(1..=16usize)? {
        at += u64::from(u.int_in_range(0..=0x40u8)?);
        let len = u64::from(u.int_in_range(1..=0x80u8)?);
        let _ = rules.push(at, at + len, A::rule(u, exprs)?);
        at += len;
    }
    let Ok(rules) = rules.build() else {
        return Ok(());
    };
    let mut text = format!(
        "MODULE Linux {} 000000000000000000000000000000000 fuzz\n",
        A::BREAKPAD_NAME
    );
    let stats = unwind_dwarf::breakpad::write_stack_cfi::<A>(&rules, 0, &mut text);
    let sym = SymbolFile::from_bytes(text.as_bytes())
        .unwrap_or_else(|e| panic!("our STACK CFI does not parse back: {e}\n{text}"));
    let inits = text
        .lines()
        .filter(|l| l.starts_with("STACK CFI INIT"))
        .count();
    assert_eq!(sym.cfi_stack_info.ranges_values().count(), inits, "{text}");
    assert!(stats.records() as usize >= inits);

    let rules = Arc::new(rules);
    let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
    b.add(0, u64::MAX, 0, "fuzz".into(), rules.clone());
    let Ok(table) = b.build() else { return Ok(()) };
    let stack = stack_bytes(0x400, A::WORD_BYTES);
    let image = StackImage::new(STACK, &stack);
    for (start, _, rule) in rules.extents() {
        // Only a record of this very extent says what its rule does.
        if stats.skip_reason_at(start).is_some() || A::signal_frame(&rule) {
            continue;
        }
        let regs = A::scanned_caller(&A::Regs::default(), start, STACK + 0x800);
        let ours = A::step_rule(&table, 0, &rule, &regs, true, &image);
        let mut walker = Walker {
            pc: start,
            word: A::WORD_BYTES,
            image: &image,
            callee: A::breakpad_registers(&regs).into_iter().collect(),
            cfa: None,
            ra: None,
        };
        let walked = sym.walk_frame(&SimpleModule::default(), &mut walker);
        // Breakpad computes in 64 bits; the registers are the word size.
        let mask = u64::MAX >> (64 - 8 * u32::from(A::WORD_BYTES));
        if let (Ok(step), Some(()), Some(ra)) = (ours, walked, walker.ra) {
            assert_eq!(
                A::pc(&step.caller),
                ra & mask,
                "return address at {start:#x}: ours from {rule:?} (expressions {:?}), Breakpad's \
                 from\n{text}",
                rules.exprs()
            );
            if A::WORD_BYTES == 8 {
                assert_eq!(
                    Some(A::sp(&step.caller)),
                    walker.cfa,
                    "CFA at {start:#x}\n{text}"
                );
            }
        }
    }
    Ok(())
}

/// The callee's registers and the stack, as Breakpad's walker reads them.
struct Walker<'a> {
    pc: u64,
    word: u8,
    image: &'a StackImage<'a>,
    callee: BTreeMap<&'static str, u64>,
    cfa: Option<u64>,
    ra: Option<u64>,
}

impl FrameWalker for Walker<'_> {
    fn get_instruction(&self) -> u64 {
        self.pc
    }
    fn has_grand_callee(&self) -> bool {
        false
    }
    fn get_grand_callee_parameter_size(&self) -> u32 {
        0
    }
    fn get_register_at_address(&self, address: u64) -> Option<u64> {
        use unwind_core::Memory;
        match self.word {
            8 => self.image.read_u64(address),
            _ => self.image.read_u32(address).map(u64::from),
        }
    }
    fn get_callee_register(&self, name: &str) -> Option<u64> {
        self.callee.get(name).copied()
    }
    fn set_caller_register(&mut self, _: &str, _: u64) -> Option<()> {
        Some(())
    }
    fn clear_caller_register(&mut self, _: &str) {}
    fn set_cfa(&mut self, val: u64) -> Option<()> {
        self.cfa = Some(val);
        Some(())
    }
    fn set_ra(&mut self, val: u64) -> Option<()> {
        self.ra = Some(val);
        Some(())
    }
}
