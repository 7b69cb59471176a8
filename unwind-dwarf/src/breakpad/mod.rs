//! Breakpad symbol files: our rule tables written as `STACK CFI` records.
//!
//! A symbol file starts with `MODULE Linux <arch> <debug id> <name>`, `INFO CODE_ID` and
//! `INFO GENERATOR`, like Mozilla's `dump_syms`; then, for every run of contiguous extents of the
//! module's [`ModuleRules`], one `STACK CFI INIT <address> <size> <rules>` record and a
//! `STACK CFI <address> <rules>` record at each address inside the run where a rule changes,
//! naming only the registers whose rule changed. Addresses are module-relative
//! (`svma - image_base_svma`), in lowercase hex, as `dump_syms` writes them. The file has no
//! `FILE`, `FUNC` or `PUBLIC` records: it describes unwinding only (names come from `dump_syms`'s
//! file or the module's symbol table).
//!
//! Each architecture states its rules in Breakpad's terms ([`crate::DwarfArch::stack_cfi`], with
//! its register names); this module names the registers and writes the records. How our rules
//! are written, and what they mean to a Breakpad walker (rust-minidump's
//! `breakpad-symbols` evaluates `.cfa` first, then `.ra` and every other register with `.cfa`
//! available; the caller's SP is the CFA unless an explicit SP rule overrides it, and the
//! caller's PC is `.ra`):
//! - x86_64: `.cfa` (`$rsp k +`, `$rbp k +`, or an expression), `.ra`, `$rbp`. The walker keeps
//!   callee-saved registers (`rbx`, `rbp`, `r12`-`r15`) unless told otherwise, so an unchanged
//!   `rbp` is written only where it returns to "unchanged" inside a run (`$rbp: $rbp`).
//! - 32-bit ARM: `.cfa`, `.ra` (our PC rule: `lr` while the return address is still in LR),
//!   `lr`, `sp`, `r7`, `r11`, `r12`, without `$`. `sp` is written only where it is not the CFA
//!   (EHABI's popped SP). The caller's LR gets our LR rule where it was saved (the same slot as
//!   the return address); "unchanged" LR and r12 are left to the walker, which, like Breakpad,
//!   does not carry caller-saved registers into the caller.
//! - An undefined return address (the DWARF end-of-stack rule) is written, like `dump_syms`
//!   does, as a record without `.ra`: the walker then finds no caller. Such rules always start
//!   their own `INIT` record, so no `.ra: .undef` is ever needed.
//! - An expression is translated into Breakpad postfix where every operation has an exact
//!   Breakpad form (see `postfix`); glibc's x86_64 `__restore_rt` signal frame is written that
//!   way (`.cfa: $rsp 160 + ^ .ra: $rsp 168 + ^ $rbp: $rsp 120 + ^`). Breakpad has no notion of
//!   a signal frame (the walker looks the caller up at its return address minus one, as for any
//!   frame): such rows are counted in [`ExportStats::signal_frame_extents`].
//! - A CFA expression that reads the PC (binutils' `.plt` rule, `rsp + 8 + ((rip & 15) >= 11) * 8`)
//!   is expanded address by address into rows of `SP + k`, after checking, by evaluating it with
//!   two sets of register values and two load biases, that it is `SP + k` at each address.
//! - Rules that cannot be written are skipped, counted by [`SkipReason`] and listed in
//!   [`ExportStats::skipped_ranges`]; other registers whose rule cannot be written become
//!   `.undef` (unknown to the walker), counted in [`ExportStats::registers_undefined`].
//!
//! A record ends where the extents stop being contiguous, where the return address becomes
//! (un)defined, before every EHABI row (one per function) and after [`MAX_DELTAS`] changes,
//! because Breakpad walkers scan a record's changes linearly.

mod postfix;
pub(crate) mod rule;

use std::fmt;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment};
use unwind_core::table::{ModuleRules, TableRule};

use crate::arch::{ArchVisitor, Architecture, DwarfArch};
use crate::DwarfError;

use postfix::{expand_cfa, reads, translate, ExpandError, Target};
use rule::{StackCfiCfa, StackCfiReg};

/// The identifiers Breakpad files and minidumps name a module by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BreakpadId {
    /// 33 uppercase hex digits: a GUID (the first 16 bytes of the build id, its first three
    /// fields byte-swapped from little-endian) and the age, always `0` on Linux.
    pub debug_id: String,
    /// The whole GNU build id, uppercase hex; empty without one.
    pub code_id: String,
}

