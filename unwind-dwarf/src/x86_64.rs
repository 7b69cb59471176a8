//! x86_64: rows to [`unwind_core::x86_64::Rule`] (`rip`, `rsp` and `rbp` tracked), its PLT
//! rows, and how its rules are written as Breakpad `STACK CFI` text.

use gimli::{
    CommonInformationEntry, EndianSlice, LittleEndian, Register, RegisterRule, UnwindSection,
};
use unwind_core::table::ModuleRulesBuilder;
use unwind_core::x86_64::{CfaRule, Reg, RegRule, Rule};
use unwind_core::X86_64;

use crate::arch::{is_elf_of, sealed::Sealed, Architecture, DwarfArch, NoExtraSource};
use crate::breakpad::rule::{StackCfiCfa, StackCfiReg, StackCfiRule};
use crate::breakpad::SkipReason;
use crate::cfi::{common_rule, expression, offset, Bad, CommonRule, DropReason};
use crate::plt::{PltKind, PltSection};
use crate::DwarfError;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

impl Sealed for X86_64 {}

fn reg_rule<'a, S: UnwindSection<Slice<'a>>>(
    rule: RegisterRule<usize>,
    cie: &CommonInformationEntry<Slice<'a>>,
    section: &S,
    builder: &mut ModuleRulesBuilder<Rule>,
) -> Result<RegRule, Bad> {
    Ok(
        match common_rule::<X86_64, S>(rule, cie, section, builder)? {
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

impl DwarfArch for X86_64 {
    const ARCHITECTURE: Architecture = Architecture::X86_64;
    const ELF_MACHINE: object::elf::Machine = object::elf::EM_X86_64;
    const ADDRESS_SIZE: u8 = 8;

    fn return_sites(
        code: &[u8],
        svma: u64,
        is_code: &dyn Fn(u64) -> bool,
        out: &mut Vec<(u64, Option<u64>)>,
    ) {
        crate::return_sites::x86_64(code, svma, is_code, out);
    }

    type ArchStats = ();
    type ExtraSections<'a> = NoExtraSource;

    /// A little-endian ELF64 file: x32 (ELF32 with `EM_X86_64`) is another ABI, with 4-byte
    /// pointers.
    fn accepts_elf(file: &object::File<'_>) -> bool {
        use object::Object as _;
        is_elf_of::<Self>(file) && file.is_64()
    }

    fn tracked(register: Register) -> Option<u8> {
        match register {
            gimli::X86_64::RA => Some(Reg::Pc as u8),
            gimli::X86_64::RSP => Some(Reg::Sp as u8),
            gimli::X86_64::RBP => Some(Reg::Fp as u8),
            _ => None,
        }
    }

    /// `.plt` (16-byte lazy entries), `.plt.sec` and `.plt.got` (`endbr64` and an indirect
    /// `jmp`).
    const PLT_SECTIONS: &'static [(&'static str, PltKind)] = &[
        (".plt", PltKind::Lazy),
        (".plt.sec", PltKind::Jump),
        (".plt.got", PltKind::Jump),
    ];

    fn plt_rows(
        plt: &PltSection,
        builder: &mut ModuleRulesBuilder<Rule>,
    ) -> Result<Vec<(u64, u64, Rule)>, DwarfError> {
        let rule = |cfa| Rule {
            cfa,
            ra: RegRule::Offset(-8),
            fp: RegRule::Same,
            signal_frame: false,
        };
        let end = plt.svma.saturating_add(plt.size);
        Ok(match plt.kind {
            PltKind::Jump => vec![(plt.svma, end, rule(CfaRule::SpOffset(8)))],
            PltKind::Lazy => {
                let plt0 = plt.svma.saturating_add(16).min(end);
                // The entries' expression tests `rip & 15`: valid for 16-byte aligned entries.
                let entries = if plt.svma.is_multiple_of(16) {
                    let e = unwind_core::x86_64::plt_cfa_expression();
                    CfaRule::Expr(builder.add_expr(e)?)
                } else {
                    CfaRule::SpOffset(8)
                };
                vec![
                    (
                        plt.svma,
                        plt.svma.saturating_add(6).min(plt0),
                        rule(CfaRule::SpOffset(16)),
                    ),
                    (
                        plt.svma.saturating_add(6).min(plt0),
                        plt0,
                        rule(CfaRule::SpOffset(24)),
                    ),
                    (plt0, end, rule(entries)),
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
            } => match *register {
                gimli::X86_64::RSP => CfaRule::SpOffset(offset(*o)?),
                gimli::X86_64::RBP => CfaRule::FpOffset(offset(*o)?),
                _ => return Err(DropReason::CfaUntrackedRegister),
            },
            gimli::CfaRule::Expression(e) => {
                let compiled = expression::<X86_64, S>(e, cie, section, false)
                    .ok_or(DropReason::CfaExpression)?;
                CfaRule::Expr(
                    builder
                        .add_expr(compiled)
                        .map_err(|_| DropReason::TooManyExpressions)?,
                )
            }
        };
        let ra_column = cie.return_address_register();
        let ra = match row.register(ra_column) {
            None => return Err(DropReason::ReturnAddressMissing),
            Some(RegisterRule::SameValue) => return Err(DropReason::ReturnAddressRule),
            Some(r) => reg_rule(r, cie, section, builder).map_err(|b| {
                b.reason(
                    DropReason::ReturnAddressRule,
                    DropReason::ReturnAddressExpression,
                )
            })?,
        };
        let fp = match row.register(gimli::X86_64::RBP) {
            None => RegRule::Same,
            Some(r) => reg_rule(r, cie, section, builder).map_err(|b| {
                b.reason(
                    DropReason::FramePointerRule,
                    DropReason::FramePointerExpression,
                )
            })?,
        };
        Ok(Rule {
            cfa,
            ra,
            fp,
            signal_frame,
        })
    }

    const EH_RETURN: Option<crate::eh_return::EhReturnCode> = Some(crate::eh_return::X86_64);

    fn return_address_lost(rule: Rule) -> Rule {
        Rule {
            ra: RegRule::Lost,
            ..rule
        }
    }

    /// `rbx` (glibc's `_dl_runtime_resolve_*`: `push %rbx; mov %rsp, %rbx`, then the stack is
    /// realigned).
    const LAZY_BINDING_REGISTER: Option<u16> = Some(gimli::X86_64::RBX.0);

    /// The return address above the CFA as everywhere, `rbp` untouched.
    fn lazy_binding_rule(
        slot: i64,
        cfa_offset: i64,
        builder: &mut ModuleRulesBuilder<Rule>,
    ) -> Option<Rule> {
        let expr = crate::lazy_binding::cfa_expression(Reg::Sp as u8, slot, cfa_offset)?;
        Some(Rule {
            cfa: CfaRule::Expr(builder.add_expr(expr).ok()?),
            ra: RegRule::Offset(-8),
            fp: RegRule::Same,
            signal_frame: false,
        })
    }

    fn end_of_stack(rule: &Rule) -> Rule {
        Rule {
            ra: RegRule::Undefined,
            ..*rule
        }
    }

    const GO_CGO_FRAME: Option<crate::go::CgoFrame> = Some(crate::go::CgoFrame {
        sp_dwarf: gimli::X86_64::RSP.0,
        sp: Reg::Sp as u8,
        g: 8,
        depth: 0,
        saved_sp: 0,
    });

    fn go_frame_rule(delta: i64) -> Option<Rule> {
        Some(Rule {
            cfa: CfaRule::SpOffset(i32::try_from(delta.checked_add(8)?).ok()?),
            ..Rule::default()
        })
    }

    fn with_cfa_expression(rule: &Rule, expr: u16) -> Rule {
        Rule {
            cfa: CfaRule::Expr(expr),
            ..*rule
        }
    }

    /// Go pushes the interrupted PC as a return address: only its lookup differs.
    fn interrupted_caller(rule: &Rule) -> Option<Rule> {
        Some(Rule {
            signal_frame: true,
            ..*rule
        })
    }

    fn cfa_register_offset(rule: &Rule) -> Option<(u16, i64)> {
        match rule.cfa {
            CfaRule::SpOffset(o) => Some((gimli::X86_64::RSP.0, i64::from(o))),
            CfaRule::FpOffset(o) => Some((gimli::X86_64::RBP.0, i64::from(o))),
            CfaRule::Expr(_) => None,
        }
    }

    fn return_address_at(rule: Rule, expr: u16) -> Rule {
        Rule {
            ra: RegRule::Expr(expr),
            fp: RegRule::Undefined,
            ..rule
        }
    }

    const BREAKPAD_NAME: &'static str = "x86_64";
    const BREAKPAD_REGISTERS: &'static [&'static str] = &["$rip", "$rsp", "$rbp"];
    const EXPRESSION_PC_SP: (u8, u8) = (Reg::Pc as u8, Reg::Sp as u8);
    /// `rbp`: the walker keeps callee-saved registers unless told otherwise.
    const BREAKPAD_OTHER_REGISTERS: &'static [(&'static str, &'static str)] = &[("$rbp", "$rbp")];

    /// `.cfa` (`$rsp k +`, `$rbp k +`, or an expression), `.ra`, and `$rbp` where it is not
    /// unchanged.
    fn stack_cfi(rule: &Rule) -> Result<StackCfiRule, SkipReason> {
        if rule.ra == RegRule::Lost {
            return Err(SkipReason::CantUnwind);
        }
        Ok(StackCfiRule {
            cfa: match rule.cfa {
                CfaRule::SpOffset(o) => StackCfiCfa::RegOffset(Reg::Sp as u8, o),
                CfaRule::FpOffset(o) => StackCfiCfa::RegOffset(Reg::Fp as u8, o),
                CfaRule::Expr(i) => StackCfiCfa::Expr(i),
            },
            ra: stack_cfi_reg(rule.ra),
            others: vec![(rule.fp != RegRule::Same).then(|| stack_cfi_reg(rule.fp))],
            signal_frame: rule.signal_frame,
            own_record: false,
        })
    }
}
