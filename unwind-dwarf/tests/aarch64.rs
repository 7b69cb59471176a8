//! The aarch64 gimli differential: every row of every FDE of Debian's arm64 libc, libstdc++ and
//! libgcc_s, of Rust's aarch64 `libstd`, of programs built with pointer authentication
//! (`-mbranch-protection=standard`), and of random CFI (with `DW_CFA_AARCH64_negate_ra_state`
//! and `remember_state`/`restore_state` around it), unwound once with our rules
//! (`Aarch64::step_rule`) and once by evaluating gimli's row on a synthetic stack. The two must
//! agree on the caller's PC (stripped of its pointer authentication code, as the walk strips
//! every return address), SP, x29 and x30, and our rule's signed flag on gimli's
//! `RA_SIGN_STATE`, or our table must have dropped the row.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

mod support;

use gimli::AArch64 as Dwarf;
use gimli::{CfaRule, Register, RegisterRule, UnwindSection, UnwindTableRow};
use proptest::prelude::*;
use support::compare::{self, DiffArch, Slice, Summary};
use support::{random, Val};
use unwind_core::aarch64::Regs;
use unwind_core::Aarch64;
use unwind_core::{RuleTableBuilder, StackImage};
use unwind_dwarf::DwarfArch;
use unwind_test_support::target::{self, Target};

/// Synthetic stack: `[STACK_LO, STACK_HI)`, every 8-byte word derived from its address.
const STACK_LO: u64 = 0xffff_f000_0000;
const STACK_HI: u64 = 0xffff_f001_0000;
const SP: u64 = 0xffff_f000_1000;
const FP: u64 = 0xffff_f000_1800;
/// The callee's x30: a signed return address.
const LR: u64 = 0x0035_0055_0000_1234;
/// Linux's pointer authentication mask at 48-bit virtual addresses (the top byte included).
const MASK: u64 = 0xff7f_0000_0000_0000;

/// The word stored at `a` (8-aligned): its upper bits set, so that a stripped return address
/// differs from the word.
fn word(a: u64) -> u64 {
    a ^ 0x5a5a_5a5a_0000_0000
}

fn stack_bytes() -> Vec<u8> {
    (STACK_LO..STACK_HI)
        .step_by(8)
        .flat_map(|a| word(a).to_le_bytes())
        .collect()
}

/// The synthetic stack, of a process whose pointer mask is [`MASK`].
fn image(bytes: &[u8]) -> StackImage<'_> {
    StackImage::new(STACK_LO, bytes).with_pointer_mask(MASK)
}

fn reg_value(r: Register, regs: &Regs) -> Option<u64> {
    match r {
        Dwarf::X29 => Some(regs.fp),
        Dwarf::X30 => Some(regs.lr),
        Dwarf::SP => Some(regs.sp),
        Dwarf::PC => Some(regs.pc),
        _ => None,
    }
}

type Expected = compare::Expected<Regs>;

impl DiffArch for Aarch64 {
    fn regs_at(pc: u64) -> Regs {
        Regs {
            pc,
            sp: SP,
            fp: FP,
            lr: LR,
        }
    }

