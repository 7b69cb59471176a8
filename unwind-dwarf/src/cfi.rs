//! Iterating every FDE row of `.eh_frame` and `.debug_frame` and feeding translated rows to a
//! rule builder, with statistics.

use gimli::{
    BaseAddresses, CieOrFde, CommonInformationEntry, DebugFrame, EhFrame, EndianSlice,
    LittleEndian, UnwindContext, UnwindSection, UnwindTableRow,
};
use unwind_core::table::{BuildStats, ModuleRules, ModuleRulesBuilder};

use crate::plt::{uncovered, PltSection};
use crate::DwarfError;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// The CFI sections of one module, with their file (stated) virtual addresses. Rule addresses
/// come out as file addresses; the table applies the load bias.
#[derive(Clone, Copy, Debug, Default)]
pub struct CfiSections<'a> {
    /// `.eh_frame` contents (may extend past the section's end: parsing stops at the zero
    /// terminator or the end of the slice).
    pub eh_frame: Option<&'a [u8]>,
    /// File address of `.eh_frame` (for PC-relative pointers).
    pub eh_frame_svma: u64,
    /// `.debug_frame` contents. Where both describe a function, `.eh_frame` wins.
    pub debug_frame: Option<&'a [u8]>,
    /// File address of `.text` (for text-relative pointers; rarely used).
    pub text_svma: u64,
    /// File address of `.got` (for data-relative pointers; rarely used).
    pub got_svma: u64,
    /// PLT sections: rules are synthesized where no FDE covers them (see [`crate::plt`]).
    pub plt: &'a [PltSection],
    /// File addresses `[start, end)` of the module's code, if known: FDEs outside it are skipped
    /// and counted, so one corrupt FDE cannot spread the module's extents beyond 4 GiB.
    pub code_range: Option<(u64, u64)>,
}

/// Why a CFI row was not kept. Dropped rows leave a gap, where the unwinder falls back to the
/// frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The CFA is an untracked register plus offset (e.g. `r10` while `main` realigns the stack).
    CfaUntrackedRegister,
    /// The CFA expression reads untracked registers or uses unsupported operations.
    CfaExpression,
    /// The return-address column has no rule.
    ReturnAddressMissing,
    /// The return-address rule is another register (x86_64: any; ARM: an untracked one),
    /// architectural, or (x86_64) "same value".
    ReturnAddressRule,
    /// The return-address expression is unsupported.
    ReturnAddressExpression,
    /// The frame-pointer rule is another register (ARM: an untracked one) or architectural.
    FramePointerRule,
    /// The frame-pointer expression is unsupported.
    FramePointerExpression,
    /// (ARM) The rule for SP or r12 is an untracked register or architectural.
    OtherRegisterRule,
    /// (ARM) The expression for SP or r12 is unsupported.
    OtherRegisterExpression,
    /// An offset does not fit in 32 bits.
    OffsetOutOfRange,
    /// The module has more than 65,535 distinct expressions.
    TooManyExpressions,
    /// The FDE's instructions were malformed; its rows were discarded.
    CorruptFde,
}

impl DropReason {
    /// Every reason, in a fixed order.
    pub const ALL: [DropReason; 12] = [
        DropReason::CfaUntrackedRegister,
        DropReason::CfaExpression,
        DropReason::ReturnAddressMissing,
        DropReason::ReturnAddressRule,
        DropReason::ReturnAddressExpression,
        DropReason::FramePointerRule,
        DropReason::FramePointerExpression,
        DropReason::OtherRegisterRule,
        DropReason::OtherRegisterExpression,
        DropReason::OffsetOutOfRange,
        DropReason::TooManyExpressions,
        DropReason::CorruptFde,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::CfaUntrackedRegister => "cfa-untracked-register",
            DropReason::CfaExpression => "cfa-expression",
            DropReason::ReturnAddressMissing => "ra-missing",
            DropReason::ReturnAddressRule => "ra-rule",
            DropReason::ReturnAddressExpression => "ra-expression",
            DropReason::FramePointerRule => "fp-rule",
            DropReason::FramePointerExpression => "fp-expression",
            DropReason::OtherRegisterRule => "reg-rule",
            DropReason::OtherRegisterExpression => "reg-expression",
            DropReason::OffsetOutOfRange => "offset-out-of-range",
            DropReason::TooManyExpressions => "too-many-expressions",
            DropReason::CorruptFde => "corrupt-fde",
        }
    }
}

