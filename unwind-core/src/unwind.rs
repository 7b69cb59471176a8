//! The unwind loop, written once for every architecture ([`Arch`]), and what it reports.

use crate::arch::{returns_into_code, signal_return, Arch, Step};
use crate::cache::{Cache, Cached};
use crate::memory::Memory;
use crate::table::RuleTable;

pub use crate::stop::{StopReason, Trust};

/// The outcome of one unwind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwindResult {
    /// Frames written to the caller's array, frame 0 first.
    pub frames: usize,
    /// Why the walk ended.
    pub stop: StopReason,
}

/// Unwinds from `regs`, writing each frame's PC into `pcs` (frame 0 first: the interrupted
/// instruction; then return addresses as found on the stack, not adjusted). The frames are
/// `pcs[..frames]`; elements past them are unspecified (the walk may have written there a
/// candidate it then refused).
///
/// Rules are looked up through `cache` at [`Arch::lookup_address`]: the PC for frame 0 and
/// after signal frames, inside the call instruction for callers. A frame no rule describes goes
/// to the architecture's fallbacks ([`Arch::step_without_rule`]), then, if the table was built
/// to scan ([`crate::RuleTableBuilder::scan_stack`]), to a stack scan ([`crate::scan`]). A
/// caller whose return address is 0, whose stack pointer does not increase
/// ([`Arch::sp_increases`]; not asked of a signal frame's caller, the kernel's record of the
/// interrupted thread, whose stack may be another) or whose return address is in no module's code ([`StopReason::OutsideModules`]; checked the same way whichever rule
/// or fallback found it) ends the walk, and only the first is counted as a frame. A PC from
/// registers (frame 0, or the one a signal interrupted) is a frame wherever it is. Every memory
/// read goes through `mem`. If `trust` is given, its element `i` receives how frame `i` was
/// found. Never allocates, locks or panics; the loop runs at most `pcs.len()` times.
// `#[inline]`: left out of line (as LLVM chose for callers in other crates once the crate graph
// grew), the same loop cost 2 more instructions per frame (callgrind, rec200: 39.9 against 37.7).
#[inline]
pub fn unwind<A: Arch, M: Memory + ?Sized>(
    table: &RuleTable<A::Rule>,
    cache: &mut Cache<A>,
    regs: A::Regs,
    mem: &M,
    pcs: &mut [u64],
    trust: Option<&mut [Trust]>,
) -> UnwindResult {
    // Two instantiations: without a trust slice the loop has fewer live values.
    match trust {
        None => walk::<A, M, false>(table, cache, regs, mem, pcs, &mut []),
        Some(trust) => walk::<A, M, true>(table, cache, regs, mem, pcs, trust),
    }
}

/// Applies what the cache holds for a frame that is not a simple rule: a rule from the table,
/// the fallbacks, or the end of the walk. Out of line: rare after warm-up.
#[cold]
#[inline(never)]
fn step_slow<A: Arch, M: Memory + ?Sized>(
    table: &RuleTable<A::Rule>,
    cached: Cached<A::Simple>,
    regs: A::Regs,
    exact: bool,
    mem: &M,
) -> Result<Step<A::Regs>, StopReason> {
    match cached {
        Cached::Table(at) => {
            let rule = table.rule(at.module, at.index).ok_or(StopReason::BadRule)?;
            A::step_rule(table, at.module, rule, &regs, exact, mem)
        }
        Cached::NoRule | Cached::Outside => {
            if !exact {
                // A return address of 0 (looked up at an address in no module) ends the walk
                // here rather than by a test of every caller in the loop.
                if A::pc(&regs) == 0 {
                    return Err(StopReason::ZeroReturnAddress);
                }
                if let Some(found) = signal_return::<A>(table, &regs) {
                    return A::step_rule(table, found.at.module, found.rule, &regs, exact, mem);
                }
                // A return address in no module's code is not a frame ([`failed`] does not
                // count it); a PC from registers is (frame 0, or interrupted by a signal): the
                // fallbacks apply.
                if matches!(cached, Cached::Outside) {
                    return Err(StopReason::OutsideModules);
                }
            }
            // A fallback's guess that returns into no module's code: the fallback failed. Then
            // the stack is scanned, if the table asks for it.
            match A::step_without_rule(table, &regs, exact, mem) {
                Ok(step) if returns_into_code::<A>(table, &step.caller) => Ok(step),
                _ if table.scans() => crate::scan::scan::<A, M>(table, &regs, exact, mem),
                Ok(_) => Err(StopReason::NoRule),
                Err(stop) => Err(stop),
            }
        }
        Cached::Stop(stop) => Err(stop),
        // Simple rules are applied inline by the caller.
        Cached::Simple(s) => A::step_simple(&s, &regs, exact, mem).map(|caller| Step {
            caller,
            trust: Trust::Cfi,
            exact: false,
        }),
    }
}

