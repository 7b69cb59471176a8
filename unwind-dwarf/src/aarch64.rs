//! 64-bit ARM (AArch64): rows to [`unwind_core::aarch64::Rule`] (PC, SP, x29 and x30 tracked;
//! DWARF registers 32, 31, 29 and 30), rules for the AArch64 PLT, and how its rules are written
//! as Breakpad `STACK CFI` text.
//!
//! The return address is the rule of the CIE's return-address column (x30 on every AArch64
//! toolchain). Where that column has no rule, or "same value", the return address is still in
//! x30: at a function's entry GCC's CIE says only `def_cfa sp, 0`.
//!
//! Pointer authentication: `DW_CFA_AARCH64_negate_ra_state` (opcode 0x2d, which the DWARF
//! standard gives to `DW_CFA_GNU_window_save` on SPARC) toggles the `RA_SIGN_STATE`
//! pseudo-register (34); gimli reads it as AArch64's instruction when the section's vendor is
//! [`gimli::Vendor::AArch64`] ([`DwarfArch::VENDOR`]) and keeps the register's value per row as a
//! constant, `DW_CFA_remember_state`/`restore_state` included. A row whose value is 1 has a
//! signed return address ([`Rule::ra_signed`]).

use gimli::{
    CommonInformationEntry, EndianSlice, LittleEndian, Register, RegisterRule, UnwindSection,
};
use unwind_core::aarch64::{CfaRule, Reg, RegRule, Rule};
use unwind_core::table::ModuleRulesBuilder;
use unwind_core::Aarch64;

use crate::arch::{is_elf_of, sealed::Sealed, Architecture, DwarfArch};
use crate::breakpad::rule::{StackCfiCfa, StackCfiReg, StackCfiRule};
use crate::breakpad::SkipReason;
use crate::cfi::{common_rule, expression, offset, Bad, CfiSections, Collected, CommonRule};
use crate::cfi::{DropReason, RowSource};
use crate::plt::{uncovered, PltKind, PltSection};
use crate::{DwarfError, UnreadableSection};

type Slice<'a> = EndianSlice<'a, LittleEndian>;

impl Sealed for Aarch64 {}

/// The tracked register that is DWARF register `r`, if tracked.
fn reg(r: Register) -> Option<Reg> {
    Reg::from_dwarf(r.0)
}

fn reg_rule<'a, S: UnwindSection<Slice<'a>>>(
    rule: RegisterRule<usize>,
    cie: &CommonInformationEntry<Slice<'a>>,
    section: &S,
    builder: &mut ModuleRulesBuilder<Rule>,
) -> Result<RegRule, Bad> {
    Ok(
        match common_rule::<Aarch64, S>(rule, cie, section, builder)? {
            CommonRule::Undefined => RegRule::Undefined,
            CommonRule::Same => RegRule::Same,
            CommonRule::Offset(o) => RegRule::Offset(o),
            CommonRule::ValOffset(o) => RegRule::ValOffset(o),
            CommonRule::Register(_) => return Err(Bad::Rule),
            CommonRule::Expr(i) => RegRule::Expr(i),
            CommonRule::ValExpr(i) => RegRule::ValExpr(i),
        },
    )
}

/// A register rule as a `STACK CFI` record states it.
fn stack_cfi_reg(r: RegRule) -> StackCfiReg {
    match r {
        RegRule::Offset(o) => StackCfiReg::Offset(o),
        // (`Lost` is a return-address rule only, and such rules are not written.)
        RegRule::Undefined | RegRule::Lost => StackCfiReg::Undefined,
        RegRule::Same => StackCfiReg::Same,
        RegRule::ValOffset(o) => StackCfiReg::ValOffset(o),
        RegRule::Expr(i) => StackCfiReg::Expr(i),
        RegRule::ValExpr(i) => StackCfiReg::ValExpr(i),
    }
}

/// The bytes of the AArch64 PLT header (`PLT0`) that GNU ld and lld write: 32 of them, then
/// 16-byte entries.
const PLT0_BYTES: u64 = 32;

