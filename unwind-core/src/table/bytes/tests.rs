//! Round trips of tables built from random rows (x86_64, ARM and aarch64 rules, with expressions), every
//! truncation of an encoding, random byte changes (resealed, so that the checks behind the
//! checksum are what answers), and the headers' refusals.

use super::*;
use crate::table::ModuleRulesBuilder;
use crate::{aarch64, arm, x86_64};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u8>().prop_map(Op::Reg),
        any::<i64>().prop_map(Op::Const),
        (0..PLAIN_OPS.len()).prop_map(|i| PLAIN_OPS[i]),
    ]
}

/// Up to 8 distinct expressions: expression `i` ends with `Const(i)`.
fn exprs() -> impl Strategy<Value = Vec<Expr>> {
    proptest::collection::vec(proptest::collection::vec(op(), 0..MAX_OPS), 0..8).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, mut ops)| {
                ops.push(Op::Const(i as i64));
                Expr::new(&ops).unwrap()
            })
            .collect()
    })
}

/// Offsets: small ones (the common rules) and any.
fn offset() -> impl Strategy<Value = i32> {
    prop_oneof![-64i32..64, any::<i32>()]
}

fn x86_reg_rule() -> impl Strategy<Value = x86_64::RegRule> {
    use x86_64::RegRule;
    prop_oneof![
        offset().prop_map(RegRule::Offset),
        Just(RegRule::Undefined),
        Just(RegRule::Same),
        offset().prop_map(RegRule::ValOffset),
        any::<u16>().prop_map(RegRule::Expr),
        any::<u16>().prop_map(RegRule::ValExpr),
    ]
}

/// x86_64 rules, their expression indices any (made to fit the table by [`fix_x86`]).
fn x86_rule() -> impl Strategy<Value = x86_64::Rule> {
    use x86_64::CfaRule;
    let cfa = prop_oneof![
        offset().prop_map(CfaRule::SpOffset),
        offset().prop_map(CfaRule::FpOffset),
        any::<u16>().prop_map(CfaRule::Expr),
    ];
    (cfa, x86_reg_rule(), x86_reg_rule(), any::<bool>()).prop_map(|(cfa, ra, fp, signal_frame)| {
        x86_64::Rule {
            cfa,
            ra,
            fp,
            signal_frame,
        }
    })
}

/// `i` made an index of one of `n` expressions, or `None` without expressions.
fn fit(i: u16, n: usize) -> Option<u16> {
    (n > 0).then(|| i % n as u16)
}

fn fix_x86(mut r: x86_64::Rule, n: usize) -> x86_64::Rule {
    use x86_64::{CfaRule, RegRule};
    if let CfaRule::Expr(i) = r.cfa {
        r.cfa = fit(i, n).map_or(CfaRule::SpOffset(i32::from(i)), CfaRule::Expr);
    }
    for reg in [&mut r.ra, &mut r.fp] {
        *reg = match *reg {
            RegRule::Expr(i) => fit(i, n).map_or(RegRule::Same, RegRule::Expr),
            RegRule::ValExpr(i) => fit(i, n).map_or(RegRule::Undefined, RegRule::ValExpr),
            other => other,
        };
    }
    r
}

fn a64_reg_rule() -> impl Strategy<Value = aarch64::RegRule> {
    use aarch64::RegRule;
    prop_oneof![
        offset().prop_map(RegRule::Offset),
        Just(RegRule::Undefined),
        Just(RegRule::Same),
        offset().prop_map(RegRule::ValOffset),
        any::<u16>().prop_map(RegRule::Expr),
        any::<u16>().prop_map(RegRule::ValExpr),
    ]
}

/// aarch64 rules, their expression indices any (made to fit the table by [`fix_a64`]).
fn a64_rule() -> impl Strategy<Value = aarch64::Rule> {
    use aarch64::CfaRule;
    let cfa = prop_oneof![
        offset().prop_map(CfaRule::SpOffset),
        offset().prop_map(CfaRule::FpOffset),
        any::<u16>().prop_map(CfaRule::Expr),
    ];
    let regs = (a64_reg_rule(), a64_reg_rule(), a64_reg_rule());
    (cfa, regs, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(cfa, (ra, lr, fp), ra_signed, signal_frame, from_instructions)| aarch64::Rule {
            cfa,
            ra,
            lr,
            fp,
            ra_signed,
            signal_frame,
            from_instructions,
        },
    )
}

