//! Hostile stacks: valid call chains through realistic rules (SP-based frames, frame-pointer
//! frames, the x86_64 PLT expression, a signal trampoline that reads the interrupted registers
//! from the stack, ARM frames without rules left to the fallbacks), then corrupted the ways
//! real stacks get corrupted or misread: return addresses overwritten (with stack addresses,
//! with addresses into other functions, with garbage), frame records pointing back down the
//! stack (cycles), saved words swapped, the copy cut short, the stack pointer at the edges of
//! the range, and rules with huge or negative CFA offsets and expressions that read outside it.
//! On aarch64 the return addresses are signed (a pointer authentication code in their upper
//! bits) where the rules say so, and the signal trampoline has no rule before its first
//! instruction (as qemu-user's).
//!
//! Whatever the corruption, every walk:
//! - reads only inside the stack range it was given, and every read inside it succeeds (the
//!   memory is watched on both sides);
//! - ends within its frame buffer with a stop reason, and a second walk with the warm cache
//!   finds the same frames;
//! - writes no frame outside the known module, except the PC a signal frame restores (an
//!   exact interrupted PC, which is a frame wherever it is);
//! - walks the uncorrupted chain completely.

use std::cell::Cell;
use std::num::NonZeroU32;
use std::sync::Arc;

use proptest::prelude::*;
use unwind_core::expr::{Expr, Op};
use unwind_core::{
    aarch64, arm, unwind, x86_64, Aarch64, Arch, Arm, Cache, Memory, ModuleRulesBuilder, RuleTable,
    RuleTableBuilder, StackImage, StopReason, Trust, X86_64,
};

/// The stack range: `[STACK, STACK + STACK_BYTES)`.
const STACK: u64 = 0x7000_0000;
const STACK_BYTES: u64 = 0x4000;
/// Where the outermost frame's stack pointer is (the chains grow down from there).
const TOP: u64 = STACK + 0x3f00;
/// The module's code: `[CODE, CODE + 0x1_0000)`, loaded at its file addresses.
const CODE: u64 = 0x40_0000;

/// A stack image whose every read is checked against the range it stands for: reads inside
/// must succeed and reads that reach outside must fail. A violation is kept (the unwinder
/// must not panic, so neither does this).
struct Watched<'a> {
    image: StackImage<'a>,
    lo: u64,
    hi: u64,
    violation: Cell<Option<(u64, u64, bool)>>,
    reads: Cell<u64>,
    /// The last range `contains` admitted.
    admitted: Cell<Option<(u64, u64)>>,
}

impl<'a> Watched<'a> {
    fn new(base: u64, bytes: &'a [u8], pointer_mask: u64) -> Self {
        Watched {
            image: StackImage::new(base, bytes).with_pointer_mask(pointer_mask),
            lo: base,
            hi: base + bytes.len() as u64,
            violation: Cell::new(None),
            reads: Cell::new(0),
            admitted: Cell::new(None),
        }
    }

    fn check<T>(&self, addr: u64, size: u64, got: Option<T>) -> Option<T> {
        self.reads.set(self.reads.get() + 1);
        let inside = addr >= self.lo && addr.checked_add(size).is_some_and(|e| e <= self.hi);
        if inside != got.is_some() {
            self.violation.set(Some((addr, size, got.is_some())));
        }
        got
    }
}

impl Memory for Watched<'_> {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        self.check(addr, 8, self.image.read_u64(addr))
    }
    // The range test and the unchecked reads of the image, each checked: a range admitted must
    // be inside, and a word read unchecked must be inside an admitted range (the last one:
    // the unwind loop reads a frame's words right after admitting them).
    fn contains(&self, from: u64, to: u64) -> bool {
        let admitted = self.image.contains(from, to);
        let inside = self.lo <= from && to <= self.hi;
        if admitted && !inside {
            self.violation
                .set(Some((from, to.wrapping_sub(from), true)));
        }
        self.admitted.set(admitted.then_some((from, to)));
        admitted
    }
    unsafe fn load_u64(&self, addr: u64) -> u64 {
        self.reads.set(self.reads.get() + 1);
        let within = self
            .admitted
            .get()
            .is_some_and(|(from, to)| from <= addr && addr.checked_add(8).is_some_and(|e| e <= to));
        if !within || addr < self.lo || addr.checked_add(8).is_none_or(|e| e > self.hi) {
            self.violation.set(Some((addr, 8, true)));
            return 0;
        }
        // SAFETY: checked just above: inside a range the image admitted.
        unsafe { self.image.load_u64(addr) }
    }
    fn read_u32(&self, addr: u64) -> Option<u32> {
        self.check(addr, 4, self.image.read_u32(addr))
    }
    fn pointer_mask(&self) -> u64 {
        self.image.pointer_mask()
    }
}

