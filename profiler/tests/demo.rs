//! The README's first command, checked: `unwind-profiler record` on the bundled demo workload.
//! The workload prints the CPU share it gives each hot leaf function and each leaf's known
//! parents; the profile must show every leaf under those parents, each share within 5
//! percentage points, the plugin it `dlopen`s while running included, and the program's output
//! unchanged.
//!
//! Needs the release build of the command, the preload library and the workload (scripts/test
//! builds them first): `cargo build --release -p unwind-profiler -p unwind-profiler-preload
//! -p unwind-demo-workload && cargo test --release -p unwind-profiler --test demo`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

/// The release artifacts' directory: this test runs from `target/release/deps/`.
fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

/// Folded lines as (frames root first, weighted count).
fn folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((
                stack.split(';').map(str::to_owned).collect(),
                n.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn demo_profile_has_the_workloads_functions_parents_and_shares() {
    let dir = release_dir();
    let (record, workload) = (dir.join("unwind-profiler"), dir.join("demo-workload"));
    for f in [
        &record,
        &workload,
        &dir.join("libunwind_profiler_preload.so"),
    ] {
        assert!(
            f.is_file(),
            "{} is missing: build it first (see the test's docs)",
            f.display()
        );
    }
    let out = std::env::temp_dir().join(format!("unwind-profiler-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let plain = Command::new(&workload)
        .args(["--seconds", "1"])
        .output()
        .unwrap();
    let run = Command::new(&record)
        .arg("record")
        .arg("--output")
        .arg(&out)
        .arg("--")
        .arg(&workload)
        .args(["--seconds", "3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "record failed: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "the program's output changed under the profiler"
    );
    let lines = folded(&std::fs::read_to_string(out.join("profile.folded")).unwrap());
    let total: u64 = lines.iter().map(|(_, n)| n).sum();
    assert!(total > 300, "too few samples: {total}");
    let mut failures = Vec::new();
    let mut checked = 0;
    for l in stderr.lines() {
        if let Some(rest) = l.strip_prefix("expected share: ") {
            let (function, pct) = rest.rsplit_once(' ').unwrap();
            let want: f64 = pct.trim_end_matches('%').parse().unwrap();
            let got: u64 = lines
                .iter()
                .filter(|(s, _)| s.last().map(String::as_str) == Some(function))
                .map(|(_, n)| n)
                .sum();
            let got = 100.0 * got as f64 / total as f64;
            println!("{function}: {got:.1} % (workload: {want} %)");
            if (got - want).abs() > 5.0 {
                failures.push(format!(
                    "{function}: {got:.1} % of samples, want {want} % ± 5"
                ));
            }
            checked += 1;
        }
        if let Some(rest) = l.strip_prefix("expected parents: ") {
            // Leaf first in the workload's line; folded stacks are root first.
            let chain: Vec<&str> = rest.split(" <- ").collect();
            let mut by_parents: HashMap<Vec<String>, u64> = HashMap::new();
            for (s, n) in lines
                .iter()
                .filter(|(s, _)| s.last().map(String::as_str) == Some(chain[0]))
            {
                let tail: Vec<String> = s.iter().rev().take(chain.len()).cloned().collect();
                *by_parents.entry(tail).or_default() += n;
            }
            let all: u64 = by_parents.values().sum();
            let right = by_parents
                .get(&chain.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .copied()
                .unwrap_or(0);
            println!(
                "{}: {right} of {all} samples under the known parents",
                chain[0]
            );
            if all == 0 || right * 100 < all * 95 {
                failures.push(format!(
                    "{}: {right} of {all} samples under {rest}; seen: {by_parents:?}",
                    chain[0]
                ));
            }
            checked += 1;
        }
    }
    assert_eq!(
        checked, 8,
        "the workload's expectations were not printed: {stderr}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&out);
}