fn fix_a64(mut r: aarch64::Rule, n: usize) -> aarch64::Rule {
    use aarch64::{CfaRule, RegRule};
    if let CfaRule::Expr(i) = r.cfa {
        r.cfa = fit(i, n).map_or(CfaRule::SpOffset(i32::from(i)), CfaRule::Expr);
    }
    for reg in [&mut r.ra, &mut r.lr, &mut r.fp] {
        *reg = match *reg {
            RegRule::Expr(i) => fit(i, n).map_or(RegRule::Same, RegRule::Expr),
            RegRule::ValExpr(i) => fit(i, n).map_or(RegRule::Undefined, RegRule::ValExpr),
            other => other,
        };
    }
    r
}

fn arm_reg() -> impl Strategy<Value = arm::Reg> {
    (0..REGS.len()).prop_map(|i| REGS[i])
}

const REGS: [arm::Reg; 6] = [
    arm::Reg::R7,
    arm::Reg::R11,
    arm::Reg::R12,
    arm::Reg::Sp,
    arm::Reg::Lr,
    arm::Reg::Pc,
];

fn arm_reg_rule() -> impl Strategy<Value = arm::RegRule> {
    use arm::RegRule;
    prop_oneof![
        offset().prop_map(RegRule::Offset),
        Just(RegRule::Undefined),
        Just(RegRule::Same),
        offset().prop_map(RegRule::ValOffset),
        arm_reg().prop_map(RegRule::Register),
        any::<u16>().prop_map(RegRule::Expr),
        any::<u16>().prop_map(RegRule::ValExpr),
    ]
}

/// ARM rules, their expression indices any (made to fit the table by [`fix_arm`]).
fn arm_rule() -> impl Strategy<Value = arm::Rule> {
    use arm::{CfaRule, Source};
    let cfa = prop_oneof![
        (arm_reg(), offset()).prop_map(|(r, o)| CfaRule::RegOffset(r, o)),
        any::<u16>().prop_map(CfaRule::Expr),
    ];
    let source = prop_oneof![
        Just(Source::Dwarf),
        Just(Source::Exidx),
        Just(Source::Instructions)
    ];
    let regs = proptest::collection::vec(arm_reg_rule(), 6);
    (cfa, regs, source, any::<bool>()).prop_map(|(cfa, regs, source, signal_frame)| arm::Rule {
        cfa,
        pc: regs[0],
        lr: regs[1],
        sp: regs[2],
        r12: regs[3],
        r11: regs[4],
        r7: regs[5],
        source,
        signal_frame,
    })
}

fn fix_arm(mut r: arm::Rule, n: usize) -> arm::Rule {
    use arm::{CfaRule, RegRule};
    if let CfaRule::Expr(i) = r.cfa {
        r.cfa = fit(i, n).map_or(CfaRule::RegOffset(arm::Reg::Sp, 0), CfaRule::Expr);
    }
    for reg in [
        &mut r.pc, &mut r.lr, &mut r.sp, &mut r.r12, &mut r.r11, &mut r.r7,
    ] {
        *reg = match *reg {
            RegRule::Expr(i) => fit(i, n).map_or(RegRule::Same, RegRule::Expr),
            RegRule::ValExpr(i) => fit(i, n).map_or(RegRule::Undefined, RegRule::ValExpr),
            other => other,
        };
    }
    r
}

/// Rows as `(gap before, length, rule from the pool)`, laid end to end from `first`, and a few
/// overlapping and empty rows.
type Rows = Vec<(u64, u64, usize)>;

fn rows() -> impl Strategy<Value = (u64, Rows, Vec<(u64, u64, usize)>)> {
    (
        prop_oneof![Just(0u64), 0u64..0x10_0000, Just(u64::MAX - (1 << 40))],
        proptest::collection::vec(
            (prop_oneof![Just(0u64), 0u64..64], 1u64..4096, 0usize..64),
            0..200,
        ),
        proptest::collection::vec((0u64..0x8_0000, 0u64..0x100, 0usize..64), 0..6),
    )
}

