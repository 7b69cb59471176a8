//! Real ARM binaries: Debian's armhf `libc.so.6` and `libstdc++.so.6`, and small C files
//! compiled at test time with `arm-linux-gnueabihf-gcc` (ARM and Thumb).
//!
//! - Every index entry is compared with `readelf -u` (function start, model, personality
//!   routine, opcode bytes).
//! - `rows` succeeds, drops few entries, and the statistics are printed.
//! - Every function of the compiled C files has a row.
//!
//! A missing cross tool or library fails the test under CI and is a visible skip elsewhere
//! (`unwind_test_support::missing`; `scripts/setup` installs them).

use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use unwind_arm_exidx::{entries, rows, ExidxSections, ExidxStats, Model};
use unwind_core::arm::{CfaRule, Reg, RegRule, Rule, Source};
use unwind_test_support::target::{self, Target};
use unwind_test_support::{missing, tool_runs};

/// armv7's row of the targets table: the cross toolchain, Debian's armhf libraries.
fn armv7() -> &'static Target {
    target::by_name("armv7")
}

/// The EHABI sections of a parsed ELF file; `text_end` is the end of its highest code section.
fn exidx_sections<'a>(elf: &object::File<'a>) -> Option<ExidxSections<'a>> {
    let exidx = elf.section_by_name(".ARM.exidx")?;
    let extab = elf.section_by_name(".ARM.extab");
    let text_end = elf
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| s.address() + s.size())
        .max();
    Some(ExidxSections {
        exidx: exidx.data().ok()?,
        exidx_svma: exidx.address(),
        extab: extab.as_ref().and_then(|s| s.data().ok()),
        extab_svma: extab.as_ref().map_or(0, |s| s.address()),
        text_end,
        functions: &[],
    })
}

fn print_stats(name: &str, stats: &ExidxStats) {
    println!(
        "{name}: entries {} (inline {}, extab compact {}, generic {}, cantunwind {}), rows {}, \
         empty {}, odd starts {}, dropped {}",
        stats.entries,
        stats.inline,
        stats.extab,
        stats.generic,
        stats.cant_unwind,
        stats.rows,
        stats.empty,
        stats.odd_starts,
        stats.dropped_total()
    );
    for (reason, n) in stats.drops() {
        println!("  dropped {:<28} {n}", reason.name());
    }
}

/// One entry as `readelf -u` prints it.
#[derive(Debug, Default)]
struct ReadelfEntry {
    start: u64,
    cant_unwind: bool,
    in_extab: bool,
    compact_index: Option<u8>,
    personality: Option<u64>,
    bytes: Vec<u8>,
}

fn readelf() -> Option<String> {
    [armv7().tool("readelf"), "readelf".to_string()]
        .into_iter()
        .find(|r| tool_runs(r))
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// Parses `readelf -u` output (binutils' `decode_arm_unwind`).
fn readelf_entries(path: &Path) -> Option<Vec<ReadelfEntry>> {
    let out = Command::new(readelf()?).arg("-u").arg(path).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v: Vec<ReadelfEntry> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("0x") {
            // "0x2bc <leaf>: 0x80b0b0b0", "0x1e414: 0x1 [cantunwind]", "0x1e284: @0x106da8"
            let (addr, value) = rest.split_once(':')?;
            let addr = addr.split_whitespace().next()?;
            v.push(ReadelfEntry {
                start: u64::from_str_radix(addr, 16).ok()?,
                cant_unwind: value.contains("[cantunwind]"),
                in_extab: value.trim_start().starts_with('@'),
                ..ReadelfEntry::default()
            });
        } else if let Some(e) = v.last_mut() {
            let line = line.trim();
            if let Some(i) = line.strip_prefix("Compact model index:") {
                e.compact_index = i.trim().parse().ok();
            } else if let Some(p) = line.strip_prefix("Personality routine:") {
                e.personality = hex(p.split_whitespace().next()?);
            } else {
                for tok in line.split_whitespace() {
                    match hex(tok) {
                        Some(b) if tok.len() == 4 => e.bytes.push(b as u8),
                        _ => break,
                    }
                }
            }
        }
    }
    Some(v)
}

