//! Go executables: what their unwind tables do not say, from Go's own function table
//! ([`pclntab`], which every Go binary has, stripped or not).
//!
//! - **Where stacks switch or start.** Go's assembly functions that move the stack pointer to
//!   another stack (`SPWRITE` in Go's table: `morestack`, `systemstack`, `mcall`, `gogo`,
//!   `asmcgocall`, ...) have CFI that describes none of it: a walk through `runtime.morestack`
//!   on the system stack read a stale word there as its caller (`runtime.newproc`, called by
//!   nothing). Their rows end the walk ([`SwitchKind::Stops`]), as Go's own traceback stops at
//!   them, and so do those of the tops of stacks (`TOPFRAME`: `runtime.goexit`, the return
//!   address at the top of every goroutine's stack, `runtime.mstart`).
//! - **cgo calls.** `runtime.asmcgocall` switches from the goroutine's stack to the thread's
//!   system stack (`g0`'s) and calls the C function there: directly on arm64, through
//!   `runtime.asmcgocall_landingpad` (which tail-calls it) on amd64, so a C function's return
//!   address is the return site of one of `asmcgocall`'s two calls of it. At the first (the
//!   call from a goroutine) the frame holds the goroutine's `g` (whose second word is its
//!   stack's top) and the depth of the goroutine's stack pointer below that top: the stack
//!   pointer before the switch is `[[sp + g] + 8] - [sp + depth]` ([`CgoFrame`]), and the CFA
//!   is where the function's CFI puts it from there. At the second (already on the system
//!   stack) the frame holds that stack pointer itself. The rows at the two return sites say
//!   so; the runtime lets the first's reads reach the goroutine's stack and `g` only where
//!   they are the running M's goroutine's (`unwind-in-process`).
//! - **Preemption.** `runtime.asyncPreempt`, which Go's own signal handler makes a goroutine
//!   seem to call when it preempts it, has a caller whose PC is the interrupted instruction:
//!   its rows say so ([`SwitchKind::Preempted`]; on arm64 the handler's push of the link
//!   register too).
//! - **Binaries without DWARF** (`-ldflags=-w`, or `-s`, which implies it): no `.debug_frame`,
//!   so each function's rows come from its stack-pointer deltas ([`GoTables::sp_deltas`]), as
//!   Go's linker writes them into `.debug_frame`.

use object::Object;

use crate::eh_return::Code;
use crate::DwarfArch;

pub mod pclntab;

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
    /// `runtime.asyncPreempt`: its caller was interrupted there.
    Preempted,
}

/// Where `asmcgocall`'s frame on the system stack keeps the goroutine's stack pointer, as
/// offsets from the stack pointer at its return sites, and the stack pointer's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgoFrame {
    /// The stack pointer's DWARF register number.
    pub sp_dwarf: u16,
    /// The stack pointer's tracked register number in expressions.
    pub sp: u8,
    /// The goroutine's `g`, after a call from a goroutine.
    pub g: i64,
    /// The depth of the goroutine's stack pointer below its stack's top, after a call from a
    /// goroutine.
    pub depth: i64,
    /// The stack pointer itself, after a call on the system stack.
    pub saved_sp: i64,
}

/// The function Go's preemption makes a goroutine seem to call.
const PREEMPTED: &str = "runtime.asyncPreempt";
/// The function that switches to the system stack for a cgo call.
const ASMCGOCALL: &str = "runtime.asmcgocall";
/// The function `asmcgocall` calls the C function through on amd64.
const LANDING_PAD: &str = "runtime.asmcgocall_landingpad";

/// Addresses whose rows a Go stack switch sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSwitch {
    /// The file addresses `[start, end)`: a function ([`SwitchKind::Stops`],
    /// [`SwitchKind::Preempted`]), or the last byte of a call of the C function (where its
    /// return address is looked up).
    pub at: (u64, u64),
    /// What the frame holds there.
    pub kind: SwitchKind,
}