/// A table of `rows` (and the `extra` rows, at offsets into their range) with rules of `pool`
/// and expressions `exprs`, as the builder makes it.
fn build<R: TableRule>(
    first: u64,
    rows: &Rows,
    extra: &[(u64, u64, usize)],
    pool: &[R],
    exprs: &[Expr],
) -> ModuleRules<R> {
    let mut b = ModuleRulesBuilder::new();
    for (i, e) in exprs.iter().enumerate() {
        assert_eq!(b.add_expr(*e), Ok(i as u16));
    }
    let mut at = first;
    for &(gap, len, rule) in rows {
        at += gap;
        b.push(at, at + len, pool[rule % pool.len()]).unwrap();
        at += len;
    }
    for &(start, len, rule) in extra {
        let start = first + start;
        b.push(start, start + len, pool[rule % pool.len()]).unwrap();
    }
    b.build().unwrap()
}

/// The answer of a binary search of every start (no page index) for `svma`.
fn full_search<R: TableRule>(m: &ModuleRules<R>, svma: u64) -> Option<Option<u16>> {
    let rel = u32::try_from(svma.checked_sub(m.base)?).ok()?;
    let i = m.starts.partition_point(|&s| s <= rel).checked_sub(1)?;
    m.starts.get(i + 1)?;
    let r = *m.rules.get(i)?;
    Some((r != NO_RULE).then_some(r))
}

/// Every lookup of `m` is in range and right: at every extent's first and last address, around
/// the module and at a sample of the addresses between, the extent holds the address, its rule
/// and ready form exist, every expression its rule names exists, and the answer is a binary
/// search's.
fn check_lookups<R: RuleBytes>(m: &ModuleRules<R>) {
    let end = m.starts.last().copied().unwrap_or(0);
    let step = (u64::from(end) / 4096).max(1) as usize;
    let bounds = m
        .starts
        .iter()
        .flat_map(|&s| [s.wrapping_sub(1), s, s.wrapping_add(1)]);
    let addrs = (0..=u64::from(end) + 32)
        .step_by(step)
        .chain(bounds.map(u64::from))
        .map(|rel| m.base.wrapping_add(rel))
        .chain([
            m.base.wrapping_sub(1),
            0,
            u64::MAX,
            m.base.wrapping_add(1 << 32),
        ]);
    for svma in addrs {
        let found = m.extent_at(svma);
        assert_eq!(found.map(|e| e.rule), full_search(m, svma), "{svma:#x}");
        let Some(e) = found else { continue };
        assert!(e.len >= 1 && e.start <= svma && svma - e.start < u64::from(e.len));
        if let Some(i) = e.rule {
            let rule = m.rule(i).expect("rule in the dictionary");
            assert_eq!(m.ready(i), Some(&rule.ready()));
            rule.exprs(|x| assert!(m.expr(x).is_some(), "expression {x}"));
        }
    }
    for (s, e, _) in m.extents() {
        assert!(s < e);
    }
}

/// `from_bytes(to_bytes(m))` is `m` in every field (its debug form prints them all, the ready
/// forms too) and encodes to the same bytes; each truncation is refused as such; changed bytes
/// are refused by the checksum, and, resealed, either refused or a table whose lookups are all
/// in range (and which encodes to those bytes again).
fn round_trip<R: RuleBytes + fmt::Debug>(m: &ModuleRules<R>, flips: &[(usize, u8)])
where
    R::Ready: fmt::Debug,
{
    let bytes = m.to_bytes();
    let back = ModuleRules::<R>::from_bytes(&bytes).unwrap();
    assert_eq!(format!("{m:?}"), format!("{back:?}"));
    assert_eq!(back.to_bytes(), bytes);
    check_lookups(&back);

    for len in 0..bytes.len() {
        match ModuleRules::<R>::from_bytes(&bytes[..len]) {
            Err(RulesBytesError::Truncated { offset }) => assert!(offset <= len),
            other => panic!("{len} of {} bytes: {:?}", bytes.len(), other.map(|_| ())),
        }
    }

    for &(at, x) in flips {
        let mut changed = bytes.clone();
        let at = at % changed.len();
        changed[at] ^= x;
        // Unsealed: a header's check or the checksum refuses it.
        assert!(
            ModuleRules::<R>::from_bytes(&changed).is_err(),
            "byte {at} ^ {x:#x}"
        );
        seal(&mut changed);
        match ModuleRules::<R>::from_bytes(&changed) {
            Ok(m) => {
                check_lookups(&m);
                assert_eq!(m.to_bytes(), changed, "byte {at} ^ {x:#x}");
            }
            Err(
                RulesBytesError::Invalid { offset, .. } | RulesBytesError::Truncated { offset },
            ) => {
                assert!(offset <= changed.len())
            }
            Err(_) => {}
        }
    }
}

