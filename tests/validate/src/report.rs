//! `VALIDATION.md`: the agreement lines, per-program counts, every difference by class, the
//! genuine disagreements, and the table-level comparison of our STACK CFI with dump_syms's.

use std::fmt::Write as _;

use crate::cfi_compare::TableComparison;
use crate::compare::Class;
use crate::run::ArchResult;
use crate::stores::Symbols;

/// The headline line for an architecture: `x86_64 agreement: <p> % of <n> frames`.
pub fn agreement_line(r: &ArchResult) -> String {
    let t = r.total(Symbols::Combined);
    format!(
        "{} agreement: {:.2} % of {} frames",
        r.arch.name(),
        t.agreement(),
        t.cfi_frames
    )
}

/// The whole-stack lines for an architecture (headline symbol files): `x86_64 stacks
/// identical: <p> % of <n> stacks`, how many stop earlier than Breakpad's walk, and
/// `x86_64 frames only ours: <k>` with its breakdown by the class of each stack's first
/// difference.
pub fn whole_stack_lines(r: &ArchResult) -> String {
    let t = r.total(Symbols::Combined);
    let arch = r.arch.name();
    let only: usize = t.only_ours.values().sum();
    let breakdown: Vec<String> = t
        .only_ours
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| format!("{n} {}", c.describe()))
        .collect();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{arch} stacks identical: {} of {} stacks  ",
        pct(t.whole_identical, t.samples),
        t.samples
    );
    let _ = writeln!(
        o,
        "{arch} stacks where ours stops earlier (every frame we found matched): {} of {} stacks  ",
        t.ours_shorter, t.samples
    );
    let _ = writeln!(
        o,
        "{arch} frames only ours: {only}{}  ",
        if breakdown.is_empty() {
            String::new()
        } else {
            format!(" ({})", breakdown.join(", "))
        }
    );
    let _ = writeln!(
        o,
        "{arch} stacks where the walks differ: {}, of them {} checked against the program's known call graph: Breakpad's walk wrong in {}, ours wrong in {}  ",
        t.differing,
        t.arbitrated,
        t.theirs_wrong,
        t.ours_wrong.len()
    );
    for w in &t.ours_wrong {
        let _ = writeln!(o, "- {arch} ours wrong: {w}");
    }
    o
}

fn pct(a: usize, b: usize) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.2} %", 100.0 * a as f64 / b as f64)
    }
}