    /// Evaluates gimli's `row` directly, in the order our unwinder does: CFA, return address,
    /// x30, x29; rules our tables cannot express (an SP other than the CFA, a CFA on x30 or the
    /// PC, an `RA_SIGN_STATE` that is not a constant) make the row one to drop.
    fn expected<'a, S: UnwindSection<Slice<'a>>>(
        row: &UnwindTableRow<usize>,
        cie: &gimli::CommonInformationEntry<Slice<'a>>,
        section: &S,
        regs: &Regs,
        image: &StackImage<'_>,
        signal: bool,
    ) -> Expected {
        let enc = cie.encoding();
        let reg = |r: Register| reg_value(r, regs);
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => match *register {
                Dwarf::SP | Dwarf::X29 => {
                    Val::Ok(reg(*register).unwrap().wrapping_add(*offset as u64))
                }
                _ => Val::MustDrop("CFA on another register than SP or x29"),
            },
            CfaRule::Expression(e) => match e.get(section) {
                Ok(x) => support::gimli_expr(x, enc, reg, image, None, !0),
                Err(e) => Val::Error(e),
            },
        };
        let cfa_value = match cfa {
            Val::Ok(v) => v,
            _ => 0,
        };
        let column = cie.return_address_register();
        let ra_rule = row.register(column);
        let ra_undefined = matches!(ra_rule, Some(RegisterRule::Undefined));
        // The return address is still in x30 where x30 is the column and has no rule.
        let in_x30 = (column == Dwarf::X30).then_some(regs.lr);
        let recover = |rule, missing, same| {
            support::gimli_reg(rule, missing, same, cfa_value, section, enc, reg, image)
        };
        let ra = recover(ra_rule, in_x30, in_x30);
        let lr = if column == Dwarf::X30 {
            Val::Ok(0) // The same value as the return address (filled in below).
        } else {
            recover(row.register(Dwarf::X30), Some(regs.lr), Some(regs.lr))
        };
        let fp = recover(row.register(Dwarf::X29), Some(regs.fp), Some(regs.fp));
        let sp = match row.register(Dwarf::SP) {
            None | Some(RegisterRule::ValOffset(0)) => Val::Ok(0),
            Some(_) => Val::MustDrop("an SP rule other than the CFA"),
        };
        let signed = match row.register(Dwarf::RA_SIGN_STATE) {
            None | Some(RegisterRule::Constant(0)) => Val::Ok(0),
            Some(RegisterRule::Constant(1)) => Val::Ok(1),
            Some(_) => Val::MustDrop("RA_SIGN_STATE not a constant"),
        };
        let values = [&cfa, &sp, &signed, &ra, &lr, &fp];
        if let Some(e) = compare::not_a_caller(&values, ra_undefined) {
            return e;
        }
        match (cfa, signed, ra, lr, fp) {
            (Val::Ok(sp), Val::Ok(signed), Val::Ok(ra), Val::Ok(lr), Val::Ok(fp)) => {
                let lr = if column == Dwarf::X30 { ra } else { lr };
                let _ = signed; // Compared with the rule's flag in `same_flags`.
                let pc = ra & !MASK;
                Expected::Caller {
                    regs: Regs { pc, sp, fp, lr },
                    exact: signal,
                }
            }
            _ => unreachable!("not_a_caller saw every failure"),
        }
    }

    fn cfa_on_frame_pointer(register: Register) -> bool {
        register == Dwarf::X29
    }

    fn same_flags(row: &UnwindTableRow<usize>, rule: &unwind_core::aarch64::Rule) -> bool {
        let signed = matches!(
            row.register(Dwarf::RA_SIGN_STATE),
            Some(RegisterRule::Constant(1))
        );
        signed == rule.ra_signed
    }

    fn last_instruction(end: u64) -> u64 {
        end - 4
    }

    fn handler_install(rule: &unwind_core::aarch64::Rule) -> bool {
        use unwind_core::aarch64::RegRule;
        rule.ra == RegRule::Lost
            || (matches!(rule.ra, RegRule::Expr(_)) && rule.fp == RegRule::Undefined)
    }
}

/// Compares the `.eh_frame` of the aarch64 ELF file at `path` with our table of it.
fn differential(path: &Path) -> Summary {
    let bytes = stack_bytes();
    compare::elf_file::<Aarch64>(path, &image(&bytes))
}

/// The aarch64 row of the targets table.
fn aarch64() -> &'static Target {
    target::by_name("aarch64")
}

/// The file `name` of Debian's arm64 libraries (`libc6-arm64-cross` and friends, which
/// `scripts/setup` installs), or `None` (a failure under CI) if missing.
fn debian(name: &str) -> Option<PathBuf> {
    let path = Path::new(aarch64().libdir).join(name);
    if path.exists() {
        Some(path)
    } else {
        unwind_test_support::missing(&format!("{} (scripts/setup)", path.display()));
        None
    }
}