/// Compares every entry with `readelf -u`.
fn compare_with_readelf(path: &Path, s: &ExidxSections<'_>) {
    if readelf().is_none() {
        missing(&format!(
            "readelf (binutils-arm-linux-gnueabihf): {} not compared with readelf -u",
            path.display()
        ));
        return;
    }
    let theirs = readelf_entries(path)
        .unwrap_or_else(|| panic!("readelf -u {} failed or was not understood", path.display()));
    let ours = entries(s).unwrap();
    assert_eq!(ours.len(), theirs.len(), "{}", path.display());
    let mut compared = 0;
    for (o, t) in ours.iter().zip(&theirs) {
        assert_eq!(o.start, t.start, "{o:?} {t:?}");
        match o.model {
            Model::CantUnwind => assert!(t.cant_unwind, "{o:?} {t:?}"),
            Model::Inline => {
                assert!(!t.in_extab && t.compact_index == Some(0), "{o:?} {t:?}");
                assert_eq!(o.opcodes.as_ref().unwrap(), &t.bytes, "{t:?}");
                compared += 1;
            }
            Model::Compact { index } => {
                assert!(t.in_extab && t.compact_index == Some(index), "{o:?} {t:?}");
                if let Ok(bytes) = &o.opcodes {
                    assert_eq!(bytes, &t.bytes, "{t:?}");
                    compared += 1;
                }
            }
            Model::Generic { personality } => {
                assert!(
                    t.in_extab && t.personality == Some(personality),
                    "{o:?} {t:?}"
                );
            }
            Model::Invalid => panic!("invalid entry {o:?} {t:?}"),
        }
    }
    println!(
        "{}: {} entries agree with readelf -u ({compared} opcode lists compared)",
        path.display(),
        ours.len()
    );
}

#[test]
fn debian_armhf_libraries() {
    for name in ["libc.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libm.so.6"] {
        let path = PathBuf::from(armv7().libdir).join(name);
        let Ok(data) = std::fs::read(&path) else {
            missing(&format!(
                "{} (libc6-armhf-cross, libstdc++6-armhf-cross, libgcc-s1-armhf-cross)",
                path.display()
            ));
            continue;
        };
        let elf = object::File::parse(&*data).unwrap();
        let Some(s) = exidx_sections(&elf) else {
            assert_ne!(name, "libstdc++.so.6", "C++ code has unwind tables");
            println!("note: {name} has no .ARM.exidx");
            continue;
        };
        let (r, stats) = rows(&s).unwrap();
        print_stats(name, &stats);
        compare_with_readelf(&path, &s);
        assert!(stats.entries > 10, "{stats:?}");
        // Described functions, plus one "cannot unwind" row per CANTUNWIND entry with an end.
        let stops = r.iter().filter(|x| x.2 == Rule::cant_unwind()).count() as u64;
        assert_eq!(stats.rows + stops, r.len() as u64);
        assert!(stops <= stats.cant_unwind);
        assert_eq!(
            stats.rows + stats.cant_unwind + stats.empty + stats.dropped_total(),
            stats.entries
        );
        // At most 1% of the entries that describe a function are dropped.
        let described = stats.entries - stats.cant_unwind;
        assert!(stats.dropped_total() * 100 <= described, "{stats:?}");
        // Rows are sorted, disjoint, inside the code, and every rule is from EXIDX.
        let end = s.text_end.unwrap();
        for w in r.windows(2) {
            assert!(w[0].1 <= w[1].0, "{:x?}", w);
        }
        for &(start, stop, rule) in &r {
            assert!(start < stop && stop <= end, "{start:#x}..{stop:#x}");
            assert_eq!(rule.source, Source::Exidx);
        }
    }
}