/// What loading a module's CFI found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CfiStats {
    /// FDEs read.
    pub fdes: u64,
    /// `.debug_frame` FDEs skipped because `.eh_frame` describes the same addresses.
    pub fdes_shadowed: u64,
    /// FDEs skipped because they describe addresses outside the module's code.
    pub fdes_outside_code: u64,
    /// CIEs or FDEs that could not be parsed (a corrupt entry ends its section).
    pub bad_entries: u64,
    /// Rows gimli produced.
    pub rows: u64,
    /// Rows dropped, by reason (indexed like [`DropReason::ALL`]).
    pub dropped: [u64; DropReason::ALL.len()],
    /// Rows synthesized for PLT stubs without CFI.
    pub plt_rows: u64,
    /// Extents kept, merged and overlapping, from the table builder.
    pub table: BuildStats,
}

impl CfiStats {
    /// Rows dropped for `reason`.
    pub fn dropped_for(&self, reason: DropReason) -> u64 {
        self.dropped[reason as usize]
    }

    /// All dropped rows.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// `(reason, count)` for every reason with a non-zero count.
    pub fn drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|&r| (r, self.dropped_for(r)))
            .filter(|&(_, n)| n > 0)
    }
}

/// Translates one gimli row into an architecture's rule.
pub(crate) trait Translate {
    /// The rule type.
    type Rule: Copy + Ord;
    /// Address size in bytes.
    const ADDRESS_SIZE: u8;
    /// Translates `row`; expressions are interned in `builder`.
    fn translate<'a, S: UnwindSection<Slice<'a>>>(
        row: &UnwindTableRow<usize>,
        cie: &CommonInformationEntry<Slice<'a>>,
        section: &S,
        builder: &mut ModuleRulesBuilder<Self::Rule>,
        signal_frame: bool,
    ) -> Result<Self::Rule, DropReason>;

    /// Rules for a PLT section: `(start, end, rule)` rows covering it.
    fn plt_rows(
        plt: &PltSection,
        builder: &mut ModuleRulesBuilder<Self::Rule>,
    ) -> Result<Vec<(u64, u64, Self::Rule)>, DwarfError>;
}

struct Collector<'b, T: Translate> {
    builder: ModuleRulesBuilder<T::Rule>,
    stats: CfiStats,
    ctx: UnwindContext<usize>,
    rows: Vec<(u64, u64, T::Rule)>,
    bases: &'b BaseAddresses,
    code_range: Option<(u64, u64)>,
}