/// The Breakpad identifiers of a module with GNU build id `build_id`, as `dump_syms` computes
/// them: the debug id is the first 16 bytes of the build id read as a GUID (first `u32`, then two
/// `u16`, byte-swapped from little-endian), in uppercase hex, followed by the age `0` (33
/// characters); shorter ids are zero-padded. The code id is the whole build id in uppercase hex.
pub fn breakpad_id(build_id: &[u8]) -> BreakpadId {
    let mut guid = [0u8; 16];
    for (g, b) in guid.iter_mut().zip(build_id) {
        *g = *b;
    }
    BreakpadId {
        debug_id: guid_id(&guid),
        code_id: hex_upper(build_id),
    }
}

/// Breakpad's identifier for a module without a build id: the first 4096 bytes of `.text`
/// XORed together in 16-byte blocks (a shorter last block XORs only its bytes), as a GUID with
/// age `0`; the code id is empty.
pub fn breakpad_id_from_text(text: &[u8]) -> BreakpadId {
    let mut guid = [0u8; 16];
    for (i, b) in text.iter().take(4096).enumerate() {
        guid[i % 16] ^= b;
    }
    BreakpadId {
        debug_id: guid_id(&guid),
        code_id: String::new(),
    }
}

/// The Breakpad identifiers of an ELF file: from its build id, else from its `.text`.
pub fn breakpad_id_for_elf(file: &object::File<'_>) -> BreakpadId {
    if let Ok(Some(id)) = file.build_id() {
        return breakpad_id(id);
    }
    let text = file
        .section_by_name(".text")
        .and_then(|s| s.uncompressed_data().ok());
    breakpad_id_from_text(text.as_deref().unwrap_or(&[]))
}

fn guid_id(g: &[u8; 16]) -> String {
    let d1 = u32::from_le_bytes([g[0], g[1], g[2], g[3]]);
    let d2 = u16::from_le_bytes([g[4], g[5]]);
    let d3 = u16::from_le_bytes([g[6], g[7]]);
    format!("{d1:08X}{d2:04X}{d3:04X}{}0", hex_upper(&g[8..]))
}

fn hex_upper(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02X}");
    }
    s
}

/// The file address that Breakpad's module-relative addresses count from: the lowest `PT_LOAD`
/// `p_vaddr`, rounded down to 4096 (0 without loadable segments). A minidump's module
/// `base_of_image` is the load bias plus this.
pub fn image_base_svma(file: &object::File<'_>) -> u64 {
    file.segments()
        .map(|s| s.address())
        .min()
        .map_or(0, |a| a & !4095)
}

/// A symbol file for one ELF file.
#[derive(Clone, Debug)]
pub struct SymbolFile {
    /// The module's file name (the last component of its path), as on the `MODULE` line.
    pub name: String,
    /// Its architecture (its [`Architecture::breakpad_name`] is on the `MODULE` line).
    pub arch: Architecture,
    /// Its identifiers.
    pub id: BreakpadId,
    /// The symbol file's text.
    pub text: String,
    /// What the export wrote and skipped.
    pub stats: ExportStats,
}

/// Loads the rules of an ELF image of architecture `A` and writes their `STACK CFI` records.
struct StackCfiOf<'d> {
    data: &'d [u8],
    image_base_svma: u64,
}

impl ArchVisitor for StackCfiOf<'_> {
    type Output = Result<(String, ExportStats), DwarfError>;
    fn visit<A: DwarfArch>(self) -> Self::Output {
        let loaded = crate::rules_from_elf::<A>(self.data)?;
        let mut body = String::new();
        let stats = write_stack_cfi::<A>(&loaded.rules, self.image_base_svma, &mut body);
        Ok((body, stats))
    }
}

