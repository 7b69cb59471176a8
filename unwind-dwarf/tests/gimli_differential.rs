//! Differential test: every row boundary of every FDE in real system libraries, unwound once
//! with our compiled rules (`unwind_dwarf` + `X86_64::step_rule`) and once by
//! evaluating gimli's own unwind row directly, on a synthetic stack. The two must agree on the
//! caller's SP (the CFA), PC (the return address) and FP (`rbp`), or our table must have dropped
//! the row.
//!
//! All rows are checked, also for `librustc_driver` (more than a million rows): that takes a few
//! seconds even in a debug build, so no sampling is needed.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;

mod support;

use support::compare::{self, DiffArch, Slice, Summary};

use gimli::X86_64 as Dwarf;
use gimli::{CfaRule, Register, RegisterRule, UnwindSection, UnwindTableRow};
use unwind_core::x86_64::Regs;
use unwind_core::X86_64;
use unwind_core::{RuleTableBuilder, StackImage};

/// Synthetic stack: `[STACK_LO, STACK_HI)`, every 8-byte word derived from its address.
const STACK_LO: u64 = 0x7fff_0000_0000;
const STACK_HI: u64 = 0x7fff_0001_0000;
const SP: u64 = 0x7fff_0000_1000;
const FP: u64 = 0x7fff_0000_1800;

/// The value stored in the synthetic stack's word at `a` (8-aligned).
fn word(a: u64) -> u64 {
    a ^ 0x5a5a_5a5a_0000_0000
}

fn stack_bytes() -> Vec<u8> {
    let mut v = Vec::with_capacity((STACK_HI - STACK_LO) as usize);
    let mut a = STACK_LO;
    while a < STACK_HI {
        v.extend_from_slice(&word(a).to_le_bytes());
        a += 8;
    }
    v
}

type Expected = compare::Expected<Regs>;

fn reg_value(r: Register, regs: &Regs) -> Option<u64> {
    match r {
        Dwarf::RA => Some(regs.pc),
        Dwarf::RSP => Some(regs.sp),
        Dwarf::RBP => Some(regs.fp),
        _ => None,
    }
}

/// The result of evaluating one value for gimli's row.
type Val = support::Val<u64>;

/// Evaluates a DWARF expression with gimli against the synthetic registers and stack.
fn gimli_expr(
    expr: gimli::Expression<Slice<'_>>,
    encoding: gimli::Encoding,
    regs: &Regs,
    image: &StackImage<'_>,
    initial: Option<u64>,
) -> Val {
    support::gimli_expr(expr, encoding, |r| reg_value(r, regs), image, initial, !0)
}

impl DiffArch for X86_64 {
    fn regs_at(pc: u64) -> Regs {
        Regs { pc, sp: SP, fp: FP }
    }

    /// Evaluates gimli's `row` directly. Untracked registers are found before failures are
    /// reported, and failures are reported in the order our unwinder evaluates: CFA, return
    /// address, frame pointer.
    fn expected<'a, S: UnwindSection<Slice<'a>>>(
        row: &UnwindTableRow<usize>,
        cie: &gimli::CommonInformationEntry<Slice<'a>>,
        section: &S,
        regs: &Regs,
        image: &StackImage<'_>,
        signal: bool,
    ) -> Expected {
        let enc = cie.encoding();
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => match reg_value(*register, regs) {
                // Our tables have no CFA rule on the PC.
                Some(v) if *register != Dwarf::RA => Val::Ok(v.wrapping_add(*offset as u64)),
                _ => Val::MustDrop("CFA on an untracked register"),
            },
            CfaRule::Expression(e) => match e.get(section) {
                Ok(x) => gimli_expr(x, enc, regs, image, None),
                Err(e) => Val::Error(e),
            },
        };
        // Keep going with a dummy CFA after a failure, to find rules our tables cannot express.
        let cfa_value = match cfa {
            Val::Ok(v) => v,
            _ => 0,
        };
        let ra_rule = row.register(cie.return_address_register());
        let ra_undefined = matches!(ra_rule, Some(RegisterRule::Undefined));
        let reg = |r: Register| reg_value(r, regs);
        let ra = support::gimli_reg(ra_rule, None, None, cfa_value, section, enc, reg, image);
        let fp = support::gimli_reg(
            row.register(Dwarf::RBP),
            Some(regs.fp),
            Some(regs.fp),
            cfa_value,
            section,
            enc,
            reg,
            image,
        );
        // A rule our tables cannot express anywhere in the row means the row must be dropped (our
        // translation refuses e.g. a "register" rule for rbp even when it names rbp itself).
        if let Some(e) = compare::not_a_caller(&[&cfa, &ra, &fp], ra_undefined) {
            return e;
        }
        match (cfa, ra, fp) {
            (Val::Ok(sp), Val::Ok(pc), Val::Ok(fp)) => Expected::Caller {
                regs: Regs { pc, sp, fp },
                exact: signal,
            },
            _ => unreachable!(),
        }
    }

    fn cfa_on_frame_pointer(register: Register) -> bool {
        register == Dwarf::RBP
    }

    fn last_instruction(end: u64) -> u64 {
        end - 1
    }

    fn handler_install(rule: &unwind_core::x86_64::Rule) -> bool {
        use unwind_core::x86_64::RegRule;
        rule.ra == RegRule::Lost
            || (matches!(rule.ra, RegRule::Expr(_)) && rule.fp == RegRule::Undefined)
    }
}

