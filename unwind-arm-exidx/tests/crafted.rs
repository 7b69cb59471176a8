//! Arbitrary `.ARM.exidx` / `.ARM.extab` contents and addresses (`u64::MAX` included): never a
//! panic, and the result accounts for every entry.
//!
//! - `Err` exactly when the index as a whole is unusable, checked against an independent
//!   computation (length, alignment, each start in exact arithmetic, sortedness), and its
//!   `Display` names `.ARM.exidx` and the entry.
//! - `Ok`: one entry per 8 bytes, with the starts computed independently; rows sorted and
//!   non-empty; every entry is a row, a drop (with a reason, the first of each named), an empty
//!   range, or the final `CANTUNWIND` sentinel.

use proptest::prelude::*;
use unwind_arm_exidx::{entries, prel31, rows, ExidxDropReason, ExidxError, ExidxSections};

/// An address: small, near a 32-bit or 64-bit boundary, near `i64::MAX`, or anything.
fn arb_address() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..0x1_0000,
        (0u64..0x100).prop_map(|d| 0xffff_ffffu64.wrapping_sub(d)),
        (0u64..0x100).prop_map(|d| u64::MAX - d),
        (0u64..0x100).prop_map(|d| (i64::MAX as u64).wrapping_sub(d)),
        any::<u64>(),
    ]
}

/// A word: random, or a prel31 offset from a small range (so that starts often land in the
/// 32-bit address space and the index is often sorted), or a compact-model word.
fn arb_word() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        (0u32..0x100).prop_map(|w| w * 4),
        (0u32..0x100).prop_map(|w| 0x7fff_ffff - w * 4),
        Just(1),
        Just(0x80b0_b0b0),
        (0u32..0x100_0000).prop_map(|w| 0x8000_0000 | w),
    ]
}

/// The prel31 word at `place` that points at `target`.
fn p31(target: u64, place: u64) -> u32 {
    (target.wrapping_sub(place) as u32) & 0x7fff_ffff
}

