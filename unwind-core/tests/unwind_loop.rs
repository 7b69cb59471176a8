//! The unwind loop (`unwind_core::unwind` for x86_64) on hand-built tables and stacks: complete
//! CFI chains, the frame-pointer fallback, every stop reason, tiny buffers, signal frames,
//! expression rules, the cache across tables, and random tables and stacks.

use std::num::NonZeroU32;
use std::sync::Arc;

use proptest::prelude::*;
use unwind_core::expr::{Expr, Op};
use unwind_core::table::{ModuleRules, ModuleRulesBuilder, RuleTable, RuleTableBuilder};
use unwind_core::x86_64::{CfaRule, RegRule, Regs, Rule};
use unwind_core::{
    unwind, Arch, Cache, Cached, ReturnSites, StackImage, StopReason, Trust, UnwindResult, X86_64,
};

/// Where the hand-built module is loaded: runtime = file address + BIAS.
const BIAS: u64 = 0x5555_0000_0000;
/// The stack image covers [STACK, STACK + 0x1000).
const STACK: u64 = 0x7ffe_0000_0000;

fn rule(cfa: CfaRule, ra: RegRule, fp: RegRule) -> Rule {
    Rule {
        cfa,
        ra,
        fp,
        signal_frame: false,
    }
}

/// The end-of-stack rule (`_start`, `clone`): return address undefined.
fn end_rule() -> Rule {
    rule(CfaRule::SpOffset(8), RegRule::Undefined, RegRule::Same)
}

fn table_with(rules: ModuleRules<Rule>, generation: u32) -> RuleTable<Rule> {
    let mut b = RuleTableBuilder::new(NonZeroU32::new(generation).unwrap());
    b.add(
        BIAS + 0x1000,
        BIAS + 0x10_0000,
        BIAS,
        "hand-built".into(),
        Arc::new(rules),
    );
    b.build().unwrap()
}

fn table(rows: &[(u64, u64, Rule)]) -> RuleTable<Rule> {
    let mut b = ModuleRulesBuilder::new();
    for &(s, e, r) in rows {
        b.push(s, e, r).unwrap();
    }
    table_with(b.build().unwrap(), 1)
}

/// A little-endian stack image of `words` starting at STACK.
fn image_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Writes `value` at address `addr` of an image based at STACK.
fn put(words: &mut [u64], addr: u64, value: u64) {
    assert_eq!(addr % 8, 0);
    words[((addr - STACK) / 8) as usize] = value;
}

fn run(
    table: &RuleTable<Rule>,
    regs: Regs,
    bytes: &[u8],
    n: usize,
) -> (UnwindResult, Vec<u64>, Vec<Trust>) {
    let mut cache = Cache::<X86_64>::new();
    let mut pcs = vec![0u64; n];
    let mut trust = vec![Trust::Context; n];
    let mem = StackImage::new(STACK, bytes);
    let r = unwind(table, &mut cache, regs, &mem, &mut pcs, Some(&mut trust));
    assert!(r.frames <= n);
    pcs.truncate(r.frames);
    trust.truncate(r.frames);
    (r, pcs, trust)
}

/// Three functions:
/// - `leaf` at 0x1000..0x1100: `CFA = rsp + 16`, return address at CFA - 8, rbp unchanged;
/// - `mid` at 0x2000..0x2100: `CFA = rbp + 16`, return address at CFA - 8, rbp at CFA - 16;
/// - `start` at 0x3000..0x3100: the end-of-stack rule.
fn three_functions() -> RuleTable<Rule> {
    table(&[
        (
            0x1000,
            0x1100,
            rule(CfaRule::SpOffset(16), RegRule::Offset(-8), RegRule::Same),
        ),
        (
            0x2000,
            0x2100,
            rule(
                CfaRule::FpOffset(16),
                RegRule::Offset(-8),
                RegRule::Offset(-16),
            ),
        ),
        (0x3000, 0x3100, end_rule()),
    ])
}

/// leaf (sp = STACK + 0x100) called from mid (frame record at STACK + 0x200) called from start.
fn three_frame_stack() -> (Regs, Vec<u64>) {
    let mut w = vec![0u64; 0x200];
    let sp0 = STACK + 0x100;
    // leaf: CFA = sp0 + 16, return address into mid at CFA - 8.
    put(&mut w, sp0 + 8, BIAS + 0x2040);
    // mid: rbp = STACK + 0x200; CFA = rbp + 16; return address into start at rbp + 8;
    // the caller's rbp at rbp.
    let fp1 = STACK + 0x200;
    put(&mut w, fp1 + 8, BIAS + 0x3010);
    put(&mut w, fp1, 0xdead_beef);
    let regs = Regs {
        pc: BIAS + 0x1050,
        sp: sp0,
        fp: fp1,
    };
    (regs, w)
}

#[test]
fn three_frame_cfi_chain_ends_with_end_of_stack() {
    let t = three_functions();
    let (regs, w) = three_frame_stack();
    let bytes = image_bytes(&w);
    let (r, pcs, trust) = run(&t, regs, &bytes, 32);
    assert_eq!(r.stop, StopReason::EndOfStack);
    assert!(r.stop.is_complete());
    assert_eq!(r.frames, 3);
    assert_eq!(pcs, [BIAS + 0x1050, BIAS + 0x2040, BIAS + 0x3010]);
    assert_eq!(trust, [Trust::Context, Trust::Cfi, Trust::Cfi]);

    // Exactly three slots are enough; two are not.
    let (r, pcs, _) = run(&t, regs, &bytes, 3);
    assert_eq!((r.frames, r.stop), (3, StopReason::EndOfStack));
    assert_eq!(pcs.len(), 3);
    let (r, pcs, _) = run(&t, regs, &bytes, 2);
    assert_eq!((r.frames, r.stop), (2, StopReason::BufferFull));
    assert_eq!(pcs, [BIAS + 0x1050, BIAS + 0x2040]);
}

