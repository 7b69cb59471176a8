//! aarch64's return addresses: stripped of their pointer authentication code where a rule says
//! they are signed, and by the fallbacks (a leaf's x30, a frame record), which cannot know;
//! never where a rule says they are not, or where the process has no code to strip (mask 0).
//! And the signal trampoline that starts a mapping of its own (qemu-user's), found at its
//! first instruction.

use std::num::NonZeroU32;
use std::sync::Arc;

use unwind_core::aarch64::{CfaRule, RegRule, Regs, Rule};
use unwind_core::expr::{Expr, Op};
use unwind_core::{
    unwind, Aarch64, Cache, ModuleRulesBuilder, RuleTable, RuleTableBuilder, StackImage,
    StopReason, Trust,
};

/// The code: `[CODE, CODE + 0x1_0000)`.
const CODE: u64 = 0x55_0000_0000;
const STACK: u64 = 0x7f_f000_0000;
/// Linux's mask at 48-bit virtual addresses (the top byte included).
const MASK: u64 = 0xff7f_0000_0000_0000;
/// A made-up authentication code in the bits of [`MASK`].
const PAC: u64 = 0x2a35_0000_0000_0000;

/// `f` at CODE + 0x1000: a frame record at SP (`stp x29, x30, [sp, #-32]!`), x30 signed or not;
/// `main` at CODE + 0x2000, where the walk ends; no rule elsewhere in the module.
fn table(signed: bool) -> RuleTable<Rule> {
    let mut m = ModuleRulesBuilder::new();
    let f = Rule {
        cfa: CfaRule::SpOffset(32),
        ra: RegRule::Offset(-24),
        lr: RegRule::Offset(-24),
        fp: RegRule::Offset(-32),
        ra_signed: signed,
        signal_frame: false,
        from_instructions: false,
    };
    m.push(CODE + 0x1000, CODE + 0x1100, f).unwrap();
    let end = Rule {
        ra: RegRule::Undefined,
        lr: RegRule::Undefined,
        ..Rule::default()
    };
    m.push(CODE + 0x2000, CODE + 0x2100, end).unwrap();
    one_module(m)
}

/// A table of one module, `[CODE, CODE + 0x1_0000)`, with the rules of `m`.
fn one_module(m: ModuleRulesBuilder<Rule>) -> RuleTable<Rule> {
    let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
    b.add(
        CODE,
        CODE + 0x1_0000,
        0,
        "m".into(),
        Arc::new(m.build().unwrap()),
    );
    b.build().unwrap()
}

fn walk(
    table: &RuleTable<Rule>,
    (regs, mask): (Regs, u64),
    words: &[u64],
) -> (StopReason, Vec<u64>, Vec<Trust>) {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mem = StackImage::new(STACK, &bytes).with_pointer_mask(mask);
    let mut cache = Cache::<Aarch64>::new();
    let (mut pcs, mut trust) = ([0u64; 8], [Trust::Context; 8]);
    let r = unwind(table, &mut cache, regs, &mem, &mut pcs, Some(&mut trust));
    (r.stop, pcs[..r.frames].to_vec(), trust[..r.frames].to_vec())
}

/// Frame 0 in `f` with its record at SP holding `ra`.
fn in_f(ra: u64, mask: u64) -> ((Regs, u64), Vec<u64>) {
    let regs = Regs {
        pc: CODE + 0x1010,
        sp: STACK,
        fp: STACK,
        lr: 0,
    };
    ((regs, mask), vec![0, ra, 0, 0])
}

#[test]
fn a_signed_return_address_is_stripped() {
    let (regs, stack) = in_f((CODE + 0x2010) | PAC, MASK);
    let (stop, pcs, _) = walk(&table(true), regs, &stack);
    assert_eq!(stop, StopReason::EndOfStack);
    assert_eq!(pcs, [CODE + 0x1010, CODE + 0x2010]);
}

/// A rule that DWARF does not call signed strips too: a real return address has no bit set in
/// the mask, so only a value that is no return address changes, and it must still return into
/// a module's code.
#[test]
fn an_unsigned_rule_strips_too() {
    let (regs, stack) = in_f((CODE + 0x2010) | PAC, MASK);
    let (stop, pcs, _) = walk(&table(false), regs, &stack);
    assert_eq!(stop, StopReason::EndOfStack);
    assert_eq!(pcs, [CODE + 0x1010, CODE + 0x2010]);
    let (regs, stack) = in_f((CODE + 0x2010) | 0x0080_0000_0000_0000, MASK);
    let (stop, pcs, _) = walk(&table(false), regs, &stack);
    assert_eq!(
        stop,
        StopReason::OutsideModules,
        "bit 55 is outside the mask"
    );
    assert_eq!(pcs, [CODE + 0x1010]);
}