/// Compares the `.eh_frame` of the ELF file at `path` with our table of it.
fn differential(path: &Path) -> Summary {
    let bytes = stack_bytes();
    compare::elf_file::<X86_64>(path, &StackImage::new(STACK_LO, &bytes))
}

#[test]
fn libc_matches_gimli() {
    let s = differential(Path::new("/lib/x86_64-linux-gnu/libc.so.6"));
    assert!(s.compared > 10_000, "only {} rows compared", s.compared);
}

/// libgcc's unwinder: its rows agree with gimli's but for the four functions that end in a
/// handler installation (`unwind_dwarf::eh_return`), whose rows there differ on purpose.
#[test]
fn libgcc_s_matches_gimli() {
    let s = differential(Path::new("/lib/x86_64-linux-gnu/libgcc_s.so.1"));
    assert!(s.compared > 500, "only {} rows compared", s.compared);
    assert!(
        s.handler_install_rows >= 4,
        "{} rows in a handler installation",
        s.handler_install_rows
    );
}

/// glibc's lazy-binding trampolines (`_dl_runtime_resolve_*`: CFA on `rbx`, which the rules do
/// not track) are crossed from `_dl_fixup`, which saved `rbx` in its frame: a walk from inside
/// `_dl_fixup` goes through the trampoline to the code that called the PLT stub. From
/// `_dl_fixup`'s first instructions, before it saves `rbx`, the walk stops instead (the slot
/// holds an older value): `ReturnAddressLost`, never a frame from it.
#[test]
fn lazy_binding_trampoline_is_crossed() {
    use unwind_core::x86_64::{CfaRule as Cfa, RegRule};
    use unwind_core::{Cache, StopReason};
    let path = Path::new("/lib64/ld-linux-x86-64.so.2");
    let loaded = unwind_dwarf::load_elf_file::<X86_64>(path).unwrap();
    assert!(
        loaded.stats.cfi.lazy_binding_crossings >= 3,
        "{:?}",
        loaded.stats.cfi
    );
    // A crossing: the one-byte row at a trampoline's return site, CFA by an expression.
    let (site_end, rule) = loaded
        .rules
        .extents()
        .find(|(s, e, r)| e - s == 1 && matches!(r.cfa, Cfa::Expr(_)))
        .map(|(_, e, r)| (e, r))
        .expect("a crossing");
    assert_eq!((rule.ra, rule.fp), (RegRule::Offset(-8), RegRule::Same));
    // Its callee, `_dl_fixup`: the target of the `call rel32` that ends there.
    let data = std::fs::read(path).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let code = unwind_dwarf::return_sites::executable_segments(&elf);
    let byte = |a: u64| {
        code.iter()
            .find_map(|&(at, b)| b.get(usize::try_from(a.checked_sub(at)?).ok()?).copied())
            .unwrap()
    };
    assert_eq!(byte(site_end - 5), 0xe8);
    let rel = i32::from_le_bytes([1, 2, 3, 4].map(|i| byte(site_end - 5 + i)));
    let callee = site_end.wrapping_add_signed(i64::from(rel));
    assert_eq!(
        loaded.rules.lookup(callee).map(|r| r.ra),
        Some(RegRule::Lost)
    );
    // Its body, where it has saved rbx: CFA = rsp + n.
    let (body, body_rule) = (callee..callee + 64)
        .find_map(|a| {
            let r = loaded.rules.lookup(a)?;
            (r.ra == RegRule::Offset(-8) && matches!(r.cfa, Cfa::SpOffset(_))).then_some((a, r))
        })
        .expect("the callee's body");
    let Cfa::SpOffset(frame) = body_rule.cfa else {
        unreachable!()
    };
    let mut tb = RuleTableBuilder::new(NonZeroU32::MIN);
    tb.add(0, u64::MAX, 0, "ld.so".into(), Arc::new(loaded.rules));
    let table = tb.build().unwrap();
    // The stack: the callee's frame at SP, the trampoline's realigned area above it, then
    // the trampoline's own words (saved rbx, link map, relocation index, return address).
    let sp = SP;
    let tramp_sp = sp + frame as u64;
    let rbx = tramp_sp + 0x300;
    let caller = 0x1000 + 5;
    let mut stack = vec![0u8; (STACK_HI - STACK_LO) as usize];
    let mut put = |at: u64, v: u64| {
        let i = (at - STACK_LO) as usize;
        stack[i..i + 8].copy_from_slice(&v.to_le_bytes());
    };
    put(tramp_sp - 8, site_end); // the callee's return address
                                 // `_dl_fixup` saves rbx in one of its frame's slots (CFA - 40 in glibc 2.36): each holds it.
    for slot in (16..=64).step_by(8) {
        put(tramp_sp - slot, rbx);
    }
    put(rbx + 24, caller); // the trampoline's return address: into the PLT stub's caller
    let image = StackImage::new(STACK_LO, &stack);
    let walk = |pc: u64| {
        let mut cache = Cache::<X86_64>::new();
        let mut pcs = [0u64; 8];
        let r = unwind_core::unwind(
            &table,
            &mut cache,
            Regs { pc, sp, fp: 0 },
            &image,
            &mut pcs,
            None,
        );
        (pcs[..r.frames].to_vec(), r.stop)
    };
    let (pcs, _) = walk(body);
    assert_eq!(
        pcs.get(..3),
        Some(&[body, site_end, caller][..]),
        "{pcs:x?}"
    );
    // At the callee's first instruction: stopped, the trampoline not written.
    assert_eq!(walk(callee), (vec![callee], StopReason::ReturnAddressLost));
}

