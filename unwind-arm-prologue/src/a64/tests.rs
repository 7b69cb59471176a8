//! Functions assembled by GNU as for aarch64 (`aarch64-linux-gnu-as`), each at the address it
//! had in the object file, read by [`analyze`].

use super::*;
use proptest::prelude::*;

fn code(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Reads `words` at `start`, with function entries at `starts`.
fn read(words: &[u32], start: u64, starts: &[u64]) -> Analysis {
    analyze(&code(words), start, |a| starts.contains(&a))
}

/// The rule before the instruction at `addr`.
fn rule_at(a: &Analysis, addr: u64) -> Option<Rule> {
    a.rules()
        .iter()
        .find(|(s, e, _)| (*s..*e).contains(&addr))
        .map(|r| r.2)
}

fn rule(cfa: CfaRule, ra: RegRule, fp: RegRule) -> Rule {
    Rule {
        cfa,
        ra,
        lr: ra,
        fp,
        ra_signed: false,
        signal_frame: false,
        from_instructions: true,
    }
}

const ENTRY: Rule = Rule {
    cfa: CfaRule::SpOffset(0),
    ra: RegRule::Same,
    lr: RegRule::Same,
    fp: RegRule::Same,
    ra_signed: false,
    signal_frame: false,
    from_instructions: true,
};

/// `stp x29, x30, [sp, #-32]!; mov x29, sp; ...; ldp x29, x30, [sp], #32; ret`: the frame
/// record at the CFA - 32, x30 above it.
#[test]
fn a_frame_record() {
    let a = read(
        &[
            0xa9be7bfd, // stp x29, x30, [sp, #-32]!
            0x910003fd, // mov x29, sp
            0xf9000bf3, // str x19, [sp, #16]
            0x97fffffd, // bl 0
            0xf9400bf3, // ldr x19, [sp, #16]
            0xa8c27bfd, // ldp x29, x30, [sp], #32
            0xd65f03c0, // ret
        ],
        0,
        &[0],
    );
    assert!(a.confirmed(), "{a:?}");
    let body = rule(
        CfaRule::SpOffset(32),
        RegRule::Offset(-24),
        RegRule::Offset(-32),
    );
    assert_eq!(rule_at(&a, 0), Some(ENTRY));
    for pc in [4, 8, 12, 16, 20] {
        assert_eq!(rule_at(&a, pc), Some(body), "at {pc:#x}");
    }
    assert_eq!(rule_at(&a, 24), Some(ENTRY), "after the epilogue's load");
    assert_eq!(a.states[2].unwrap().fp, Some(32), "x29 = CFA - 32");
}

/// GCC without frame pointers: only x30 saved, with writeback; restored by a post-index load.
#[test]
fn only_the_link_register_saved() {
    let a = read(
        &[
            0xf81c0ffe, // str x30, [sp, #-64]!
            0x390043e1, // strb w1, [sp, #16]
            0x97fffffe, // bl 0x1c
            0x91000400, // add x0, x0, #1
            0xf84407fe, // ldr x30, [sp], #64
            0xd65f03c0, // ret
        ],
        0x1c,
        &[0x1c],
    );
    assert!(a.confirmed(), "{a:?}");
    let body = rule(CfaRule::SpOffset(64), RegRule::Offset(-64), RegRule::Same);
    assert_eq!(rule_at(&a, 0x20), Some(body));
    assert_eq!(rule_at(&a, 0x2c), Some(body));
    assert_eq!(rule_at(&a, 0x30), Some(ENTRY));
}

/// `sub sp, sp, x1` (alloca) makes SP unknown: the CFA comes from x29 until `mov sp, x29`.
#[test]
fn alloca_takes_the_cfa_from_x29() {
    let a = read(
        &[
            0xa9be7bfd, // stp x29, x30, [sp, #-32]!
            0x910003fd, // mov x29, sp
            0xcb2163ff, // sub sp, sp, x1
            0x97fffffd, // bl 0x34
            0x910003bf, // mov sp, x29
            0xa8c27bfd, // ldp x29, x30, [sp], #32
            0xd65f03c0, // ret
        ],
        0x34,
        &[0x34],
    );
    assert!(a.confirmed(), "{a:?}");
    let on_fp = rule(
        CfaRule::FpOffset(32),
        RegRule::Offset(-24),
        RegRule::Offset(-32),
    );
    assert_eq!(rule_at(&a, 0x40), Some(on_fp));
    assert_eq!(rule_at(&a, 0x44), Some(on_fp));
    assert_eq!(
        rule_at(&a, 0x48).map(|r| r.cfa),
        Some(CfaRule::SpOffset(32)),
        "SP known again"
    );
}

/// A `ret` reached with the frame not restored refutes the reading: no rule at all.
#[test]
fn a_return_without_the_frame_restored_refutes() {
    let no_restore = read(
        &[
            0xf81f0ffe, // str x30, [sp, #-16]!
            0x97ffffff, // bl 0x50
            0x910043ff, // add sp, sp, #16
            0xd65f03c0, // ret
        ],
        0x50,
        &[0x50],
    );
    assert_eq!(no_restore.refuted_at, Some(0x5c));
    assert!(no_restore.rules().is_empty());
    // A call while x30 holds the return address loses it.
    let unsaved = read(&[0x94000000, 0xd65f03c0], 0x60, &[0x60]);
    assert_eq!(unsaved.states[1].unwrap().lr, Saved::Lost);
    assert_eq!(unsaved.refuted_at, Some(0x64));
    assert!(unsaved.rules().is_empty());
    // x29 written without being saved: the caller's is lost.
    let clobbered = read(&[0xaa0003fd, 0xd65f03c0], 0xf8, &[0xf8]);
    assert_eq!(clobbered.refuted_at, Some(0xfc));
}

/// An early exit before the frame is built (shrink wrapping) joins the epilogue's path at the
/// `ret` with the same frame.
#[test]
fn shrink_wrapping() {
    let a = read(
        &[
            0xb40000a0, // cbz x0, 0x7c
            0xa9bf7bfd, // stp x29, x30, [sp, #-16]!
            0x910003fd, // mov x29, sp
            0x97fffffd, // bl 0x68
            0xa8c17bfd, // ldp x29, x30, [sp], #16
            0xd65f03c0, // ret
        ],
        0x68,
        &[0x68],
    );
    assert!(a.confirmed(), "{a:?}");
    assert_eq!(a.exits, 1, "one ret, reached by two paths");
    assert_eq!(rule_at(&a, 0x7c), Some(ENTRY));
}

/// Code after an indirect branch is reached only through it: not read, no rule.
#[test]
fn code_after_an_indirect_branch_is_not_read() {
    let a = read(
        &[
            0xf81f0ffe, // str x30, [sp, #-16]!
            0xd61f0040, // br x2
            0x91000400, // add x0, x0, #1
            0xf84107fe, // ldr x30, [sp], #16
            0xd65f03c0, // ret
        ],
        0x80,
        &[0x80],
    );
    assert_eq!(a.states[2], None);
    assert_eq!(a.exits, 0);
    assert!(!a.confirmed() && a.rules().is_empty());
}

/// Two paths reaching one instruction with different SPs: no rule.
#[test]
fn two_frames_at_one_instruction() {
    let a = read(
        &[
            0xb4000040, // cbz x0, 0x9c
            0xd10043ff, // sub sp, sp, #16
            0x910003ff, // mov sp, sp
            0xd65f03c0, // ret
        ],
        0x94,
        &[0x94],
    );
    assert_eq!(a.conflict_at, Some(0x9c));
    assert!(a.rules().is_empty());
}

/// A `b` to a function's entry with the frame restored is a tail call, an exit; a `b` out of
/// the function elsewhere (a cold part) neither confirms nor refutes.
#[test]
fn tail_calls_and_cold_parts() {
    let tail = [
        0xa9bf7bfd, // stp x29, x30, [sp, #-16]!
        0x97ffffff, // bl 0xa4
        0xa8c17bfd, // ldp x29, x30, [sp], #16
        0x17ffffd4, // b 0
    ];
    let a = read(&tail, 0xa4, &[0, 0xa4]);
    assert!(a.confirmed() && a.exits == 1, "{a:?}");
    let not_an_entry = read(&tail, 0xa4, &[0xa4]);
    assert!(!not_an_entry.confirmed());
    let cold = read(
        &[
            0xa9bf7bfd, // stp x29, x30, [sp, #-16]!
            0x14000003, // b 0x108 (outside)
            0xa8c17bfd, // ldp x29, x30, [sp], #16
            0xd65f03c0, // ret
        ],
        0xfc,
        &[0xfc],
    );
    assert_eq!((cold.exits, cold.refuted_at), (0, None));
}

/// `paciasp` signs x30: the rows after it (to `autiasp`) have a signed return address.
#[test]
fn pointer_authentication() {
    let a = read(
        &[
            0xd503233f, // paciasp
            0xa9bf7bfd, // stp x29, x30, [sp, #-16]!
            0x910003fd, // mov x29, sp
            0x97fffffd, // bl 0xb4
            0xa8c17bfd, // ldp x29, x30, [sp], #16
            0xd50323bf, // autiasp
            0xd65f03c0, // ret
        ],
        0xb4,
        &[0xb4],
    );
    assert!(a.confirmed(), "{a:?}");
    let signed: Vec<bool> = (0..7)
        .map(|n| rule_at(&a, 0xb4 + 4 * n).unwrap().ra_signed)
        .collect();
    assert_eq!(signed, [false, true, true, true, true, true, false]);
}

/// `sub sp, sp, #1, lsl #12`: shifted immediates.
#[test]
fn large_frames() {
    let a = read(
        &[
            0xa9bf7bfd, // stp x29, x30, [sp, #-16]!
            0xd14007ff, // sub sp, sp, #1, lsl #12
            0xd10083ff, // sub sp, sp, #32
            0x97fffffd, // bl 0xd0
            0x914007ff, // add sp, sp, #1, lsl #12
            0x910083ff, // add sp, sp, #32
            0xa8c17bfd, // ldp x29, x30, [sp], #16
            0xd65f03c0, // ret
        ],
        0xd0,
        &[0xd0],
    );
    assert!(a.confirmed(), "{a:?}");
    assert_eq!(
        rule_at(&a, 0xdc).map(|r| r.cfa),
        Some(CfaRule::SpOffset(16 + 4096 + 32))
    );
}

/// Raising SP above a save slot loses what it holds (a signal handler's frame may overwrite
/// it), even if it is read back later.
#[test]
fn a_slot_below_sp_is_lost() {
    let a = read(
        &[
            0xf81f0ffe, // str x30, [sp, #-16]!
            0x97ffffff, // bl
            0x910043ff, // add sp, sp, #16
            0xf85f03fe, // ldur x30, [sp, #-16]
            0xd65f03c0, // ret
        ],
        0x50,
        &[0x50],
    );
    assert_eq!(a.states[3].unwrap().lr, Saved::Lost);
    assert!(a.rules().is_empty());
}

/// A store at or above the CFA writes the caller's memory, not a save slot of this frame
/// (found by fuzzing: the rule said x30 was at CFA + 8).
#[test]
fn a_store_above_the_cfa_is_not_a_save() {
    let a = read(
        &[
            0xa9017bfd, // stp x29, x30, [sp, #16]
            0xa9417bfd, // ldp x29, x30, [sp, #16]
            0xd65f03c0, // ret
        ],
        0,
        &[0],
    );
    assert_eq!(a.states[1].unwrap().lr, Saved::InRegister);
    assert!(a.rules().is_empty(), "{:?}", a.rules());
}

proptest! {
    /// Any words: no panic, and every rule keeps its saved registers between SP and the CFA.
    #[test]
    fn any_code_gives_rules_inside_the_frame(words in proptest::collection::vec(any::<u32>(), 0..64)) {
        let a = read(&words, 0x1000, &[0x1000]);
        for (_, _, r) in a.rules() {
            if let CfaRule::SpOffset(cfa) = r.cfa {
                prop_assert!(cfa >= 0);
                for saved in [r.ra, r.fp] {
                    if let RegRule::Offset(o) = saved {
                        prop_assert!(o < 0 && -o <= cfa, "{r:?}");
                    }
                }
            }
        }
    }

    /// Prologues and epilogues of any size, with any body of non-stack instructions: the body's
    /// rule is the frame's.
    #[test]
    fn any_frame_size(frame in 1u32..32, body in 0usize..8) {
        let n = frame * 16;
        // stp x29, x30, [sp, #-n]!  (imm7 = -n / 8)
        let imm7 = (128 - (n / 8)) & 0x7f;
        let stp = 0xa980_7bfd | (imm7 << 15);
        // ldp x29, x30, [sp], #n
        let ldp = 0xa8c0_7bfd | (((n / 8) & 0x7f) << 15);
        let mut words = vec![stp];
        words.extend(std::iter::repeat_n(0x9100_0400u32, body)); // add x0, x0, #1
        words.extend([0x97ff_ffff, ldp, 0xd65f_03c0]);
        let a = read(&words, 0, &[0]);
        prop_assert!(a.confirmed());
        let cfa = i32::try_from(n).unwrap();
        prop_assert_eq!(
            rule_at(&a, 4),
            Some(rule(CfaRule::SpOffset(cfa), RegRule::Offset(8 - cfa), RegRule::Offset(-cfa)))
        );
    }
}