#[test]
fn without_pointer_authentication_nothing_is_stripped() {
    let (regs, stack) = in_f((CODE + 0x2010) | PAC, 0);
    let (stop, pcs, _) = walk(&table(true), regs, &stack);
    assert_eq!(stop, StopReason::OutsideModules);
    assert_eq!(pcs, [CODE + 0x1010]);
}

/// A leaf without a rule (CODE + 0x3000): its signed x30 stripped, then `f`'s rule.
#[test]
fn a_leafs_signed_link_register_is_stripped() {
    let ((mut regs, mask), stack) = in_f((CODE + 0x2010) | PAC, MASK);
    regs.lr = (CODE + 0x1010) | PAC;
    regs.pc = CODE + 0x3000;
    let regs = (regs, mask);
    let (stop, pcs, trust) = walk(&table(true), regs, &stack);
    assert_eq!(stop, StopReason::EndOfStack);
    assert_eq!(pcs, [CODE + 0x3000, CODE + 0x1010, CODE + 0x2010]);
    assert_eq!(trust, [Trust::Context, Trust::LinkRegister, Trust::Cfi]);
}

/// A frame without a rule whose x30 returns nowhere: its frame record (x29), whose signed
/// return address is stripped.
#[test]
fn a_frame_records_signed_return_address_is_stripped() {
    let regs = Regs {
        pc: CODE + 0x3000,
        sp: STACK,
        fp: STACK + 16,
        lr: 0x1234,
    };
    let regs = (regs, MASK);
    let stack = [0, 0, 0, (CODE + 0x2010) | PAC, 0, 0];
    let (stop, pcs, trust) = walk(&table(true), regs, &stack);
    assert_eq!(stop, StopReason::EndOfStack);
    assert_eq!(pcs, [CODE + 0x3000, CODE + 0x2010]);
    assert_eq!(trust, [Trust::Context, Trust::FramePointer]);
}

/// qemu-user's trampoline (`mov x8, #139; svc #0`) at the first byte of a page of its own: a
/// handler returns there, and the lookup inside the call (one byte before it) finds no module.
/// Its rule, at the address itself, restores the interrupted registers from the kernel's
/// `rt_sigframe` (sigcontext at SP + 304: x29 at 544, x30 at 552, SP at 560, PC at 568).
#[test]
fn a_trampoline_that_starts_its_mapping_is_found_at_its_first_instruction() {
    let tramp = 0x7f_0000_0000u64;
    let at_sp = |k| Expr::new(&[Op::Reg(1), Op::Const(k), Op::Add]).unwrap();
    let mut m = ModuleRulesBuilder::new();
    let cfa = m
        .add_expr(Expr::new(&[Op::Reg(1), Op::Const(560), Op::Add, Op::Deref]).unwrap())
        .unwrap();
    let (pc, lr, fp) = (
        m.add_expr(at_sp(568)).unwrap(),
        m.add_expr(at_sp(552)).unwrap(),
        m.add_expr(at_sp(544)).unwrap(),
    );
    let rule = Rule {
        cfa: CfaRule::Expr(cfa),
        ra: RegRule::Expr(pc),
        lr: RegRule::Expr(lr),
        fp: RegRule::Expr(fp),
        ra_signed: false,
        signal_frame: true,
        from_instructions: false,
    };
    m.push(tramp, tramp + 8, rule).unwrap();
    let mut rules = ModuleRulesBuilder::new();
    let end = Rule {
        ra: RegRule::Undefined,
        lr: RegRule::Undefined,
        ..Rule::default()
    };
    rules.push(CODE + 0x2000, CODE + 0x2100, end).unwrap();
    // A handler at CODE + 0x3000 (no rule: a leaf) returning to the trampoline.
    let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
    b.add(
        CODE,
        CODE + 0x1_0000,
        0,
        "m".into(),
        Arc::new(rules.build().unwrap()),
    );
    b.add(
        tramp,
        tramp + 0x1000,
        0,
        "trampoline".into(),
        Arc::new(m.build().unwrap()),
    );
    let table = b.build().unwrap();
    let mut stack = vec![0u64; 80];
    stack[544 / 8] = 0;
    stack[552 / 8] = 0x4444;
    stack[560 / 8] = STACK + 0x280;
    // The interrupted PC: in `main`, exact.
    stack[568 / 8] = CODE + 0x2000;
    let regs = Regs {
        pc: CODE + 0x3000,
        sp: STACK,
        fp: 0,
        lr: tramp,
    };
    let regs = (regs, MASK);
    let (stop, pcs, trust) = walk(&table, regs, &stack);
    assert_eq!(stop, StopReason::EndOfStack);
    assert_eq!(pcs, [CODE + 0x3000, tramp, CODE + 0x2000]);
    assert_eq!(trust, [Trust::Context, Trust::LinkRegister, Trust::Cfi]);
}

