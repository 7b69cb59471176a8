//! Go programs under `record`. Go's runtime installs its own handler for every signal at start,
//! `SIGURG` (the profiler's default sampling signal) among them, which it sends itself to
//! preempt goroutines: before the profiler kept its handler in front of the program's, a Go
//! program was profiled with 0 samples and no word.
//!
//! `profiler/tests/programs/cgo/main.go`, built with cgo (dynamically linked, so that the loader
//! loads the preload library): goroutines in Go code and in a C function, then two goroutines in
//! loops without a call that only Go's asynchronous preemption can take their threads from.
//! Checked: the program's scheduler still preempts (it exits 3 otherwise); samples in the Go
//! function and in the C function; Go's own signals passed on to its handler; every sampled
//! thread's CPU time covered. And a statically linked build is refused, saying why and what to do.
//!
//! Go's frames are crossed (the walk stopped at a goroutine's first frame before): the running
//! goroutine's stack (Go's memory, found through its `g`), Go's CFI from the executable's
//! `.debug_frame` or, stripped (`-ldflags=-s -w`), from Go's own function table (which also
//! names the functions), the cgo call from the system stack back to the goroutine that made it,
//! and `runtime.goexit` as the end of every goroutine's stack. Checked, on x86_64 and under
//! qemu-aarch64, built as `go build` makes it and stripped: each stack of the Go function and
//! of the C function is the exact chain of callers up to `runtime.goexit`; and the function
//! table's rows equal the `.debug_frame`'s at every address of Go's code.
//!
//! Needs the release build of the command and the preload library (and the aarch64 one), Go,
//! and the aarch64 cross compiler and qemu (under `CI=true` a missing tool fails the tests).
#![cfg(target_arch = "x86_64")]

use std::path::{Path, PathBuf};
use std::process::Command;

use unwind_test_support::target::{self, Target};

#[path = "common/firefox.rs"]
mod firefox;
#[path = "common/record.rs"]
mod record_command;
#[path = "common/runs.rs"]
mod runs;
#[path = "common/summary.rs"]
mod summary_text;
#[path = "common/svg.rs"]
mod svg;

/// How to build the program.
#[derive(Clone, Copy)]
struct Build<'a> {
    /// With cgo: dynamically linked; without: statically, with its C function in Go.
    cgo: bool,
    /// For aarch64 with this row's C cross compiler, else for this host.
    arm64: Option<&'a Target>,
    /// `-ldflags=-s -w`: no symbol table, no DWARF (as release builds often are).
    stripped: bool,
}

/// The address of the C function's cgo wrapper (`_cgo_HASH_Cfunc_c_spin`, into which `c_spin`
/// is inlined) in the executable `exe`, from its symbol table: the same in a stripped build of
/// the same program, which names it by it.
fn c_function(exe: &Path) -> u64 {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(exe).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let found = elf.symbols().find(|s| {
        s.name()
            .is_ok_and(|n| n.ends_with("_Cfunc_c_spin") && n.starts_with("_cgo_"))
    });
    found
        .unwrap_or_else(|| panic!("{}: no _cgo_*_Cfunc_c_spin", exe.display()))
        .address()
}

/// A cgo build for this host, as `go build` makes it.
const CGO: Build<'static> = Build {
    cgo: true,
    arm64: None,
    stripped: false,
};

