use super::*;
use proptest::prelude::*;

fn thumb(halves: &[u16]) -> Vec<u8> {
    halves.iter().flat_map(|h| h.to_le_bytes()).collect()
}

fn arm(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The state before the instruction at `pc`.
fn at(a: &Analysis, pc: u64) -> Option<FrameState> {
    a.rows
        .iter()
        .find(|(s, e, _)| (*s..*e).contains(&pc))
        .map(|r| r.2)
}

fn sp(a: &Analysis, pc: u64) -> Option<i32> {
    at(a, pc).and_then(|s| s.sp)
}

#[test]
fn thumb_prologue_body_and_epilogue() {
    // push {r4, r7, lr}; vpush {d8-d9}; sub sp, #8; movs r0, #0; add sp, #8; vpop {d8-d9};
    // pop {r4, r7, pc}
    let code = thumb(&[
        0xb590, 0xed2d, 0x8b04, 0xb082, 0x2000, 0xb002, 0xecbd, 0x8b04, 0xbd90,
    ]);
    let a = analyze(&code, 0x1000, Isa::Thumb, &[], &[]);
    assert_eq!(at(&a, 0x1000), Some(FrameState::ENTRY));
    let body = at(&a, 0x1008).unwrap();
    assert_eq!(body.sp, Some(12 + 16 + 8));
    assert_eq!((body.lr, body.r7, body.r11), (Some(-4), Some(-8), None));
    assert_eq!(sp(&a, 0x1002), Some(12));
    assert_eq!(sp(&a, 0x1006), Some(28));
    assert_eq!(sp(&a, 0x100a), Some(36)); // at add sp, #8
    assert_eq!(sp(&a, 0x100c), Some(28)); // at vpop
    assert_eq!(sp(&a, 0x1010), Some(12)); // at the pop
    assert_eq!(at(&a, 0x1010).unwrap().lr, Some(-4));
    assert_eq!(a.instructions, 7);
    let rules = a.rules();
    assert_eq!(rules.first().map(|r| (r.0, r.1)), Some((0x1000, 0x1002)));
    assert_eq!(rules.last().map(|r| r.1), Some(0x1000 + code.len() as u64));
    assert!(rules.iter().all(|r| r.2.source == Source::Instructions));
}

#[test]
fn arm_frame_pointer_prologue_and_epilogue() {
    // push {r4, r11, lr}; add r11, sp, #8; sub sp, sp, #16; nop; sub sp, r11, #8;
    // pop {r4, r11, pc}
    let code = arm(&[
        0xe92d_4810,
        0xe28d_b008,
        0xe24d_d010,
        0xe1a0_0000,
        0xe24b_d008,
        0xe8bd_8810,
    ]);
    let a = analyze(&code, 0x2000, Isa::Arm, &[], &[]);
    let s = at(&a, 0x200c).unwrap();
    assert_eq!(s.sp, Some(28));
    assert_eq!(s.fp, Some((Reg::R11, 4)));
    assert_eq!((s.lr, s.r11), (Some(-4), Some(-8)));
    assert_eq!(sp(&a, 0x2014), Some(12));
    let rule = s.rule().unwrap();
    assert_eq!(rule.cfa, CfaRule::RegOffset(Reg::Sp, 28));
    assert_eq!(
        (rule.pc, rule.lr, rule.r11),
        (
            RegRule::Offset(-4),
            RegRule::Offset(-4),
            RegRule::Offset(-8)
        )
    );
}

#[test]
fn alloca_uses_the_frame_pointer() {
    // push {r7, lr}; sub sp, #8; add r7, sp, #0; sub.w sp, sp, r3; nop; mov sp, r7;
    // add sp, #8; pop {r7, pc}
    let code = thumb(&[
        0xb580, 0xb082, 0xaf00, 0xebad, 0x0d03, 0xbf00, 0x46bd, 0xb002, 0xbd80,
    ]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    let s = at(&a, 10).unwrap();
    assert_eq!((s.sp, s.fp), (None, Some((Reg::R7, 16))));
    assert_eq!(s.rule().unwrap().cfa, CfaRule::RegOffset(Reg::R7, 16));
    assert_eq!(sp(&a, 14), Some(16)); // mov sp, r7
    assert_eq!(sp(&a, 16), Some(8));
}

#[test]
fn unknown_sp_without_a_frame_pointer_gives_no_rule() {
    // push {r4, lr}; mov sp, r4; pop {r4, pc}
    let code = thumb(&[0xb510, 0x46a5, 0xbd10]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(sp(&a, 4), None);
    assert_eq!(
        a.rules().iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
        [(0, 2), (2, 4)]
    );
}

#[test]
fn conditional_return_leaves_the_frame() {
    // push {r4, lr}; cmp r0, #0; it eq; popeq {r4, pc}; movs r0, #1; pop {r4, pc}
    let code = thumb(&[0xb510, 0x2800, 0xbf08, 0xbd10, 0x2001, 0xbd10]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(sp(&a, 6), Some(8)); // the conditional pop
    assert_eq!(sp(&a, 8), Some(8)); // not taken: the frame is unchanged
                                    // A32: ldmfdeq sp!, {r4, pc}
    let code = arm(&[0xe92d_4010, 0x08bd_8010, 0xe3a0_0001, 0xe8bd_8010]);
    let a = analyze(&code, 0, Isa::Arm, &[], &[]);
    assert_eq!(sp(&a, 8), Some(8));
}

#[test]
fn code_after_a_return_runs_with_the_body_frame_or_the_branch_state() {
    // cbz r0, .Learly; push {r4, lr}; sub sp, #8; cbz r1, .Lmid; add sp, #8; pop {r4, pc};
    // .Lmid: movs r0, #2; add sp, #8; pop {r4, pc}; .Learly: bx lr
    //
    // 0: cbz r0 -> 0x14     2: push   4: sub sp    6: cbz r1 -> 0xc
    // 8: add sp   a: pop     c: movs   e: add sp   10: pop   12: (never) 14: bx lr
    let cbz =
        |rn: u16, offset: u16| 0xb100 | ((offset >> 1) & 0x1f) << 3 | (offset & 0x40) << 3 | rn;
    let code = thumb(&[
        cbz(0, 0x14 - 4),
        0xb510,
        0xb082,
        cbz(1, 0xc - 6 - 4),
        0xb002,
        0xbd10,
        0x2002,
        0xb002,
        0xbd10,
        0xde00, // udf
        0x4770,
    ]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(sp(&a, 0xc), Some(16), "the branch's state (the body)");
    assert_eq!(sp(&a, 0xe), Some(16));
    assert_eq!(
        at(&a, 0x14),
        Some(FrameState::ENTRY),
        "shrink-wrapped early exit"
    );
}

#[test]
fn code_after_a_tail_call_runs_with_the_body_frame() {
    // push {r4, lr}; cmp r0, #0; bne .Lbody; pop {r4, lr}; b.w elsewhere; .Lbody: movs r0, #1;
    // pop {r4, pc}  (.Lbody is a forward branch target, recorded with the body's state)
    let code = thumb(&[
        0xb510, 0x2800, 0xd103, 0xe8bd, 0x4010, 0xf7ff, 0xbffe, 0x2001, 0xbd10,
    ]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(sp(&a, 0xa), Some(0), "after pop {{r4, lr}}");
    assert_eq!(at(&a, 0xa).unwrap().lr, None);
    assert_eq!(sp(&a, 0xe), Some(8));
    assert_eq!(at(&a, 0xe).unwrap().lr, Some(-4));
}

#[test]
fn switch_tables_and_data_are_skipped() {
    // push {r4, lr}; tbb [pc, r0]; table (3 entries + pad to 4 bytes); cases; pop {r4, pc}
    // The table starts at 6; targets 6 + 2 * entry.
    let mut code = thumb(&[0xb510, 0xe8df, 0xf000]);
    code.extend_from_slice(&[2, 3, 4, 0xb4]); // 0xb4 would be a push if read as code
    code.extend(thumb(&[0x2000, 0x2001, 0x2002, 0xbd10]));
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(at(&a, 6), None, "the table has no row");
    assert_eq!(sp(&a, 0xa), Some(8));
    assert_eq!(sp(&a, 0x10), Some(8));
    // A literal pool marked as data, between two parts of a function.
    let code = thumb(&[0xb510, 0xe001, 0xb4ff, 0xb4ff, 0xbd10]);
    let a = analyze(&code, 0, Isa::Thumb, &[(4, 8)], &[]);
    assert_eq!(at(&a, 4), None);
    assert_eq!(sp(&a, 8), Some(8));
}

#[test]
fn function_starts_reset_the_frame() {
    // Two of armhf glibc's syscall wrappers back to back, as one stripped EHABI entry may
    // cover them: push {r7}; mov.w r7, #158; svc 0; pop {r7}; cmn.w r0, #4096; it cc;
    // bxcc lr; b.w __syscall_error; nop -- twice (0x18 bytes each).
    let wrapper = [
        0xb480u16, 0xf04f, 0x079e, 0xdf00, 0xbc80, 0xf510, 0x5f80, 0xbf38, 0x4770, 0xf782, 0xb8d5,
        0xbf00,
    ];
    let code = thumb(&[wrapper, wrapper].concat());
    // After the tail branch, the straight-line reading resumes with the body's frame (r7
    // pushed): without the second function's start, its frame looks 4 bytes deeper.
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(sp(&a, 0x18 + 8), Some(8));
    let a = analyze(&code, 0, Isa::Thumb, &[], &[0x18]);
    for base in [0, 0x18] {
        assert_eq!(at(&a, base), Some(FrameState::ENTRY));
        let at_svc_return = at(&a, base + 8).unwrap();
        assert_eq!((at_svc_return.sp, at_svc_return.r7), (Some(4), Some(-4)));
        assert_eq!(sp(&a, base + 10), Some(0), "after pop {{r7}}");
    }
    // Each epilogue: from after the pop to the end of the tail branch, the body before it.
    let body = at(&a, 8).unwrap();
    assert_eq!(a.epilogues, [(10, 22, body), (0x18 + 10, 0x18 + 22, body)]);
}

#[test]
fn thumb_wide_sp_adjustments() {
    // sub.w sp, sp, #0x400 (F5AD 6D80); subw sp, sp, #0x404 (F2AD 4D04); addw sp, sp, #0x404
    // (F20D 4D04); add.w sp, sp, #0x400 (F50D 6D80); str.w lr, [sp, #-4]! (F84D ED04);
    // ldr.w pc, [sp], #4 (F85D FB04)
    let code = thumb(&[
        0xf84d, 0xed04, 0xf5ad, 0x6d80, 0xf2ad, 0x4d04, 0xf20d, 0x4d04, 0xf50d, 0x6d80, 0xf85d,
        0xfb04,
    ]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(sp(&a, 4), Some(4));
    assert_eq!(at(&a, 4).unwrap().lr, Some(-4));
    assert_eq!(sp(&a, 8), Some(4 + 0x400));
    assert_eq!(sp(&a, 12), Some(4 + 0x804));
    assert_eq!(sp(&a, 16), Some(4 + 0x400));
    assert_eq!(sp(&a, 20), Some(4));
}

#[test]
fn describes_matches_exidx_style_rules() {
    let s = FrameState {
        sp: Some(12),
        fp: Some((Reg::R7, 4)),
        lr: Some(-4),
        r7: Some(-8),
        r11: None,
        r12: None,
    };
    let mut rule = s.rule().unwrap();
    rule.source = Source::Exidx;
    assert!(s.describes(&rule));
    rule.cfa = CfaRule::RegOffset(Reg::R7, 4);
    assert!(s.describes(&rule), "the CFA by the frame pointer");
    rule.cfa = CfaRule::RegOffset(Reg::R7, 8);
    assert!(!s.describes(&rule));
    rule.cfa = CfaRule::RegOffset(Reg::Sp, 12);
    rule.r7 = RegRule::Same;
    assert!(!s.describes(&rule));
}

proptest! {
    #[test]
    fn any_bytes_give_ordered_rows_inside_the_code(
        code in proptest::collection::vec(any::<u8>(), 0..512),
        thumb_code in any::<bool>(),
        start in (0u64..0x1_0000).prop_map(|s| s * 2),
    ) {
        let isa = if thumb_code { Isa::Thumb } else { Isa::Arm };
        let a = analyze(&code, start, isa, &[], &[]);
        let end = start + code.len() as u64;
        let mut last = start;
        for &(s, e, _) in &a.rows {
            prop_assert!(last <= s && s < e && e <= end);
            last = e;
        }
        for (s, e, rule) in a.rules() {
            prop_assert!(start <= s && s < e && e <= end);
            prop_assert_eq!(rule.source, Source::Instructions);
        }
    }
}
