//! 32-bit ARM: DWARF CFI and EHABI tables loaded together.
//!
//! - Small programs are compiled at test time with `arm-linux-gnueabihf-gcc` (ARM and Thumb,
//!   with and without frame pointers, with and without `-g`) and loaded with the ARM loader:
//!   every function has a rule at every instruction, and DWARF wins where an FDE exists.
//! - A gimli differential: every row of their `.debug_frame` (and of random CFI), unwound once
//!   with our rule (`Arm::step_rule`) and once by evaluating gimli's row, on a
//!   synthetic stack, must give the same caller registers, or our table must have dropped it.
//! - Debian's armhf `libc.so.6` and `libstdc++.so.6` load without errors (statistics printed).
//!
//! A missing cross compiler or armhf library fails the test under CI and is a visible skip
//! elsewhere (`unwind_test_support::missing`; `scripts/setup` installs them).

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

mod support;

use support::compare::{self, DiffArch, Slice, Summary};

use gimli::Arm as Dwarf;
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, LittleEndian, Register, RegisterRule,
    UnwindSection, UnwindTableRow,
};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use unwind_core::arm::{RegRule, Regs, Rule, Source};
use unwind_core::memory::Memory;
use unwind_core::table::ModuleRules;
use unwind_core::{Arch, Arm};
use unwind_core::{RuleTable, RuleTableBuilder, StackImage};
use unwind_dwarf::{rules_from_sections, CfiSections, LoadStats, LoadedRules};
use unwind_test_support::missing;
use unwind_test_support::target::{self, Target};

/// armv7's row of the targets table: the cross compiler, Debian's armhf libraries.
fn armv7() -> &'static Target {
    target::by_name("armv7")
}

/// The cross C compiler, and what installs it (for a missing-prerequisite message).
fn gcc() -> String {
    armv7().cc()
}

fn gcc_missing() -> String {
    format!("{} ({})", gcc(), armv7().packages.join(", "))
}

// ---------------------------------------------------------------------------------------------
// Compiling test programs.

const PROGRAM: &str = r#"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }

__attribute__((noinline)) int calls(int x) {
    char buf[64];
    snprintf(buf, sizeof buf, "%d", x);
    return leaf(atoi(buf)) + 1;
}

__attribute__((noinline)) int vla(int n) {
    volatile int a[n];
    for (int i = 0; i < n; i++) a[i] = calls(i);
    return a[n - 1];
}

__attribute__((noinline)) int aligned(int x) {
    char buf[64] __attribute__((aligned(64)));
    memset(buf, x, sizeof buf);
    return calls(buf[3]);
}

__attribute__((noinline)) int many(int a, int b, int c, int d) {
    int e = calls(a), f = calls(b), g = calls(c), h = calls(d);
    int i = calls(e + f), j = calls(g + h), k = calls(i ^ j);
    return a + b + c + d + e + f + g + h + i + j + k;
}

__attribute__((noinline)) int vsum(int n, ...) {
    va_list ap;
    va_start(ap, n);
    int s = 0;
    for (int i = 0; i < n; i++) s += va_arg(ap, int);
    va_end(ap);
    return s + leaf(s);
}

__attribute__((noinline)) double vfp(double x, double y) {
    double a = x * y, b = x + y;
    a += calls((int)a);
    b += calls((int)b);
    return a * b + x / y;
}

__attribute__((noinline)) int recurse(int n) { return n <= 0 ? calls(n) : recurse(n - 1) + n; }

__attribute__((noinline, noreturn)) void die(int code) {
    fprintf(stderr, "dying %d\n", code);
    exit(code);
}

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 5) die(argc);
    int r = vla(argc + 3) + aligned(argc) + many(argc, 2, 3, 4) + vsum(3, 1, 2, argc);
    r += (int)vfp(argc, 2.5) + recurse(argc + 4);
    return r & 1;
}
"#;

/// The functions of [`PROGRAM`].
const FUNCTIONS: [&str; 10] = [
    "leaf", "calls", "vla", "aligned", "many", "vsum", "vfp", "recurse", "die", "main",
];

fn have_gcc() -> bool {
    unwind_test_support::tool_runs(&gcc())
}

/// Compiles [`PROGRAM`] with `flags` and `-fasynchronous-unwind-tables` into a binary named
/// after them and `tag` (each test its own, as tests run in parallel).
fn compile(tag: &str, flags: &[&str]) -> PathBuf {
    let mut all = flags.to_vec();
    all.push("-fasynchronous-unwind-tables");
    compile_exactly(tag, &all)
}

/// Compiles [`PROGRAM`] with `flags` only.
fn compile_exactly(tag: &str, flags: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("unwind-dwarf-arm");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{tag}.c"));
    std::fs::write(&src, PROGRAM).unwrap();
    let name: String = flags
        .iter()
        .map(|f| f.trim_start_matches('-'))
        .collect::<Vec<_>>()
        .join("_");
    let out = dir.join(format!("{tag}_{name}"));
    let status = Command::new(gcc())
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success(), "{} {flags:?} failed", gcc());
    out
}

/// A copy of `file` without its symbol tables (`.symtab`; an executable has no `.dynsym`
/// functions), as distributions ship binaries.
fn strip(file: &Path) -> PathBuf {
    let out = file.with_extension("stripped");
    let status = Command::new(armv7().tool("strip"))
        .arg("-o")
        .arg(&out)
        .arg(file)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "{} {}",
        armv7().tool("strip"),
        file.display()
    );
    out
}

/// The variants compiled: ARM and Thumb, with and without frame pointers.
const VARIANTS: [&[&str]; 5] = [
    &["-O2", "-marm"],
    &["-O2", "-mthumb"],
    &["-O2", "-marm", "-fno-omit-frame-pointer"],
    &["-O2", "-mthumb", "-fno-omit-frame-pointer"],
    &["-O0", "-mthumb"],
];

fn table(rules: ModuleRules<Rule>) -> RuleTable<Rule> {
    let mut tb = RuleTableBuilder::new(NonZeroU32::new(1).unwrap());
    tb.add(0, u64::MAX, 0, "module".into(), Arc::new(rules));
    tb.build().unwrap()
}

/// `(name, start, end)` of every function symbol of `elf` with a size (Thumb bit cleared).
fn functions(elf: &object::File<'_>) -> Vec<(String, u64, u64)> {
    let mut v: Vec<_> = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.is_definition())
        .map(|s| {
            let start = s.address() & !1;
            (s.name().unwrap_or("?").to_string(), start, start + s.size())
        })
        .collect();
    v.sort_by_key(|f| (f.1, f.2));
    v.dedup_by_key(|f| (f.1, f.2));
    v
}