#[test]
fn libstdcxx_matches_gimli() {
    let s = differential(Path::new("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"));
    assert!(s.compared > 10_000, "only {} rows compared", s.compared);
}

#[test]
fn rustc_driver_matches_gimli() {
    let Some(path) = unwind_test_support::rust_sysroot_library("lib", "librustc_driver-") else {
        unwind_test_support::missing("librustc_driver-*.so in the sysroot of `rustc`");
        return;
    };
    let s = differential(&path);
    assert!(s.compared > 10_000, "only {} rows compared", s.compared);
}

// ---------------------------------------------------------------------------------------------
// Random CFI: a well-formed CIE and FDE whose instructions and DWARF expressions are generated,
// compared row by row with gimli in the same way as the real libraries above.

use proptest::prelude::*;
use support::random;

/// Registers the generated CFI talks about: rbp, rsp, rip and (untracked) rbx.
fn arb_dwarf_reg() -> impl Strategy<Value = u8> + Clone {
    prop_oneof![
        3 => Just(Dwarf::RBP.0 as u8),
        3 => Just(Dwarf::RSP.0 as u8),
        2 => Just(Dwarf::RA.0 as u8),
        1 => Just(3u8),
    ]
}

/// A CIE (`zR`, pcrel|sdata4, return address column `ra`, optionally `S`) with the usual
/// initial instructions, and one FDE at 0x1000 covering `range` bytes with `insns`.
fn synthetic_eh_frame(svma: u64, ra: u8, signal: bool, insns: &[u8], range: u32) -> Vec<u8> {
    let mut cie = Vec::new();
    cie.extend(0u32.to_le_bytes());
    cie.push(1);
    cie.extend(if signal { &b"zRS\0"[..] } else { &b"zR\0"[..] });
    cie.push(1); // code alignment
    cie.push(0x78); // data alignment -8
    cie.push(ra);
    cie.push(1);
    cie.push(0x1b);
    cie.extend([0x0c, 0x07, 0x08, 0x80 | ra, 0x01]); // def_cfa rsp+8; ra at cfa-8
    let mut out = Vec::new();
    out.extend((cie.len() as u32).to_le_bytes());
    out.extend(&cie);
    let ptr_field = out.len() + 4;
    let mut fde = Vec::new();
    fde.extend((ptr_field as u32).to_le_bytes());
    let pc_field = svma as i64 + ptr_field as i64 + 4;
    fde.extend(((0x1000 - pc_field) as i32).to_le_bytes());
    fde.extend(range.to_le_bytes());
    fde.push(0);
    fde.extend(insns);
    out.extend((fde.len() as u32).to_le_bytes());
    out.extend(&fde);
    out.extend(0u32.to_le_bytes());
    out
}

const SYNTHETIC_SVMA: u64 = 0x20_0000;

fn arb_synthetic() -> impl Strategy<Value = (Vec<u8>, u8, bool)> {
    (
        proptest::collection::vec(random::cfa_insn(arb_dwarf_reg()), 0..40),
        prop::bool::weighted(0.1),
        prop_oneof![8 => Just(Dwarf::RA.0 as u8), 1 => Just(Dwarf::RBP.0 as u8), 1 => Just(3u8)],
        any::<bool>(),
    )
        .prop_map(|(pieces, keep, ra, signal)| (random::sanitize(pieces, keep), ra, signal))
}