impl DwarfArch for Aarch64 {
    const ARCHITECTURE: Architecture = Architecture::Aarch64;
    const ELF_MACHINE: object::elf::Machine = object::elf::EM_AARCH64;
    const ADDRESS_SIZE: u8 = 8;
    const VENDOR: gimli::Vendor = gimli::Vendor::AArch64;
    const SIGNAL_TRAMPOLINES: &'static [crate::sigreturn::SignalTrampoline<Rule>] =
        crate::sigreturn::AARCH64;

    fn return_sites(
        code: &[u8],
        svma: u64,
        is_code: &dyn Fn(u64) -> bool,
        out: &mut Vec<(u64, Option<u64>)>,
    ) {
        crate::return_sites::aarch64(code, svma, is_code, out);
    }

    type ArchStats = Aarch64Stats;
    type ExtraSections<'a> = A64Code<'a>;

    /// A little-endian ELF64 file (ILP32, ELF32 with `EM_AARCH64`, is another ABI).
    fn accepts_elf(file: &object::File<'_>) -> bool {
        use object::Object as _;
        is_elf_of::<Self>(file) && file.is_64()
    }

    fn tracked(register: Register) -> Option<u8> {
        reg(register).map(|r| r as u8)
    }

    /// The code and functions of the symbol table, if it has any.
    fn with_extra_sections<T>(
        elf: &object::File<'_>,
        code_range: Option<(u64, u64)>,
        _unreadable: &mut Vec<UnreadableSection>,
        with: impl FnOnce(Option<&A64Code<'_>>) -> T,
    ) -> T {
        let code = A64Code::read(elf, code_range.map(|(_, end)| end));
        with((!code.functions.is_empty()).then_some(&code))
    }

    /// Rows from the instructions of functions that no FDE or PLT row covers, in the parts they
    /// leave uncovered, where the function's exits confirm the reading.
    fn merge_extra(
        code: &A64Code<'_>,
        _sections: &CfiSections<'_>,
        collected: &mut Collected<Rule>,
        _only_source: bool,
    ) -> Result<Aarch64Stats, DwarfError> {
        let mut stats = Aarch64Stats::default();
        // Symbols may overlap (aliases of different sizes): each address is pushed once.
        let mut done = 0u64;
        for &(start, end) in &code.functions {
            let pieces = uncovered(start.max(done), end, &collected.covered);
            if pieces.is_empty() {
                continue;
            }
            let Some(analysis) = code.analyze(start, end) else {
                continue;
            };
            let rules = analysis.rules();
            if rules.is_empty() {
                stats.functions_not_confirmed = stats.functions_not_confirmed.saturating_add(1);
                continue;
            }
            for &(s, e) in &pieces {
                collected.push_within(&rules, s, e, RowSource::Instructions { start, end })?;
            }
            done = end;
            stats.functions_from_instructions = stats.functions_from_instructions.saturating_add(1);
        }
        Ok(stats)
    }

    /// `.plt` (GNU ld and lld).
    const PLT_SECTIONS: &'static [(&'static str, PltKind)] = &[(".plt", PltKind::Lazy)];

    /// AArch64 PLT entries (`adrp x16; ldr x17; add x16; br x17`) touch neither the stack nor
    /// x30: the return address stays in x30. `PLT0`, the lazy-binding header, starts with
    /// `stp x16, x30, [sp, #-16]!` and keeps x30 too: `CFA = sp + 16` after that store, until
    /// it jumps to the resolver. (With BTI the header starts with `bti c`, and its second
    /// instruction is then given the stored CFA one instruction early; the header runs only
    /// while a symbol is bound lazily.)
    fn plt_rows(
        plt: &PltSection,
        _builder: &mut ModuleRulesBuilder<Rule>,
    ) -> Result<Vec<(u64, u64, Rule)>, DwarfError> {
        let end = plt.svma.saturating_add(plt.size);
        Ok(match plt.kind {
            PltKind::Jump => vec![(plt.svma, end, Rule::default())],
            PltKind::Lazy => {
                let at = |n: u64| plt.svma.saturating_add(n).min(end);
                let pushed = Rule {
                    cfa: CfaRule::SpOffset(16),
                    ..Rule::default()
                };
                vec![
                    (plt.svma, at(4), Rule::default()),
                    (at(4), at(PLT0_BYTES), pushed),
                    (at(PLT0_BYTES), end, Rule::default()),
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
                Some(Reg::Sp) => CfaRule::SpOffset(offset(*o)?),
                Some(Reg::Fp) => CfaRule::FpOffset(offset(*o)?),
                _ => return Err(DropReason::CfaUntrackedRegister),
            },
            gimli::CfaRule::Expression(e) => {
                let compiled = expression::<Aarch64, S>(e, cie, section, false)
                    .ok_or(DropReason::CfaExpression)?;
                CfaRule::Expr(
                    builder
                        .add_expr(compiled)
                        .map_err(|_| DropReason::TooManyExpressions)?,
                )
            }
        };
        let ra_column = cie.return_address_register();
        let ra_reasons = (
            DropReason::ReturnAddressRule,
            DropReason::ReturnAddressExpression,
        );
        // "Unchanged": the return address is still in x30 (only if x30 is the column).
        let in_x30 = (ra_column == gimli::AArch64::X30).then_some(RegRule::Same);
        let ra = match row.register(ra_column) {
            None => in_x30.ok_or(DropReason::ReturnAddressMissing)?,
            Some(RegisterRule::SameValue) => in_x30.ok_or(DropReason::ReturnAddressRule)?,
            Some(r) => reg_rule(r, cie, section, builder)
                .map_err(|b| b.reason(ra_reasons.0, ra_reasons.1))?,
        };
        let lr = if ra_column == gimli::AArch64::X30 {
            ra
        } else {
            match row.register(gimli::AArch64::X30) {
                None => RegRule::Same,
                Some(r) => reg_rule(r, cie, section, builder).map_err(|b| {
                    b.reason(
                        DropReason::OtherRegisterRule,
                        DropReason::OtherRegisterExpression,
                    )
                })?,
            }
        };
        let fp = match row.register(gimli::AArch64::X29) {
            None => RegRule::Same,
            Some(r) => reg_rule(r, cie, section, builder).map_err(|b| {
                b.reason(
                    DropReason::FramePointerRule,
                    DropReason::FramePointerExpression,
                )
            })?,
        };
        // The caller's SP is the CFA; a row that says otherwise is not expressed.
        match row.register(gimli::AArch64::SP) {
            None | Some(RegisterRule::ValOffset(0)) => {}
            Some(_) => return Err(DropReason::OtherRegisterRule),
        }
        let ra_signed = match row.register(gimli::AArch64::RA_SIGN_STATE) {
            None | Some(RegisterRule::Constant(0)) => false,
            Some(RegisterRule::Constant(1)) => true,
            Some(_) => return Err(DropReason::ReturnAddressRule),
        };
        Ok(Rule {
            cfa,
            ra,
            lr,
            fp,
            ra_signed,
            signal_frame,
            from_instructions: false,
        })
    }

    /// glibc's lazy-binding trampoline (`_dl_runtime_resolve`) is entered from the PLT's header,
    /// which pushed x16 and x30 (16 bytes): its CFI puts the CFA below that push, and the return
    /// address above the CFA (`CFA + 8`), so a caller's SP taken as the CFA is 16 bytes short
    /// and the caller's frame is read 16 bytes off (a frame written twice, then a wrong caller:
    /// samples in the resolver, measured with `LD_BIND_NOT=1`). Such a function is recognised
    /// by its rows: the first says the CFA is SP and the return address is in x30 (the PLT's
    /// push already made), every later one that it is saved at `CFA + 8`, none saves x29 or
    /// signs. In it the caller's SP is above the push in every row: CFA + 16, the return
    /// address saved just below it.
    fn adjust_function(rows: &mut [(u64, u64, Rule)]) {
        let Some(((_, _, first), rest)) = rows.split_first() else {
            return;
        };
        let plain = |r: &Rule| r.fp == RegRule::Same && !r.ra_signed && r.lr == r.ra;
        let entered_from_plt = first.cfa == CfaRule::SpOffset(0)
            && first.ra == RegRule::Same
            && plain(first)
            && !rest.is_empty()
            && rest
                .iter()
                .all(|(_, _, r)| r.ra == RegRule::Offset(8) && plain(r));
        if !entered_from_plt {
            return;
        }
        for (_, _, r) in rows.iter_mut() {
            if let CfaRule::SpOffset(c) = r.cfa {
                if let Some(above) = c.checked_add(16) {
                    r.cfa = CfaRule::SpOffset(above);
                }
            }
            for reg in [&mut r.ra, &mut r.lr] {
                if let RegRule::Offset(o) = *reg {
                    *reg = RegRule::Offset(o.saturating_sub(16));
                }
            }
        }
    }

    const EH_RETURN: Option<crate::eh_return::EhReturnCode> = Some(crate::eh_return::AARCH64);

    fn return_address_lost(rule: Rule) -> Rule {
        Rule {
            ra: RegRule::Lost,
            lr: RegRule::Lost,
            ..rule
        }
    }

    fn cfa_register_offset(rule: &Rule) -> Option<(u16, i64)> {
        match rule.cfa {
            CfaRule::SpOffset(o) => Some((31, i64::from(o))),
            CfaRule::FpOffset(o) => Some((29, i64::from(o))),
            CfaRule::Expr(_) => None,
        }
    }

    const GO_CGO_FRAME: Option<crate::go::CgoFrame> = Some(crate::go::CgoFrame {
        sp_dwarf: 31,
        sp: unwind_core::aarch64::Reg::Sp as u8,
        g: 0,
        depth: 8,
        saved_sp: 8,
    });

    /// Go saves the link register at the bottom of its frame once the frame is made (and
    /// restores it before the frame is freed), as Go's linker writes it.
    fn go_frame_rule(delta: i64) -> Option<Rule> {
        let size = i32::try_from(delta).ok()?;
        let ra = if size > 0 {
            RegRule::Offset(size.checked_neg()?)
        } else {
            RegRule::Same
        };
        Some(Rule {
            cfa: CfaRule::SpOffset(size),
            ra,
            lr: ra,
            ..Rule::default()
        })
    }

    fn with_cfa_expression(rule: &Rule, expr: u16) -> Rule {
        Rule {
            cfa: CfaRule::Expr(expr),
            ..*rule
        }
    }

    /// Go's handler moved the stack pointer down 16 bytes and stored the interrupted x30 there
    /// before entering `asyncPreempt` with x30 the interrupted PC (`sigctxt.pushCall`), which
    /// its CFI does not describe: the CFA is 16 bytes higher, the return address where the CFI
    /// says, the caller's x30 in the stored slot.
    fn interrupted_caller(rule: &Rule) -> Option<Rule> {
        let CfaRule::SpOffset(cfa) = rule.cfa else {
            return None;
        };
        let ra = match rule.ra {
            RegRule::Same => RegRule::Same,
            RegRule::Offset(o) => RegRule::Offset(o.checked_sub(16)?),
            _ => return None,
        };
        Some(Rule {
            cfa: CfaRule::SpOffset(cfa.checked_add(16)?),
            ra,
            lr: RegRule::Offset(-16),
            signal_frame: true,
            ..*rule
        })
    }

    fn end_of_stack(rule: &Rule) -> Rule {
        Rule {
            ra: RegRule::Undefined,
            lr: RegRule::Undefined,
            ..*rule
        }
    }

    fn return_address_at(rule: Rule, expr: u16) -> Rule {
        Rule {
            ra: RegRule::Expr(expr),
            lr: RegRule::Expr(expr),
            fp: RegRule::Undefined,
            ..rule
        }
    }

    const BREAKPAD_NAME: &'static str = "arm64";
    const BREAKPAD_REGISTERS: &'static [&'static str] = &["pc", "sp", "x29", "x30"];
    const EXPRESSION_PC_SP: (u8, u8) = (Reg::Pc as u8, Reg::Sp as u8);
    /// x29 (callee-saved: the walker keeps it unless told otherwise) and x30 (written only
    /// where it is not the return address's rule: a signal frame).
    const BREAKPAD_OTHER_REGISTERS: &'static [(&'static str, &'static str)] =
        &[("x29", "x29"), ("x30", "x30")];

    /// `.cfa` (`sp k +`, `x29 k +`, or an expression), `.ra` (`x30` while the return address
    /// is still there), `x29` where it is not unchanged, and `x30` where it is not the return
    /// address. A signed return address is written as any other: Breakpad's walkers strip
    /// pointer authentication codes themselves.
    fn stack_cfi(rule: &Rule) -> Result<StackCfiRule, SkipReason> {
        let ra = match rule.ra {
            RegRule::Lost => return Err(SkipReason::CantUnwind),
            RegRule::Same => StackCfiReg::Register(Reg::Lr as u8),
            r => stack_cfi_reg(r),
        };
        Ok(StackCfiRule {
            cfa: match rule.cfa {
                CfaRule::SpOffset(o) => StackCfiCfa::RegOffset(Reg::Sp as u8, o),
                CfaRule::FpOffset(o) => StackCfiCfa::RegOffset(Reg::Fp as u8, o),
                CfaRule::Expr(i) => StackCfiCfa::Expr(i),
            },
            ra,
            others: vec![
                (rule.fp != RegRule::Same).then(|| stack_cfi_reg(rule.fp)),
                (rule.lr != rule.ra).then(|| stack_cfi_reg(rule.lr)),
            ],
            signal_frame: rule.signal_frame,
            own_record: false,
        })
    }
}