/// Reads the ELF file at `path` (of any [`Architecture`], found from its `e_machine`), loads its
/// rules as the unwinder does (`.eh_frame`, `.debug_frame`, PLT rules; for ARM also
/// `.ARM.exidx`) and writes its Breakpad symbol file (`MODULE`, `INFO` and `STACK CFI` records).
pub fn symbol_file_for_elf(path: &Path) -> Result<SymbolFile, DwarfError> {
    let data = std::fs::read(path).map_err(DwarfError::Io)?;
    let file = object::File::parse(&*data).map_err(DwarfError::Elf)?;
    let name = path
        .file_name()
        .map_or_else(|| path.to_string_lossy(), |n| n.to_string_lossy())
        .into_owned();
    let id = breakpad_id_for_elf(&file);
    let base = image_base_svma(&file);
    let arch = Architecture::of_elf(&file)?;
    let (body, stats) = arch.dispatch(StackCfiOf {
        data: &data,
        image_base_svma: base,
    })?;
    let mut text = String::with_capacity(body.len() + 256);
    let _ = writeln!(
        text,
        "MODULE Linux {} {} {name}",
        arch.breakpad_name(),
        id.debug_id
    );
    if !id.code_id.is_empty() {
        let _ = writeln!(text, "INFO CODE_ID {}", id.code_id);
    }
    let _ = writeln!(text, "INFO GENERATOR unwind {}", env!("CARGO_PKG_VERSION"));
    text.push_str(&body);
    Ok(SymbolFile {
        name,
        arch,
        id,
        text,
        stats,
    })
}

/// Where a symbol file goes in a Breakpad symbol store: `<store>/<name>/<DEBUG_ID>/<name>.sym`
/// (the layout of `dump_syms -s` and of breakpad-symbols' `SimpleSymbolSupplier`).
pub fn store_path(store: &Path, name: &str, id: &BreakpadId) -> PathBuf {
    store
        .join(name)
        .join(&id.debug_id)
        .join(format!("{name}.sym"))
}

/// Why a rule (one extent of the table) was not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    /// The function cannot be unwound through here: an ARM `EXIDX_CANTUNWIND` entry, or a
    /// stretch whose return address is lost (`RegRule::Lost`: an unwinder installing a
    /// handler's registers, [`crate::eh_return`]). Breakpad has no such rule; a walker without
    /// a record behaves the same (no CFI caller).
    CantUnwind,
    /// The CFA expression has no Breakpad form and cannot be expanded per address.
    CfaExpression,
    /// A PC-dependent CFA expression over a range too large to expand per address.
    ExpansionTooLarge,
    /// A PC-dependent CFA expression that is not `SP + k` at some address.
    ExpansionNotLinear,
    /// The return-address rule is "unchanged" (a rule no caller can come from).
    ReturnAddressRule,
    /// The return-address expression has no Breakpad form.
    ReturnAddressExpression,
    /// A rule names an expression the module does not have.
    BadExpressionIndex,
    /// The extent lies below the image base: no module-relative address.
    OutsideImage,
}

impl SkipReason {
    /// Every reason, in a fixed order.
    pub const ALL: [SkipReason; 8] = [
        SkipReason::CantUnwind,
        SkipReason::CfaExpression,
        SkipReason::ExpansionTooLarge,
        SkipReason::ExpansionNotLinear,
        SkipReason::ReturnAddressRule,
        SkipReason::ReturnAddressExpression,
        SkipReason::BadExpressionIndex,
        SkipReason::OutsideImage,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::CantUnwind => "cant-unwind",
            SkipReason::CfaExpression => "cfa-expression",
            SkipReason::ExpansionTooLarge => "expansion-too-large",
            SkipReason::ExpansionNotLinear => "expansion-not-linear",
            SkipReason::ReturnAddressRule => "ra-rule",
            SkipReason::ReturnAddressExpression => "ra-expression",
            SkipReason::BadExpressionIndex => "bad-expression-index",
            SkipReason::OutsideImage => "outside-image",
        }
    }
}

/// A range of file addresses whose rule was not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkippedRange {
    /// First file address (svma).
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Why.
    pub reason: SkipReason,
}

/// What an export wrote and skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Extents of the rule table read.
    pub extents: u64,
    /// Extents written (in whole; an expanded extent counts once).
    pub extents_exported: u64,
    /// `STACK CFI INIT` records written.
    pub init_records: u64,
    /// `STACK CFI` (change) records written.
    pub delta_records: u64,
    /// Extents with a PC-dependent CFA expression, expanded per address.
    pub expanded_extents: u64,
    /// Rows (distinct `SP + k` ranges) those expansions gave.
    pub expanded_rows: u64,
    /// Extents written whose rule is a signal frame's (no Breakpad equivalent of the flag).
    pub signal_frame_extents: u64,
    /// Extents written with an undefined return address (records without `.ra`).
    pub end_of_stack_extents: u64,
    /// Register rules other than the CFA and return address written as `.undef`.
    pub registers_undefined: u64,
    /// Extents skipped, by reason (indexed like [`SkipReason::ALL`]).
    pub skipped: [u64; SkipReason::ALL.len()],
    /// Bytes of code those skipped extents cover, by reason.
    pub skipped_bytes: [u64; SkipReason::ALL.len()],
    /// Every skipped extent.
    pub skipped_ranges: Vec<SkippedRange>,
}

