//! Compact, immutable rule tables.
//!
//! A module's rules ([`ModuleRules`]) are a dictionary of the distinct rules (each kept also in
//! the form a rule cache stores, [`TableRule::ready`], so that a miss copies it) plus two parallel
//! sorted arrays: extent starts (`u32`, relative to the module's lowest address) and rule indices
//! (`u16`), 6 bytes per extent. An extent runs to the next start; gaps between described ranges
//! are extents whose rule index is a reserved value that is never a dictionary index (lookups
//! there answer `None`). Real binaries have few distinct rules (hundreds), so the dictionary is
//! small.
//!
//! A lookup goes through a page index rather than a binary search of all the starts: for every
//! page of the module's addresses (a power of two chosen so that a page holds about 8 extents on
//! average), the index of the extent that contains the page's first byte. The extent of an
//! address is then between the index of its page and that of the next page, a few starts in one
//! cache line: a lookup reads the page index, one line of starts and the rule (whose line is
//! prefetched as soon as the page index is read, so that the two overlap), where a binary
//! search over a large module's starts (cc1: 594,000 extents) made about 20 dependent reads,
//! most of them cache misses in a signal handler (the OpenTelemetry eBPF profiler's stack-delta
//! pages do the same). The index costs 4 bytes a page, about half a byte per extent.
//!
//! A [`RuleTable`] is the set of modules of one process (or sample), sorted by load address,
//! with a generation number that caches use to notice a replaced table. Module rules are shared
//! through `Arc`, so a rebuilt table after dlopen reuses the rules of modules already parsed.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::num::NonZeroU32;

pub mod bytes;
pub mod return_sites;

pub use bytes::{RuleBytes, RulesBytesError};

use crate::expr::Expr;
use return_sites::{CallFit, ReturnSites};

/// Where a rule is in a [`RuleTable`]: its module's index and its index in that module's
/// dictionary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuleRef {
    /// The module's index in the table.
    pub module: u16,
    /// The rule's index in the module's dictionary.
    pub index: u16,
}

/// The rule index of an extent that no rule describes (a gap). Private: it never leaves this
/// module, whose lookups answer `None` for it; the builder refuses a dictionary large enough to
/// give a rule this index.
const NO_RULE: u16 = u16::MAX;

/// A rule type of a table. Besides each distinct rule, the table keeps the rule's *ready* form,
/// made once when the module's rules are built: what a rule cache stores for it
/// ([`crate::cache::Ready`] for the architectures' rules), so that a miss copies a prepared
/// entry instead of classifying the rule again (about 25 instructions a miss on x86_64).
pub trait TableRule: Copy + Ord {
    /// The ready form.
    type Ready: Copy + fmt::Debug + Eq + Send + Sync + 'static;
    /// The ready form of `self`.
    fn ready(&self) -> Self::Ready;
}

/// Why a table could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableError {
    /// More than 65,535 distinct rules (or expressions) in one module.
    TooManyRules,
    /// A module's described addresses span more than 4 GiB.
    RangeTooLarge,
    /// Two modules' address ranges overlap.
    OverlappingModules,
    /// More than 65,536 modules (a module's index is a `u16`).
    TooManyModules,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TableError::TooManyRules => "more than 65535 distinct rules in one module",
            TableError::RangeTooLarge => "a module's unwind ranges span more than 4 GiB",
            TableError::OverlappingModules => "two modules' address ranges overlap",
            TableError::TooManyModules => "more than 65536 modules",
        })
    }
}

/// Counts kept while building a module's rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildStats {
    /// Rows pushed into the builder.
    pub rows_in: u64,
    /// Extents that carry a rule, after merging.
    pub extents: u64,
    /// Rows merged into an identical, adjacent predecessor.
    pub merged: u64,
    /// Rows dropped or clipped because an earlier row already covered their addresses.
    pub overlapping: u64,
    /// Rows with an empty address range.
    pub empty: u64,
}

/// The rules of one module (one ELF file), addressed by its file (stated) virtual addresses.
#[derive(Clone, Debug)]
pub struct ModuleRules<R: TableRule> {
    base: u64,
    /// Extent starts, relative to `base`; the last one ends the last extent.
    starts: Vec<u32>,
    /// Each extent's dictionary index, or [`NO_RULE`] for a gap.
    rules: Vec<u16>,
    /// For page `p` (addresses `base + (p << page_shift)` on), the index in `starts` of the
    /// extent containing the page's first byte; one more entry ends the last page.
    pages: Vec<u32>,
    /// log2 of the page size.
    page_shift: u8,
    dict: Vec<R>,
    /// The dictionary's ready forms, index for index.
    ready: Vec<R::Ready>,
    exprs: Vec<Expr>,
    stats: BuildStats,
    /// Bytes of the extents with a rule ([`covered_bytes`]), for reports.
    covered: u64,
}

