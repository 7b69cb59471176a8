//! What an architecture supplies to the generic unwind loop ([`crate::unwind()`]) and cache.
//!
//! The loop is written once; an architecture is a zero-sized type implementing [`Arch`] with
//! only what truly differs: its register set, its rule type and the rule's compact cached form,
//! how a frame's PC becomes the address its rule is looked up at, how rules apply, the
//! fallbacks when no rule covers a PC, and the stack-pointer check. Implementations:
//! [`crate::x86_64::X86_64`], [`crate::arm::Arm`] and [`crate::aarch64::Aarch64`].
//!
//! Adding an architecture to this crate means one module like [`crate::x86_64`] that defines
//! its `Regs`, `Rule` and `Simple` types and implements every item of [`Arch`].

use core::fmt::Debug;

use crate::cache::Ready;
use crate::memory::Memory;
use crate::stop::{StopReason, Trust};
use crate::table::{FoundRef, RuleTable, TableRule};

/// An architecture the unwinder supports (see the [module docs](self)).
///
/// Every function here runs on the unwind path: it must not allocate, lock, panic or loop
/// without bound, and must read memory only through the given [`Memory`].
pub trait Arch:
    Copy + Debug + Default + PartialEq + Eq + core::hash::Hash + Send + Sync + 'static
{
    /// The architecture's name as the tools print it (`"x86_64"`, `"arm"`).
    const NAME: &'static str;

    /// The size of a stack word (and of a return address on the stack) in bytes: 4 or 8.
    const WORD_BYTES: u8;

    /// The registers the unwinder tracks, with their values in one frame.
    type Regs: Copy + Default + Debug + PartialEq;

    /// How to recover the caller's tracked registers at one address: what the rule tables hold,
    /// each with its form ready for the rule cache ([`Ready::of`] for this architecture).
    type Rule: Copy + Ord + Debug + Send + Sync + 'static + TableRule<Ready = Ready<Self::Simple>>;

    /// The compact forms of [`Arch::Rule`] that cover nearly every frame, decoded so that
    /// [`Arch::step_simple`] applies them with no further decoding; the rule cache holds them
    /// inline ([`crate::cache::Cached::Simple`]). Any other rule is applied from the table by
    /// [`Arch::step_rule`].
    type Simple: Copy + Debug + PartialEq;

    /// The frame's PC as written to the caller's array (on ARM with the Thumb bit).
    fn pc(regs: &Self::Regs) -> u64;

    /// The frame's stack pointer.
    fn sp(regs: &Self::Regs) -> u64;

    /// The address whose rule describes the frame with these registers: the PC itself when it
    /// is `exact` (frame 0, and the caller of a signal frame), else an address inside the call
    /// instruction that the return address follows. Mode bits (ARM's Thumb bit) are cleared
    /// here (pointer-authentication codes are not: the steps strip them from return addresses
    /// as they read them, with [`Memory::pointer_mask`]). The two addresses must differ for
    /// every PC: the loop tells an exact PC by it.
    fn lookup_address(regs: &Self::Regs, exact: bool) -> u64;

    /// Why a walk ends at a frame described by `rule`, if it does (an undefined return address:
    /// [`StopReason::EndOfStack`], or [`StopReason::CantUnwind`] for ARM's EXIDX marker).
    fn stop(rule: &Self::Rule) -> Option<StopReason>;

    /// The simple form of `rule`, if it has one.
    fn simple(rule: &Self::Rule) -> Option<Self::Simple>;

    /// Whether `rule` describes a signal trampoline (the caller's PC it gives is exact).
    fn is_signal_frame(rule: &Self::Rule) -> bool;

    /// Applies a simple rule to the callee's registers: the caller's registers (found by CFI),
    /// or why there are none ([`StopReason::ReadFailed`], ...). `exact` is true where the PC is
    /// exact (frame 0, a signal frame's caller; see [`Arch::lookup_address`]): elsewhere the
    /// frame made a call, which overwrote any link register. The hot path: always inlined into
    /// the loop.
    fn step_simple<M: Memory + ?Sized>(
        rule: &Self::Simple,
        regs: &Self::Regs,
        exact: bool,
        mem: &M,
    ) -> Result<Self::Regs, StopReason>;

    /// Applies any rule, found in module `module` of `table` (which holds the expressions it
    /// refers to), to the callee's registers, whose PC is `exact` or not (as for
    /// [`Arch::step_simple`]). A rule with a [`stop`](Arch::stop) gives that stop.
    fn step_rule<M: Memory + ?Sized>(
        table: &RuleTable<Self::Rule>,
        module: u16,
        rule: &Self::Rule,
        regs: &Self::Regs,
        exact: bool,
        mem: &M,
    ) -> Result<Step<Self::Regs>, StopReason>;

    /// The fallbacks for a frame that no rule describes (`exact`: its PC is the interrupted
    /// instruction, at frame 0 or a signal frame's caller, not a return address): the return
    /// address a call just left (the link register of a leaf; on x86_64 the word at SP where
    /// the PC is in the null page, a call through a null pointer), the frame-pointer chain.
    /// Each validates its candidate before returning it; [`StopReason::NoRule`] if none
    /// applies. The loop then refuses, as `NoRule` too, a candidate that does not return into
    /// one of `table`'s modules; an architecture with several fallbacks checks that itself to
    /// choose among them.
    fn step_without_rule<M: Memory + ?Sized>(
        table: &RuleTable<Self::Rule>,
        regs: &Self::Regs,
        exact: bool,
        mem: &M,
    ) -> Result<Step<Self::Regs>, StopReason>;

    /// Frame 0's registers as the walk takes them (aarch64: the PC stripped of a
    /// pointer-authentication code, as every return address is; a context recorded by other
    /// tools may hold it signed).
    #[inline(always)]
    fn first_frame<M: Memory + ?Sized>(regs: Self::Regs, mem: &M) -> Self::Regs {
        let _ = mem;
        regs
    }

    /// The caller implied by a return address `ret` that a stack scan ([`crate::scan`]) found
    /// in the word just below `sp`: its PC is `ret`, its stack pointer `sp`, and the other
    /// registers are assumed unchanged (as Breakpad's scanning walkers assume).
    fn scanned_caller(regs: &Self::Regs, ret: u64, sp: u64) -> Self::Regs;

    /// Reads the stack word at `addr` ([`Arch::WORD_BYTES`] bytes, little-endian).
    #[inline]
    fn read_word<M: Memory + ?Sized>(mem: &M, addr: u64) -> Option<u64> {
        if Self::WORD_BYTES == 8 {
            mem.read_u64(addr)
        } else {
            mem.read_u32(addr).map(u64::from)
        }
    }

    /// True if the caller's stack pointer is acceptable after the callee's: it must increase
    /// (architectures whose interrupted frame, `exact`, may be a leaf that has not moved SP
    /// allow equality there: frame 0 and a signal frame's caller).
    fn sp_increases(caller: &Self::Regs, callee: &Self::Regs, exact: bool) -> bool;
}