/// Renders the whole report. `command` is how it was produced.
pub fn render(archs: &[ArchResult], tables: &[TableComparison], command: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# Validation against Breakpad\n");
    let dump_syms = std::process::Command::new(crate::tools::dump_syms())
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "Produced by `{command}` with {dump_syms}, minidump-processor 0.27 and breakpad-symbols 0.27.\n"
    );
    for r in archs {
        let _ = writeln!(o, "{}  ", agreement_line(r));
    }
    // A peer's recorded unwinds (`tests/unwindstack-corpus`), judged by its own frames.
    let _ = match unwind_corpus::run_all(&unwind_corpus::corpus_dir()) {
        Ok(outcomes) => writeln!(o, "{}  ", unwind_corpus::summary_line(&outcomes)),
        Err(e) => writeln!(o, "libunwindstack corpus: not read ({e})  "),
    };
    let _ = writeln!(o);
    for r in archs {
        let t = r.total(Symbols::Ours);
        let _ = writeln!(
            o,
            "{} agreement with our exported STACK CFI: {:.2} % of {} frames  ",
            r.arch.name(),
            t.agreement(),
            t.cfi_frames
        );
    }
    let _ = writeln!(o);
    for r in archs {
        let _ = write!(o, "{}", whole_stack_lines(r));
    }
    for r in archs {
        let t = r.total(Symbols::Combined);
        let differing: Vec<String> = t
            .cfi_classes
            .iter()
            .filter(|(c, n)| **c != Class::Identical && **n > 0)
            .map(|(c, n)| format!("{n} {}", c.describe()))
            .collect();
        if !differing.is_empty() {
            let _ = writeln!(
                o,
                "\n{}: the measured frames that differ: {}.",
                r.arch.name(),
                differing.join(", ")
            );
        }
    }
    let _ = writeln!(
        o,
        "\nAgreement: of the frames past frame 0 that rust-minidump's Breakpad-compatible walker \
         (`minidump_processor::process_minidump`, the library behind `minidump-stackwalk`) found \
         with CFI, by CFI alone from the registers (a CFI frame found after a scanned one starts \
         from a guess and is counted apart), the share whose address equals the frame our \
         unwinder found in the signal handler, at the same depth. Its symbol files: {}. Each sample is a minidump the test \
         agent wrote from inside the sampled process (registers, a 64 KiB stack copy, the module \
         list with build ids) together with the frames it unwound there.\n",
        Symbols::Combined.describe()
    );
    let _ = writeln!(
        o,
        "Whole stacks: a stack is identical when both walks have the same frames, no more and no \
         fewer; our frames that Breakpad's walk does not have at the same depth are counted by the \
         class of the stack's first difference. Where the walks differ, the program's known call \
         graph (`unwind_test_support::call_graph`: the C, C++ and Rust workloads') says which walk \
         has a step that is not a call the program makes.\n"
    );
    let _ = writeln!(
        o,
        "libunwindstack corpus: Android libunwindstack's recorded unwinds of real processes (its \
         offline tests, the AOSP-built arm, arm64 and x86_64 cases vendored in \
         `tests/unwindstack-corpus`), each walked by our offline unwinder from the recorded \
         registers and stack over rules read from the recorded files, and compared frame for \
         frame with the frames libunwindstack gives (`output.txt`); a case is wrong if a frame \
         differs where both walks have one. The cases that do not match yet are listed with why \
         in `tests/unwindstack-corpus/tests/corpus.rs`.\n"
    );
    let _ = writeln!(o, "## Programs and samples\n");
    let _ = writeln!(
        o,
        "| arch | program | samples | our frames | Breakpad frames | Breakpad CFI frames | identical | agreement | CFI frames after a scan | stacks with all our frames matched | whole stacks identical | ours stops earlier | frames only ours | identical `-m` traces | offline walk = handler |"
    );
    let _ = writeln!(
        o,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in archs {
        for p in &r.programs {
            let t = p
                .tallies
                .get(&Symbols::Combined)
                .cloned()
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.arch.name(),
                p.run.name,
                t.samples,
                t.our_frames,
                t.breakpad_frames,
                t.cfi_frames,
                t.cfi_identical,
                pct(t.cfi_identical, t.cfi_frames),
                t.cfi_after_scan,
                t.identical_stacks,
                t.whole_identical,
                t.ours_shorter,
                t.only_ours.values().sum::<usize>(),
                t.identical_traces,
                t.offline_same
            );
        }
    }
    let _ = writeln!(o, "\n## By choice of symbol files\n");
    let _ = writeln!(
        o,
        "| arch | symbol files | Breakpad CFI frames | identical | agreement | stacks with all our frames matched | genuine |"
    );
    let _ = writeln!(o, "|---|---|---:|---:|---:|---:|---:|");
    for r in archs {
        for c in Symbols::ALL {
            let t = r.total(c);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.arch.name(),
                c.describe(),
                t.cfi_frames,
                t.cfi_identical,
                pct(t.cfi_identical, t.cfi_frames),
                t.identical_stacks,
                t.genuine.len()
            );
        }
    }
    let _ = writeln!(o, "\n## Every difference, by class\n");
    let _ = writeln!(
        o,
        "Frames past frame 0 of either walk, with the headline symbol files. The first \
         difference in a stack is classified; the frames after it follow it.\n"
    );
    let _ = writeln!(
        o,
        "| arch | class | frames | of them measured Breakpad CFI frames |"
    );
    let _ = writeln!(o, "|---|---|---:|---:|");
    for r in archs {
        let t = r.total(Symbols::Combined);
        for c in Class::ALL {
            let all = t.classes.get(&c).copied().unwrap_or(0);
            let cfi = t.cfi_classes.get(&c).copied().unwrap_or(0);
            if all > 0 || c == Class::Genuine {
                let _ = writeln!(
                    o,
                    "| {} | {} | {all} | {cfi} |",
                    r.arch.name(),
                    c.describe()
                );
            }
        }
    }
    let _ = writeln!(o, "\nExamples of each class's first differences (frame index; addresses; the callee, whose rule gave the caller):\n");
    for r in archs {
        let t = r.total(Symbols::Combined);
        for (c, list) in &t.examples {
            for d in list {
                let _ = writeln!(o, "- {} {}: {d}", r.arch.name(), c.describe());
            }
        }
    }
    let _ = writeln!(o, "\n## Genuine disagreements\n");
    let mut any = false;
    for r in archs {
        for c in Symbols::ALL {
            let t = r.total(c);
            for d in &t.genuine {
                any = true;
                let _ = writeln!(o, "- {} ({}): {d}", r.arch.name(), c.describe());
            }
            for e in &t.errors {
                any = true;
                let _ = writeln!(o, "- {} ({}): not walked: {e}", r.arch.name(), c.describe());
            }
        }
    }
    if !any {
        let _ = writeln!(o, "None, with any of the three choices of symbol files.");
    }
    let _ = writeln!(o, "\n## STACK CFI tables against dump_syms's\n");
    let _ = writeln!(o, "{}", TableComparison::markdown_header());
    for t in tables {
        let _ = writeln!(o, "{}", t.markdown_row());
    }
    let genuine: Vec<String> = tables
        .iter()
        .flat_map(|t| {
            t.genuine()
                .iter()
                .map(move |d| format!("- {}: {d}", t.module))
        })
        .collect();
    if genuine.is_empty() {
        let _ = writeln!(o, "\nNo genuine disagreement between the tables.");
    } else {
        let _ = writeln!(o, "\nGenuine disagreements between the tables:\n");
        for g in genuine {
            let _ = writeln!(o, "{g}");
        }
    }
    let _ = writeln!(o, "\n## Modules and symbol files\n");
    let root = format!("{}/", crate::tools::workspace_root().display());
    let _ = writeln!(
        o,
        "| arch | module | debug id | ours | dump_syms | dump_syms STACK CFI | notes |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    for r in archs {
        for m in r.stores.modules.values() {
            let yes = |b: bool| if b { "yes" } else { "no" };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.arch.name(),
                m.module.code_file.trim_start_matches(&root),
                m.module.debug_id,
                yes(m.ours.is_some()),
                yes(m.dump_syms.is_some()),
                yes(m.dump_syms_has_cfi),
                m.notes.join("; ")
            );
        }
    }
    o
}

/// Whether `r` meets the target: no genuine disagreement and no sample left unwalked
/// with any choice of symbol files (every difference explained), and at least 99.9 % of the
/// walker's CFI frames identical to ours with our exported files. With dump_syms's files the
/// share can be lower where dump_syms cannot express a rule (PLT stubs): those frames are
/// explained, and reported.
pub fn meets_target(r: &ArchResult) -> bool {
    Symbols::ALL.iter().all(|&c| {
        let t = r.total(c);
        t.genuine.is_empty() && t.errors.is_empty()
    }) && r.total(Symbols::Ours).agreement() >= 99.9
}