#[test]
fn debian_arm64_libc_matches_gimli() {
    let Some(path) = debian("libc.so.6") else {
        return;
    };
    let s = differential(&path);
    assert!(s.compared > 10_000, "only {} rows compared", s.compared);
    assert!(s.cfa_fp > 100, "only {} rows with the CFA on x29", s.cfa_fp);
}

#[test]
fn debian_arm64_libstdcxx_matches_gimli() {
    let Some(path) = debian("libstdc++.so.6") else {
        return;
    };
    let s = differential(&path);
    assert!(s.compared > 10_000, "only {} rows compared", s.compared);
}

#[test]
fn debian_arm64_libgcc_s_matches_gimli() {
    let Some(path) = debian("libgcc_s.so.1") else {
        return;
    };
    let s = differential(&path);
    assert!(s.compared > 500, "only {} rows compared", s.compared);
    // `_Unwind_RaiseException` and its three siblings end in a handler installation.
    assert!(
        s.handler_install_rows >= 4,
        "{} rows in a handler installation",
        s.handler_install_rows
    );
}

#[test]
fn rust_aarch64_libstd_matches_gimli() {
    let Some(path) = unwind_test_support::rust_libstd("aarch64-unknown-linux-gnu") else {
        unwind_test_support::missing("libstd-*.so of the aarch64-unknown-linux-gnu Rust target");
        return;
    };
    let s = differential(&path);
    assert!(s.compared > 10_000, "only {} rows compared", s.compared);
}