/// Loads a synthetic `.eh_frame` with our loader and compares it with gimli.
fn synthetic_case(
    insns: &[u8],
    ra: u8,
    signal: bool,
) -> (Summary, Vec<String>, unwind_dwarf::CfiStats) {
    let data = synthetic_eh_frame(SYNTHETIC_SVMA, ra, signal, insns, 0x100);
    let sections = unwind_dwarf::CfiSections {
        eh_frame: Some(&data),
        eh_frame_svma: SYNTHETIC_SVMA,
        ..Default::default()
    };
    let (rules, stats) =
        unwind_dwarf::rules_from_sections::<unwind_dwarf::X86_64>(&sections, None).unwrap();
    let mut tb = RuleTableBuilder::new(NonZeroU32::new(1).unwrap());
    tb.add(0, u64::MAX, 0, "synthetic".into(), Arc::new(rules));
    let table = tb.build().unwrap();
    let mut mismatches = Vec::new();
    let bytes = stack_bytes();
    let image = StackImage::new(STACK_LO, &bytes);
    let (s, _) =
        compare::eh_frame::<X86_64>(&data, SYNTHETIC_SVMA, 0, &table, &image, &mut mismatches);
    (s, mismatches, stats.cfi)
}

/// The random CFI below must actually reach the interesting paths: print what 1000 fixed
/// cases cover and require a minimum of each.
#[test]
fn random_cfi_coverage() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = arb_synthetic();
    let mut total = Summary::default();
    let mut failures = Vec::new();
    for _ in 0..1000 {
        let (insns, ra, signal) = strategy.new_tree(&mut runner).unwrap().current();
        let (s, m, _) = synthetic_case(&insns, ra, signal);
        if !m.is_empty() && failures.len() < 5 {
            failures.push(format!("{insns:02x?} (ra column {ra}): {}", m.join("; ")));
        }
        total.add(&s);
    }
    println!("random CFI, 1000 fixed cases: {total:?}");
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
    assert!(total.identical > 2000);
    assert!(total.identical_with_expr > 300);
    assert!(total.end_of_stack > 30);
    assert!(total.read_failed > 100);
    // Expressions that could fail at run time (stack under- or overflow) are refused when the
    // table is built (counted as drops), so applying a kept rule never fails on its expression.
    assert_eq!(total.expr_errors, 0);
    assert!(total.ours_none_must_drop > 500);
}

/// An expression that needs more than the 8 words of our evaluation stack (here 9: the CFA
/// pushed first, eight literals, then `rsp + 8`) is valid DWARF that gimli evaluates. Our
/// table must either agree or drop the row (leaving it to the frame-pointer fallback, counted
/// as a drop); it must not keep a rule that fails every time it is applied.
#[test]
fn expression_deeper_than_the_eval_stack() {
    let deep: Vec<u8> = [0x30u8; 8].iter().copied().chain([0x77, 0x08]).collect();
    let mut cases = Vec::new();
    // DW_CFA_expression rip: the return address is at *(...deep...) = rsp + 8.
    let mut insns = vec![0x10, Dwarf::RA.0 as u8, deep.len() as u8];
    insns.extend(&deep);
    cases.push(("DW_CFA_expression rip", insns));
    // DW_CFA_def_cfa_expression: the CFA is rsp + 8, without the CFA pushed first: 10 words.
    let mut deeper = vec![0x30u8; 9];
    deeper.extend([0x77, 0x08]);
    let mut insns = vec![0x0f, deeper.len() as u8];
    insns.extend(&deeper);
    cases.push(("DW_CFA_def_cfa_expression", insns));
    let mut failures = Vec::new();
    for (what, insns) in cases {
        let (s, mismatches, stats) = synthetic_case(&insns, Dwarf::RA.0 as u8, false);
        assert_eq!(s.rows, 1, "{what}");
        if !mismatches.is_empty() {
            failures.push(format!(
                "{what}: {} (stats {:?})",
                mismatches.join("; "),
                stats.drops().collect::<Vec<_>>()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_cfi_matches_gimli((insns, ra, signal) in arb_synthetic()) {
        let (s, mismatches, stats) = synthetic_case(&insns, ra, signal);
        prop_assert!(
            mismatches.is_empty(),
            "instructions {:02x?}:\n{}",
            insns,
            mismatches.join("\n")
        );
        prop_assert!(
            s.ours_none <= stats.dropped_total() + stats.table.overlapping,
            "{} rows without a rule, {:?}",
            s.ours_none,
            stats
        );
    }
}