/// What loading a 64-bit ARM module found besides its DWARF CFI ([`crate::LoadStats::arch`]):
/// the functions read from their instructions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aarch64Stats {
    /// Functions of the symbol table that no table describes (in whole or in part) and that got
    /// rows from their instructions.
    pub functions_from_instructions: u64,
    /// Functions that no table describes whose reading their exits did not confirm (no exit
    /// reached, a `ret` reached with the frame not restored, two frames at one instruction):
    /// no rows.
    pub functions_not_confirmed: u64,
}

/// A 64-bit ARM module's code as `unwind_arm_prologue::a64` reads it: the bytes of its
/// executable sections and its functions ([`DwarfArch::ExtraSections`] of [`Aarch64`]).
#[derive(Clone, Debug, Default)]
pub struct A64Code<'a> {
    /// The executable sections' contents, by file address, sorted.
    pub sections: Vec<(u64, &'a [u8])>,
    /// The functions of `.symtab` (empty for a stripped file), `[start, end)`, sorted by start.
    /// The cold parts GCC splits off (`f.cold`), entered by a branch with `f`'s frame, are
    /// left out: read from an entry frame they would be misread.
    pub functions: Vec<(u64, u64)>,
    /// Where functions start, by the function symbols of `.symtab` and `.dynsym`, sorted: a
    /// branch to one with the frame restored is a tail call.
    pub function_starts: Vec<u64>,
    /// The PLT sections, `[start, end)`: a branch into one with the frame restored is a tail
    /// call too (C++ destructors end with `b operator delete@plt`).
    pub plt: Vec<(u64, u64)>,
}

