//! Writes seed inputs for the fuzz targets, from real binaries, into `DIR/TARGET/`:
//! `fuzz-seeds DIR [ELF...]` (default: this machine's x86_64, armhf and arm64 libc and libstdc++,
//! libgcc_s, and the Rust toolchain's librustc_driver). Each seed is a slice small enough for
//! the fuzzer to mutate quickly, cut where the format keeps it coherent:
//!
//! - `cfi`: `.eh_frame` and `.debug_frame` runs starting at a CIE, up to 8 KiB;
//! - `exidx`: runs of 16 `.ARM.exidx` entries with the `.ARM.extab` bytes they refer to;
//! - `arm_code`: the first 512 bytes of functions named in `.dynsym`/`.symtab` (ARM and arm64
//!   files);
//! - `elf`: whole files of up to 64 KiB among the inputs;
//! - `expr`: the DWARF expressions of the first FDEs' CFA and register rules;
//! - `unwind`, `stack_cfi`: a few fixed byte patterns (their inputs are structured).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSymbol};

fn main() {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(args.next().unwrap_or_else(|| "fuzz/seeds".into()));
    let mut files: Vec<PathBuf> = args.map(PathBuf::from).collect();
    if files.is_empty() {
        files = default_files();
    }
    let mut seeds: BTreeMap<&str, Vec<Vec<u8>>> = BTreeMap::new();
    for f in &files {
        let Ok(data) = std::fs::read(f) else {
            eprintln!("fuzz-seeds: cannot read {}", f.display());
            continue;
        };
        let Ok(elf) = object::File::parse(&*data) else {
            continue;
        };
        let arm = elf.architecture() == object::Architecture::Arm;
        // The `cfi` target's selector bits for the file's architecture.
        let arch_bits = match elf.architecture() {
            object::Architecture::Arm => 1,
            object::Architecture::Aarch64 => 8,
            _ => 0,
        };
        cfi_seeds(&elf, arch_bits, seeds.entry("cfi").or_default());
        if arm {
            exidx_seeds(&elf, seeds.entry("exidx").or_default());
        }
        if arm || arch_bits == 8 {
            code_seeds(&elf, seeds.entry("arm_code").or_default());
        }
        expr_seeds(&elf, seeds.entry("expr").or_default());
        if data.len() <= 64 * 1024 {
            seeds.entry("elf").or_default().push(data.clone());
        }
    }
    for program in small_programs() {
        if let Ok(data) = std::fs::read(&program) {
            seeds.entry("elf").or_default().push(data);
        }
    }
    for (target, pattern) in [("unwind", 0u8), ("stack_cfi", 1)] {
        let v = seeds.entry(target).or_default();
        for len in [16usize, 256, 4096] {
            v.push(
                (0..len)
                    .map(|i| (i as u8).wrapping_mul(31) ^ pattern)
                    .collect(),
            );
        }
    }
    for (target, inputs) in &seeds {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir).expect("create the seed directory");
        for (i, input) in inputs.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:05}")), input).expect("write a seed");
        }
        println!("{target}: {} seeds", inputs.len());
    }
}