/// A function that calls only functions that do not return (`abort`) need not save x30, and
/// GCC's CFI then says, at the call, that the return address is still in x30 with the frame
/// allocated (`sub sp, sp, #32; ...; bl abort`). At frame 1 that is not the caller: x30 holds
/// the call's own return address, so the rule would give the same function again, 32 bytes
/// higher, again and again (8 frames of 8 before this check). The walk stops there instead.
#[test]
fn a_caller_without_its_return_address_is_not_repeated() {
    let mut m = ModuleRulesBuilder::new();
    // `die` at CODE + 0x3000: 32 bytes of frame, x30 not saved.
    let die = Rule {
        cfa: CfaRule::SpOffset(32),
        ..Rule::default()
    };
    m.push(CODE + 0x3000, CODE + 0x3100, die).unwrap();
    // `abort` at CODE + 0x4000: a leaf, frame 0.
    m.push(CODE + 0x4000, CODE + 0x4100, Rule::default())
        .unwrap();
    let table = one_module(m);
    let ret = CODE + 0x3024;
    let regs = Regs {
        pc: CODE + 0x4010,
        sp: STACK,
        fp: 0,
        lr: ret,
    };
    let (stop, pcs, _) = walk(&table, (regs, 0), &[0; 64]);
    assert_eq!(pcs, [CODE + 0x4010, ret], "{stop:?}");
    assert_eq!(stop, StopReason::ReturnAddressLost);
    // The same from the table's rule (a frame whose words are not all readable is stepped by
    // the checked path): the stack image ends at SP, `die`'s frame is outside it.
    let (stop, pcs, _) = walk(&table, (regs, 0), &[]);
    assert_eq!((stop, pcs.len()), (StopReason::ReturnAddressLost, 2));
}

/// A frame reached through a return address made a call, so the x30 the walk was given (frame
/// 0's) is not its x30: a rule there that says "the return address is still in x30" stops the
/// walk, whether the rule is cached or applied from the table, and frame 0's x30 (a code
/// address here) is never written as its caller.
#[test]
fn a_callers_x30_is_not_frame_0s() {
    let stale = CODE + 0x5000;
    // `f` at CODE + 0x1000 (frame 0): a frame record at SP, returning into `g` at CODE + 0x2024.
    let ((regs, mask), words) = in_f(CODE + 0x2024, 0);
    let regs = Regs { lr: stale, ..regs };
    let record = table(false).lookup(CODE + 0x1010).unwrap().rule;
    // `g`'s rule: 32 bytes of frame, x30 not saved; once as a cached rule, once as a rule that
    // only the table applies (x29's value rule is not a cached shape).
    let cached = Rule {
        cfa: CfaRule::SpOffset(32),
        ..Rule::default()
    };
    let from_table = Rule {
        fp: RegRule::ValOffset(-32),
        ..cached
    };
    for g in [cached, from_table] {
        let mut m = ModuleRulesBuilder::new();
        m.push(CODE + 0x1000, CODE + 0x1100, record).unwrap();
        m.push(CODE + 0x2000, CODE + 0x2100, g).unwrap();
        let (stop, pcs, _) = walk(&one_module(m), (regs, mask), &words);
        assert_eq!(pcs, [CODE + 0x1010, CODE + 0x2024], "{g:?}");
        assert_eq!(stop, StopReason::ReturnAddressLost, "{g:?}");
    }
}

/// Frame 0's PC is stripped of a pointer-authentication code as return addresses are (a
/// context recorded by another tool may hold it signed: libunwindstack's `pauth_pc_arm64`).
#[test]
fn a_signed_frame_0_pc_is_stripped() {
    let (mut regs, stack) = in_f(CODE + 0x2010, MASK);
    regs.0.pc |= PAC;
    let (stop, pcs, _) = walk(&table(false), regs, &stack);
    assert_eq!(stop, StopReason::EndOfStack);
    assert_eq!(pcs, [CODE + 0x1010, CODE + 0x2010]);
}