const PROGRAM: &str = r#"
extern void ext(int *);
extern double extd(double);
int leaf(int a, int b) { return a * b + 3; }
int calls(int a) { int x[4] = {a, a + 1, a + 2, a + 3}; ext(x); return x[0] + x[3]; }
int vla(int n) { int buf[n]; ext(buf); return buf[0]; }
double fp(double a, double b) { double x = extd(a * b); double y = extd(x); return x + y + a; }
int big_frame(int a) { int big[2000]; ext(big); return big[a & 1023]; }
int many(int a, int b, int c, int d) {
    int x = a * b, y = c * d, z = a + d, w = b - c;
    ext(&x); ext(&y);
    return x + y + z + w + a + b + c + d;
}
__attribute__((noreturn)) void noret(int *p) { for (;;) ext(p); }
"#;

/// Compiles [`PROGRAM`] into a shared object with unwind tables.
fn compile(dir: &Path, mode: &str) -> Option<PathBuf> {
    let src = dir.join("t.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = dir.join(format!("t{mode}.so"));
    let status = Command::new(armv7().cc())
        .args([
            "-O2",
            mode,
            "-funwind-tables",
            "-shared",
            "-fPIC",
            "-nostdlib",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .status()
        .ok()?;
    assert!(status.success(), "{} {mode} failed", armv7().cc());
    Some(out)
}

fn rule_at(r: &[(u64, u64, Rule)], addr: u64) -> Option<Rule> {
    r.iter()
        .find(|&&(s, e, _)| s <= addr && addr < e)
        .map(|&(_, _, rule)| rule)
}

#[test]
fn compiled_functions_all_have_rows() {
    let dir = std::env::temp_dir().join(format!("unwind-arm-exidx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for mode in ["-marm", "-mthumb"] {
        let Some(path) = compile(&dir, mode) else {
            missing(&format!(
                "{} ({})",
                armv7().cc(),
                armv7().packages.join(", ")
            ));
            break;
        };
        let data = std::fs::read(&path).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let s = exidx_sections(&elf).unwrap();
        let (r, stats) = rows(&s).unwrap();
        print_stats(&format!("t{mode}.so"), &stats);
        compare_with_readelf(&path, &s);
        assert_eq!(stats.dropped_total(), 0);
        let mut functions = 0;
        for sym in elf.symbols() {
            if sym.kind() != SymbolKind::Text || sym.size() == 0 || !sym.is_definition() {
                continue;
            }
            functions += 1;
            let name = sym.name().unwrap();
            let thumb = sym.address() & 1 != 0;
            assert_eq!(thumb, mode == "-mthumb", "{name}");
            let start = sym.address() & !1;
            let rule = rule_at(&r, start).unwrap_or_else(|| panic!("{name}: no row"));
            // The whole function is covered by the same row.
            let last = start + sym.size() - 2;
            assert_eq!(rule_at(&r, last), Some(rule), "{name}");
            println!("  {name:<10} {start:#06x} {rule:?}");
            // What GCC's prologues imply.
            let base = match rule.cfa {
                CfaRule::RegOffset(base, _) => base,
                CfaRule::Expr(_) => panic!("{name}: {rule:?}"),
            };
            match name {
                "leaf" => assert_eq!(
                    rule,
                    Rule {
                        source: Source::Exidx,
                        ..Rule::default()
                    }
                ),
                "vla" => {
                    let fp = if mode == "-mthumb" { Reg::R7 } else { Reg::R11 };
                    assert_eq!(base, fp, "{name}: {rule:?}");
                    assert!(matches!(rule.pc, RegRule::Offset(_)), "{rule:?}");
                }
                "big_frame" => {
                    assert!(
                        matches!(rule.cfa, CfaRule::RegOffset(Reg::Sp, o) if o > 8000),
                        "{rule:?}"
                    );
                }
                _ => {
                    assert_eq!(base, Reg::Sp, "{name}: {rule:?}");
                    assert!(matches!(rule.pc, RegRule::Offset(_)), "{rule:?}");
                }
            }
        }
        assert_eq!(functions, 7, "{mode}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