fn flips() -> impl Strategy<Value = Vec<(usize, u8)>> {
    proptest::collection::vec((any::<usize>(), 1u8..=255), 64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn x86_64_tables_round_trip(
        (first, rows, extra) in rows(),
        pool in proptest::collection::vec(x86_rule(), 1..12),
        exprs in exprs(),
        flips in flips(),
    ) {
        let pool: Vec<_> = pool.into_iter().map(|r| fix_x86(r, exprs.len())).collect();
        round_trip(&build(first, &rows, &extra, &pool, &exprs), &flips);
    }

    #[test]
    fn arm_tables_round_trip(
        (first, rows, extra) in rows(),
        pool in proptest::collection::vec(arm_rule(), 1..12),
        exprs in exprs(),
        flips in flips(),
    ) {
        let pool: Vec<_> = pool.into_iter().map(|r| fix_arm(r, exprs.len())).collect();
        round_trip(&build(first, &rows, &extra, &pool, &exprs), &flips);
    }

    #[test]
    fn aarch64_tables_round_trip(
        (first, rows, extra) in rows(),
        pool in proptest::collection::vec(a64_rule(), 1..12),
        exprs in exprs(),
        flips in flips(),
    ) {
        let pool: Vec<_> = pool.into_iter().map(|r| fix_a64(r, exprs.len())).collect();
        round_trip(&build(first, &rows, &extra, &pool, &exprs), &flips);
    }

    /// Each rule reads back as itself from its `SIZE` bytes.
    #[test]
    fn rules_round_trip(x in x86_rule(), a in arm_rule(), a64 in a64_rule()) {
        let mut out = Vec::new();
        a64.write(&mut out);
        prop_assert_eq!(out.len(), <aarch64::Rule as RuleBytes>::SIZE);
        let back = aarch64::Rule::read(&mut RuleReader::new(&out, 0)).unwrap();
        prop_assert_eq!(back, a64);
        let mut out = Vec::new();
        x.write(&mut out);
        prop_assert_eq!(out.len(), <x86_64::Rule as RuleBytes>::SIZE);
        let back = x86_64::Rule::read(&mut RuleReader::new(&out, 0)).unwrap();
        prop_assert_eq!(back, x);
        let mut out = Vec::new();
        a.write(&mut out);
        prop_assert_eq!(out.len(), <arm::Rule as RuleBytes>::SIZE);
        let back = arm::Rule::read(&mut RuleReader::new(&out, 0)).unwrap();
        prop_assert_eq!(back, a);
    }

    /// Any bytes at all as a rule: refused, or a rule that writes back to them.
    #[test]
    fn any_rule_bytes_read_back_or_fail(bytes in proptest::collection::vec(any::<u8>(), 38)) {
        if let Ok(r) = aarch64::Rule::read(&mut RuleReader::new(&bytes[..22], 0)) {
            let mut out = Vec::new();
            r.write(&mut out);
            prop_assert_eq!(&out[..], &bytes[..22]);
        }
        for n in [<x86_64::Rule as RuleBytes>::SIZE, <arm::Rule as RuleBytes>::SIZE] {
            let b = &bytes[..n];
            if n == 16 {
                if let Ok(r) = x86_64::Rule::read(&mut RuleReader::new(b, 0)) {
                    let mut out = Vec::new();
                    r.write(&mut out);
                    prop_assert_eq!(&out[..], b);
                }
            } else if let Ok(r) = arm::Rule::read(&mut RuleReader::new(b, 0)) {
                let mut out = Vec::new();
                r.write(&mut out);
                prop_assert_eq!(&out[..], b);
            }
        }
    }
}

/// Every operation without an operand has the tag of its place in `PLAIN_OPS`, and an
/// expression of every operation reads back.
#[test]
fn operation_tags_agree() {
    for (i, &op) in PLAIN_OPS.iter().enumerate() {
        assert_eq!(op_tag(op), OP_PLAIN + i as u8, "{op:?}");
    }
    let mut ops = vec![Op::Reg(7), Op::Const(-5)];
    ops.extend_from_slice(&PLAIN_OPS[..MAX_OPS - 2]);
    let rest: Vec<Op> = PLAIN_OPS[MAX_OPS - 2..].to_vec();
    for ops in [&ops[..], &rest[..], &[]] {
        let e = Expr::new(ops).unwrap();
        let mut out = Vec::new();
        write_expr(&e, &mut out);
        assert_eq!(read_expr(&mut RuleReader::new(&out, 0)), Ok(e));
    }
}

fn sample_x86() -> ModuleRules<x86_64::Rule> {
    let mut b = ModuleRulesBuilder::new();
    let plt = b.add_expr(x86_64::plt_cfa_expression()).unwrap();
    let mut r = x86_64::Rule::default();
    b.push(0x1000, 0x1010, r).unwrap();
    r.cfa = x86_64::CfaRule::Expr(plt);
    b.push(0x1010, 0x1100, r).unwrap();
    b.push(0x1200, 0x1300, x86_64::Rule::default()).unwrap();
    b.build().unwrap()
}

/// Where the header's fields are.
const STARTS_COUNT: usize = 72;
const PAGES_COUNT: usize = 76;
const DICT_COUNT: usize = 80;
const EXPRS_COUNT: usize = 84;
const EXPR_BYTES: usize = 88;

/// The headers' refusals: magic, version, architecture (both ways), and counts past the input
/// (however large) refused as truncations before anything is allocated for them.
#[test]
fn headers_are_checked() {
    let m = sample_x86();
    let bytes = m.to_bytes();
    let patched = |at: usize, v: &[u8], reseal: bool| {
        let mut b = bytes.clone();
        b[at..at + v.len()].copy_from_slice(v);
        if reseal {
            seal(&mut b);
        }
        b
    };
    assert_eq!(
        ModuleRules::<x86_64::Rule>::from_bytes(&patched(0, b"X", true)).unwrap_err(),
        RulesBytesError::BadMagic
    );
    assert_eq!(
        ModuleRules::<x86_64::Rule>::from_bytes(&patched(8, &(VERSION + 1).to_le_bytes(), true))
            .unwrap_err(),
        RulesBytesError::WrongVersion { found: VERSION + 1 }
    );
    assert_eq!(
        ModuleRules::<arm::Rule>::from_bytes(&bytes).unwrap_err(),
        RulesBytesError::WrongArchitecture { found: *b"x64\0" }
    );
    assert_eq!(
        ModuleRules::<x86_64::Rule>::from_bytes(&sample_arm().to_bytes()).unwrap_err(),
        RulesBytesError::WrongArchitecture { found: *b"arm\0" }
    );
    // The rule size with the right tag.
    assert!(matches!(
        ModuleRules::<x86_64::Rule>::from_bytes(&patched(16, &17u32.to_le_bytes(), true)),
        Err(RulesBytesError::WrongArchitecture { .. })
    ));
    for (field, first_array) in [
        (STARTS_COUNT, HEADER),
        (PAGES_COUNT, HEADER + 6 * m.starts.len()),
        (DICT_COUNT, HEADER + 6 * m.starts.len() + 4 * m.pages.len()),
        (
            EXPR_BYTES,
            HEADER + 6 * m.starts.len() + 4 * m.pages.len() + 16 * m.dict.len(),
        ),
    ] {
        for huge in [u32::MAX, 1 << 31, 1 << 20, 1000] {
            let err = ModuleRules::<x86_64::Rule>::from_bytes(&patched(
                field,
                &huge.to_le_bytes(),
                false,
            ));
            assert!(
                matches!(err, Err(RulesBytesError::Truncated { offset }) if offset <= first_array + 8),
                "{field} = {huge}: {err:?}"
            );
        }
    }
    // More expressions than their bytes, or than 65536.
    for n in [u32::MAX, 1 << 17, 1000] {
        let err =
            ModuleRules::<x86_64::Rule>::from_bytes(&patched(EXPRS_COUNT, &n.to_le_bytes(), true));
        assert_eq!(
            err.unwrap_err(),
            RulesBytesError::Invalid {
                what: "expression count",
                offset: 84
            }
        );
    }
    // Bytes after the checksum; no checksum.
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        ModuleRules::<x86_64::Rule>::from_bytes(&longer),
        Err(RulesBytesError::Invalid { .. })
    ));
    assert_eq!(
        ModuleRules::<x86_64::Rule>::from_bytes(&patched(
            bytes.len() - 1,
            &[!bytes[bytes.len() - 1]],
            false
        ))
        .unwrap_err(),
        RulesBytesError::BadChecksum
    );
}

