//! Unit tests of index entries, table entries and the translation to rules.

use unwind_core::arm::{CfaRule, Reg, RegRule, Rule, Source};

use crate::*;

const EXIDX: u64 = 0x1_0000;
const EXTAB: u64 = 0x2_0000;

/// `target - place` as a prel31 word (bit 31 clear).
fn p31(target: u64, place: u64) -> u32 {
    (target.wrapping_sub(place) as u32) & 0x7fff_ffff
}

/// Second word of an index entry.
enum W {
    Raw(u32),
    Extab(u64),
}

/// An index at [`EXIDX`] with entries `(function start, second word)`.
fn exidx(entries: &[(u64, W)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (start, w)) in entries.iter().enumerate() {
        let place = EXIDX + 8 * i as u64;
        out.extend_from_slice(&p31(*start, place).to_le_bytes());
        let w = match *w {
            W::Raw(w) => w,
            W::Extab(target) => p31(target, place + 4),
        };
        out.extend_from_slice(&w.to_le_bytes());
    }
    out
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn sections<'a>(exidx: &'a [u8], extab: Option<&'a [u8]>) -> ExidxSections<'a> {
    ExidxSections {
        exidx,
        exidx_svma: EXIDX,
        extab,
        extab_svma: EXTAB,
        text_end: None,
        functions: &[],
    }
}

fn rule(cfa: CfaRule) -> Rule {
    Rule {
        cfa,
        source: Source::Exidx,
        ..Rule::default()
    }
}

/// `pop {r4, lr}`: CFA = SP + 8, LR (and so PC) at CFA - 4.
fn pop_r4_lr() -> Rule {
    Rule {
        pc: RegRule::Offset(-4),
        lr: RegRule::Offset(-4),
        ..rule(CfaRule::RegOffset(Reg::Sp, 8))
    }
}

fn first_drop(stats: &ExidxStats) -> ExidxDropReason {
    let d: Vec<_> = stats.drops().collect();
    assert_eq!(d.len(), 1, "{d:?}");
    d[0].0
}

/// The rule of one inline entry's opcode bytes.
fn inline(word: u32) -> Result<Rule, ExidxDropReason> {
    let ex = exidx(&[(0x8000, W::Raw(word)), (0x8100, W::Raw(1))]);
    let (rows, stats) = rows(&sections(&ex, None)).unwrap();
    assert_eq!(stats.entries, 2);
    assert_eq!(stats.cant_unwind, 1);
    match rows.as_slice() {
        [] => {
            assert_eq!(stats.dropped_total(), 1);
            Err(first_drop(&stats))
        }
        [(0x8000, 0x8100, r)] => Ok(*r),
        other => panic!("{other:?}"),
    }
}

/// The rule of an instruction byte sequence (through a compact-model table entry, index 1).
fn ops(bytes: &[u8]) -> Result<Rule, ExidxDropReason> {
    let mut padded = bytes.to_vec();
    while padded.len() < 2 || !(padded.len() - 2).is_multiple_of(4) {
        padded.push(0xb0);
    }
    let count = (padded.len() - 2) / 4;
    let mut tab = vec![padded[1], padded[0], count as u8, 0x81];
    for w in padded[2..].chunks(4) {
        tab.extend([w[3], w[2], w[1], w[0]]);
    }
    let ex = exidx(&[(0x8000, W::Extab(EXTAB)), (0x8100, W::Raw(1))]);
    let (rows, stats) = rows(&sections(&ex, Some(&tab))).unwrap();
    assert_eq!(stats.extab, 1);
    let via_decode = decode(bytes).map_err(|_| ()).map(translate);
    match rows.as_slice() {
        [] => {
            assert_eq!(stats.dropped_total(), 1);
            let reason = first_drop(&stats);
            if let Ok(r) = via_decode {
                assert_eq!(r, Err(reason));
            }
            Err(reason)
        }
        [(0x8000, 0x8100, r)] => {
            assert_eq!(via_decode, Ok(Ok(*r)));
            Ok(*r)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn prel31_sign_extends() {
    assert_eq!(prel31(0), 0);
    assert_eq!(prel31(0x3fff_ffff), 0x3fff_ffff);
    assert_eq!(prel31(0x4000_0000), -0x4000_0000);
    assert_eq!(prel31(0x7fff_ffff), -1);
    // Bit 31 is not part of the offset.
    assert_eq!(prel31(0xffff_fff0), -16);
}

#[test]
fn inline_entry_and_negative_offsets() {
    // The function lies below the index: a negative prel31 offset.
    let ex = exidx(&[(0x8000, W::Raw(0x80a8_b0b0)), (0x8100, W::Raw(1))]);
    assert_eq!(
        u32::from_le_bytes(ex[0..4].try_into().unwrap()),
        0x7fff_8000,
        "0x8000 - 0x10000"
    );
    let (rows, stats) = rows(&sections(&ex, None)).unwrap();
    assert_eq!(rows, [(0x8000, 0x8100, pop_r4_lr())]);
    assert_eq!(
        (stats.entries, stats.inline, stats.cant_unwind, stats.rows),
        (2, 1, 1, 1)
    );
    assert_eq!(stats.dropped_total(), 0);
    // vsp = vsp + 12; pop {r4-r11, lr}.
    assert_eq!(
        inline(0x8002_afb0),
        Ok(Rule {
            pc: RegRule::Offset(-4),
            lr: RegRule::Offset(-4),
            r7: RegRule::Offset(-24),
            r11: RegRule::Offset(-8),
            ..rule(CfaRule::RegOffset(Reg::Sp, 48))
        })
    );
    // Only finish: a leaf, PC = LR.
    assert_eq!(
        inline(0x80b0_b0b0),
        Ok(rule(CfaRule::RegOffset(Reg::Sp, 0)))
    );
    assert_eq!(inline(0x80b0_b0b0).unwrap().pc, RegRule::Register(Reg::Lr));
    // Refuse to unwind.
    assert_eq!(inline(0x8080_00b0), Err(ExidxDropReason::RefuseToUnwind));
    // Inline entries allow only personality routine 0.
    assert_eq!(
        inline(0x8100_a8b0),
        Err(ExidxDropReason::BadPersonalityIndex)
    );
    assert_eq!(
        inline(0x9000_a8b0),
        Err(ExidxDropReason::BadPersonalityIndex)
    );
}

#[test]
fn functions_above_the_index() {
    // Positive offsets, and a function start far above.
    let ex = exidx(&[(0x4000_0000, W::Raw(0x80a8_b0b0)), (0x4000_0100, W::Raw(1))]);
    let (rows, _) = rows(&sections(&ex, None)).unwrap();
    assert_eq!(rows, [(0x4000_0000, 0x4000_0100, pop_r4_lr())]);
}

#[test]
fn cantunwind_stops_the_walk() {
    let ex = exidx(&[
        (0x8000, W::Raw(0x80a8_b0b0)),
        (0x8010, W::Raw(1)),
        (0x8020, W::Raw(0x80a8_b0b0)),
        (0x8030, W::Raw(1)),
    ]);
    let (rows, stats) = rows(&sections(&ex, None)).unwrap();
    // The CANTUNWIND function in the middle gets the rule that stops a walk; the final one,
    // with no known end, is the linker's sentinel and gets nothing.
    assert_eq!(
        rows,
        [
            (0x8000, 0x8010, pop_r4_lr()),
            (0x8010, 0x8020, Rule::cant_unwind()),
            (0x8020, 0x8030, pop_r4_lr())
        ]
    );
    assert_eq!(stats.cant_unwind, 2);
    assert_eq!(stats.rows, 2);
}

#[test]
fn last_entry_needs_the_end_of_the_code() {
    let ex = exidx(&[(0x8000, W::Raw(0x80a8_b0b0)), (0x8100, W::Raw(0x80a8_b0b0))]);
    let mut s = sections(&ex, None);
    let (r, stats) = rows(&s).unwrap();
    assert_eq!(r, [(0x8000, 0x8100, pop_r4_lr())]);
    assert_eq!(stats.dropped_for(ExidxDropReason::NoEnd), 1);
    s.text_end = Some(0x8100);
    let (r, stats) = rows(&s).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(stats.dropped_for(ExidxDropReason::NoEnd), 1);
    s.text_end = Some(0x8180);
    let (r, stats) = rows(&s).unwrap();
    assert_eq!(
        r,
        [(0x8000, 0x8100, pop_r4_lr()), (0x8100, 0x8180, pop_r4_lr())]
    );
    assert_eq!(stats.dropped_total(), 0);
}

#[test]
fn extab_compact_index_0() {
    // vsp = vsp + 8; pop {r4, lr}; finish.
    let tab = words(&[0x8001_a8b0]);
    let ex = exidx(&[(0x8000, W::Extab(EXTAB)), (0x8100, W::Raw(1))]);
    let (rows, stats) = rows(&sections(&ex, Some(&tab))).unwrap();
    assert_eq!(
        rows,
        [(
            0x8000,
            0x8100,
            Rule {
                pc: RegRule::Offset(-4),
                lr: RegRule::Offset(-4),
                ..rule(CfaRule::RegOffset(Reg::Sp, 16))
            }
        )]
    );
    assert_eq!((stats.extab, stats.inline, stats.generic), (1, 0, 0));
    let e = entries(&sections(&ex, Some(&tab))).unwrap();
    assert_eq!(e[0].model, Model::Compact { index: 0 });
    assert_eq!(e[0].opcodes, Ok(vec![0x01, 0xa8, 0xb0]));
}

#[test]
fn extab_compact_index_1_and_2() {
    // Index 1, one extra word: vsp + 52; vsp + 256; pop {lr}; finish; finish.
    // Preceded by another entry so the table entry is not at the start of the section.
    let tab = words(&[0x8001_a8b0, 0x8101_0c3f, 0x8400_b0b0]);
    for index in [1u32, 2] {
        let mut tab = tab.clone();
        tab[7] = 0x80 | index as u8;
        let ex = exidx(&[(0x8000, W::Extab(EXTAB + 4)), (0x8100, W::Raw(1))]);
        let (rows, stats) = rows(&sections(&ex, Some(&tab))).unwrap();
        assert_eq!(
            rows,
            [(
                0x8000,
                0x8100,
                Rule {
                    pc: RegRule::Offset(-4),
                    lr: RegRule::Offset(-4),
                    ..rule(CfaRule::RegOffset(Reg::Sp, 52 + 256 + 4))
                }
            )]
        );
        assert_eq!(stats.extab, 1);
        let e = entries(&sections(&ex, Some(&tab))).unwrap();
        assert_eq!(e[0].model, Model::Compact { index: index as u8 });
        assert_eq!(e[0].opcodes, Ok(vec![0x0c, 0x3f, 0x84, 0x00, 0xb0, 0xb0]));
    }
    // Index 1 without extra words: two opcode bytes.
    assert_eq!(ops(&[0xa8]), Ok(pop_r4_lr()));
}

#[test]
fn extab_bad_entries_are_dropped() {
    let ex = exidx(&[(0x8000, W::Extab(EXTAB)), (0x8100, W::Raw(1))]);
    let one = |tab: &[u8], extab: bool| {
        let (rows, stats) = rows(&sections(&ex, extab.then_some(tab))).unwrap();
        assert!(rows.is_empty());
        assert_eq!(stats.dropped_total(), 1);
        first_drop(&stats)
    };
    // Personality routine index 3 is not defined.
    assert_eq!(
        one(&words(&[0x8300_a8b0]), true),
        ExidxDropReason::BadPersonalityIndex
    );
    // Index 1 announces 2 more words, only 1 is there.
    assert_eq!(
        one(&words(&[0x8102_a8b0, 0xb0b0_b0b0]), true),
        ExidxDropReason::ExtabTruncated
    );
    // The table is too short for the first word, or missing.
    assert_eq!(one(&[0xb0, 0xa8], true), ExidxDropReason::ExtabOutOfRange);
    assert_eq!(one(&[], false), ExidxDropReason::ExtabOutOfRange);
    // The pointer lands before the table.
    let ex2 = exidx(&[(0x8000, W::Extab(EXTAB - 4)), (0x8100, W::Raw(1))]);
    let (rows2, stats) = rows(&sections(&ex2, Some(&words(&[0x8000_a8b0])))).unwrap();
    assert!(rows2.is_empty());
    assert_eq!(stats.dropped_for(ExidxDropReason::ExtabOutOfRange), 1);
    // A truncated instruction in the opcode bytes: pop under mask without its second byte.
    assert_eq!(
        one(&words(&[0x8001_0184]), true),
        ExidxDropReason::Truncated
    );
    // Spare and reserved opcodes.
    assert_eq!(one(&words(&[0x80b7_b0b0]), true), ExidxDropReason::Spare);
    assert_eq!(one(&words(&[0x809d_b0b0]), true), ExidxDropReason::Reserved);
}

#[test]
fn generic_personality_with_opcodes() {
    // [personality prel31] [count 1 | vsp + 8; pop {r4-r7, lr}; vsp = ...] [extra word] [LSDA]
    let personality = 0x7000u64;
    let tab = [
        words(&[p31(personality, EXTAB)]),
        words(&[0x0101_abb0, 0xb0b0_b0b0, 0xdead_beef]),
    ]
    .concat();
    let ex = exidx(&[(0x8000, W::Extab(EXTAB)), (0x8100, W::Raw(1))]);
    let s = sections(&ex, Some(&tab));
    let e = entries(&s).unwrap();
    assert_eq!(e[0].model, Model::Generic { personality });
    assert_eq!(
        e[0].opcodes,
        Ok(vec![0x01, 0xab, 0xb0, 0xb0, 0xb0, 0xb0, 0xb0])
    );
    let (rows, stats) = rows(&s).unwrap();
    assert_eq!(stats.generic, 1);
    assert_eq!(
        rows,
        [(
            0x8000,
            0x8100,
            Rule {
                pc: RegRule::Offset(-4),
                lr: RegRule::Offset(-4),
                r7: RegRule::Offset(-8),
                ..rule(CfaRule::RegOffset(Reg::Sp, 8 + 20))
            }
        )]
    );
    // Opcodes continue into the extra word (most significant byte first).
    let tab = [
        words(&[p31(personality, EXTAB)]),
        words(&[0x0101_0203, 0xa8b0_b0b0]),
    ]
    .concat();
    let (rows2, _) = crate::rows(&sections(&ex, Some(&tab))).unwrap();
    assert_eq!(rows2[0].2.cfa, CfaRule::RegOffset(Reg::Sp, 8 + 12 + 16 + 8));
}

#[test]
fn generic_personality_without_opcodes_is_dropped() {
    let ex = exidx(&[(0x8000, W::Extab(EXTAB)), (0x8100, W::Raw(1))]);
    // Only the personality word.
    let tab = words(&[p31(0x7000, EXTAB)]);
    let (rows1, stats) = rows(&sections(&ex, Some(&tab))).unwrap();
    assert!(rows1.is_empty());
    assert_eq!(stats.generic, 1);
    assert_eq!(stats.dropped_for(ExidxDropReason::GenericNoOpcodes), 1);
    // The count runs past the end.
    let tab = words(&[p31(0x7000, EXTAB), 0x0300_a8b0, 0]);
    let (rows2, stats) = rows(&sections(&ex, Some(&tab))).unwrap();
    assert!(rows2.is_empty());
    assert_eq!(stats.dropped_for(ExidxDropReason::GenericNoOpcodes), 1);
}

#[test]
fn section_errors() {
    let ex = exidx(&[(0x8000, W::Raw(0x80a8_b0b0)), (0x8100, W::Raw(1))]);
    assert_eq!(
        rows(&sections(&ex[..12], None)).unwrap_err(),
        ExidxError::BadLength { len: 12 }
    );
    assert_eq!(
        rows(&sections(&ex[..7], None)).unwrap_err(),
        ExidxError::BadLength { len: 7 }
    );
    let mut s = sections(&ex, None);
    s.exidx_svma = EXIDX + 2;
    assert_eq!(
        rows(&s).unwrap_err(),
        ExidxError::Misaligned { svma: EXIDX + 2 }
    );
    let unsorted = exidx(&[(0x8100, W::Raw(0x80a8_b0b0)), (0x8000, W::Raw(1))]);
    assert_eq!(
        rows(&sections(&unsorted, None)).unwrap_err(),
        ExidxError::NotSorted {
            index: 1,
            start: 0x8000,
            previous: 0x8100
        }
    );
    // A start below address 0.
    let mut low = sections(&ex, None);
    low.exidx_svma = 0x10;
    assert_eq!(
        rows(&low).unwrap_err(),
        ExidxError::AddressOutOfRange {
            index: 0,
            place: 0x10,
            prel31: 0x8000 - EXIDX as i64
        }
    );
    // An empty index is fine.
    let (r, stats) = rows(&sections(&[], None)).unwrap();
    assert!(r.is_empty());
    assert_eq!(stats, ExidxStats::default());
}

#[test]
fn odd_and_duplicate_starts() {
    let ex = exidx(&[
        (0x8001, W::Raw(0x80a8_b0b0)),
        (0x8011, W::Raw(0x80b0_b0b0)),
        (0x8010, W::Raw(0x80a8_b0b0)),
        (0x8020, W::Raw(1)),
    ]);
    let (r, stats) = rows(&sections(&ex, None)).unwrap();
    assert_eq!(
        r,
        [(0x8000, 0x8010, pop_r4_lr()), (0x8010, 0x8020, pop_r4_lr())]
    );
    assert_eq!(stats.odd_starts, 2);
    assert_eq!(stats.empty, 1);
}

#[test]
fn frame_pointer_base() {
    // vsp = r7; pop {r7, lr}.
    assert_eq!(
        ops(&[0x97, 0x84, 0x08]),
        Ok(Rule {
            pc: RegRule::Offset(-4),
            lr: RegRule::Offset(-4),
            r7: RegRule::Offset(-8),
            ..rule(CfaRule::RegOffset(Reg::R7, 8))
        })
    );
    // vsp = r11; vsp - 4; pop {r11}; pop {pc}: PC popped, LR unchanged.
    assert_eq!(
        ops(&[0x9b, 0x40, 0x80, 0x80, 0x88, 0x00]),
        Ok(Rule {
            pc: RegRule::Offset(-4),
            r11: RegRule::Offset(-8),
            ..rule(CfaRule::RegOffset(Reg::R11, 4))
        })
    );
    // vsp = r12 / r14.
    assert_eq!(ops(&[0x9c]), Ok(rule(CfaRule::RegOffset(Reg::R12, 0))));
    assert_eq!(ops(&[0x9e, 0x00]), Ok(rule(CfaRule::RegOffset(Reg::Lr, 4))));
    // Untracked pops before the switch are forgotten.
    assert_eq!(
        ops(&[0xa2, 0x97, 0xa8]),
        Ok(Rule {
            pc: RegRule::Offset(-4),
            lr: RegRule::Offset(-4),
            ..rule(CfaRule::RegOffset(Reg::R7, 8))
        })
    );
}

#[test]
fn unrepresentable_base_switches() {
    // vsp = r5: untracked.
    assert_eq!(ops(&[0x95]), Err(ExidxDropReason::VspFromUntrackedRegister));
    // pop {lr}, then vsp = r7: LR's slot is relative to SP.
    assert_eq!(
        ops(&[0x84, 0x00, 0x97]),
        Err(ExidxDropReason::BaseSwitchAfterSave)
    );
    // pop {r7}; vsp = r7: r7 is no longer the callee's.
    assert_eq!(
        ops(&[0x80, 0x08, 0x97]),
        Err(ExidxDropReason::BaseSwitchAfterSave)
    );
    // Reserved forms of vsp = r[n].
    assert_eq!(
        translate([Instruction::SetVspFromReg(13)]),
        Err(ExidxDropReason::Reserved)
    );
}

#[test]
fn popping_sp() {
    // pop {r4, sp, lr}: SP and LR are loaded, vsp becomes the loaded SP.
    assert_eq!(
        ops(&[0x86, 0x01]),
        Ok(Rule {
            pc: RegRule::Offset(-4),
            lr: RegRule::Offset(-4),
            sp: RegRule::Offset(-8),
            ..rule(CfaRule::RegOffset(Reg::Sp, 12))
        })
    );
    // Followed by finish: fine. Followed by anything else: dropped.
    assert!(ops(&[0x82, 0x00, 0xb0, 0x01]).is_ok());
    assert_eq!(ops(&[0x82, 0x00, 0x00]), Err(ExidxDropReason::SpPopped));
    assert_eq!(ops(&[0x82, 0x00, 0xa8]), Err(ExidxDropReason::SpPopped));
    assert_eq!(ops(&[0x82, 0x00, 0x97]), Err(ExidxDropReason::SpPopped));
}

#[test]
fn untracked_pops_only_move_vsp() {
    // pop {r0-r3}; VFP d8-d9 (VPUSH); VFP d8 (FSTMFDX); wR10; wCGR0, wCGR2; vsp + 0x204 + 4;
    // vsp - 8; pop {lr}.
    let bytes = [
        0xb1, 0x0f, 0xd1, 0xb8, 0xc0, 0xc7, 0x05, 0xb2, 0x01, 0x41, 0x84, 0x00,
    ];
    let total = 16 + 16 + 12 + 8 + 8 + 0x208 - 8;
    assert_eq!(
        ops(&bytes),
        Ok(Rule {
            pc: RegRule::Offset(-4),
            lr: RegRule::Offset(-4),
            ..rule(CfaRule::RegOffset(Reg::Sp, total + 4))
        })
    );
    // PAC pseudo-register pop moves vsp by 4; the modifier does nothing.
    assert_eq!(
        ops(&[0xb4, 0xb5, 0xa8]),
        Ok(Rule {
            pc: RegRule::Offset(-4),
            lr: RegRule::Offset(-4),
            ..rule(CfaRule::RegOffset(Reg::Sp, 12))
        })
    );
}

#[test]
fn every_tracked_register() {
    // pop {r4-r15} except r13: r7 at 12, r11 at 28, r12 at 32, lr at 36, pc at 40 (of 44).
    let r = ops(&[0x8d, 0xff]).unwrap();
    assert_eq!(r.cfa, CfaRule::RegOffset(Reg::Sp, 44));
    assert_eq!(r.r7, RegRule::Offset(12 - 44));
    assert_eq!(r.r11, RegRule::Offset(28 - 44));
    assert_eq!(r.r12, RegRule::Offset(32 - 44));
    assert_eq!(r.lr, RegRule::Offset(36 - 44));
    assert_eq!(r.pc, RegRule::Offset(40 - 44));
    assert_eq!(r.sp, RegRule::ValOffset(0));
    assert_eq!(r.source, Source::Exidx);
    // Popped twice: the last pop wins.
    let r = ops(&[0x84, 0x00, 0x84, 0x00]).unwrap();
    assert_eq!(r.lr, RegRule::Offset(-4));
    assert_eq!(r.cfa, CfaRule::RegOffset(Reg::Sp, 8));
}

#[test]
fn offsets_out_of_range() {
    // vsp + 0x204 + 4 * 0x1fff_ff7f = vsp + 2^31: beyond i32 (but not u32).
    let big = [0xb2, 0xff, 0xfe, 0xff, 0xff, 0x01];
    assert_eq!(
        decode(&big),
        Ok(vec![Instruction::VspAddLarge(0x8000_0000)])
    );
    assert_eq!(ops(&big), Err(ExidxDropReason::OffsetOutOfRange));
    // Back into range: fine.
    assert_eq!(
        ops(&[&big[..], &[0x7f; 8], &[0xa8]].concat()),
        Ok(Rule {
            pc: RegRule::Offset(-4),
            lr: RegRule::Offset(-4),
            // 2^31 - 8 * 256 + 8
            ..rule(CfaRule::RegOffset(Reg::Sp, 0x7fff_f808))
        })
    );
    let twice = [&big[..], &big[..]].concat();
    assert_eq!(ops(&twice), Err(ExidxDropReason::OffsetOutOfRange));
    // An overflowing ULEB128.
    assert_eq!(
        ops(&[0xb2, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        Err(ExidxDropReason::OffsetOutOfRange)
    );
}

#[test]
fn garbage_never_panics() {
    // Every 8-byte index entry shape over a small, noisy extab.
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..2000 {
        let n = (next() % 6) as usize;
        let mut ex = Vec::new();
        for i in 0..n {
            let start = 0x8000 + 0x10 * i as u64;
            ex.extend_from_slice(&p31(start, EXIDX + 8 * i as u64).to_le_bytes());
            ex.extend_from_slice(&(next() as u32).to_le_bytes());
        }
        let tab: Vec<u8> = (0..(next() % 40)).map(|_| next() as u8).collect();
        let mut s = sections(&ex, Some(&tab));
        s.extab_svma = EXIDX + 0x40 - (next() % 0x80);
        s.text_end = Some(0x9000);
        let (r, stats) = rows(&s).unwrap();
        assert_eq!(stats.entries, n as u64);
        assert_eq!(
            stats.rows + stats.dropped_total() + stats.cant_unwind + stats.empty,
            n as u64
        );
        assert_eq!(r.len() as u64, stats.rows);
        for b in tab.windows(7) {
            let _ = decode(b);
        }
    }
}

#[test]
fn rows_end_where_listed_functions_end() {
    // `_start` (CANTUNWIND, 0x8000..0x8034 by its symbol) is followed by code built without
    // unwind tables up to `f` (0x9000, `pop {r4, lr}`, 0x9000..0x9040), followed by more such
    // code up to the end of the text; `g` (0xa000) is listed but ends past the next entry.
    let ex = exidx(&[
        (0x8000, W::Raw(EXIDX_CANTUNWIND)),
        (0x9000, W::Raw(0x80a8_b0b0)),
        (0xa000, W::Raw(0x80a8_b0b0)),
        (0xa100, W::Raw(EXIDX_CANTUNWIND)),
    ]);
    let functions = [
        (0x8000, 0x8034),
        (0x8100, 0x8200),
        (0x9000, 0x9040),
        (0xa000, 0xa200),
    ];
    let s = ExidxSections {
        text_end: Some(0xb000),
        functions: &functions,
        ..sections(&ex, None)
    };
    let (rows, stats) = rows(&s).unwrap();
    assert_eq!(
        rows,
        [
            (0x8000, 0x8034, Rule::cant_unwind()),
            (0x9000, 0x9040, pop_r4_lr()),
            (0xa000, 0xa100, pop_r4_lr()),
            (0xa100, 0xb000, Rule::cant_unwind()),
        ]
    );
    assert_eq!((stats.clipped, stats.clipped_cant_unwind), (2, 1));
    assert_eq!(
        stats.bytes_without_entry,
        (0x9000 - 0x8034) + (0xa000 - 0x9040)
    );

    // Without symbols, every entry runs to the next one.
    let (rows, stats) = crate::rows(&ExidxSections {
        functions: &[],
        ..s
    })
    .unwrap();
    assert_eq!(rows[0], (0x8000, 0x9000, Rule::cant_unwind()));
    assert_eq!(rows[1], (0x9000, 0xa000, pop_r4_lr()));
    assert_eq!((stats.clipped, stats.bytes_without_entry), (0, 0));
}
