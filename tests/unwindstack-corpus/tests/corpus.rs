//! Every vendored case of libunwindstack's corpus (`cases/`), unwound and compared with the
//! frames libunwindstack gives (see `cases/NOTICE` for where the cases come from).

use unwind_corpus::{corpus_dir, run_all, summary_line, Verdict};

/// The cases that do not match yet, each with why. The list only shrinks: a listed case that
/// matches fails the test until it is taken off.
const NOT_YET: &[(&str, &str)] = &[
    (
        "art_quick_osr_stub_arm",
        "not by design: every frame of ours is theirs, in order, but ART's two interpreted \
         methods are not given. Their DEX pc is ExecuteMterpImpl's r4 (its CFI says so with a \
         `DW_OP_const4u 'DEX1'` val_expression, which libunwindstack shows as a frame of its \
         own), a callee-saved register the fixed-register rule table does not track through \
         the frames below it (on arm64, x22)",
    ),
    (
        "load_bias_ro_rx_x86_64",
        "not ours: perfetto_unittests is missing from the mirror the corpus was taken from \
         (cases/MISSING)",
    ),
    (
        "shared_lib_in_apk_single_map_arm64",
        "not ours: test.apk is missing from the mirror the corpus was taken from \
         (cases/MISSING)",
    ),
];

/// 0 wrong frames; every case not in [`NOT_YET`] frame for frame.
#[test]
fn corpus() {
    let outcomes = run_all(&corpus_dir()).unwrap_or_else(|e| panic!("{e}"));
    let mut report = Vec::new();
    for o in &outcomes {
        let c = &o.comparison;
        let line = format!(
            "{}: {:?}, {} of {} frames (ours {}, {:?})",
            o.name,
            c.verdict,
            c.matched,
            o.case.expected.len(),
            o.walk.frames.len(),
            o.walk.stop
        );
        println!("{line}");
        if c.verdict != Verdict::Same {
            print!("{}", o.case.describe(&o.walk));
        }
        let listed = NOT_YET.iter().any(|(n, _)| *n == o.name);
        match (&c.verdict, listed) {
            (Verdict::Same, false) => {}
            (Verdict::Same, true) => {
                report.push(format!("{line}: matches now; take it off NOT_YET"))
            }
            (Verdict::Wrong { .. }, _) => report.push(format!("{line}: a wrong frame")),
            (_, true) => {}
            (_, false) => report.push(format!("{line}: not listed in NOT_YET")),
        }
    }
    println!("{}", summary_line(&outcomes));
    assert!(outcomes.len() >= 31, "{} cases", outcomes.len());
    assert!(report.is_empty(), "{}", report.join("\n"));
}