impl<T: Translate> Collector<'_, T> {
    /// Reads every FDE of `section`, recording the ranges of those kept in `ranges`;
    /// `skip(start, end)` says whether an FDE is shadowed.
    fn section<'a, S: UnwindSection<Slice<'a>>>(
        &mut self,
        section: &S,
        ranges: &mut Vec<(u64, u64)>,
        skip: impl Fn(u64, u64) -> bool,
    ) -> Result<(), DwarfError> {
        let mut entries = section.entries(self.bases);
        loop {
            let partial = match entries.next() {
                Ok(None) => return Ok(()),
                Ok(Some(CieOrFde::Cie(_))) => continue,
                Ok(Some(CieOrFde::Fde(partial))) => partial,
                Err(_) => {
                    // The entry's length cannot be trusted: nothing after it can be found.
                    self.stats.bad_entries += 1;
                    return Ok(());
                }
            };
            let fde = match partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
                Ok(fde) => fde,
                Err(_) => {
                    self.stats.bad_entries += 1;
                    continue;
                }
            };
            self.stats.fdes += 1;
            let (start, end) = (
                fde.initial_address(),
                fde.initial_address().saturating_add(fde.len()),
            );
            if let Some((lo, hi)) = self.code_range {
                if start < lo || end > hi {
                    self.stats.fdes_outside_code += 1;
                    continue;
                }
            }
            if skip(start, end) {
                self.stats.fdes_shadowed += 1;
                continue;
            }
            self.rows.clear();
            let signal = fde.is_signal_trampoline();
            let result: Result<(), gimli::Error> = (|| {
                let mut table = fde.rows(section, self.bases, &mut self.ctx)?;
                while let Some(row) = table.next_row()? {
                    self.stats.rows += 1;
                    match T::translate(row, fde.cie(), section, &mut self.builder, signal) {
                        Ok(rule) => self
                            .rows
                            .push((row.start_address(), row.end_address(), rule)),
                        Err(reason) => self.stats.dropped[reason as usize] += 1,
                    }
                }
                Ok(())
            })();
            if result.is_err() {
                self.stats.bad_entries += 1;
                self.stats.dropped[DropReason::CorruptFde as usize] += self.rows.len() as u64;
                continue;
            }
            // Only FDEs whose rows were kept shadow others (and lower-priority rows).
            ranges.push((start, end));
            for &(s, e, rule) in &self.rows {
                self.builder.push(s, e, rule)?;
            }
        }
    }
}

/// A module's DWARF rows (and synthesized PLT rows) in a builder, before it is built.
pub(crate) struct Collected<R> {
    /// The rows pushed so far.
    pub builder: ModuleRulesBuilder<R>,
    /// Counts so far (`table` not yet set).
    pub stats: CfiStats,
    /// The ranges of the FDEs kept and of the PLT rows synthesized, sorted: addresses that
    /// lower-priority rows (EXIDX) must not describe.
    pub covered: Vec<(u64, u64)>,
}

/// Reads and translates the CFI of one module and synthesizes PLT rows, without building the
/// table (an empty module gives an empty builder).
pub(crate) fn collect_rows<T: Translate>(
    sections: &CfiSections<'_>,
) -> Result<Collected<T::Rule>, DwarfError> {
    let bases = BaseAddresses::default()
        .set_eh_frame(sections.eh_frame_svma)
        .set_text(sections.text_svma)
        .set_got(sections.got_svma);
    let mut c = Collector::<T> {
        builder: ModuleRulesBuilder::new(),
        stats: CfiStats::default(),
        ctx: UnwindContext::new(),
        rows: Vec::new(),
        bases: &bases,
        code_range: sections.code_range,
    };
    let mut eh_ranges = Vec::new();
    if let Some(data) = sections.eh_frame {
        let mut s = EhFrame::new(data, LittleEndian);
        s.set_address_size(T::ADDRESS_SIZE);
        c.section(&s, &mut eh_ranges, |_, _| false)?;
    }
    eh_ranges.sort_unstable();
    let mut debug_ranges = Vec::new();
    if let Some(data) = sections.debug_frame {
        let mut s = DebugFrame::new(data, LittleEndian);
        s.set_address_size(T::ADDRESS_SIZE);
        c.section(&s, &mut debug_ranges, |start, end| {
            let i = eh_ranges.partition_point(|r| r.1 <= start);
            eh_ranges.get(i).is_some_and(|r| r.0 < end)
        })?;
    }
    let mut covered = eh_ranges;
    covered.extend(debug_ranges);
    covered.sort_unstable();
    let mut plt_ranges = Vec::new();
    for plt in sections.plt {
        for (start, end, rule) in T::plt_rows(plt, &mut c.builder)? {
            for (s, e) in uncovered(start, end, &covered) {
                c.builder.push(s, e, rule)?;
                c.stats.plt_rows += 1;
                plt_ranges.push((s, e));
            }
        }
    }
    covered.extend(plt_ranges);
    covered.sort_unstable();
    Ok(Collected {
        builder: c.builder,
        stats: c.stats,
        covered,
    })
}