impl<'a> A64Code<'a> {
    /// Reads `elf`'s code and functions (`code_end`: where its code ends, for the last
    /// function without a size).
    pub fn read(elf: &object::File<'a>, code_end: Option<u64>) -> Self {
        use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
        let mut cold: Vec<u64> = elf
            .symbols()
            .filter(|s| s.name().is_ok_and(|n| n.contains(".cold")))
            .map(|s| s.address())
            .collect();
        cold.sort_unstable();
        let functions = crate::elf::function_symbols(elf, code_end)
            .into_iter()
            .filter(|f| cold.binary_search(&f.0).is_err())
            .map(|(start, end, _)| (start, end))
            .collect();
        let plt = <Aarch64 as DwarfArch>::PLT_SECTIONS
            .iter()
            .filter_map(|(name, _)| elf.section_by_name(name))
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .collect();
        A64Code {
            sections: crate::elf::code_sections(elf),
            functions,
            function_starts: crate::elf::function_starts(elf),
            plt,
        }
    }

    /// The code bytes of `[start, end)`, if one section holds them all.
    pub fn bytes(&self, start: u64, end: u64) -> Option<&'a [u8]> {
        crate::elf::code_bytes(&self.sections, start, end)
    }

    /// Reads the function `[start, end)`, if its code can be read.
    pub fn analyze(&self, start: u64, end: u64) -> Option<unwind_arm_prologue::a64::Analysis> {
        let code = self.bytes(start, end)?;
        let is_entry = |a: u64| {
            self.function_starts.binary_search(&a).is_ok()
                || self.plt.iter().any(|&(s, e)| (s..e).contains(&a))
        };
        Some(unwind_arm_prologue::a64::analyze(code, start, is_entry))
    }
}