/// What the tables take from a Go executable's function table ([`pclntab`]).
#[derive(Clone, Debug, Default)]
pub struct GoTables {
    /// The stack switches: the functions that end walks (Go's `TOPFRAME` and `SPWRITE`
    /// functions, where Go's own traceback stops) and `asyncPreempt` first, then the two return
    /// sites of `asmcgocall` (rows set later win).
    pub switches: Vec<StackSwitch>,
    /// Where the file has no `.debug_frame` (built with `-ldflags=-w`): each function's rows
    /// from its stack-pointer deltas, `(start, end, delta)`, as Go's linker would have written
    /// its `.debug_frame` ([`crate::DwarfArch::go_frame_rule`]).
    pub sp_deltas: Vec<(u64, u64, i64)>,
    /// Why the table could not be read, if it could not.
    pub error: Option<pclntab::PclntabError>,
}

impl GoTables {
    /// Whether there is nothing to add.
    pub fn is_empty(&self) -> bool {
        self.switches.is_empty() && self.sp_deltas.is_empty()
    }
}

/// What the tables take from `elf`'s `.gopclntab` (empty if it has none: not Go), its code at
/// hand in `code`. No return site of `asmcgocall` if it has not exactly two calls of the
/// landing pad or, without one, two indirect calls (another version's `asmcgocall`).
pub fn read<A: DwarfArch>(elf: &object::File<'_>, code: &Code<'_>) -> GoTables {
    let table = match pclntab::of_elf(elf) {
        None => return GoTables::default(),
        Some(Err(e)) => {
            return GoTables {
                error: Some(e),
                ..GoTables::default()
            }
        }
        Some(Ok(t)) => t,
    };
    let functions: Vec<pclntab::GoFunction<'_>> = table.functions().collect();
    let function = |name: &str| asm_function(&table, name).map(|f| (f.start, f.end));
    let mut switches: Vec<StackSwitch> = functions
        .iter()
        .filter_map(|f| {
            let kind = if f.name == PREEMPTED {
                SwitchKind::Preempted
            } else if f.flags & (pclntab::FLAG_TOP_FRAME | pclntab::FLAG_SP_WRITE) != 0 {
                SwitchKind::Stops
            } else {
                return None;
            };
            Some(StackSwitch {
                at: (f.start, f.end),
                kind,
            })
        })
        .collect();
    let sp_deltas = if elf.section_by_name(".debug_frame").is_some() {
        Vec::new()
    } else {
        functions.iter().flat_map(|f| table.sp_deltas(f)).collect()
    };
    let tables = |switches| GoTables {
        switches,
        sp_deltas,
        error: None,
    };
    let Some(asmcgocall) = function(ASMCGOCALL) else {
        return tables(switches);
    };
    let Some(calls) = crate::eh_return::calls(code, asmcgocall, A::return_sites) else {
        return tables(switches);
    };
    // The C function is called through the landing pad where there is one, else directly
    // (an indirect call).
    let through = function(LANDING_PAD).map(|(start, _)| start);
    let sites: Vec<u64> = calls
        .iter()
        .filter(|&&(_, target)| target == through)
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
    tables(switches)
}

/// Where a Go executable's runtime keeps what a walk needs, read from the runtime's own code
/// (so it is right however the executable was linked, and found without a symbol table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeLayout {
    /// The offset of the running goroutine's `g` from the thread pointer: on amd64 from
    /// `runtime.asmcgocall`'s first load of `g` (`mov %fs:OFFSET, reg`), on arm64 from
    /// `runtime.save_g`'s store (`mrs xN, tpidr_el0`, `mov x27, #OFFSET`, `str x28, [xN,
    /// x27]`).
    pub g_offset: Option<i64>,
    /// The offsets of `g.m` and `m.curg` (the goroutine an M runs), from
    /// `runtime.cgocallback`'s code: on amd64 its load of `g`'s M (`mov %fs:G, %rbx; mov
    /// M(%rbx), %rbx`) and its switch to the M's goroutine (`mov CURG(%rbx), %rsi; mov %rsi,
    /// %fs:G`); on arm64 its load of the M (`ldr xN, [x28, #M]`, x28 being `g`) and its switch
    /// (`ldr x28, [xN, #CURG]; bl runtime.save_g`).
    pub m_curg: Option<(u64, u64)>,
}

