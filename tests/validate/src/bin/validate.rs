//! `validate`: samples real programs on x86_64 (natively), armv7 and aarch64 (under qemu), walks
//! every sample with our unwinder and with rust-minidump's Breakpad-compatible walker, compares
//! our exported STACK CFI with dump_syms's, and writes `VALIDATION.md`.
//!
//! Usage: `validate [--out FILE] [--samples N] [--no-arm]` (N minidumps per program, default
//! 400; FILE defaults to VALIDATION.md at the workspace root; `--no-arm` leaves out armv7 and
//! aarch64).
//!
//! `validate --minidumps DIR` instead compares the minidumps in DIR (written by the profiler
//! example's `--minidumps` or the test agent, x86_64 or armv7) and prints the summary, writing
//! nothing.
//!
//! With `VALIDATE_VERBOSE` set, every sample whose walks differ is printed to stderr with both
//! frame lists and Breakpad's trust per frame.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use unwind_dwarf::Architecture;
use unwind_validate::programs::{self, target_of, Sampling};
use unwind_validate::{cfi_compare, report, run, tools};

fn main() -> ExitCode {
    let mut out = tools::workspace_root().join("VALIDATION.md");
    let mut sampling = Sampling::default();
    let mut arm = true;
    let mut dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = args.next().map(PathBuf::from).unwrap_or(out),
            "--samples" => {
                sampling.per_program = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(sampling.per_program)
            }
            "--no-arm" => arm = false,
            "--minidumps" => dir = args.next().map(PathBuf::from),
            _ => {
                eprintln!(
                    "usage: validate [--out FILE] [--samples N] [--no-arm] | --minidumps DIR"
                );
                return ExitCode::from(2);
            }
        }
    }
    let dump_syms = tools::dump_syms();
    if let Some(dir) = dir {
        return minidumps_only(dir, &dump_syms);
    }
    let mut archs = vec![Architecture::X86_64];
    for cross in [Architecture::Arm, Architecture::Aarch64] {
        if arm && programs::available(cross, "the validation") {
            archs.push(cross);
        } else {
            eprintln!("validate: {} skipped", cross.name());
        }
    }
    let mut results = Vec::new();
    let mut ok = true;
    for arch in &archs {
        eprintln!("validate: sampling and walking {}", arch.name());
        match run::validate_arch(*arch, &sampling, &dump_syms) {
            Ok(r) => {
                println!("{}", report::agreement_line(&r));
                ok &= report::meets_target(&r);
                results.push(r);
            }
            Err(e) => {
                eprintln!("validate: {}: {e}", arch.name());
                ok = false;
            }
        }
    }
    let mut tables = Vec::new();
    for elf in table_files(&archs) {
        match cfi_compare::compare_elf(&elf, &dump_syms) {
            Ok(t) => {
                println!("{t}");
                ok &= t.genuine().is_empty();
                tables.push(t);
            }
            Err(e) => {
                eprintln!("validate: {}: {e}", elf.display());
                ok = false;
            }
        }
    }
    let text = report::render(&results, &tables, "scripts/validate");
    if let Err(e) = std::fs::write(&out, text) {
        eprintln!("validate: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    eprintln!("validate: wrote {}", out.display());
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The files whose tables are compared with dump_syms's: libc, libstdc++ and a program built
/// by the sampling step, per architecture.
fn table_files(archs: &[Architecture]) -> Vec<PathBuf> {
    let built = tools::workspace_root().join("target").join("validation");
    let mut v = Vec::new();
    for &arch in archs {
        let t = target_of(arch);
        v.push(Path::new(t.libdir).join("libc.so.6"));
        v.push(Path::new(t.libdir).join("libstdc++.so.6"));
        match arch {
            Architecture::X86_64 => {
                v.push(built.join("x86_64").join("validate-workload-O2"));
                v.push(built.join("x86_64").join("libvalidate-O2.so"));
            }
            Architecture::Arm => {
                v.push(built.join("arm").join("validate-workload-thumb-O2"));
                v.push(built.join("arm").join("libvalidate-arm-O2.so"));
            }
            Architecture::Aarch64 => {
                v.push(built.join("aarch64").join("validate-workload-a64-pac"));
                v.push(built.join("aarch64").join("libvalidate-a64-O2.so"));
            }
        }
    }
    v
}

/// Compares the minidumps of one directory and prints the summary.
fn minidumps_only(dir: PathBuf, dump_syms: &std::path::Path) -> ExitCode {
    let first = unwind_validate::programs::minidumps(&dir)
        .into_iter()
        .next();
    let arch = match first.map(|p| unwind_validate::sample::Sample::load(&p)) {
        Some(Ok(s)) => s.arch,
        Some(Err(e)) => {
            eprintln!("validate: {e}");
            return ExitCode::FAILURE;
        }
        None => {
            eprintln!("validate: no .dmp files in {}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    let run = unwind_validate::programs::ProgramRun {
        arch,
        name: dir.display().to_string(),
        samples: dir,
        // Minidumps of any program: no known call graph.
        known: None,
    };
    match run::validate_runs(arch, vec![run], dump_syms) {
        Ok(r) => {
            println!("{}", report::agreement_line(&r));
            for c in unwind_validate::stores::Symbols::ALL {
                let t = r.total(c);
                println!(
                    "  {}: {} samples, {} CFI frames, {} identical, {} genuine",
                    c.describe(),
                    t.samples,
                    t.cfi_frames,
                    t.cfi_identical,
                    t.genuine.len()
                );
                for d in &t.genuine {
                    println!("    {d}");
                }
            }
            if report::meets_target(&r) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("validate: {e}");
            ExitCode::FAILURE
        }
    }
}
