//! The gimli differential's comparison, written once for every architecture: every row of every
//! FDE of a section, at its first and its last instruction, unwound once with our table's rule
//! (`Arch::step_rule`) and once by evaluating gimli's row ([`DiffArch::expected`]) on a synthetic
//! stack. The two must give the same caller, or our table must have no rule there.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, EndianSlice, LittleEndian, Register,
    RegisterRule, UnwindContext, UnwindSection, UnwindTableRow,
};
use object::{Object, ObjectSection};
use unwind_core::{Arch, Found, RuleTable, RuleTableBuilder, StackImage, StopReason, Trust};
use unwind_dwarf::DwarfArch;

use super::Val;

pub type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// What gimli's row says the caller looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected<R> {
    /// The caller's registers, and whether its PC is exact (the FDE is a signal trampoline's).
    Caller { regs: R, exact: bool },
    /// The return-address rule is undefined.
    EndOfStack,
    /// A read fell outside the synthetic stack.
    ReadFailed,
    /// The row needs an untracked register or a rule our tables cannot express: our table must
    /// have no rule for it.
    MustDrop(&'static str),
    /// gimli could not evaluate an expression.
    EvalError(gimli::Error),
}

/// An architecture as the differential sees it: its synthetic callee registers and how its
/// rows read (the conventions of its DWARF register set).
pub trait DiffArch: Arch {
    /// The synthetic callee's registers at `pc`, their values inside or near the synthetic
    /// stack.
    fn regs_at(pc: u64) -> Self::Regs;

    /// Evaluates gimli's `row` on `regs` and `image`: the caller, or why there is none (in the
    /// order our unwinder evaluates: CFA, return address, the other registers).
    fn expected<'a, S: UnwindSection<Slice<'a>>>(
        row: &UnwindTableRow<usize>,
        cie: &gimli::CommonInformationEntry<Slice<'a>>,
        section: &S,
        regs: &Self::Regs,
        image: &StackImage<'_>,
        signal: bool,
    ) -> Expected<Self::Regs>;

    /// Whether a CFA on `register` is on a frame pointer (counted: such rows must be met).
    fn cfa_on_frame_pointer(register: Register) -> bool;

    /// The address of a row's last instruction, the row ending at `end`.
    fn last_instruction(end: u64) -> u64;

    /// Whether `rule` came from another table than DWARF CFI (ARM's EXIDX, instructions).
    fn not_dwarf(_rule: &Self::Rule) -> bool {
        false
    }

    /// Whether `rule` is one the loader made, on purpose unlike the CFI, where libgcc's unwinder
    /// installs a handler's registers over the frame's save slots (`unwind_dwarf::eh_return`:
    /// the return address lost, or read from the unwinder's context record).
    fn handler_install(_rule: &Self::Rule) -> bool {
        false
    }

    /// Whether what `rule` records beyond the caller's registers agrees with gimli's `row`
    /// (aarch64: the return address's signing state, which the walk does not use).
    fn same_flags(_row: &UnwindTableRow<usize>, _rule: &Self::Rule) -> bool {
        true
    }
}

/// What gimli's values for a row's registers say when one of them is not a value, in the order
/// our unwinder evaluates (`values`: the CFA, the return address, then the other registers): a
/// rule our tables cannot express anywhere in the row first (the row must be dropped), then the
/// CFA's failure, the end of the stack (`ra_undefined`), the others' failures. `None`: every one
/// is a value.
pub fn not_a_caller<W, R>(values: &[&Val<W>], ra_undefined: bool) -> Option<Expected<R>> {
    if let Some(why) = values.iter().find_map(|v| match v {
        Val::MustDrop(why) => Some(*why),
        _ => None,
    }) {
        return Some(Expected::MustDrop(why));
    }
    let fail = |v: &Val<W>| match v {
        Val::ReadFailed => Some(Expected::ReadFailed),
        Val::Error(e) => Some(Expected::EvalError(*e)),
        _ => None,
    };
    let (cfa, others) = values.split_first()?;
    if let Some(f) = fail(cfa) {
        return Some(f);
    }
    if ra_undefined {
        return Some(Expected::EndOfStack);
    }
    others.iter().find_map(|v| fail(v))
}