/// The [`RuntimeLayout`] of `elf`; `None` if it is not a Go program of amd64 or arm64. A part
/// whose code is not as expected is `None`.
pub fn runtime_layout(elf: &object::File<'_>) -> Option<RuntimeLayout> {
    let table = pclntab::of_elf(elf)?.ok()?;
    let segments = crate::return_sites::executable_segments(elf);
    let code_of = |name: &str| {
        let f = asm_function(&table, name)?;
        Some((f.start, crate::elf::code_bytes(&segments, f.start, f.end)?))
    };
    let callback = code_of("runtime.cgocallback");
    Some(match elf.architecture() {
        object::Architecture::X86_64 => RuntimeLayout {
            g_offset: code_of(ASMCGOCALL).and_then(|(_, code)| g_load_x86_64(code)),
            m_curg: callback.and_then(|(_, code)| m_curg_x86_64(code)),
        },
        object::Architecture::Aarch64 => {
            let save_g = code_of("runtime.save_g");
            RuntimeLayout {
                g_offset: save_g.and_then(|(_, code)| g_store_aarch64(code)),
                m_curg: callback
                    .zip(save_g)
                    .and_then(|((at, code), (save_g, _))| m_curg_aarch64(code, at, save_g)),
            }
        }
        _ => return None,
    })
}

/// The hand-written function `name` of `table`.
fn asm_function<'a>(table: &pclntab::Pclntab<'a>, name: &str) -> Option<pclntab::GoFunction<'a>> {
    table
        .functions()
        .find(|f| f.name == name && f.flags & pclntab::FLAG_ASM != 0)
}

/// [`RuntimeLayout::m_curg`] on amd64, in `runtime.cgocallback`'s `code`.
fn m_curg_x86_64(code: &[u8]) -> Option<(u64, u64)> {
    let [g0, g1, g2, g3] = i32::try_from(g_load_x86_64(code)?).ok()?.to_le_bytes();
    // mov %fs:G, %rbx; mov disp8(%rbx), %rbx
    let g_m = code.windows(13).find_map(|w| match *w {
        [0x64, 0x48, 0x8b, 0x1c, 0x25, a, b, c, d, 0x48, 0x8b, 0x5b, m]
            if [a, b, c, d] == [g0, g1, g2, g3] =>
        {
            Some(u64::from(m))
        }
        _ => None,
    })?;
    // mov disp(%rbx), %rsi; mov %rsi, %fs:G
    let stores_g = |w: &[u8]| w == [0x64, 0x48, 0x89, 0x34, 0x25, g0, g1, g2, g3];
    let m_curg = code.windows(16).find_map(|w| match *w {
        [0x48, 0x8b, 0xb3, a, b, c, d, ref rest @ ..] if stores_g(rest) => {
            u32::try_from(i32::from_le_bytes([a, b, c, d]))
                .ok()
                .map(u64::from)
        }
        [0x48, 0x8b, 0x73, m, ref rest @ ..] if rest.get(..9).is_some_and(stores_g) => {
            Some(u64::from(m))
        }
        _ => None,
    })?;
    Some((g_m, m_curg))
}

/// The little-endian 32-bit words of `code`.
fn words(code: &[u8]) -> Vec<u32> {
    code.chunks_exact(4)
        .filter_map(|c| c.try_into().ok().map(u32::from_le_bytes))
        .collect()
}