/// What the entries of `exidx` at `svma` must give, computed without the crate: the error,
/// or every start.
fn expected(exidx: &[u8], svma: u64) -> Result<Vec<u64>, ExidxError> {
    if !exidx.len().is_multiple_of(8) {
        return Err(ExidxError::BadLength { len: exidx.len() });
    }
    if !svma.is_multiple_of(4) {
        return Err(ExidxError::Misaligned { svma });
    }
    let mut starts = Vec::new();
    let mut previous: Option<u64> = None;
    for (index, c) in exidx.chunks(8).enumerate() {
        let w0 = u32::from_le_bytes(c[..4].try_into().unwrap());
        let place = i128::from(svma) + 8 * index as i128;
        let start = place + i128::from(prel31(w0));
        if !(0..=i128::from(u32::MAX)).contains(&start) {
            return Err(ExidxError::AddressOutOfRange {
                index,
                place: svma.wrapping_add(8 * index as u64),
                prel31: prel31(w0),
            });
        }
        let start = start as u64;
        if let Some(p) = previous.filter(|&p| start & !1 < p) {
            return Err(ExidxError::NotSorted {
                index,
                start,
                previous: p,
            });
        }
        previous = Some(start & !1);
        starts.push(start);
    }
    Ok(starts)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2048,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_sections(
        words in proptest::collection::vec(arb_word(), 0..24),
        odd_tail in 0usize..8,
        extab in proptest::option::of(proptest::collection::vec(arb_word(), 0..16)),
        exidx_svma in arb_address(),
        extab_svma in arb_address(),
        text_end in proptest::option::of(arb_address()),
        plausible in proptest::option::of((
            0u64..0x4000,
            proptest::collection::vec((0u32..0x40, 0u32..4, 0u32..16), 0..12),
            proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
        )),
    ) {
        let mut exidx: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let (mut exidx_svma, mut extab_svma) = (exidx_svma, extab_svma);
        // Half the cases: an index a linker could have written (sorted starts in the 32-bit
        // address space; inline, CANTUNWIND or `.ARM.extab` entries), with a few bytes changed.
        if let Some((base, entries, flips)) = &plausible {
            exidx_svma = 0x10_0000 + base * 4;
            extab_svma = exidx_svma + 0x1000;
            exidx.clear();
            let mut start = 0x8000u64;
            for (i, &(gap, kind, slot)) in entries.iter().enumerate() {
                let place = exidx_svma + 8 * i as u64;
                start += u64::from(gap) * 2;
                let w1 = match kind {
                    0 => 1,
                    1 => 0x80b0_b0b0,
                    _ => p31(extab_svma + 4 * u64::from(slot), place + 4),
                };
                exidx.extend(p31(start, place).to_le_bytes());
                exidx.extend(w1.to_le_bytes());
            }
            for &(i, b) in flips {
                if !exidx.is_empty() {
                    let n = exidx.len();
                    exidx[i % n] = b;
                }
            }
        }
        // Mostly whole entries; sometimes a ragged end.
        if odd_tail == 7 {
            exidx.push(0);
        } else {
            exidx.truncate(exidx.len() / 8 * 8);
        }
        let extab: Option<Vec<u8>> =
            extab.map(|w| w.iter().flat_map(|w| w.to_le_bytes()).collect());
        let s = ExidxSections {
            exidx: &exidx,
            exidx_svma,
            extab: extab.as_deref(),
            extab_svma,
            text_end,
            functions: &[],
        };
        let want = expected(&exidx, exidx_svma);
        match (rows(&s), want) {
            (Err(e), Err(w)) => {
                prop_assert_eq!(e, w);
                let msg = e.to_string();
                prop_assert!(msg.contains(".ARM.exidx"), "{}", msg);
                if let Some(i) = e.index() {
                    prop_assert!(msg.contains(&format!("entry {i} ")), "{}", msg);
                    let offset = format!("offset {:#x}", 8 * i);
                    prop_assert!(msg.contains(&offset), "{}", msg);
                    prop_assert_eq!(e.offset(), Some(8 * i as u64));
                }
            }
            (Ok((out, stats)), Ok(starts)) => {
                let es = entries(&s).unwrap();
                prop_assert_eq!(es.len(), exidx.len() / 8);
                let got: Vec<u64> = es.iter().map(|e| e.start).collect();
                prop_assert_eq!(&got, &starts);
                prop_assert_eq!(stats.entries, starts.len() as u64);
                for w in out.windows(2) {
                    prop_assert!(w[0].1 <= w[1].0, "{:x?}", w);
                }
                for r in &out {
                    prop_assert!(r.0 < r.1 && r.0 % 2 == 0, "{:x?}", r);
                }
                // Every entry: a row (rule or CANTUNWIND), a drop, an empty range, or the final
                // CANTUNWIND sentinel (which gives nothing when the end of the code is unknown).
                let accounted = out.len() as u64 + stats.dropped_total() + stats.empty;
                let sentinel = stats.entries - accounted;
                prop_assert!(sentinel <= 1, "{stats:?}, {} rows", out.len());
                if sentinel == 1 {
                    let last = es.last().unwrap();
                    prop_assert_eq!(last.model, unwind_arm_exidx::Model::CantUnwind);
                }
                // The first entry dropped for each reason is named, once.
                for reason in ExidxDropReason::ALL {
                    let named: Vec<_> =
                        stats.first_dropped.iter().filter(|d| d.reason == reason).collect();
                    prop_assert_eq!(named.len(), usize::from(stats.dropped_for(reason) > 0));
                    for d in named {
                        prop_assert!(d.index < es.len());
                        prop_assert_eq!(d.start, es[d.index].start & !1);
                        let msg = d.to_string();
                        prop_assert!(msg.contains(".ARM.exidx") && msg.contains(reason.name()));
                    }
                }
            }
            (got, want) => prop_assert!(false, "got {:?}, want {:?}", got.map(|r| r.0.len()), want),
        }
    }
}