fn sample_arm() -> ModuleRules<arm::Rule> {
    let mut b = ModuleRulesBuilder::new();
    b.push(0x8000, 0x8010, arm::Rule::default()).unwrap();
    b.push(0x8010, 0x8100, arm::Rule::cant_unwind()).unwrap();
    b.build().unwrap()
}

/// Empty tables (no rows, or only empty ones) round trip.
#[test]
fn empty_tables_round_trip() {
    let mut b = ModuleRulesBuilder::new();
    b.push(0x10, 0x10, x86_64::Rule::default()).unwrap();
    for m in [ModuleRules::<x86_64::Rule>::empty(), b.build().unwrap()] {
        round_trip(&m, &[(0, 1), (30, 4), (200, 0x80)]);
        let mut b = m.to_bytes();
        b[40] = 1;
        seal(&mut b);
        assert_eq!(
            ModuleRules::<x86_64::Rule>::from_bytes(&b).unwrap_err(),
            RulesBytesError::Invalid {
                what: "extent count",
                offset: 40
            }
        );
        assert_eq!(m.to_bytes().len(), HEADER + 16 * m.dict.len() + CHECKSUM);
    }
}

/// A rule naming an expression the table does not have (the builder does not check) is
/// refused, at the rule.
#[test]
fn dangling_expression_indices_are_refused() {
    let mut b = ModuleRulesBuilder::new();
    let rule = x86_64::Rule {
        ra: x86_64::RegRule::ValExpr(0),
        ..Default::default()
    };
    b.push(0x1000, 0x1010, rule).unwrap();
    let bytes = b.build().unwrap().to_bytes();
    let dict_at = HEADER + 6 * 2 + 4 * 2;
    assert_eq!(
        ModuleRules::<x86_64::Rule>::from_bytes(&bytes).unwrap_err(),
        RulesBytesError::Invalid {
            what: "expression index past the expressions",
            offset: dict_at
        }
    );
}