/// What corrupts a valid stack.
#[derive(Clone, Debug)]
enum Corruption {
    /// Word `index` (of the used part) replaced by a value of kind `kind` with `bits`.
    Overwrite { index: usize, kind: u8, bits: u64 },
    /// Two words swapped.
    Swap { a: usize, b: usize },
    /// The copy ends `words` words above the innermost frame (the rest is not readable).
    CutShort { words: usize },
    /// The stack pointer moved by `delta` bytes, or to an edge of the range.
    MoveSp { delta: i16, edge: u8 },
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        4 => (0..512usize, 0..6u8, any::<u64>())
            .prop_map(|(index, kind, bits)| Corruption::Overwrite { index, kind, bits }),
        1 => (0..512usize, 0..512usize).prop_map(|(a, b)| Corruption::Swap { a, b }),
        1 => (0..64usize).prop_map(|words| Corruption::CutShort { words }),
        1 => (any::<i16>(), 0..6u8).prop_map(|(delta, edge)| Corruption::MoveSp { delta, edge }),
    ]
}

/// A value of an overwriting word: a stack address (above or below), the start or middle of a
/// function, an address just outside the code, 0, or any value.
fn hostile_word(kind: u8, bits: u64, sp: u64, functions: &[u64]) -> u64 {
    match kind {
        0 => STACK + bits % STACK_BYTES,
        1 => sp.wrapping_sub(bits % 0x100),
        2 => functions[(bits % functions.len() as u64) as usize] + (bits >> 32) % 0x100,
        3 => [CODE - 1, CODE + 0x1_0000, 1, u64::MAX][(bits % 4) as usize],
        4 => 0,
        _ => bits,
    }
}

/// An architecture's test chain.
trait Chain: Arch {
    /// The table: the module's functions and their rules.
    fn table() -> RuleTable<Self::Rule>;
    /// Function start addresses (for overwriting words with them).
    fn functions() -> Vec<u64>;
    /// A valid stack for the chain of `kinds` (innermost first, each picking a function):
    /// the registers at the innermost frame, the stack words, and the frames a walk must find.
    fn build(kinds: &[u8]) -> (Self::Regs, Vec<u64>, Vec<u64>);
    /// Registers with SP replaced.
    fn with_sp(regs: Self::Regs, sp: u64) -> Self::Regs;
    /// The start of the signal trampoline, if the chain has one.
    const SIGNAL: Option<u64>;
    /// The process's pointer mask ([`Memory::pointer_mask`]): the stack's return addresses
    /// are signed where it is not 0.
    const POINTER_MASK: u64 = 0;
}

/// Writes `value` at `addr` in `words` (a stack at STACK of words of `size` bytes).
fn put(words: &mut [u64], size: u64, addr: u64, value: u64) {
    words[((addr - STACK) / size) as usize] = value;
}

fn table_of<R: unwind_core::table::TableRule>(
    rows: &[(u64, u64, R)],
    exprs: &[Expr],
) -> RuleTable<R> {
    let mut m = ModuleRulesBuilder::new();
    for e in exprs {
        m.add_expr(*e).unwrap();
    }
    for &(s, e, r) in rows {
        m.push(s, e, r).unwrap();
    }
    let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
    b.add(
        CODE,
        CODE + 0x1_0000,
        0,
        "m".into(),
        Arc::new(m.build().unwrap()),
    );
    b.build().unwrap()
}

impl Chain for X86_64 {
    const SIGNAL: Option<u64> = Some(CODE + 0x4000);