/// Bytes of the extents of `starts` (relative starts, the last one an end) whose index in
/// `rules` is not a gap. In 32-bit lanes: the extents lie within 2^32 bytes of the base.
fn covered_bytes(starts: &[u32], rules: &[u16]) -> u64 {
    let ends = starts.get(1..).unwrap_or(&[]);
    let chunk = |(ends, (starts, rules)): (&[u32], (&[u32], &[u16]))| {
        ends.iter()
            .zip(starts)
            .zip(rules)
            .fold(0u32, |sum, ((&e, &s), &r)| {
                let mask = 0u32.wrapping_sub(u32::from(r != NO_RULE));
                sum.wrapping_add(e.wrapping_sub(s) & mask)
            })
    };
    // Chunks of 2^15 extents: a chunk's sum fits 32 bits even if the sums of the whole did
    // not (they do, for a valid table; this stays right for any input).
    ends.chunks(1 << 15)
        .zip(starts.chunks(1 << 15).zip(rules.chunks(1 << 15)))
        .map(|c| u64::from(chunk(c)))
        .sum()
}

/// An extent of a module's table ([`ModuleRules::extent_at`]): file addresses
/// `start..start + len` with one rule, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The extent's dictionary index, `None` for a gap.
    pub rule: Option<u16>,
    /// Its first file address.
    pub start: u64,
    /// Its length in bytes (at least 1).
    pub len: u32,
}

impl<R: TableRule> ModuleRules<R> {
    /// A module without any rules (every lookup misses; the unwinder falls back to frame pointers).
    pub fn empty() -> Self {
        ModuleRules {
            base: 0,
            starts: Vec::new(),
            rules: Vec::new(),
            pages: Vec::new(),
            page_shift: 0,
            dict: Vec::new(),
            ready: Vec::new(),
            exprs: Vec::new(),
            stats: BuildStats::default(),
            covered: 0,
        }
    }

    /// The rule for file address `svma`, if one describes it.
    #[inline]
    pub fn lookup(&self, svma: u64) -> Option<R> {
        self.lookup_index(svma).and_then(|i| self.rule(i)).copied()
    }

    /// The dictionary index of the rule for file address `svma`, if one describes it.
    #[inline]
    pub fn lookup_index(&self, svma: u64) -> Option<u16> {
        self.extent_at(svma)?.rule
    }

    /// The extent containing file address `svma`, gaps included, if the module's table covers
    /// `svma`: every address of it has the same rule (or none).
    #[inline]
    pub fn extent_at(&self, svma: u64) -> Option<Extent> {
        // An address below `base` wraps past the last page, as does one 4 GiB or more above
        // it: the last page ends at most at 2^32 (`page_index`), so past the page check `rel`
        // fits 32 bits.
        let rel = svma.wrapping_sub(self.base);
        let page = usize::try_from(rel >> self.page_shift).ok()?;
        // The extent is between the one holding the page's first byte and the one holding the
        // next page's (inclusive); past the last page there is none.
        // (`get(page..)` first: `page + 2` overflows for the top pages of a 16-byte page
        // size on 32-bit hosts, or of an empty module's page size of 1.)
        let &[first, last] = self.pages.get(page..)?.get(..2)? else {
            return None;
        };
        let (first, last, rel) = (first as usize, last as usize, rel as u32);
        // The rule index is near `first` (a page holds about 8 extents, a line 32 indices): its
        // line loads while the starts are searched, not after.
        crate::prefetch::prefetch(self.rules.as_ptr().wrapping_add(first));
        let near = self.starts.get(first + 1..=last)?;
        let i = first + near.partition_point(|&s| s <= rel);
        let rule = *self.rules.get(i)?;
        // The last entry starts the gap after the module's last extent, which has no end:
        // no extent there.
        let bounds = self.starts.get(i..i + 2)?;
        Some(Extent {
            rule: (rule != NO_RULE).then_some(rule),
            start: self.base + u64::from(bounds[0]),
            len: bounds[1].wrapping_sub(bounds[0]),
        })
    }

    /// Rule `index` of the dictionary.
    #[inline]
    pub fn rule(&self, index: u16) -> Option<&R> {
        self.dict.get(usize::from(index))
    }

    /// The ready form of rule `index` of the dictionary ([`TableRule::ready`]).
    #[inline]
    pub fn ready(&self, index: u16) -> Option<&R::Ready> {
        self.ready.get(usize::from(index))
    }

    /// The expression with index `i` (rules refer to expressions by index).
    #[inline]
    pub fn expr(&self, i: u16) -> Option<&Expr> {
        self.exprs.get(usize::from(i))
    }

    /// Distinct rules.
    pub fn dictionary(&self) -> &[R] {
        &self.dict
    }

    /// Compiled expressions.
    pub fn exprs(&self) -> &[Expr] {
        &self.exprs
    }

