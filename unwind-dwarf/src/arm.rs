//! 32-bit ARM: rows to [`unwind_core::arm::Rule`], rules for the ARM PLT, the merge of DWARF
//! CFI with EHABI unwind tables (`.ARM.exidx`), and how its rules are written as Breakpad
//! `STACK CFI` text.
//!
//! DWARF register numbers are the core registers' numbers (r0..r15 = 0..15); r7, r11, r12,
//! r13 (SP), r14 (LR) and r15 (PC) are tracked.
//!
//! The return address is the rule of the CIE's return-address column (r14 on every ARM
//! toolchain). Where that column has no rule, or "same value", the return address is still in
//! the register itself (the DWARF default for a register the CIE does not mention is the
//! ABI's, and for the RA column on ARM, as in LLVM's libunwind and GDB, it is "unchanged": at a
//! function's entry, where GCC's CIE says only `def_cfa r13, 0`, the return address is in LR).
//! The caller's LR gets the same rule as its PC: after the return LR holds nothing meaningful,
//! and when LR was pushed the saved word is the return address.

use gimli::{
    CommonInformationEntry, EndianSlice, LittleEndian, Register, RegisterRule, UnwindSection,
};
use object::read::elf::SectionHeader as _;
use object::Object as _;
use unwind_arm_exidx::{ExidxError, ExidxSections, ExidxStats};
use unwind_arm_prologue::{FrameState, Isa};
use unwind_core::arm::{CfaRule, Reg, RegRule, Rule, Source};
use unwind_core::table::ModuleRulesBuilder;
use unwind_core::Arm;

use crate::arch::{sealed::Sealed, Architecture, DwarfArch};
use crate::arm_code::{ArmCode, ArmSections};
use crate::breakpad::rule::{StackCfiCfa, StackCfiReg, StackCfiRule};
use crate::breakpad::SkipReason;
use crate::cfi::{
    common_rule, expression, offset, Bad, CfiSections, Collected, CommonRule, DropReason, RowSource,
};
use crate::elf::{section_data, section_named, SectionData};
use crate::plt::{uncovered, PltKind, PltSection};
use crate::{DwarfError, UnreadableSection};

type Slice<'a> = EndianSlice<'a, LittleEndian>;

impl Sealed for Arm {}

/// The tracked register that is DWARF register `r`, if tracked.
fn reg(r: Register) -> Option<Reg> {
    use gimli::Arm as G;
    Some(match r {
        G::R7 => Reg::R7,
        G::R11 => Reg::R11,
        G::R12 => Reg::R12,
        G::SP => Reg::Sp,
        G::LR => Reg::Lr,
        G::PC => Reg::Pc,
        _ => return None,
    })
}

fn reg_rule<'a, S: UnwindSection<Slice<'a>>>(
    rule: RegisterRule<usize>,
    cie: &CommonInformationEntry<Slice<'a>>,
    section: &S,
    builder: &mut ModuleRulesBuilder<Rule>,
) -> Result<RegRule, Bad> {
    Ok(match common_rule::<Arm, S>(rule, cie, section, builder)? {
        CommonRule::Undefined => RegRule::Undefined,
        CommonRule::Same => RegRule::Same,
        CommonRule::Offset(o) => RegRule::Offset(o),
        CommonRule::ValOffset(o) => RegRule::ValOffset(o),
        CommonRule::Register(r) => RegRule::Register(reg(r).ok_or(Bad::Rule)?),
        CommonRule::Expr(i) => RegRule::Expr(i),
        CommonRule::ValExpr(i) => RegRule::ValExpr(i),
    })
}

/// `reg_rule` for a register whose missing rule means "unchanged", with its drop reasons.
fn other_reg<'a, S: UnwindSection<Slice<'a>>>(
    rule: Option<RegisterRule<usize>>,
    cie: &CommonInformationEntry<Slice<'a>>,
    section: &S,
    builder: &mut ModuleRulesBuilder<Rule>,
    reasons: (DropReason, DropReason),
) -> Result<RegRule, DropReason> {
    match rule {
        None => Ok(RegRule::Same),
        Some(r) => reg_rule(r, cie, section, builder).map_err(|b| b.reason(reasons.0, reasons.1)),
    }
}

/// The row at a PLT stub's first instruction: nothing pushed, return address in LR.
fn plt_rule() -> Rule {
    Rule::default()
}

/// A register rule as a `STACK CFI` record states it.
fn stack_cfi_reg(r: RegRule) -> StackCfiReg {
    match r {
        RegRule::Offset(o) => StackCfiReg::Offset(o),
        RegRule::Undefined => StackCfiReg::Undefined,
        RegRule::Same => StackCfiReg::Same,
        RegRule::ValOffset(o) => StackCfiReg::ValOffset(o),
        RegRule::Register(r) => StackCfiReg::Register(r as u8),
        RegRule::Expr(i) => StackCfiReg::Expr(i),
        RegRule::ValExpr(i) => StackCfiReg::ValExpr(i),
    }
}

impl DwarfArch for Arm {
    const ARCHITECTURE: Architecture = Architecture::Arm;
    const ELF_MACHINE: object::elf::Machine = object::elf::EM_ARM;
    const ADDRESS_SIZE: u8 = 4;
    const SIGNAL_TRAMPOLINES: &'static [crate::sigreturn::SignalTrampoline<Rule>] =
        crate::sigreturn::ARM;

    fn return_sites(
        code: &[u8],
        svma: u64,
        is_code: &dyn Fn(u64) -> bool,
        out: &mut Vec<(u64, Option<u64>)>,
    ) {
        unwind_arm_prologue::calls::return_sites(code, svma, is_code, out);
    }

