//! aarch64 functions read from their instructions (`unwind_arm_prologue::a64`, the rows of code
//! built without unwind tables) against the compiler's CFI for the same code: every function
//! an FDE describes in Debian's arm64 libc, libstdc++ and libgcc_s and Rust's aarch64 `libstd`
//! is read from its instructions as if it had no table, and wherever the reading is confirmed
//! and gives a rule, the FDE's row at that instruction must say the same (the CFA on the same
//! register at the same offset, or on the other one where the reading knows both; x30 and x29
//! in their registers or at the same slots). LLVM's tables (Rust's) describe prologues but not
//! epilogues, where the reading is right and they are not: there only calls are compared.

use std::path::{Path, PathBuf};

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
use object::{Object, ObjectSection};
use unwind_arm_prologue::a64::{analyze, FrameState, Saved};
use unwind_core::aarch64::{CfaRule, RegRule};
use unwind_core::Aarch64;
use unwind_test_support::target;

/// What comparing one file found.
#[derive(Debug, Default)]
struct Agreement {
    /// FDEs whose functions were read.
    functions: usize,
    /// Of them, readings confirmed by their exits.
    confirmed: usize,
    /// Instructions where both give a rule and they were compared.
    compared: usize,
    /// Of them, where the reading's CFA could not be checked (the FDE's is on x29, which the
    /// reading does not follow there).
    cfa_unchecked: usize,
    /// Calls where the FDE still gives the entry's rule with the frame pushed.
    prologue_undescribed: usize,
    /// Where they differ: address, reading, FDE rule.
    differ: Vec<String>,
}

/// `[start, end)` of every FDE of the file's `.eh_frame`.
fn fde_ranges(elf: &object::File<'_>) -> Vec<(u64, u64)> {
    let Some(section) = elf.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let data = section.data().unwrap();
    let eh = EhFrame::new(data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = elf.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let mut out = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                let start = fde.initial_address();
                out.push((start, start + fde.len()));
            }
        }
    }
    out.sort_unstable();
    out
}

fn same_saved(ours: Saved, cfi: RegRule) -> Option<bool> {
    match cfi {
        RegRule::Same => Some(ours.in_register()),
        // A register in its register and its slot: both rules are right.
        RegRule::Offset(o) => Some(matches!(
            ours,
            Saved::At(s) | Saved::Both(s) if s == i64::from(o)
        )),
        // Not a form the reading gives.
        _ => None,
    }
}

/// A `bl` or `blr`.
fn is_call(word: u32) -> bool {
    word & 0xFC00_0000 == 0x9400_0000 || word & 0xFFFF_FC1F == 0xD63F_0000
}