    /// - 0x1000: `CFA = rsp + 40` (locals), return address at CFA - 8;
    /// - 0x2000: `CFA = rbp + 16`, return address at CFA - 8, rbp at CFA - 16;
    /// - 0x3000: the PLT expression `rsp + 8 + ((rip & 15) >= 11) << 3`;
    /// - 0x4000: a signal trampoline (its rule from 0x3f00): `CFA = [rsp + 160]`, the interrupted rip at
    ///   `[rsp + 168]`, rbp at `[rsp + 120]` (as glibc's `__restore_rt`);
    /// - 0x5000: huge CFA offset; 0x6000: negative CFA offset (SP going backwards);
    /// - 0x7000: the end of the stack.
    fn table() -> RuleTable<x86_64::Rule> {
        use x86_64::{CfaRule, RegRule, Rule};
        let r = |cfa, ra, fp, signal_frame| Rule {
            cfa,
            ra,
            fp,
            signal_frame,
        };
        let plt = x86_64::plt_cfa_expression();
        let at_sp = |k: i64| Expr::new(&[Op::Reg(1), Op::Const(k), Op::Add]).unwrap();
        let deref_sp = Expr::new(&[Op::Reg(1), Op::Const(160), Op::Add, Op::Deref]).unwrap();
        let exprs = [plt, deref_sp, at_sp(168), at_sp(120)];
        table_of(
            &[
                (
                    CODE + 0x1000,
                    CODE + 0x1100,
                    r(
                        CfaRule::SpOffset(40),
                        RegRule::Offset(-8),
                        RegRule::Same,
                        false,
                    ),
                ),
                (
                    CODE + 0x2000,
                    CODE + 0x2100,
                    r(
                        CfaRule::FpOffset(16),
                        RegRule::Offset(-8),
                        RegRule::Offset(-16),
                        false,
                    ),
                ),
                (
                    CODE + 0x3000,
                    CODE + 0x3100,
                    r(CfaRule::Expr(0), RegRule::Offset(-8), RegRule::Same, false),
                ),
                // From before the trampoline's first instruction, as glibc's FDE starts: a
                // handler returns to that instruction, looked up one byte before it.
                (
                    CODE + 0x3f00,
                    CODE + 0x4100,
                    r(CfaRule::Expr(1), RegRule::Expr(2), RegRule::Expr(3), true),
                ),
                (
                    CODE + 0x5000,
                    CODE + 0x5100,
                    r(
                        CfaRule::SpOffset(i32::MAX),
                        RegRule::Offset(-8),
                        RegRule::Same,
                        false,
                    ),
                ),
                (
                    CODE + 0x6000,
                    CODE + 0x6100,
                    r(
                        CfaRule::SpOffset(-64),
                        RegRule::Offset(-8),
                        RegRule::Same,
                        false,
                    ),
                ),
                (
                    CODE + 0x7000,
                    CODE + 0x7100,
                    r(
                        CfaRule::SpOffset(8),
                        RegRule::Undefined,
                        RegRule::Same,
                        false,
                    ),
                ),
            ],
            &exprs,
        )
    }

    fn functions() -> Vec<u64> {
        (1..=7).map(|i| CODE + i * 0x1000).collect()
    }

    /// Frames of kinds 0 (SP-based), 1 (frame pointer), 2 (a PLT stub, innermost only) and 3
    /// (a signal frame); the outermost is the end of the stack.
    fn build(kinds: &[u8]) -> (x86_64::Regs, Vec<u64>, Vec<u64>) {
        let mut w = vec![0u64; (STACK_BYTES / 8) as usize];
        let mut sp = TOP;
        let mut fp = 0u64;
        let mut pc = CODE + 0x7010;
        // Built outermost first: each frame's PC is where its callee returns to.
        let mut frames = vec![pc];
        for (depth, &k) in kinds.iter().rev().enumerate() {
            let innermost = depth + 1 == kinds.len();
            let kind = match k % 4 {
                2 if !innermost => 0,
                k => k,
            };
            match kind {
                // The frame below returns to `pc`: its CFA is `sp`, the return address at
                // `sp - 8`.
                0 => {
                    put(&mut w, 8, sp - 8, pc);
                    sp -= 40;
                    pc = CODE + 0x1010 + u64::from(k) % 0x40;
                }
                1 => {
                    put(&mut w, 8, sp - 8, pc);
                    put(&mut w, 8, sp - 16, fp);
                    fp = sp - 16;
                    sp -= 48;
                    pc = CODE + 0x2010;
                }
                2 => {
                    put(&mut w, 8, sp - 8, pc);
                    sp -= 8;
                    pc = CODE + 0x3000;
                }
                _ => {
                    // The trampoline's frame: the kernel's ucontext at `sp`, holding the
                    // interrupted rip, rsp and rbp. The interrupted frame's return address
                    // is already on its stack; the interrupted PC is exact.
                    let interrupted_sp = sp;
                    sp -= 0x200;
                    put(&mut w, 8, sp + 160, interrupted_sp);
                    put(&mut w, 8, sp + 168, pc);
                    put(&mut w, 8, sp + 120, fp);
                    pc = CODE + 0x4000;
                }
            }
            frames.push(pc);
        }
        frames.reverse();
        (x86_64::Regs { pc, sp, fp }, w, frames)
    }