    /// The extents as `(start svma, end svma, rule)`, gaps left out.
    pub fn extents(&self) -> impl Iterator<Item = (u64, u64, R)> + '_ {
        self.starts
            .windows(2)
            .zip(&self.rules)
            .filter_map(|(w, &r)| {
                // A gap's NO_RULE is past every dictionary index: `get` answers `None` for it.
                let rule = self.dict.get(usize::from(r))?;
                Some((
                    self.base + u64::from(w[0]),
                    self.base + u64::from(w[1]),
                    *rule,
                ))
            })
    }

    /// Bytes of the file addresses `[lo, hi)` that no rule describes (a stop is a rule): with
    /// `[lo, hi)` a module's code, the code that no unwind table describes.
    pub fn bytes_without_rules(&self, lo: u64, hi: u64) -> u64 {
        hi.saturating_sub(lo)
            .saturating_sub(self.bytes_with_rules_where(lo, hi, |_| true))
    }

    /// Bytes of the file addresses `[lo, hi)` whose rule `which` accepts (e.g. the rules of one
    /// source).
    pub fn bytes_with_rules_where(&self, lo: u64, hi: u64, which: impl Fn(&R) -> bool) -> u64 {
        // `which` asked once per dictionary rule, then one pass over the extents' indices
        // without copying a rule (every process reports this at its start).
        let accepted: Vec<u64> = self.dict.iter().map(|r| u64::from(which(r))).collect();
        let (lo, hi) = (lo.saturating_sub(self.base), hi.saturating_sub(self.base));
        let inside = match (self.starts.first(), self.starts.last()) {
            (Some(&first), Some(&last)) => lo <= u64::from(first) && u64::from(last) <= hi,
            _ => true,
        };
        if !accepted.contains(&1) {
            0
        } else if !accepted.contains(&0) && inside {
            // Every rule, every extent inside: counted when the table was made.
            self.covered
        } else {
            // A gap's NO_RULE is past every dictionary index: not accepted.
            self.starts
                .windows(2)
                .zip(&self.rules)
                .map(|(w, &r)| {
                    let clipped = u64::from(w[1])
                        .min(hi)
                        .saturating_sub(u64::from(w[0]).max(lo));
                    accepted.get(usize::from(r)).copied().unwrap_or(0) * clipped
                })
                .sum()
        }
    }

    /// Counts from building.
    pub fn stats(&self) -> BuildStats {
        self.stats
    }

    /// Extents carrying a rule.
    pub fn rows(&self) -> u64 {
        self.stats.extents
    }

    /// Heap bytes of this module's rules: extents, dictionary (with its ready forms) and
    /// expressions.
    pub fn bytes(&self) -> usize {
        self.starts.len() * 4
            + self.rules.len() * 2
            + self.pages.len() * 4
            + self.dict.len() * core::mem::size_of::<R>()
            + self.ready.len() * core::mem::size_of::<R::Ready>()
            + self.exprs.len() * core::mem::size_of::<Expr>()
    }
}

/// Collects rows for one module; rows may come in any order.
#[derive(Debug)]
pub struct ModuleRulesBuilder<R> {
    rows: Vec<(u64, u64, u16)>,
    index: BTreeMap<R, u16>,
    dict: Vec<R>,
    expr_index: BTreeMap<Expr, u16>,
    exprs: Vec<Expr>,
}

impl<R: TableRule> Default for ModuleRulesBuilder<R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: TableRule> ModuleRulesBuilder<R> {
    /// An empty builder.
    pub fn new() -> Self {
        ModuleRulesBuilder {
            rows: Vec::new(),
            index: BTreeMap::new(),
            dict: Vec::new(),
            expr_index: BTreeMap::new(),
            exprs: Vec::new(),
        }
    }

    /// Interns an expression and returns the index rules use to refer to it.
    pub fn add_expr(&mut self, e: Expr) -> Result<u16, TableError> {
        if let Some(&i) = self.expr_index.get(&e) {
            return Ok(i);
        }
        let i = u16::try_from(self.exprs.len()).map_err(|_| TableError::TooManyRules)?;
        self.exprs.push(e);
        self.expr_index.insert(e, i);
        Ok(i)
    }

    /// Describes file addresses `start..end` with `rule`.
    pub fn push(&mut self, start: u64, end: u64, rule: R) -> Result<(), TableError> {
        let i = self.intern(rule)?;
        self.rows.push((start, end, i));
        Ok(())
    }

    /// The index of `rule` in the dictionary, added if new.
    fn intern(&mut self, rule: R) -> Result<u16, TableError> {
        Ok(match self.index.get(&rule) {
            Some(&i) => i,
            None => {
                let i = u16::try_from(self.dict.len()).map_err(|_| TableError::TooManyRules)?;
                if i == NO_RULE {
                    return Err(TableError::TooManyRules);
                }
                self.dict.push(rule);
                self.index.insert(rule, i);
                i
            }
        })
    }

    /// The rule of the last row pushed so far that describes file address `addr`, if any (a
    /// linear search: for the few addresses a module's loader adjusts).
    pub fn rule_at(&self, addr: u64) -> Option<R> {
        let &(_, _, i) = self.rows.iter().rev().find(|r| r.0 <= addr && addr < r.1)?;
        self.dict.get(usize::from(i)).copied()
    }

