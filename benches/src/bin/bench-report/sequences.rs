//! The headline figures: sequences of real programs' samples (`target/bench-sequences`,
//! captured by `scripts/bench`), replayed in order by `bench-sequence`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use super::{field, run};

/// The programs, in the order of the table, with the directory `scripts/bench` captured each
/// into and whether it was taken under an emulator (an ARM sequence, named after its row of the
/// targets table: replayed on this host with the files of the row's sysroot).
const PROGRAMS: [(&str, &str, bool); 6] = [
    (
        "cc1",
        "`gcc -O2 -c` of a generated 400-function C file",
        false,
    ),
    (
        "python3",
        "python3 on a JSON, regex and recursion script",
        false,
    ),
    ("rustfmt", "rustfmt on a generated 1.8 MB Rust file", false),
    (
        "demo",
        "the demo workload (`scripts/demo`), 6 threads",
        false,
    ),
    (
        "armv7",
        "the test agent's Rust workload under qemu-arm",
        true,
    ),
    (
        "aarch64",
        "the test agent's Rust workload under qemu-aarch64",
        true,
    ),
];

/// One program's figures.
struct Row {
    name: &'static str,
    what: &'static str,
    arm: bool,
    samples: u64,
    frames: u64,
    threads: u64,
    hit_rate: f64,
    misses_per_sample: f64,
    instr_per_frame: f64,
    /// `None` without misses.
    instr_per_miss: Option<f64>,
    warm_ns: f64,
    evicted_ns: f64,
    differing: u64,
    /// The first pass, from empty caches: hit rate, misses per sample, instructions per frame.
    first: (f64, f64, f64),
    /// Instructions per table lookup in the first pass (`None` without misses): thousands of
    /// lookups where the pass after it may have a handful.
    first_instr_per_miss: Option<f64>,
    /// MiB written over before each evicted walk (`bench-sequence time` says).
    evict_mib: f64,
    framehop: Option<(f64, f64, f64)>,
}

/// Instructions collected under callgrind inside functions matching `pattern`.
pub(crate) fn collected(bin: &Path, pattern: &str, args: &[&str]) -> Result<(u64, String), String> {
    let (stdout, stderr) = run(Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(format!("--toggle-collect={pattern}"))
        .arg(bin)
        .args(args))?;
    let n = stderr
        .lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().replace(',', "").parse().ok())
        .ok_or_else(|| format!("no instruction count from callgrind:\n{stderr}"))?;
    Ok((n, stdout))
}

/// Instructions one pass in order costs inside `pattern`: (N = 1) - (N = 0).
fn one_pass(bin: &Path, pattern: &str, args: &[&str]) -> Result<(u64, String), String> {
    let mut a = args.to_vec();
    let n0 = a.iter().position(|&x| x == "N").ok_or("no N")?;
    a[n0] = "0";
    let (zero, _) = collected(bin, pattern, &a)?;
    a[n0] = "1";
    let (one, out) = collected(bin, pattern, &a)?;
    Ok((one.saturating_sub(zero), out))
}

/// The number after `name ` in the line of `out` that starts with `who:`.
fn of(out: &str, who: &str, name: &str) -> f64 {
    out.lines()
        .find(|l| l.starts_with(who))
        .and_then(|l| {
            let mut w = l.split_whitespace();
            while let Some(x) = w.next() {
                if x == name {
                    return w.next().and_then(|v| v.parse().ok());
                }
            }
            None
        })
        .unwrap_or(f64::NAN)
}