    fn with_sp(regs: x86_64::Regs, sp: u64) -> x86_64::Regs {
        x86_64::Regs { sp, ..regs }
    }
}

impl Chain for Arm {
    const SIGNAL: Option<u64> = None;

    /// - 0x1000 (Thumb): `push {r4, r7, lr}; sub sp, #20`: `CFA = sp + 32`, LR at CFA - 4,
    ///   r7 at CFA - 8;
    /// - 0x2000 (ARM): `push {r11, lr}; add r11, sp, #4`: `CFA = r11 + 4`, LR at CFA - 4, r11
    ///   at CFA - 8;
    /// - 0x3000: no rule (code built without tables: the fallbacks);
    /// - 0x5000: huge CFA offset; 0x6000: SP going backwards;
    /// - 0x7000: `EXIDX_CANTUNWIND`, where stacks end.
    fn table() -> RuleTable<arm::Rule> {
        use arm::{CfaRule, Reg, RegRule, Rule};
        let saved = |cfa, r7, r11| Rule {
            cfa,
            pc: RegRule::Offset(-4),
            lr: RegRule::Offset(-4),
            r7,
            r11,
            ..Rule::default()
        };
        table_of(
            &[
                (
                    CODE + 0x1000,
                    CODE + 0x1100,
                    saved(
                        CfaRule::RegOffset(Reg::Sp, 32),
                        RegRule::Offset(-8),
                        RegRule::Same,
                    ),
                ),
                (
                    CODE + 0x2000,
                    CODE + 0x2100,
                    saved(
                        CfaRule::RegOffset(Reg::R11, 4),
                        RegRule::Same,
                        RegRule::Offset(-8),
                    ),
                ),
                (
                    CODE + 0x5000,
                    CODE + 0x5100,
                    saved(
                        CfaRule::RegOffset(Reg::Sp, i32::MAX),
                        RegRule::Same,
                        RegRule::Same,
                    ),
                ),
                (
                    CODE + 0x6000,
                    CODE + 0x6100,
                    saved(
                        CfaRule::RegOffset(Reg::Sp, -64),
                        RegRule::Same,
                        RegRule::Same,
                    ),
                ),
                (CODE + 0x7000, CODE + 0x7100, Rule::cant_unwind()),
            ],
            &[],
        )
    }

    fn functions() -> Vec<u64> {
        (1..=7).map(|i| CODE + i * 0x1000).collect()
    }

    /// Frames of kinds 0 (Thumb, SP-based), 1 (ARM, r11 frame) and 2 (no rule: a leaf whose
    /// return address is still in LR, innermost only); the outermost can't be unwound.
    fn build(kinds: &[u8]) -> (arm::Regs, Vec<u64>, Vec<u64>) {
        let mut w = vec![0u64; (STACK_BYTES / 4) as usize];
        let mut sp = TOP;
        let (mut r7, mut r11, mut lr) = (0u64, 0u64, 0u64);
        let mut pc = CODE + 0x7011;
        let mut frames = vec![pc];
        for (depth, &k) in kinds.iter().rev().enumerate() {
            let innermost = depth + 1 == kinds.len();
            match (k % 3, innermost) {
                (2, true) => {
                    lr = pc;
                    pc = CODE + 0x3011;
                }
                (1, _) => {
                    put(&mut w, 4, sp - 4, pc);
                    put(&mut w, 4, sp - 8, r11);
                    r11 = sp - 4;
                    sp -= 8 + 16;
                    pc = CODE + 0x2010;
                }
                _ => {
                    put(&mut w, 4, sp - 4, pc);
                    put(&mut w, 4, sp - 8, r7);
                    r7 = sp - 8;
                    sp -= 32;
                    pc = CODE + 0x1011;
                }
            }
            frames.push(pc);
        }
        frames.reverse();
        let regs = arm::Regs {
            pc: pc as u32,
            lr: lr as u32,
            sp: sp as u32,
            r12: 0,
            r11: r11 as u32,
            r7: r7 as u32,
        };
        (regs, w, frames)
    }