    /// Gives the parts of the rows pushed so far that lie inside `start..end` the rule `f` makes
    /// of theirs (a row across a bound is split there).
    pub fn rewrite(&mut self, start: u64, end: u64, f: impl Fn(&R) -> R) -> Result<(), TableError> {
        let mut out = Vec::with_capacity(self.rows.len());
        for (s, e, i) in core::mem::take(&mut self.rows) {
            if e <= start || s >= end {
                out.push((s, e, i));
                continue;
            }
            if s < start {
                out.push((s, start, i));
            }
            let rule = self.dict.get(usize::from(i)).map(&f);
            match rule {
                Some(rule) => out.push((s.max(start), e.min(end), self.intern(rule)?)),
                None => out.push((s.max(start), e.min(end), i)),
            }
            if e > end {
                out.push((end, e, i));
            }
        }
        self.rows = out;
        Ok(())
    }

    /// Sorts the rows, merges identical neighbours and encodes the extents.
    pub fn build(mut self) -> Result<ModuleRules<R>, TableError> {
        let mut stats = BuildStats {
            rows_in: self.rows.len() as u64,
            ..BuildStats::default()
        };
        self.rows.sort_by_key(|r| r.0);
        // The first extent starts at the base (the page index takes addresses below the first
        // start for the first extent's): an empty row below it (a discarded function's FDE at
        // address 0 in `.debug_frame`) does not count.
        let base = self.rows.iter().find(|r| r.0 < r.1).map_or(0, |r| r.0);
        let mut starts = Vec::with_capacity(self.rows.len() + 1);
        let mut rules: Vec<u16> = Vec::with_capacity(self.rows.len() + 1);
        let rel = |a: u64| u32::try_from(a - base).map_err(|_| TableError::RangeTooLarge);
        let mut prev_end: Option<u64> = None;
        for &(mut start, end, rule) in &self.rows {
            if end <= start {
                stats.empty += 1;
                continue;
            }
            if let Some(pe) = prev_end {
                if end <= pe {
                    stats.overlapping += 1;
                    continue;
                }
                if start < pe {
                    stats.overlapping += 1;
                    start = pe;
                }
                if start > pe {
                    starts.push(rel(pe)?);
                    rules.push(NO_RULE);
                } else if rules.last() == Some(&rule) {
                    stats.merged += 1;
                    prev_end = Some(end);
                    continue;
                }
            }
            starts.push(rel(start)?);
            rules.push(rule);
            stats.extents += 1;
            prev_end = Some(end);
        }
        if let Some(pe) = prev_end {
            starts.push(rel(pe)?);
            rules.push(NO_RULE);
        }
        starts.shrink_to_fit();
        rules.shrink_to_fit();
        let (pages, page_shift) = page_index(&starts);
        Ok(ModuleRules {
            base,
            covered: covered_bytes(&starts, &rules),
            starts,
            rules,
            pages,
            page_shift,
            ready: self.dict.iter().map(R::ready).collect(),
            dict: self.dict,
            exprs: self.exprs,
            stats,
        })
    }
}

/// Extents per page the page size aims at: enough that the index stays small (half a byte per
/// extent), few enough that an extent's starts are in one cache line.
const EXTENTS_PER_PAGE: u64 = 8;

/// The page index of sorted extent `starts` and its page size (log2): the smallest power of two,
/// at least 16 bytes, whose pages hold [`EXTENTS_PER_PAGE`] extents on average.
fn page_index(starts: &[u32]) -> (Vec<u32>, u8) {
    let Some(&end) = starts.last() else {
        return (Vec::new(), 0);
    };
    let extents = (starts.len() as u64).max(1);
    let mut shift = 4u8;
    while shift < 31 && (u64::from(end) >> shift) * EXTENTS_PER_PAGE > extents {
        shift += 1;
    }
    let pages = (u64::from(end) >> shift) as usize + 1;
    let mut index = Vec::with_capacity(pages + 1);
    let mut i = 0usize;
    for p in 0..=pages as u64 {
        let at = p << shift;
        // The last extent whose start is at or below the page's first byte (extent 0 for
        // addresses below the first start, which is 0).
        while i + 1 < starts.len() && u64::from(starts[i + 1]) <= at {
            i += 1;
        }
        index.push(i as u32);
    }
    (index, shift)
}

/// One module placed in a process: its rules, where it is loaded, and its name.
#[derive(Clone, Debug)]
pub struct TableModule<R: TableRule> {
    /// Lowest runtime address of the module's code.
    pub start: u64,
    /// One past its highest runtime address.
    pub end: u64,
    /// Runtime address minus file address (the load bias).
    pub bias: u64,
    /// The module's path or name.
    pub name: String,
    /// Its rules, shared between tables.
    pub rules: Arc<ModuleRules<R>>,
    /// Its return sites, for stack scanning ([`crate::scan`]); `None`: no word is taken for a
    /// return address into this module.
    pub return_sites: Option<Arc<ReturnSites>>,
}

/// The rules of every module of a process: immutable once built, shared by all unwinders.
#[derive(Clone, Debug)]
pub struct RuleTable<R: TableRule> {
    generation: u32,
    scan: bool,
    modules: Vec<TableModule<R>>,
    /// The modules' start addresses, in order: searched instead of the modules themselves, so
    /// that a lookup reads a few packed lines rather than a line per module it passes.
    starts: Vec<u64>,
}

