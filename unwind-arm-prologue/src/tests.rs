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

/// libgcc's `_Unwind_RaiseException` on armhf (an `EXIDX_CANTUNWIND` function): it saves LR,
/// then a block of registers with LR again for the unwinder, which rewrites the saved PC (LR's
/// first slot) as it unwinds; it returns through LR reloaded from the block.
const UNWIND_WRAPPER: [u16; 18] = [
    0x46ec, // mov ip, sp
    0xb500, // push {lr}
    0xe92d, 0x5000, // stmdb sp!, {ip, lr}
    0xe92d, 0x1fff, // stmdb sp!, {r0-r12}
    0xf04f, 0x0300, // mov.w r3, #0
    0xe92d, 0x000c, // stmdb sp!, {r2, r3}
    0xa901, // add r1, sp, #4
    0xf7ff, 0xfb91, // bl
    0xf8dd, 0xe040, // ldr.w lr, [sp, #64]
    0xb012, // add sp, #72
    0x4770, // bx lr
    0xbf00, // nop
];

#[test]
fn conditional_branches_fall_through() {
    // push {r4, lr}; cmp r0, #0; beq .L (T1); cbz r1, .L; beq.w .L (T3); movs r0, #1;
    // pop {r4, pc}; .L: movs r0, #2; pop {r4, pc}
    //  0 push  2 cmp  4 beq  6 cbz  8 beq.w  c movs  e pop  10 movs  12 pop
    let code = thumb(&[
        0xb510, 0x2800, 0xd004, 0xb119, 0xf000, 0x8002, 0x2001, 0xbd10, 0x2002, 0xbd10,
    ]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    for (pc, what) in [(4, "beq"), (6, "cbz"), (8, "beq.w")] {
        let d = decode::thumb(
            u16::from_le_bytes([code[pc], code[pc + 1]]),
            Some(u16::from_le_bytes([code[pc + 2], code[pc + 3]])),
            pc as u64,
        )
        .unwrap();
        assert!(d.conditional, "{what}");
        assert_eq!(d.effect, decode::Effect::Branch(0x10), "{what}");
    }
    // Each falls through: nothing after them is a guess, and both returns are read.
    assert!(a.guessed.is_empty(), "{:x?}", a.guessed);
    assert_eq!(sp(&a, 0xc), Some(8));
    assert_eq!(sp(&a, 0x10), Some(8), "the branches' state");
    assert_eq!(a.exits, [(0xe, true), (0x12, true)]);
    assert_eq!(a.confirmed_rules().last().map(|r| r.1), Some(0x14));
}

#[test]
fn a_register_block_is_not_a_frame() {
    let a = analyze(&thumb(&UNWIND_WRAPPER), 0x1000, Isa::Thumb, &[], &[]);
    assert_eq!(a.register_blocks, [0x1004]);
    assert_eq!(a.confirmed_rules(), []);
    // LR was loaded from the block, not from its save slot: at the return it is not known to
    // hold the return address.
    assert_eq!(a.exits, [(0x1020, false)]);
}

#[test]
fn lr_reloaded_from_its_slot_returns_through_lr() {
    // push {r4, lr}; sub sp, #8; bl f; ldr.w lr, [sp, #12]; add sp, #16; bx lr
    let code = thumb(&[
        0xb510, 0xb082, 0xf7ff, 0xfffe, 0xf8dd, 0xe00c, 0xb004, 0x4770,
    ]);
    let a = analyze(&code, 0x1000, Isa::Thumb, &[], &[]);
    let at_call_return = at(&a, 0x1008).unwrap();
    assert_eq!((at_call_return.sp, at_call_return.lr), (Some(16), Some(-4)));
    assert!(!at_call_return.lr_holds_return, "the call wrote LR");
    assert!(at(&a, 0x100c).unwrap().lr_holds_return, "after ldr.w lr");
    assert_eq!(at(&a, 0x100e), Some(FrameState::ENTRY), "at bx lr");
    assert_eq!(a.exits, [(0x100e, true)]);
    assert!(a.register_blocks.is_empty());
    let rules = a.confirmed_rules();
    assert_eq!(rules.first().map(|r| r.0), Some(0x1000));
    assert_eq!(rules.last().map(|r| r.1), Some(0x1000 + code.len() as u64));
}

#[test]
fn a_save_slot_below_sp_holds_nothing() {
    // push {r4, lr}; bl f; add sp, #8; bx lr: LR's slot is below SP at the return, where a
    // signal frame may have overwritten it, and the call overwrote LR.
    let code = thumb(&[0xb510, 0xf7ff, 0xfffe, 0xb002, 0x4770]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    let s = at(&a, 8).unwrap();
    assert!(s.lr_lost());
    assert_eq!(s.rule(), None);
    assert_eq!(a.exits, [(8, false)]);
    assert_eq!(a.confirmed_rules(), []);
    // Without the call, LR still holds the return address at the return.
    let a = analyze(&thumb(&[0xb510, 0xb002, 0x4770]), 0, Isa::Thumb, &[], &[]);
    assert_eq!(at(&a, 4), Some(FrameState::ENTRY));
}

#[test]
fn a_call_overwrites_a_return_address_still_in_lr() {
    // movs r0, #0; bl abort (no push: the call does not return) -- Thumb and A32.
    let a = analyze(
        &thumb(&[0x2000, 0xf7ff, 0xfffe, 0xbf00]),
        0,
        Isa::Thumb,
        &[],
        &[],
    );
    assert_eq!(
        at(&a, 0).and_then(|s| s.rule()).map(|r| r.pc),
        Some(RegRule::Register(Reg::Lr))
    );
    assert_eq!(at(&a, 6).and_then(|s| s.rule()), None, "after the call");
    let a = analyze(
        &arm(&[0xe3a0_0000, 0xebff_fffe, 0xe320_f000]),
        0,
        Isa::Arm,
        &[],
        &[],
    );
    assert_eq!(at(&a, 8).and_then(|s| s.rule()), None);
    // blx r3 (Thumb), and the call after a push saving LR changes nothing.
    let a = analyze(&thumb(&[0x4798, 0xbf00]), 0, Isa::Thumb, &[], &[]);
    assert!(at(&a, 2).unwrap().lr_lost());
    let a = analyze(&thumb(&[0xb510, 0x4798, 0xbd10]), 0, Isa::Thumb, &[], &[]);
    assert_eq!(at(&a, 4).unwrap().lr, Some(-4));
    assert_eq!(a.exits, [(4, true)]);
}

#[test]
fn confirmed_rules_need_a_good_exit_and_no_bad_one() {
    // The code after clone's system call in the child: no exit (it ends with exit's svc).
    // ldr r0, [sp, #4]; ldr ip, [sp], #8; blx ip; movs r7, #1; svc 0
    let child = thumb(&[0x9801, 0xf85d, 0xcb08, 0x47e0, 0x2701, 0xdf00]);
    let a = analyze(&child, 0, Isa::Thumb, &[], &[]);
    assert!(a.exits.is_empty());
    assert_eq!(a.confirmed_rules(), []);
    // A function that returns with its frame unwound, then one reached by no branch and named
    // by no symbol: the second is a guess, left out until a function start names it.
    let two = thumb(&[0xb510, 0x2000, 0xbd10, 0xb530, 0x2000, 0xbd30]);
    let a = analyze(&two, 0, Isa::Thumb, &[], &[]);
    assert_eq!(a.guessed, [(6, 12)]);
    assert_eq!(a.exits, [(4, true)]);
    let rules = a.confirmed_rules();
    assert_eq!(rules.last().map(|r| r.1), Some(6));
    let a = analyze(&two, 0, Isa::Thumb, &[], &[6]);
    assert!(a.guessed.is_empty());
    assert_eq!(a.entries, [0, 6]);
    assert_eq!(a.confirmed_rules().last().map(|r| r.1), Some(12));
    // A pop that does not load PC from the return address's slot: misread code.
    // push {r4, lr}; pop {r4, r5, pc}
    let a = analyze(&thumb(&[0xb510, 0xbd30]), 0, Isa::Thumb, &[], &[]);
    assert_eq!(a.exits, [(2, false)]);
    assert_eq!(a.confirmed_rules(), []);
}

#[test]
fn plain_thumb_instructions_do_nothing_the_decoder_sees() {
    let mut plain = 0;
    for h in 0..=u16::MAX {
        if decode::thumb16_is_plain(h) {
            plain += 1;
            let d = decode::thumb(h, Some(0), 0x1000).unwrap();
            assert_eq!((d.len, d.effect), (2, decode::Effect::None), "{h:#06x}");
        }
    }
    // Most of the space: a check that would pass nothing would fail here.
    assert!(plain > 40_000, "{plain}");
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
        lr_holds_return: true,
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
        starts in proptest::collection::vec(0u64..256, 0..4),
        again in any::<bool>(),
    ) {
        let isa = if thumb_code { Isa::Thumb } else { Isa::Arm };
        let mut starts: Vec<u64> = starts.iter().map(|s| start + s * 2).collect();
        starts.sort_unstable();
        starts.dedup();
        let a = if again {
            analyze_to_confirm(&code, start, isa, &[], &starts)
        } else {
            analyze(&code, start, isa, &[], &starts)
        };
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
        // Confirmed rows: ordered, inside the code, never in a guessed range.
        let mut last = start;
        for (s, e, _) in a.confirmed_rules() {
            prop_assert!(last <= s && s < e && e <= end);
            prop_assert!(a.guessed.iter().all(|g| e <= g.0 || g.1 <= s));
            last = e;
        }
        for &(s, e) in &a.guessed {
            prop_assert!(start <= s && s < e && e <= end);
        }
    }
}

#[test]
fn a_state_recorded_in_a_guess_is_a_guess() {
    // A function, then one no symbol names (read as a guess, with the first one's body frame:
    // SP 8 too high), whose forward branch lands after a return:
    // 0: push {r4, lr}; 2: pop {r4, pc}; 4: push {r4-r6, lr}; 6: cbz r0, 0xa;
    // 8: pop {r4-r6, pc}; a: movs r0, #0; c: pop {r4-r6, pc}
    let code = thumb(&[0xb510, 0xbd10, 0xb570, 0xb100, 0xbd70, 0x2000, 0xbd70]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    // The branch's state is the guess's (SP 24 where it is 16): what follows it is a guess
    // too, never confirmed.
    assert_eq!(sp(&a, 0xa), Some(24));
    assert_eq!(a.guessed, [(4, 0xe)]);
    assert_eq!(a.exits, [(2, true)]);
    let rules = a.confirmed_rules();
    assert!(rules.iter().all(|r| r.1 <= 4), "{rules:x?}");
}

#[test]
fn a_branch_from_known_code_ends_a_guess() {
    // 0: push {r4, lr}; 2: cbz r0, 0xa; 4: movs r0, #1; 6: pop {r4, pc}; 8: movs r0, #2;
    // a: movs r0, #3; c: pop {r4, pc}
    // 8 follows a return and no branch leads there: a guess. 0xa is the target of a branch read
    // with a known state, reached here by falling through from the guess: known again.
    let code = thumb(&[0xb510, 0xb110, 0x2001, 0xbd10, 0x2002, 0x2003, 0xbd10]);
    let a = analyze(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(a.guessed, [(8, 0xa)]);
    assert_eq!(sp(&a, 0xa), Some(8));
    assert_eq!(a.exits, [(6, true), (0xc, true)]);
}

#[test]
fn loops_entered_at_their_test_are_read_again() {
    // A loop whose body comes before its test, entered by a jump to the test, with a return in
    // the body that leaves the frame wrongly (what a misreading looks like):
    // 0: push {r4, lr}; 2: b 8; 4: pop {r4, r5, pc}; 6: subs r4, #1; 8: cmp r4, #0;
    // a: bne 4; c: pop {r4, pc}
    let code = thumb(&[0xb510, 0xe001, 0xbd30, 0x3c01, 0x2c00, 0xd1fb, 0xbd10]);
    // One reading: the body is a guess and its exit is not counted; the function is confirmed.
    let once = analyze(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(once.guessed, [(4, 8)]);
    assert_eq!(once.exits, [(0xc, true)]);
    assert!(!once.confirmed_rules().is_empty());
    // Read again from the state at the branch back: the body is known, its exit is bad, and
    // nothing is confirmed.
    let again = analyze_to_confirm(&code, 0, Isa::Thumb, &[], &[]);
    assert_eq!(sp(&again, 4), Some(8));
    assert_eq!(again.exits, [(4, false), (0xc, true)]);
    assert_eq!(
        again.guessed,
        [(6, 8)],
        "after the body's return, until the test"
    );
    assert_eq!(again.confirmed_rules(), []);
    // Without the bad return (`movs r0, #1` instead), the loop is known and confirmed.
    let good = thumb(&[0xb510, 0xe001, 0x2001, 0x3c01, 0x2c00, 0xd1fb, 0xbd10]);
    let a = analyze_to_confirm(&good, 0, Isa::Thumb, &[], &[]);
    assert!(a.guessed.is_empty(), "{:x?}", a.guessed);
    assert_eq!(a.confirmed_rules().iter().map(|r| r.1).max(), Some(0xe));
}

#[test]
fn a_function_that_only_branches_out_is_not_confirmed() {
    // movs r0, #1; b.n 0x40 (out of the code: a tail call, with the entry's frame)
    let a = analyze(&thumb(&[0x2001, 0xe01d]), 0, Isa::Thumb, &[], &[]);
    assert_eq!(a.exits, [(2, true)]);
    assert!(a.returns.is_empty());
    assert_eq!(a.confirmed_rules(), []);
    // With a return on another path: cbz r0, 4; b.n 0x40; bx lr
    let a = analyze(&thumb(&[0xb100, 0xe01d, 0x4770]), 0, Isa::Thumb, &[], &[]);
    assert_eq!(a.exits, [(2, true), (4, true)]);
    assert_eq!(a.returns, [4]);
    assert_eq!(a.confirmed_rules().len(), 1);
}