    type ArchStats = ArmStats;
    type ExtraSections<'a> = ArmSections<'a>;

    fn tracked(register: Register) -> Option<u8> {
        reg(register).map(|r| r as u8)
    }

    /// `.plt` (GNU ld and lld).
    const PLT_SECTIONS: &'static [(&'static str, PltKind)] = &[(".plt", PltKind::Lazy)];

    /// ARM PLT entries (`add ip, pc, ...; add ip, ip, ...; ldr pc, [ip, ...]!`, with an
    /// optional Thumb `bx pc; nop` prefix) use only ip and never touch the stack: the return
    /// address stays in LR. `PLT0`, the lazy-binding header at the start of `.plt` (GNU ld and
    /// lld alike), starts with `str lr, [sp, #-4]!` and jumps to the resolver with its fourth
    /// instruction: from its second instruction on, the return address is at `[sp]`.
    fn plt_rows(
        plt: &PltSection,
        _builder: &mut ModuleRulesBuilder<Rule>,
    ) -> Result<Vec<(u64, u64, Rule)>, DwarfError> {
        let end = plt.svma.saturating_add(plt.size);
        Ok(match plt.kind {
            PltKind::Jump => vec![(plt.svma, end, plt_rule())],
            PltKind::Lazy => {
                let at = |n: u64| plt.svma.saturating_add(n).min(end);
                let pushed = Rule {
                    cfa: CfaRule::RegOffset(Reg::Sp, 4),
                    pc: RegRule::Offset(-4),
                    lr: RegRule::Offset(-4),
                    ..Rule::default()
                };
                vec![
                    (plt.svma, at(4), plt_rule()),
                    (at(4), at(16), pushed),
                    (at(16), end, plt_rule()),
                ]
            }
        })
    }

    fn translate<'a, S: UnwindSection<Slice<'a>>>(
        row: &gimli::UnwindTableRow<usize>,
        cie: &CommonInformationEntry<Slice<'a>>,
        section: &S,
        builder: &mut ModuleRulesBuilder<Rule>,
        signal_frame: bool,
    ) -> Result<Rule, DropReason> {
        let cfa = match row.cfa() {
            gimli::CfaRule::RegisterAndOffset {
                register,
                offset: o,
            } => match reg(*register) {
                Some(r @ (Reg::Sp | Reg::R11 | Reg::R7 | Reg::R12)) => {
                    CfaRule::RegOffset(r, offset(*o)?)
                }
                _ => return Err(DropReason::CfaUntrackedRegister),
            },
            gimli::CfaRule::Expression(e) => {
                let compiled = expression::<Arm, S>(e, cie, section, false)
                    .ok_or(DropReason::CfaExpression)?;
                CfaRule::Expr(
                    builder
                        .add_expr(compiled)
                        .map_err(|_| DropReason::TooManyExpressions)?,
                )
            }
        };
        let ra_column = cie.return_address_register();
        // "Unchanged": the return address is still in the RA column's register.
        let unchanged = match reg(ra_column) {
            Some(r @ (Reg::Lr | Reg::R12 | Reg::R11 | Reg::R7)) => Some(RegRule::Register(r)),
            _ => None,
        };
        let pc = match row.register(ra_column) {
            None => unchanged.ok_or(DropReason::ReturnAddressMissing)?,
            Some(RegisterRule::SameValue) => unchanged.ok_or(DropReason::ReturnAddressRule)?,
            Some(r) => reg_rule(r, cie, section, builder).map_err(|b| {
                b.reason(
                    DropReason::ReturnAddressRule,
                    DropReason::ReturnAddressExpression,
                )
            })?,
        };
        // The caller's LR: the return address's rule ("the callee's LR" is "unchanged").
        let lr = match pc {
            RegRule::Register(Reg::Lr) => RegRule::Same,
            other => other,
        };
        let sp = match row.register(gimli::Arm::SP) {
            None => RegRule::ValOffset(0),
            r => other_reg(
                r,
                cie,
                section,
                builder,
                (
                    DropReason::OtherRegisterRule,
                    DropReason::OtherRegisterExpression,
                ),
            )?,
        };
        let others = (
            DropReason::OtherRegisterRule,
            DropReason::OtherRegisterExpression,
        );
        let fp = (
            DropReason::FramePointerRule,
            DropReason::FramePointerExpression,
        );
        let r12 = other_reg(row.register(gimli::Arm::R12), cie, section, builder, others)?;
        let r11 = other_reg(row.register(gimli::Arm::R11), cie, section, builder, fp)?;
        let r7 = other_reg(row.register(gimli::Arm::R7), cie, section, builder, fp)?;
        Ok(Rule {
            cfa,
            pc,
            lr,
            sp,
            r12,
            r11,
            r7,
            source: Source::Dwarf,
            signal_frame,
        })
    }

    /// The index: the section of type `SHT_ARM_EXIDX` (by name if the type is not found), and
    /// `.ARM.extab`, which its entries point into; and the code, its functions and mapping
    /// symbols, for prologue analysis.
    fn with_extra_sections<T>(
        elf: &object::File<'_>,
        code_range: Option<(u64, u64)>,
        unreadable: &mut Vec<UnreadableSection>,
        with: impl FnOnce(Option<&ArmSections<'_>>) -> T,
    ) -> T {
        let (exidx, extab) = exidx_and_extab(elf, unreadable);
        let code_end = code_range.map(|(_, end)| end);
        let code = ArmCode::read(elf, code_end);
        // Symbols say where each entry's function ends (code after it has no entry).
        let functions: Vec<(u64, u64)> = match exidx {
            Some(_) => code.functions.iter().map(|f| (f.start, f.end)).collect(),
            None => Vec::new(),
        };
        let exidx = exidx.as_ref().map(|(d, exidx_svma)| ExidxSections {
            exidx: d,
            exidx_svma: *exidx_svma,
            extab: extab.as_ref().map(|(d, _)| &d[..]),
            extab_svma: extab.as_ref().map_or(0, |(_, a)| *a),
            text_end: code_end,
            functions: &functions,
        });
        if exidx.is_none() && code.functions.is_empty() {
            return with(None);
        }
        with(Some(&ArmSections {
            exidx,
            code: Some(&code),
        }))
    }

    /// An EXIDX row is a whole function (up to the next entry), so it is clipped to the
    /// addresses no FDE or PLT row covers. A malformed index leaves the DWARF and PLT rows
    /// ([`ArmStats::exidx_error`]) unless it is the module's only unwind information.
    fn merge_extra(
        extra: &ArmSections<'_>,
        sections: &CfiSections<'_>,
        collected: &mut Collected<Rule>,
        only_source: bool,
    ) -> Result<ArmStats, DwarfError> {
        let mut stats = ArmStats::default();
        let mut pushed = Vec::new();
        if let Some(exidx) = &extra.exidx {
            match unwind_arm_exidx::rows(exidx) {
                Ok((rows, exidx_stats)) => {
                    stats.exidx = Some(exidx_stats);
                    merge_exidx(
                        &rows,
                        extra.code,
                        sections,
                        collected,
                        &mut stats,
                        &mut pushed,
                    )?;
                }
                // Keep the DWARF and PLT rows, and the rows read from instructions.
                Err(e) => stats.exidx_error = Some(e),
            }
        }
        if let Some(code) = extra.code {
            let mut covered = collected.covered.clone();
            covered.extend(pushed);
            covered.sort_unstable();
            merge_functions(code, &covered, collected, &mut stats)?;
        }
        // Nothing else was kept: the index's error is the module's.
        if only_source && stats.functions_from_instructions == 0 {
            if let Some(e) = stats.exidx_error.take() {
                return Err(DwarfError::Exidx(e));
            }
        }
        Ok(stats)
    }

    const BREAKPAD_NAME: &'static str = "arm";
    const BREAKPAD_REGISTERS: &'static [&'static str] = &["r7", "r11", "r12", "sp", "lr", "pc"];
    const EXPRESSION_PC_SP: (u8, u8) = (Reg::Pc as u8, Reg::Sp as u8);
    /// `sp` unless it is the CFA (EHABI's popped SP), and LR, r7, r11 and r12 unless unchanged.
    const BREAKPAD_OTHER_REGISTERS: &'static [(&'static str, &'static str)] = &[
        ("sp", ".cfa"),
        ("lr", "lr"),
        ("r7", "r7"),
        ("r11", "r11"),
        ("r12", "r12"),
    ];

    /// `.cfa`, `.ra` (our PC rule: `lr` while the return address is still in LR), then the
    /// other registers where their rule is not the walker's default. `EXIDX_CANTUNWIND` rows
    /// are skipped ([`SkipReason::CantUnwind`]); every other EHABI row starts its own record.
    fn stack_cfi(rule: &Rule) -> Result<StackCfiRule, SkipReason> {
        if rule.pc == RegRule::Undefined && rule.source == Source::Exidx {
            return Err(SkipReason::CantUnwind);
        }
        let other = |r: RegRule, default: RegRule| (r != default).then(|| stack_cfi_reg(r));
        Ok(StackCfiRule {
            cfa: match rule.cfa {
                CfaRule::RegOffset(r, o) => StackCfiCfa::RegOffset(r as u8, o),
                CfaRule::Expr(i) => StackCfiCfa::Expr(i),
            },
            ra: stack_cfi_reg(rule.pc),
            others: vec![
                other(rule.sp, RegRule::ValOffset(0)),
                other(rule.lr, RegRule::Same),
                other(rule.r7, RegRule::Same),
                other(rule.r11, RegRule::Same),
                other(rule.r12, RegRule::Same),
            ],
            signal_frame: rule.signal_frame,
            own_record: rule.source != Source::Dwarf,
        })
    }
}