/// The result of [`RuleTable::lookup`]: the rule for an address and the module it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found<R> {
    /// The index of the module containing the address, in [`RuleTable::modules`] (the
    /// `module` argument of [`RuleTable::expr`] for the rule's expressions).
    pub module: u16,
    /// The rule for the address (a copy of the dictionary entry).
    pub rule: R,
}

/// The result of [`RuleTable::lookup_index`]: where the rule for an address is in the table,
/// and the rule itself, borrowed from its module's dictionary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundRef<'a, R: TableRule> {
    /// The rule's module and its index in that module's dictionary.
    pub at: RuleRef,
    /// The rule, borrowed from the table.
    pub rule: &'a R,
    /// Its ready form ([`TableRule::ready`]), borrowed from the table.
    pub ready: &'a R::Ready,
}

/// The result of [`RuleTable::extent_in`]: an extent of runtime addresses and its rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundExtent<'a, R: TableRule> {
    /// The rule of every address of the extent, `None` in a gap.
    pub rule: Option<FoundRef<'a, R>>,
    /// The extent's first runtime address.
    pub start: u64,
    /// Its length in bytes.
    pub len: u32,
}

/// The result of [`RuleTable::module_for`]: the module containing an address.
#[derive(Clone, Copy, Debug)]
pub struct FoundModule<'a, R: TableRule> {
    /// The module's index in [`RuleTable::modules`].
    pub index: u16,
    /// The module.
    pub module: &'a TableModule<R>,
}

impl<R: TableRule> RuleTable<R> {
    /// This table's generation: distinct from every other table a cache may have seen.
    #[inline]
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The modules, sorted by start address.
    pub fn modules(&self) -> &[TableModule<R>] {
        &self.modules
    }

    /// True if walks scan the stack when every other way to a caller failed
    /// ([`RuleTableBuilder::scan_stack`]).
    #[inline]
    pub fn scans(&self) -> bool {
        self.scan
    }

    /// Whether runtime address `ret` is a return site of the module containing it whose call
    /// could have made a frame at runtime address `callee_pc` ([`ReturnSites::call_from`]).
    #[inline]
    pub fn return_site_fit(&self, ret: u64, callee_pc: u64) -> CallFit {
        let Some(found) = self.module_for(ret) else {
            return CallFit::No;
        };
        let m = found.module;
        let Some(sites) = m.return_sites.as_ref() else {
            return CallFit::No;
        };
        // The callee's address in the module's file addresses, if it is in the same module.
        let same = self
            .module_for(callee_pc)
            .filter(|h| h.index == found.index)
            .map(|_| callee_pc.wrapping_sub(m.bias));
        sites.call_from(ret.wrapping_sub(m.bias), same)
    }

    /// The module containing runtime address `addr`, with its index.
    #[inline]
    pub fn module_for(&self, addr: u64) -> Option<FoundModule<'_, R>> {
        let i = self.starts.partition_point(|&s| s <= addr).checked_sub(1)?;
        let m = self.modules.get(i)?;
        if addr < m.end {
            Some(FoundModule {
                index: i as u16,
                module: m,
            })
        } else {
            None
        }
    }

    /// The rule for runtime address `addr`, with the index of its module.
    #[inline]
    pub fn lookup(&self, addr: u64) -> Option<Found<R>> {
        let found = self.lookup_index(addr)?;
        Some(Found {
            module: found.at.module,
            rule: *found.rule,
        })
    }

    /// [`module_for`](Self::module_for), trying module `near` first: one line read instead of a
    /// search when a lookup falls in the same module as the one before it (the rule cache passes
    /// the module of its last miss). Any `near` gives the same answer.
    #[inline]
    pub fn module_near(&self, addr: u64, near: u16) -> Option<FoundModule<'_, R>> {
        match self.modules.get(usize::from(near)) {
            Some(m) if m.start <= addr && addr < m.end => Some(FoundModule {
                index: near,
                module: m,
            }),
            _ => self.module_for(addr),
        }
    }

    /// The rule for runtime address `addr`, borrowed, with where it is in the table (its
    /// module's index and its index in that module's dictionary).
    #[inline]
    pub fn lookup_index(&self, addr: u64) -> Option<FoundRef<'_, R>> {
        self.lookup_in(self.module_for(addr)?, addr)
    }

    /// The rule for runtime address `addr` in `found`, the module containing it
    /// ([`module_for`](Self::module_for) or [`module_near`](Self::module_near)), as
    /// [`lookup_index`](Self::lookup_index) gives it.
    #[inline]
    pub fn lookup_in<'a>(
        &'a self,
        found: FoundModule<'a, R>,
        addr: u64,
    ) -> Option<FoundRef<'a, R>> {
        self.extent_in(found, addr)?.rule
    }

    /// The extent of runtime address `addr` in `found`, the module containing it, with its
    /// rule as [`lookup_in`](Self::lookup_in) gives it (`None` in a gap): every address of the
    /// extent has the same answer. `None` where the module's table does not cover `addr`.
    #[inline]
    pub fn extent_in<'a>(
        &'a self,
        found: FoundModule<'a, R>,
        addr: u64,
    ) -> Option<FoundExtent<'a, R>> {
        let rules = &found.module.rules;
        let extent = rules.extent_at(addr.wrapping_sub(found.module.bias))?;
        let rule = extent.rule.and_then(|index| {
            Some(FoundRef {
                at: RuleRef {
                    module: found.index,
                    index,
                },
                rule: rules.rule(index)?,
                ready: rules.ready(index)?,
            })
        });
        Some(FoundExtent {
            rule,
            start: extent.start.wrapping_add(found.module.bias),
            len: extent.len,
        })
    }

    /// Rule `index` of module `module`'s dictionary.
    #[inline]
    pub fn rule(&self, module: u16, index: u16) -> Option<&R> {
        self.modules.get(usize::from(module))?.rules.rule(index)
    }

    /// Expression `expr` of module `module`.
    #[inline]
    pub fn expr(&self, module: u16, expr: u16) -> Option<&Expr> {
        self.modules.get(usize::from(module))?.rules.expr(expr)
    }

    /// Extents carrying a rule, over all modules.
    pub fn rows(&self) -> u64 {
        self.modules.iter().map(|m| m.rules.rows()).sum()
    }

    /// Heap bytes of all modules' rules.
    pub fn bytes(&self) -> usize {
        self.modules.iter().map(|m| m.rules.bytes()).sum()
    }
}