impl ExportStats {
    /// All `STACK CFI` lines written.
    pub fn records(&self) -> u64 {
        self.init_records + self.delta_records
    }

    /// Extents skipped for `reason`.
    pub fn skipped_for(&self, reason: SkipReason) -> u64 {
        self.skipped[reason as usize]
    }

    /// All skipped extents.
    pub fn skipped_total(&self) -> u64 {
        self.skipped.iter().sum()
    }

    /// `(reason, extents, bytes)` for every reason with a non-zero count.
    pub fn skips(&self) -> impl Iterator<Item = (SkipReason, u64, u64)> + '_ {
        SkipReason::ALL
            .iter()
            .map(|&r| (r, self.skipped[r as usize], self.skipped_bytes[r as usize]))
            .filter(|&(_, n, _)| n > 0)
    }

    /// The reason the extent containing file address `svma` was skipped, if it was.
    pub fn skip_reason_at(&self, svma: u64) -> Option<SkipReason> {
        let i = self.skipped_ranges.partition_point(|r| r.end <= svma);
        self.skipped_ranges
            .get(i)
            .filter(|r| r.start <= svma)
            .map(|r| r.reason)
    }

    fn skip(&mut self, start: u64, end: u64, reason: SkipReason) {
        self.skipped[reason as usize] += 1;
        self.skipped_bytes[reason as usize] += end.saturating_sub(start);
        self.skipped_ranges
            .push(SkippedRange { start, end, reason });
    }
}

impl fmt::Display for ExportStats {
    /// One line: extents, records, expansions, signal frames, skips by reason.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} extents as {} records ({} INIT, {} changes); {} PC-dependent CFA extents \
             expanded into {} rows; {} signal-frame, {} end-of-stack extents; {} registers \
             as .undef; skipped {}",
            self.extents_exported,
            self.extents,
            self.records(),
            self.init_records,
            self.delta_records,
            self.expanded_extents,
            self.expanded_rows,
            self.signal_frame_extents,
            self.end_of_stack_extents,
            self.registers_undefined,
            self.skipped_total(),
        )?;
        let mut first = true;
        for (r, n, bytes) in self.skips() {
            write!(
                f,
                "{}{}: {n} ({bytes} bytes)",
                if first { " (" } else { ", " },
                r.name()
            )?;
            first = false;
        }
        if !first {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// The most changes written under one `STACK CFI INIT` record before a new one starts.
pub const MAX_DELTAS: usize = 100;

/// The rule texts of one row, by register slot: 0 is `.cfa`, 1 is `.ra` (`None`: undefined),
/// the rest the architecture's other registers (`None`: the walker's default, "unchanged").
type Cells = Vec<Option<String>>;

/// A range of file addresses and the texts of its rule.
struct Piece {
    start: u64,
    end: u64,
    cells: Cells,
    /// Starts a record of its own (an EHABI row: one function).
    own_record: bool,
}

/// How one architecture's rows are written.
struct Layout {
    /// Names of the register slots as written (`.cfa`, `.ra`, then the others).
    names: Vec<&'static str>,
    /// The explicit text of the default ("unchanged") rule for each slot (unused for 0 and 1).
    defaults: Vec<&'static str>,
}

impl Layout {
    fn of<A: DwarfArch>() -> Layout {
        let others = A::BREAKPAD_OTHER_REGISTERS;
        Layout {
            names: [".cfa", ".ra"]
                .into_iter()
                .chain(others.iter().map(|&(name, _)| name))
                .collect(),
            defaults: ["", ""]
                .into_iter()
                .chain(others.iter().map(|&(_, default)| default))
                .collect(),
        }
    }
}

/// A record being collected: its first piece and its changes.
struct Run {
    start: u64,
    end: u64,
    init: Cells,
    last: Cells,
    deltas: Vec<(u64, Cells)>,
}

/// Writes pieces (sorted, non-overlapping) as `STACK CFI INIT` and `STACK CFI` records.
struct Writer<'a> {
    layout: &'a Layout,
    base: u64,
    out: &'a mut String,
    run: Option<Run>,
    inits: u64,
    deltas: u64,
}