fn print_stats(what: &str, loaded: &LoadedRules<Arm>) {
    let s: &LoadStats<Arm> = &loaded.stats;
    let rows = loaded.rules.rows();
    println!(
        "{what}: {} extents, {} bytes ({:.1} bytes/extent), {} distinct rules",
        rows,
        loaded.rules.bytes(),
        loaded.rules.bytes() as f64 / rows.max(1) as f64,
        loaded.rules.dictionary().len(),
    );
    println!(
        "  DWARF: {} FDEs ({} outside code), {} rows, dropped {} {:?}, {} PLT rows, bad entries {}",
        s.cfi.fdes,
        s.cfi.fdes_outside_code,
        s.cfi.rows,
        s.cfi.dropped_total(),
        s.cfi
            .drops()
            .map(|(r, n)| format!("{}={n}", r.name()))
            .collect::<Vec<_>>(),
        s.cfi.plt_rows,
        s.cfi.bad_entries,
    );
    match &s.arch.exidx {
        Some(e) => println!(
            "  EXIDX: {} entries ({} inline, {} in .ARM.extab, {} generic, {} can't-unwind), {} rows, dropped {} {:?}; rows used {} (partly {}), shadowed by DWARF {}, outside code {}, ranges pushed {}",
            e.entries,
            e.inline,
            e.extab,
            e.generic,
            e.cant_unwind,
            e.rows,
            e.dropped_total(),
            e.drops()
                .map(|(r, n)| format!("{}={n}", r.name()))
                .collect::<Vec<_>>(),
            s.arch.exidx_rows_used,
            s.arch.exidx_rows_partial,
            s.arch.exidx_rows_shadowed,
            s.arch.exidx_rows_outside_code,
            s.arch.exidx_ranges,
        ),
        None => println!("  no .ARM.exidx"),
    }
    println!(
        "  from instructions: {} EXIDX rows (where they agree with the entry; {} do not), {} functions no table describes, {} CANTUNWIND entries ({} bytes confirmed by their exits)",
        s.arch.exidx_rows_from_instructions,
        s.arch.exidx_rows_disagreeing,
        s.arch.functions_from_instructions,
        s.arch.cant_unwind_from_instructions,
        s.arch.cant_unwind_bytes_from_instructions,
    );
    println!(
        "  table: {} rows in, {} merged, {} overlapping, {} empty",
        s.cfi.table.rows_in, s.cfi.table.merged, s.cfi.table.overlapping, s.cfi.table.empty
    );
}

/// The FDE ranges of a `.debug_frame`.
fn fde_ranges(data: &[u8]) -> Vec<(u64, u64)> {
    let mut s = DebugFrame::new(data, LittleEndian);
    s.set_address_size(4);
    let bases = BaseAddresses::default();
    let mut entries = s.entries(&bases);
    let mut out = Vec::new();
    while let Ok(Some(e)) = entries.next() {
        if let CieOrFde::Fde(p) = e {
            let fde = p.parse(DebugFrame::cie_from_offset).unwrap();
            out.push((fde.initial_address(), fde.initial_address() + fde.len()));
        }
    }
    out.sort_unstable();
    out
}