/// What loading a 32-bit ARM module found besides its DWARF CFI ([`crate::LoadStats::arch`]):
/// the EHABI index and how its rows were merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArmStats {
    /// What reading `.ARM.exidx` found, if the module has it.
    pub exidx: Option<ExidxStats>,
    /// EXIDX rows (one per function) that describe at least part of their range.
    pub exidx_rows_used: u64,
    /// EXIDX rows whose whole range DWARF (or a PLT row) describes.
    pub exidx_rows_shadowed: u64,
    /// EXIDX rows used only in part (counted in `exidx_rows_used` too): DWARF describes the
    /// rest, typically the function itself, leaving the padding after it.
    pub exidx_rows_partial: u64,
    /// EXIDX rows outside the module's code (`CfiSections::code_range`), skipped; rows
    /// reaching past it are clipped.
    pub exidx_rows_outside_code: u64,
    /// Ranges pushed from EXIDX rows.
    pub exidx_ranges: u64,
    /// Why `.ARM.exidx` could not be read, if it could not: the module's DWARF CFI and PLT
    /// rows were kept without it (its Display names `.ARM.exidx`, the entry and its offset).
    pub exidx_error: Option<ExidxError>,
    /// EXIDX rows (of functions that save registers) whose instructions agree with the entry:
    /// their rows come from the instructions ([`Source::Instructions`]), exact in the prologue
    /// and epilogues, where the entry's rule is not.
    pub exidx_rows_from_instructions: u64,
    /// EXIDX rows (of functions that save registers) whose instructions, read as either
    /// instruction set, never agree with the entry: the entry's rule is kept for the whole
    /// function.
    pub exidx_rows_disagreeing: u64,
    /// Functions of the symbol table that no table describes (in whole or in part) and that
    /// got rows from their instructions.
    pub functions_from_instructions: u64,
    /// `EXIDX_CANTUNWIND` entries (functions that cannot throw, most of them, not ends of
    /// stacks) with functions whose instructions were read and confirmed by their exits
    /// ([`unwind_arm_prologue::Analysis::confirmed_rules`]): those functions get rows from
    /// their instructions; the rest of the entry still stops walks.
    pub cant_unwind_from_instructions: u64,
    /// Of the entries' bytes, those that got rows from their instructions this way.
    pub cant_unwind_bytes_from_instructions: u64,
    /// `EXIDX_CANTUNWIND` entries that are libgcc's unwinder entry points
    /// ([`crate::eh_return::arm_wrapper`]), given the wrapper's rows.
    pub unwinder_wrappers: u64,
}