/// A small C program and library built with each compiler and a few flag sets (x86_64, armhf
/// and arm64, with and without unwind tables and debug info, stripped or not), for the `elf`
/// target: whole files of a few KiB.
fn small_programs() -> Vec<PathBuf> {
    const SOURCE: &str = "#include <stdio.h>\n\
        __attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }\n\
        __attribute__((noinline)) int mid(int x) { char b[32]; snprintf(b, 32, \"%d\", x); return leaf(b[0]); }\n\
        int main(int argc, char **argv) { (void)argv; return mid(argc) & 1; }\n";
    let dir = std::env::temp_dir().join(format!("fuzz-seeds-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let src = dir.join("p.c");
    if std::fs::write(&src, SOURCE).is_err() {
        return Vec::new();
    }
    let mut built = Vec::new();
    let variants: [(&str, &[&str]); 10] = [
        ("gcc", &["-O2"]),
        ("gcc", &["-O0", "-g"]),
        ("gcc", &["-O2", "-shared", "-fPIC"]),
        ("gcc", &["-O2", "-fno-asynchronous-unwind-tables", "-s"]),
        ("arm-linux-gnueabihf-gcc", &["-O2", "-mthumb"]),
        (
            "arm-linux-gnueabihf-gcc",
            &["-O2", "-marm", "-funwind-tables"],
        ),
        ("arm-linux-gnueabihf-gcc", &["-O2", "-mthumb", "-g"]),
        (
            "arm-linux-gnueabihf-gcc",
            &["-O2", "-s", "-shared", "-fPIC"],
        ),
        ("aarch64-linux-gnu-gcc", &["-O2"]),
        (
            "aarch64-linux-gnu-gcc",
            &["-O2", "-mbranch-protection=standard", "-shared", "-fPIC"],
        ),
    ];
    for (i, (cc, flags)) in variants.iter().enumerate() {
        let exe = dir.join(format!("p{i}"));
        let ok = std::process::Command::new(cc)
            .args(*flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            built.push(exe);
        } else {
            eprintln!("fuzz-seeds: {cc} {flags:?} failed");
        }
    }
    built
}

fn default_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libgcc_s.so.1",
        "/usr/arm-linux-gnueabihf/lib/libc.so.6",
        "/usr/arm-linux-gnueabihf/lib/libstdc++.so.6",
        "/usr/arm-linux-gnueabihf/lib/libgcc_s.so.1",
        "/usr/aarch64-linux-gnu/lib/libc.so.6",
        "/usr/aarch64-linux-gnu/lib/libstdc++.so.6",
        "/usr/aarch64-linux-gnu/lib/libgcc_s.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Ok(out) = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
    {
        let lib = Path::new(String::from_utf8_lossy(&out.stdout).trim()).join("lib");
        if let Ok(entries) = std::fs::read_dir(lib) {
            v.extend(
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("librustc_driver"))
                    }),
            );
        }
    }
    v
}

/// Runs of FDEs (up to 8 KiB) from 24 places spread over each CFI section, behind the CIE they
/// refer to, their CIE pointers rewritten to it; each after its selector byte (see
/// `unwind_fuzz_targets::cfi::run`).
fn cfi_seeds(elf: &object::File<'_>, arch_bits: u8, out: &mut Vec<Vec<u8>>) {
    for (name, debug) in [(".eh_frame", false), (".debug_frame", true)] {
        let Some(data) = elf.section_by_name(name).and_then(|s| s.data().ok()) else {
            continue;
        };
        // (offset, length including the length field, the CIE it refers to if an FDE)
        let mut records: Vec<(usize, usize, Option<usize>)> = Vec::new();
        let mut at = 0usize;
        while at + 8 <= data.len() {
            let len = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
            if len == 0 || len == 0xffff_ffff || at + 4 + len > data.len() {
                break;
            }
            let id = u32::from_le_bytes(data[at + 4..at + 8].try_into().unwrap()) as usize;
            let cie = match debug {
                true if id == 0xffff_ffff => None,
                true => Some(id),
                false if id == 0 => None,
                false => (at + 4).checked_sub(id),
            };
            records.push((at, len + 4, cie));
            at += len + 4;
        }
        let selector = arch_bits | if debug { 2 } else { 0 };
        let step = (records.len() / 24).max(1);
        for first in (0..records.len()).step_by(step) {
            let Some(cie) = records[first].2 else {
                continue;
            };
            let Some(&(_, cie_len, None)) = records.iter().find(|r| r.0 == cie) else {
                continue;
            };
            let mut seed = vec![selector];
            seed.extend_from_slice(&data[cie..cie + cie_len]);
            for &(off, len, of) in &records[first..] {
                if of != Some(cie) || seed.len() + len > 8 * 1024 {
                    break;
                }
                let here = seed.len() - 1;
                seed.extend_from_slice(&data[off..off + len]);
                // The CIE is at offset 0 of the slice.
                let pointer = if debug { 0 } else { (here + 4) as u32 };
                seed[1 + here + 4..1 + here + 8].copy_from_slice(&pointer.to_le_bytes());
            }
            out.push(seed);
        }
    }
}

