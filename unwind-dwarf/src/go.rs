//! Go's cgo calls: where a walk from C code crosses from the system stack back to the
//! goroutine that called it.
//!
//! `runtime.asmcgocall` (Go's assembly) switches from the goroutine's stack to the thread's
//! system stack (`g0`'s) and calls the C function there, through
//! `runtime.asmcgocall_landingpad`, which tail-calls it: a C function's return address is the
//! return site of one of `asmcgocall`'s two calls of the landing pad. Its CFI describes none of
//! the switch. At the first call's return site (the call from a goroutine) the frame holds,
//! just above the return address, the depth of the goroutine's stack pointer below its stack's
//! top, then the goroutine's `g` (whose second word is that top): the goroutine's stack pointer
//! before the switch is `[[sp + 8] + 8] - [sp]`, and the CFA is where the function's CFI puts
//! it from there. At the second (already on the system stack) the frame holds that stack
//! pointer itself, `[sp]`. The rows at the two return sites say so. The runtime lets the
//! first's reads reach the goroutine's stack and `g` only where they are the running M's
//! goroutine's (`unwind-in-process`).
//!
//! Go's other assembly functions that move the stack pointer to another stack, or start one,
//! have CFI that describes none of it either: a walk through `runtime.morestack` on the system
//! stack read a stale word there as its caller (`runtime.newproc` called by nothing). Their
//! rows end the walk instead ([`SwitchKind::Stops`]), as Go's own traceback stops at them, and
//! `runtime.goexit`, the return address at the top of every goroutine's stack, ends it as the
//! end of the stack.

use object::{Object, ObjectSymbol};

use crate::eh_return::Code;
use crate::DwarfArch;

/// How `asmcgocall` left the stack at one of its return sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchKind {
    /// Called from a goroutine: the caller is on the goroutine's stack, found through its `g`.
    FromGoroutine,
    /// Called on the system stack: the caller's stack pointer is saved in the frame.
    OnSystemStack,
    /// A function that switches stacks without saying where to, or the top of a goroutine's
    /// stack: the walk ends there.
    Stops,
}

/// Go's assembly functions whose frames end a walk: those that switch stacks (Go's own
/// traceback marks them `SPWRITE`), and the tops of goroutines' and threads' stacks.
const STOPS: &[&str] = &[
    "runtime.goexit.abi0",
    "runtime.morestack.abi0",
    "runtime.morestack_noctxt.abi0",
    "runtime.systemstack.abi0",
    "runtime.systemstack_switch.abi0",
    "runtime.mcall.abi0",
    "runtime.gogo.abi0",
    "runtime.asmcgocall.abi0",
    "runtime.asmcgocall_no_g.abi0",
    "runtime.cgocallback.abi0",
    "runtime.rt0_go.abi0",
];

/// Addresses whose rows a Go stack switch sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSwitch {
    /// The file addresses `[start, end)`: a function ([`SwitchKind::Stops`]), or the last byte
    /// of a call of the landing pad (where its return address is looked up).
    pub at: (u64, u64),
    /// What the frame holds there.
    pub kind: SwitchKind,
}

/// The stack switches of a Go executable (from its symbol table and code): the functions that
/// end walks first, then the two return sites of `asmcgocall` (rows set later win); no return
/// site if it has not exactly two calls of the landing pad (another version's `asmcgocall`).
/// Empty if not Go or stripped.
pub fn stack_switches<A: DwarfArch>(elf: &object::File<'_>, code: &Code<'_>) -> Vec<StackSwitch> {
    let mut functions: Vec<(&str, (u64, u64))> = elf
        .symbols()
        .filter_map(|s| {
            let name = s.name().ok()?;
            let wanted = STOPS.contains(&name) || name == "runtime.asmcgocall_landingpad.abi0";
            (wanted && s.size() > 0)
                .then(|| (name, (s.address(), s.address().saturating_add(s.size()))))
        })
        .collect();
    functions.sort_unstable();
    let function = |name: &str| functions.iter().find(|f| f.0 == name).map(|f| f.1);
    let mut switches: Vec<StackSwitch> = functions
        .iter()
        .filter(|f| STOPS.contains(&f.0))
        .map(|&(_, at)| StackSwitch {
            at,
            kind: SwitchKind::Stops,
        })
        .collect();
    let (Some(asmcgocall), Some((landing_pad, _))) = (
        function("runtime.asmcgocall.abi0"),
        function("runtime.asmcgocall_landingpad.abi0"),
    ) else {
        return switches;
    };
    let Some((_, calls)) = crate::eh_return::direct_calls(code, asmcgocall, A::return_sites) else {
        return switches;
    };
    let sites: Vec<u64> = calls
        .iter()
        .filter(|&&(_, target)| target == landing_pad)
        .map(|&(ret, _)| ret)
        .collect();
    if let [from_goroutine, on_system_stack] = sites[..] {
        for (ret, kind) in [
            (from_goroutine, SwitchKind::FromGoroutine),
            (on_system_stack, SwitchKind::OnSystemStack),
        ] {
            switches.push(StackSwitch {
                at: (ret.saturating_sub(1), ret),
                kind,
            });
        }
    }
    switches
}

/// The CFA expression at a return site of `kind`, the stack pointer being tracked register `sp`,
/// words `word` bytes and the CFA `cfa` bytes above the stack pointer before the switch (Go's
/// assembler gives `asmcgocall` a frame-pointer prologue on amd64).
pub(crate) fn cfa_expression(
    kind: SwitchKind,
    sp: u8,
    word: i64,
    cfa: i64,
) -> Option<unwind_core::expr::Expr> {
    use unwind_core::expr::Op::{Add, Const, Deref, Reg, Sub};
    match kind {
        SwitchKind::FromGoroutine => unwind_core::expr::Expr::new(&[
            Reg(sp),
            Const(word),
            Add,
            Deref,
            Const(word),
            Add,
            Deref,
            Reg(sp),
            Deref,
            Sub,
            Const(cfa),
            Add,
        ])
        .ok(),
        SwitchKind::OnSystemStack => {
            unwind_core::expr::Expr::new(&[Reg(sp), Deref, Const(cfa), Add]).ok()
        }
        SwitchKind::Stops => None,
    }
}