/// Each structural check names its field: a start out of order, a rule index past the
/// dictionary, a page entry, a rule's tag, the page size.
#[test]
fn structural_errors_name_their_field() {
    let m = sample_x86();
    let bytes = m.to_bytes();
    let n = m.starts.len();
    let rules_at = HEADER + 4 * n;
    let pages_at = rules_at + 2 * n;
    let dict_at = pages_at + 4 * m.pages.len();
    let check = |at: usize, v: &[u8], what: &str, offset: usize| {
        let mut b = bytes.clone();
        b[at..at + v.len()].copy_from_slice(v);
        seal(&mut b);
        match ModuleRules::<x86_64::Rule>::from_bytes(&b) {
            Err(RulesBytesError::Invalid { what: w, offset: o }) => {
                assert_eq!((w, o), (what, offset), "{at}")
            }
            other => panic!("{at}: {:?}", other.map(|_| ())),
        }
    };
    check(
        HEADER + 4,
        &0x5000u32.to_le_bytes(),
        "extent starts not increasing",
        HEADER + 8,
    );
    check(
        HEADER,
        &1u32.to_le_bytes(),
        "extent starts not from 0",
        HEADER,
    );
    check(
        rules_at,
        &7u16.to_le_bytes(),
        "rule index past the dictionary",
        rules_at,
    );
    check(
        pages_at + 4,
        &0u32.to_le_bytes(),
        "page index entry",
        pages_at + 4,
    );
    check(dict_at, &[9], "x86_64 CFA rule", dict_at);
    check(dict_at + 10, &[1, 1], "x86_64 rbp rule", dict_at + 11);
    check(dict_at + 15, &[2], "x86_64 signal frame flag", dict_at + 15);
    check(
        rules_at,
        &NO_RULE.to_le_bytes(),
        "first extent a gap",
        rules_at,
    );
    check(
        rules_at + 2,
        &0u16.to_le_bytes(),
        "extent with the rule of the one before",
        rules_at + 2,
    );
    check(
        rules_at + 2 * (n - 1),
        &1u16.to_le_bytes(),
        "last extent start not a gap",
        rules_at + 2 * (n - 1),
    );
    check(20, &[40], "page size", 20);
    check(
        24,
        &u64::MAX.to_le_bytes(),
        "extents past the address space",
        24,
    );
    check(40, &9u64.to_le_bytes(), "extent count", 40);
}

/// The error's text names what and where.
#[test]
fn errors_display() {
    let e = RulesBytesError::Invalid {
        what: "page size",
        offset: 20,
    };
    assert_eq!(
        String::from("invalid rule table: page size at offset 20"),
        format!("{e}")
    );
}