/// Compares at every instruction, or (`calls_only`) at calls: the rows a walk uses for
/// callers, and the only ones tables written for synchronous unwinding (LLVM's, which leave
/// epilogues undescribed) must get right.
fn compare(path: &Path, calls_only: bool) -> Agreement {
    let data = std::fs::read(path).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let table = unwind_dwarf::rules_from_elf::<Aarch64>(&data)
        .unwrap()
        .rules;
    let code = unwind_dwarf::A64Code::read(&elf, None);
    let fdes = fde_ranges(&elf);
    let mut starts: Vec<u64> = fdes.iter().map(|f| f.0).collect();
    starts.extend(&code.function_starts);
    starts.sort_unstable();
    starts.dedup();
    let mut found = Agreement::default();
    for &(start, end) in &fdes {
        let Some(bytes) = code.bytes(start, end) else {
            continue;
        };
        found.functions += 1;
        let is_entry = |a: u64| {
            starts.binary_search(&a).is_ok() || code.plt.iter().any(|&(s, e)| (s..e).contains(&a))
        };
        let analysis = analyze(bytes, start, is_entry);
        if !analysis.confirmed() {
            continue;
        }
        found.confirmed += 1;
        for (n, state) in analysis.states.iter().enumerate() {
            let Some(state) = state.filter(|s| s.rule().is_some()) else {
                continue;
            };
            let pc = start + 4 * n as u64;
            let word = bytes[4 * n..4 * n + 4]
                .try_into()
                .map(u32::from_le_bytes)
                .unwrap();
            if calls_only && !is_call(word) {
                continue;
            }
            let Some(cfi) = table.lookup(pc) else {
                continue;
            };
            if cfi.signal_frame || cfi.from_instructions {
                continue;
            }
            // LLVM's machine outliner calls a piece of the prologue (`bl OUTLINED_FUNCTION_n`)
            // after the frame is pushed, where its table still gives the entry's rule.
            let entry = unwind_core::aarch64::Rule::default();
            if calls_only
                && state.sp != Some(0)
                && (cfi.cfa, cfi.ra, cfi.fp) == (entry.cfa, entry.ra, entry.fp)
            {
                found.prologue_undescribed += 1;
                continue;
            }
            let cfa = match cfi.cfa {
                CfaRule::SpOffset(s) => Some(state.sp == Some(i64::from(s))),
                CfaRule::FpOffset(f) if state.fp.is_some() => Some(state.fp == Some(i64::from(f))),
                CfaRule::FpOffset(_) => {
                    found.cfa_unchecked += 1;
                    Some(true)
                }
                CfaRule::Expr(_) => None,
            };
            let (Some(cfa), Some(ra), Some(fp)) = (
                cfa,
                same_saved(state.lr, cfi.ra),
                same_saved(state.x29, cfi.fp),
            ) else {
                continue;
            };
            found.compared += 1;
            if !(cfa && ra && fp) {
                found.differ.push(describe(path, pc, &state, &cfi));
            }
        }
    }
    println!(
        "{}: {} functions, {} confirmed, {} instructions compared ({} with the CFA unchecked, {} calls \
         in prologues the FDE does not describe), {} differ",
        path.display(),
        found.functions,
        found.confirmed,
        found.compared,
        found.cfa_unchecked,
        found.prologue_undescribed,
        found.differ.len()
    );
    for d in found.differ.iter().take(20) {
        println!("  {d}");
    }
    found
}

fn describe(path: &Path, pc: u64, ours: &FrameState, cfi: &unwind_core::aarch64::Rule) -> String {
    format!(
        "{} {pc:#x}: read {ours:?}, FDE {:?} ra {:?} x29 {:?}",
        path.file_name().unwrap().to_string_lossy(),
        cfi.cfa,
        cfi.ra,
        cfi.fp
    )
}

/// The file `name` of Debian's arm64 libraries, or `None` (a failure under CI) if missing.
fn debian(name: &str) -> Option<PathBuf> {
    let path = Path::new(target::by_name("aarch64").libdir).join(name);
    if path.exists() {
        Some(path)
    } else {
        unwind_test_support::missing(&format!("{} (scripts/setup)", path.display()));
        None
    }
}

fn check(path: &Path, calls_only: bool, min_compared: usize) {
    let a = compare(path, calls_only);
    assert!(
        a.differ.is_empty(),
        "{}: {} instructions where the reading and the FDE differ, e.g. {:?}",
        path.display(),
        a.differ.len(),
        a.differ.first()
    );
    assert!(
        a.compared >= min_compared,
        "{}: only {} instructions compared",
        path.display(),
        a.compared
    );
}

#[test]
fn debian_arm64_libc_readings_agree_with_its_cfi() {
    if let Some(p) = debian("libc.so.6") {
        check(&p, false, 50_000);
    }
}

#[test]
fn debian_arm64_libstdcxx_readings_agree_with_its_cfi() {
    if let Some(p) = debian("libstdc++.so.6") {
        check(&p, false, 50_000);
    }
}

#[test]
fn debian_arm64_libgcc_s_readings_agree_with_its_cfi() {
    if let Some(p) = debian("libgcc_s.so.1") {
        check(&p, false, 2_000);
    }
}

#[test]
fn rust_aarch64_libstd_readings_agree_with_its_cfi() {
    let Some(path) = unwind_test_support::rust_libstd("aarch64-unknown-linux-gnu") else {
        unwind_test_support::missing("libstd-*.so of the aarch64-unknown-linux-gnu Rust target");
        return;
    };
    check(&path, true, 5_000);
}