/// Whether our step agrees with gimli's row.
pub fn agrees<A: Arch>(
    expected: &Expected<A::Regs>,
    ours: &Result<unwind_core::Step<A::Regs>, StopReason>,
) -> bool {
    match (expected, ours) {
        (Expected::Caller { regs, exact }, Ok(step)) => {
            step.caller == *regs && step.exact == *exact && step.trust == Trust::Cfi
        }
        (Expected::EndOfStack, Err(StopReason::EndOfStack)) => true,
        (Expected::ReadFailed, Err(StopReason::ReadFailed)) => true,
        (Expected::EvalError(_), Err(StopReason::ExpressionFailed)) => true,
        _ => false,
    }
}

/// What a comparison met, counted.
#[derive(Default, Debug, Clone, Copy)]
pub struct Summary {
    pub fdes: u64,
    pub gimli_errors: u64,
    pub rows: u64,
    pub empty_rows: u64,
    /// Rows whose first instruction has a rule of ours.
    pub compared: u64,
    /// Of those, the rows where both agree.
    pub identical: u64,
    /// Rows without a rule of ours at their first instruction.
    pub ours_none: u64,
    /// Of those, the rows gimli also says must be dropped.
    pub ours_none_must_drop: u64,
    /// Rows in address ranges more than one FDE covers (where either may win).
    pub overlap_rows: u64,
    pub overlap_mismatches: u64,
    /// Rules looked up that came from another table than DWARF ([`DiffArch::not_dwarf`]).
    pub not_dwarf: u64,
    pub end_of_stack: u64,
    pub read_failed: u64,
    pub expr_errors: u64,
    pub cfa_fp: u64,
    pub expr_rows: u64,
    pub identical_with_expr: u64,
    /// Rows also compared at their last instruction.
    pub last_checked: u64,
    /// Rows where ours differs on purpose: libgcc's handler installation
    /// ([`DiffArch::handler_install`]).
    pub handler_install_rows: u64,
}

impl Summary {
    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &Summary) {
        let Summary {
            fdes,
            gimli_errors,
            rows,
            empty_rows,
            compared,
            identical,
            ours_none,
            ours_none_must_drop,
            overlap_rows,
            overlap_mismatches,
            not_dwarf,
            end_of_stack,
            read_failed,
            expr_errors,
            cfa_fp,
            expr_rows,
            identical_with_expr,
            last_checked,
            handler_install_rows,
        } = *o;
        self.fdes += fdes;
        self.gimli_errors += gimli_errors;
        self.rows += rows;
        self.empty_rows += empty_rows;
        self.compared += compared;
        self.identical += identical;
        self.ours_none += ours_none;
        self.ours_none_must_drop += ours_none_must_drop;
        self.overlap_rows += overlap_rows;
        self.overlap_mismatches += overlap_mismatches;
        self.not_dwarf += not_dwarf;
        self.end_of_stack += end_of_stack;
        self.read_failed += read_failed;
        self.expr_errors += expr_errors;
        self.cfa_fp += cfa_fp;
        self.expr_rows += expr_rows;
        self.identical_with_expr += identical_with_expr;
        self.last_checked += last_checked;
        self.handler_install_rows += handler_install_rows;
    }
}

/// The address ranges of the FDEs of `section`.
pub fn fde_ranges<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    bases: &BaseAddresses,
) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    let mut entries = section.entries(bases);
    while let Ok(Some(e)) = entries.next() {
        if let CieOrFde::Fde(p) = e {
            if let Ok(fde) = p.parse(|s, b, o| s.cie_from_offset(b, o)) {
                let start = fde.initial_address();
                ranges.push((start, start.saturating_add(fde.len())));
            }
        }
    }
    ranges
}

/// Address ranges covered by more than one FDE.
fn overlap_regions(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.retain(|r| r.0 < r.1);
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut max_end = 0u64;
    for (s, e) in ranges {
        if s < max_end {
            out.push((s, e.min(max_end)));
        }
        max_end = max_end.max(e);
    }
    out
}