/// Pushes the EXIDX rows where no FDE or PLT row describes their addresses (an EXIDX row is a
/// whole function, up to the next entry, so it is clipped to the addresses left), each range
/// recorded in `pushed`. A function whose instructions agree with its entry gets their rows
/// instead of the entry's one rule (exact in its prologue and epilogues too).
fn merge_exidx(
    rows: &[(u64, u64, Rule)],
    code: Option<&ArmCode<'_>>,
    sections: &CfiSections<'_>,
    collected: &mut Collected<Rule>,
    stats: &mut ArmStats,
    pushed: &mut Vec<(u64, u64)>,
) -> Result<(), DwarfError> {
    let count = |n: &mut u64| *n = n.saturating_add(1);
    for &(start, end, rule) in rows {
        // Function addresses are even; a Thumb bit left in a bound would misalign it.
        let (mut start, mut end) = (start & !1, end & !1);
        if let Some((lo, hi)) = sections.code_range {
            (start, end) = (start.max(lo), end.min(hi));
            if end <= start {
                count(&mut stats.exidx_rows_outside_code);
                continue;
            }
        }
        if end <= start {
            continue;
        }
        let pieces = uncovered(start, end, &collected.covered);
        match pieces.as_slice() {
            [] => count(&mut stats.exidx_rows_shadowed),
            [(s, e)] if (*s, *e) == (start, end) => count(&mut stats.exidx_rows_used),
            _ => {
                count(&mut stats.exidx_rows_used);
                count(&mut stats.exidx_rows_partial);
            }
        }
        if pieces.is_empty() {
            continue;
        }
        let refined = code.and_then(|code| match rule.pc {
            RegRule::Undefined => {
                let confirmed = confirm_cant_unwind(code, start, end, &rule, stats);
                unwinder_wrappers(code, (start, end), &rule, confirmed, collected, stats)
            }
            _ => refine_exidx(code, start, end, &rule, stats),
        });
        for &(s, e) in &pieces {
            match &refined {
                Some(rules) => {
                    collected.push_within(rules, s, e, RowSource::Exidx { start, end })?
                }
                None => {
                    collected.builder.push(s, e, rule)?;
                    collected
                        .extremes
                        .note(s, e, RowSource::Exidx { start, end });
                }
            }
            count(&mut stats.exidx_ranges);
            pushed.push((s, e));
        }
    }
    Ok(())
}

/// The rows of `[start, end)` with its instructions' states where the EXIDX entry's `rule`
/// is wrong: in the prologue (before the first instruction whose state `rule` describes) and in
/// each epilogue that starts from a state `rule` describes; the entry's rule everywhere else
/// (the body, and code that cannot be read). A function the symbols name inside the range has
/// a prologue of its own. `None` for entries that stop walks or describe a
/// leaf (the instructions cannot improve those), and when no reading agrees with `rule`: the
/// instruction set the symbols suggest is tried first, then the other. A stripped library's
/// entry may cover several functions, of which the symbols name only the exported ones; the
/// body rule is kept for all but these well-delimited parts so that a misread boundary between
/// unnamed functions changes nothing.
fn refine_exidx(
    code: &ArmCode<'_>,
    start: u64,
    end: u64,
    rule: &Rule,
    stats: &mut ArmStats,
) -> Option<Vec<(u64, u64, Rule)>> {
    if rule.pc == RegRule::Undefined || FrameState::ENTRY.describes(rule) {
        return None;
    }
    let first = code.isa_at(start).unwrap_or(Isa::Thumb);
    let other = match first {
        Isa::Arm => Isa::Thumb,
        Isa::Thumb => Isa::Arm,
    };
    let agreeing = [first, other]
        .into_iter()
        .filter_map(|isa| code.analyze(start, end, isa))
        .find(|a| a.agrees_with(rule));
    let Some(analysis) = agreeing else {
        stats.exidx_rows_disagreeing = stats.exidx_rows_disagreeing.saturating_add(1);
        return None;
    };
    stats.exidx_rows_from_instructions = stats.exidx_rows_from_instructions.saturating_add(1);
    // Neighbours with the same rule are merged when the table is built.
    let mut rows: Vec<(u64, u64, Rule)> = Vec::new();
    let mut push = |s: u64, e: u64, r: Rule| rows.push((s, e, r));
    let mut prologue = true;
    let mut at = start;
    for &(s, e, state) in &analysis.rows {
        if s > at {
            push(at, s, *rule);
        }
        // A function the symbols name starts its own prologue (the reading restarts there).
        prologue |= s != start && code.function_starts.binary_search(&s).is_ok();
        prologue &= !state.describes(rule);
        let epilogue = analysis
            .epilogues
            .iter()
            .any(|&(es, ee, body)| es <= s && e <= ee && body.describes(rule));
        let r = match (prologue || epilogue, state.rule()) {
            (true, Some(r)) => r,
            _ => *rule,
        };
        push(s, e, r);
        at = e;
    }
    if at < end {
        push(at, end, *rule);
    }
    Some(rows)
}