#[test]
fn return_address_is_looked_up_minus_one() {
    // A call as the last instruction of `mid`: its return address is mid's end (0x2100), which
    // no rule covers; the lookup at 0x20ff must still find mid's rule.
    let t = three_functions();
    let (mut regs, mut w) = three_frame_stack();
    put(&mut w, regs.sp + 8, BIAS + 0x2100);
    let bytes = image_bytes(&w);
    let (r, pcs, trust) = run(&t, regs, &bytes, 8);
    assert_eq!(r.stop, StopReason::EndOfStack);
    assert_eq!(pcs, [BIAS + 0x1050, BIAS + 0x2100, BIAS + 0x3010]);
    assert_eq!(trust, [Trust::Context, Trust::Cfi, Trust::Cfi]);

    // Frame 0 is looked up at its own PC: at leaf's first byte the leaf rule applies, one byte
    // before it there is no rule and the frame-pointer fallback is used.
    regs.pc = BIAS + 0x1000;
    let (r, pcs, _) = run(&t, regs, &bytes, 8);
    assert_eq!((r.frames, r.stop), (3, StopReason::EndOfStack));
    assert_eq!(pcs, [BIAS + 0x1000, BIAS + 0x2100, BIAS + 0x3010]);
    regs.pc = BIAS + 0xfff;
    let (r, pcs, trust) = run(&t, regs, &bytes, 8);
    assert_eq!(r.stop, StopReason::EndOfStack);
    assert_eq!(pcs, [BIAS + 0xfff, BIAS + 0x3010]);
    assert_eq!(trust, [Trust::Context, Trust::FramePointer]);
}

#[test]
fn frame_pointer_fallback_when_no_rule() {
    let t = three_functions();
    let mut w = vec![0u64; 0x200];
    // Frame 0 in code without rules (0x9000 is inside the module but undescribed); its rbp
    // points to a frame record whose return address is in `mid`, whose own rbp-based rule then
    // continues the walk.
    let sp0 = STACK + 0x80;
    let fp0 = STACK + 0x100;
    let fp1 = STACK + 0x200;
    put(&mut w, fp0, fp1);
    put(&mut w, fp0 + 8, BIAS + 0x2040);
    put(&mut w, fp1, 0);
    put(&mut w, fp1 + 8, BIAS + 0x3010);
    let bytes = image_bytes(&w);
    let regs = Regs {
        pc: BIAS + 0x9000,
        sp: sp0,
        fp: fp0,
    };
    let (r, pcs, trust) = run(&t, regs, &bytes, 16);
    assert_eq!(r.stop, StopReason::EndOfStack);
    assert_eq!(pcs, [BIAS + 0x9000, BIAS + 0x2040, BIAS + 0x3010]);
    assert_eq!(trust, [Trust::Context, Trust::FramePointer, Trust::Cfi]);

    // Outside every module too (no module at all at 0x1234).
    let regs = Regs { pc: 0x1234, ..regs };
    let (r, pcs, trust) = run(&t, regs, &bytes, 16);
    assert_eq!(r.stop, StopReason::EndOfStack);
    assert_eq!(pcs, [0x1234, BIAS + 0x2040, BIAS + 0x3010]);
    assert_eq!(trust, [Trust::Context, Trust::FramePointer, Trust::Cfi]);

    // A pure frame-pointer chain through code without rules ends at a zero return address.
    let mut w = vec![0u64; 0x200];
    let fps = [STACK + 0x100, STACK + 0x140, STACK + 0x1c0];
    let ras = [BIAS + 0x9100, BIAS + 0x9200, 0];
    for i in 0..3 {
        put(&mut w, fps[i], fps.get(i + 1).copied().unwrap_or(0));
        put(&mut w, fps[i] + 8, ras[i]);
    }
    let bytes = image_bytes(&w);
    let regs = Regs {
        pc: 0x4444_0000,
        sp: STACK + 0x80,
        fp: fps[0],
    };
    let (r, pcs, trust) = run(&t, regs, &bytes, 16);
    assert_eq!(r.stop, StopReason::ZeroReturnAddress);
    assert!(r.stop.is_complete());
    assert_eq!(pcs, [0x4444_0000, BIAS + 0x9100, BIAS + 0x9200]);
    assert_eq!(
        trust,
        [Trust::Context, Trust::FramePointer, Trust::FramePointer]
    );

    // The same chain with a link that returns into no module: the fallback refuses it, at
    // frame 0 and at a caller alike, and the walk ends before it.
    for (bad, written) in [(0, 1), (1, 2)] {
        let mut w = w.clone();
        put(&mut w, fps[bad] + 8, 0x1111_0000);
        let (r, pcs, _) = run(&t, regs, &image_bytes(&w), 16);
        assert_eq!(r.stop, StopReason::NoRule);
        assert_eq!(pcs.len(), written, "{pcs:x?}");
        assert!(!pcs.contains(&0x1111_0000));
    }
}

#[test]
fn a_caller_in_no_module_is_not_written() {
    // `leaf`'s rule finds a return address in no module (a smashed stack, a wrong rule): the
    // walk ends with OutsideModules and the address is not a frame.
    let t = three_functions();
    let (regs, mut w) = three_frame_stack();
    put(&mut w, regs.sp + 8, 0x5555_0000);
    let bytes = image_bytes(&w);
    let mem = StackImage::new(STACK, &bytes);
    let mut cache = Cache::<X86_64>::new();
    let mut pcs = [7u64; 8];
    let r = unwind(&t, &mut cache, regs, &mem, &mut pcs, None);
    assert_eq!(r.frames, 1);
    assert_eq!(r.stop, StopReason::OutsideModules);
    assert!(!r.stop.is_complete());
    assert_eq!(pcs[0], regs.pc);
    assert_eq!(cache.outside_modules(), 1);
    assert_eq!(cache.last_outside_module(), 0x5555_0000 - 1);
    // Both lookups counted, the one that found no module included.
    assert_eq!(cache.hits() + cache.misses(), 2);
    // Warm, the same answer.
    let r = unwind(&t, &mut cache, regs, &mem, &mut pcs, None);
    assert_eq!((r.frames, r.stop), (1, StopReason::OutsideModules));

    // Deeper: `mid`'s frame record returns into no module.
    let (regs, mut w) = three_frame_stack();
    put(&mut w, STACK + 0x200 + 8, 0x5555_0000);
    let (r, pcs, trust) = run(&t, regs, &image_bytes(&w), 8);
    assert_eq!(r.stop, StopReason::OutsideModules);
    assert_eq!(pcs, [BIAS + 0x1050, BIAS + 0x2040]);
    assert_eq!(trust, [Trust::Context, Trust::Cfi]);
}

