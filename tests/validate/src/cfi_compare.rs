//! Our exported `STACK CFI` against `dump_syms`'s, rule by rule, as a Breakpad walker reads them.
//!
//! Both symbol files of one ELF file are loaded by `breakpad-symbols` and evaluated with its
//! `walk_frame` on a synthetic callee state: every register a distinct value, the PC the address
//! looked up, and memory whose word at address `a` is a hash of `a`. What each file gives (the
//! caller's CFA and return address, the caller's SP, and informationally every other caller
//! register) is compared.
//!
//! Rules are piecewise constant between the addresses where a `STACK CFI INIT` record starts or
//! ends or a `STACK CFI` record changes a rule. The addresses are split into the intervals of
//! the union of both files' boundaries, and each interval is evaluated once, at its first address,
//! and weighted by its byte count: that is equivalent to checking every address. (A rule that
//! reads the PC register, whose value differs at every address, is evaluated at every address of
//! its interval.) The domain is every address either file covers, with `breakpad-symbols`'
//! reading of the files: records sorted by address, an empty record or one overlapping an
//! earlier one dropped.
//!
//! Each interval is classified: identical (including both files giving no caller, as for the
//! DWARF end-of-stack rule); only ours has a rule (EHABI rows, PLT rules synthesized for stubs
//! without FDE, FDEs whose first row has a CFA expression, which `dump_syms` drops whole, such
//! as glibc's `__restore_rt`); only `dump_syms` has one (we dropped the row: the drop reason
//! inferred from the rule `dump_syms` wrote and confirmed by our loader's counts, or our exporter
//! skipped it, with its reason); both but different, explained (a `dump_syms` limitation shown by
//! our table and by its own file: it drops CFA-expression rows and keeps the row before, which
//! for `.plt` gives PLT0's `rsp + 24` at every entry; an interval is put in this class only if our
//! rule there is a PC-dependent CFA expression and dump_syms's rule is exactly the one in effect
//! just before that expression's extent) or genuine. Every interval not explained is a genuine
//! [`Disagreement`], listed with its address and both files' rules.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use breakpad_symbols::{FrameWalker, SimpleModule};
use unwind_dwarf::breakpad::{image_base_svma, symbol_file_for_elf, ExportStats};
use unwind_dwarf::plt::PltSection;
use unwind_dwarf::{Architecture, CfiStats, DropReason};

/// A number of intervals and the bytes they cover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Intervals (of the union partition of both files' row boundaries).
    pub intervals: u64,
    /// Bytes of code.
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, bytes: u64) {
        self.intervals += 1;
        self.bytes += bytes;
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} intervals / {} bytes", self.intervals, self.bytes)
    }
}

/// An interval where the two files differ without an explanation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreement {
    /// Module-relative address of the interval's first byte.
    pub address: u64,
    /// Bytes in the interval.
    pub size: u64,
    /// `different` (both have a rule), `missing` (only dump_syms has one) or `extra` (only we
    /// have one).
    pub kind: &'static str,
    /// Our rule in effect there (`.cfa: ... .ra: ...`), or `-`.
    pub ours: String,
    /// dump_syms's rule in effect there, or `-`.
    pub dump_syms: String,
    /// What each gives to the walker.
    pub outcome: String,
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {:x} (+{:x}): ours `{}`, dump_syms `{}` ({})",
            self.kind, self.address, self.size, self.ours, self.dump_syms, self.outcome
        )
    }
}

/// The comparison of one ELF file's tables.
#[derive(Clone, Debug)]
pub struct TableComparison {
    /// The module's file name.
    pub module: String,
    /// `x86_64` or `arm`.
    pub arch: &'static str,
    /// The ELF file compared.
    pub path: PathBuf,
    /// What our exporter wrote and skipped.
    pub export: ExportStats,
    /// `STACK CFI` lines in our file and in dump_syms's.
    pub records: (usize, usize),
    /// Every interval either file covers.
    pub domain: Tally,
    /// Covered by dump_syms's file.
    pub dump_syms_covered: Tally,
    /// Covered by ours.
    pub ours_covered: Tally,
    /// Same caller (CFA, return address, SP), or no caller from both.
    pub identical: Tally,
    /// Of `identical`: both files give no caller (end of stack).
    pub identical_no_caller: Tally,
    /// Only our file has a rule, by class.
    pub only_ours: BTreeMap<&'static str, Tally>,
    /// Only dump_syms's file has a rule, by class (our drop or skip reason).
    pub only_dump_syms: BTreeMap<String, Tally>,
    /// Both have rules that differ, for a reason shown by our table, by class.
    pub explained: BTreeMap<&'static str, Tally>,
    /// Every other difference.
    pub genuine: Vec<Disagreement>,
    /// Informational: intervals with the same caller where a register our tables track (x86_64
    /// rbp; ARM lr, r7, r11, r12) differs in the caller, by register and how.
    pub other_registers: BTreeMap<String, Tally>,
    /// Informational: one example interval per `other_registers` entry.
    pub other_register_examples: BTreeMap<String, Disagreement>,
    /// Informational: intervals with the same caller where dump_syms restores registers our
    /// tables do not track (rbx, r12-r15, r4, ...: the walker carries the callee's values with
    /// our file), by register.
    pub untracked_registers: BTreeMap<String, Tally>,
}

impl TableComparison {
    /// Identical bytes (always covered by both files) as a percentage of the bytes dump_syms's
    /// file covers, if it covers any.
    pub fn identical_share(&self) -> Option<f64> {
        (self.dump_syms_covered.bytes > 0)
            .then(|| 100.0 * self.identical.bytes as f64 / self.dump_syms_covered.bytes as f64)
    }

    fn share_text(&self) -> String {
        self.identical_share()
            .map_or_else(|| "dump_syms has no rules".into(), |p| format!("{p:.2} %"))
    }

    /// The disagreements no class explains.
    pub fn genuine(&self) -> &[Disagreement] {
        &self.genuine
    }