impl Writer<'_> {
    fn push(&mut self, p: Piece) {
        if let Some(run) = &mut self.run {
            let same_kind = run.last[1].is_some() == p.cells[1].is_some();
            let continues =
                run.end == p.start && same_kind && !p.own_record && run.deltas.len() < MAX_DELTAS;
            if continues {
                if p.cells != run.last {
                    run.deltas.push((p.start, p.cells.clone()));
                    run.last = p.cells;
                }
                run.end = p.end;
                return;
            }
        }
        self.flush();
        self.run = Some(Run {
            start: p.start,
            end: p.end,
            init: p.cells.clone(),
            last: p.cells,
            deltas: Vec::new(),
        });
    }

    fn flush(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        let names = &self.layout.names;
        let _ = write!(
            self.out,
            "STACK CFI INIT {:x} {:x}",
            run.start - self.base,
            run.end - run.start
        );
        for (name, cell) in names.iter().zip(&run.init) {
            if let Some(t) = cell {
                let _ = write!(self.out, " {name}: {t}");
            }
        }
        self.out.push('\n');
        self.inits += 1;
        let mut prev = run.init;
        for (addr, cells) in run.deltas {
            let _ = write!(self.out, "STACK CFI {:x}", addr - self.base);
            for (i, (new, old)) in cells.iter().zip(&prev).enumerate() {
                if new == old {
                    continue;
                }
                let name = names.get(i).copied().unwrap_or("?");
                let text = match new {
                    Some(t) => t.as_str(),
                    None => self.layout.defaults.get(i).copied().unwrap_or(".undef"),
                };
                let _ = write!(self.out, " {name}: {text}");
            }
            self.out.push('\n');
            self.deltas += 1;
            prev = cells;
        }
    }
}

/// Writes the extents of `rules` through `render` (a rule's pieces, or why it cannot be
/// written).
fn write_records<R: TableRule>(
    rules: &ModuleRules<R>,
    image_base_svma: u64,
    layout: &Layout,
    out: &mut String,
    mut render: impl FnMut(u64, u64, &R, &mut ExportStats) -> Result<Vec<Piece>, SkipReason>,
) -> ExportStats {
    let mut stats = ExportStats::default();
    let mut w = Writer {
        layout,
        base: image_base_svma,
        out,
        run: None,
        inits: 0,
        deltas: 0,
    };
    for (start, end, rule) in rules.extents() {
        stats.extents += 1;
        if start < image_base_svma {
            stats.skip(start, end, SkipReason::OutsideImage);
            continue;
        }
        match render(start, end, &rule, &mut stats) {
            Ok(pieces) => {
                stats.extents_exported += 1;
                if pieces.first().is_some_and(|p| p.cells[1].is_none()) {
                    stats.end_of_stack_extents += 1;
                }
                for p in pieces {
                    w.push(p);
                }
            }
            Err(reason) => stats.skip(start, end, reason),
        }
    }
    w.flush();
    stats.init_records = w.inits;
    stats.delta_records = w.deltas;
    stats
}

/// The pieces of an extent: one, or one per `SP + k` range of an expanded CFA expression.
fn pieces(
    start: u64,
    end: u64,
    cfa: Vec<(u64, u64, String)>,
    rest: Cells,
    own_record: bool,
) -> Vec<Piece> {
    cfa.into_iter()
        .map(|(s, e, text)| {
            let mut cells = Vec::with_capacity(rest.len() + 1);
            cells.push(Some(text));
            cells.extend(rest.iter().cloned());
            Piece {
                start: s.max(start),
                end: e.min(end),
                cells,
                own_record,
            }
        })
        .collect()
}

