//! Real modules' rules through their byte form ([`ModuleRules::to_bytes`],
//! [`ModuleRules::from_bytes`]): x86_64 libc (bash, libpython and armhf libc where installed)
//! read back equal in every field and in every extent, with the byte size and the times of
//! building from the ELF file, writing and reading printed (not asserted: a debug build's times
//! say little; `cargo test --release -p unwind-dwarf --test rules_bytes -- --nocapture` gives
//! the real ones).

use std::path::Path;
use std::time::{Duration, Instant};

use unwind_core::table::{ModuleRules, RuleBytes, RulesBytesError};
use unwind_core::{Arm, X86_64};
use unwind_dwarf::{load_elf_file, DwarfArch};

/// The best of a few runs of `f`, and its last result.
fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> (T, Duration) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        last = Some(f());
        best = best.min(t.elapsed());
    }
    (last.expect("at least one run"), best)
}

/// Loads `path`'s rules, round-trips them through bytes and checks that nothing changed.
fn round_trip<A: DwarfArch>(path: &Path)
where
    A::Rule: RuleBytes,
{
    if !path.exists() {
        // Under CI a missing file fails the test.
        unwind_test_support::missing(&path.display().to_string());
        return;
    }
    let (loaded, build) = best(3, || load_elf_file::<A>(path).unwrap());
    let m = loaded.rules;
    let (bytes, write) = best(5, || m.to_bytes());
    let (back, read) = best(5, || ModuleRules::<A::Rule>::from_bytes(&bytes).unwrap());
    println!(
        "{} ({}): {} extents, {} rules, {} expressions: {} bytes ({} in memory); built from \
         the ELF file in {build:?}, to_bytes {write:?}, from_bytes {read:?}",
        path.display(),
        A::NAME,
        m.rows(),
        m.dictionary().len(),
        m.exprs().len(),
        bytes.len(),
        m.bytes(),
    );
    // Every field (the debug form prints them all, the ready forms too), every extent, and
    // the same bytes again.
    assert_eq!(format!("{m:?}"), format!("{back:?}"));
    assert!(m.extents().eq(back.extents()));
    assert_eq!(m.stats(), back.stats());
    assert_eq!(back.to_bytes(), bytes);
    let mut extents = 0;
    for (start, end, rule) in m.extents() {
        for svma in [start, end - 1] {
            assert_eq!(back.lookup(svma), Some(rule), "{svma:#x}");
            assert_eq!(back.extent_at(svma), m.extent_at(svma), "{svma:#x}");
        }
        extents += 1;
    }
    assert!(extents > 1000, "{} has {extents} extents", path.display());
}

/// Debian's C library for the architecture `name` of the targets table.
fn libc(name: &str) -> std::path::PathBuf {
    Path::new(unwind_test_support::target::by_name(name).libdir).join("libc.so.6")
}

#[test]
fn x86_64_libc_round_trips() {
    round_trip::<X86_64>(&libc("x86_64"));
}

/// Two more large modules of the profiler's runs: bash, and the libpython of the python3 on
/// the path (under pyenv, its own).
#[test]
fn bash_and_libpython_round_trip() {
    round_trip::<X86_64>(Path::new("/bin/bash"));
    let libpython = std::process::Command::new("python3")
        .args([
            "-c",
            "import sysconfig, os; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME')))",
        ])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    round_trip::<X86_64>(Path::new(&libpython));
}

#[test]
fn armhf_libc_round_trips() {
    round_trip::<Arm>(&libc("armv7"));
}

/// libc's x86_64 bytes are refused as ARM rules, and the other way round.
#[test]
fn the_other_architecture_is_refused() {
    let x86 = load_elf_file::<X86_64>(&libc("x86_64")).unwrap();
    assert_eq!(
        ModuleRules::<unwind_core::arm::Rule>::from_bytes(&x86.rules.to_bytes()).unwrap_err(),
        RulesBytesError::WrongArchitecture { found: *b"x64\0" }
    );
    let arm = &libc("armv7");
    if !arm.exists() {
        unwind_test_support::missing(&arm.display().to_string());
    } else {
        let arm = load_elf_file::<Arm>(arm).unwrap();
        assert_eq!(
            ModuleRules::<unwind_core::x86_64::Rule>::from_bytes(&arm.rules.to_bytes())
                .unwrap_err(),
            RulesBytesError::WrongArchitecture { found: *b"arm\0" }
        );
    }
}
