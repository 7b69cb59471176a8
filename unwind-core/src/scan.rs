//! Stack scanning: the last fallback, off unless a table asks for it.
//!
//! When neither a rule nor the architecture's fallbacks ([`Arch::step_without_rule`]) find a
//! frame's caller, the walk can look up the stack for a word that is a *return site*: the
//! address just after a call instruction in a module's code. The modules' return sites are found
//! once, when the table is built (from the code's bytes; see `unwind-dwarf`'s `return_sites`),
//! and kept per module as a sorted array ([`ReturnSites`]); the unwind path never reads code.
//!
//! A word found that way is only a guess: a return address left in a dead frame by a call that
//! has returned looks the same. Unlike Breakpad's scan, which takes any word in a module's code,
//! this one knows which function each direct call calls ([`ReturnSites::call_from`]): it passes
//! over the sites of direct calls to other functions than the frame's own, and takes the site of
//! a call to the frame's own function before a nearer one whose callee is not known (indirect,
//! or through the PLT). On a C program built without unwind tables or frame pointers
//! (`tests/programs.rs`) that took the share of x86_64 samples whose every frame is right from
//! 5 % (any return site) to 82 %. Frames found so are marked [`Trust::Scan`], and the scan is
//! bounded: as Breakpad's
//! walkers, [`SCAN_WORDS`] words above the stack pointer, four times as many for a frame whose
//! PC came from registers (the interrupted one), which may have left more of its frame in use.
//! Breakpad and Valgrind scan; framehop, LUL and libunwind do not. A table scans only if built
//! with [`crate::RuleTableBuilder::scan_stack`].

use alloc::vec::Vec;

use crate::arch::{Arch, Step};
use crate::memory::Memory;
use crate::table::{RuleTable, TableError};
use crate::unwind::{StopReason, Trust};

/// Words scanned above the stack pointer for a caller's return address (Breakpad's
/// `kRASearchWords`).
pub const SCAN_WORDS: u64 = 30;

/// Words scanned for the caller of a frame whose PC came from registers.
pub const SCAN_WORDS_EXACT: u64 = 4 * SCAN_WORDS;

/// The return sites of one module: file addresses just after a call instruction, sorted, each
/// with the function its call calls when that is known (a direct call within the module), and
/// the module's known function starts. On ARM a Thumb site has bit 0 set, as the return address
/// a Thumb `bl` leaves in LR; callees and starts have it clear.
///
/// The callees let a scan refuse most stale return addresses: a word left on the stack by a
/// call that has returned names a call to some other function than the one the frame being
/// unwound is in ([`ReturnSites::call_from`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReturnSites {
    base: u64,
    /// Sites relative to `base`, sorted, without duplicates.
    sites: Vec<u32>,
    /// For each site, the start of the function its call calls, relative to `base`, or
    /// [`UNKNOWN_CALLEE`].
    callees: Vec<u32>,
    /// Function starts relative to `base`, sorted.
    starts: Vec<u32>,
}

/// The callee of an indirect call, or of a call through a PLT stub (into another module).
const UNKNOWN_CALLEE: u32 = u32::MAX;

/// Whether a stack word is the return address of a call that made a given frame
/// ([`ReturnSites::call_from`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallFit {
    /// No: not a return site, or its call calls another function.
    No,
    /// Perhaps: a return site whose call's callee is not known.
    Maybe,
    /// Yes: the site of a direct call to the frame's function.
    Yes,
}

impl ReturnSites {
    /// The sites (file addresses, each with the file address of the function its call calls if
    /// known) and function starts of a module whose code starts at file address `base`; sites
    /// may repeat (a site found twice with different callees keeps none), starts outside the
    /// 4 GiB above `base` are dropped. [`TableError::RangeTooLarge`] if a site or callee is
    /// outside them.
    pub fn new(
        base: u64,
        mut sites: Vec<(u64, Option<u64>)>,
        starts: Vec<u64>,
    ) -> Result<Self, TableError> {
        let rel = |a: u64| {
            a.checked_sub(base)
                .and_then(|r| u32::try_from(r).ok())
                .filter(|&r| r != UNKNOWN_CALLEE)
        };
        sites.sort_unstable();
        let mut out = ReturnSites {
            base,
            ..ReturnSites::default()
        };
        for (site, callee) in sites {
            let site = rel(site).ok_or(TableError::RangeTooLarge)?;
            let callee = match callee {
                Some(c) => rel(c).ok_or(TableError::RangeTooLarge)?,
                None => UNKNOWN_CALLEE,
            };
            if out.sites.last() == Some(&site) {
                if let Some(last) = out.callees.last_mut() {
                    if *last != callee {
                        *last = UNKNOWN_CALLEE;
                    }
                }
                continue;
            }
            out.sites.push(site);
            out.callees.push(callee);
        }
        out.starts = starts.into_iter().filter_map(rel).collect();
        out.starts.sort_unstable();
        out.starts.dedup();
        Ok(out)
    }