#[inline(always)]
fn walk<A: Arch, M: Memory + ?Sized, const TRUST: bool>(
    table: &RuleTable<A::Rule>,
    cache: &mut Cache<A>,
    regs: A::Regs,
    mem: &M,
    pcs: &mut [u64],
    trust: &mut [Trust],
) -> UnwindResult {
    let mut regs = A::first_frame(regs, mem);
    // Where the frame's rule is looked up: the PC itself for frame 0.
    let mut at = A::lookup_address(&regs, true);
    let mut how = Trust::Context;
    cache.prepare(table);
    cache.prefetch_set(at);
    let len = pcs.len();
    // By index: walked by its tail, the array kept LLVM at three induction variables, which
    // cost the aarch64 and armv7 walks built for x86_64 instructions a frame; one loop per
    // form cost every architecture more (BENCHMARKS.md, "Design decisions").
    #[allow(clippy::needless_range_loop)]
    for i in 0..len {
        pcs[i] = A::pc(&regs);
        if TRUST {
            if let Some(t) = trust.get_mut(i) {
                *t = how;
            }
        }
        // The PC is exact (frame 0, the caller of a signal frame) if it was looked up as is
        // (`Arch::lookup_address` differs otherwise).
        let exact = at == A::lookup_address(&regs, true);
        let cached = cache.lookup_prepared(table, at);
        let caller = if let Cached::Simple(s) = cached {
            how = Trust::Cfi;
            A::step_simple(s, &regs, exact, mem).inspect(|c| at = A::lookup_address(c, false))
        } else if let Cached::Stop(stop) = *cached {
            // Most walks end here (`_start`, a thread's start routine): without the call and
            // the registers it saves, about 25 instructions a walk less.
            return failed(cache, i, stop);
        } else {
            step_slow::<A, M>(table, *cached, regs, exact, mem).map(|s| {
                at = A::lookup_address(&s.caller, s.exact);
                how = s.trust;
                s.caller
            })
        };
        let caller = match caller {
            Ok(c) => c,
            Err(stop) => return failed(cache, i, stop),
        };
        // A switch of stacks is asked only where the stack pointer does not increase (inlined:
        // a memory of one stack answers `false` where it is compiled, an out-of-line call here
        // cost the loop 4 instructions a frame in registers kept across it). A signal frame's
        // caller (looked up at its exact PC) is the interrupted thread as the kernel saved it:
        // its stack may be another (a handler run on an alternate signal stack).
        let (callee_sp, caller_sp) = (A::sp(&regs), A::sp(&caller));
        if !A::sp_increases(&caller, &regs, exact)
            && !mem.switches_stack(callee_sp, caller_sp)
            && at != A::lookup_address(&caller, true)
        {
            return stopped(cache, i, StopReason::SpNotIncreasing);
        }
        regs = caller;
    }
    cache.count_lookups(len as u64);
    UnwindResult {
        frames: len,
        // The caller after the last frame, not looked up: its return address may be 0.
        stop: if A::pc(&regs) == 0 {
            StopReason::ZeroReturnAddress
        } else {
            StopReason::BufferFull
        },
    }
}

/// The result of a walk that a step ended at frame `last`, written and looked up. Frame `last`
/// is not counted if it was not one (a return address in no module's code,
/// [`StopReason::OutsideModules`], or 0, [`StopReason::ZeroReturnAddress`]). Out of line: on
/// the hot path the test cost registers, and about an instruction a frame.
#[cold]
#[inline(never)]
fn failed<A: Arch>(cache: &mut Cache<A>, last: usize, stop: StopReason) -> UnwindResult {
    if !matches!(
        stop,
        StopReason::OutsideModules | StopReason::ZeroReturnAddress
    ) {
        return stopped(cache, last, stop);
    }
    cache.count_lookups(last as u64 + 1);
    UnwindResult { frames: last, stop }
}

/// The result of a walk that stopped after writing (and looking up) frame `last`; counts the
/// walk's lookups in `cache`.
#[inline(always)]
fn stopped<A: Arch>(cache: &mut Cache<A>, last: usize, stop: StopReason) -> UnwindResult {
    let frames = last + 1;
    cache.count_lookups(frames as u64);
    UnwindResult { frames, stop }
}

#[cfg(test)]
mod tests {
    use super::StopReason;

    #[test]
    fn indices_follow_all() {
        for (i, r) in StopReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }
}