fn in_regions(regions: &[(u64, u64)], a: u64) -> bool {
    regions.iter().any(|&(s, e)| s <= a && a < e)
}

/// Records a mismatch: described for the first 20, counted (as an empty string) after.
fn mismatch(mismatches: &mut Vec<String>, describe: impl FnOnce() -> String) {
    if mismatches.len() < 20 {
        mismatches.push(describe());
    } else {
        mismatches.push(String::new());
    }
}

/// Compares every row of every FDE of `section` with our `table` (one module, bias 0), at the
/// row's first instruction and, where it has another, its last (with the PC there, which a PLT
/// expression reads). Where more than one FDE covers an address either may win: mismatches
/// there are counted apart. Mismatching rows are described in `mismatches`. Returns the counts
/// and the overlapping ranges.
pub fn compare_section<'a, A: DiffArch, S: UnwindSection<Slice<'a>>>(
    section: &S,
    bases: &BaseAddresses,
    table: &RuleTable<A::Rule>,
    image: &StackImage<'_>,
    shadowed: &[(u64, u64)],
    mismatches: &mut Vec<String>,
) -> (Summary, Vec<(u64, u64)>) {
    // Pass 1: every FDE's range, for the overlaps.
    let overlaps = overlap_regions(fde_ranges(section, bases));

    let mut ctx = UnwindContext::new();
    let mut s = Summary::default();
    let mut entries = section.entries(bases);
    loop {
        let partial = match entries.next() {
            Ok(None) => break,
            Ok(Some(CieOrFde::Cie(_))) => continue,
            Ok(Some(CieOrFde::Fde(p))) => p,
            Err(_) => {
                s.gimli_errors += 1;
                break;
            }
        };
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else {
            s.gimli_errors += 1;
            continue;
        };
        let (start, end) = (
            fde.initial_address(),
            fde.initial_address().saturating_add(fde.len()),
        );
        // An FDE that a section read first describes is not read (as our loader skips it).
        if shadowed.iter().any(|&(s, e)| s < end && start < e) {
            continue;
        }
        s.fdes += 1;
        let signal = fde.is_signal_trampoline();
        let Ok(mut rows) = fde.rows(section, bases, &mut ctx) else {
            s.gimli_errors += 1;
            continue;
        };
        let fde_range = (fde.initial_address(), fde.initial_address() + fde.len());
        loop {
            let row = match rows.next_row() {
                Ok(Some(row)) => row,
                Ok(None) => break,
                Err(_) => {
                    s.gimli_errors += 1;
                    break;
                }
            };
            s.rows += 1;
            let start = row.start_address();
            if row.end_address() <= start {
                s.empty_rows += 1;
                continue;
            }
            if matches!(row.cfa(), CfaRule::RegisterAndOffset { register, .. } if A::cfa_on_frame_pointer(*register))
            {
                s.cfa_fp += 1;
            }
            let is_expr = |r: &RegisterRule<usize>| {
                matches!(
                    r,
                    RegisterRule::Expression(_) | RegisterRule::ValExpression(_)
                )
            };
            let has_expr = matches!(row.cfa(), CfaRule::Expression(_))
                || row.registers().any(|(_, r)| is_expr(r));
            s.expr_rows += u64::from(has_expr);
            let overlap = in_regions(&overlaps, start);
            s.overlap_rows += u64::from(overlap);

            // The row's first instruction.
            let regs = A::regs_at(start);
            let expected = A::expected(row, fde.cie(), section, &regs, image, signal);
            let found = table.lookup(start);
            match found {
                None => {
                    s.ours_none += 1;
                    if matches!(expected, Expected::MustDrop(_)) {
                        s.ours_none_must_drop += 1;
                    }
                }
                Some(Found { module, rule }) => {
                    s.compared += 1;
                    s.not_dwarf += u64::from(A::not_dwarf(&rule));
                    let ours = A::step_rule(table, module, &rule, &regs, true, image);
                    if agrees::<A>(&expected, &ours) && A::same_flags(row, &rule) {
                        s.identical += 1;
                        if has_expr && matches!(expected, Expected::Caller { .. }) {
                            s.identical_with_expr += 1;
                        }
                        match expected {
                            Expected::EndOfStack => s.end_of_stack += 1,
                            Expected::ReadFailed => s.read_failed += 1,
                            Expected::EvalError(_) => s.expr_errors += 1,
                            _ => {}
                        }
                    } else if overlap {
                        s.overlap_mismatches += 1;
                    } else if A::handler_install(&rule) {
                        s.handler_install_rows += 1;
                    } else {
                        mismatch(mismatches, || {
                            format!(
                                "{start:#x} (FDE {:#x}..{:#x}): gimli {expected:x?} ours {ours:x?} via {rule:?}",
                                fde_range.0, fde_range.1
                            )
                        });
                    }
                }
            }

            // Its last instruction: the same rule, or none as at the first. (gimli does not
            // bound rows by the FDE's range; our loader clips them to it.)
            let last = A::last_instruction(row.end_address().min(fde_range.1));
            if last <= start || in_regions(&overlaps, last) {
                continue;
            }
            s.last_checked += 1;
            let regs = A::regs_at(last);
            let expected = A::expected(row, fde.cie(), section, &regs, image, signal);
            let ours = table.lookup(last).map(|Found { module, rule }| {
                s.not_dwarf += u64::from(A::not_dwarf(&rule));
                (rule, A::step_rule(table, module, &rule, &regs, true, image))
            });
            let ok = match &ours {
                None => found.is_none(),
                Some((rule, o)) => {
                    (agrees::<A>(&expected, o) && A::same_flags(row, rule))
                        || A::handler_install(rule)
                }
            };
            if !ok {
                mismatch(mismatches, || {
                    format!(
                        "{last:#x} (last instruction of row {start:#x}.., FDE {:#x}..{:#x}): gimli {expected:x?} ours {ours:x?}",
                        fde_range.0, fde_range.1
                    )
                });
            }
        }
    }
    (s, overlaps)
}

