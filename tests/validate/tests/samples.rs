//! Samples from three real programs per architecture (x86_64 natively, armv7 under qemu-arm),
//! at least 1,000 per architecture, each walked by our unwinder in the signal handler and by
//! rust-minidump's Breakpad-compatible walker over its minidump: no difference may go
//! unexplained, and with our exported STACK CFI at least 99.9 % of the walker's CFI frames must
//! be identical to ours (with dump_syms's files, PLT stubs whose rule dump_syms cannot write
//! are explained differences).

use unwind_dwarf::Architecture;
use unwind_validate::programs::{available, Sampling};
use unwind_validate::report::{agreement_line, meets_target};
use unwind_validate::run::validate_arch;
use unwind_validate::stores::Symbols;
use unwind_validate::tools::dump_syms;

fn check(arch: Architecture) {
    let dump_syms = dump_syms();
    assert!(
        std::process::Command::new(&dump_syms)
            .arg("--version")
            .output()
            .is_ok(),
        "{} not found: run scripts/setup",
        dump_syms.display()
    );
    let r = validate_arch(arch, &Sampling::default(), &dump_syms).expect("validation");
    println!("{}", agreement_line(&r));
    for c in Symbols::ALL {
        let t = r.total(c);
        println!(
            "  {}: {} samples, {} CFI frames, {} identical ({:.3} %), classes {:?}",
            c.describe(),
            t.samples,
            t.cfi_frames,
            t.cfi_identical,
            t.agreement(),
            t.classes
        );
        for d in &t.genuine {
            println!("    genuine: {d}");
        }
        for e in &t.errors {
            println!("    error: {e}");
        }
    }
    let t = r.total(Symbols::Combined);
    assert!(t.samples >= 1000, "{} samples", t.samples);
    assert!(r.programs.len() >= 3);
    assert!(meets_target(&r), "{}", agreement_line(&r));
}

#[test]
fn x86_64_samples_agree_with_breakpad() {
    check(Architecture::X86_64);
}

#[test]
fn armv7_samples_agree_with_breakpad() {
    if !available(Architecture::Arm, "the armv7 samples") {
        return;
    }
    check(Architecture::Arm);
}

#[test]
fn aarch64_samples_agree_with_breakpad() {
    if !available(Architecture::Aarch64, "the aarch64 samples") {
        return;
    }
    check(Architecture::Aarch64);
}