fn measure(
    bin: &Path,
    dir: &Path,
    program: (&'static str, &'static str, bool),
) -> Result<Row, String> {
    let (name, what, arm) = program;
    let path = dir.join(name).join(format!("{name}.sequence"));
    if !path.exists() {
        return Err(format!(
            "{}: missing (scripts/bench captures it)",
            path.display()
        ));
    }
    let p = path.to_string_lossy().into_owned();
    let mut args: Vec<&str> = vec![&p];
    if arm {
        // The sequence is named after its row of the targets table.
        let sysroot = unwind_test_support::target::by_name(name)
            .sysroot
            .ok_or("no sysroot in the targets table")?;
        args.extend(["--sysroot", sysroot]);
    }
    eprintln!("bench-report: sequence {name}");
    let with = |extra: &[&'static str]| -> Vec<&str> {
        let mut a = args.clone();
        a.extend(extra);
        a
    };
    let (counts, _) = run(Command::new(bin).args(with(&["counts"])))?;
    let (walk, passed) = one_pass(
        bin,
        "*OursReplay*::walk_with",
        &with(&["passes", "N", "ours"]),
    )?;
    let (fill, _) = one_pass(
        bin,
        "unwind_core::cache::from_table*",
        &with(&["passes", "N", "ours"]),
    )?;
    let frames = field(&passed, "frames");
    let misses = field(&passed, "misses");
    let (first_walk, first_passed) = one_pass(
        bin,
        "*OursReplay*::walk_with",
        &with(&["passes", "N", "ours-first"]),
    )?;
    let (first_fill, first_filled) = one_pass(
        bin,
        "unwind_core::cache::from_table*",
        &with(&["passes", "N", "ours-first"]),
    )?;
    let first_misses = field(&first_filled, "misses");
    let first = (
        of(&counts, "ours first pass:", "hits"),
        of(&counts, "ours first pass:", "misses")
            / of(&counts, "ours first pass:", "samples").max(1.0),
        first_walk as f64 / field(&first_passed, "frames").max(1) as f64,
    );
    let (time, _) = run(Command::new(bin).args(with(&["time", "5", "8"])))?;
    let framehop = if arm {
        None
    } else {
        let (fh, out) = one_pass(
            bin,
            "*Framehop::unwind_with",
            &with(&["passes", "N", "framehop"]),
        )?;
        Some((
            fh as f64 / field(&out, "frames").max(1) as f64,
            of(&time, "framehop:", "warm"),
            of(&time, "framehop:", "evicted"),
        ))
    };
    Ok(Row {
        name,
        what,
        arm,
        samples: of(&counts, "ours:", "samples") as u64,
        frames: of(&counts, "ours:", "frames") as u64,
        threads: of(&counts, "threads", "threads") as u64,
        hit_rate: of(&counts, "ours:", "hits"),
        misses_per_sample: misses as f64 / of(&counts, "ours:", "samples").max(1.0),
        instr_per_frame: walk as f64 / frames.max(1) as f64,
        instr_per_miss: (misses > 0).then(|| fill as f64 / misses as f64),
        warm_ns: of(&time, "ours:", "warm"),
        evicted_ns: of(&time, "ours:", "evicted"),
        differing: of(&counts, "ours:", "differing") as u64,
        first,
        first_instr_per_miss: (first_misses > 0).then(|| first_fill as f64 / first_misses as f64),
        evict_mib: of(&time, "ours:", "(evicting"),
        framehop,
    })
}