#[test]
fn no_rule_and_bad_frame_pointer_is_no_rule() {
    let t = three_functions();
    let w = vec![0u64; 0x200];
    let bytes = image_bytes(&w);
    let sp = STACK + 0x100;
    for (why, fp) in [
        ("misaligned", STACK + 0x181),
        ("below sp", STACK + 0x80),
        ("unreadable", STACK + 0x10_0000),
        ("zero", 0),
        ("top of the address space", u64::MAX - 7),
        ("last readable word", STACK + 0xff8),
    ] {
        let regs = Regs { pc: 0x1234, sp, fp };
        let (r, pcs, trust) = run(&t, regs, &bytes, 16);
        assert_eq!(r.stop, StopReason::NoRule, "{why}");
        assert_eq!(pcs, [0x1234], "{why}");
        assert_eq!(trust, [Trust::Context], "{why}");
    }
}

#[test]
fn sp_must_increase() {
    let mut w = vec![0u64; 0x200];
    let sp = STACK + 0x100;
    put(&mut w, sp - 8, BIAS + 0x2040);
    put(&mut w, sp, BIAS + 0x2040);
    let bytes = image_bytes(&w);
    let regs = Regs {
        pc: BIAS + 0x1010,
        sp,
        fp: STACK + 0x40,
    };
    for cfa in [
        CfaRule::SpOffset(0),
        CfaRule::SpOffset(-16),
        // rbp + 16 is below rsp.
        CfaRule::FpOffset(16),
    ] {
        let ra = if cfa == CfaRule::SpOffset(0) {
            RegRule::Offset(-8)
        } else {
            RegRule::ValOffset(0x40)
        };
        let t = table(&[(0x1000, 0x1100, rule(cfa, ra, RegRule::Same))]);
        let (r, pcs, _) = run(&t, regs, &bytes, 16);
        assert_eq!(r.stop, StopReason::SpNotIncreasing, "{cfa:?}");
        assert_eq!(pcs, [BIAS + 0x1010], "{cfa:?}");
    }
    // A loop of two frames whose records point at each other stops too (the second step would
    // move the stack pointer back down).
    let t = table(&[(
        0x1000,
        0x1100,
        rule(
            CfaRule::FpOffset(16),
            RegRule::Offset(-8),
            RegRule::Offset(-16),
        ),
    )]);
    let mut w = vec![0u64; 0x200];
    let (a, b) = (STACK + 0x100, STACK + 0x180);
    put(&mut w, a, b);
    put(&mut w, a + 8, BIAS + 0x1020);
    put(&mut w, b, a);
    put(&mut w, b + 8, BIAS + 0x1030);
    let bytes = image_bytes(&w);
    let regs = Regs {
        pc: BIAS + 0x1010,
        sp: STACK + 0x80,
        fp: a,
    };
    let (r, pcs, _) = run(&t, regs, &bytes, 64);
    assert_eq!(r.stop, StopReason::SpNotIncreasing);
    assert_eq!(pcs, [BIAS + 0x1010, BIAS + 0x1020, BIAS + 0x1030]);
}

#[test]
fn other_stop_reasons() {
    let w = vec![0u64; 0x200];
    let bytes = image_bytes(&w);
    let regs = Regs {
        pc: BIAS + 0x1010,
        sp: STACK + 0x100,
        fp: STACK + 0x180,
    };
    // The return address is read outside the stack.
    let t = table(&[(
        0x1000,
        0x1100,
        rule(
            CfaRule::SpOffset(0x10_0000),
            RegRule::Offset(-8),
            RegRule::Same,
        ),
    )]);
    assert_eq!(run(&t, regs, &bytes, 8).0.stop, StopReason::ReadFailed);
    // The frame pointer is read outside the stack.
    let t = table(&[(
        0x1000,
        0x1100,
        rule(
            CfaRule::SpOffset(16),
            RegRule::ValOffset(8),
            RegRule::Offset(0x10_0000),
        ),
    )]);
    assert_eq!(run(&t, regs, &bytes, 8).0.stop, StopReason::ReadFailed);
    // "Same value" cannot give a return address.
    let t = table(&[(
        0x1000,
        0x1100,
        rule(CfaRule::SpOffset(16), RegRule::Same, RegRule::Same),
    )]);
    assert_eq!(run(&t, regs, &bytes, 8).0.stop, StopReason::BadRule);
    // An expression index the module does not have.
    let t = table(&[(
        0x1000,
        0x1100,
        rule(CfaRule::Expr(7), RegRule::Offset(-8), RegRule::Same),
    )]);
    assert_eq!(run(&t, regs, &bytes, 8).0.stop, StopReason::BadRule);
    // An expression that underflows its stack.
    let mut b = ModuleRulesBuilder::new();
    let e = b.add_expr(Expr::new(&[Op::Add]).unwrap()).unwrap();
    b.push(
        0x1000,
        0x1100,
        rule(CfaRule::Expr(e), RegRule::Offset(-8), RegRule::Same),
    )
    .unwrap();
    let t = table_with(b.build().unwrap(), 1);
    assert_eq!(
        run(&t, regs, &bytes, 8).0.stop,
        StopReason::ExpressionFailed
    );
    // A zero return address read from the stack.
    let t = table(&[(
        0x1000,
        0x1100,
        rule(CfaRule::SpOffset(16), RegRule::Offset(-8), RegRule::Same),
    )]);
    let (r, pcs, _) = run(&t, regs, &bytes, 8);
    assert_eq!(r.stop, StopReason::ZeroReturnAddress);
    assert_eq!(pcs, [BIAS + 0x1010]);
    // The same with room for one frame: the walk ends at the stack's end, not at the buffer's.
    let (r, pcs, _) = run(&t, regs, &bytes, 1);
    assert_eq!(r.stop, StopReason::ZeroReturnAddress);
    assert_eq!(pcs, [BIAS + 0x1010]);
}