/// Reads and translates the CFI of one module.
pub(crate) fn collect<T: Translate>(
    sections: &CfiSections<'_>,
) -> Result<(ModuleRules<T::Rule>, CfiStats), DwarfError> {
    if sections.eh_frame.is_none() && sections.debug_frame.is_none() && sections.plt.is_empty() {
        return Err(DwarfError::NoCfi);
    }
    let Collected {
        builder, mut stats, ..
    } = collect_rows::<T>(sections)?;
    let rules = builder.build()?;
    stats.table = rules.stats();
    Ok((rules, stats))
}

/// Reads and translates the CFI of one x86_64 module.
pub fn rules_from_sections(
    sections: &CfiSections<'_>,
) -> Result<(ModuleRules<unwind_core::x86_64::Rule>, CfiStats), DwarfError> {
    collect::<crate::x86_64::X86_64>(sections)
}

/// A register rule in the form both architectures' typed rules are made from: offsets checked,
/// expressions compiled and interned. Each architecture maps it to its own `RegRule`.
pub(crate) enum CommonRule {
    Undefined,
    Same,
    Offset(i32),
    ValOffset(i32),
    /// Another register (its DWARF number); the architecture decides if it is tracked.
    Register(u16),
    Expr(u16),
    ValExpr(u16),
}

/// What went wrong with one register's rule, before it is named for that register.
pub(crate) enum Bad {
    Rule,
    Expression,
    Offset,
}

impl Bad {
    /// The drop reason, given the ones for this register's rules and expressions.
    pub(crate) fn reason(self, rule: DropReason, expression: DropReason) -> DropReason {
        match self {
            Bad::Rule => rule,
            Bad::Expression => expression,
            Bad::Offset => DropReason::OffsetOutOfRange,
        }
    }
}

/// Compiles a CFI expression over the registers `tracked` maps to expression numbers.
pub(crate) fn expression<'a, S: UnwindSection<Slice<'a>>>(
    e: &gimli::UnwindExpression<usize>,
    cie: &CommonInformationEntry<Slice<'a>>,
    section: &S,
    pushes_cfa: bool,
    tracked: fn(gimli::Register) -> Option<u8>,
) -> Option<unwind_core::expr::Expr> {
    crate::compile::compile_expression(e.get(section).ok()?, cie.encoding(), pushes_cfa, tracked)
}

/// Translates a gimli register rule into a [`CommonRule`], interning expressions in `builder`.
pub(crate) fn common_rule<'a, S: UnwindSection<Slice<'a>>, R: Copy + Ord>(
    rule: gimli::RegisterRule<usize>,
    cie: &CommonInformationEntry<Slice<'a>>,
    section: &S,
    builder: &mut ModuleRulesBuilder<R>,
    tracked: fn(gimli::Register) -> Option<u8>,
) -> Result<CommonRule, Bad> {
    use gimli::RegisterRule as G;
    let off = |o: i64| offset(o).map_err(|_| Bad::Offset);
    Ok(match rule {
        G::Undefined => CommonRule::Undefined,
        G::SameValue => CommonRule::Same,
        G::Offset(o) => CommonRule::Offset(off(o)?),
        G::ValOffset(o) => CommonRule::ValOffset(off(o)?),
        G::Register(r) => CommonRule::Register(r.0),
        G::Expression(e) | G::ValExpression(e) => {
            let compiled = expression(&e, cie, section, true, tracked).ok_or(Bad::Expression)?;
            let i = builder.add_expr(compiled).map_err(|_| Bad::Expression)?;
            if matches!(rule, G::Expression(_)) {
                CommonRule::Expr(i)
            } else {
                CommonRule::ValExpr(i)
            }
        }
        _ => return Err(Bad::Rule),
    })
}

/// Offsets in rules are 32-bit.
pub(crate) fn offset(o: i64) -> Result<i32, DropReason> {
    i32::try_from(o).map_err(|_| DropReason::OffsetOutOfRange)
}
