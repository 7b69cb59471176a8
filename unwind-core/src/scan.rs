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

use crate::arch::{Arch, Step};
use crate::memory::Memory;
use crate::stop::{StopReason, Trust};
use crate::table::RuleTable;

pub use crate::table::return_sites::{CallFit, ReturnSites};

/// Words scanned above the stack pointer for a caller's return address (Breakpad's
/// `kRASearchWords`).
pub const SCAN_WORDS: u64 = 30;

/// Words scanned for the caller of a frame whose PC came from registers.
pub const SCAN_WORDS_EXACT: u64 = 4 * SCAN_WORDS;

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
        // A signed return address (aarch64) is a return site by its address bits.
        let value = value & !mem.pointer_mask();
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