#[test]
fn buffers_of_length_zero_and_one() {
    let t = three_functions();
    let (regs, w) = three_frame_stack();
    let bytes = image_bytes(&w);
    let (r, pcs, _) = run(&t, regs, &bytes, 0);
    assert_eq!(
        r,
        UnwindResult {
            frames: 0,
            stop: StopReason::BufferFull
        }
    );
    assert!(pcs.is_empty());
    let (r, pcs, trust) = run(&t, regs, &bytes, 1);
    assert_eq!(
        r,
        UnwindResult {
            frames: 1,
            stop: StopReason::BufferFull
        }
    );
    assert_eq!(pcs, [BIAS + 0x1050]);
    assert_eq!(trust, [Trust::Context]);
    // Frame 0 already at the end of the stack: one slot suffices for a complete walk.
    let regs = Regs {
        pc: BIAS + 0x3010,
        ..regs
    };
    let (r, pcs, _) = run(&t, regs, &bytes, 1);
    assert_eq!((r.frames, r.stop), (1, StopReason::EndOfStack));
    assert_eq!(pcs, [BIAS + 0x3010]);

    // A trust slice shorter than the PC buffer is filled as far as it goes.
    let mut cache = Cache::<X86_64>::new();
    let mem = StackImage::new(STACK, &bytes);
    let (regs, _) = three_frame_stack();
    let mut pcs = [0u64; 8];
    let mut trust = [Trust::FramePointer; 1];
    let r = unwind(&t, &mut cache, regs, &mem, &mut pcs, Some(&mut trust));
    assert_eq!((r.frames, r.stop), (3, StopReason::EndOfStack));
    assert_eq!(trust, [Trust::Context]);
    let r = unwind(&t, &mut cache, regs, &mem, &mut pcs, Some(&mut [][..]));
    assert_eq!((r.frames, r.stop), (3, StopReason::EndOfStack));
}

/// glibc's `__restore_rt`: `CFA = *(rsp + 160)`, rip saved at `rsp + 168`, rbp at `rsp + 120`,
/// a signal frame.
fn restore_rt(b: &mut ModuleRulesBuilder<Rule>) -> Rule {
    let reg_plus = |off: i64| [Op::Reg(1), Op::Const(off), Op::Add];
    let cfa = b
        .add_expr(Expr::new(&[Op::Reg(1), Op::Const(160), Op::Add, Op::Deref]).unwrap())
        .unwrap();
    let ra = b.add_expr(Expr::new(&reg_plus(168)).unwrap()).unwrap();
    let fp = b.add_expr(Expr::new(&reg_plus(120)).unwrap()).unwrap();
    Rule {
        cfa: CfaRule::Expr(cfa),
        ra: RegRule::Expr(ra),
        fp: RegRule::Expr(fp),
        signal_frame: true,
    }
}

#[test]
fn signal_frame_makes_the_next_lookup_exact() {
    // The interrupted instruction X = 0x2000 is the first byte of `victim`, whose rule is the
    // end-of-stack rule; the byte before it (X - 1) belongs to `other`, whose rule continues
    // with a frame-pointer-style step. After the signal frame the caller's rule must be looked
    // up at X (end of stack), not at X - 1.
    const X: u64 = 0x2000;
    let other = rule(
        CfaRule::FpOffset(16),
        RegRule::Offset(-8),
        RegRule::Offset(-16),
    );
    let build = |signal: bool| {
        let mut b = ModuleRulesBuilder::new();
        let mut tramp = restore_rt(&mut b);
        tramp.signal_frame = signal;
        b.push(0x1000, 0x1010, tramp).unwrap();
        b.push(0x1ff0, X, other).unwrap();
        b.push(X, X + 0x10, end_rule()).unwrap();
        table_with(b.build().unwrap(), 1)
    };
    // The signal frame on the stack (ucontext at sp): saved rsp at +160, rip at +168, rbp at
    // +120. The interrupted rbp points to a frame record returning to 0x3333_0000.
    let mut w = vec![0u64; 0x200];
    let sp0 = STACK + 0x100;
    let interrupted_sp = STACK + 0x400;
    let interrupted_fp = STACK + 0x600;
    put(&mut w, sp0 + 160, interrupted_sp);
    put(&mut w, sp0 + 168, BIAS + X);
    put(&mut w, sp0 + 120, interrupted_fp);
    put(&mut w, interrupted_fp, 0);
    put(&mut w, interrupted_fp + 8, 0x3333_0000);
    let bytes = image_bytes(&w);
    let regs = Regs {
        pc: BIAS + 0x1004,
        sp: sp0,
        fp: 0,
    };

    let (r, pcs, trust) = run(&build(true), regs, &bytes, 16);
    assert_eq!(r.stop, StopReason::EndOfStack);
    assert_eq!(pcs, [BIAS + 0x1004, BIAS + X]);
    assert_eq!(trust, [Trust::Context, Trust::Cfi]);

    // The same stack without the signal-frame flag: the lookup at X - 1 finds `other`, whose
    // caller returns into no module.
    let (r, pcs, _) = run(&build(false), regs, &bytes, 16);
    assert_eq!(pcs, [BIAS + 0x1004, BIAS + X]);
    assert_eq!(r.stop, StopReason::OutsideModules);

    // A signal frame's interrupted PC is from registers: written even in no module (code
    // generated at run time), then unwound by the fallbacks, whose frame record returns to
    // `start`.
    let mut w3 = w.clone();
    put(&mut w3, sp0 + 168, 0x7777_0000);
    put(&mut w3, interrupted_fp + 8, BIAS + 0x2008);
    let (r, pcs, trust) = run(&build(true), regs, &image_bytes(&w3), 16);
    assert_eq!(pcs, [BIAS + 0x1004, 0x7777_0000, BIAS + 0x2008]);
    assert_eq!(trust, [Trust::Context, Trust::Cfi, Trust::FramePointer]);
    assert_eq!(r.stop, StopReason::EndOfStack);

    // Exactness lasts one frame only: a signal frame returning into `other`'s last byte
    // continues with ordinary callers looked up at return address - 1.
    let mut w2 = w.clone();
    put(&mut w2, sp0 + 168, BIAS + X - 1);
    put(&mut w2, interrupted_fp + 8, BIAS + X);
    let bytes2 = image_bytes(&w2);
    let (r, pcs, _) = run(&build(true), regs, &bytes2, 16);
    // X - 1 (exact) is `other`; its caller returns to X, looked up at X - 1: `other` again,
    // whose frame record at rbp = 0 cannot be read.
    assert_eq!(pcs, [BIAS + 0x1004, BIAS + X - 1, BIAS + X]);
    assert_eq!(r.stop, StopReason::ReadFailed);
}