/// The section (markdown) and its lines for the figures block.
pub fn section(bin_dir: &Path, target: &Path) -> Result<(String, Vec<String>), String> {
    let bin = bin_dir.join("bench-sequence");
    let dir = target.join("bench-sequences");
    let rows = PROGRAMS
        .iter()
        .map(|&p| measure(&bin, &dir, p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut md = String::new();
    let mut lines = Vec::new();
    let _ = writeln!(md, "## Real programs' sample sequences (the headline)\n");
    let _ = writeln!(md, "| program | samples | frames/sample | threads | hit rate | misses/sample | instr/frame | instr/miss | ns/frame warm | ns/frame evicted | first pass: hit rate | misses/sample | instr/frame | instr/miss | framehop instr/frame | framehop ns/frame warm | framehop ns/frame evicted |");
    let _ = writeln!(
        md,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &rows {
        let fh = match r.framehop {
            Some((i, w, e)) => format!("{i:.1} | {w:.1} | {e:.0}"),
            None => "- | - | -".into(),
        };
        let _ = writeln!(
            md,
            "| {}{} | {} | {:.1} | {} | {:.2} % | {:.3} | {:.1} | {} | {:.1} | {:.0} | {:.2} % | {:.3} | {:.1} | {} | {fh} |",
            r.name,
            if r.arm { " (host)" } else { "" },
            r.samples,
            r.frames as f64 / r.samples.max(1) as f64,
            r.threads,
            r.hit_rate,
            r.misses_per_sample,
            r.instr_per_frame,
            r.instr_per_miss.map_or("-".into(), |m| format!("{m:.0}")),
            r.warm_ns,
            r.evicted_ns,
            r.first.0,
            r.first.1,
            r.first.2,
            r.first_instr_per_miss.map_or("-".into(), |m| format!("{m:.0}")),
        );
        lines.push(format!(
            "sequence {}: {:.2} % hits, {:.2} misses/sample, {:.1} instructions/frame, {}/miss, {:.1} ns/frame warm, {:.0} evicted; first pass {:.2} % hits, {:.2} misses/sample, {:.1} instructions/frame, {}/miss",
            r.name, r.hit_rate, r.misses_per_sample, r.instr_per_frame,
            r.instr_per_miss.map_or("-".into(), |m| format!("{m:.0}")), r.warm_ns, r.evicted_ns,
            r.first.0, r.first.1, r.first.2,
            r.first_instr_per_miss.map_or("-".into(), |m| format!("{m:.0}"))
        ));
    }
    let _ = writeln!(md);
    for r in &rows {
        let _ = writeln!(md, "- **{}**: {}.", r.name, r.what);
    }
    let differing: u64 = rows.iter().map(|r| r.differing).sum();
    let _ = writeln!(md, "\nMethod: `scripts/bench` runs each program under `unwind-profiler record --capture-samples N` (1 kHz of each thread's CPU time; the armv7 and aarch64 workloads under the test agent with `AGENT_SEQUENCE`), which keeps the registers and a copy of the stack of its first N samples, in the order the handler took them, with the modules of the process ([`unwind_samples::sequence`]). `bench-sequence` rebuilds the rule table from the module files, as the profiler does at start, and replays the samples in order through one rule cache per thread, at most 128 frames a walk (the profiler's default): {differing} of the walks found frames other than the handler's. Every figure but the *first pass* ones is of one pass after one untimed pass over the same samples; *first pass* is the pass from empty caches, in which every address is met for the first time once, as the handler met it. The difference is mostly frame 0: the interrupted instruction's own address, which a later pass finds cached and the handler rarely does (cc1: 18.6 % of the frame-0 addresses of a 6,400-sample run had been sampled before). The profiler's own summary of a run agrees with the first pass (cc1: 94.2-94.5 % hits in the process against 93.0 % first pass and 99.9 % after it; python3: 97.6-98.0 % against 98.5 % and 100 %). *instr/frame*: instructions executed in the walk per frame, misses included (callgrind, `--toggle-collect` on the walk, one pass less none); *instr/miss*: instructions per lookup that went to the table (`unwind_core::cache::from_table`: the module, its page index, its extent and the rule's form ready for the cache, made when the table was built); the pass after the first has few such lookups (none, some runs of python3), so the first pass's, over thousands, is given too. *ns/frame warm*: the median of 5 timed passes; *evicted*: every 8th walk timed alone after writing over {:.0} MiB, 1.5 times the last-level cache (which evicts the unwinder's table, caches and code) and reading the top 4 KiB of the sample's stack, as the interrupted program had just used it: the handler's situation after a signal. framehop 0.16 replays the same samples with its own per-thread cache. The armv7 and aarch64 sequences are replayed on this host (x86_64 instructions and time of the ARM rules; their modules read from `{}` and `{}`).\n", rows.first().map_or(f64::NAN, |r| r.evict_mib), super::arm_sysroot(), unwind_test_support::target::by_name("aarch64").sysroot.unwrap_or("-"));
    Ok((md, lines))
}