    fn with_sp(regs: arm::Regs, sp: u64) -> arm::Regs {
        arm::Regs {
            sp: sp as u32,
            ..regs
        }
    }
}

/// The pointer authentication mask of the aarch64 chains (a 48-bit address space, the top byte
/// included, as Linux reports it).
const PAC_MASK: u64 = 0xff7f_0000_0000_0000;

/// `addr` signed: a made-up authentication code in the bits of [`PAC_MASK`].
fn signed(addr: u64, salt: usize) -> u64 {
    addr | ((0x5a ^ salt as u64) & 0x7f) << 48 | (salt as u64 & 0xff) << 56
}

impl Chain for Aarch64 {
    const SIGNAL: Option<u64> = Some(CODE + 0x4000);
    const POINTER_MASK: u64 = PAC_MASK;

    /// - 0x1000: `paciasp; stp x29, x30, [sp, #-48]!; mov x29, sp`: `CFA = sp + 48`, x29 at
    ///   CFA - 48, the signed x30 at CFA - 40;
    /// - 0x2000: `sub sp, sp, #64; stp x29, x30, [sp, #32]; add x29, sp, #32`: `CFA = x29 +
    ///   32`, x29 at CFA - 32, x30 at CFA - 24;
    /// - 0x3000: no rule (a leaf whose signed return address is still in x30);
    /// - 0x4000: the signal trampoline, whose rule starts at its first instruction: the kernel's
    ///   `rt_sigframe` at SP, the interrupted x29, x30, SP and PC at `sp + 544, 552, 560, 568`;
    /// - 0x5000: huge CFA offset; 0x6000: negative CFA offset (SP going backwards);
    /// - 0x7000: the end of the stack.
    fn table() -> RuleTable<aarch64::Rule> {
        use aarch64::{CfaRule, RegRule, Rule};
        let r = |cfa, fp, ra, ra_signed| Rule {
            cfa,
            ra,
            lr: ra,
            fp,
            ra_signed,
            signal_frame: false,
            from_instructions: false,
        };
        let at_sp = |k: i64| Expr::new(&[Op::Reg(1), Op::Const(k), Op::Add]).unwrap();
        let deref_sp = Expr::new(&[Op::Reg(1), Op::Const(560), Op::Add, Op::Deref]).unwrap();
        let exprs = [deref_sp, at_sp(568), at_sp(552), at_sp(544)];
        let trampoline = Rule {
            cfa: CfaRule::Expr(0),
            ra: RegRule::Expr(1),
            lr: RegRule::Expr(2),
            fp: RegRule::Expr(3),
            ra_signed: false,
            signal_frame: true,
            from_instructions: false,
        };
        table_of(
            &[
                (
                    CODE + 0x1000,
                    CODE + 0x1100,
                    r(
                        CfaRule::SpOffset(48),
                        RegRule::Offset(-48),
                        RegRule::Offset(-40),
                        true,
                    ),
                ),
                (
                    CODE + 0x2000,
                    CODE + 0x2100,
                    r(
                        CfaRule::FpOffset(32),
                        RegRule::Offset(-32),
                        RegRule::Offset(-24),
                        false,
                    ),
                ),
                (CODE + 0x4000, CODE + 0x4008, trampoline),
                (
                    CODE + 0x5000,
                    CODE + 0x5100,
                    r(
                        CfaRule::SpOffset(i32::MAX),
                        RegRule::Same,
                        RegRule::Offset(-8),
                        false,
                    ),
                ),
                (
                    CODE + 0x6000,
                    CODE + 0x6100,
                    r(
                        CfaRule::SpOffset(-64),
                        RegRule::Same,
                        RegRule::Offset(-8),
                        false,
                    ),
                ),
                (
                    CODE + 0x7000,
                    CODE + 0x7100,
                    r(
                        CfaRule::SpOffset(16),
                        RegRule::Same,
                        RegRule::Undefined,
                        false,
                    ),
                ),
            ],
            &exprs,
        )
    }

