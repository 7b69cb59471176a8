//! The demo workload as the README runs it: its output, exit status and expectations.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_demo-workload"))
        .args(args)
        .output()
        .expect("cannot run demo-workload")
}

fn checked(args: &[&str]) -> (String, String) {
    let out = run(args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{args:?}: {}\n{stderr}", out.status);
    (stdout, stderr)
}

#[test]
fn checksum_is_independent_of_threads_length_and_churn() {
    let (a, stderr) = checked(&["--seconds", "0.3", "--threads", "2", "--verbose"]);
    let (b, _) = checked(&["--seconds", "0.5", "--threads", "1", "--churn"]);
    assert_eq!(a.lines().count(), 1, "{a}");
    assert!(a.starts_with("checksum: "), "{a}");
    assert_eq!(a, b);
    assert!(
        stderr.contains("dlopen") && stderr.contains("loaded before: no"),
        "{stderr}"
    );
}

#[test]
fn expectations_are_printed() {
    let (_, stderr) = checked(&["--seconds", "0.1", "--threads", "1"]);
    let shares: Vec<(&str, u32)> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("expected share: "))
        .map(|l| {
            let (function, percent) = l.rsplit_once(' ').unwrap();
            (function, percent.trim_end_matches('%').parse().unwrap())
        })
        .collect();
    assert_eq!(
        shares,
        [
            ("plugin_mandelbrot", 40),
            ("unwind_demo_workload::sort::sort_leaf", 30),
            ("c_checksum", 20),
            ("unwind_demo_workload::deep::recursion_leaf", 10)
        ]
    );
    let parents: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("expected parents: "))
        .collect();
    assert_eq!(parents.len(), 4, "{stderr}");
    for (line, (leaf, _)) in parents.iter().zip(&shares) {
        let chain: Vec<&str> = line.split(" <- ").collect();
        assert_eq!(chain.len(), 3, "{line}");
        assert_eq!(chain[0], *leaf);
    }
}

#[test]
fn a_missing_plugin_or_a_bad_flag_fails() {
    let out = run(&[
        "--seconds",
        "0.1",
        "--plugin",
        "/nonexistent/libdemo_plugin.so",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("dlopen"));
    assert_eq!(run(&["--threads", "many"]).status.code(), Some(2));
}