#[test]
fn compiled_programs_have_rules_everywhere() {
    if !have_gcc() {
        missing(&gcc_missing());
        return;
    }
    for variant in VARIANTS {
        for debug in [false, true] {
            let mut flags = variant.to_vec();
            if debug {
                flags.push("-g");
            }
            let path = compile("rules", &flags);
            let loaded = unwind_dwarf::load_elf_file::<Arm>(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            print_stats(&format!("{flags:?}"), &loaded);
            let data = std::fs::read(&path).unwrap();
            let elf = object::File::parse(&*data).unwrap();
            let fdes = match elf.section_by_name(".debug_frame") {
                Some(s) => fde_ranges(&s.uncompressed_data().unwrap()),
                None => Vec::new(),
            };
            assert_eq!(
                debug,
                !fdes.is_empty(),
                "{flags:?}: .debug_frame with -g only"
            );
            let s = &loaded.stats;
            let exidx = s.arch.exidx.as_ref().expect("gcc emits .ARM.exidx");
            assert!(exidx.entries > 0);
            assert_eq!(s.cfi.bad_entries, 0);
            assert_eq!(s.cfi.dropped_total(), 0, "{flags:?}: {:?}", s.cfi);
            if debug {
                assert!(
                    s.arch.exidx_rows_shadowed + s.arch.exidx_rows_partial > 0,
                    "{flags:?}"
                );
            } else {
                // Without -g, EXIDX describes every function.
                assert_eq!(s.arch.exidx_rows_shadowed + s.arch.exidx_rows_partial, 0);
                assert!(s.arch.exidx_rows_used > 0, "{flags:?}");
            }
            assert!(s.cfi.plt_rows > 0, "{flags:?}: .plt rows");

            let rules = &loaded.rules;
            let all = functions(&elf);
            let data = unwind_dwarf::ArmCode::read(&elf, None).data;
            let mut checked = 0;
            for name in FUNCTIONS {
                let &(_, start, end) = all
                    .iter()
                    .find(|f| f.0 == name)
                    .unwrap_or_else(|| panic!("{flags:?}: no symbol {name}"));
                let in_fde = fdes.iter().any(|&(s, e)| s <= start && end <= e);
                assert_eq!(in_fde, debug, "{flags:?}: {name} has an FDE with -g only");
                // Every instruction (Thumb instructions are 2-byte aligned, ARM ones 4; literal
                // pools are not instructions, and only GCC's FDEs describe them). Without
                // -g: the EXIDX entry's rule, or the function's instructions where they agree
                // with it; and GCC gives the noreturn `die` no index entry in ARM code, so its
                // rows come from its instructions.
                for a in (start..end).step_by(2) {
                    if !debug && data.iter().any(|&(s, e)| s <= a && a < e) {
                        continue;
                    }
                    let rule = rules
                        .lookup(a)
                        .unwrap_or_else(|| panic!("{flags:?}: no rule at {a:#x} in {name}"));
                    let ok = match debug {
                        true => rule.source == Source::Dwarf,
                        false => matches!(rule.source, Source::Exidx | Source::Instructions),
                    };
                    assert!(ok, "{flags:?}: {name} at {a:#x}: {rule:?}");
                    checked += 1;
                }
            }
            // Every address an FDE describes has its DWARF rule.
            for &(s, e) in &fdes {
                for a in (s..e).step_by(2) {
                    assert_eq!(
                        rules.lookup(a).map(|r| r.source),
                        Some(Source::Dwarf),
                        "{flags:?}: FDE {s:#x}..{e:#x} at {a:#x}"
                    );
                }
            }
            // The other functions (from crt files, without FDEs, mostly without a size):
            // report which have a rule.
            let (mut covered, mut others) = (0, 0);
            for sym in elf.symbols() {
                let name = sym.name().unwrap_or("");
                if sym.kind() == SymbolKind::Text
                    && sym.is_definition()
                    && !FUNCTIONS.contains(&name)
                {
                    others += 1;
                    covered += usize::from(rules.lookup(sym.address() & !1).is_some());
                }
            }
            println!(
                "  {checked} addresses of the test functions checked; {covered} of {others} other functions have a rule at their start"
            );
        }
    }
}

#[test]
fn programs_built_without_unwind_tables_get_rules_from_their_instructions() {
    // Debian's armhf gcc defaults: no -funwind-tables, so the program's only index entry is
    // crt1's `_start` (EXIDX_CANTUNWIND), which used to cover every function after it and stop
    // every walk there. Its symbol ends it (`_start` keeps its stop), and the program's
    // functions get rows from their instructions.
    if !have_gcc() {
        missing(&gcc_missing());
        return;
    }
    for isa in ["-mthumb", "-marm"] {
        let path = compile_exactly("ordinary", &["-O2", isa]);
        let loaded = unwind_dwarf::load_elf_file::<Arm>(&path).unwrap();
        print_stats(isa, &loaded);
        let data = std::fs::read(&path).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let exidx = loaded.stats.arch.exidx.as_ref().expect(".ARM.exidx");
        assert_eq!(exidx.cant_unwind, 1, "{isa}: {exidx:?}");
        assert_eq!(exidx.clipped_cant_unwind, 1, "{isa}: {exidx:?}");
        assert!(exidx.bytes_without_entry > 0, "{isa}: {exidx:?}");
        assert!(loaded.stats.arch.functions_from_instructions >= FUNCTIONS.len() as u64);
        let start = elf
            .symbols()
            .find(|s| s.name() == Ok("_start"))
            .expect("_start")
            .address()
            & !1;
        assert_eq!(loaded.rules.lookup(start), Some(Rule::cant_unwind()));
        let all = functions(&elf);
        for name in FUNCTIONS {
            let &(_, lo, hi) = all.iter().find(|f| f.0 == name).unwrap();
            assert_eq!(
                loaded.rules.lookup(lo),
                Some(Rule {
                    source: Source::Instructions,
                    ..Rule::default()
                }),
                "{isa}: {name}'s first instruction: nothing pushed, the return address in LR"
            );
            for a in (lo..hi).step_by(2) {
                let rule = loaded.rules.lookup(a);
                assert!(
                    rule.is_none_or(|r| r.source == Source::Instructions),
                    "{isa}: {name} at {a:#x}: {rule:?}"
                );
            }
        }
    }
}

/// A rule, in the terms two sources of the same function can be compared in.
fn comparable(r: &Rule) -> Rule {
    Rule {
        source: Source::Dwarf,
        ..*r
    }
}

#[test]
fn rules_from_instructions_match_gcc_cfi() {
    // The same program compiled twice, once with -g: the code is the same, and GCC's
    // `.debug_frame` says what the frame is at every instruction. Every address where the
    // build without tables has a rule read from its instructions must have GCC's rule, except
    // where GCC's CFA is the frame pointer (ours is SP while SP is known: both are right).
    if !have_gcc() {
        missing(&gcc_missing());
        return;
    }
    let mut report = Vec::new();
    let mut cant_unwind = 0;
    for variant in VARIANTS {
        // No tables; EHABI tables; and -fexceptions, where GCC marks each function that cannot
        // throw (all of them here: glibc declares its functions nothrow) `.cantunwind`, whose
        // rows come from its instructions where its exits confirm them.
        for tables in [None, Some("-funwind-tables"), Some("-fexceptions")] {
            let mut flags = variant.to_vec();
            flags.extend(tables);
            let plain = compile_exactly("differential", &flags);
            flags.push("-g");
            let debug = compile_exactly("differential", &flags);
            flags.pop();
            let gcc = unwind_dwarf::load_elf_file::<Arm>(&debug).unwrap();
            // -fexceptions: also stripped, as libraries ship. The linker merges neighbouring
            // `.cantunwind` functions into one entry, and without symbols the functions inside it
            // start where calls land (`ArmCode::call_targets`).
            let stripped = (tables == Some("-fexceptions")).then(|| strip(&plain));
            for file in std::iter::once(&plain).chain(&stripped) {
                let ours = unwind_dwarf::load_elf_file::<Arm>(file).unwrap();
                if tables == Some("-fexceptions") {
                    cant_unwind += ours.stats.arch.cant_unwind_from_instructions;
                }
                let data = std::fs::read(&plain).unwrap();
                let elf = object::File::parse(&*data).unwrap();
                // Literal pools (`$d`) are not instructions: GCC's FDE covers them, we need not.
                let data = unwind_dwarf::ArmCode::read(&elf, None).data;
                let (mut same, mut by_fp, mut exidx, mut differ) = (0, 0, 0, Vec::new());
                for (name, lo, hi) in functions(&elf) {
                    if !FUNCTIONS.contains(&name.as_str()) {
                        continue;
                    }
                    for a in (lo..hi).step_by(2) {
                        if data.iter().any(|&(s, e)| s <= a && a < e) {
                            continue;
                        }
                        // A Thumb `nop` after a function's last return pads it before its literal
                        // pool: never executed, and GCC's CFI there is whatever it last said.
                        let text = elf.section_by_name(".text").unwrap();
                        let at = (a - text.address()) as usize;
                        if text.data().unwrap().get(at..at + 2) == Some(&[0x00, 0xbf][..]) {
                            continue;
                        }
                        let (Some(o), Some(g)) = (ours.rules.lookup(a), gcc.rules.lookup(a)) else {
                            differ.push(format!("{name}+{:#x}: a rule missing", a - lo));
                            continue;
                        };
                        assert_eq!(g.source, Source::Dwarf, "{flags:?}: {name} at {a:#x}");
                        if o.source != Source::Instructions {
                            exidx += 1;
                        } else if comparable(&o) == comparable(&g) {
                            same += 1;
                        } else if matches!(g.cfa, unwind_core::arm::CfaRule::RegOffset(r, _) if r != unwind_core::arm::Reg::Sp)
                        {
                            by_fp += 1;
                        } else {
                            differ.push(format!("{name}+{:#x}: ours {o:?}, gcc {g:?}", a - lo));
                        }
                    }
                }
                report.push(format!(
                "{flags:?}{}: {same} addresses the same, {by_fp} with GCC's CFA by the frame pointer, {exidx} left to EXIDX, {} different",
                if file == &plain { "" } else { " stripped" },
                differ.len()
            ));
                for d in differ.iter().take(8) {
                    report.push(format!("    {d}"));
                }
            }
        }
    }
    println!("{}", report.join("\n"));
    let differ: Vec<_> = report.iter().filter(|l| l.starts_with("    ")).collect();
    assert!(differ.is_empty(), "{}", report.join("\n"));
    // The -fexceptions builds' `.cantunwind` functions were read (and compared above).
    assert!(cant_unwind >= VARIANTS.len() as u64, "{cant_unwind}");
}

// ---------------------------------------------------------------------------------------------
// The gimli differential.

/// Synthetic stack: `[STACK_LO, STACK_HI)`, every 4-byte word derived from its address.
const STACK_LO: u32 = 0x7f00_0000;
const STACK_HI: u32 = 0x7f01_0000;

fn word(a: u32) -> u32 {
    a ^ 0x0a5a_0000
}

fn stack_bytes() -> Vec<u8> {
    (STACK_LO..STACK_HI)
        .step_by(4)
        .flat_map(|a| word(a).to_le_bytes())
        .collect()
}

fn regs_at(pc: u32) -> Regs {
    Regs {
        pc,
        lr: 0x1234_5679,
        sp: 0x7f00_1000,
        r12: 0x7f00_2000,
        r11: 0x7f00_1c00,
        r7: 0x7f00_1800,
    }
}

fn reg_value(r: Register, regs: &Regs) -> Option<u32> {
    Some(match r {
        Dwarf::R7 => regs.r7,
        Dwarf::R11 => regs.r11,
        Dwarf::R12 => regs.r12,
        Dwarf::SP => regs.sp,
        Dwarf::LR => regs.lr,
        Dwarf::PC => regs.pc,
        _ => return None,
    })
}

type Expected = compare::Expected<Regs>;

/// The result of evaluating one value for gimli's row.
type Val = support::Val<u32>;

/// Evaluates a DWARF expression with gimli against the synthetic registers and stack.
fn gimli_expr(
    expr: gimli::Expression<Slice<'_>>,
    encoding: gimli::Encoding,
    regs: &Regs,
    image: &StackImage<'_>,
    initial: Option<u32>,
) -> Val {
    let reg = |r| reg_value(r, regs).map(u64::from);
    match support::gimli_expr(
        expr,
        encoding,
        reg,
        image,
        initial.map(u64::from),
        0xffff_ffff,
    ) {
        // Masked to 32 bits by the evaluation.
        support::Val::Ok(v) => Val::Ok(v as u32),
        support::Val::ReadFailed => Val::ReadFailed,
        support::Val::MustDrop(why) => Val::MustDrop(why),
        support::Val::Error(e) => Val::Error(e),
    }
}

/// Recovers a caller register from `rule`; `missing` is the value for "no rule" (`None`:
/// must drop) and `same` the callee's value (`None`: "same value" must drop).
#[allow(clippy::too_many_arguments)]
fn gimli_reg<'a, S: UnwindSection<Slice<'a>>>(
    rule: Option<RegisterRule<usize>>,
    missing: Option<u32>,
    same: Option<u32>,
    cfa: u32,
    section: &S,
    encoding: gimli::Encoding,
    regs: &Regs,
    image: &StackImage<'_>,
) -> Val {
    let expr = |e: &gimli::UnwindExpression<usize>| match e.get(section) {
        Ok(x) => gimli_expr(x, encoding, regs, image, Some(cfa)),
        Err(e) => Val::Error(e),
    };
    let read = |a: u32| match image.read_u32(u64::from(a)) {
        Some(v) => Val::Ok(v),
        None => Val::ReadFailed,
    };
    match rule {
        None => missing.map_or(Val::MustDrop("no rule"), Val::Ok),
        Some(RegisterRule::Undefined) => Val::Ok(0),
        Some(RegisterRule::SameValue) => same.map_or(Val::MustDrop("same value"), Val::Ok),
        Some(RegisterRule::Offset(o)) => read(cfa.wrapping_add(o as u32)),
        Some(RegisterRule::ValOffset(o)) => Val::Ok(cfa.wrapping_add(o as u32)),
        Some(RegisterRule::Register(r)) => {
            reg_value(r, regs).map_or(Val::MustDrop("untracked register rule"), Val::Ok)
        }
        Some(RegisterRule::Expression(e)) => match expr(&e) {
            Val::Ok(a) => read(a),
            other => other,
        },
        Some(RegisterRule::ValExpression(e)) => expr(&e),
        Some(RegisterRule::Architectural) => Val::MustDrop("architectural rule"),
        Some(RegisterRule::Constant(_)) => Val::MustDrop("constant rule"),
    }
}

impl DiffArch for Arm {
    fn regs_at(pc: u64) -> Regs {
        regs_at(pc as u32)
    }

    /// Evaluates gimli's `row` directly, with the ARM conventions: the return address is the RA
    /// column's rule (no rule or "same value": the RA register's value), the caller's LR has the
    /// same value, SP is the CFA unless r13 has a rule, r7, r11 and r12 are unchanged unless they
    /// have one. Failures are reported in the order our unwinder evaluates.
    fn expected<'a, S: UnwindSection<Slice<'a>>>(
        row: &UnwindTableRow<usize>,
        cie: &gimli::CommonInformationEntry<Slice<'a>>,
        section: &S,
        regs: &Regs,
        image: &StackImage<'_>,
        signal: bool,
    ) -> Expected {
        let enc = cie.encoding();
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => match *register {
                Dwarf::R7 | Dwarf::R11 | Dwarf::R12 | Dwarf::SP => Val::Ok(
                    reg_value(*register, regs)
                        .unwrap()
                        .wrapping_add(*offset as u32),
                ),
                _ => Val::MustDrop("CFA on an untracked register"),
            },
            CfaRule::Expression(e) => match e.get(section) {
                Ok(x) => gimli_expr(x, enc, regs, image, None),
                Err(e) => Val::Error(e),
            },
        };
        let cfa_value = match cfa {
            Val::Ok(v) => v,
            _ => 0,
        };
        let ra_column = cie.return_address_register();
        let unchanged = match ra_column {
            Dwarf::R7 | Dwarf::R11 | Dwarf::R12 | Dwarf::LR => reg_value(ra_column, regs),
            _ => None,
        };
        let ra_rule = row.register(ra_column);
        let ra_undefined = matches!(ra_rule, Some(RegisterRule::Undefined));
        let reg = |rule, missing, same| {
            gimli_reg(rule, missing, same, cfa_value, section, enc, regs, image)
        };
        let ra = reg(ra_rule, unchanged, unchanged);
        let sp = reg(row.register(Dwarf::SP), Some(cfa_value), Some(regs.sp));
        let r12 = reg(row.register(Dwarf::R12), Some(regs.r12), Some(regs.r12));
        let r11 = reg(row.register(Dwarf::R11), Some(regs.r11), Some(regs.r11));
        let r7 = reg(row.register(Dwarf::R7), Some(regs.r7), Some(regs.r7));
        if let Some(e) = compare::not_a_caller(&[&cfa, &ra, &sp, &r12, &r11, &r7], ra_undefined) {
            return e;
        }
        let get = |v: &Val| match v {
            Val::Ok(x) => *x,
            _ => unreachable!(),
        };
        Expected::Caller {
            regs: Regs {
                pc: get(&ra),
                lr: get(&ra),
                sp: get(&sp),
                r12: get(&r12),
                r11: get(&r11),
                r7: get(&r7),
            },
            exact: signal,
        }
    }

    /// r7, r11 or r12.
    fn cfa_on_frame_pointer(register: Register) -> bool {
        register != Dwarf::SP
    }

    /// Instructions are halfword-aligned (Thumb); the row's last halfword.
    fn last_instruction(end: u64) -> u64 {
        (end - 1) & !1
    }

    fn not_dwarf(rule: &Rule) -> bool {
        rule.source != Source::Dwarf
    }
}