    fn functions() -> Vec<u64> {
        (1..=7).map(|i| CODE + i * 0x1000).collect()
    }

    /// Frames of kinds 0 (SP-based, signed), 1 (CFA on x29), 2 (no rule: a leaf whose signed
    /// return address is in x30, innermost only) and 3 (a signal frame); the outermost is the
    /// end of the stack.
    fn build(kinds: &[u8]) -> (aarch64::Regs, Vec<u64>, Vec<u64>) {
        let mut w = vec![0u64; (STACK_BYTES / 8) as usize];
        let mut sp = TOP;
        let (mut fp, mut lr) = (0u64, 0u64);
        let mut pc = CODE + 0x7010;
        let mut frames = vec![pc];
        for (depth, &k) in kinds.iter().rev().enumerate() {
            let innermost = depth + 1 == kinds.len();
            match (k % 4, innermost) {
                (2, true) => {
                    lr = signed(pc, depth);
                    pc = CODE + 0x3010;
                }
                (1, _) => {
                    put(&mut w, 8, sp - 32, fp);
                    put(&mut w, 8, sp - 24, pc);
                    fp = sp - 32;
                    sp -= 64;
                    pc = CODE + 0x2010;
                }
                (3, _) => {
                    // The kernel's frame: the interrupted x29, x30, SP and PC in its
                    // sigcontext; the handler returns to the trampoline's first instruction.
                    let interrupted_sp = sp;
                    sp -= 0x250;
                    put(&mut w, 8, sp + 544, fp);
                    put(&mut w, 8, sp + 552, lr);
                    put(&mut w, 8, sp + 560, interrupted_sp);
                    put(&mut w, 8, sp + 568, pc);
                    pc = CODE + 0x4000;
                }
                _ => {
                    put(&mut w, 8, sp - 48, fp);
                    put(&mut w, 8, sp - 40, signed(pc, depth));
                    fp = sp - 48;
                    sp -= 48;
                    pc = CODE + 0x1010 + u64::from(k) % 0x40 * 4;
                }
            }
            frames.push(pc);
        }
        frames.reverse();
        let regs = aarch64::Regs { pc, sp, fp, lr };
        (regs, w, frames)
    }

    fn with_sp(regs: aarch64::Regs, sp: u64) -> aarch64::Regs {
        aarch64::Regs { sp, ..regs }
    }
}

/// The chain of `kinds`, corrupted: the registers, the stack bytes, and the frames the
/// uncorrupted chain has.
fn corrupted<A: Chain>(kinds: &[u8], corruptions: &[Corruption]) -> (A::Regs, Vec<u8>, Vec<u64>) {
    let (mut regs, mut words, frames) = A::build(kinds);
    let size = u64::from(A::WORD_BYTES);
    let mut len = words.len();
    let sp0 = A::sp(&regs);
    let used = ((TOP - sp0) / size) as usize + 1;
    let first = ((sp0 - STACK) / size) as usize;
    for c in corruptions {
        match *c {
            Corruption::Overwrite { index, kind, bits } => {
                words[first + index % used] = hostile_word(kind, bits, sp0, &A::functions());
            }
            Corruption::Swap { a, b } => words.swap(first + a % used, first + b % used),
            Corruption::CutShort { words: k } => len = len.min(first + k),
            Corruption::MoveSp { delta, edge } => {
                let end = STACK + len as u64 * size;
                let sp = match edge {
                    0 => STACK,
                    1 => end.wrapping_sub(size),
                    2 => end,
                    3 => STACK.wrapping_sub(size),
                    _ => A::sp(&regs).wrapping_add_signed(i64::from(delta)),
                };
                regs = A::with_sp(regs, sp);
            }
        }
    }
    let bytes = words[..len]
        .iter()
        .flat_map(|w| w.to_le_bytes()[..size as usize].to_vec())
        .collect();
    (regs, bytes, frames)
}