/// The rows of an `EXIDX_CANTUNWIND` entry's `[start, end)`: its functions' instructions'
/// states where their exits confirm the reading, the entry's stop (`rule`) everywhere else
/// (functions that never return, like `_start` and thread entries, code read as a guess, code
/// that cannot be read). GCC marks every function that cannot throw `.cantunwind` in code
/// built without `-funwind-tables` (armhf glibc's and libstdc++'s internal functions, libgcc's
/// unwinder): stopping there would cut stacks at their innermost frames. The instruction set
/// the symbols suggest is tried first, the other only if it confirms nothing. `None` when no
/// function is confirmed.
fn confirm_cant_unwind(
    code: &ArmCode<'_>,
    start: u64,
    end: u64,
    rule: &Rule,
    stats: &mut ArmStats,
) -> Option<Vec<(u64, u64, Rule)>> {
    let confirmed_as = |isa| {
        code.analyze_with_callees(start, end, isa)
            .map(|a| a.confirmed_rules())
            .filter(|rules| !rules.is_empty())
    };
    let confirmed = match code.isa_at(start) {
        Some(first) => confirmed_as(first).or_else(|| confirmed_as(other_isa(first)))?,
        // No symbol says which (a stripped executable): code read in the wrong one confirms a
        // few pieces by chance, the right one most of the code.
        None => {
            let bytes = |r: &Vec<(u64, u64, Rule)>| {
                r.iter()
                    .fold(0u64, |n, r| n.saturating_add(r.1.saturating_sub(r.0)))
            };
            match (confirmed_as(Isa::Thumb), confirmed_as(Isa::Arm)) {
                (Some(t), Some(a)) => Some(if bytes(&a) > bytes(&t) { a } else { t }),
                (t, a) => t.or(a),
            }?
        }
    };
    stats.cant_unwind_from_instructions = stats.cant_unwind_from_instructions.saturating_add(1);
    let mut rows = Vec::with_capacity(confirmed.len().saturating_mul(2));
    let mut at = start;
    for (s, e, r) in confirmed {
        if s > at {
            rows.push((at, s, *rule));
        }
        stats.cant_unwind_bytes_from_instructions = stats
            .cant_unwind_bytes_from_instructions
            .saturating_add(e.saturating_sub(s));
        rows.push((s, e, r));
        at = e;
    }
    if at < end {
        rows.push((at, end, *rule));
    }
    Some(rows)
}

/// The rows of an `EXIDX_CANTUNWIND` entry's `[start, end)` (`confirmed`: its rows read from
/// instructions, if any; else its stop `rule` throughout) with the rows of libgcc's unwinder
/// entry points inside it ([`crate::eh_return::arm_wrapper`], found at every halfword) in
/// place of theirs; `confirmed` where there are none.
fn unwinder_wrappers(
    code: &ArmCode<'_>,
    (start, end): (u64, u64),
    rule: &Rule,
    confirmed: Option<Vec<(u64, u64, Rule)>>,
    collected: &mut Collected<Rule>,
    stats: &mut ArmStats,
) -> Option<Vec<(u64, u64, Rule)>> {
    use crate::eh_return::arm_wrapper;
    let Some(bytes) = code.bytes(start, end) else {
        return confirmed;
    };
    // Where the wrappers are, first: the checking expression is added to the module's only
    // where one is.
    let mut found: Vec<(usize, Isa)> = Vec::new();
    let mut i = 0usize;
    while let Some(rest) = bytes.get(i..).filter(|r| !r.is_empty()) {
        let isas: &[Isa] = if start.wrapping_add(i as u64).is_multiple_of(4) {
            &[Isa::Thumb, Isa::Arm]
        } else {
            &[Isa::Thumb]
        };
        match isas
            .iter()
            .find_map(|&isa| Some((isa, arm_wrapper::length(rest, isa)?)))
        {
            Some((isa, len)) => {
                found.push((i, isa));
                i = i.saturating_add(usize::try_from(len).unwrap_or(2));
            }
            None => i = i.saturating_add(2),
        }
    }
    if found.is_empty() {
        return confirmed;
    }
    let Some(expr) =
        arm_wrapper::arm_wrapper_expression().and_then(|e| collected.builder.add_expr(e).ok())
    else {
        return confirmed;
    };
    let mut wrappers: Vec<(u64, u64, Rule)> = Vec::new();
    for (i, isa) in found {
        let at = start.wrapping_add(i as u64);
        let rows = bytes
            .get(i..)
            .and_then(|rest| arm_wrapper::rows(rest, at, isa, expr));
        wrappers.extend(rows.unwrap_or_default());
        stats.unwinder_wrappers = stats.unwinder_wrappers.saturating_add(1);
    }
    let base = confirmed.unwrap_or_else(|| vec![(start, end, *rule)]);
    // The base rows clipped around the wrappers, then the wrappers' rows.
    let mut rows: Vec<(u64, u64, Rule)> =
        Vec::with_capacity(base.len().saturating_add(wrappers.len()));
    for (s, e, r) in base {
        let mut at = s;
        for w in wrappers.iter().filter(|w| w.0 < e && s < w.1) {
            if at < w.0 {
                rows.push((at, w.0, r));
            }
            at = at.max(w.1);
        }
        if at < e {
            rows.push((at, e, r));
        }
    }
    rows.extend(wrappers);
    rows.sort_unstable_by_key(|r| r.0);
    Some(rows)
}