/// Compares every row of every FDE of `section` with our `table` on the synthetic stack
/// ([`compare::compare_section`]); mismatches are described in `mismatches`.
fn compare_section<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    bases: &BaseAddresses,
    table: &RuleTable<Rule>,
    mismatches: &mut Vec<String>,
) -> Summary {
    let bytes = stack_bytes();
    let image = StackImage::new(u64::from(STACK_LO), &bytes);
    compare::compare_section::<Arm, S>(section, bases, table, &image, &[], mismatches).0
}

#[test]
fn compiled_debug_frames_match_gimli() {
    if !have_gcc() {
        missing(&gcc_missing());
        return;
    }
    let mut total = Summary::default();
    for variant in VARIANTS {
        let mut flags = variant.to_vec();
        flags.push("-g");
        let path = compile("differential", &flags);
        let loaded = unwind_dwarf::load_elf_file::<Arm>(&path).unwrap();
        let stats = loaded.stats.clone();
        let table = table(loaded.rules);
        let data = std::fs::read(&path).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let debug_frame = elf
            .section_by_name(".debug_frame")
            .unwrap()
            .uncompressed_data()
            .unwrap();
        let mut section = DebugFrame::new(&debug_frame, LittleEndian);
        section.set_address_size(4);
        let mut mismatches = Vec::new();
        let s = compare_section(&section, &BaseAddresses::default(), &table, &mut mismatches);
        println!(
            "{flags:?}: {} FDEs, {} rows, {} compared, {} identical, {} without a rule ({} must drop), CFA on r7/r11/r12 in {} rows, {} rows ending the stack",
            s.fdes, s.rows, s.compared, s.identical, s.ours_none, s.ours_none_must_drop, s.cfa_fp, s.end_of_stack
        );
        compare::check_mismatches(&format!("{flags:?}"), mismatches);
        assert_eq!(s.gimli_errors, 0);
        assert_eq!(s.not_dwarf, 0, "{flags:?}: an FDE's row looked up as EXIDX");
        assert_eq!(s.rows, stats.cfi.rows);
        assert!(s.ours_none <= stats.cfi.dropped_total() + stats.cfi.table.overlapping);
        total.add(&s);
    }
    assert!(total.compared > 100, "{total:?}");
    assert!(total.cfa_fp > 10, "frame-pointer CFAs: {total:?}");
}