    /// The header of [`TableComparison::markdown_row`]'s table.
    pub fn markdown_header() -> &'static str {
        "| module | arch | our records | dump_syms records | dump_syms covers | identical \
         (share of dump_syms's bytes) | only ours | only dump_syms | explained differences | \
         genuine |\n|---|---|---|---|---|---|---|---|---|---|"
    }

    /// One row of the summary table: counts in bytes (intervals in parentheses), classes named.
    pub fn markdown_row(&self) -> String {
        fn classes<K: fmt::Display>(m: &BTreeMap<K, Tally>) -> String {
            if m.is_empty() {
                return "0".into();
            }
            m.iter()
                .map(|(k, t)| format!("{k}: {} B ({})", t.bytes, t.intervals))
                .collect::<Vec<_>>()
                .join("; ")
        }
        format!(
            "| {} | {} | {} | {} | {} B ({}) | {} B ({}, {}) | {} | {} | {} | {} |",
            self.module,
            self.arch,
            self.records.0,
            self.records.1,
            self.dump_syms_covered.bytes,
            self.dump_syms_covered.intervals,
            self.identical.bytes,
            self.identical.intervals,
            self.share_text(),
            classes(&self.only_ours),
            classes(&self.only_dump_syms),
            classes(&self.explained),
            self.genuine.len(),
        )
    }
}

impl fmt::Display for TableComparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ({}): {} of our STACK CFI records, {} of dump_syms's; every address either covers: {}",
            self.module, self.arch, self.records.0, self.records.1, self.domain
        )?;
        writeln!(f, "  export: {}", self.export)?;
        writeln!(
            f,
            "  dump_syms covers {}, we cover {}",
            self.dump_syms_covered, self.ours_covered
        )?;
        writeln!(
            f,
            "  identical: {} ({} of dump_syms's bytes); both no caller: {}",
            self.identical,
            self.share_text(),
            self.identical_no_caller
        )?;
        for (name, m) in [
            ("only ours", classes_of(&self.only_ours)),
            ("only dump_syms", classes_of(&self.only_dump_syms)),
            ("explained", classes_of(&self.explained)),
        ] {
            if m.is_empty() {
                writeln!(f, "  {name}: none")?;
            }
            for (class, t) in m {
                writeln!(f, "  {name}: {class}: {t}")?;
            }
        }
        for (class, t) in &self.other_registers {
            writeln!(f, "  (informational, same caller) {class}: {t}")?;
            if let Some(e) = self.other_register_examples.get(class) {
                writeln!(f, "    e.g. {e}")?;
            }
        }
        if !self.untracked_registers.is_empty() {
            let regs: Vec<String> = self
                .untracked_registers
                .iter()
                .map(|(r, t)| format!("{r} {}", t.bytes))
                .collect();
            writeln!(
                f,
                "  (informational, same caller) registers we do not track, restored by \
                 dump_syms's file, bytes: {}",
                regs.join(", ")
            )?;
        }
        write!(f, "  genuine disagreements: {}", self.genuine.len())?;
        for d in &self.genuine {
            write!(f, "\n    {d}")?;
        }
        Ok(())
    }
}

fn classes_of<K: fmt::Display>(m: &BTreeMap<K, Tally>) -> Vec<(String, Tally)> {
    m.iter().map(|(k, t)| (k.to_string(), *t)).collect()
}

/// One `STACK CFI INIT` record and its changes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    start: u64,
    end: u64,
    init: String,
    deltas: Vec<(u64, String)>,
}

/// The `STACK CFI` records of a symbol file, as `breakpad-symbols` keeps them: sorted by
/// address, empty ones dropped, one overlapping an earlier one dropped (or merged if equal).
fn parse_records(text: &str) -> (Vec<Record>, usize) {
    let mut records: Vec<Record> = Vec::new();
    let mut lines = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("STACK CFI ") else {
            continue;
        };
        lines += 1;
        if let Some(init) = rest.strip_prefix("INIT ") {
            let mut it = init.splitn(3, ' ');
            let (Some(a), Some(s)) = (it.next(), it.next()) else {
                continue;
            };
            let (Ok(start), Ok(size)) = (u64::from_str_radix(a, 16), u64::from_str_radix(s, 16))
            else {
                continue;
            };
            records.push(Record {
                start,
                end: start.saturating_add(size),
                init: it.next().unwrap_or("").to_string(),
                deltas: Vec::new(),
            });
        } else if let Some((a, rules)) = rest.split_once(' ') {
            if let (Ok(addr), Some(r)) = (u64::from_str_radix(a, 16), records.last_mut()) {
                r.deltas.push((addr, rules.to_string()));
            }
        }
    }
    for r in &mut records {
        r.deltas.sort_by_key(|d| d.0);
    }
    records.retain(|r| r.end > r.start);
    records.sort_by_key(|r| (r.start, r.end));
    let mut kept: Vec<Record> = Vec::with_capacity(records.len());
    for r in records {
        if let Some(last) = kept.last_mut() {
            if r.start < last.end {
                if r.init == last.init && r.deltas == last.deltas {
                    last.end = last.end.max(r.end);
                }
                continue;
            }
        }
        kept.push(r);
    }
    (kept, lines)
}

/// The record covering `addr`.
fn find(records: &[Record], addr: u64) -> Option<&Record> {
    let i = records.partition_point(|r| r.end <= addr);
    records.get(i).filter(|r| r.start <= addr)
}

/// `REG: EXPR` pairs of a rule text.
fn pairs(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for tok in text.split_ascii_whitespace() {
        if let Some(reg) = tok.strip_suffix(':') {
            out.push((reg.to_string(), String::new()));
        } else if let Some(last) = out.last_mut() {
            if !last.1.is_empty() {
                last.1.push(' ');
            }
            last.1.push_str(tok);
        }
    }
    out
}

/// The rules in effect at `addr` in record `r`: `.cfa`, `.ra`, then the others by name.
fn effective(r: &Record, addr: u64) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for text in
        std::iter::once(&r.init).chain(r.deltas.iter().take_while(|d| d.0 <= addr).map(|d| &d.1))
    {
        for (reg, e) in pairs(text) {
            m.insert(reg, e);
        }
    }
    m
}

