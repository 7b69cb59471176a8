//! x86_64 rows to [`unwind_core::x86_64::Rule`].

use gimli::{
    CommonInformationEntry, EndianSlice, LittleEndian, Register, RegisterRule, UnwindSection,
};
use unwind_core::table::ModuleRulesBuilder;
use unwind_core::x86_64::{CfaRule, Reg, RegRule, Rule};

use crate::cfi::{common_rule, expression, offset, Bad, CommonRule, DropReason, Translate};
use crate::plt::{PltKind, PltSection};
use crate::DwarfError;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// DWARF register numbers (x86_64 psABI, figure 3.36).
const RSP: u16 = 7;
const RBP: u16 = 6;
const RIP: u16 = 16;

fn tracked(r: Register) -> Option<u8> {
    match r.0 {
        RIP => Some(Reg::Pc as u8),
        RSP => Some(Reg::Sp as u8),
        RBP => Some(Reg::Fp as u8),
        _ => None,
    }
}

pub(crate) struct X86_64;

fn reg_rule<'a, S: UnwindSection<Slice<'a>>>(
    rule: RegisterRule<usize>,
    cie: &CommonInformationEntry<Slice<'a>>,
    section: &S,
    builder: &mut ModuleRulesBuilder<Rule>,
) -> Result<RegRule, Bad> {
    Ok(match common_rule(rule, cie, section, builder, tracked)? {
        CommonRule::Undefined => RegRule::Undefined,
        CommonRule::Same => RegRule::Same,
        CommonRule::Offset(o) => RegRule::Offset(o),
        CommonRule::ValOffset(o) => RegRule::ValOffset(o),
        CommonRule::Register(_) => return Err(Bad::Rule),
        CommonRule::Expr(i) => RegRule::Expr(i),
        CommonRule::ValExpr(i) => RegRule::ValExpr(i),
    })
}

impl Translate for X86_64 {
    type Rule = Rule;
    const ADDRESS_SIZE: u8 = 8;

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
            } => match register.0 {
                RSP => CfaRule::SpOffset(offset(*o)?),
                RBP => CfaRule::FpOffset(offset(*o)?),
                _ => return Err(DropReason::CfaUntrackedRegister),
            },
            gimli::CfaRule::Expression(e) => {
                let compiled =
                    expression(e, cie, section, false, tracked).ok_or(DropReason::CfaExpression)?;
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
        let fp = match row.register(Register(RBP)) {
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
}