/// Walks the corrupted chain, checks every invariant, and returns the stop reason.
fn walk_corrupted<A: Chain>(
    kinds: &[u8],
    corruptions: &[Corruption],
    n: usize,
) -> Result<StopReason, TestCaseError> {
    let table = A::table();
    let (regs, bytes, frames) = corrupted::<A>(kinds, corruptions);
    let mem = Watched::new(STACK, &bytes, A::POINTER_MASK);
    let mut cache = Cache::<A>::new();
    let (mut pcs, mut trust) = (vec![0u64; n], vec![Trust::Context; n]);
    let r = unwind(&table, &mut cache, regs, &mem, &mut pcs, Some(&mut trust));
    prop_assert_eq!(
        mem.violation.get(),
        None,
        "a read of the wrong side of the range"
    );
    prop_assert!(r.frames <= n);
    let mut again = vec![0u64; n];
    let warm = unwind(&table, &mut cache, regs, &mem, &mut again, None);
    prop_assert_eq!(r, warm);
    prop_assert_eq!(&pcs[..r.frames], &again[..r.frames]);
    let in_code = |pc: u64| (CODE..CODE + 0x1_0000).contains(&pc.wrapping_sub(1));
    for i in 1..r.frames {
        let after_signal = A::SIGNAL.is_some_and(|s| (s..s + 0x100).contains(&pcs[i - 1]));
        prop_assert!(
            after_signal || in_code(pcs[i]),
            "frame {} ({:#x}) outside the module: {:x?}",
            i,
            pcs[i],
            &pcs[..r.frames]
        );
    }
    if corruptions.is_empty() && n > frames.len() {
        prop_assert!(r.stop.is_complete(), "{:?}: {:x?}", r, &pcs[..r.frames]);
        prop_assert_eq!(&pcs[..r.frames], &frames[..]);
    }
    Ok(r.stop)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn x86_64_hostile_stacks(
        kinds in prop::collection::vec(0..4u8, 1..24),
        corruptions in prop::collection::vec(corruption(), 0..4),
        n in 0..48usize,
    ) {
        walk_corrupted::<X86_64>(&kinds, &corruptions, n)?;
    }

    #[test]
    fn arm_hostile_stacks(
        kinds in prop::collection::vec(0..3u8, 1..24),
        corruptions in prop::collection::vec(corruption(), 0..4),
        n in 0..48usize,
    ) {
        walk_corrupted::<Arm>(&kinds, &corruptions, n)?;
    }

    #[test]
    fn aarch64_hostile_stacks(
        kinds in prop::collection::vec(0..4u8, 1..24),
        corruptions in prop::collection::vec(corruption(), 0..4),
        n in 0..48usize,
    ) {
        walk_corrupted::<Aarch64>(&kinds, &corruptions, n)?;
    }
}

/// The corruptions cause every kind of stop they should: a test that never reached them would
/// prove nothing.
#[test]
fn corruptions_reach_every_expected_stop() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for (arch, expected) in [
        (
            "x86_64",
            &[
                "EndOfStack",
                "ReadFailed",
                "SpNotIncreasing",
                "OutsideModules",
            ][..],
        ),
        (
            "arm",
            &[
                "CantUnwind",
                "ReadFailed",
                "SpNotIncreasing",
                "OutsideModules",
                "NoRule",
            ][..],
        ),
        (
            "aarch64",
            &[
                "EndOfStack",
                "ReadFailed",
                "SpNotIncreasing",
                "OutsideModules",
                "NoRule",
            ][..],
        ),
    ] {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4000 {
            let kinds: Vec<u8> = (0..1 + next() % 12).map(|_| (next() % 4) as u8).collect();
            let corruptions: Vec<Corruption> = (0..1 + next() % 3)
                .map(|_| match next() % 4 {
                    0 | 1 => Corruption::Overwrite {
                        index: next() as usize,
                        kind: (next() % 6) as u8,
                        bits: next(),
                    },
                    2 => Corruption::CutShort {
                        words: (next() % 64) as usize,
                    },
                    _ => Corruption::MoveSp {
                        delta: next() as i16,
                        edge: (next() % 6) as u8,
                    },
                })
                .collect();
            let stop = match arch {
                "x86_64" => walk_corrupted::<X86_64>(&kinds, &corruptions, 64),
                "aarch64" => walk_corrupted::<Aarch64>(&kinds, &corruptions, 64),
                _ => walk_corrupted::<Arm>(&kinds, &corruptions, 64),
            };
            seen.insert(format!("{:?}", stop.unwrap_or_else(|e| panic!("{e}"))));
        }
        for e in expected {
            assert!(
                seen.contains(*e),
                "{arch}: never stopped with {e}: {seen:?}"
            );
        }
    }
}