fn render_rules(m: &BTreeMap<String, String>) -> String {
    let order = |k: &str| match k {
        ".cfa" => 0,
        ".ra" => 1,
        _ => 2,
    };
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by_key(|(k, _)| (order(k), (*k).clone()));
    v.iter()
        .map(|(k, e)| format!("{k}: {e}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// True if a rule reads the PC register (its value is the address: not constant over an
/// interval).
fn reads_pc(m: &BTreeMap<String, String>) -> bool {
    m.values().any(|e| {
        e.split_ascii_whitespace()
            .any(|t| matches!(t.trim_start_matches('$'), "rip" | "pc" | "r15" | "eip"))
    })
}

/// What the synthetic walk needs to know about an architecture's registers, by their Breakpad
/// names.
trait WalkerArch: Copy {
    /// Register names and the callee's values.
    fn callee_registers(self, pc: u64) -> Vec<(&'static str, u64)>;
    /// Registers a Breakpad walker carries into the caller unless a rule says otherwise (as
    /// rust-minidump's walkers do).
    fn callee_saved(self) -> &'static [&'static str];
    /// The name a register is compared by (`$` and aliases removed).
    fn canonical(self, name: &str) -> String;
    /// Registers our tables have rules for, besides the PC and SP.
    fn tracked(self) -> &'static [&'static str];
    /// The stack pointer's name.
    fn sp(self) -> &'static str;
    /// `v` if it fits in a word.
    fn word(self, v: u64) -> Option<u64>;
}

impl WalkerArch for Architecture {
    fn callee_registers(self, pc: u64) -> Vec<(&'static str, u64)> {
        let names: &[&str] = match self {
            Architecture::X86_64 => &[
                "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
                "r12", "r13", "r14", "r15",
            ],
            Architecture::Arm => &[
                "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12",
                "sp", "lr",
            ],
            Architecture::Aarch64 => &[
                "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12",
                "x13", "x14", "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24",
                "x25", "x26", "x27", "x28", "x29", "x30", "sp",
            ],
        };
        let (base, step) = match self {
            Architecture::X86_64 => (0x7ffd_1234_0000u64, 0x1_0000u64),
            Architecture::Arm => (0x7e00_0000u64, 0x1_0000u64),
            Architecture::Aarch64 => (0xffff_f123_0000u64, 0x1_0000u64),
        };
        let pc_name = match self {
            Architecture::X86_64 => "rip",
            Architecture::Arm | Architecture::Aarch64 => "pc",
        };
        let mut v: Vec<(&str, u64)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, base + step * (i as u64 + 1)))
            .collect();
        v.push((pc_name, pc));
        v
    }

    fn callee_saved(self) -> &'static [&'static str] {
        match self {
            Architecture::X86_64 => &["rbx", "rbp", "r12", "r13", "r14", "r15"],
            Architecture::Arm => &["r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11"],
            Architecture::Aarch64 => &[
                "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28", "x29",
            ],
        }
    }

    fn canonical(self, name: &str) -> String {
        let n = name.trim_start_matches('$');
        match (self, n) {
            (Architecture::Arm, "fp") => "r11".into(),
            (Architecture::Arm, "ip") => "r12".into(),
            (Architecture::Arm, "r13") => "sp".into(),
            (Architecture::Arm, "r14") => "lr".into(),
            (Architecture::Arm, "r15") => "pc".into(),
            (Architecture::Aarch64, "fp") => "x29".into(),
            (Architecture::Aarch64, "lr") => "x30".into(),
            (Architecture::Aarch64, "x31") => "sp".into(),
            _ => n.to_string(),
        }
    }

    fn tracked(self) -> &'static [&'static str] {
        match self {
            Architecture::X86_64 => &["rbp"],
            Architecture::Arm => &["lr", "r7", "r11", "r12"],
            Architecture::Aarch64 => &["x29", "x30"],
        }
    }

    fn sp(self) -> &'static str {
        match self {
            Architecture::X86_64 => "rsp",
            Architecture::Arm | Architecture::Aarch64 => "sp",
        }
    }

    fn word(self, v: u64) -> Option<u64> {
        (self.word_size() == 8 || v <= u64::from(u32::MAX)).then_some(v)
    }
}

/// A word of the synthetic stack: a hash of its address.
fn memory_word(arch: Architecture, a: u64) -> u64 {
    let mut x = a.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    match arch.word_size() {
        8 => x,
        _ => x & 0xffff_ffff,
    }
}

/// The synthetic callee state and what a walk sets for the caller.
struct Walker {
    arch: Architecture,
    pc: u64,
    callee: BTreeMap<String, u64>,
    caller: BTreeMap<String, u64>,
    cfa: Option<u64>,
    ra: Option<u64>,
}

impl FrameWalker for Walker {
    fn get_instruction(&self) -> u64 {
        self.pc
    }
    fn has_grand_callee(&self) -> bool {
        false
    }
    fn get_grand_callee_parameter_size(&self) -> u32 {
        0
    }
    fn get_register_at_address(&self, address: u64) -> Option<u64> {
        Some(memory_word(self.arch, address))
    }
    fn get_callee_register(&self, name: &str) -> Option<u64> {
        self.callee.get(&self.arch.canonical(name)).copied()
    }
    fn set_caller_register(&mut self, name: &str, val: u64) -> Option<()> {
        let v = self.arch.word(val)?;
        self.caller.insert(self.arch.canonical(name), v);
        Some(())
    }
    fn clear_caller_register(&mut self, name: &str) {
        self.caller.remove(&self.arch.canonical(name));
    }
    fn set_cfa(&mut self, val: u64) -> Option<()> {
        self.cfa = Some(self.arch.word(val)?);
        Some(())
    }
    fn set_ra(&mut self, val: u64) -> Option<()> {
        self.ra = Some(self.arch.word(val)?);
        Some(())
    }
}