/// The CFA of an expression rule: translated, or expanded per address if it reads the PC.
fn cfa_expression(
    e: &unwind_core::expr::Expr,
    t: &Target,
    pc: u8,
    sp: u8,
    start: u64,
    end: u64,
    stats: &mut ExportStats,
) -> Result<Vec<(u64, u64, String)>, SkipReason> {
    if reads(e, pc) {
        match expand_cfa(e, t, pc, sp, start, end) {
            Ok(rows) => {
                stats.expanded_extents += 1;
                stats.expanded_rows += rows.len() as u64;
                let sp_name = t.name(sp);
                return Ok(rows
                    .into_iter()
                    .map(|(s, e, k)| (s, e, format!("{sp_name} {k} +")))
                    .collect());
            }
            Err(err) => {
                // Written with the PC register if Breakpad can express it; else skipped.
                return translate(e, t, false)
                    .map(|text| vec![(start, end, text)])
                    .ok_or(match err {
                        ExpandError::TooLarge => SkipReason::ExpansionTooLarge,
                        ExpandError::NotLinear => SkipReason::ExpansionNotLinear,
                    });
            }
        }
    }
    translate(e, t, false)
        .map(|text| vec![(start, end, text)])
        .ok_or(SkipReason::CfaExpression)
}

/// A register rule's text (`None` for an expression Breakpad cannot write); `same` is the text of
/// "unchanged" for this register.
fn reg_text<R: TableRule>(
    r: StackCfiReg,
    same: &str,
    t: &Target,
    rules: &ModuleRules<R>,
) -> Result<Option<String>, SkipReason> {
    use StackCfiReg as S;
    let expr = |i: u16| rules.expr(i).ok_or(SkipReason::BadExpressionIndex);
    Ok(match r {
        S::Offset(o) => Some(format!(".cfa {o} + ^")),
        S::ValOffset(o) => Some(format!(".cfa {o} +")),
        S::Undefined => Some(".undef".into()),
        S::Same => Some(same.into()),
        S::Register(reg) => Some(t.name(reg).into()),
        S::Expr(i) => translate(expr(i)?, t, true).map(|t| format!("{t} ^")),
        S::ValExpr(i) => translate(expr(i)?, t, true),
    })
}

/// Writes the `STACK CFI` records of a module's rules (architecture `A`), with addresses relative
/// to `image_base_svma` (see [`image_base_svma`]), appending to `out`. Rules the architecture
/// does not write (ARM's `EXIDX_CANTUNWIND` rows: [`SkipReason::CantUnwind`]) are skipped.
pub fn write_stack_cfi<A: DwarfArch>(
    rules: &ModuleRules<A::Rule>,
    image_base_svma: u64,
    out: &mut String,
) -> ExportStats {
    let target = Target {
        names: A::BREAKPAD_REGISTERS,
        word_size: A::ADDRESS_SIZE,
    };
    let layout = Layout::of::<A>();
    let (pc, sp) = A::EXPRESSION_PC_SP;
    write_records(
        rules,
        image_base_svma,
        &layout,
        out,
        |start, end, rule, stats| {
            let r = A::stack_cfi(rule)?;
            let cfa = match r.cfa {
                StackCfiCfa::RegOffset(reg, o) => {
                    vec![(start, end, format!("{} {o} +", target.name(reg)))]
                }
                StackCfiCfa::Expr(i) => {
                    let e = rules.expr(i).ok_or(SkipReason::BadExpressionIndex)?;
                    cfa_expression(e, &target, pc, sp, start, end, stats)?
                }
            };
            let ra = match r.ra {
                StackCfiReg::Undefined => None,
                StackCfiReg::Same => return Err(SkipReason::ReturnAddressRule),
                reg => Some(
                    reg_text(reg, "", &target, rules)?
                        .ok_or(SkipReason::ReturnAddressExpression)?,
                ),
            };
            debug_assert_eq!(r.others.len(), A::BREAKPAD_OTHER_REGISTERS.len());
            let mut cells = Vec::with_capacity(r.others.len() + 1);
            cells.push(ra);
            // Counted once every register is written (a rule skipped later counts none).
            let mut undefined = 0;
            for (reg, &(_, same)) in r.others.into_iter().zip(A::BREAKPAD_OTHER_REGISTERS) {
                cells.push(match reg {
                    None => None,
                    Some(reg) => Some(reg_text(reg, same, &target, rules)?.unwrap_or_else(|| {
                        undefined += 1;
                        ".undef".into()
                    })),
                });
            }
            stats.registers_undefined += undefined;
            if r.signal_frame {
                stats.signal_frame_extents += 1;
            }
            Ok(pieces(start, end, cfa, cells, r.own_record))
        },
    )
}

#[cfg(test)]
mod tests;