// ---------------------------------------------------------------------------------------------
// Random CFI, compared with gimli like the compiled programs.

use proptest::prelude::*;
use support::{sleb, uleb};

/// The registers the generated CFI talks about: the tracked ones and (untracked) r4.
fn arb_reg() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => Just(13u8),
        3 => Just(14u8),
        2 => Just(11u8),
        2 => Just(7u8),
        1 => Just(12u8),
        1 => Just(15u8),
        1 => Just(4u8),
    ]
}

fn arb_expr_op() -> impl Strategy<Value = Vec<u8>> {
    let small = prop_oneof![
        -32i64..32,
        (-64i64..64).prop_map(|v| v * 4),
        any::<i32>().prop_map(i64::from)
    ];
    prop_oneof![
        // DW_OP_breg<n> offset
        4 => (arb_reg(), small.clone()).prop_map(|(r, o)| {
            let mut v = vec![0x70 + r];
            sleb(o, &mut v);
            v
        }),
        3 => (0u8..32).prop_map(|n| vec![0x30 + n]),
        1 => any::<u8>().prop_map(|n| vec![0x08, n]),
        1 => any::<u8>().prop_map(|n| vec![0x09, n]),
        1 => any::<u32>().prop_map(|n| {
            let mut v = vec![0x0c];
            v.extend(n.to_le_bytes());
            v
        }),
        1 => small.clone().prop_map(|n| {
            let mut v = vec![0x11];
            sleb(n, &mut v);
            v
        }),
        2 => (0u64..512).prop_map(|n| {
            let mut v = vec![0x23];
            uleb(n, &mut v);
            v
        }),
        // DW_OP_deref; deref_size 4 and 2
        3 => Just(vec![0x06]),
        1 => Just(vec![0x94, 0x04]),
        1 => Just(vec![0x94, 0x02]),
        8 => prop::sample::select(vec![
            0x22u8, 0x1c, 0x1e, 0x1a, 0x21, 0x27, 0x24, 0x25, 0x26, 0x1f, 0x20, 0x2a, 0x2b,
            0x2c, 0x2d, 0x29, 0x2e, 0x12, 0x13, 0x14, 0x16, 0x96, 0x1b, 0x1d, 0x19, 0x17,
            0x54, 0x9c,
        ])
        .prop_map(|op| vec![op]),
        1 => (0u8..3).prop_map(|i| vec![0x15, i]),
    ]
}

fn arb_expr_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(arb_expr_op(), 1..8).prop_map(|ops| ops.concat())
}

/// One call-frame instruction (data alignment -4, code alignment 2).
fn arb_cfa_insn() -> impl Strategy<Value = Vec<u8>> {
    let with_expr = |op: u8| {
        (arb_reg(), arb_expr_bytes()).prop_map(move |(r, e)| {
            let mut v = vec![op, r];
            uleb(e.len() as u64, &mut v);
            v.extend(e);
            v
        })
    };
    prop_oneof![
        16 => (1u8..8).prop_map(|d| vec![0x40 | d]),
        2 => (arb_reg(), 0u64..300).prop_map(|(r, o)| {
            let mut v = vec![0x0c, r];
            uleb(o, &mut v);
            v
        }),
        1 => (arb_reg(), -40i64..40).prop_map(|(r, o)| {
            let mut v = vec![0x12, r];
            sleb(o, &mut v);
            v
        }),
        3 => prop_oneof![0u64..300, any::<u32>().prop_map(u64::from)].prop_map(|o| {
            let mut v = vec![0x0e];
            uleb(o, &mut v);
            v
        }),
        1 => arb_reg().prop_map(|r| vec![0x0d, r]),
        3 => (arb_reg(), 0u64..40).prop_map(|(r, n)| {
            let mut v = vec![0x80 | r];
            uleb(n, &mut v);
            v
        }),
        1 => (arb_reg(), -40i64..40).prop_map(|(r, n)| {
            let mut v = vec![0x11, r];
            sleb(n, &mut v);
            v
        }),
        1 => (arb_reg(), 0u64..40).prop_map(|(r, n)| {
            let mut v = vec![0x14, r];
            uleb(n, &mut v);
            v
        }),
        1 => arb_reg().prop_map(|r| vec![0xc0 | r]),
        1 => arb_reg().prop_map(|r| vec![0x07, r]),
        1 => arb_reg().prop_map(|r| vec![0x08, r]),
        2 => (arb_reg(), arb_reg()).prop_map(|(a, b)| vec![0x09, a, b]),
        1 => Just(vec![0x0a]),
        1 => Just(vec![0x0b]),
        2 => arb_expr_bytes().prop_map(|e| {
            let mut v = vec![0x0f];
            uleb(e.len() as u64, &mut v);
            v.extend(e);
            v
        }),
        2 => with_expr(0x10),
        2 => with_expr(0x16),
        1 => Just(vec![0x00]),
    ]
}