/// What one file gives at one address.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// No record covers the address.
    NoRule,
    /// A record covers it but gives no caller (no `.ra`, `.undef`, a failed evaluation).
    NoCaller,
    /// The caller: CFA, return address, SP (the CFA unless a rule sets it) and every other
    /// register the walker knows.
    Caller {
        cfa: u64,
        ra: u64,
        sp: u64,
        others: BTreeMap<String, u64>,
    },
}

impl Outcome {
    fn describe(&self) -> String {
        match self {
            Outcome::NoRule => "no rule".into(),
            Outcome::NoCaller => "no caller".into(),
            Outcome::Caller { cfa, ra, sp, .. } if cfa == sp => {
                format!("cfa {cfa:#x}, ra {ra:#x}")
            }
            Outcome::Caller { cfa, ra, sp, .. } => {
                format!("cfa {cfa:#x}, ra {ra:#x}, sp {sp:#x}")
            }
        }
    }

    /// Same caller CFA, return address and SP (or both no caller).
    fn same_caller(&self, other: &Outcome) -> bool {
        match (self, other) {
            (
                Outcome::Caller {
                    cfa: a,
                    ra: b,
                    sp: c,
                    ..
                },
                Outcome::Caller {
                    cfa: x,
                    ra: y,
                    sp: z,
                    ..
                },
            ) => (a, b, c) == (x, y, z),
            (a, b) => a == b,
        }
    }
}

fn evaluate(
    sym: &breakpad_symbols::SymbolFile,
    covered: bool,
    arch: Architecture,
    addr: u64,
) -> Outcome {
    if !covered {
        return Outcome::NoRule;
    }
    let callee: BTreeMap<String, u64> = arch
        .callee_registers(addr)
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let caller = arch
        .callee_saved()
        .iter()
        .filter_map(|r| Some((r.to_string(), *callee.get(*r)?)))
        .collect();
    let mut w = Walker {
        arch,
        pc: addr,
        callee,
        caller,
        cfa: None,
        ra: None,
    };
    let module = SimpleModule::default();
    match (sym.walk_frame(&module, &mut w), w.cfa, w.ra) {
        (Some(()), Some(cfa), Some(ra)) => {
            let sp = w.caller.remove(arch.sp()).unwrap_or(cfa);
            w.caller.remove("rip");
            w.caller.remove("pc");
            Outcome::Caller {
                cfa,
                ra,
                sp,
                others: w.caller,
            }
        }
        _ => Outcome::NoCaller,
    }
}

/// Our rules, for classifying intervals.
enum OurRules {
    X86_64(Box<unwind_dwarf::LoadedRules<unwind_dwarf::X86_64>>),
    Arm(Box<unwind_dwarf::LoadedRules<unwind_dwarf::Arm>>),
    Aarch64(Box<unwind_dwarf::LoadedRules<unwind_dwarf::Aarch64>>),
}

/// What our table says about one file address.
#[derive(Clone, Copy, Debug, Default)]
struct Facts {
    /// The table has a rule there.
    present: bool,
    /// From `.ARM.exidx`.
    exidx: bool,
    /// Read from the function's instructions (ARM, aarch64).
    instructions: bool,
    /// A signal frame's rule.
    signal: bool,
    /// The CFA is an expression.
    cfa_expression: bool,
    /// The CFA is an expression that reads the PC.
    cfa_reads_pc: bool,
    /// The return address is signed (aarch64's pointer authentication).
    ra_signed: bool,
}

impl OurRules {
    fn facts(&self, svma: u64) -> Facts {
        use unwind_core::expr::Op;
        match self {
            OurRules::X86_64(l) => {
                let Some(r) = l.rules.lookup(svma) else {
                    return Facts::default();
                };
                let expr = match r.cfa {
                    unwind_core::x86_64::CfaRule::Expr(i) => l.rules.expr(i),
                    _ => None,
                };
                let pc = Op::Reg(unwind_core::x86_64::Reg::Pc as u8);
                Facts {
                    present: true,
                    exidx: false,
                    instructions: false,
                    signal: r.signal_frame,
                    cfa_expression: expr.is_some(),
                    cfa_reads_pc: expr.is_some_and(|e| e.ops().contains(&pc)),
                    ra_signed: false,
                }
            }
            OurRules::Arm(l) => {
                let Some(r) = l.rules.lookup(svma) else {
                    return Facts::default();
                };
                let expr = match r.cfa {
                    unwind_core::arm::CfaRule::Expr(i) => l.rules.expr(i),
                    _ => None,
                };
                let pc = Op::Reg(unwind_core::arm::Reg::Pc as u8);
                Facts {
                    present: true,
                    exidx: r.source == unwind_core::arm::Source::Exidx,
                    instructions: r.source == unwind_core::arm::Source::Instructions,
                    signal: r.signal_frame,
                    cfa_expression: expr.is_some(),
                    cfa_reads_pc: expr.is_some_and(|e| e.ops().contains(&pc)),
                    ra_signed: false,
                }
            }
            OurRules::Aarch64(l) => {
                let Some(r) = l.rules.lookup(svma) else {
                    return Facts::default();
                };
                let expr = match r.cfa {
                    unwind_core::aarch64::CfaRule::Expr(i) => l.rules.expr(i),
                    _ => None,
                };
                let pc = Op::Reg(unwind_core::aarch64::Reg::Pc as u8);
                Facts {
                    present: true,
                    exidx: false,
                    instructions: r.from_instructions,
                    signal: r.signal_frame,
                    cfa_expression: expr.is_some(),
                    cfa_reads_pc: expr.is_some_and(|e| e.ops().contains(&pc)),
                    ra_signed: r.ra_signed,
                }
            }
        }
    }

