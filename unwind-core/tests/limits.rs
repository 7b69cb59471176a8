//! The rule table's limits, at each and one past it:
//!
//! | what | limit | one past |
//! |---|---|---|
//! | modules in a table | 65,536 (a module's index is a `u16`) | `TableError::TooManyModules` |
//! | rows in a module | none but memory: 10 million tested, 6 bytes each | - |
//! | distinct rules in a module | 65,535 (`u16` indices, one reserved for gaps) | `TableError::TooManyRules` |
//! | expressions in a module | 65,536 | `TableError::TooManyRules` |
//! | a module's described span | 4 GiB (`u32` offsets) | `TableError::RangeTooLarge` |
//! | frames in a walk | the caller's buffer: 100,000 tested | the walk stops with `StopReason::BufferFull`, counted |
//!
//! A loader that meets one of these errors reports it for that module (the runtime's preload
//! report names it) and keeps the others.

use std::num::NonZeroU32;
use std::sync::Arc;

use unwind_core::expr::{Expr, Op};
use unwind_core::table::{ModuleRulesBuilder, TableError};
use unwind_core::x86_64::{CfaRule, RegRule, Regs, Rule};
use unwind_core::{unwind, Cache, RuleTableBuilder, StackImage, StopReason, X86_64};

fn rule(cfa: i32) -> Rule {
    Rule {
        cfa: CfaRule::SpOffset(cfa),
        ra: RegRule::Offset(-8),
        fp: RegRule::Same,
        signal_frame: false,
    }
}

#[test]
fn most_modules() {
    let mut m = ModuleRulesBuilder::new();
    m.push(0x1000, 0x1100, rule(16)).unwrap();
    let rules = Arc::new(m.build().unwrap());
    let table = |n: u64| {
        let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
        for i in 0..n {
            // Module i's code at 0x1_0000_0000 + i * 0x1000, its one function at its start.
            let start = 0x1_0000_0000 + i * 0x1000;
            b.add(
                start,
                start + 0x1000,
                start - 0x1000,
                format!("m{i}"),
                rules.clone(),
            );
        }
        b.build()
    };
    let t = table(65_536).expect("65,536 modules");
    for i in [0u64, 1, 4_095, 32_768, 65_535] {
        let found = t.lookup(0x1_0000_0000 + i * 0x1000 + 0x10).expect("a rule");
        assert_eq!(u64::from(found.module), i);
        assert_eq!(found.rule, rule(16));
    }
    assert_eq!(table(65_537).err(), Some(TableError::TooManyModules));
}

#[test]
fn largest_module() {
    const ROWS: u64 = 10_000_000;
    let mut m = ModuleRulesBuilder::new();
    for i in 0..ROWS {
        // Neighbours differ, so that nothing merges.
        m.push(i * 4, i * 4 + 4, rule(8 + (i % 4) as i32 * 8))
            .unwrap();
    }
    let rules = m.build().unwrap();
    assert_eq!(rules.rows(), ROWS);
    // Per extent a 4-byte start and a 2-byte rule index, and at most a byte of page index (4 bytes
    // a page of 8 extents on average, or of 4 to 8 where the page size, a power of two, rounds
    // down), besides the dictionary.
    println!("{ROWS} rows: {} bytes", rules.bytes());
    assert!(
        rules.bytes() as u64 <= ROWS * 7 + 4096,
        "{} bytes",
        rules.bytes()
    );
    for i in [0, 1, 2, 3, 12_345, ROWS / 2, ROWS - 1] {
        assert_eq!(
            rules.lookup(i * 4 + 3),
            Some(rule(8 + (i % 4) as i32 * 8)),
            "row {i}"
        );
    }
    assert_eq!(rules.lookup(ROWS * 4), None);
}

#[test]
fn most_distinct_rules_and_expressions() {
    let mut m = ModuleRulesBuilder::new();
    for i in 0..65_535u64 {
        m.push(i * 4, i * 4 + 4, rule(i as i32 * 8)).unwrap();
    }
    assert_eq!(
        m.push(65_535 * 4, 65_536 * 4, rule(-8)),
        Err(TableError::TooManyRules)
    );
    let rules = m.build().unwrap();
    assert_eq!(rules.dictionary().len(), 65_535);
    assert_eq!(rules.lookup(65_534 * 4), Some(rule(65_534 * 8)));

    let mut m = ModuleRulesBuilder::<Rule>::new();
    for i in 0..65_536i64 {
        m.add_expr(Expr::new(&[Op::Reg(1), Op::Const(i), Op::Add]).unwrap())
            .unwrap();
    }
    let one_more = Expr::new(&[Op::Reg(1), Op::Const(-1), Op::Add]).unwrap();
    assert_eq!(m.add_expr(one_more), Err(TableError::TooManyRules));
}

#[test]
fn widest_module() {
    let span = |end: u64| {
        let mut m = ModuleRulesBuilder::new();
        m.push(0x1000, 0x1100, rule(16)).unwrap();
        m.push(end - 0x100, end, rule(24)).unwrap();
        m.build()
    };
    let rules = span(0x1000 + u64::from(u32::MAX)).expect("just under 4 GiB");
    assert_eq!(
        rules.lookup(0x1000 + u64::from(u32::MAX) - 1),
        Some(rule(24))
    );
    assert_eq!(
        span(0x1000 + (1 << 32) + 1).err(),
        Some(TableError::RangeTooLarge)
    );
}

#[test]
fn deepest_stack() {
    // A 100,000-frame recursion through one function: CFA = rsp + 16, return address at
    // CFA - 8, into the function itself; the outermost frame returns into `start`.
    const FRAMES: usize = 100_000;
    let mut m = ModuleRulesBuilder::new();
    m.push(0x1000, 0x1100, rule(16)).unwrap();
    m.push(
        0x2000,
        0x2100,
        Rule {
            ra: RegRule::Undefined,
            ..rule(8)
        },
    )
    .unwrap();
    let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
    b.add(0x1000, 0x3000, 0, "m".into(), Arc::new(m.build().unwrap()));
    let table = b.build().unwrap();
    const STACK: u64 = 0x7000_0000;
    let mut words = vec![0u64; FRAMES * 2 + 2];
    for f in 0..FRAMES {
        // Frame f's return address, at its CFA - 8.
        words[f * 2 + 1] = if f + 1 == FRAMES { 0x2010 } else { 0x1050 };
    }
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let image = StackImage::new(STACK, &bytes);
    let regs = Regs {
        pc: 0x1040,
        sp: STACK,
        fp: 0,
    };
    let mut cache = Cache::<X86_64>::new();
    let mut pcs = vec![0u64; FRAMES + 10];
    let r = unwind(&table, &mut cache, regs, &image, &mut pcs, None);
    assert_eq!((r.stop, r.frames), (StopReason::EndOfStack, FRAMES + 1));
    // One past the buffer: a counted truncation, never a write past it.
    let mut short = vec![0u64; 1_000];
    let r = unwind(&table, &mut cache, regs, &image, &mut short, None);
    assert_eq!((r.stop, r.frames), (StopReason::BufferFull, 1_000));
    let mut none: [u64; 0] = [];
    let r = unwind(&table, &mut cache, regs, &image, &mut none, None);
    assert_eq!((r.stop, r.frames), (StopReason::BufferFull, 0));
}