/// A C program with calls, a variable-length array and recursion, compiled by Debian's arm64
/// cross compiler with `flags` into a shared object in a temporary directory.
fn compile(tag: &str, flags: &[&str]) -> Option<PathBuf> {
    let gcc = &aarch64().cc();
    if !aarch64().usable("the aarch64 programs' tables", &[]) {
        return None;
    }
    let dir = std::env::temp_dir().join(format!("unwind-a64-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("prog.c");
    std::fs::write(
        &src,
        r#"
#include <string.h>
extern int sink(char *, int);
static int __attribute__((noinline)) leaf(int x) { return x * 3 + 1; }
int __attribute__((noinline)) vla(int n) {
    char buf[n];
    memset(buf, n, n);
    return sink(buf, n) + leaf(n);
}
int __attribute__((noinline)) rec(int n) { return n ? rec(n - 1) + vla(n) : leaf(n); }
int entry(int n) { return rec(n) + vla(n * 2); }
"#,
    )
    .unwrap();
    let out = dir.join(format!("libprog-{tag}.so"));
    let status = Command::new(gcc)
        .args(flags)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success(), "{gcc} {flags:?} failed");
    Some(out)
}

/// Code built with pointer authentication: GCC signs x30 (`paciasp`) and says so with
/// `DW_CFA_AARCH64_negate_ra_state`; every row after it has a signed return address, which our
/// rule records as gimli's `RA_SIGN_STATE` says (and the walk strips).
#[test]
fn branch_protected_code_matches_gimli() {
    for (tag, flags) in [
        ("pac-O2", &["-O2", "-mbranch-protection=standard"][..]),
        (
            "pac-O0-fp",
            &[
                "-O0",
                "-mbranch-protection=pac-ret",
                "-fno-omit-frame-pointer",
            ][..],
        ),
        ("ordinary", &["-O2"][..]),
    ] {
        let Some(path) = compile(tag, flags) else {
            return;
        };
        differential(&path);
        let loaded = unwind_dwarf::load_elf_file::<Aarch64>(&path).unwrap();
        let signed = loaded
            .rules
            .extents()
            .filter(|(_, _, r)| r.ra_signed)
            .count();
        if tag == "ordinary" {
            assert_eq!(
                signed, 0,
                "{tag}: signed rows without pointer authentication"
            );
        } else {
            assert!(signed >= 4, "{tag}: only {signed} signed rows");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random CFI, compared row by row with gimli as the libraries above.

/// Registers the generated CFI names: x29, SP, x30, the PC, `RA_SIGN_STATE` (which only
/// `negate_ra_state` may set) and x19 (untracked).
fn arb_dwarf_reg() -> impl Strategy<Value = u8> + Clone {
    prop_oneof![
        8 => Just(Dwarf::X29.0 as u8),
        8 => Just(Dwarf::SP.0 as u8),
        4 => Just(Dwarf::X30.0 as u8),
        1 => Just(Dwarf::PC.0 as u8),
        1 => Just(Dwarf::RA_SIGN_STATE.0 as u8),
        1 => Just(19u8),
    ]
}

/// One instruction: mostly the generic ones, and `DW_CFA_AARCH64_negate_ra_state` (0x2d).
fn arb_insn() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => random::cfa_insn(arb_dwarf_reg()),
        1 => Just(vec![0x2d]),
    ]
}

/// A CIE (`zR`, pcrel|sdata4, code alignment 4, data alignment -8, return address column `ra`,
/// optionally `S`) whose initial instructions are GCC's (`def_cfa sp, 0`), and one FDE at
/// `svma + 0x1000` covering 0x100 bytes with `insns`.
fn synthetic_eh_frame(svma: u64, ra: u8, signal: bool, insns: &[u8]) -> Vec<u8> {
    let mut cie = Vec::new();
    cie.extend(0u32.to_le_bytes());
    cie.push(1);
    cie.extend(if signal { &b"zRS\0"[..] } else { &b"zR\0"[..] });
    cie.push(4); // code alignment
    cie.push(0x78); // data alignment -8
    cie.push(ra);
    cie.push(1);
    cie.push(0x1b);
    cie.extend([0x0c, Dwarf::SP.0 as u8, 0]); // def_cfa sp+0
    let mut out = Vec::new();
    out.extend((cie.len() as u32).to_le_bytes());
    out.extend(&cie);
    let ptr_field = out.len() + 4;
    let mut fde = Vec::new();
    fde.extend((ptr_field as u32).to_le_bytes());
    let pc_field = svma as i64 + ptr_field as i64 + 4;
    fde.extend(((0x1000 - pc_field) as i32).to_le_bytes());
    fde.extend(0x100u32.to_le_bytes());
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
        proptest::collection::vec(arb_insn(), 0..40),
        prop::bool::weighted(0.1),
        prop_oneof![18 => Just(Dwarf::X30.0 as u8), 1 => Just(Dwarf::PC.0 as u8), 1 => Just(19u8)],
        prop::bool::weighted(0.2),
    )
        .prop_map(|(pieces, keep, ra, signal)| (random::sanitize(pieces, keep), ra, signal))
}

/// Loads a synthetic `.eh_frame` with our loader and compares it with gimli.
fn synthetic_case(
    insns: &[u8],
    ra: u8,
    signal: bool,
) -> (Summary, Vec<String>, unwind_dwarf::CfiStats) {
    let data = synthetic_eh_frame(SYNTHETIC_SVMA, ra, signal, insns);
    let sections = unwind_dwarf::CfiSections {
        eh_frame: Some(&data),
        eh_frame_svma: SYNTHETIC_SVMA,
        ..Default::default()
    };
    let (rules, stats) = unwind_dwarf::rules_from_sections::<Aarch64>(&sections, None).unwrap();
    let signed = rules.extents().filter(|(_, _, r)| r.ra_signed).count();
    let mut tb = RuleTableBuilder::new(NonZeroU32::MIN);
    tb.add(0, u64::MAX, 0, "synthetic".into(), Arc::new(rules));
    let table = tb.build().unwrap();
    let bytes = stack_bytes();
    let image = image(&bytes);
    let mut mismatches = Vec::new();
    let (mut s, _) =
        compare::eh_frame::<Aarch64>(&data, SYNTHETIC_SVMA, 0, &table, &image, &mut mismatches);
    // (Counted in a field the random cases otherwise leave at 0.)
    s.not_dwarf = signed as u64;
    (s, mismatches, stats.cfi)
}

/// `remember_state`, `negate_ra_state`, `restore_state`: the state restored is the remembered
/// one, signed flag included; and a second negation unsigns.
#[test]
fn negate_ra_state_is_remembered_and_restored() {
    let x30 = Dwarf::X30.0 as u8;
    let insns = [
        0x41,
        0x2d, // 0x1000 paciasp: signed from 0x1004
        0x41,
        0x0e,
        16,
        0x80 | 29,
        2,
        0x80 | x30,
        1, // 0x1004 stp x29, x30, [sp, #-16]!
        0x41,
        0x0a, // 0x1008 (body); remember_state from 0x100c
        0x41,
        0x0e,
        0,
        0xc0 | 29,
        0xc0 | x30, // 0x100c ldp x29, x30, [sp], #16
        0x41,
        0x2d, // 0x1010 autiasp: unsigned from 0x1014
        0x41,
        0x0b, // 0x1014 ret; restore_state from 0x1018 (another exit follows)
    ];
    let (s, mismatches, _) = synthetic_case(&insns, x30, false);
    compare::check_mismatches("negate/remember/restore", mismatches);
    assert_eq!(s.identical, s.rows, "{s:?}");
    let data = synthetic_eh_frame(SYNTHETIC_SVMA, x30, false, &insns);
    let sections = unwind_dwarf::CfiSections {
        eh_frame: Some(&data),
        eh_frame_svma: SYNTHETIC_SVMA,
        ..Default::default()
    };
    let (rules, _) = unwind_dwarf::rules_from_sections::<Aarch64>(&sections, None).unwrap();
    let signed: Vec<bool> = (0..7)
        .map(|i| rules.lookup(0x1000 + 4 * i).unwrap().ra_signed)
        .collect();
    assert_eq!(signed, [false, true, true, true, true, false, true]);
    assert_eq!(
        rules.lookup(0x1018).unwrap().cfa,
        unwind_core::aarch64::CfaRule::SpOffset(16),
        "restore_state restores the CFA too"
    );
}

/// The random CFI must reach the interesting paths: 1000 fixed cases, with a minimum of each
/// (the signed rows counted in `not_dwarf`, a field random cases leave at 0 otherwise).
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
    println!("random CFI, 1000 fixed cases: {total:?} (signed rows: not_dwarf)");
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
    // Fewer rows compare than on x86_64: a rule for SP other than the CFA (frequent here, with
    // SP among the registers rules name) makes a row one our tables do not express.
    assert!(total.identical > 1000);
    assert!(total.identical_with_expr > 60);
    assert!(total.end_of_stack > 10);
    assert!(total.read_failed > 40);
    assert!(total.cfa_fp > 500);
    assert!(total.not_dwarf > 150, "signed rows");
    assert_eq!(total.expr_errors, 0);
    assert!(total.ours_none_must_drop > 500);
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
            "{} rows without a rule, {} dropped", s.ours_none, stats.dropped_total()
        );
    }
}

/// Debian's arm64 libc is read as aarch64, and not as any other architecture.
#[test]
fn debian_arm64_files_are_aarch64() {
    let Some(path) = debian("libc.so.6") else {
        return;
    };
    let data = std::fs::read(&path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    assert_eq!(
        unwind_dwarf::Architecture::of_elf(&file).unwrap(),
        unwind_dwarf::Architecture::Aarch64
    );
    assert!(unwind_dwarf::rules_from_elf::<unwind_dwarf::X86_64>(&data).is_err());
    assert!(unwind_dwarf::rules_from_elf::<unwind_dwarf::Arm>(&data).is_err());
    assert_eq!(Aarch64::BREAKPAD_NAME, "arm64");
}