#[test]
fn plt_expression_cfa() {
    // binutils' .plt CFA: rsp + 8 + ((rip & 15) >= 11) << 3.
    let plt = unwind_core::x86_64::plt_cfa_expression();
    let mut b = ModuleRulesBuilder::new();
    let e = b.add_expr(plt).unwrap();
    assert_eq!(b.add_expr(plt).unwrap(), e, "expressions are interned");
    b.push(
        0x4000,
        0x4040,
        rule(CfaRule::Expr(e), RegRule::Offset(-8), RegRule::Same),
    )
    .unwrap();
    b.push(0x3000, 0x3100, end_rule()).unwrap();
    let t = table_with(b.build().unwrap(), 1);
    let mut w = vec![0u64; 0x200];
    let sp = STACK + 0x100;
    // Return address at sp (CFA = sp + 8) and, after the push of the PLT stub's second half,
    // at sp + 8 (CFA = sp + 16).
    put(&mut w, sp, BIAS + 0x3010);
    put(&mut w, sp + 8, BIAS + 0x3020);
    let bytes = image_bytes(&w);
    for (pc, ra) in [
        (0x4000, 0x3010),
        (0x400a, 0x3010),
        (0x400b, 0x3020),
        (0x401f, 0x3020),
        (0x4026, 0x3010),
    ] {
        let regs = Regs {
            pc: BIAS + pc,
            sp,
            fp: 0,
        };
        let (r, pcs, trust) = run(&t, regs, &bytes, 8);
        assert_eq!(pcs, [BIAS + pc, BIAS + ra], "pc {pc:#x}");
        assert_eq!(trust, [Trust::Context, Trust::Cfi]);
        assert_eq!(r.stop, StopReason::EndOfStack);
    }
}

#[test]
fn cache_follows_table_generations_and_collisions() {
    // Two addresses in one cache slot; two tables with different rules for the same
    // address share a cache. Every answer must come from the current table.
    let a = BIAS + 0x1000;
    // An address in a's slot, found by eviction (the slot function is the cache's own).
    let probe = table_with(ModuleRulesBuilder::new().build().unwrap(), 9);
    let mut c = Cache::<X86_64>::new();
    let b = (a + 1..)
        .find(|&b| {
            c.lookup(&probe, a);
            c.lookup(&probe, b);
            // Not answered by its slot: by the second level or the table.
            let elsewhere = |c: &Cache<X86_64>| c.misses() + c.second_level_hits();
            let before = elsewhere(&c);
            c.lookup(&probe, a);
            elsewhere(&c) > before
        })
        .unwrap();
    let r1 = rule(CfaRule::SpOffset(8), RegRule::Offset(-8), RegRule::Same);
    let r2 = rule(CfaRule::SpOffset(24), RegRule::Offset(-8), RegRule::Same);
    let mut m1 = ModuleRulesBuilder::new();
    m1.push(0x1000, 0x1001, r1).unwrap();
    m1.push(b - BIAS, b - BIAS + 1, r2).unwrap();
    let t1 = table_with(m1.build().unwrap(), 1);
    let mut m2 = ModuleRulesBuilder::new();
    m2.push(0x1000, 0x1001, r2).unwrap();
    let t2 = table_with(m2.build().unwrap(), 2);
    let cached = |r: &Rule| Cached::Simple(X86_64::simple(r).unwrap());
    let mut cache = Cache::<X86_64>::new();
    for _ in 0..3 {
        assert_eq!(cache.lookup(&t1, a), cached(&r1));
        assert_eq!(cache.lookup(&t1, b), cached(&r2));
        assert_eq!(cache.lookup(&t2, a), cached(&r2));
        assert_eq!(cache.lookup(&t2, b), Cached::NoRule);
        assert_eq!(cache.lookup(&t1, a - 1), Cached::Outside);
    }
}

/// Random expressions: mostly valid programs over the tracked registers, sometimes nonsense.
fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4).prop_map(Op::Reg),
        prop_oneof![-64i64..64, any::<i64>()].prop_map(Op::Const),
        Just(Op::Deref),
        Just(Op::Add),
        Just(Op::Sub),
        Just(Op::Mul),
        Just(Op::And),
        Just(Op::Or),
        Just(Op::Xor),
        Just(Op::Shl),
        Just(Op::Shr),
        Just(Op::Shra),
        Just(Op::Neg),
        Just(Op::Not),
        Just(Op::Ge),
        Just(Op::Gt),
        Just(Op::Le),
        Just(Op::Lt),
        Just(Op::Eq),
        Just(Op::Ne),
        Just(Op::Dup),
        Just(Op::Drop),
        Just(Op::Swap),
        Just(Op::Over),
        Just(Op::Nop),
    ]
}

