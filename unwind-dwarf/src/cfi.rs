//! Iterating every FDE row of `.eh_frame` and `.debug_frame` and feeding translated rows to a
//! rule builder, with statistics.

use gimli::{
    BaseAddresses, CommonInformationEntry, DebugFrame, EhFrame, EndianSlice, LittleEndian,
    RegisterRule, UnwindContext, UnwindSection,
};
use std::fmt;

use unwind_core::table::{BuildStats, ModuleRules, ModuleRulesBuilder, TableRule};

use crate::arch::DwarfArch;
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
    /// The module's code (its executable segments), if at hand: where the end of libgcc's
    /// exception unwinding is recognised ([`crate::eh_return`]). Empty: not looked for.
    pub code: &'a crate::eh_return::Code<'a>,
    /// What a Go executable's function table adds ([`crate::go`]); `None`: not Go.
    pub go: Option<&'a crate::go::GoTables>,
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
    /// The row lies outside its FDE's address range (its instructions advance past the FDE's
    /// end or set the location elsewhere: a corrupt FDE). Rows that reach past the range only in
    /// part are clipped to it.
    OutsideFde,
}

impl DropReason {
    /// Every reason, in a fixed order.
    pub const ALL: [DropReason; 13] = [
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
        DropReason::OutsideFde,
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
            DropReason::OutsideFde => "outside-fde",
        }
    }
}

/// A DWARF call-frame information section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CfiSection {
    /// `.eh_frame`.
    EhFrame,
    /// `.debug_frame`.
    DebugFrame,
}

impl CfiSection {
    /// The section's name (`.eh_frame`, `.debug_frame`).
    pub fn name(self) -> &'static str {
        match self {
            CfiSection::EhFrame => ".eh_frame",
            CfiSection::DebugFrame => ".debug_frame",
        }
    }
}

impl fmt::Display for CfiSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a malformed CIE or FDE cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadEntryKind {
    /// The entry's length is unreadable or runs past the end of the section: where the next
    /// entry starts is unknown, so the rest of the section was not read.
    RestUnread,
    /// A CIE that could not be parsed was skipped (the FDEs that use it fail too).
    CieSkipped,
    /// An FDE whose header, or the CIE it points to, could not be parsed was skipped.
    FdeSkipped,
    /// The instructions of the FDE for `[start, end)` are malformed: all its rows were dropped
    /// (counted in [`DropReason::CorruptFde`]).
    RowsDropped {
        /// The FDE's first address.
        start: u64,
        /// One past its last address.
        end: u64,
    },
}

impl fmt::Display for BadEntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BadEntryKind::RestUnread => f.write_str("rest of the section not read"),
            BadEntryKind::CieSkipped => f.write_str("CIE skipped"),
            BadEntryKind::FdeSkipped => f.write_str("FDE skipped"),
            BadEntryKind::RowsDropped { start, end } => {
                write!(f, "rows of the FDE for {start:#x}..{end:#x} dropped")
            }
        }
    }
}

/// A CIE or FDE that could not be read: where it is, what it cost and what was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadEntry {
    /// The section it is in.
    pub section: CfiSection,
    /// The byte offset of the entry (its length field) in the section.
    pub offset: u64,
    /// What it cost.
    pub kind: BadEntryKind,
    /// What gimli found wrong (for [`BadEntryKind::RestUnread`], the length check's error).
    pub error: gimli::Error,
}

impl fmt::Display for BadEntry {
    /// `.eh_frame at offset 0x0: unexpected end of input (rest of the section not read)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at offset {:#x}: {} ({})",
            self.section, self.offset, self.error, self.kind
        )
    }
}

/// An FDE skipped because it describes addresses outside the module's code
/// ([`CfiSections::code_range`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdeOutsideCode {
    /// The section it is in.
    pub section: CfiSection,
    /// The byte offset of the FDE in the section.
    pub offset: u64,
    /// The addresses it describes, `[start, end)`.
    pub range: (u64, u64),
    /// The module's code, `[start, end)`.
    pub code: (u64, u64),
}

impl fmt::Display for FdeOutsideCode {
    /// `.eh_frame at offset 0x40: FDE for 0x1000..0x1010 outside the code 0x2000..0x3000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at offset {:#x}: FDE for {:#x}..{:#x} outside the code {:#x}..{:#x}",
            self.section, self.offset, self.range.0, self.range.1, self.code.0, self.code.1
        )
    }
}