/// True if `caller`'s PC, as a return address, is in the code of one of `table`'s modules, or
/// is 0 (the end of a frame-pointer chain, which the loop reports as
/// [`StopReason::ZeroReturnAddress`]), or starts a signal trampoline ([`signal_return`]): the
/// check every fallback's candidate passes, as the unwind loop checks callers found by rules
/// (it looks them up at the same address).
pub(crate) fn returns_into_code<A: Arch>(table: &RuleTable<A::Rule>, caller: &A::Regs) -> bool {
    A::pc(caller) == 0
        || table.module_for(A::lookup_address(caller, false)).is_some()
        || signal_return::<A>(table, caller).is_some()
}

/// The rule of the signal trampoline that starts at `regs`' PC, if one does: a signal handler
/// returns to the trampoline's first instruction, and where nothing precedes it that a rule
/// describes (qemu-user's aarch64 trampoline starts a page of its own), the lookup inside the
/// call instruction finds no rule; the trampoline's own rule is then looked up at the PC itself.
pub(crate) fn signal_return<'t, A: Arch>(
    table: &'t RuleTable<A::Rule>,
    regs: &A::Regs,
) -> Option<FoundRef<'t, A::Rule>> {
    table
        .lookup_index(A::lookup_address(regs, true))
        .filter(|found| A::is_signal_frame(found.rule))
}

/// The outcome of one step that is not a simple cached rule: the caller's registers, how they
/// were found, and whether the caller's PC is exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step<R> {
    /// The caller's registers.
    pub caller: R,
    /// How they were found.
    pub trust: Trust,
    /// True after a signal frame: the caller's PC is the interrupted instruction itself, so
    /// its rule is looked up at the PC, not inside a call instruction.
    pub exact: bool,
}

/// Marks the path that calls it as unlikely (branch weights, on stable Rust: the hashbrown
/// idiom). Inlined to nothing.
#[cold]
#[inline(always)]
fn cold() {}

/// `b`, telling the compiler that it is usually true: the hot shape of a rule is then tested
/// first, not behind a switch over every shape.
#[inline(always)]
pub(crate) fn likely(b: bool) -> bool {
    if !b {
        cold();
    }
    b
}