fn arb_expr() -> impl Strategy<Value = Expr> {
    proptest::collection::vec(arb_op(), 0..=16).prop_map(|ops| Expr::new(&ops).unwrap())
}

fn arb_offset() -> impl Strategy<Value = i32> {
    prop_oneof![(-64i32..64).prop_map(|o| o * 8), -512i32..512, any::<i32>()]
}

fn arb_reg_rule() -> impl Strategy<Value = RegRule> {
    prop_oneof![
        Just(RegRule::Undefined),
        Just(RegRule::Same),
        arb_offset().prop_map(RegRule::Offset),
        arb_offset().prop_map(RegRule::ValOffset),
        (0u16..6).prop_map(RegRule::Expr),
        (0u16..6).prop_map(RegRule::ValExpr),
    ]
}

fn arb_rule() -> impl Strategy<Value = Rule> {
    (
        // Mostly the shapes compilers emit, so that walks get long.
        prop_oneof![
            6 => (1i32..8).prop_map(|n| CfaRule::SpOffset(n * 8)),
            2 => Just(CfaRule::FpOffset(16)),
            1 => arb_offset().prop_map(CfaRule::SpOffset),
            1 => arb_offset().prop_map(CfaRule::FpOffset),
            1 => (0u16..6).prop_map(CfaRule::Expr),
        ],
        prop_oneof![
            6 => Just(RegRule::Offset(-8)),
            1 => arb_reg_rule(),
        ],
        prop_oneof![
            3 => Just(RegRule::Same),
            2 => Just(RegRule::Offset(-16)),
            1 => arb_reg_rule(),
        ],
        prop::bool::weighted(0.1),
    )
        .prop_map(|(cfa, ra, fp, signal_frame)| Rule {
            cfa,
            ra,
            fp,
            signal_frame,
        })
}