/// Where a row of a module's table came from (for errors about the module's address span).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowSource {
    /// An FDE describing `[start, end)`.
    Fde {
        /// The section it is in.
        section: CfiSection,
        /// Its byte offset in the section.
        offset: u64,
        /// Its first address.
        start: u64,
        /// One past its last address.
        end: u64,
    },
    /// A PLT section (rules synthesized from its section header).
    Plt {
        /// Its file address.
        svma: u64,
        /// Its size.
        size: u64,
    },
    /// A row of a Go function `[start, end)` from Go's function table ([`crate::go`]).
    GoFunctionTable {
        /// The row's first address.
        start: u64,
        /// One past its last.
        end: u64,
    },
    /// The row `[start, end)` of the `.ARM.exidx` entry for the function at `start`.
    Exidx {
        /// The row's first address (the entry's function start).
        start: u64,
        /// One past its last address.
        end: u64,
    },
    /// The instructions of the function `[start, end)` of the symbol table (ARM).
    Instructions {
        /// The function's first address.
        start: u64,
        /// One past its last address.
        end: u64,
    },
}

impl fmt::Display for RowSource {
    /// `.eh_frame at offset 0x40: FDE for 0x1000..0x1010`, `PLT section at 0x400 (0x60
    /// bytes)`, `.ARM.exidx row 0x8000..0x8040`, `instructions of the function 0x8000..0x8040`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RowSource::Fde {
                section,
                offset,
                start,
                end,
            } => write!(
                f,
                "{section} at offset {offset:#x}: FDE for {start:#x}..{end:#x}"
            ),
            RowSource::Plt { svma, size } => {
                write!(f, "PLT section at {svma:#x} ({size:#x} bytes)")
            }
            RowSource::Exidx { start, end } => {
                write!(f, ".ARM.exidx row {start:#x}..{end:#x}")
            }
            RowSource::GoFunctionTable { start, end } => {
                write!(f, ".gopclntab row {start:#x}..{end:#x}")
            }
            RowSource::Instructions { start, end } => {
                write!(f, "instructions of the function {start:#x}..{end:#x}")
            }
        }
    }
}

/// The rows with the lowest start and the highest end pushed so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extremes {
    lowest: Option<(u64, RowSource)>,
    highest: Option<(u64, RowSource)>,
}

impl Extremes {
    /// Notes a row `[start, end)` from `source` (empty rows are not encoded).
    pub(crate) fn note(&mut self, start: u64, end: u64, source: RowSource) {
        if end <= start {
            return;
        }
        if self.lowest.is_none_or(|(s, _)| start < s) {
            self.lowest = Some((start, source));
        }
        if self.highest.is_none_or(|(e, _)| end > e) {
            self.highest = Some((end, source));
        }
    }

