//! 32-bit ARM and Thumb-2 code read for its frame states (`unwind-arm-prologue`), as the
//! loader reads the functions of a module's file, and scanned for return sites; and 64-bit ARM
//! (A64) code read by `unwind_arm_prologue::a64`.

use unwind_arm_prologue::{analyze, calls, Isa};

const START: u64 = 0x1_0000;

/// Input: a selector byte (bit 0: Thumb, else A32; bits 1-3: how many function starts follow,
/// two bytes each, as offsets into the code; bit 4: a data range from the first start to the
/// second; bit 5: A64 code instead, the starts being other functions' entries), then the
/// starts, then the code.
pub fn run(data: &[u8]) {
    let Some((&selector, mut rest)) = data.split_first() else {
        return;
    };
    let isa = if selector & 1 != 0 {
        Isa::Thumb
    } else {
        Isa::Arm
    };
    let mut starts = Vec::new();
    for _ in 0..(selector >> 1) & 7 {
        let Some((o, r)) = rest.split_first_chunk::<2>() else {
            return;
        };
        rest = r;
        starts.push(START + u64::from(u16::from_le_bytes(*o) & !1));
    }
    let code = rest;
    if selector & 32 != 0 {
        return a64(code, &starts);
    }
    let end = START + code.len() as u64;
    starts.retain(|&s| s > START && s < end);
    starts.sort_unstable();
    starts.dedup();
    let data_ranges: Vec<(u64, u64)> = match (selector & 16 != 0, starts.first(), starts.get(1)) {
        (true, Some(&a), Some(&b)) => vec![(a, b)],
        _ => Vec::new(),
    };
    let a = analyze(code, START, isa, &data_ranges, &starts);
    let inside = |s: u64, e: u64| START <= s && s < e && e <= end;
    let mut last = START;
    for &(s, e, _) in &a.rows {
        assert!(last <= s && inside(s, e), "rows");
        last = e;
    }
    for (s, e, _) in a.rules() {
        assert!(inside(s, e), "rules");
    }
    let mut last = START;
    for (s, e, _) in a.confirmed_rules() {
        assert!(last <= s && inside(s, e), "confirmed rules");
        assert!(
            a.guessed.iter().all(|g| e <= g.0 || g.1 <= s),
            "a guess confirmed"
        );
        last = e;
    }
    for &(s, e, _) in &a.epilogues {
        assert!(inside(s, e), "epilogues");
    }
    assert!(a.exits.windows(2).all(|w| w[0].0 < w[1].0), "exits");
    assert!(a.entries.windows(2).all(|w| w[0] < w[1]), "entries");
    assert!(a.instructions <= code.len() as u64);
    let mut sites = Vec::new();
    calls::return_sites(code, START, &|t| (START..end).contains(&t), &mut sites);
    for (site, callee) in sites {
        assert!(site > START && site <= end + 1, "site {site:#x}");
        assert!(callee.is_none_or(|c| (START..end).contains(&(c & !1))));
    }
}

/// A64 code at [`START`], with the entries of other functions at `entries`: rules only where
/// the reading is confirmed, sorted, inside the code, and each with its saved registers between
/// SP and the CFA.
fn a64(code: &[u8], entries: &[u64]) {
    use unwind_core::aarch64::{CfaRule, RegRule};
    let a = unwind_arm_prologue::a64::analyze(code, START, |e| entries.contains(&e));
    assert_eq!(a.states.len(), code.len() / 4, "states");
    let end = START + code.len() as u64;
    let rules = a.rules();
    assert!(
        rules.is_empty() || a.confirmed(),
        "rules of an unconfirmed reading"
    );
    let mut last = START;
    for (s, e, r) in rules {
        assert!(last <= s && s < e && e <= end, "rules");
        last = e;
        assert!(r.from_instructions && !r.signal_frame);
        for saved in [r.ra, r.fp] {
            match (r.cfa, saved) {
                (_, RegRule::Same) => {}
                (CfaRule::SpOffset(cfa), RegRule::Offset(o)) => {
                    assert!(o < 0 && -o <= cfa, "a slot outside the frame: {r:?}");
                }
                (CfaRule::FpOffset(_), RegRule::Offset(o)) => assert!(o < 0, "{r:?}"),
                _ => panic!("a rule the reading does not give: {r:?}"),
            }
        }
    }
}