/// Runs of 16 index entries with the extab bytes from the lowest to the highest they refer to.
fn exidx_seeds(elf: &object::File<'_>, out: &mut Vec<Vec<u8>>) {
    let (Some(exidx), Some(extab)) = (
        elf.section_by_name(".ARM.exidx"),
        elf.section_by_name(".ARM.extab"),
    ) else {
        return;
    };
    let (Ok(ix), Ok(tab)) = (exidx.data(), extab.data()) else {
        return;
    };
    let prel31 = |w: u32, at: u64| at.wrapping_add_signed(i64::from(((w << 1) as i32) >> 1));
    let step = (ix.len() / 8 / 40).max(16) * 8;
    for start in (0..ix.len().saturating_sub(16 * 8)).step_by(step) {
        let slice = &ix[start..start + 16 * 8];
        let base = exidx.address() + start as u64;
        // The extab words the entries point to (second word, bit 31 clear, not CANTUNWIND).
        let refs: Vec<u64> = slice
            .chunks(8)
            .enumerate()
            .filter_map(|(i, e)| {
                let w = u32::from_le_bytes(e[4..8].try_into().ok()?);
                (w & 0x8000_0000 == 0 && w != 1).then(|| prel31(w, base + i as u64 * 8 + 4))
            })
            .filter(|&a| a >= extab.address() && a < extab.address() + tab.len() as u64)
            .collect();
        let (lo, hi) = match (refs.iter().min(), refs.iter().max()) {
            (Some(&lo), Some(&hi)) => (lo, (hi + 64).min(extab.address() + tab.len() as u64)),
            _ => (extab.address(), extab.address()),
        };
        let tab_slice = &tab[(lo - extab.address()) as usize..(hi - extab.address()) as usize];
        let mut seed = ((16 * 8) as u16).to_le_bytes().to_vec();
        seed.extend_from_slice(&((lo as i64 - base as i64) as i32).to_le_bytes());
        seed.extend_from_slice(slice);
        seed.extend_from_slice(tab_slice);
        out.push(seed);
    }
}

/// The first 512 bytes of up to 48 functions, each after its selector (instruction set by the
/// symbol's bit 0, no starts).
fn code_seeds(elf: &object::File<'_>, out: &mut Vec<Vec<u8>>) {
    let Some(text) = elf.section_by_name(".text") else {
        return;
    };
    let Ok(code) = text.data() else { return };
    let mut syms: Vec<u64> = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 16)
        .map(|s| s.address())
        .collect();
    syms.sort_unstable();
    syms.dedup();
    let step = (syms.len() / 48).max(1);
    for &addr in syms.iter().step_by(step) {
        let at = (addr & !1).wrapping_sub(text.address()) as usize;
        let Some(bytes) = code.get(at..(at + 512).min(code.len())) else {
            continue;
        };
        // The selector: Thumb (bit 0) or A64 (bit 5), no starts.
        let a64 = elf.architecture() == object::Architecture::Aarch64;
        let mut seed = vec![if a64 { 32 } else { u8::from(addr & 1 != 0) }];
        seed.extend_from_slice(bytes);
        out.push(seed);
    }
}

/// DWARF expressions (`DW_CFA_def_cfa_expression`, `DW_CFA_expression`,
/// `DW_CFA_val_expression`) found in a CFI section, each after its selector (word size; a value
/// pushed first for register rules; compiled).
fn expr_seeds(elf: &object::File<'_>, out: &mut Vec<Vec<u8>>) {
    let word = if elf.is_64() { 0 } else { 1 };
    for name in [".eh_frame", ".debug_frame"] {
        let Some(data) = elf.section_by_name(name).and_then(|s| s.data().ok()) else {
            continue;
        };
        // DW_CFA_def_cfa_expression (0x0f) ULEB length, or DW_CFA_expression /
        // DW_CFA_val_expression (0x10, 0x16) ULEB register, ULEB length; then the expression.
        // Found by pattern: a short length followed by plausible operations.
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..data.len().saturating_sub(3) {
            let (op, pushes, len_at) = match data[i] {
                0x0f => (0x0f, false, i + 1),
                0x10 | 0x16 => (data[i], true, i + 2),
                _ => continue,
            };
            let Some(&len) = data.get(len_at) else {
                continue;
            };
            let len = usize::from(len);
            if !(2..=24).contains(&len) || op == 0 {
                continue;
            }
            let Some(expr) = data.get(len_at + 1..len_at + 1 + len) else {
                continue;
            };
            // Register and literal operations start nearly every real expression.
            if !(0x30..=0x92).contains(&expr[0]) || !seen.insert(expr.to_vec()) {
                continue;
            }
            let mut seed = vec![word | 4 | if pushes { 2 } else { 0 }];
            seed.extend_from_slice(expr);
            out.push(seed);
            if seen.len() >= 64 {
                break;
            }
        }
    }
}