    /// The loader's error for a table error: a span too large names its two ends.
    pub(crate) fn error(&self, e: unwind_core::table::TableError) -> DwarfError {
        match (e, self.lowest, self.highest) {
            (
                unwind_core::table::TableError::RangeTooLarge,
                Some((_, lowest)),
                Some((_, highest)),
            ) => DwarfError::RangeTooLarge { lowest, highest },
            (e, _, _) => DwarfError::Table(e),
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
    /// The first of them, if any.
    pub first_fde_outside_code: Option<FdeOutsideCode>,
    /// CIEs or FDEs that could not be parsed, or whose instructions were malformed (an entry
    /// whose length is corrupt ends its section; other bad entries are skipped).
    pub bad_entries: u64,
    /// The first bad entries, in the order found (at most [`CfiStats::BAD_ENTRIES_KEPT`]).
    pub first_bad_entries: Vec<BadEntry>,
    /// Sections of the ELF file that could not be read and were left out (filled in by the ELF
    /// loader, [`crate::rules_from_elf`]).
    pub unreadable_sections: Vec<crate::UnreadableSection>,
    /// Rows gimli produced.
    pub rows: u64,
    /// Rows dropped, by reason (indexed like [`DropReason::ALL`]).
    pub dropped: [u64; DropReason::ALL.len()],
    /// Rows synthesized for PLT stubs without CFI.
    pub plt_rows: u64,
    /// Functions that call `__builtin_eh_return` (libgcc's `_Unwind_RaiseException` and its
    /// siblings) whose stretch after installing a handler's registers was found and made to
    /// stop walks ([`crate::eh_return`]).
    pub handler_installs: u64,
    /// Of them, those whose own context record was found: there the return address is read
    /// from it, and only the epilogue stops walks.
    pub handler_install_contexts: u64,
    /// Such functions where that stretch was not recognised: their CFI is kept as it is, and a
    /// sample at the end of an exception's unwinding may get a wrong caller there.
    pub handler_installs_unrecognised: u64,
    /// The dynamic linker's lazy-binding trampolines crossed at their call's return site
    /// (`lazy_binding`).
    pub lazy_binding_crossings: u64,
    /// Go's stack switches given their rows ([`crate::go`]): functions that end walks, and
    /// cgo calls' return sites.
    pub go_stack_switches: u64,
    /// Rows from Go's function table where no CFI describes a Go function ([`crate::go`]).
    pub go_rows: u64,
    /// Extents kept, merged and overlapping, from the table builder.
    pub table: BuildStats,
}

impl CfiStats {
    /// How many bad entries [`CfiStats::first_bad_entries`] keeps.
    pub const BAD_ENTRIES_KEPT: usize = 4;

    /// The first bad entry, if any.
    pub fn first_bad_entry(&self) -> Option<&BadEntry> {
        self.first_bad_entries.first()
    }

    /// Rows dropped for `reason`.
    pub fn dropped_for(&self, reason: DropReason) -> u64 {
        self.dropped.get(reason as usize).copied().unwrap_or(0)
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

struct Collector<'b, A: DwarfArch> {
    builder: ModuleRulesBuilder<A::Rule>,
    extremes: Extremes,
    stats: CfiStats,
    ctx: UnwindContext<usize>,
    rows: Vec<(u64, u64, A::Rule)>,
    bases: &'b BaseAddresses,
    code_range: Option<(u64, u64)>,
    code: &'b crate::eh_return::Code<'b>,
    /// Functions whose CFA is on [`DwarfArch::LAZY_BINDING_REGISTER`] somewhere.
    trampolines: Vec<crate::lazy_binding::Trampoline>,
    /// Functions that save that register at one offset.
    savers: Vec<crate::lazy_binding::Saver>,
}

/// Where an entry of a CFI section ends, from its length field at `at` (`at` < `data.len()`).
enum EntryLength {
    /// A zero length (4 or 12 bytes): `.eh_frame`'s terminator, or padding in `.debug_frame`
    /// (which gimli, like this loop, skips); the next entry starts at the offset.
    Zero(usize),
    /// An entry; the next one starts at the offset.
    Entry(usize),
}

/// Reads the initial length at `at`, as gimli does, and checks that the entry fits in `data`.
fn entry_length(data: &[u8], at: usize) -> Result<EntryLength, gimli::Error> {
    let eof =
        gimli::Error::UnexpectedEof(gimli::ReaderOffsetId(u64::try_from(at).unwrap_or(u64::MAX)));
    let u32_at = |o: usize| -> Option<u32> {
        Some(u32::from_le_bytes(
            data.get(o..o.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    let u64_at = |o: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            data.get(o..o.checked_add(8)?)?.try_into().ok()?,
        ))
    };
    let (header, len) = match u32_at(at).ok_or(eof)? {
        l if l < 0xffff_fff0 => (4usize, u64::from(l)),
        0xffff_ffff => (12, at.checked_add(4).and_then(u64_at).ok_or(eof)?),
        l => return Err(gimli::Error::UnknownReservedLength(l)),
    };
    let body = at.checked_add(header).ok_or(eof)?;
    let next = usize::try_from(len)
        .ok()
        .and_then(|l| body.checked_add(l))
        .filter(|&n| n <= data.len())
        .ok_or(eof)?;
    Ok(if len == 0 {
        EntryLength::Zero(next)
    } else {
        EntryLength::Entry(next)
    })
}

/// A section offset as `u64`.
fn offset64(o: usize) -> u64 {
    u64::try_from(o).unwrap_or(u64::MAX)
}

/// Adds one to a counter.
fn count(n: &mut u64) {
    *n = n.saturating_add(1);
}

impl<A: DwarfArch> Collector<'_, A> {
    /// Gives Go's stack switches their rows ([`crate::go`]), counted. The rows at `asmcgocall`'s
    /// return sites are made from Go's CFI there, as read before any switch's rows are set.
    fn switch_go_stacks(&mut self, switches: &[crate::go::StackSwitch]) -> Result<(), DwarfError> {
        use crate::go::SwitchKind;
        let mut rules = Vec::with_capacity(switches.len());
        for switch in switches {
            let rule = match (switch.kind, A::GO_CGO_FRAME) {
                (SwitchKind::FromGoroutine | SwitchKind::OnSystemStack, Some(frame)) => {
                    // Go's CFI there describes the frame on the goroutine's side of the switch:
                    // its CFA offset from the stack pointer before the switch, its return
                    // address.
                    let row = self.builder.rule_at(switch.at.0);
                    let expr = row
                        .and_then(|row| A::cfa_register_offset(&row))
                        .filter(|&(reg, _)| reg == frame.sp_dwarf)
                        .and_then(|(_, cfa)| crate::go::cfa_expression(switch.kind, &frame, cfa));
                    match (row, expr) {
                        (Some(row), Some(expr)) => {
                            let expr = self
                                .builder
                                .add_expr(expr)
                                .map_err(|e| self.extremes.error(e))?;
                            Some(A::with_cfa_expression(&row, expr))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            rules.push(rule);
        }
        for (switch, rule) in switches.iter().zip(rules) {
            let (start, end) = switch.at;
            let rewritten = match (switch.kind, rule) {
                (SwitchKind::Stops, _) => self.builder.rewrite(start, end, A::end_of_stack),
                (SwitchKind::Preempted, _) => self.builder.rewrite(start, end, |r| {
                    A::interrupted_caller(r).unwrap_or_else(|| A::end_of_stack(r))
                }),
                (_, Some(rule)) => self.builder.rewrite(start, end, |_| rule),
                (_, None) => continue,
            };
            rewritten.map_err(|e| self.extremes.error(e))?;
            count(&mut self.stats.go_stack_switches);
        }
        Ok(())
    }

    /// Counts a bad entry and keeps it if it is among the first.
    fn bad(&mut self, section: CfiSection, offset: usize, kind: BadEntryKind, error: gimli::Error) {
        count(&mut self.stats.bad_entries);
        if self.stats.first_bad_entries.len() < CfiStats::BAD_ENTRIES_KEPT {
            self.stats.first_bad_entries.push(BadEntry {
                section,
                offset: offset64(offset),
                kind,
                error,
            });
        }
    }

    /// Reads every FDE of `section` (whose bytes are `data`), recording the ranges of those
    /// kept in `ranges`; `skip(start, end)` says whether an FDE is shadowed.
    ///
    /// Entries are walked by their length fields (rather than with gimli's iterator, which
    /// stops at the first entry it cannot parse): an entry whose length is sound but whose
    /// contents are not is skipped, and the entries after it are still read.
    fn section<'a, S: UnwindSection<Slice<'a>>>(
        &mut self,
        which: CfiSection,
        data: &'a [u8],
        section: &S,
        ranges: &mut Vec<(u64, u64)>,
        skip: impl Fn(u64, u64) -> bool,
    ) -> Result<(), DwarfError> {
        let mut at = 0usize;
        while at < data.len() {
            let entry = at;
            match entry_length(data, entry) {
                Ok(EntryLength::Zero(_)) if which == CfiSection::EhFrame => return Ok(()),
                Ok(EntryLength::Zero(next)) => {
                    at = next;
                    continue;
                }
                Ok(EntryLength::Entry(next)) => at = next,
                Err(error) => {
                    self.bad(which, entry, BadEntryKind::RestUnread, error);
                    return Ok(());
                }
            }
            let partial = match section.partial_fde_from_offset(self.bases, S::Offset::from(entry))
            {
                Ok(partial) => partial,
                // (gimli's name for "this entry is a CIE".)
                Err(gimli::Error::NotCiePointer(_)) => {
                    if let Err(error) = section.cie_from_offset(self.bases, S::Offset::from(entry))
                    {
                        self.bad(which, entry, BadEntryKind::CieSkipped, error);
                    }
                    continue;
                }
                Err(error) => {
                    self.bad(which, entry, BadEntryKind::FdeSkipped, error);
                    continue;
                }
            };
            let fde = match partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
                Ok(fde) => fde,
                Err(error) => {
                    self.bad(which, entry, BadEntryKind::FdeSkipped, error);
                    continue;
                }
            };
            count(&mut self.stats.fdes);
            let (start, end) = (
                fde.initial_address(),
                fde.initial_address().saturating_add(fde.len()),
            );
            if let Some((lo, hi)) = self.code_range {
                if start < lo || end > hi {
                    count(&mut self.stats.fdes_outside_code);
                    self.stats
                        .first_fde_outside_code
                        .get_or_insert(FdeOutsideCode {
                            section: which,
                            offset: offset64(entry),
                            range: (start, end),
                            code: (lo, hi),
                        });
                    continue;
                }
            }
            if skip(start, end) {
                count(&mut self.stats.fdes_shadowed);
                continue;
            }
            self.rows.clear();
            let signal = fde.is_signal_trampoline();
            // Whether a row saves every register `__builtin_eh_return` passes data in.
            let data_registers = A::EH_RETURN.map_or(&[][..], |e| e.data_registers);
            let mut saves_eh_data = false;
            // Rows with the CFA on the lazy-binding register, and where it is saved (one offset).
            let mut trampoline_rows: Vec<(u64, u64, i64)> = Vec::new();
            let mut saved: Option<(i64, u64)> = None;
            let mut saved_at_one_offset = true;
            let result: Result<(), gimli::Error> = (|| {
                let mut table = fde.rows(section, self.bases, &mut self.ctx)?;
                while let Some(row) = table.next_row()? {
                    count(&mut self.stats.rows);
                    saves_eh_data |= !data_registers.is_empty()
                        && data_registers.iter().all(|&r| {
                            matches!(
                                row.register(gimli::Register(r)),
                                Some(RegisterRule::Offset(_))
                            )
                        });
                    // gimli does not bound rows by the FDE's range: clip them to it, so that
                    // the range checked against the code and the shadowing is the rows' too.
                    let (rs, re) = (row.start_address(), row.end_address());
                    if let Some(reg) = A::LAZY_BINDING_REGISTER {
                        if let gimli::CfaRule::RegisterAndOffset { register, offset } = row.cfa() {
                            if register.0 == reg {
                                trampoline_rows.push((rs.max(start), re.min(end), *offset));
                            }
                        }
                        if let Some(RegisterRule::Offset(k)) = row.register(gimli::Register(reg)) {
                            match saved {
                                None => saved = Some((k, rs)),
                                Some((at, _)) if at != k => saved_at_one_offset = false,
                                Some(_) => {}
                            }
                        }
                    }
                    if rs < re && (re <= start || rs >= end) {
                        if let Some(n) = self.stats.dropped.get_mut(DropReason::OutsideFde as usize)
                        {
                            count(n);
                        }
                        continue;
                    }
                    match A::translate(row, fde.cie(), section, &mut self.builder, signal) {
                        Ok(rule) => self.rows.push((rs.max(start), re.min(end), rule)),
                        Err(reason) => {
                            if let Some(n) = self.stats.dropped.get_mut(reason as usize) {
                                count(n);
                            }
                        }
                    }
                }
                Ok(())
            })();
            if let Err(error) = result {
                self.bad(
                    which,
                    entry,
                    BadEntryKind::RowsDropped { start, end },
                    error,
                );
                if let Some(n) = self.stats.dropped.get_mut(DropReason::CorruptFde as usize) {
                    *n = n.saturating_add(offset64(self.rows.len()));
                }
                continue;
            }
            A::adjust_function(&mut self.rows);
            if saves_eh_data {
                self.lose_return_address_after_install(start, end);
            }
            if !trampoline_rows.is_empty() {
                self.trampolines.push(crate::lazy_binding::Trampoline {
                    start,
                    end,
                    rows: trampoline_rows,
                });
            }
            if let (Some((offset, saved_from)), true) = (saved, saved_at_one_offset) {
                self.savers.push(crate::lazy_binding::Saver {
                    start,
                    offset,
                    saved_from,
                });
            }
            // Only FDEs whose rows were kept shadow others (and lower-priority rows).
            ranges.push((start, end));
            let source = RowSource::Fde {
                section: which,
                offset: offset64(entry),
                start,
                end,
            };
            for &(s, e, _) in &self.rows {
                self.extremes.note(s, e, source);
            }
            for &(s, e, rule) in &self.rows {
                self.builder.push(s, e, rule)?;
            }
        }
        Ok(())
    }
}

impl<A: DwarfArch> Collector<'_, A> {
    /// Gives each lazy-binding trampoline its row at its call's return site, and the rows of
    /// its callee before that saves the register the stop (`lazy_binding`), counted.
    fn cross_trampolines(&mut self) -> Result<(), DwarfError> {
        let (Some(arch), false) = (A::EH_RETURN, self.trampolines.is_empty()) else {
            return Ok(());
        };
        self.savers.sort_unstable_by_key(|s| s.start);
        for t in std::mem::take(&mut self.trampolines) {
            let Some(c) = crate::lazy_binding::crossing(
                &t,
                &self.savers,
                self.code,
                A::return_sites,
                arch.call_bytes,
            ) else {
                continue;
            };
            let Some(rule) = A::lazy_binding_rule(c.slot, c.cfa_offset, &mut self.builder) else {
                continue;
            };
            let (s, e) = c.return_site;
            self.builder.push(s, e, rule)?;
            let (from, to) = c.unsaved;
            self.builder
                .rewrite(from, to, |r| A::return_address_lost(*r))
                .map_err(|e| self.extremes.error(e))?;
            count(&mut self.stats.lazy_binding_crossings);
        }
        Ok(())
    }

    /// Makes the return address `Lost` in the rows of the function `[start, end)` (an FDE that
    /// saves the exception data registers) where its save slots may hold a handler's registers
    /// ([`crate::eh_return`]), and counts it.
    fn lose_return_address_after_install(&mut self, start: u64, end: u64) {
        let (Some(arch), false) = (A::EH_RETURN, self.code.is_empty()) else {
            return;
        };
        match crate::eh_return::install_stretches(&arch, A::return_sites, self.code, (start, end)) {
            Ok(install) => {
                // The rule of the rows whose CFA is as at the first call, which reads the return
                // address from the context record (its expression's index), if found.
                let from_context = install.context.and_then(|(call, base, offset)| {
                    let first = self.rows.iter().find(|r| r.0 <= call && call < r.1)?.2;
                    let cfa = A::cfa_register_offset(&first)?;
                    if cfa.0 != base {
                        return None;
                    }
                    let field = offset
                        .checked_sub(cfa.1)?
                        .checked_add(arch.context_cfa_field)?;
                    let expr = crate::eh_return::return_address_in_context(field)?;
                    Some((cfa, self.builder.add_expr(expr).ok()?))
                });
                let (no_start, no_end) = install.no_context;
                let rewrite = |at: u64, rule: A::Rule| match from_context {
                    Some((cfa, expr))
                        if A::cfa_register_offset(&rule) == Some(cfa)
                            && !(no_start..no_end).contains(&at) =>
                    {
                        A::return_address_at(rule, expr)
                    }
                    _ => A::return_address_lost(rule),
                };
                self.rows = crate::eh_return::lose_return_address(
                    &self.rows,
                    &install.stretches,
                    rewrite,
                    A::return_address_lost,
                );
                count(&mut self.stats.handler_installs);
                if from_context.is_some() {
                    count(&mut self.stats.handler_install_contexts);
                }
            }
            Err(crate::eh_return::NotFound::NoHook) => {}
            Err(crate::eh_return::NotFound::Unrecognised) => {
                count(&mut self.stats.handler_installs_unrecognised)
            }
        }
    }
}

/// A module's DWARF rows (and synthesized PLT rows) in a builder, before it is built; an
/// architecture's own unwind tables add theirs ([`DwarfArch::merge_extra`]).
pub struct Collected<R> {
    /// The rows pushed so far.
    pub builder: ModuleRulesBuilder<R>,
    /// The rows with the lowest start and highest end so far.
    pub extremes: Extremes,
    /// Counts so far (`table` not yet set).
    pub stats: CfiStats,
    /// The ranges of the FDEs kept and of the PLT rows synthesized, sorted: addresses that
    /// lower-priority rows (EXIDX) must not describe.
    pub covered: Vec<(u64, u64)>,
}

impl<R: TableRule> Collected<R> {
    /// Pushes the parts of `rules` (sorted, not overlapping) inside `[start, end)`, rows of
    /// `source`.
    pub(crate) fn push_within(
        &mut self,
        rules: &[(u64, u64, R)],
        start: u64,
        end: u64,
        source: RowSource,
    ) -> Result<(), DwarfError> {
        let first = rules.partition_point(|r| r.1 <= start);
        for (s, e, rule) in rules.get(first..).unwrap_or(&[]) {
            let (s, e) = ((*s).max(start), (*e).min(end));
            if s >= end {
                break;
            }
            if s < e {
                self.builder.push(s, e, *rule)?;
                self.extremes.note(s, e, source);
            }
        }
        Ok(())
    }
}

/// Reads and translates the CFI of one module and synthesizes PLT rows, without building the
/// table (an empty module gives an empty builder).
fn collect_rows<A: DwarfArch>(
    sections: &CfiSections<'_>,
) -> Result<Collected<A::Rule>, DwarfError> {
    let bases = BaseAddresses::default()
        .set_eh_frame(sections.eh_frame_svma)
        .set_text(sections.text_svma)
        .set_got(sections.got_svma);
    let mut c = Collector::<A> {
        builder: ModuleRulesBuilder::new(),
        extremes: Extremes::default(),
        stats: CfiStats::default(),
        ctx: UnwindContext::new(),
        rows: Vec::new(),
        bases: &bases,
        code_range: sections.code_range,
        code: sections.code,
        trampolines: Vec::new(),
        savers: Vec::new(),
    };
    let mut eh_ranges = Vec::new();
    if let Some(data) = sections.eh_frame {
        let mut s = EhFrame::new(data, LittleEndian);
        s.set_address_size(A::ADDRESS_SIZE);
        s.set_vendor(A::VENDOR);
        c.section(CfiSection::EhFrame, data, &s, &mut eh_ranges, |_, _| false)?;
    }
    eh_ranges.sort_unstable();
    let mut debug_ranges = Vec::new();
    if let Some(data) = sections.debug_frame {
        let mut s = DebugFrame::new(data, LittleEndian);
        s.set_address_size(A::ADDRESS_SIZE);
        s.set_vendor(A::VENDOR);
        c.section(
            CfiSection::DebugFrame,
            data,
            &s,
            &mut debug_ranges,
            |start, end| {
                let i = eh_ranges.partition_point(|r| r.1 <= start);
                eh_ranges.get(i).is_some_and(|r| r.0 < end)
            },
        )?;
    }
    c.cross_trampolines()?;
    let mut covered = eh_ranges;
    covered.extend(debug_ranges);
    covered.sort_unstable();
    if let Some(go) = sections.go {
        let mut go_ranges = Vec::new();
        for &(start, end, delta) in &go.sp_deltas {
            let Some(rule) = A::go_frame_rule(delta) else {
                continue;
            };
            for (s, e) in uncovered(start, end, &covered) {
                c.builder.push(s, e, rule)?;
                c.extremes
                    .note(s, e, RowSource::GoFunctionTable { start, end });
                count(&mut c.stats.go_rows);
                go_ranges.push((s, e));
            }
        }
        covered.extend(go_ranges);
        covered.sort_unstable();
        c.switch_go_stacks(&go.switches)?;
    }
    let mut plt_ranges = Vec::new();
    for plt in sections.plt {
        for (start, end, rule) in A::plt_rows(plt, &mut c.builder)? {
            for (s, e) in uncovered(start, end, &covered) {
                c.builder.push(s, e, rule)?;
                c.extremes.note(
                    s,
                    e,
                    RowSource::Plt {
                        svma: plt.svma,
                        size: plt.size,
                    },
                );
                count(&mut c.stats.plt_rows);
                plt_ranges.push((s, e));
            }
        }
    }
    covered.extend(plt_ranges);
    covered.sort_unstable();
    Ok(Collected {
        builder: c.builder,
        extremes: c.extremes,
        stats: c.stats,
        covered,
    })
}

/// What loading one module found: its DWARF CFI and PLT rows, and what its architecture adds
/// (ARM: the EHABI index).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadStats<A: DwarfArch> {
    /// DWARF CFI and synthesized PLT rows; `cfi.table` is the whole module's table (rows from
    /// the architecture's own unwind tables included).
    pub cfi: CfiStats,
    /// What the architecture's own unwind tables gave ([`DwarfArch::ArchStats`]).
    pub arch: A::ArchStats,
    /// The module's code as `[start, end)` file addresses ([`CfiSections::code_range`]), if
    /// known: with [`ModuleRules::bytes_without_rules`], how much of it no table describes.
    pub code_range: Option<(u64, u64)>,
}

/// Reads the unwind information of one module: DWARF CFI from `sections`, PLT rows synthesized
/// where no FDE covers `sections.plt`, and, where neither describes an address, the rows of the
/// architecture's own unwind tables (`extra`: ARM's `.ARM.exidx`; `None` for none).
///
/// DWARF wins wherever it has an FDE, being exact at every instruction (prologues and
/// epilogues included); an EXIDX entry describes its function only after the prologue.
pub fn rules_from_sections<A: DwarfArch>(
    sections: &CfiSections<'_>,
    extra: Option<&A::ExtraSections<'_>>,
) -> Result<(ModuleRules<A::Rule>, LoadStats<A>), DwarfError> {
    let dwarf_or_plt =
        sections.eh_frame.is_some() || sections.debug_frame.is_some() || !sections.plt.is_empty();
    if !dwarf_or_plt && extra.is_none() {
        return Err(DwarfError::NoCfi);
    }
    let mut collected = collect_rows::<A>(sections)?;
    let arch = match extra {
        Some(extra) => A::merge_extra(extra, sections, &mut collected, !dwarf_or_plt)?,
        None => A::ArchStats::default(),
    };
    let Collected {
        builder,
        extremes,
        mut stats,
        ..
    } = collected;
    let rules = builder.build().map_err(|e| extremes.error(e))?;
    stats.table = rules.stats();
    Ok((
        rules,
        LoadStats {
            cfi: stats,
            arch,
            code_range: sections.code_range,
        },
    ))
}

/// A register rule in the form both architectures' typed rules are made from: offsets checked,
/// expressions compiled and interned. Each architecture maps it to its own `RegRule`.
pub(crate) enum CommonRule {
    Undefined,
    Same,
    Offset(i32),
    ValOffset(i32),
    /// Another register; the architecture decides if it is tracked.
    Register(gimli::Register),
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

/// Compiles a CFI expression over the registers `A` tracks ([`DwarfArch::tracked`]).
pub(crate) fn expression<'a, A: DwarfArch, S: UnwindSection<Slice<'a>>>(
    e: &gimli::UnwindExpression<usize>,
    cie: &CommonInformationEntry<Slice<'a>>,
    section: &S,
    pushes_cfa: bool,
) -> Option<unwind_core::expr::Expr> {
    crate::compile::compile_expression(e.get(section).ok()?, cie.encoding(), pushes_cfa, A::tracked)
}

/// Translates a gimli register rule into a [`CommonRule`], interning expressions in `builder`.
pub(crate) fn common_rule<'a, A: DwarfArch, S: UnwindSection<Slice<'a>>>(
    rule: gimli::RegisterRule<usize>,
    cie: &CommonInformationEntry<Slice<'a>>,
    section: &S,
    builder: &mut ModuleRulesBuilder<A::Rule>,
) -> Result<CommonRule, Bad> {
    use gimli::RegisterRule as G;
    let off = |o: i64| offset(o).map_err(|_| Bad::Offset);
    Ok(match rule {
        G::Undefined => CommonRule::Undefined,
        G::SameValue => CommonRule::Same,
        G::Offset(o) => CommonRule::Offset(off(o)?),
        G::ValOffset(o) => CommonRule::ValOffset(off(o)?),
        G::Register(r) => CommonRule::Register(r),
        G::Expression(e) | G::ValExpression(e) => {
            let compiled = expression::<A, S>(&e, cie, section, true).ok_or(Bad::Expression)?;
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
