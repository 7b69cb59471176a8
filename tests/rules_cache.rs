//! The rule cache of a run ([`unwind_in_process::set_rules_cache`]): the first process writes
//! the rules of every module with a build id; a second process reads them back (its report says
//! so) and gets the same tables; a damaged file is not read, and its module is parsed again.
//! Each `init` runs in a child process of this test (the table is process-wide).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Set in the child: the cache directory.
const CHILD: &str = "UNWIND_RULES_CACHE_TEST_DIR";

/// One line per module of the child's table: name, rows, distinct rules, whether from the cache.
fn child_run() {
    let dir = PathBuf::from(std::env::var_os(CHILD).unwrap());
    unwind_in_process::set_rules_cache(Some(dir));
    let report = unwind_in_process::init().expect("init");
    for m in &report.modules {
        let cached = m.file_note.as_deref().is_some_and(|n| n.contains("cache"));
        println!("{}\t{}\t{}\t{cached}", m.name, m.rows, m.distinct_rules);
    }
}

/// Runs this test in a child with the cache in `dir`: (name, rows, rules, from the cache).
fn run_child(dir: &Path) -> Vec<(String, u64, usize, bool)> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_second_process_reads_the_rules_the_first_wrote",
            "--nocapture",
        ])
        .env(CHILD, dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f.len() == 4).then(|| {
                (
                    f[0].to_owned(),
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                    f[3] == "true",
                )
            })
        })
        .collect()
}

#[test]
fn a_second_process_reads_the_rules_the_first_wrote() {
    if std::env::var_os(CHILD).is_some() {
        child_run();
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rules-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let files = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    };

    let first = run_child(&dir);
    assert!(first.len() >= 3, "{first:?}");
    assert!(first.iter().all(|m| !m.3), "nothing cached yet: {first:?}");
    let written = files();
    println!(
        "first process: {} modules, {} files",
        first.len(),
        written.len()
    );
    // This test's binary, libc and the loader have build ids (the vdso too, on most kernels).
    assert!(written.len() >= 3, "{written:?}");
    assert!(
        written
            .iter()
            .all(|f| f.extension().is_some_and(|e| e == "rules")),
        "only whole files: {written:?}"
    );

    let second = run_child(&dir);
    let from_cache = second.iter().filter(|m| m.3).count();
    println!(
        "second process: {from_cache} of {} modules from the cache",
        second.len()
    );
    assert_eq!(from_cache, written.len(), "{second:?}");
    // The same tables: every module's rows and rules.
    let strip = |v: &[(String, u64, usize, bool)]| -> Vec<(String, u64, usize)> {
        v.iter().map(|m| (m.0.clone(), m.1, m.2)).collect()
    };
    assert_eq!(strip(&first), strip(&second));

    // A damaged file (a byte changed in the middle) is refused: its module is parsed again.
    let victim = &written[0];
    let mut bytes = std::fs::read(victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(victim, &bytes).unwrap();
    let third = run_child(&dir);
    assert_eq!(strip(&first), strip(&third));
    assert_eq!(
        third.iter().filter(|m| m.3).count(),
        written.len() - 1,
        "the damaged file is not read: {third:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