/// Assembles a [`RuleTable`] from placed modules.
#[derive(Debug)]
pub struct RuleTableBuilder<R: TableRule> {
    generation: NonZeroU32,
    scan: bool,
    modules: Vec<TableModule<R>>,
}

impl<R: TableRule> RuleTableBuilder<R> {
    /// A builder for a table of the given generation. Generations are never 0, so a fresh cache
    /// (all entries at generation 0) matches no table.
    pub fn new(generation: NonZeroU32) -> Self {
        RuleTableBuilder {
            generation,
            scan: false,
            modules: Vec::new(),
        }
    }

    /// Whether walks scan the stack for a return address when the rules and the
    /// architecture's fallbacks found no caller ([`crate::scan`]): off unless set. A scan
    /// accepts only the return sites of modules that have them
    /// ([`TableModule::return_sites`]).
    pub fn scan_stack(&mut self, scan: bool) -> &mut Self {
        self.scan = scan;
        self
    }

    /// Adds a module loaded at runtime addresses `start..end` with load bias `bias`, without
    /// return sites; returns it, to set them.
    pub fn add(
        &mut self,
        start: u64,
        end: u64,
        bias: u64,
        name: String,
        rules: Arc<ModuleRules<R>>,
    ) -> &mut TableModule<R> {
        self.modules.push(TableModule {
            start,
            end,
            bias,
            name,
            rules,
            return_sites: None,
        });
        let last = self.modules.len() - 1;
        &mut self.modules[last]
    }