/// Panics naming every mismatch (`what`: the section compared) unless there is none.
pub fn check_mismatches(what: &str, mut mismatches: Vec<String>) {
    let total = mismatches.len();
    mismatches.retain(|m| !m.is_empty());
    assert!(
        total == 0,
        "{what}: {total} mismatching rows; first {}:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// Compares every row of the `.eh_frame` `eh_data` (at file address `eh_svma`, `.text` at
/// `text_svma`) with our `table` on the synthetic stack `image`, the section read as
/// architecture `A` reads it (address size, vendor).
#[allow(dead_code)] // The ARM differential compares `.debug_frame`s of its own programs.
pub fn eh_frame<A: DiffArch + DwarfArch>(
    eh_data: &[u8],
    eh_svma: u64,
    text_svma: u64,
    table: &RuleTable<A::Rule>,
    image: &StackImage<'_>,
    mismatches: &mut Vec<String>,
) -> (Summary, Vec<(u64, u64)>) {
    let bases = BaseAddresses::default()
        .set_eh_frame(eh_svma)
        .set_text(text_svma);
    let mut section = EhFrame::new(eh_data, LittleEndian);
    section.set_address_size(A::ADDRESS_SIZE);
    section.set_vendor(A::VENDOR);
    compare_section::<A, _>(&section, &bases, table, image, &[], mismatches)
}

/// The differential of a whole ELF file of architecture `A`: every row of its `.eh_frame`
/// compared with the table our loader builds from the file, on the synthetic stack `image`.
/// Prints the counts, and panics on a mismatch, a gimli error, an entry our loader could not
/// read, a row without a rule of ours that was neither dropped nor overlapped, or row and FDE
/// counts that differ from the loader's.
#[allow(dead_code)] // As above.
pub fn elf_file<A: DiffArch + DwarfArch>(path: &Path, image: &StackImage<'_>) -> Summary {
    let t0 = Instant::now();
    let loaded = unwind_dwarf::load_elf_file::<A>(path)
        .unwrap_or_else(|e| panic!("{}: load_elf_file: {e}", path.display()));
    let load_time = t0.elapsed();
    let stats = loaded.stats.cfi.clone();
    let mut tb = RuleTableBuilder::new(NonZeroU32::MIN);
    tb.add(
        0,
        u64::MAX,
        0,
        path.display().to_string(),
        Arc::new(loaded.rules),
    );
    let table = tb.build().unwrap();

    let data = std::fs::read(path).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let eh = elf
        .section_by_name(".eh_frame")
        .expect("file has .eh_frame");
    let text = elf.section_by_name(".text").map_or(0, |s| s.address());
    let mut mismatches = Vec::new();
    let (mut s, overlaps) = eh_frame::<A>(
        eh.data().unwrap(),
        eh.address(),
        text,
        &table,
        image,
        &mut mismatches,
    );
    // `.debug_frame`'s FDEs where `.eh_frame` has none (the loader reads both).
    if let Some(debug) = elf.section_by_name(".debug_frame") {
        let data = debug.uncompressed_data().unwrap();
        let bases = BaseAddresses::default()
            .set_eh_frame(eh.address())
            .set_text(text);
        let mut eh_section = EhFrame::new(eh.data().unwrap(), LittleEndian);
        eh_section.set_address_size(A::ADDRESS_SIZE);
        eh_section.set_vendor(A::VENDOR);
        let shadowed = fde_ranges(&eh_section, &bases);
        let mut section = DebugFrame::new(&data, LittleEndian);
        section.set_address_size(A::ADDRESS_SIZE);
        section.set_vendor(A::VENDOR);
        let (d, _) = compare_section::<A, _>(
            &section,
            &BaseAddresses::default(),
            &table,
            image,
            &shadowed,
            &mut mismatches,
        );
        println!(
            "  .debug_frame where .eh_frame has no FDE: {} FDEs, {} rows, {} identical",
            d.fdes, d.rows, d.identical
        );
        s.add(&d);
    }
    let elapsed = t0.elapsed();
    println!(
        "{}: rows compared {}, identical {}, {} in a handler installation, dropped {} (of {} gimli rows in {} FDEs; {} empty)",
        path.display(),
        s.compared,
        s.identical,
        s.handler_install_rows,
        s.ours_none,
        s.rows,
        s.fdes,
        s.empty_rows,
    );
    println!(
        "  dropped rows where gimli needs an untracked register/rule: {}; our stats: dropped_total {} ({:?}), table.overlapping {}, bad_entries {}, synthesized PLT rows {}",
        s.ours_none_must_drop,
        stats.dropped_total(),
        stats
            .drops()
            .map(|(r, n)| format!("{}={n}", r.name()))
            .collect::<Vec<_>>(),
        stats.table.overlapping,
        stats.bad_entries,
        stats.plt_rows,
    );
    println!(
        "  rows with CFA on the frame pointer {}, with a DWARF expression {}; identical rows ending the stack {}, read-failed on both sides {}, expression errors on both sides {}; rows in FDE overlaps {} (mismatching {}); gimli errors {}; overlap regions {:x?}",
        s.cfa_fp,
        s.expr_rows,
        s.end_of_stack,
        s.read_failed,
        s.expr_errors,
        s.overlap_rows,
        s.overlap_mismatches,
        s.gimli_errors,
        &overlaps[..overlaps.len().min(8)],
    );
    println!(
        "  also checked at the last instruction of {} rows; load {load_time:?}, total {elapsed:?}",
        s.last_checked
    );

    check_mismatches(&path.display().to_string(), mismatches);
    assert!(
        s.ours_none <= stats.dropped_total() + stats.table.overlapping,
        "{}: {} rows have no rule of ours, but only {} were dropped and {} overlapped",
        path.display(),
        s.ours_none,
        stats.dropped_total(),
        stats.table.overlapping
    );
    assert_eq!(s.gimli_errors, 0, "{}: gimli errors", path.display());
    assert_eq!(stats.bad_entries, 0, "{}: our bad entries", path.display());
    // Our row count (rows gimli produced while loading) must equal what we saw here.
    assert_eq!(stats.rows, s.rows, "{}: row counts differ", path.display());
    assert_eq!(stats.fdes, s.fdes, "{}: FDE counts differ", path.display());
    s
}