    /// The extents (file addresses) whose CFA is an expression reading the PC, sorted.
    fn pc_dependent_extents(&self) -> Vec<(u64, u64)> {
        use unwind_core::expr::Op;
        match self {
            OurRules::X86_64(l) => {
                let pc = Op::Reg(unwind_core::x86_64::Reg::Pc as u8);
                l.rules
                    .extents()
                    .filter(|(_, _, r)| match r.cfa {
                        unwind_core::x86_64::CfaRule::Expr(i) => {
                            l.rules.expr(i).is_some_and(|e| e.ops().contains(&pc))
                        }
                        _ => false,
                    })
                    .map(|(s, e, _)| (s, e))
                    .collect()
            }
            OurRules::Arm(l) => {
                let pc = Op::Reg(unwind_core::arm::Reg::Pc as u8);
                l.rules
                    .extents()
                    .filter(|(_, _, r)| match r.cfa {
                        unwind_core::arm::CfaRule::Expr(i) => {
                            l.rules.expr(i).is_some_and(|e| e.ops().contains(&pc))
                        }
                        _ => false,
                    })
                    .map(|(s, e, _)| (s, e))
                    .collect()
            }
            OurRules::Aarch64(l) => {
                let pc = Op::Reg(unwind_core::aarch64::Reg::Pc as u8);
                l.rules
                    .extents()
                    .filter(|(_, _, r)| match r.cfa {
                        unwind_core::aarch64::CfaRule::Expr(i) => {
                            l.rules.expr(i).is_some_and(|e| e.ops().contains(&pc))
                        }
                        _ => false,
                    })
                    .map(|(s, e, _)| (s, e))
                    .collect()
            }
        }
    }

    fn cfi_stats(&self) -> &CfiStats {
        match self {
            OurRules::X86_64(l) => &l.stats.cfi,
            OurRules::Arm(l) => &l.stats.cfi,
            OurRules::Aarch64(l) => &l.stats.cfi,
        }
    }
}

/// Why our loader dropped a row that dump_syms wrote as `rules`: the reason its text shows,
/// if our loader counted drops for that reason.
fn drop_reason(
    arch: Architecture,
    rules: &BTreeMap<String, String>,
    stats: &CfiStats,
) -> Option<String> {
    let tracked_cfa: &[&str] = match arch {
        Architecture::X86_64 => &["rsp", "rbp"],
        Architecture::Arm => &["sp", "r7", "r11", "r12"],
        Architecture::Aarch64 => &["sp", "x29"],
    };
    let is_register = |e: &str| {
        let mut t = e.split_ascii_whitespace();
        matches!((t.next(), t.next()), (Some(r), None) if r.parse::<i64>().is_err() && !r.starts_with('.'))
    };
    let mut candidates = Vec::new();
    if let Some(cfa) = rules.get(".cfa") {
        let base = cfa.split_ascii_whitespace().next().unwrap_or("");
        let base = arch.canonical(base);
        if !tracked_cfa.contains(&base.as_str()) {
            candidates.push(DropReason::CfaUntrackedRegister);
        }
    }
    if let Some(ra) = rules.get(".ra") {
        let untracked = |r: &str| match arch {
            Architecture::X86_64 => true,
            Architecture::Arm => !matches!(arch.canonical(r).as_str(), "lr" | "r12" | "r11" | "r7"),
            Architecture::Aarch64 => arch.canonical(r) != "x30",
        };
        if is_register(ra) && untracked(ra) {
            candidates.push(DropReason::ReturnAddressRule);
            // A CIE whose return-address column is that register, which has no rule: the
            // return address is still there (glibc's aarch64 `__longjmp`-style stubs, x15).
            candidates.push(DropReason::ReturnAddressMissing);
        }
    }
    for (reg, e) in rules {
        if !is_register(e) {
            continue;
        }
        match (arch, arch.canonical(reg).as_str()) {
            (Architecture::X86_64, "rbp")
            | (Architecture::Arm, "r7" | "r11")
            | (Architecture::Aarch64, "x29") => candidates.push(DropReason::FramePointerRule),
            (Architecture::Arm, "sp" | "r12") | (Architecture::Aarch64, "sp" | "x30") => {
                candidates.push(DropReason::OtherRegisterRule)
            }
            _ => {}
        }
    }
    candidates
        .into_iter()
        .find(|r| stats.dropped_for(*r) > 0)
        .map(|r| format!("dropped by our loader: {}", r.name()))
}

fn in_plt(plt: &[PltSection], svma: u64) -> bool {
    plt.iter()
        .any(|p| svma >= p.svma && svma < p.svma.saturating_add(p.size))
}