    /// The start of the function containing file address `svma`, as far as the known starts
    /// tell (the greatest one not above it).
    #[inline]
    pub fn function_start(&self, svma: u64) -> Option<u64> {
        let rel = u32::try_from(svma.checked_sub(self.base)?).ok()?;
        let i = self.starts.partition_point(|&s| s <= rel).checked_sub(1)?;
        self.starts
            .get(i)
            .map(|&s| self.base.wrapping_add(u64::from(s)))
    }

    /// Whether file address `ret` is a return site whose call could have made the frame at
    /// file address `callee_pc` of the same module (`None`: of another module).
    #[inline]
    pub fn call_from(&self, ret: u64, callee_pc: Option<u64>) -> CallFit {
        let site = ret
            .checked_sub(self.base)
            .and_then(|r| u32::try_from(r).ok())
            .and_then(|r| self.sites.binary_search(&r).ok());
        let Some(callee) = site.and_then(|i| self.callees.get(i).copied()) else {
            return CallFit::No;
        };
        if callee == UNKNOWN_CALLEE {
            return CallFit::Maybe;
        }
        let callee = self.base.wrapping_add(u64::from(callee));
        if callee_pc.is_some_and(|pc| self.function_start(pc) == Some(callee)) {
            CallFit::Yes
        } else {
            CallFit::No
        }
    }

    /// How many sites.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// Heap bytes.
    pub fn bytes(&self) -> usize {
        (self.sites.len() + self.callees.len() + self.starts.len()) * 4
    }
}

/// Scans the stack above `regs`' stack pointer for a return site of one of `table`'s modules
/// whose call could have made this frame ([`ReturnSites::call_from`]; at most [`SCAN_WORDS`]
/// words, [`SCAN_WORDS_EXACT`] if `exact`: the PC came from registers) and returns the caller
/// it implies: the first site of a direct call to this frame's function, else the first site
/// of a call whose callee is not known ([`Arch::scanned_caller`]), marked
/// [`Trust::Scan`]; [`StopReason::NoRule`] if none is found before the scan ends or leaves the
/// readable stack.
#[cold]
#[inline(never)]
pub(crate) fn scan<A: Arch, M: Memory + ?Sized>(
    table: &RuleTable<A::Rule>,
    regs: &A::Regs,
    exact: bool,
    mem: &M,
) -> Result<Step<A::Regs>, StopReason> {
    let words = if exact { SCAN_WORDS_EXACT } else { SCAN_WORDS };
    let word = u64::from(A::WORD_BYTES);
    // An address in the function of the frame being unwound.
    let here = A::lookup_address(regs, exact);
    // The first word that may be the return address (a call whose callee is not known), taken
    // if no word in the window is the site of a call to this frame's function.
    let mut maybe = None;
    let mut at = A::sp(regs);
    for _ in 0..words {
        let Some(value) = A::read_word(mem, at) else {
            break;
        };
        let Some(above) = at.checked_add(word) else {
            break;
        };
        match table.return_site_fit(value, here) {
            CallFit::Yes => return Ok(scanned::<A>(regs, value, above)),
            CallFit::Maybe if maybe.is_none() => maybe = Some((value, above)),
            _ => {}
        }
        at = above;
    }
    if let Some((value, above)) = maybe {
        return Ok(scanned::<A>(regs, value, above));
    }
    Err(StopReason::NoRule)
}

/// The step to the caller whose return address `ret` was found just below `sp`.
#[inline]
fn scanned<A: Arch>(regs: &A::Regs, ret: u64, sp: u64) -> Step<A::Regs> {
    Step {
        caller: A::scanned_caller(regs, ret, sp),
        trust: Trust::Scan,
        exact: false,
    }
}
