//! What [`ModuleRules::from_bytes`] allocates, counted by a global allocator: nothing for a
//! header whose counts claim more than the input holds (up to 4 billion entries in a 100-byte
//! input), and no more than a small multiple of the input for a large real-sized table; and a
//! table of 100,000 extents, with expressions, read back and walked by the unwinder as the one
//! it was written from.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::num::NonZeroU32;
use std::sync::Arc;

use unwind_core::expr::{Expr, Op};
use unwind_core::table::{ModuleRules, RulesBytesError};
use unwind_core::x86_64::{plt_cfa_expression, CfaRule, RegRule, Regs, Rule};
use unwind_core::{unwind, Cache, ModuleRulesBuilder, RuleTableBuilder, StackImage, X86_64};

/// Counts the bytes this thread allocates (the test harness runs tests on several threads).
struct Counting;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(add: usize, sub: usize) {
    // `try_with`: the thread's counters may be gone while it exits.
    let _ = LIVE.try_with(|live| {
        let now = live.get().saturating_add(add).saturating_sub(sub);
        live.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
    let _ = ALLOCATED.try_with(|a| a.set(a.get() + add));
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size(), 0);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(0, layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size, layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// `f`'s result, the bytes it allocated in all and its peak of live bytes above the start.
fn counted<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    let (a0, l0) = (ALLOCATED.with(Cell::get), LIVE.with(Cell::get));
    PEAK.with(|p| p.set(l0));
    let r = f();
    let allocated = ALLOCATED.with(Cell::get) - a0;
    let peak = PEAK.with(Cell::get) - l0;
    (r, allocated, peak)
}

/// A table of `n` extents of a few rules (one with the PLT expression), gaps between some.
fn table(n: u64) -> ModuleRules<Rule> {
    let mut b = ModuleRulesBuilder::new();
    let plt = b.add_expr(plt_cfa_expression()).unwrap();
    let deref = b
        .add_expr(Expr::new(&[Op::Reg(1), Op::Const(160), Op::Add, Op::Deref]).unwrap())
        .unwrap();
    let rules = [
        Rule::default(),
        Rule {
            cfa: CfaRule::SpOffset(16),
            fp: RegRule::Offset(-16),
            ..Rule::default()
        },
        Rule {
            cfa: CfaRule::FpOffset(16),
            fp: RegRule::Offset(-16),
            ..Rule::default()
        },
        Rule {
            cfa: CfaRule::Expr(plt),
            ..Rule::default()
        },
        Rule {
            cfa: CfaRule::Expr(deref),
            ra: RegRule::Offset(-8),
            fp: RegRule::Same,
            signal_frame: true,
        },
    ];
    let mut at = 0x40_0000u64;
    for i in 0..n {
        let len = 1 + (i * 7919) % 97;
        b.push(at, at + len, rules[(i % 5) as usize]).unwrap();
        at += len + u64::from(i % 3 == 0) * 16;
    }
    b.build().unwrap()
}

/// Counts claiming more than the input are refused before anything is allocated for them.
#[test]
fn huge_counts_allocate_nothing() {
    let bytes = table(3).to_bytes();
    for field in [72, 76, 80, 84, 88] {
        for claim in [u32::MAX, 1 << 31, 1 << 24, 1000] {
            let mut b = bytes.clone();
            b[field..field + 4].copy_from_slice(&claim.to_le_bytes());
            // A 100-byte input with the header's counts claiming that much.
            b.truncate(100);
            let (r, allocated, _) = counted(|| ModuleRules::<Rule>::from_bytes(&b));
            assert!(
                matches!(r, Err(RulesBytesError::Truncated { .. })),
                "{field}: {claim}: {r:?}"
            );
            assert_eq!(allocated, 0, "{field}: {claim}");
        }
    }
}

/// A table of 100,000 extents reads back as it was (lookups and a walk through it), with a
/// peak of live bytes allocated below twice its bytes.
#[test]
fn a_large_table_reads_back_in_bounded_memory() {
    let m = table(100_000);
    let bytes = m.to_bytes();
    let (back, allocated, peak) = counted(|| ModuleRules::<Rule>::from_bytes(&bytes).unwrap());
    println!(
        "{} bytes for {} extents; from_bytes allocated {allocated} bytes, peak {peak}",
        bytes.len(),
        m.rows()
    );
    assert!(peak <= 2 * bytes.len(), "{peak} for {} bytes", bytes.len());
    assert_eq!(format!("{m:?}"), format!("{back:?}"));

    // The same walks through both: two frames of the signal-frame rule's module and out.
    let walk = |rules: ModuleRules<Rule>| {
        let mut t = RuleTableBuilder::new(NonZeroU32::MIN);
        t.add(0x40_0000, 0x100_0000, 0, "m".into(), Arc::new(rules));
        let t = t.build().unwrap();
        let stack: Vec<u8> = (0..64u64)
            .flat_map(|i| (0x40_0000 + i * 0x1234).to_le_bytes())
            .collect();
        let image = StackImage::new(0x7000, &stack);
        let mut cache = Cache::<X86_64>::new();
        let mut frames = Vec::new();
        for pc in (0x40_0000..0x48_0000).step_by(0x1001) {
            let mut pcs = [0u64; 8];
            let regs = Regs {
                pc,
                sp: 0x7000,
                fp: 0x7040,
            };
            let r = unwind(&t, &mut cache, regs, &image, &mut pcs, None);
            frames.push((pcs[..r.frames].to_vec(), r.stop));
        }
        assert!(
            frames.iter().any(|(pcs, _)| pcs.len() >= 2),
            "no walk got past frame 0"
        );
        frames
    };
    assert_eq!(walk(m), walk(back));
}
