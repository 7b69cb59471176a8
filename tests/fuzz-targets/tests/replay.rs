//! Replays the fuzz corpus and every input that once crashed a target (`fuzz/corpus/TARGET/`,
//! `fuzz/regressions/TARGET/`) through the targets' bodies, on stable: what the fuzzer found
//! stays fixed, without libFuzzer. Each target's corpus must exist (it is checked in).

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        files.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
    }
    files.sort();
    files
}

fn replay(target: &str) {
    let (_, run) = unwind_fuzz_targets::TARGETS
        .iter()
        .find(|t| t.0 == target)
        .expect("a target");
    let files = inputs(target);
    assert!(
        !files.is_empty(),
        "no corpus for {target} in fuzz/corpus/{target}"
    );
    for f in &files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        run(&data);
    }
    println!("{target}: {} inputs replayed", files.len());
}

macro_rules! targets {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            replay(stringify!($name));
        }
    )*};
}

targets!(arm_code, cfi, elf, exidx, expr, gdb_jit, stack_cfi, unwind);

#[test]
fn every_target_is_replayed() {
    let names: Vec<&str> = unwind_fuzz_targets::TARGETS.iter().map(|t| t.0).collect();
    assert_eq!(
        names,
        [
            "arm_code",
            "cfi",
            "elf",
            "exidx",
            "expr",
            "gdb_jit",
            "stack_cfi",
            "unwind"
        ]
    );
}