    /// Sorts the modules and checks that they do not overlap.
    pub fn build(mut self) -> Result<RuleTable<R>, TableError> {
        // Indices 0..=u16::MAX: every module's index fits its `u16`.
        if self.modules.len() > usize::from(u16::MAX) + 1 {
            return Err(TableError::TooManyModules);
        }
        self.modules.sort_by_key(|m| m.start);
        for w in self.modules.windows(2) {
            if w[1].start < w[0].end {
                return Err(TableError::OverlappingModules);
            }
        }
        Ok(RuleTable {
            generation: self.generation.get(),
            scan: self.scan,
            starts: self.modules.iter().map(|m| m.start).collect(),
            modules: self.modules,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `module_near` answers as `module_for` does, whichever module it is told to try first:
    /// the right one, another, an index past the last, for addresses in modules, in the gaps
    /// between them and outside them.
    #[test]
    fn module_near_answers_as_module_for() {
        let rules = Arc::new(ModuleRules::<u8>::empty());
        let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
        for (start, end) in [(0x1000, 0x2000), (0x2000, 0x2800), (0x4000, 0x4010)] {
            b.add(start, end, 0, String::new(), rules.clone());
        }
        let t = b.build().unwrap();
        let index = |f: Option<FoundModule<'_, u8>>| f.map(|f| f.index);
        let mut found = 0;
        for addr in (0..0x5000)
            .step_by(8)
            .chain([0xfff, 0x1fff, 0x27ff, 0x2800, u64::MAX])
        {
            for near in [0, 1, 2, 3, u16::MAX] {
                assert_eq!(
                    index(t.module_near(addr, near)),
                    index(t.module_for(addr)),
                    "{addr:#x} near {near}"
                );
            }
            found += usize::from(t.module_for(addr).is_some());
        }
        // The addresses above met every module and the gaps.
        assert_eq!(found, (0x1000 + 0x800 + 0x10) / 8 + 2);
    }

    /// Every module index fits a `u16`: 65,536 modules build, one more does not.
    #[test]
    fn module_count_limit_is_the_index_range() {
        let build = |n: u64| {
            let rules = Arc::new(ModuleRules::<u8>::empty());
            let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
            for i in 0..n {
                b.add(i * 16, i * 16 + 16, 0, String::new(), rules.clone());
            }
            b.build().map(|t| t.modules().len())
        };
        assert_eq!(build(65_536), Ok(65_536));
        assert_eq!(build(65_537).err(), Some(TableError::TooManyModules));
    }

    fn build(rows: &[(u64, u64, u8)]) -> ModuleRules<u8> {
        let mut b = ModuleRulesBuilder::new();
        for &(s, e, r) in rows {
            b.push(s, e, r).unwrap();
        }
        b.build().unwrap()
    }

    #[test]
    fn merges_neighbours_and_keeps_gaps() {
        let m = build(&[
            (0x20, 0x30, 2),
            (0x10, 0x18, 1),
            (0x18, 0x20, 1),
            (0x40, 0x50, 1),
        ]);
        assert_eq!(m.lookup(0x0f), None);
        assert_eq!(m.lookup(0x10), Some(1));
        assert_eq!(m.lookup(0x1f), Some(1));
        assert_eq!(m.lookup(0x20), Some(2));
        assert_eq!(m.lookup(0x30), None);
        assert_eq!(m.lookup(0x4f), Some(1));
        assert_eq!(m.lookup(0x50), None);
        assert_eq!(m.stats().merged, 1);
        assert_eq!(m.rows(), 3);
        let ext: Vec<_> = m.extents().collect();
        assert_eq!(ext, [(0x10, 0x20, 1), (0x20, 0x30, 2), (0x40, 0x50, 1)]);
        // Rules cover 0x10..0x30 and 0x40..0x50: of 0x00..0x60, 0x30 bytes; clipped ranges.
        assert_eq!(m.bytes_without_rules(0, 0x60), 0x60 - 0x30);
        assert_eq!(m.bytes_without_rules(0x18, 0x44), 0x2c - (0x18 + 4));
        assert_eq!(m.bytes_without_rules(0x30, 0x40), 0x10);
        assert_eq!(m.bytes_without_rules(0x50, 0x10), 0);
    }

    /// Lookups through the page index answer what a binary search over every start answers, at
    /// every address of modules with dense, sparse and mixed extents (pages of 16 bytes to
    /// many KiB), and below and past the module.
    #[test]
    fn page_index_lookups_agree_with_a_full_binary_search() {
        use proptest::prelude::*;
        let rows = proptest::collection::vec((0u64..64, 1u64..4096, 0u8..6), 1..300);
        proptest!(ProptestConfig::with_cases(200), |(rows in rows, gap_every in 1usize..5)| {
            let mut b = ModuleRulesBuilder::new();
            let mut at = 0x1000u64;
            for (i, &(gap, len, rule)) in rows.iter().enumerate() {
                if i % gap_every == 0 {
                    at += gap;
                }
                b.push(at, at + len, rule).unwrap();
                at += len;
            }
            let m = b.build().unwrap();
            let full = |svma: u64| -> Option<u8> {
                let rel = u32::try_from(svma.checked_sub(m.base)?).ok()?;
                let i = m.starts.partition_point(|&s| s <= rel).checked_sub(1)?;
                m.rule(*m.rules.get(i)?).copied()
            };
            let end = at + 64;
            let step = (end / 20_000).max(1);
            for svma in (0x0f00..end).step_by(step as usize) {
                prop_assert_eq!(m.lookup(svma), full(svma), "at {:#x}", svma);
            }
            for w in m.starts.windows(2) {
                for svma in [w[0], w[1].saturating_sub(1)] {
                    let svma = m.base + u64::from(svma);
                    prop_assert_eq!(m.lookup(svma), full(svma), "at {:#x}", svma);
                }
            }
            // 4 GiB and more past the base, where an address's low 32 bits fall inside the
            // module, the top of the address space and 0: no extent.
            let aliases = [1u64 << 32, (1 << 32) + 0x10, (3 << 32) + u64::from(m.starts[1])];
            for svma in aliases.map(|a| m.base + a).into_iter().chain([u64::MAX, 0]) {
                prop_assert_eq!(m.extent_at(svma), None, "at {:#x}", svma);
            }
            // The index is small: at most one entry per 8 extents on average, or a few pages.
            prop_assert!(m.pages.len() <= m.starts.len() / 4 + 3, "{} pages for {} starts", m.pages.len(), m.starts.len());
        });
    }

    #[test]
    fn overlaps_and_empty_rows_are_counted() {
        let m = build(&[
            (0x10, 0x30, 1),
            (0x20, 0x28, 2),
            (0x28, 0x40, 3),
            (0x50, 0x50, 4),
        ]);
        assert_eq!(m.lookup(0x22), Some(1));
        assert_eq!(m.lookup(0x30), Some(3));
        assert_eq!(m.stats().overlapping, 2);
        assert_eq!(m.stats().empty, 1);
    }

    /// A rewrite changes the rule of the rows' parts inside its range only, splitting the rows
    /// across its bounds.
    #[test]
    fn rows_are_rewritten_inside_a_range() {
        let mut b = ModuleRulesBuilder::new();
        b.push(0x10, 0x20, 1u8).unwrap();
        b.push(0x20, 0x30, 2).unwrap();
        b.push(0x30, 0x40, 3).unwrap();
        b.rewrite(0x18, 0x34, |r| r + 100).unwrap();
        let m = b.build().unwrap();
        let at = |a: u64| m.lookup(a);
        assert_eq!(
            [at(0x10), at(0x17), at(0x18), at(0x2f), at(0x33), at(0x34)],
            [Some(1), Some(1), Some(101), Some(102), Some(103), Some(3)]
        );
    }

    /// An empty row below every other (a discarded function's FDE at address 0) does not move
    /// the base: the addresses between it and the first extent have no rule.
    #[test]
    fn an_empty_row_below_the_first_extent_is_not_the_base() {
        let m = build(&[(0x10, 0x10, 1), (0x20, 0x30, 2), (0, 0, 3)]);
        for svma in [0, 0x10, 0x15, 0x1f, 0x30] {
            assert_eq!(m.extent_at(svma).and_then(|e| e.rule), None, "{svma:#x}");
        }
        assert_eq!(m.lookup(0x20), Some(2));
        assert_eq!(m.stats().empty, 2);
    }

    /// The top of the address space has no page in any module, empty or not (no overflow
    /// finding its page).
    #[test]
    fn the_last_addresses_have_no_extent() {
        let empty = ModuleRules::<u8>::empty();
        let one = build(&[(0x1000, 0x1010, 1)]);
        for m in [&empty, &one] {
            for svma in [u64::MAX, u64::MAX - 1, u64::MAX - 16, 1 << 63] {
                assert_eq!(m.extent_at(svma), None, "{svma:#x}");
            }
        }
    }

    #[test]
    fn too_large_range_is_an_error() {
        let mut b = ModuleRulesBuilder::new();
        b.push(0, 8, 1u8).unwrap();
        b.push(0x1_0000_0000, 0x1_0000_0008, 1).unwrap();
        assert_eq!(b.build().unwrap_err(), TableError::RangeTooLarge);
    }

    #[test]
    fn table_finds_module_and_applies_bias() {
        let rules = Arc::new(build(&[(0x1000, 0x1100, 7)]));
        let mut b = RuleTableBuilder::new(NonZeroU32::new(3).unwrap());
        b.add(
            0x7000_1000,
            0x7000_2000,
            0x7000_0000,
            "b".into(),
            rules.clone(),
        );
        b.add(0x5000_1000, 0x5000_2000, 0x5000_0000, "a".into(), rules);
        let t = b.build().unwrap();
        assert_eq!(t.generation(), 3);
        assert_eq!(t.lookup(0x5000_1010), Some(Found { module: 0, rule: 7 }));
        assert_eq!(t.lookup(0x7000_10ff), Some(Found { module: 1, rule: 7 }));
        let found = t.lookup_index(0x7000_10ff).unwrap();
        assert_eq!(
            (found.at, *found.rule),
            (
                RuleRef {
                    module: 1,
                    index: 0
                },
                7
            )
        );
        let placed = t.module_for(0x7000_1fff).unwrap();
        assert_eq!((placed.index, placed.module.name.as_str()), (1, "b"));
        assert!(t.module_for(0x7000_2000).is_none());
        assert_eq!(t.lookup(0x7000_1100), None);
        assert_eq!(t.lookup(0x6000_0000), None);
        assert_eq!(t.lookup(0), None);
    }

    /// Every lookup's ready form is its rule's: the ready forms follow the dictionary, which is
    /// in first-seen order, not in address or rule order. (Byte rules: an odd rule is ready as
    /// itself, its [`crate::cache::Ready::simple`] form.)
    #[test]
    fn ready_forms_follow_the_dictionary() {
        let rows = [
            (0x40, 0x50, 9),
            (0x10, 0x20, 5),
            (0x30, 0x40, 3),
            (0x20, 0x30, 9),
            (0x60, 0x70, 1),
        ];
        let rules = Arc::new(build(&rows));
        assert_eq!(rules.dictionary(), [9, 5, 3, 1]);
        let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
        b.add(0x1000, 0x2000, 0x1000, "m".into(), rules);
        let t = b.build().unwrap();
        for (start, end, rule) in rows {
            for addr in [start, end - 1] {
                let found = t.lookup_index(0x1000 + addr).unwrap();
                assert_eq!(*found.rule, rule);
                assert_eq!(found.ready.simple(), Some(rule), "{addr:#x}");
            }
        }
    }

    #[test]
    fn overlapping_modules_are_refused() {
        let rules = Arc::new(ModuleRules::<u8>::empty());
        let mut b = RuleTableBuilder::new(NonZeroU32::new(1).unwrap());
        b.add(0x1000, 0x3000, 0, "a".into(), rules.clone());
        b.add(0x2000, 0x4000, 0, "b".into(), rules);
        assert_eq!(b.build().unwrap_err(), TableError::OverlappingModules);
    }
}