/// A 32-bit `.eh_frame`: a CIE (`zR`, pcrel|sdata4, return address column `ra`, optionally
/// `S`, GCC's ARM initial instructions `def_cfa r13, 0`) and one FDE at 0x1000 of 0x100
/// bytes with `insns`.
fn synthetic_eh_frame(svma: u64, ra: u8, signal: bool, insns: &[u8]) -> Vec<u8> {
    let mut cie = Vec::new();
    cie.extend(0u32.to_le_bytes());
    cie.push(1);
    cie.extend(if signal { &b"zRS\0"[..] } else { &b"zR\0"[..] });
    cie.push(2); // code alignment
    cie.push(0x7c); // data alignment -4
    cie.push(ra);
    cie.push(1);
    cie.push(0x1b);
    cie.extend([0x0c, 13, 0]);
    let mut out = Vec::new();
    out.extend((cie.len() as u32).to_le_bytes());
    out.extend(&cie);
    let ptr_field = out.len() + 4;
    let mut fde = Vec::new();
    fde.extend((ptr_field as u32).to_le_bytes());
    let pc_field = svma as i64 + ptr_field as i64 + 4;
    fde.extend(((0x1000 - pc_field) as i32).to_le_bytes());
    fde.extend(0x100u32.to_le_bytes());
    fde.push(0);
    fde.extend(insns);
    out.extend((fde.len() as u32).to_le_bytes());
    out.extend(&fde);
    out.extend(0u32.to_le_bytes());
    out
}

const SYNTHETIC_SVMA: u64 = 0x20_0000;

/// Mostly drops the instructions gimli would refuse (see `gimli_differential.rs`).
fn sanitize(pieces: Vec<Vec<u8>>, keep_invalid: bool) -> Vec<u8> {
    if keep_invalid {
        return pieces.concat();
    }
    let mut out = Vec::new();
    let mut cfa_is_expr = false;
    let mut saved: Vec<bool> = Vec::new();
    for p in pieces {
        match p[0] {
            0x0a => saved.push(cfa_is_expr),
            0x0b => match saved.pop() {
                Some(e) => cfa_is_expr = e,
                None => continue,
            },
            0x0d | 0x0e if cfa_is_expr => continue,
            0x0c | 0x12 => cfa_is_expr = false,
            0x0f => cfa_is_expr = true,
            _ => {}
        }
        out.extend(p);
    }
    out
}

fn arb_synthetic() -> impl Strategy<Value = (Vec<u8>, u8, bool)> {
    (
        proptest::collection::vec(arb_cfa_insn(), 0..40),
        prop::bool::weighted(0.1),
        prop_oneof![8 => Just(14u8), 1 => Just(12u8), 1 => Just(15u8), 1 => Just(4u8)],
        prop::bool::weighted(0.2),
    )
        .prop_map(|(pieces, keep, ra, signal)| (sanitize(pieces, keep), ra, signal))
}

fn synthetic_case(insns: &[u8], ra: u8, signal: bool) -> (Summary, Vec<String>, LoadStats<Arm>) {
    let data = synthetic_eh_frame(SYNTHETIC_SVMA, ra, signal, insns);
    let sections = CfiSections {
        eh_frame: Some(&data),
        eh_frame_svma: SYNTHETIC_SVMA,
        ..Default::default()
    };
    let (rules, stats) = rules_from_sections::<Arm>(&sections, None).unwrap();
    let table = table(rules);
    let mut section = EhFrame::new(&data, LittleEndian);
    section.set_address_size(4);
    let bases = BaseAddresses::default().set_eh_frame(SYNTHETIC_SVMA);
    let mut mismatches = Vec::new();
    let s = compare_section(&section, &bases, &table, &mut mismatches);
    (s, mismatches, stats)
}

/// Generic values are address-sized (DWARF 5 section 2.5.1): on ARM, `DW_OP_not` of -1 is 0,
/// and shifting by it leaves the value alone. A case the random comparison found, where gimli's
/// shift read the amount's upper 32 bits (see `support::gimli_expr`).
#[test]
fn shift_amounts_are_32_bit() {
    // DW_CFA_val_expression r13: DW_OP_consts -1; DW_OP_not; DW_OP_shl (the CFA pushed first).
    let insns = [0x16, 0x0d, 0x04, 0x11, 0x7f, 0x20, 0x24];
    let (s, mismatches, _) = synthetic_case(&insns, 14, false);
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert!(s.identical_with_expr > 0, "{s:?}");
}