/// Stack words from a seed (cheaper than a strategy per word): pointers into the stack,
/// addresses inside the module, small numbers or anything.
fn stack_words(seed: u64, n: usize) -> Vec<u64> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..n)
        .map(|_| {
            let r = next();
            match r % 8 {
                0..=2 => STACK + (next() % 0x200) * 8,
                3..=5 => BIAS + 0x1000 + next() % 0x1000,
                6 => next() % 16,
                _ => next(),
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_tables_and_stacks_never_panic(
        rows in proptest::collection::vec((0x1000u64..0x2000, 0u64..0x300, arb_rule()), 0..32),
        exprs in proptest::collection::vec(arb_expr(), 0..5),
        seed in any::<u64>(),
        nwords in prop_oneof![3 => Just(0x200usize), 1 => 0usize..0x200],
        pc in prop_oneof![4 => (0x1000u64..0x2000).prop_map(|a| BIAS + a), 1 => any::<u64>()],
        sp in prop_oneof![4 => (0u64..0x100).prop_map(|i| STACK + i * 8), 1 => any::<u64>()],
        fp in prop_oneof![4 => (0u64..0x200).prop_map(|i| STACK + i * 8), 1 => any::<u64>()],
        len in 0usize..48,
        trust_len in 0usize..48,
    ) {
        let mut b = ModuleRulesBuilder::new();
        for e in exprs {
            b.add_expr(e).unwrap();
        }
        for (s, l, r) in rows {
            b.push(s, s + l, r).unwrap();
        }
        let t = table_with(b.build().unwrap(), 1);
        let bytes = image_bytes(&stack_words(seed, nwords));
        let mem = StackImage::new(STACK, &bytes);
        let regs = Regs { pc, sp, fp };

        let mut cache = Cache::<X86_64>::new();
        let mut pcs = vec![0u64; len];
        let mut trust = vec![Trust::Context; trust_len];
        let r = unwind(&t, &mut cache, regs, &mem, &mut pcs, Some(&mut trust));
        prop_assert!(r.frames <= len);
        if r.stop == StopReason::BufferFull {
            prop_assert_eq!(r.frames, len);
        }
        if len > 0 {
            prop_assert!(r.frames >= 1);
            prop_assert_eq!(pcs[0], pc);
        }
        if trust_len > 0 && r.frames > 0 {
            prop_assert_eq!(trust[0], Trust::Context);
        }

        // The same walk through a warm cache, and without a trust slice, is identical.
        let mut pcs2 = vec![0u64; len];
        let r2 = unwind(&t, &mut cache, regs, &mem, &mut pcs2, None);
        prop_assert_eq!(r, r2);
        prop_assert_eq!(&pcs[..r.frames], &pcs2[..r.frames]);
    }
}

#[test]
fn garbage_stacks_stop_cleanly() {
    // Deterministic random words over real-looking rules: whatever happens, the walk ends with
    // a reason and never writes more frames than the buffer has.
    let t = three_functions();
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut reasons = std::collections::HashMap::new();
    for round in 0..2000 {
        let words: Vec<u64> = (0..0x200)
            .map(|_| match next() % 4 {
                0 => STACK + (next() % 0x200) * 8,
                1 => BIAS + 0x1000 + next() % 0x2100,
                _ => next(),
            })
            .collect();
        let bytes = image_bytes(&words);
        let regs = Regs {
            pc: BIAS + 0x1000 + next() % 0x2100,
            sp: STACK + (next() % 0x200) * 8,
            fp: if round % 2 == 0 {
                STACK + (next() % 0x200) * 8
            } else {
                next()
            },
        };
        let n = (next() % 40) as usize;
        let (r, pcs, _) = run(&t, regs, &bytes, n);
        assert!(r.frames <= n);
        // No signal frames here, so every caller is a return address, and it must return into
        // the module's code whichever rule or fallback found it (0 ends the walk instead).
        for &pc in pcs.iter().skip(1) {
            assert!(
                t.module_for(pc - 1).is_some(),
                "{pc:#x} in no module: {pcs:x?}"
            );
        }
        *reasons.entry(format!("{:?}", r.stop)).or_insert(0) += 1;
    }
    println!("garbage stacks: {reasons:?}");
    assert!(reasons.contains_key("OutsideModules"), "{reasons:?}");
}

/// `three_functions` with return sites at the given file addresses (their calls' callees
/// unknown), scanning or not.
fn scanning_table(sites: &[u64], scan: bool) -> RuleTable<Rule> {
    let sites = sites.iter().map(|&s| (s, None)).collect();
    scanning_table_with(ReturnSites::new(0x1000, sites, Vec::new()).unwrap(), scan)
}

fn scanning_table_with(sites: ReturnSites, scan: bool) -> RuleTable<Rule> {
    let rules = three_functions().modules()[0].rules.clone();
    let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
    b.scan_stack(scan);
    b.add(
        BIAS + 0x1000,
        BIAS + 0x10_0000,
        BIAS,
        "hand-built".into(),
        rules,
    )
    .return_sites = Some(Arc::new(sites));
    b.build().unwrap()
}

/// A word left by a call that has returned (a direct call to another function than the one
/// being unwound) is passed over; the site of a call to this frame's function is taken, before
/// a nearer site whose callee is not known, which is taken only when there is none.
#[test]
fn scanning_passes_over_calls_to_other_functions() {
    let sites = || {
        ReturnSites::new(
            0x1000,
            vec![
                (0x2050, Some(0x1000)),
                (0x2040, Some(0x1700)),
                (0x2060, None),
            ],
            vec![0x1000, 0x1700, 0x2000, 0x3000],
        )
        .unwrap()
    };
    assert_eq!(sites().function_start(0x1800), Some(0x1700));
    assert_eq!(sites().function_start(0x1180), Some(0x1000));
    let t = scanning_table_with(sites(), true);
    let sp = STACK + 0x100;
    let mut w = vec![0u64; 0x200];
    put(&mut w, sp + 8, BIAS + 0x2050);
    put(&mut w, sp + 0x10, BIAS + 0x2060);
    put(&mut w, sp + 0x20, BIAS + 0x2040);
    // In the function at 0x1700 (no rule): the call to 0x1000 is passed over.
    let regs = Regs {
        pc: BIAS + 0x1800,
        sp,
        fp: 0,
    };
    let (_, pcs, trust) = run(&t, regs, &image_bytes(&w), 2);
    assert_eq!(pcs, [BIAS + 0x1800, BIAS + 0x2040]);
    assert_eq!(trust, [Trust::Context, Trust::Scan]);
    // In the function at 0x1000, past its rows: the call to it is the caller.
    let regs = Regs {
        pc: BIAS + 0x1180,
        ..regs
    };
    let (_, pcs, _) = run(&t, regs, &image_bytes(&w), 2);
    assert_eq!(pcs, [BIAS + 0x1180, BIAS + 0x2050]);
    // In another module's code (none here: the PC is outside every module), a direct call's
    // site is never taken; only a site whose callee is unknown is.
    let regs = Regs { pc: 0x1234, ..regs };
    let (_, pcs, _) = run(&t, regs, &image_bytes(&w), 2);
    assert_eq!(pcs, [0x1234, BIAS + 0x2060]);
    put(&mut w, sp + 0x10, 0);
    let (r, pcs, _) = run(&t, regs, &image_bytes(&w), 2);
    assert_eq!((r.stop, pcs), (StopReason::NoRule, vec![0x1234]));
}

/// A frame without a rule whose frame pointer is no frame record: the walk finds its caller
/// only by scanning, past stack words that are not return sites (a stack address, an address
/// in the module's code that follows no call), and goes on by the caller's rule.
#[test]
fn scanning_finds_a_return_site_when_the_fallbacks_fail() {
    let (_, mut w) = three_frame_stack();
    let sp = STACK + 0x100;
    put(&mut w, sp, STACK + 0x180);
    put(&mut w, sp + 8, BIAS + 0x2050);
    // mid's return site, as a call in it would have pushed it.
    put(&mut w, sp + 0x20, BIAS + 0x2040);
    let bytes = image_bytes(&w);
    // rbp is mid's (its frame record at STACK + 0x200), as a leaf that did not touch it leaves.
    let regs = Regs {
        pc: BIAS + 0x1800,
        sp,
        fp: STACK + 0x200 + 1,
    };
    let scanning = scanning_table(&[0x2040, 0x3010], true);
    // The frame pointer is misaligned: the fallback fails.
    let (r, pcs, trust) = run(&scanning, regs, &bytes, 2);
    assert_eq!(pcs, [BIAS + 0x1800, BIAS + 0x2040], "{r:?}");
    assert_eq!(trust, [Trust::Context, Trust::Scan]);
    // A good frame record whose return address is in no module: the fallback's candidate is
    // refused, and the scan runs.
    let mut w2 = w.clone();
    put(&mut w2, STACK + 0x208, 0x10);
    let regs = Regs {
        fp: STACK + 0x200,
        ..regs
    };
    let (r, pcs, trust) = run(&scanning, regs, &image_bytes(&w2), 2);
    assert_eq!(pcs, [BIAS + 0x1800, BIAS + 0x2040], "{r:?}");
    assert_eq!(trust, [Trust::Context, Trust::Scan]);

    // The same walks without scanning, or with scanning but no sites, stop with NoRule.
    for t in [scanning_table(&[0x2040], false), scanning_table(&[], true)] {
        let regs = Regs {
            pc: BIAS + 0x1800,
            sp,
            fp: STACK + 0x201,
        };
        let (r, pcs, _) = run(&t, regs, &bytes, 16);
        assert_eq!((r.stop, pcs), (StopReason::NoRule, vec![BIAS + 0x1800]));
    }
}

/// A scanned caller goes on by its own rule to the end of the stack.
#[test]
fn a_scanned_caller_is_unwound_by_its_rule() {
    let (_, mut w) = three_frame_stack();
    let sp = STACK + 0x100;
    // leaf-like frame with no rule: mid's return site at sp + 0x30, and rbp is mid's record.
    put(&mut w, sp + 8, 0);
    put(&mut w, sp + 0x30, BIAS + 0x2040);
    let regs = Regs {
        pc: BIAS + 0x1800,
        sp,
        fp: 0,
    };
    let t = scanning_table(&[0x2040], true);
    let (r, pcs, trust) = run(&t, regs, &image_bytes(&w), 16);
    // rbp 0 was left as found: mid's rule (CFA = rbp + 16) reads outside the image.
    assert_eq!(pcs, [BIAS + 0x1800, BIAS + 0x2040]);
    assert_eq!(trust, [Trust::Context, Trust::Scan]);
    assert_eq!(r.stop, StopReason::ReadFailed);
    let regs = Regs {
        fp: STACK + 0x200,
        ..regs
    };
    // With rbp mid's own, the frame-pointer fallback finds mid's caller directly (skipping mid,
    // as frame-pointer walks do); scanning is not needed.
    let (r, pcs, trust) = run(&t, regs, &image_bytes(&w), 16);
    assert_eq!(pcs, [BIAS + 0x1800, BIAS + 0x3010]);
    assert_eq!(trust, [Trust::Context, Trust::FramePointer]);
    assert_eq!(r.stop, StopReason::EndOfStack);
}

/// The scan reads at most 120 words above the interrupted frame's stack pointer, 30 above a
/// caller's, and never past the readable stack.
#[test]
fn scanning_is_bounded() {
    let t = scanning_table(&[0x2040], true);
    let sp = STACK + 0x100;
    for (word, found) in [(119, true), (120, false)] {
        let mut w = vec![0u64; 0x200];
        put(&mut w, sp + word * 8, BIAS + 0x2040);
        let regs = Regs {
            pc: BIAS + 0x1800,
            sp,
            fp: 0,
        };
        let (_, pcs, _) = run(&t, regs, &image_bytes(&w), 2);
        assert_eq!(pcs.len() == 2, found, "word {word}: {pcs:x?}");
    }
    // A caller (found by leaf's rule: CFA = sp + 16) with no rule of its own: 30 words.
    for (word, found) in [(29, true), (30, false)] {
        let mut w = vec![0u64; 0x200];
        put(&mut w, sp + 8, BIAS + 0x1901);
        put(&mut w, sp + 16 + word * 8, BIAS + 0x2040);
        let regs = Regs {
            pc: BIAS + 0x1050,
            sp,
            fp: 0,
        };
        let (r, pcs, _) = run(&t, regs, &image_bytes(&w), 3);
        assert_eq!(pcs.len() == 3, found, "word {word}: {pcs:x?} {r:?}");
    }
    // The image ends 3 words above sp: the scan stops there without finding anything.
    let w = vec![0u64; 0x23];
    let regs = Regs {
        pc: BIAS + 0x1800,
        sp,
        fp: 0,
    };
    let (r, pcs, _) = run(&t, regs, &image_bytes(&w), 4);
    assert_eq!((r.stop, pcs), (StopReason::NoRule, vec![BIAS + 0x1800]));
}

/// Random stacks full of return sites and code addresses, scanning on: every frame found by a
/// scan is a return site of the module, and every walk ends with a reason.
#[test]
fn scanned_frames_are_return_sites() {
    let sites: Vec<u64> = (0..64).map(|i| 0x1000 + i * 0x40 + 5).collect();
    // Half of them calls to a known function.
    let t = scanning_table_with(
        ReturnSites::new(
            0x1000,
            sites
                .iter()
                .map(|&s| (s, (s % 0x80 == 5).then_some(0x1000)))
                .collect(),
            vec![0x1000, 0x1400],
        )
        .unwrap(),
        true,
    );
    let mut state = 0x0bad_5eed_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut scanned = 0;
    for _ in 0..2000 {
        let words: Vec<u64> = (0..0x200)
            .map(|_| match next() % 6 {
                0 => STACK + (next() % 0x200) * 8,
                1 => BIAS + sites[(next() % 64) as usize],
                2 => BIAS + 0x1000 + next() % 0x2100,
                _ => next() % 0x100,
            })
            .collect();
        let regs = Regs {
            pc: BIAS + 0x1000 + next() % 0x2100,
            sp: STACK + (next() % 0x200) * 8,
            fp: next(),
        };
        let (r, pcs, trust) = run(&t, regs, &image_bytes(&words), 32);
        assert!(r.frames <= 32);
        for (pc, how) in pcs.iter().zip(&trust).skip(1) {
            if *how == Trust::Scan {
                scanned += 1;
                assert!(sites.contains(&(pc - BIAS)), "{pc:#x} is no return site");
            }
        }
    }
    assert!(scanned > 100, "only {scanned} frames found by scanning");
}

/// A PC of 0 at frame 0 (a call through a null function pointer: the call pushed its return
/// address and faulted at its target) returns to the word at SP, not by the frame pointer,
/// whose frame is the caller's own (libunwindstack's `signal_fde_x86_64`, before: the caller
/// skipped and every frame after it off by one). A PC of 0 that a return address gave still
/// ends the walk.
#[test]
fn a_call_through_a_null_pointer_returns_to_the_word_at_sp() {
    let t = three_functions();
    let (regs, mut w) = three_frame_stack();
    // `mid` called null from BIAS + 0x2040: the return address at SP.
    let sp = STACK + 0x1f0;
    put(&mut w, sp, BIAS + 0x2040);
    let null = Regs { pc: 0, sp, ..regs };
    let (r, pcs, trust) = run(&t, null, &image_bytes(&w), 8);
    assert_eq!(pcs, [0, BIAS + 0x2040, BIAS + 0x3010], "{r:?}");
    assert_eq!(trust[1], Trust::LinkRegister);
    assert_eq!(r.stop, StopReason::EndOfStack);
    // Not in the null page: the frame pointer, as before.
    let elsewhere = Regs {
        pc: 0x10_0000,
        ..null
    };
    let (_, pcs, trust) = run(&t, elsewhere, &image_bytes(&w), 8);
    assert_eq!(pcs[..2], [0x10_0000, BIAS + 0x3010]);
    assert_eq!(trust[1], Trust::FramePointer);
}