/// The other instruction set.
fn other_isa(isa: Isa) -> Isa {
    match isa {
        Isa::Arm => Isa::Thumb,
        Isa::Thumb => Isa::Arm,
    }
}

/// Gives each function of the symbol table that no row describes (in whole or in part) the
/// rows of its instructions, where nothing in `covered` describes them.
fn merge_functions(
    code: &ArmCode<'_>,
    covered: &[(u64, u64)],
    collected: &mut Collected<Rule>,
    stats: &mut ArmStats,
) -> Result<(), DwarfError> {
    // Symbols may overlap (aliases of different sizes): each address is pushed once.
    let mut done = 0u64;
    for f in &code.functions {
        let pieces = uncovered(f.start.max(done), f.end, covered);
        if pieces.is_empty() {
            continue;
        }
        let Some(analysis) = code.analyze(f.start, f.end, f.isa) else {
            continue;
        };
        let rules = analysis.rules();
        let source = RowSource::Instructions {
            start: f.start,
            end: f.end,
        };
        for &(s, e) in &pieces {
            collected.push_within(&rules, s, e, source)?;
        }
        done = f.end;
        stats.functions_from_instructions = stats.functions_from_instructions.saturating_add(1);
    }
    Ok(())
}

/// An ARM file's index and its table: the section of type `SHT_ARM_EXIDX` (by name if the type
/// is not found) and `.ARM.extab`, which its entries point into; sections that cannot be read
/// are left out and recorded in `unreadable`.
pub(crate) fn exidx_and_extab<'a>(
    elf: &object::File<'a>,
    unreadable: &mut Vec<UnreadableSection>,
) -> (Option<SectionData<'a>>, Option<SectionData<'a>>) {
    let exidx_section = match elf {
        object::File::Elf32(f) => f
            .sections()
            .find(|s| s.elf_section_header().sh_type(f.endian()) == object::elf::SHT_ARM_EXIDX)
            .map(|s| section_data(&s, ".ARM.exidx", unreadable)),
        _ => None,
    };
    let exidx = match exidx_section {
        Some(data) => data,
        None => section_named(elf, ".ARM.exidx", unreadable),
    };
    (exidx, section_named(elf, ".ARM.extab", unreadable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules_from_sections;
    use std::num::NonZeroU32;
    use std::sync::Arc;
    use unwind_core::arm::Regs;
    use unwind_core::table::ModuleRules;
    use unwind_core::{Arch, Arm};
    use unwind_core::{Found, RuleTable, RuleTableBuilder, StackImage};

    /// A `.debug_frame` (32-bit) with GCC's ARM CIE (code alignment 2, data alignment -4,
    /// return address column `ra`, `def_cfa r13, 0`) and one FDE per `(start, len, insns)`.
    fn debug_frame(ra: u8, fdes: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let mut cie = Vec::new();
        cie.extend(0xffff_ffffu32.to_le_bytes());
        cie.push(1); // version
        cie.push(0); // augmentation ""
        cie.push(2); // code alignment
        cie.push(0x7c); // data alignment -4
        cie.push(ra);
        cie.extend([0x0c, 13, 0]); // def_cfa r13, 0
        while cie.len() % 4 != 0 {
            cie.push(0);
        }
        let mut out = Vec::new();
        out.extend((cie.len() as u32).to_le_bytes());
        out.extend(&cie);
        for &(start, len, insns) in fdes {
            let mut fde = Vec::new();
            fde.extend(0u32.to_le_bytes()); // CIE at offset 0
            fde.extend(start.to_le_bytes());
            fde.extend(len.to_le_bytes());
            fde.extend(insns);
            while fde.len() % 4 != 0 {
                fde.push(0);
            }
            out.extend((fde.len() as u32).to_le_bytes());
            out.extend(&fde);
        }
        out
    }

    fn table(rules: ModuleRules<Rule>) -> RuleTable<Rule> {
        let mut b = RuleTableBuilder::new(NonZeroU32::new(1).unwrap());
        b.add(0, u64::MAX, 0, "m".into(), Arc::new(rules));
        b.build().unwrap()
    }

    /// A stack whose word at `a` is `a + 1`.
    fn stack() -> Vec<u8> {
        (0..256u32)
            .flat_map(|i| (0x8000 + i * 4 + 1).to_le_bytes())
            .collect()
    }

    #[test]
    fn prologue_rows_translate() {
        // push {r4, r7, lr}; add r7, sp, #4; ... sub sp, #16
        let insns: &[u8] = &[
            0x41, // advance 2
            0x0e, 12, // def_cfa_offset 12
            0x84, 3, // r4 at cfa-12
            0x87, 2, // r7 at cfa-8
            0x8e, 1,    // r14 at cfa-4
            0x41, // advance 2
            0x0c, 7, 8,    // def_cfa r7, 8
            0x41, // advance 2
            0x07, 14, // undefined r14
        ];
        let data = debug_frame(14, &[(0x1000, 0x20, insns)]);
        let (rules, stats) = rules_from_sections::<Arm>(
            &CfiSections {
                debug_frame: Some(&data),
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(stats.cfi.fdes, 1);
        assert_eq!(stats.cfi.rows, 4);
        assert_eq!(stats.cfi.dropped_total(), 0);
        assert_eq!(rules.lookup(0x1000), Some(Rule::default()));
        let pushed = Rule {
            cfa: CfaRule::RegOffset(Reg::Sp, 12),
            pc: RegRule::Offset(-4),
            lr: RegRule::Offset(-4),
            r7: RegRule::Offset(-8),
            ..Rule::default()
        };
        assert_eq!(rules.lookup(0x1002), Some(pushed));
        assert_eq!(
            rules.lookup(0x1004),
            Some(Rule {
                cfa: CfaRule::RegOffset(Reg::R7, 8),
                ..pushed
            })
        );
        let end = rules.lookup(0x1006).unwrap();
        assert!(end.is_end_of_stack());
        assert_eq!(rules.lookup(0x1020), None);

        let t = table(rules);
        let bytes = stack();
        let mem = StackImage::new(0x8000, &bytes);
        let regs = Regs {
            pc: 0x1002,
            lr: 0x77,
            sp: 0x8100,
            r12: 12,
            r11: 11,
            r7: 7,
        };
        let Found { module: m, rule } = t.lookup(0x1002).unwrap();
        let step = Arm::step_rule(&t, m, &rule, &regs, true, &mem).unwrap();
        assert_eq!(step.caller.sp, 0x810c);
        assert_eq!(step.caller.pc, 0x8108 + 1);
        assert_eq!(step.caller.lr, 0x8108 + 1);
        assert_eq!(step.caller.r7, 0x8104 + 1);
        assert_eq!(step.caller.r11, 11);
        let Found { module: m, rule } = t.lookup(0x1000).unwrap();
        let step = Arm::step_rule(&t, m, &rule, &regs, true, &mem).unwrap();
        assert_eq!(
            (step.caller.pc, step.caller.lr, step.caller.sp),
            (0x77, 0x77, 0x8100)
        );
    }

    #[test]
    fn untracked_and_unusual_rules() {
        let insns: &[u8] = &[
            0x0c, 4, 8, // def_cfa r4, 8: dropped
            0x41, 0x0c, 13, 8, // def_cfa sp, 8
            0x09, 14, 12, // register r14 in r12
            0x41, 0x09, 14, 5, // register r14 in r5: dropped
            0x41, 0x08, 14, // same_value r14
            0x41, 0x09, 11, 4, // r11 in r4: dropped
            0x41, 0x0c, 15, 0, // CFA on pc: dropped
        ];
        let data = debug_frame(14, &[(0x2000, 0x10, insns)]);
        let (rules, stats) = rules_from_sections::<Arm>(
            &CfiSections {
                debug_frame: Some(&data),
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(stats.cfi.dropped_for(DropReason::CfaUntrackedRegister), 2);
        assert_eq!(stats.cfi.dropped_for(DropReason::ReturnAddressRule), 1);
        assert_eq!(stats.cfi.dropped_for(DropReason::FramePointerRule), 1);
        assert_eq!(rules.lookup(0x2000), None);
        let r = rules.lookup(0x2002).unwrap();
        assert_eq!(r.pc, RegRule::Register(Reg::R12));
        assert_eq!(r.lr, RegRule::Register(Reg::R12));
        assert_eq!(r.cfa, CfaRule::RegOffset(Reg::Sp, 8));
        assert_eq!(rules.lookup(0x2004), None);
        let r = rules.lookup(0x2006).unwrap();
        assert_eq!((r.pc, r.lr), (RegRule::Register(Reg::Lr), RegRule::Same));
    }

    #[test]
    fn expressions_use_the_arm_registers() {
        // def_cfa_expression: breg11 (r11) 8; DW_CFA_expression r14: breg11 4
        let mut insns = vec![0x0f, 2, 0x7b, 8];
        insns.extend([0x10, 14, 2, 0x7b, 4]);
        // DW_CFA_val_expression r13: breg13 16 (explicit SP rule)
        insns.extend([0x16, 13, 2, 0x7d, 16]);
        let data = debug_frame(14, &[(0x3000, 0x10, &insns)]);
        let (rules, stats) = rules_from_sections::<Arm>(
            &CfiSections {
                debug_frame: Some(&data),
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(stats.cfi.dropped_total(), 0);
        let t = table(rules);
        let bytes = stack();
        let mem = StackImage::new(0x8000, &bytes);
        let regs = Regs {
            pc: 0x3000,
            lr: 0x77,
            sp: 0x8100,
            r12: 12,
            r11: 0x8200,
            r7: 7,
        };
        let Found { module: m, rule } = t.lookup(0x3000).unwrap();
        let step = Arm::step_rule(&t, m, &rule, &regs, true, &mem).unwrap();
        assert_eq!(step.caller.pc, 0x8204 + 1);
        assert_eq!(step.caller.sp, 0x8110);
    }

    #[test]
    fn plt_rules() {
        let plt = [PltSection {
            svma: 0x400,
            size: 0x5c,
            kind: PltKind::Lazy,
        }];
        let (rules, stats) = rules_from_sections::<Arm>(
            &CfiSections {
                plt: &plt,
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(stats.cfi.plt_rows, 3);
        let t = table(rules);
        let bytes = stack();
        let mem = StackImage::new(0x8000, &bytes);
        let regs = Regs {
            pc: 0,
            lr: 0x4321,
            sp: 0x8100,
            r12: 12,
            r11: 11,
            r7: 7,
        };
        for (pc, ra, sp) in [
            (0x400, 0x4321, 0x8100),
            (0x404, 0x8101, 0x8104),
            (0x40c, 0x8101, 0x8104),
            (0x410, 0x4321, 0x8100),
            (0x414, 0x4321, 0x8100),
            (0x458, 0x4321, 0x8100),
        ] {
            let Found { module: m, rule } = t.lookup(pc).unwrap();
            let step = Arm::step_rule(
                &t,
                m,
                &rule,
                &Regs {
                    pc: pc as u32,
                    ..regs
                },
                true,
                &mem,
            )
            .unwrap();
            assert_eq!((step.caller.pc, step.caller.sp), (ra, sp), "pc {pc:#x}");
        }
        assert!(t.lookup(0x45c).is_none());
    }

    /// An `.ARM.exidx` at `svma` with one entry per `(function start, second word)`.
    fn exidx(svma: u64, entries: &[(u64, u32)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &(f, w)) in entries.iter().enumerate() {
            let at = svma + 8 * i as u64;
            out.extend(((f.wrapping_sub(at) as u32) & 0x7fff_ffff).to_le_bytes());
            out.extend(w.to_le_bytes());
        }
        out
    }

    #[test]
    fn dwarf_wins_over_exidx() {
        // FDEs for [0x1000, 0x1010) and [0x1020, 0x1040); EXIDX entries (compact model 0,
        // "finish") at 0x1000, 0x1020 and 0x1040, the code ending at 0x1060.
        let data = debug_frame(
            14,
            &[
                (0x1000, 0x10, &[0x41, 0x0e, 8, 0x8e, 1]),
                (0x1020, 0x20, &[]),
            ],
        );
        let index = exidx(
            0x5000,
            &[
                (0x1000, 0x80b0_b0b0),
                (0x1020, 0x80b0_b0b0),
                (0x1040, 0x80b0_b0b0),
            ],
        );
        let ex = ExidxSections {
            exidx: &index,
            exidx_svma: 0x5000,
            extab: None,
            extab_svma: 0,
            text_end: Some(0x1060),
            functions: &[],
        };
        let (rules, stats) = rules_from_sections::<Arm>(
            &CfiSections {
                debug_frame: Some(&data),
                ..Default::default()
            },
            Some(&ex.into()),
        )
        .unwrap();
        let source = |a: u64| rules.lookup(a).map(|r| r.source);
        assert_eq!(source(0x1000), Some(Source::Dwarf));
        assert_eq!(source(0x100e), Some(Source::Dwarf));
        assert_eq!(
            rules.lookup(0x1002).unwrap().cfa,
            CfaRule::RegOffset(Reg::Sp, 8)
        );
        // The padding after the first function, which no FDE describes.
        assert_eq!(source(0x1010), Some(Source::Exidx));
        assert_eq!(source(0x101e), Some(Source::Exidx));
        assert_eq!(source(0x1020), Some(Source::Dwarf));
        assert_eq!(source(0x103e), Some(Source::Dwarf));
        assert_eq!(source(0x1040), Some(Source::Exidx));
        assert_eq!(source(0x105e), Some(Source::Exidx));
        assert_eq!(source(0x1060), None);
        assert_eq!(stats.arch.exidx.as_ref().map(|s| s.entries), Some(3));
        assert_eq!(stats.arch.exidx_rows_shadowed, 1);
        assert_eq!(stats.arch.exidx_rows_used, 2);
        assert_eq!(stats.arch.exidx_rows_partial, 1);
        assert_eq!(stats.arch.exidx_ranges, 2);
        assert_eq!(stats.arch.exidx_rows_outside_code, 0);

        // With a code range that ends at 0x1050, the last row is clipped; one entirely
        // outside it is skipped.
        let index = exidx(0x5000, &[(0x1040, 0x80b0_b0b0), (0x1060, 0x80b0_b0b0)]);
        let ex = ExidxSections {
            exidx: &index,
            text_end: Some(0x1080),
            functions: &[],
            ..ex
        };
        let (rules, stats) = rules_from_sections::<Arm>(
            &CfiSections {
                code_range: Some((0x1000, 0x1050)),
                ..Default::default()
            },
            Some(&ex.into()),
        )
        .unwrap();
        assert_eq!(rules.lookup(0x104e).map(|r| r.source), Some(Source::Exidx));
        assert_eq!(rules.lookup(0x1050), None);
        assert_eq!(stats.arch.exidx_rows_outside_code, 1);
    }

    #[test]
    fn exidx_fills_a_corrupt_fde() {
        // DW_CFA_restore_state without remember_state: gimli fails the FDE.
        let data = debug_frame(14, &[(0x1000, 0x20, &[0x41, 0x0b])]);
        let index = exidx(0x5000, &[(0x1000, 0x80b0_b0b0)]);
        let ex = ExidxSections {
            exidx: &index,
            exidx_svma: 0x5000,
            text_end: Some(0x1020),
            functions: &[],
            ..Default::default()
        };
        let (rules, stats) = rules_from_sections::<Arm>(
            &CfiSections {
                debug_frame: Some(&data),
                ..Default::default()
            },
            Some(&ex.into()),
        )
        .unwrap();
        assert_eq!(stats.cfi.bad_entries, 1);
        assert_eq!(stats.arch.exidx_rows_used, 1);
        assert_eq!(stats.arch.exidx_rows_partial, 0);
        assert_eq!(rules.lookup(0x1000).map(|r| r.source), Some(Source::Exidx));
    }

    #[test]
    fn no_sections_is_an_error() {
        assert!(matches!(
            rules_from_sections::<Arm>(&CfiSections::default(), None),
            Err(DwarfError::NoCfi)
        ));
    }
}