/// Runs `dump_syms` on `elf` and our exporter, and compares the two tables at every address
/// either covers (see the module documentation).
pub fn compare_elf(elf: &Path, dump_syms: &Path) -> Result<TableComparison, String> {
    let out = Command::new(dump_syms)
        .arg(elf)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", dump_syms.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {} failed: {}",
            dump_syms.display(),
            elf.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let theirs_text = String::from_utf8_lossy(&out.stdout).into_owned();
    let ours = symbol_file_for_elf(elf).map_err(|e| format!("our export: {e}"))?;
    let data = std::fs::read(elf).map_err(|e| format!("{}: {e}", elf.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", elf.display()))?;
    let base = image_base_svma(&file);
    let plt = unwind_dwarf::plt::plt_sections_of_file(elf).map_err(|e| e.to_string())?;
    let arch = ours.arch;
    let rules = match arch {
        Architecture::X86_64 => OurRules::X86_64(Box::new(
            unwind_dwarf::rules_from_elf(&data).map_err(|e| e.to_string())?,
        )),
        Architecture::Arm => OurRules::Arm(Box::new(
            unwind_dwarf::rules_from_elf(&data).map_err(|e| e.to_string())?,
        )),
        Architecture::Aarch64 => OurRules::Aarch64(Box::new(
            unwind_dwarf::rules_from_elf(&data).map_err(|e| e.to_string())?,
        )),
    };
    let pc_extents = rules.pc_dependent_extents();
    let sym_ours = breakpad_symbols::SymbolFile::from_bytes(ours.text.as_bytes())
        .map_err(|e| format!("breakpad-symbols cannot read our file: {e}"))?;
    let sym_theirs = breakpad_symbols::SymbolFile::from_bytes(theirs_text.as_bytes())
        .map_err(|e| format!("breakpad-symbols cannot read dump_syms's file: {e}"))?;
    let (rec_ours, lines_ours) = parse_records(&ours.text);
    let (rec_theirs, lines_theirs) = parse_records(&theirs_text);

    let mut bounds: Vec<u64> = Vec::new();
    for r in rec_ours.iter().chain(&rec_theirs) {
        bounds.push(r.start);
        bounds.push(r.end);
        bounds.extend(
            r.deltas
                .iter()
                .map(|d| d.0)
                .filter(|&a| a > r.start && a < r.end),
        );
    }
    bounds.sort_unstable();
    bounds.dedup();

    let mut c = TableComparison {
        module: ours.name.clone(),
        arch: arch.name(),
        path: elf.to_path_buf(),
        export: ours.stats.clone(),
        records: (lines_ours, lines_theirs),
        domain: Tally::default(),
        dump_syms_covered: Tally::default(),
        ours_covered: Tally::default(),
        identical: Tally::default(),
        identical_no_caller: Tally::default(),
        only_ours: BTreeMap::new(),
        only_dump_syms: BTreeMap::new(),
        explained: BTreeMap::new(),
        genuine: Vec::new(),
        other_registers: BTreeMap::new(),
        other_register_examples: BTreeMap::new(),
        untracked_registers: BTreeMap::new(),
    };
    for w in bounds.windows(2) {
        let (start, end) = (w[0], w[1]);
        let (ro, rt) = (find(&rec_ours, start), find(&rec_theirs, start));
        if ro.is_none() && rt.is_none() {
            continue;
        }
        let eff_o = ro.map(|r| effective(r, start));
        let eff_t = rt.map(|r| effective(r, start));
        // dump_syms's rule just before the PC-dependent extent containing `start`, if any, when
        // the same dump_syms record covers both.
        let i = pc_extents.partition_point(|e| e.1 <= start + base);
        let before = pc_extents
            .get(i)
            .filter(|e| e.0 <= start + base && e.0 > base)
            .and_then(|e| {
                let prev = e.0 - base - 1;
                rt.filter(|r| r.start <= prev).map(|r| effective(r, prev))
            });
        // Our rule gives the return address in its register (restored: `DW_CFA_restore` of the
        // return-address column, aarch64's epilogues), dump_syms's a stack slot that our rule
        // for the same record gave at an earlier address (so a rule dump_syms did not undo).
        let ra_restored = match (eff_o.as_ref(), eff_t.as_ref(), ro) {
            (Some(o), Some(t), Some(r)) => {
                let in_register = o.get(".ra").is_some_and(|e| !e.contains(' '));
                let slot = t.get(".ra").filter(|e| e.ends_with('^'));
                in_register
                    && slot.is_some_and(|slot| {
                        std::iter::once(r.start)
                            .chain(r.deltas.iter().map(|d| d.0))
                            .filter(|&a| a < start)
                            .any(|a| effective(r, a).get(".ra") == Some(slot))
                    })
            }
            _ => false,
        };
        // Our rule has no return address (DWARF's end of the stack, `DW_CFA_undefined` of the
        // return-address column after the first instruction: aarch64's `_start`), dump_syms's
        // the register its record started with (it writes no `.undef` for the change).
        let ra_undefined_kept = match (eff_o.as_ref(), eff_t.as_ref(), rt) {
            (Some(o), Some(t), Some(r)) => {
                !o.contains_key(".ra")
                    && t.get(".ra").is_some_and(|e| !e.contains(' '))
                    && pairs(&r.init)
                        .iter()
                        .any(|(k, e)| k == ".ra" && Some(e) == t.get(".ra"))
                    && r.start < start
            }
            _ => false,
        };
        // dump_syms's record of the interval is its first row alone.
        let theirs_first_row_only = rt.is_some_and(|r| r.deltas.is_empty());
        // A rule reading the PC changes value at every address.
        let per_address =
            eff_o.as_ref().is_some_and(reads_pc) || eff_t.as_ref().is_some_and(reads_pc);
        let step = if per_address { 1 } else { end - start };
        let mut a = start;
        while a < end {
            let b = (a + step).min(end);
            classify(
                &mut c,
                Interval {
                    start: a,
                    end: b,
                    ours: evaluate(&sym_ours, ro.is_some(), arch, a),
                    theirs: evaluate(&sym_theirs, rt.is_some(), arch, a),
                    text_ours: eff_o.as_ref().map_or("-".into(), render_rules),
                    text_theirs: eff_t.as_ref(),
                    theirs_before_expression: before.as_ref(),
                    ra_restored,
                    ra_undefined_kept,
                    theirs_first_row_only,
                    facts: rules.facts(a + base),
                    in_plt: in_plt(&plt, a + base),
                    skipped: ours.stats.skip_reason_at(a + base),
                },
                arch,
                &rules,
            );
            a = b;
        }
    }
    Ok(c)
}

/// One interval to classify.
struct Interval<'a> {
    start: u64,
    end: u64,
    ours: Outcome,
    theirs: Outcome,
    text_ours: String,
    text_theirs: Option<&'a BTreeMap<String, String>>,
    /// dump_syms's rule just before our PC-dependent CFA extent containing the interval.
    theirs_before_expression: Option<&'a BTreeMap<String, String>>,
    /// Our rule has the return address back in its register, and dump_syms's still reads a
    /// stack slot that our rule of the same record read earlier.
    ra_restored: bool,
    /// Our rule ends the stack (no return address) after its record's start, and dump_syms's
    /// still has the register its record started with.
    ra_undefined_kept: bool,
    /// dump_syms's record is its `STACK CFI INIT` line alone.
    theirs_first_row_only: bool,
    facts: Facts,
    in_plt: bool,
    skipped: Option<unwind_dwarf::breakpad::SkipReason>,
}

fn classify(c: &mut TableComparison, iv: Interval<'_>, arch: Architecture, rules: &OurRules) {
    let bytes = iv.end - iv.start;
    c.domain.add(bytes);
    if iv.theirs != Outcome::NoRule {
        c.dump_syms_covered.add(bytes);
    }
    if iv.ours != Outcome::NoRule {
        c.ours_covered.add(bytes);
    }
    let text_theirs = iv.text_theirs.map_or("-".into(), render_rules);
    let disagreement = |kind: &'static str| Disagreement {
        address: iv.start,
        size: bytes,
        kind,
        ours: iv.text_ours.clone(),
        dump_syms: text_theirs.clone(),
        outcome: format!(
            "ours: {}; dump_syms: {}",
            iv.ours.describe(),
            iv.theirs.describe()
        ),
    };
    match (&iv.ours, &iv.theirs) {
        (Outcome::NoRule, Outcome::NoRule) => {}
        (_, Outcome::NoRule) => {
            let f = iv.facts;
            let class = if f.exidx {
                Some("EHABI row (dump_syms reads no .ARM.exidx)")
            } else if f.instructions {
                Some("row read from the function's instructions (dump_syms reads no code)")
            } else if f.signal && f.cfa_expression {
                Some("signal frame (its FDE starts with a CFA expression: dump_syms drops it)")
            } else if f.cfa_expression && !f.cfa_reads_pc {
                Some("FDE starting with a CFA expression (dump_syms drops it)")
            } else if iv.in_plt {
                Some("PLT rule synthesized for stubs without FDE")
            } else {
                None
            };
            match class {
                Some(k) => c.only_ours.entry(k).or_default().add(bytes),
                None => c.genuine.push(disagreement("extra")),
            }
        }
        (Outcome::NoRule, _) => {
            let class = if let Some(skip) = iv.skipped {
                Some(format!("skipped by our exporter: {}", skip.name()))
            } else if !iv.facts.present {
                iv.text_theirs
                    .and_then(|t| drop_reason(arch, t, rules.cfi_stats()))
            } else {
                None
            };
            match class {
                Some(k) => c.only_dump_syms.entry(k).or_default().add(bytes),
                None => c.genuine.push(disagreement("missing")),
            }
        }
        (o, t) if o.same_caller(t) => {
            c.identical.add(bytes);
            match (o, t) {
                (Outcome::Caller { others: a, .. }, Outcome::Caller { others: b, .. }) => {
                    let regs: std::collections::BTreeSet<&String> =
                        a.keys().chain(b.keys()).collect();
                    for reg in regs {
                        let (ours, theirs) = (a.get(reg), b.get(reg));
                        if ours == theirs {
                            continue;
                        }
                        if !arch.tracked().contains(&reg.as_str()) {
                            c.untracked_registers
                                .entry(reg.clone())
                                .or_default()
                                .add(bytes);
                            continue;
                        }
                        let callee = arch
                            .callee_registers(iv.start)
                            .into_iter()
                            .find(|(n, _)| n == reg)
                            .map(|(_, v)| v);
                        let how = match (ours, theirs) {
                            (Some(o), Some(_)) if Some(*o) == callee => {
                                "ours unchanged (restored), dump_syms's still the saved slot \
                                 (dump_syms writes no DW_CFA_restore)"
                            }
                            (Some(_), None) => "restored by ours, unknown with dump_syms's file",
                            (None, Some(_)) => "unknown with our file, restored by dump_syms's",
                            _ => "different values",
                        };
                        let class = format!("caller {reg}: {how}");
                        c.other_registers
                            .entry(class.clone())
                            .or_default()
                            .add(bytes);
                        c.other_register_examples
                            .entry(class)
                            .or_insert_with(|| disagreement("other register"));
                    }
                }
                _ => c.identical_no_caller.add(bytes),
            }
        }
        _ => {
            // dump_syms drops rows whose CFA is an expression: its rule here must be the one in
            // effect before our expression's extent began.
            let kept_previous = iv.facts.cfa_reads_pc
                && iv.theirs_before_expression.is_some()
                && iv.theirs_before_expression == iv.text_theirs;
            let same_cfa = matches!(
                (&iv.ours, &iv.theirs),
                (Outcome::Caller { cfa: a, .. }, Outcome::Caller { cfa: b, .. }) if a == b
            );
            if kept_previous {
                c.explained
                    .entry(
                        "PC-dependent CFA expression (PLT): dump_syms drops the row and keeps \
                         the previous one",
                    )
                    .or_default()
                    .add(bytes);
            } else if same_cfa && iv.ra_restored {
                c.explained
                    .entry(
                        "return address restored to its register (DW_CFA_restore in an \
                         epilogue): dump_syms writes no restore and still reads the saved slot",
                    )
                    .or_default()
                    .add(bytes);
            } else if iv.facts.ra_signed && iv.theirs_first_row_only {
                c.explained
                    .entry(
                        "pointer authentication (DW_CFA_AARCH64_negate_ra_state): dump_syms \
                         writes the FDE's first row alone",
                    )
                    .or_default()
                    .add(bytes);
            } else if iv.ours == Outcome::NoCaller && iv.ra_undefined_kept {
                c.explained
                    .entry(
                        "end of the stack (DW_CFA_undefined of the return-address column after \
                         the record's start): dump_syms writes no .undef and keeps the register",
                    )
                    .or_default()
                    .add(bytes);
            } else {
                c.genuine.push(disagreement("different"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "MODULE Linux x86_64 000000000000000000000000000000000 m\n";

    fn sym(text: &str) -> breakpad_symbols::SymbolFile {
        breakpad_symbols::SymbolFile::from_bytes(format!("{HEADER}{text}").as_bytes()).unwrap()
    }

    #[test]
    fn records_are_read_as_breakpad_symbols_keeps_them() {
        let text = "STACK CFI INIT 30 10 .cfa: $rsp 8 + .ra: .cfa -8 + ^\n\
                    STACK CFI 38 .cfa: $rsp 16 +\n\
                    STACK CFI 34 .cfa: $rsp 24 + $rbp: .cfa -16 + ^\n\
                    STACK CFI INIT 10 10 .cfa: $rsp 8 + .ra: .cfa -8 + ^\n\
                    STACK CFI INIT 18 10 .cfa: $rsp 99 + .ra: .cfa -8 + ^\n\
                    STACK CFI INIT 50 0 .cfa: $rsp 8 + .ra: .cfa -8 + ^\n";
        let (records, lines) = parse_records(text);
        assert_eq!(lines, 6);
        // Sorted; the record overlapping [0x10, 0x20) and the empty one dropped.
        let ranges: Vec<_> = records.iter().map(|r| (r.start, r.end)).collect();
        assert_eq!(ranges, [(0x10, 0x20), (0x30, 0x40)]);
        let r = find(&records, 0x3a).unwrap();
        assert_eq!(
            render_rules(&effective(r, 0x3a)),
            ".cfa: $rsp 16 + .ra: .cfa -8 + ^ $rbp: .cfa -16 + ^"
        );
        assert_eq!(
            render_rules(&effective(r, 0x33)),
            ".cfa: $rsp 8 + .ra: .cfa -8 + ^"
        );
        assert!(find(&records, 0x20).is_none());
        assert!(find(&records, 0x1c).is_some());
        // breakpad-symbols agrees: 0x1c is under the first record (CFA rsp + 8).
        let s = sym(text);
        let a = evaluate(&s, true, Architecture::X86_64, 0x1c);
        let rsp = Architecture::X86_64
            .callee_registers(0)
            .into_iter()
            .find(|r| r.0 == "rsp")
            .unwrap()
            .1;
        assert!(matches!(a, Outcome::Caller { cfa, .. } if cfa == rsp + 8));
    }

    #[test]
    fn evaluation_tells_rules_apart() {
        let ours = sym("STACK CFI INIT 10 10 .cfa: $rsp 16 + .ra: .cfa -8 + ^\n");
        let same =
            sym("STACK CFI INIT 10 10 .cfa: $rsp 16 + .ra: .cfa -8 + ^ $rbx: .cfa -16 + ^\n");
        let other_cfa = sym("STACK CFI INIT 10 10 .cfa: $rsp 24 + .ra: .cfa -16 + ^\n");
        let other_ra = sym("STACK CFI INIT 10 10 .cfa: $rsp 16 + .ra: .cfa -16 + ^\n");
        let no_ra = sym("STACK CFI INIT 10 10 .cfa: $rsp 16 +\n");
        let undef = sym("STACK CFI INIT 10 10 .cfa: $rsp 16 + .ra: .undef\n");
        let at = |s: &breakpad_symbols::SymbolFile| evaluate(s, true, Architecture::X86_64, 0x14);
        let o = at(&ours);
        assert!(o.same_caller(&at(&same)));
        assert_ne!(o, at(&same), "rbx differs");
        assert!(!o.same_caller(&at(&other_cfa)));
        assert!(!o.same_caller(&at(&other_ra)));
        assert_eq!(at(&no_ra), Outcome::NoCaller);
        assert_eq!(at(&undef), Outcome::NoCaller);
        assert!(at(&no_ra).same_caller(&at(&undef)));
        assert_eq!(
            evaluate(&ours, false, Architecture::X86_64, 0x14),
            Outcome::NoRule
        );
        // An explicit caller SP is compared too.
        let sp = sym("STACK CFI INIT 10 10 .cfa: $rsp 16 + .ra: .cfa -8 + ^ $rsp: .cfa 8 +\n");
        assert!(!o.same_caller(&at(&sp)));
    }

    #[test]
    fn arm_names_and_word_size() {
        let text = "STACK CFI INIT 400 10 .cfa: sp 0 + .ra: lr\n\
                    STACK CFI 404 .cfa: r7 8 + .ra: .cfa -4 + ^ r11: .cfa -8 + ^\n";
        let s = sym(text);
        let regs = Architecture::Arm.callee_registers(0x400);
        let get = |n: &str| regs.iter().find(|r| r.0 == n).unwrap().1;
        match evaluate(&s, true, Architecture::Arm, 0x400) {
            Outcome::Caller { cfa, ra, sp, .. } => {
                assert_eq!((cfa, ra, sp), (get("sp"), get("lr"), get("sp")))
            }
            o => panic!("{o:?}"),
        }
        match evaluate(&s, true, Architecture::Arm, 0x408) {
            Outcome::Caller {
                cfa, ra, others, ..
            } => {
                assert_eq!(cfa, get("r7") + 8);
                assert_eq!(ra, memory_word(Architecture::Arm, cfa - 4));
                assert!(ra <= u64::from(u32::MAX));
                assert_eq!(others["r11"], memory_word(Architecture::Arm, cfa - 8));
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn drop_reasons_from_dump_syms_rules() {
        let mut stats = CfiStats::default();
        let rules = |t: &str| pairs(t).into_iter().collect::<BTreeMap<_, _>>();
        let setcontext = rules(".cfa: $rdx 0 + .ra: .cfa 168 + ^ $rsp: .cfa 160 + ^");
        let register_ra = rules(".cfa: $rsp 8 + .ra: $rdx $rbp: $r9");
        assert_eq!(drop_reason(Architecture::X86_64, &setcontext, &stats), None);
        stats.dropped[DropReason::CfaUntrackedRegister as usize] = 1;
        stats.dropped[DropReason::ReturnAddressRule as usize] = 1;
        assert_eq!(
            drop_reason(Architecture::X86_64, &setcontext, &stats).as_deref(),
            Some("dropped by our loader: cfa-untracked-register")
        );
        assert_eq!(
            drop_reason(Architecture::X86_64, &register_ra, &stats).as_deref(),
            Some("dropped by our loader: ra-rule")
        );
        let fine = rules(".cfa: $rsp 8 + .ra: .cfa -8 + ^");
        assert_eq!(drop_reason(Architecture::X86_64, &fine, &stats), None);
        let arm_lr = rules(".cfa: sp 0 + .ra: lr");
        assert_eq!(drop_reason(Architecture::Arm, &arm_lr, &stats), None);
        let arm_r3 = rules(".cfa: r3 0 + .ra: lr");
        assert!(drop_reason(Architecture::Arm, &arm_r3, &stats).is_some());
    }
}
