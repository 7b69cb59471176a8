//! Every vendored case of libunwindstack's corpus (`cases/`), unwound and compared with the
//! frames libunwindstack gives (see `cases/NOTICE` for where the cases come from).

use std::path::{Path, PathBuf};

use unwind_corpus::{Case, CaseArch, LoadError, Verdict};

/// The cases' directories: each case, and each `pc_N` of a case made of several.
fn cases() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !path.is_dir() || CaseArch::of_name(&name).is_none() {
            continue;
        }
        if path.join("maps.txt").exists() {
            out.push((name, path));
        } else {
            for sub in std::fs::read_dir(&path).unwrap() {
                let sub = sub.unwrap().path();
                let s = sub.file_name().unwrap().to_string_lossy().into_owned();
                out.push((format!("{name}/{s}"), sub));
            }
        }
    }
    out.sort();
    out
}

/// Loads a case with the set-up libunwindstack's test (`UnwindOfflineTest.cpp`) gives it by
/// hand.
fn load(name: &str, dir: &Path) -> Result<Case, LoadError> {
    let case = Case::load(dir, name.split('/').next().unwrap())?;
    Ok(match name {
        // The APK cannot be read, its mapped image can.
        "apk_rorx_unreadable_arm64" => case
            .with_file_as_memory("fake.apk", 0x74_26d2_d000)?
            .with_file_as_memory("fake.apk", 0x74_26d2_e000)?,
        "apk_rx_unreadable_arm64" => case.with_file_as_memory("fake.apk", 0x7c_b0e6_2000)?,
        "pauth_pc_arm64" => case.with_pointer_mask(0x007f_ff80_0000_0000),
        "jit_map_arm" => case
            .with_jit_image(0xd025_c788, 0xd025_c9f0, "jit_map0.so")
            .with_jit_image(0xd025_cd98, 0xd025_cff4, "jit_map1.so"),
        _ => case,
    })
}

/// The cases that do not match yet, each with why. The list only shrinks: a listed case that
/// matches fails the test until it is taken off.
const NOT_YET: &[(&str, &str)] = &[
    (
        "apk_rorx_unreadable_arm64",
        "the library's ELF image is only in memory, its section headers not mapped: its \
         .eh_frame is not found through PT_GNU_EH_FRAME offline",
    ),
    (
        "shared_lib_in_apk_memory_only_arm64",
        "the library's ELF image is only in memory (lib_mem.data), its section headers not \
         mapped: its .eh_frame is not found through PT_GNU_EH_FRAME offline",
    ),
    (
        "art_quick_osr_stub_arm",
        "JIT code that ART describes through the GDB JIT interface (__jit_debug_descriptor) \
         is not read",
    ),
    (
        "jit_debug_arm",
        "JIT code that ART describes through the GDB JIT interface (__jit_debug_descriptor) \
         is not read",
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

#[test]
fn corpus() {
    let mut report = Vec::new();
    let (mut same, mut wrong, mut total) = (0, 0, 0);
    for (name, dir) in cases() {
        total += 1;
        let case = load(&name, &dir).unwrap_or_else(|e| panic!("{e}"));
        let walk = case.walk().unwrap_or_else(|e| panic!("{e}"));
        let c = case.compare(&walk);
        let line = format!(
            "{name}: {:?}, {} of {} frames (ours {}, {:?})",
            c.verdict,
            c.matched,
            case.expected.len(),
            walk.frames.len(),
            walk.stop
        );
        println!("{line}");
        if c.verdict != Verdict::Same {
            print!("{}", case.describe(&walk));
        }
        let listed = NOT_YET.iter().find(|(n, _)| *n == name);
        match (&c.verdict, listed) {
            (Verdict::Same, None) => same += 1,
            (Verdict::Same, Some(_)) => {
                report.push(format!("{line}: matches now; take it off NOT_YET"))
            }
            (Verdict::Wrong { .. }, _) => {
                wrong += 1;
                report.push(format!("{line}: a wrong frame"));
            }
            (_, Some(_)) => {}
            (_, None) => report.push(format!("{line}: not listed in NOT_YET")),
        }
    }
    println!("libunwindstack corpus: {same} of {total} cases frame for frame, {wrong} wrong");
    assert!(report.is_empty(), "{}", report.join("\n"));
}