/// Builds the program into `dir` as `build` says, named `name`.
fn build(dir: &Path, name: &str, build: Build<'_>) -> Option<PathBuf> {
    if !runs::have(&[("go", &["version"])]) {
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/cgo");
    let exe = dir.join(name);
    let mut go = Command::new("go");
    go.current_dir(&src).arg("build");
    if build.stripped {
        go.arg("-ldflags=-s -w");
    }
    go.arg("-o")
        .arg(&exe)
        .arg(".")
        .env("CGO_ENABLED", if build.cgo { "1" } else { "0" })
        .env("GOFLAGS", "-mod=mod");
    if let Some(row) = build.arm64 {
        go.env("GOARCH", "arm64").env("CC", row.cc());
    }
    unwind_test_support::run(&mut go);
    Some(exe)
}

/// Checks that Go's frames were crossed in the profile in `out` of a build with its symbols or,
/// with `stripped`, of one without, whose C function is at that address: every stack through
/// the Go function and through the C function is its exact chain of callers, up to the top of
/// the goroutine's stack (what the leaves call, such as `time.Now`, and on arm64 Go's own
/// preemption, `runtime.asyncPreempt`, may follow), and walks end there. Without DWARF,
/// `main.cSpin` (inlined) is not shown and the C function (no symbol) is named by its address.
/// Returns the samples in the Go function and in the C function.
fn check_go_frames_crossed(out: &Path, stripped: Option<u64>) -> (u64, u64) {
    let folded = runs::folded(out);
    let is_go = |f: &str| f == "main.goSpin";
    let unnamed = stripped.map(|at| format!("cgo+{at:#x}"));
    let is_c = |f: &str| f == "c_spin" || unnamed.as_deref() == Some(f);
    let stripped = stripped.is_some();
    let go = runs::samples_with(&folded, is_go);
    let c = runs::samples_with(&folded, is_c);
    let through_go = ["runtime.goexit", "main.main.func1", "main.goSpin"];
    let (whole, odd) = chains(&folded, &through_go, is_go, |s| s.len() >= 3);
    assert!(
        whole * 100 >= go * 97,
        "{whole} of {go} stacks in main.goSpin reach runtime.goexit; others: {odd:?}"
    );
    let mut through_cgo = vec![
        "runtime.goexit",
        "main.main.func2",
        "main.cgoSpin",
        "main.cSpin",
        "main._Cfunc_c_spin",
        "runtime.cgocall",
        "runtime.asmcgocall",
        "_cgo_",
        "c_spin",
    ];
    if stripped {
        through_cgo.retain(|f| !["main.cSpin", "_cgo_", "c_spin"].contains(f));
    }
    // The chain, then the C function (one frame).
    let length = through_cgo.len() + usize::from(stripped);
    let (whole, odd) = chains(&folded, &through_cgo, is_c, |s| s.len() == length);
    assert!(
        c > 0 && whole * 100 >= c * 97,
        "{whole} of {c} stacks in c_spin cross the cgo call up to runtime.goexit; others: {odd:?}"
    );
    let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
    assert!(
        summary.contains("go runtime        1 process: goroutines' stacks read"),
        "the summary says what it found of Go's runtime:\n{summary}"
    );
    let stored = summary_text::required(&summary, "samples stored");
    let ended = summary_text::required(&summary, "EndOfStack");
    assert!(
        ended * 100 >= stored * 90,
        "{ended} of {stored} walks end at the top of a stack:\n{summary}"
    );
    (go, c)
}

/// The samples of the stacks through a frame `leaf` accepts that start with `chain` (root
/// first; the cgo wrapper's name, which carries a hash of the package, by its prefix `_cgo_`)
/// and whose length `fits`, and the other stacks through it.
fn chains(
    folded: &[(Vec<String>, u64)],
    chain: &[&str],
    leaf: impl Fn(&str) -> bool,
    fits: impl Fn(&[String]) -> bool,
) -> (u64, Vec<String>) {
    let mut whole = 0;
    let mut odd = Vec::new();
    for (stack, n) in folded.iter().filter(|(s, _)| s.iter().any(|f| leaf(f))) {
        let named: Vec<String> = stack
            .iter()
            .map(|f| {
                if f.starts_with("_cgo_") {
                    "_cgo_".into()
                } else {
                    f.clone()
                }
            })
            .collect();
        if fits(&named) && named.len() >= chain.len() && named[..chain.len()] == *chain {
            whole += n;
        } else {
            odd.push(stack.join(";"));
        }
    }
    (whole, odd)
}

#[test]
fn a_cgo_program_is_sampled_and_its_scheduler_still_preempts() {
    let dir = runs::scratch("go-cgo");
    let Some(exe) = build(&dir, "cgo", CGO) else {
        return;
    };
    let out = dir.join("out");
    let (status, stderr) = runs::run(
        runs::record(&out, &[], &[exe.to_str().unwrap()]).stdout(std::process::Stdio::piped()),
        None,
    );
    println!("{stderr}");
    assert!(
        status.success(),
        "the program exits 3 when its goroutines are starved: {status}\n{stderr}"
    );
    let samples = runs::check_outputs("cgo", &out);
    let (go, c) = check_go_frames_crossed(&out, None);
    // Three goroutines in Go and one in C, for the same wall-clock time on two threads.
    assert!(
        go * 5 > samples && c * 10 > samples,
        "{go} samples in main.goSpin and {c} in c_spin of {samples}"
    );
    let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
    let passed_on = summary
        .lines()
        .find(|l| l.starts_with("program's signal"))
        .unwrap_or_else(|| panic!("Go's own SIGURG handler is not said:\n{summary}"));
    assert!(
        passed_on.contains("passed the program's own"),
        "{passed_on}"
    );
    assert!(
        !stderr.contains("CPU time was not sampled"),
        "every thread of Go's is sampled: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_statically_linked_go_program_is_refused_saying_what_to_do() {
    let dir = runs::scratch("go-static");
    let Some(exe) = build(&dir, "static", Build { cgo: false, ..CGO }) else {
        return;
    };
    let out = dir.join("out");
    let (status, stderr) = runs::run(&mut runs::record(&out, &[], &[exe.to_str().unwrap()]), None);
    assert_eq!(status.code(), Some(73), "{stderr}");
    assert!(
        stderr.contains("is statically linked") && stderr.contains("CGO_ENABLED=1"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same program built for aarch64 (as `go build` makes it, and stripped) and run under
/// qemu-aarch64 with that architecture's preload library, under this host's `record` (Go's
/// arm64 runtime: `g` stored by `runtime.save_g`, `asmcgocall` calling C directly, its
/// preemption's push of the link register).
#[test]
fn a_cgo_program_on_aarch64_has_its_go_frames_crossed() {
    let row = target::by_name("aarch64");
    if !row.usable("a Go program on aarch64", &[]) {
        return;
    }
    let target_dir = record_command::release_dir().join("..");
    let library = row
        .release_dir(&target_dir)
        .join("libunwind_profiler_preload.so");
    assert!(
        library.is_file(),
        "{} is missing: build it first with `cargo build --release --target {} \
         -p unwind-profiler-preload`",
        library.display(),
        row.rust_target
    );
    let library = library.to_str().unwrap();
    let dir = runs::scratch("go-cgo-aarch64");
    let mut named = None;
    for stripped in [false, true] {
        let arm64 = Build {
            arm64: Some(row),
            stripped,
            ..CGO
        };
        let Some(exe) = build(&dir, if stripped { "cgo" } else { "cgo-symbols" }, arm64) else {
            return;
        };
        if !stripped {
            named = Some(c_function(&exe));
        }
        let out = dir.join(if stripped { "stripped" } else { "out" });
        let mut program: Vec<&str> = row.launcher();
        program.push(exe.to_str().unwrap());
        let (status, stderr) = runs::run(
            &mut runs::record(&out, &["--library", library], &program),
            None,
        );
        println!("{stderr}");
        assert!(status.success(), "{status}\n{stderr}");
        let samples = runs::check_outputs("cgo", &out);
        let (go, c) = check_go_frames_crossed(&out, named.filter(|_| stripped));
        assert!(
            go * 5 > samples && c * 10 > samples,
            "{go} samples in main.goSpin and {c} in the C function of {samples}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A release build as many ship (`-ldflags=-s -w`: no symbol table, no DWARF): Go's own function
/// table gives the rows (from each function's stack-pointer deltas), the functions that end
/// walks, where `g` is and the offsets to the M's goroutine (from the runtime's code), and the
/// functions' names.
#[test]
fn a_stripped_cgo_program_is_crossed_and_named_from_go_s_own_table() {
    let dir = runs::scratch("go-cgo-stripped");
    let stripped = Build {
        stripped: true,
        ..CGO
    };
    let (Some(named), Some(exe)) = (
        build(&dir, "cgo-symbols", CGO),
        build(&dir, "cgo", stripped),
    ) else {
        return;
    };
    let out = dir.join("out");
    let (status, stderr) = runs::run(&mut runs::record(&out, &[], &[exe.to_str().unwrap()]), None);
    println!("{stderr}");
    assert!(status.success(), "{status}\n{stderr}");
    let samples = runs::check_outputs("cgo", &out);
    let (go, c) = check_go_frames_crossed(&out, Some(c_function(&named)));
    assert!(
        go * 5 > samples && c * 10 > samples,
        "{go} samples in main.goSpin and {c} in the C function of {samples}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Go's function table gives, at every address of the program's Go code, the rule its
/// `.debug_frame` gives (Go's linker writes one from the other), on both 64-bit architectures:
/// the same program built with and without DWARF, compared address by address.
#[test]
fn go_s_function_table_gives_the_rules_of_its_debug_frame() {
    let dir = runs::scratch("go-pclntab-rows");
    let rows = |with: &Path, without: &Path, arch: &str| -> (u64, u64) {
        fn both<A: unwind_dwarf::DwarfArch>(with: &Path, without: &Path) -> (u64, u64) {
            let dwarf = unwind_dwarf::load_elf_file::<A>(with).unwrap();
            let table = unwind_dwarf::load_elf_file::<A>(without).unwrap();
            assert!(table.stats.cfi.go_rows > 1000, "{:?}", table.stats.cfi);
            // Go's code: the C start-up code's rules, read from the functions of its symbol
            // table on aarch64, are not Go's.
            let data = std::fs::read(without).unwrap();
            let elf = object::File::parse(&*data).unwrap();
            let go = unwind_dwarf::go::pclntab::of_elf(&elf).unwrap().unwrap();
            let (lo, hi) = go.functions().fold((u64::MAX, 0), |(lo, hi), f| {
                (lo.min(f.start), hi.max(f.end))
            });
            let (mut same, mut differ) = (0, 0);
            for (start, end, rule) in dwarf.rules.extents() {
                for at in start.max(lo)..end.min(hi) {
                    if table.rules.lookup(at) == Some(rule) {
                        same += 1;
                    } else {
                        differ += 1;
                    }
                }
            }
            (same, differ)
        }
        match arch {
            "x86_64" => both::<unwind_dwarf::X86_64>(with, without),
            _ => both::<unwind_dwarf::Aarch64>(with, without),
        }
    };
    let row = target::by_name("aarch64");
    for (arch, arm64) in [("x86_64", None), ("aarch64", Some(row))] {
        if arm64.is_some() && !row.usable("a Go program for aarch64", &[]) {
            continue;
        }
        let with = Build { arm64, ..CGO };
        let without = Build {
            stripped: true,
            ..with
        };
        let (Some(a), Some(b)) = (
            build(&dir, &format!("{arch}-dwarf"), with),
            build(&dir, &format!("{arch}-stripped"), without),
        ) else {
            return;
        };
        let (same, differ) = rows(&a, &b, arch);
        println!("{arch}: {same} addresses with the same rule, {differ} with another");
        assert!(
            same > 100_000 && differ == 0,
            "{arch}: {same} same, {differ} differ"
        );
        // What the runtime reads from Go's code where the M's goroutine is, against the
        // compiler's own DWARF types.
        let (a, b) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        let (a, b) = (
            object::File::parse(&*a).unwrap(),
            object::File::parse(&*b).unwrap(),
        );
        let types = field_offsets(&a);
        assert!(types.is_some(), "{arch}: no runtime.g and runtime.m types");
        let m_curg = |elf| unwind_dwarf::go::runtime_layout(elf).and_then(|l| l.m_curg);
        assert_eq!(m_curg(&a), types, "{arch}");
        assert_eq!(m_curg(&b), types, "{arch}, stripped");
        println!("{arch}: g.m and m.curg at {types:?}, as the DWARF types say");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The offsets of `g.m` and `m.curg` in `elf`'s DWARF (`runtime.g`'s member `m`,
/// `runtime.m`'s member `curg`); `None` without DWARF (`-w`) or without both.
fn field_offsets(elf: &object::File<'_>) -> Option<(u64, u64)> {
    use object::{Object, ObjectSection};
    // Only what names and offsets are read from (decompressing the others would take most of
    // the time).
    let sections = gimli::DwarfSections::load(|id| -> Result<std::borrow::Cow<'_, [u8]>, ()> {
        use gimli::SectionId::{
            DebugAbbrev, DebugAddr, DebugInfo, DebugLineStr, DebugStr, DebugStrOffsets,
        };
        let wanted = matches!(
            id,
            DebugAbbrev | DebugAddr | DebugInfo | DebugLineStr | DebugStr | DebugStrOffsets
        );
        Ok(elf
            .section_by_name(id.name())
            .filter(|_| wanted)
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(std::borrow::Cow::Borrowed(&[])))
    })
    .ok()?;
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, gimli::LittleEndian));
    let mut units = dwarf.units();
    let (mut g_m, mut m_curg) = (None, None);
    // Units are read from their headers (a `gimli::Unit` would read each one's line program).
    while let Ok(Some(header)) = units.next() {
        let Ok(abbrevs) = dwarf.abbreviations(&header) else {
            continue;
        };
        // Go's linker writes names inline or in `.debug_str`: no form that needs the unit.
        let name = |e: &gimli::DebuggingInformationEntry<_>| {
            e.attr_value(gimli::DW_AT_name)
                .and_then(|v| dwarf.attr_line_string(v).ok())
        };
        // Go's linker writes the runtime's types into the runtime package's unit: the others'
        // entries are not read.
        let mut entries = header.entries(&abbrevs);
        match entries.next_dfs() {
            Ok(Some(root)) if name(root).is_some_and(|n| n.slice() == b"runtime") => {}
            _ => continue,
        }
        // The structure whose members are being read, and its depth.
        let mut inside: Option<(&str, isize)> = None;
        while let Ok(Some(e)) = entries.next_dfs() {
            let name = || name(e).and_then(|s| std::str::from_utf8(s.slice()).ok());
            if inside.is_some_and(|(_, depth)| e.depth() <= depth) {
                inside = None;
            }
            match (e.tag(), inside) {
                (gimli::DW_TAG_structure_type, _) => {
                    inside = match name() {
                        Some(n @ ("runtime.g" | "runtime.m")) => Some((n, e.depth())),
                        _ => None,
                    }
                }
                (gimli::DW_TAG_member, Some((of, _))) => {
                    let offset = || {
                        e.attr_value(gimli::DW_AT_data_member_location)
                            .and_then(|v| v.udata_value())
                    };
                    match (of, name()) {
                        ("runtime.g", Some("m")) => g_m = offset(),
                        ("runtime.m", Some("curg")) => m_curg = offset(),
                        _ => {}
                    }
                }
                _ => {}
            }
            if let (Some(a), Some(b)) = (g_m, m_curg) {
                return Some((a, b));
            }
        }
    }
    None
}