/// [`RuntimeLayout::m_curg`] on arm64, in `runtime.cgocallback`'s `code` at `start`, `runtime.save_g`
/// being at `save_g`.
fn m_curg_aarch64(code: &[u8], start: u64, save_g: u64) -> Option<(u64, u64)> {
    let words = words(code);
    // ldr xT, [xN, #imm] (unsigned offset, scaled by 8): (T, N, imm).
    let ldr = |w: u32| {
        (w & 0xffc0_0000 == 0xf940_0000)
            .then(|| (w & 0x1f, (w >> 5) & 0x1f, u64::from((w >> 10) & 0xfff) << 3))
    };
    // bl to: the target of a `bl` at word `i`.
    let bl_to = |i: usize, w: u32| {
        (w & 0xfc00_0000 == 0x9400_0000).then(|| {
            let at = start.wrapping_add((i as u64).wrapping_mul(4));
            at.wrapping_add_signed(i64::from(((w << 6) as i32) >> 6).wrapping_mul(4))
        })
    };
    let (m, m_curg) = words.windows(2).enumerate().find_map(|(i, w)| {
        let [load, call] = *w else {
            return None;
        };
        let (t, n, imm) = ldr(load)?;
        let switches = t == 28 && n != 28 && imm != 0;
        (switches && bl_to(i.wrapping_add(1), call) == Some(save_g)).then_some((n, imm))
    })?;
    let g_m = words.iter().find_map(|&w| {
        let (t, n, imm) = ldr(w)?;
        (t == m && n == 28).then_some(imm)
    })?;
    Some((g_m, m_curg))
}

/// The displacement of the first `mov %fs:disp32, r64` in `code` (`64 REX.W 8b ModRM SIB
/// disp32`, ModRM naming a SIB byte without base or index).
fn g_load_x86_64(code: &[u8]) -> Option<i64> {
    code.windows(9).find_map(|w| match *w {
        [0x64, rex, 0x8b, modrm, 0x25, a, b, c, d]
            if rex & 0xf8 == 0x48 && modrm & 0xc7 == 0x04 =>
        {
            Some(i64::from(i32::from_le_bytes([a, b, c, d])))
        }
        _ => None,
    })
}

/// The offset in `mrs xN, tpidr_el0; movz x27, #imm{, lsl #s}; str x28, [xN, x27]` in `code`.
fn g_store_aarch64(code: &[u8]) -> Option<i64> {
    words(code).windows(3).find_map(|w| {
        let [mrs, movz, str] = *w else {
            return None;
        };
        let tp = mrs & 0x1f;
        let found = mrs & !0x1f == 0xd53b_d040
            // movz x27, #imm16, lsl #(16 * hw)
            && movz & 0xff80_001f == 0xd280_001b
            // str x28, [xN, x27] (register offset, no shift)
            && str == 0xf83b_681c | (tp << 5);
        let shift = ((movz >> 21) & 3).wrapping_mul(16);
        found.then(|| i64::from((movz >> 5) & 0xffff).wrapping_shl(shift))
    })
}

/// The CFA expression at a return site of `kind` in a frame laid out as `frame` says, the CFA
/// `cfa` bytes above the stack pointer before the switch (Go's assembler gives `asmcgocall` a
/// frame-pointer prologue).
pub(crate) fn cfa_expression(
    kind: SwitchKind,
    frame: &CgoFrame,
    cfa: i64,
) -> Option<unwind_core::expr::Expr> {
    use unwind_core::expr::Op::{Add, Const, Deref, Reg, Sub};
    let sp = frame.sp;
    match kind {
        // [[sp + g] + 8] - [sp + depth] + cfa: `g`'s second word is its stack's top.
        SwitchKind::FromGoroutine => unwind_core::expr::Expr::new(&[
            Reg(sp),
            Const(frame.g),
            Add,
            Deref,
            Const(8),
            Add,
            Deref,
            Reg(sp),
            Const(frame.depth),
            Add,
            Deref,
            Sub,
            Const(cfa),
            Add,
        ])
        .ok(),
        SwitchKind::OnSystemStack => unwind_core::expr::Expr::new(&[
            Reg(sp),
            Const(frame.saved_sp),
            Add,
            Deref,
            Const(cfa),
            Add,
        ])
        .ok(),
        SwitchKind::Stops | SwitchKind::Preempted => None,
    }
}