/// 1000 fixed random cases must reach the interesting paths.
#[test]
fn random_cfi_coverage() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = arb_synthetic();
    let mut total = Summary::default();
    let mut failures = Vec::new();
    for _ in 0..1000 {
        let (insns, ra, signal) = strategy.new_tree(&mut runner).unwrap().current();
        let (s, m, _) = synthetic_case(&insns, ra, signal);
        if !m.is_empty() && failures.len() < 5 {
            failures.push(format!("{insns:02x?} (ra column {ra}): {}", m.join("; ")));
        }
        total.add(&s);
    }
    println!("random ARM CFI, 1000 fixed cases: {total:?}");
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
    assert!(total.identical > 2000, "{total:?}");
    assert!(total.identical_with_expr > 200, "{total:?}");
    assert!(total.end_of_stack > 30, "{total:?}");
    assert!(total.read_failed > 100, "{total:?}");
    assert!(total.cfa_fp > 300, "{total:?}");
    assert_eq!(total.expr_errors, 0);
    assert!(total.ours_none_must_drop > 300, "{total:?}");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_cfi_matches_gimli((insns, ra, signal) in arb_synthetic()) {
        let (s, mismatches, stats) = synthetic_case(&insns, ra, signal);
        prop_assert!(
            mismatches.is_empty(),
            "instructions {:02x?} (ra column {}):\n{}",
            insns,
            ra,
            mismatches.join("\n")
        );
        prop_assert!(
            s.ours_none <= stats.cfi.dropped_total() + stats.cfi.table.overlapping,
            "{} rows without a rule, {:?}",
            s.ours_none,
            stats
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Debian's armhf libraries.

#[test]
fn debian_armhf_libraries_load() {
    // libm has no .ARM.exidx at all (its functions do not throw): only its PLT has rules.
    for (name, has_exidx) in [
        ("libc.so.6", true),
        ("libstdc++.so.6", true),
        ("libgcc_s.so.1", true),
        ("libm.so.6", false),
    ] {
        let path = Path::new(armv7().libdir).join(name);
        if !path.exists() {
            missing(&format!(
                "{} (libc6-armhf-cross, libstdc++6-armhf-cross)",
                path.display()
            ));
            continue;
        }
        let t = std::time::Instant::now();
        let loaded = unwind_dwarf::load_elf_file::<Arm>(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let elapsed = t.elapsed();
        print_stats(
            &format!("{} (loaded in {elapsed:?})", path.display()),
            &loaded,
        );
        let s = &loaded.stats;
        assert_eq!(s.cfi.bad_entries, 0);
        assert!(s.cfi.plt_rows > 0);
        if !has_exidx {
            assert!(s.arch.exidx.is_none());
            continue;
        }
        let exidx = s.arch.exidx.as_ref().expect(".ARM.exidx");
        assert!(exidx.entries > 30, "{exidx:?}");
        assert!(exidx.rows > 10 && loaded.rules.rows() > 0, "{exidx:?}");
        // Function coverage (dynamic and static symbols).
        let data = std::fs::read(&path).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let funcs = functions(&elf);
        let with_rule = funcs
            .iter()
            .filter(|f| loaded.rules.lookup(f.1).is_some())
            .count();
        let sources = |src: Source| loaded.rules.extents().filter(|e| e.2.source == src).count();
        println!(
            "  {with_rule} of {} function symbols have a rule at their start; extents from DWARF (and PLT) {}, from EXIDX {}",
            funcs.len(),
            sources(Source::Dwarf),
            sources(Source::Exidx),
        );
        // Functions under EXIDX_CANTUNWIND entries (hand-written assembly) may have no rule.
        assert!(with_rule > 0, "{with_rule} of {}", funcs.len());
        // One stripped index entry may cover several functions (glibc's syscall wrappers):
        // where rows come from instructions, every function the symbols name starts from its
        // entry frame, not from the frame the code before it left (the reading once carried
        // `push {r7}` from one wrapper into the next, and walks through sched_yield read the
        // wrong slot).
        let entry = Rule {
            source: Source::Instructions,
            ..Rule::default()
        };
        // (The signal restorers' rows, also read from their instructions, are their own:
        // `debian_armhf_signal_restorers_are_signal_frames`.)
        let from_instructions: Vec<_> = funcs
            .iter()
            .filter(|f| {
                loaded
                    .rules
                    .lookup(f.1)
                    .is_some_and(|r| r.source == Source::Instructions && !r.signal_frame)
            })
            .collect();
        for f in &from_instructions {
            assert_eq!(
                loaded.rules.lookup(f.1),
                Some(entry),
                "{name}: {} at {:#x}",
                f.0,
                f.1
            );
        }
        println!(
            "  {} function starts from instructions, extents from instructions {}",
            from_instructions.len(),
            sources(Source::Instructions)
        );
        assert!(!from_instructions.is_empty(), "{name}");
        // EXIDX_CANTUNWIND functions whose exits confirm their reading unwind; those that
        // never return still stop. libgcc's entry points, which build a register block for
        // the unwinder to step, read their return address from that block, checked.
        let rule_in = |function: &str| {
            let f = funcs.iter().find(|f| f.0 == function).expect(function);
            (f.1..f.2)
                .step_by(2)
                .filter_map(|a| loaded.rules.lookup(a))
                .collect::<Vec<_>>()
        };
        let stops = |rules: &[Rule]| rules.iter().all(|r| r.pc == RegRule::Undefined);
        match name {
            "libc.so.6" => {
                assert!(s.arch.cant_unwind_from_instructions > 100, "{:?}", s.arch);
                let find_exidx = rule_in("__gnu_Unwind_Find_exidx");
                assert!(find_exidx.iter().all(|r| r.source == Source::Instructions));
            }
            "libstdc++.so.6" => {
                assert!(s.arch.cant_unwind_from_instructions > 100, "{:?}", s.arch);
            }
            "libgcc_s.so.1" => {
                assert_eq!(s.arch.unwinder_wrappers, 5, "{:?}", s.arch);
                for f in ["_Unwind_RaiseException", "_Unwind_Resume"] {
                    let rules = rule_in(f);
                    // At the call: the block's LR slot, through the checking expression.
                    let at_call = rules.iter().filter(|r| matches!(r.pc, RegRule::Expr(_)));
                    assert_eq!(at_call.count(), 6, "{f}: {rules:?}");
                    assert!(!stops(&rules), "{f}");
                }
            }
            _ => {}
        }
    }
}

#[test]
fn other_architectures_are_refused() {
    let x86 = &Path::new(target::by_name("x86_64").libdir).join("libc.so.6");
    if x86.exists() {
        assert!(matches!(
            unwind_dwarf::load_elf_file::<Arm>(x86),
            Err(unwind_dwarf::DwarfError::UnsupportedArchitecture(_))
        ));
    } else {
        missing(&format!("{} (x86_64 glibc)", x86.display()));
    }
    let arm = Path::new(armv7().libdir).join("libc.so.6");
    if arm.exists() {
        assert!(matches!(
            unwind_dwarf::load_elf_file::<unwind_dwarf::X86_64>(&arm),
            Err(unwind_dwarf::DwarfError::UnsupportedArchitecture(_))
        ));
    } else {
        missing(&format!("{} (libc6-armhf-cross)", arm.display()));
    }
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Corrupted unwind sections (and truncated files) give `Ok` or an error, never a panic, and
/// whatever rules come out can be applied.
#[test]
fn corrupted_arm_files_never_panic() {
    let mut files = Vec::new();
    if have_gcc() {
        files.push(std::fs::read(compile("corrupt", &["-O2", "-mthumb", "-g"])).unwrap());
    } else {
        missing(&format!("{}: no compiled file corrupted", gcc_missing()));
    }
    match std::fs::read(Path::new(armv7().libdir).join("libstdc++.so.6")) {
        Ok(d) => files.push(d),
        Err(_) => missing(&format!(
            "{}/libstdc++.so.6 ({}): not corrupted",
            armv7().libdir,
            armv7().packages.join(", ")
        )),
    }
    if files.is_empty() {
        return;
    }
    let bytes = stack_bytes();
    let image = StackImage::new(u64::from(STACK_LO), &bytes);
    let mut rng = Rng(7);
    let (mut ok, mut err) = (0, 0);
    for data in &files {
        let elf = object::File::parse(&**data).unwrap();
        let targets: Vec<(usize, usize)> = [".ARM.exidx", ".ARM.extab", ".debug_frame"]
            .iter()
            .filter_map(|n| elf.section_by_name(n)?.file_range())
            .map(|(o, l)| (o as usize, l as usize))
            .filter(|&(_, l)| l > 0)
            .collect();
        for case in 0..60 {
            let mut d = data.clone();
            if case % 10 == 9 {
                d.truncate(rng.next() as usize % d.len());
            } else {
                let (off, len) = targets[rng.next() as usize % targets.len()];
                for _ in 0..1 + rng.next() % 16 {
                    d[off + rng.next() as usize % len] = rng.next() as u8;
                }
            }
            match unwind_dwarf::rules_from_elf::<Arm>(&d) {
                Ok(loaded) => {
                    ok += 1;
                    let t = table(loaded.rules);
                    for m in t.modules() {
                        for (start, _, rule) in m.rules.extents().take(2000) {
                            let _ =
                                Arm::step_rule(&t, 0, &rule, &regs_at(start as u32), true, &image);
                        }
                    }
                }
                Err(_) => err += 1,
            }
        }
    }
    println!("corrupted ARM files: {ok} loaded, {err} refused");
}

/// glibc's restorers (`__default_sa_restorer`, `__default_rt_sa_restorer`: Thumb-2
/// `mov.w r7, #N; svc #0`) get the signal trampoline's rows, whatever their EHABI entries say:
/// the interrupted registers from the `ucontext_t` at SP, the caller's PC exact. A walk from
/// a handler's return into `__default_rt_sa_restorer` reads the interrupted PC, SP and LR there.
#[test]
fn debian_armhf_signal_restorers_are_signal_frames() {
    let path = Path::new(armv7().libdir).join("libc.so.6");
    if !path.exists() {
        missing(&format!("{} (libc6-armhf-cross)", path.display()));
        return;
    }
    let data = std::fs::read(&path).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let loaded = unwind_dwarf::rules_from_elf::<Arm>(&data).unwrap();
    let at = |name: &str| {
        elf.dynamic_symbols()
            .find(|s| s.name() == Ok(name))
            .map(|s| s.address() & !1)
            .unwrap_or_else(|| panic!("{name} in {}", path.display()))
    };
    for (name, rt) in [
        ("__default_sa_restorer", false),
        ("__default_rt_sa_restorer", true),
    ] {
        let start = at(name);
        let rule = loaded.rules.lookup(start).expect(name);
        assert!(rule.signal_frame, "{name}: {rule:?}");
        // A stack with the interrupted registers where the kernel puts them.
        let r0 = if rt { 128 + 20 + 12 } else { 20 + 12 };
        let mut words = vec![0u32; 128];
        let (sp, pc, lr) = (0x7000_0400u32, 0x1234_5679u32, 0x2345_6789u32);
        words[(r0 + 13 * 4) / 4] = sp;
        words[(r0 + 15 * 4) / 4] = pc;
        words[(r0 + 14 * 4) / 4] = lr;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let base = 0x7000_0000u32;
        let mem = StackImage::new(u64::from(base), &bytes);
        let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
        b.add(
            0,
            0x1000_0000,
            0,
            "libc".into(),
            Arc::new(loaded.rules.clone()),
        );
        let table = b.build().unwrap();
        let regs = Regs {
            pc: start as u32 | 1,
            lr: 0,
            sp: base,
            r12: 0,
            r11: 0,
            r7: 0,
        };
        let step = Arm::step_rule(&table, 0, &rule, &regs, true, &mem).unwrap();
        assert_eq!(
            (step.caller.pc, step.caller.sp, step.caller.lr, step.exact),
            (pc, sp, lr, true),
            "{name}"
        );
    }
}

/// The functions of a stripped armhf library judged by the symbol table it had before: its
/// internal functions, which only calls and function pointers show (`unwind_dwarf::called`),
/// start where their symbols did. The library is libstdc++ and libgcc's unwinder linked whole
/// from the cross toolchain's archives, whose internal functions (libgcc's unwinder's own,
/// `read_encoded_value_with_base`) have no unwind entry of their own, as in Debian's
/// `libstdc++.so.6` and `libgcc_s.so.1`. Of the code `.dynsym` does not name, every halfword
/// of a function is counted as named by its function's start, by another, or by none.
#[test]
fn internal_functions_start_where_their_symbols_did() {
    if !have_gcc() {
        unwind_test_support::missing(&gcc_missing());
        return;
    }
    let cxx = gcc().replace("-gcc", "-g++");
    let archive = |name: &str| {
        let out = Command::new(&cxx)
            .arg(format!("-print-file-name={name}"))
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("unwind-dwarf-arm");
    std::fs::create_dir_all(&dir).unwrap();
    let library = dir.join("whole-libstdc++.so");
    unwind_test_support::run(
        Command::new(&cxx)
            .args(["-shared", "-o"])
            .arg(&library)
            .arg("-Wl,--whole-archive")
            .arg(archive("libstdc++.a"))
            .arg(archive("libgcc_eh.a"))
            .arg("-Wl,--no-whole-archive"),
    );
    let full = std::fs::read(&library).unwrap();
    let stripped = std::fs::read(strip(&library)).unwrap();
    let elf = object::File::parse(&*full).unwrap();
    // Every function symbol's start; the sized ones' ranges.
    let mut starts: Vec<u64> = elf
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .map(|s| s.address() & !1)
        .collect();
    starts.sort_unstable();
    let mut sized: Vec<(u64, u64)> = elf
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.size() > 0)
        .map(|s| (s.address() & !1, (s.address() & !1) + s.size()))
        .collect();
    sized.sort_unstable();
    sized.dedup_by_key(|r| r.0);
    let stripped_elf = object::File::parse(&*stripped).unwrap();
    let exported: Vec<(u64, u64)> = stripped_elf
        .dynamic_symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.size() > 0)
        .map(|s| (s.address() & !1, (s.address() & !1) + s.size()))
        .collect();
    let functions = unwind_dwarf::functions::functions_of_elf(&stripped);
    let not_a_start: Vec<_> = functions
        .iter()
        .filter(|f| starts.binary_search(&f.start).is_err())
        .collect();
    assert!(
        not_a_start.is_empty(),
        "{} of {} functions start where no symbol did: {not_a_start:x?}",
        not_a_start.len(),
        functions.len()
    );
    let (mut right, mut wrong, mut none) = (0u64, 0u64, 0u64);
    for &(start, end) in &sized {
        for a in (start..end).step_by(2) {
            if exported.iter().any(|&(s, e)| s <= a && a < e) {
                continue;
            }
            let i = functions.partition_point(|f| f.start <= a);
            match i.checked_sub(1).map(|i| functions[i]) {
                Some(f) if a < f.end && f.start == start => right += 1,
                Some(f) if a < f.end => wrong += 1,
                _ => none += 1,
            }
        }
    }
    let all = right + wrong + none;
    println!(
        "{} functions; of {all} halfwords of code .dynsym does not name: {right} named by their \
         function's start, {wrong} by another's, {none} by none",
        functions.len()
    );
    // Unwind entries alone name about a fifth right and 1.5 % wrong (an entry's range runs
    // over the uncalled functions after it); a function nothing calls or points at is still
    // taken for part of the one before it.
    assert!(right * 100 >= all * 97, "{right} of {all} named right");
    assert!(wrong * 1000 <= all * 12, "{wrong} of {all} named wrong");
}
