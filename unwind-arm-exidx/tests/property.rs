//! Property test: random EHABI instruction sequences, run by a reference interpreter on a
//! concrete register file and stack exactly as the EHABI describes, must give the same caller
//! registers (PC, LR, SP, r7, r11, r12) as the translated rule applied by
//! `Arm::step_rule`; entries the translation drops must be exactly those whose
//! result the rules cannot express, for the stated reason.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use unwind_arm_exidx::{rows, ExidxDropReason, ExidxSections};
use unwind_core::arm::Regs;
use unwind_core::{Arch, Arm};
use unwind_core::{ModuleRulesBuilder, RuleTableBuilder, StackImage};

/// One unwinding instruction, as the generator chooses it.
#[derive(Clone, Debug)]
enum Op {
    /// `vsp += 4 * (x + 1)`, x < 64.
    VspAdd(u8),
    /// `vsp -= 4 * (x + 1)`, x < 64.
    VspSub(u8),
    /// Pop under the mask r4..r15 (bit 0 = r4), not empty.
    PopMask(u16),
    /// `vsp = r[n]`.
    SetVsp(u8),
    /// Pop r4..r[4 + n], then r14 if set.
    PopRange(u8, bool),
    /// Pop r0..r3 under the mask (not empty).
    PopLow(u8),
    /// `vsp += 0x204 + 4 * uleb`.
    VspLarge(u32),
    /// A VFP pop: opcode and operand byte (if it has one).
    Vfp(u8, u8),
    /// An iWMMXt pop: opcode and operand byte (if it has one).
    Wmmx(u8, u8),
    /// Pop the PAC pseudo-register.
    Pac,
    /// PAC modifier (no effect).
    PacModifier,
    Finish,
    Refuse,
}

fn encode(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::new();
    for op in ops {
        match *op {
            Op::VspAdd(x) => out.push(x),
            Op::VspSub(x) => out.push(0x40 | x),
            Op::PopMask(m) => out.extend([0x80 | (m >> 8) as u8, m as u8]),
            Op::SetVsp(n) => out.push(0x90 | n),
            Op::PopRange(n, lr) => out.push(0xa0 | if lr { 8 } else { 0 } | n),
            Op::PopLow(m) => out.extend([0xb1, m]),
            Op::VspLarge(mut v) => {
                out.push(0xb2);
                loop {
                    let b = (v & 0x7f) as u8;
                    v >>= 7;
                    if v == 0 {
                        out.push(b);
                        break;
                    }
                    out.push(b | 0x80);
                }
            }
            Op::Vfp(o, x) | Op::Wmmx(o, x) => {
                out.push(o);
                if matches!(o, 0xb3 | 0xc6 | 0xc7 | 0xc8 | 0xc9) {
                    out.push(x);
                }
            }
            Op::Pac => out.push(0xb4),
            Op::PacModifier => out.push(0xb5),
            Op::Finish => out.push(0xb0),
            Op::Refuse => out.extend([0x80, 0x00]),
        }
    }
    out
}

fn op() -> impl Strategy<Value = Op> {
    let mask = (1u16..0x1000, 0u8..8).prop_map(|(m, keep_sp)| {
        // r13 is bit 9; keep it in one mask of eight.
        let m = if keep_sp == 0 { m } else { m & !(1 << 9) };
        Op::PopMask(if m == 0 { 1 << 10 } else { m })
    });
    let set_vsp = prop_oneof![
        3 => prop::sample::select(vec![7u8, 11, 12, 14]),
        1 => prop::sample::select(vec![0u8, 1, 2, 3, 4, 5, 6, 8, 9, 10]),
    ]
    .prop_map(Op::SetVsp);
    let vfp = prop_oneof![
        (Just(0xb3u8), any::<u8>()),
        (0xb8u8..=0xbf, Just(0)),
        (Just(0xc8u8), 0u8..0x10),
        (Just(0xc9u8), any::<u8>()),
        (0xd0u8..=0xd7, Just(0)),
    ]
    .prop_map(|(o, x)| Op::Vfp(o, x));
    let wmmx = prop_oneof![
        (0xc0u8..=0xc5, Just(0)),
        (Just(0xc6u8), any::<u8>()),
        (Just(0xc7u8), 1u8..0x10),
    ]
    .prop_map(|(o, x)| Op::Wmmx(o, x));
    prop_oneof![
        12 => (0u8..64).prop_map(Op::VspAdd),
        4 => (0u8..64).prop_map(Op::VspSub),
        16 => mask,
        8 => set_vsp,
        12 => (0u8..8, any::<bool>()).prop_map(|(n, lr)| Op::PopRange(n, lr)),
        4 => (1u8..16).prop_map(Op::PopLow),
        4 => (0u32..256).prop_map(Op::VspLarge),
        4 => vfp,
        2 => wmmx,
        2 => Just(Op::Pac),
        2 => Just(Op::PacModifier),
        3 => Just(Op::Finish),
        1 => Just(Op::Refuse),
    ]
}

/// The reference interpreter: executes `bytes` on the concrete registers `r` (r13 is vsp) and
/// the stack, as the EHABI specifies (and libgcc's `__gnu_unwind_execute` does). Returns why it
/// stopped if it could not unwind.
fn interpret(bytes: &[u8], r: &mut [u32; 16], stack: &Stack) -> Result<(), &'static str> {
    const SP: usize = 13;
    let mut i = 0;
    let mut set_pc = false;
    let byte = |i: &mut usize| -> Result<u8, &'static str> {
        let b = *bytes.get(*i).ok_or("truncated")?;
        *i += 1;
        Ok(b)
    };
    // Pops the core registers of `mask` (bit n = r[n]): lowest register from the lowest
    // address; r13 (if popped) becomes vsp only after the whole pop.
    let pop = |r: &mut [u32; 16], mask: u32| -> Result<(), &'static str> {
        let mut ptr = r[SP];
        for (n, reg) in r.iter_mut().enumerate() {
            if mask & (1 << n) != 0 {
                *reg = stack.read(ptr).ok_or("read failed")?;
                ptr = ptr.wrapping_add(4);
            }
        }
        if mask & (1 << SP) == 0 {
            r[SP] = ptr;
        }
        Ok(())
    };
    while i < bytes.len() {
        let op = byte(&mut i)?;
        let vsp = &mut r[SP];
        match op {
            0x00..=0x3f => *vsp = vsp.wrapping_add((u32::from(op & 0x3f) << 2) + 4),
            0x40..=0x7f => *vsp = vsp.wrapping_sub((u32::from(op & 0x3f) << 2) + 4),
            0x80..=0x8f => {
                let mask = (u32::from(op & 0x0f) << 12) | (u32::from(byte(&mut i)?) << 4);
                if mask == 0 {
                    return Err("refuse");
                }
                pop(r, mask)?;
                if mask & (1 << 15) != 0 {
                    set_pc = true;
                }
            }
            0x9d | 0x9f => return Err("reserved"),
            0x90..=0x9f => r[SP] = r[usize::from(op & 0x0f)],
            0xa0..=0xaf => {
                let mut mask = 0;
                for n in 4..=4 + u32::from(op & 7) {
                    mask |= 1 << n;
                }
                if op & 8 != 0 {
                    mask |= 1 << 14;
                }
                pop(r, mask)?;
            }
            0xb0 => break,
            0xb1 => {
                let m = byte(&mut i)?;
                if m == 0 || m & 0xf0 != 0 {
                    return Err("spare");
                }
                pop(r, u32::from(m))?;
            }
            0xb2 => {
                let mut v = 0u32;
                let mut shift = 0;
                loop {
                    let b = byte(&mut i)?;
                    v |= u32::from(b & 0x7f) << shift;
                    shift += 7;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
                *vsp = vsp.wrapping_add(0x204 + (v << 2));
            }
            0xb3 => {
                let x = byte(&mut i)?;
                r[SP] = r[SP].wrapping_add(8 * (u32::from(x & 0x0f) + 1) + 4);
            }
            0xb4 => *vsp = vsp.wrapping_add(4),
            0xb5 => {}
            0xb8..=0xbf => *vsp = vsp.wrapping_add(8 * (u32::from(op & 7) + 1) + 4),
            0xc0..=0xc5 => *vsp = vsp.wrapping_add(8 * (u32::from(op & 7) + 1)),
            0xc6 | 0xc8 | 0xc9 => {
                let x = byte(&mut i)?;
                r[SP] = r[SP].wrapping_add(8 * (u32::from(x & 0x0f) + 1));
            }
            0xc7 => {
                let m = byte(&mut i)?;
                if m == 0 || m & 0xf0 != 0 {
                    return Err("spare");
                }
                r[SP] = r[SP].wrapping_add(4 * m.count_ones());
            }
            0xd0..=0xd7 => *vsp = vsp.wrapping_add(8 * (u32::from(op & 7) + 1)),
            _ => return Err("spare"),
        }
    }
    if !set_pc {
        r[15] = r[14];
    }
    Ok(())
}

/// The drop the translation must report: the first instruction whose effect the rules cannot
/// express (a CFA that is not a tracked register plus an offset, or a saved register whose slot
/// is not at a fixed offset from that CFA).
fn expected_drop(ops: &[Op]) -> Option<ExidxDropReason> {
    // r7, r11, r12, r13, r14, r15 in a mask with bit 0 = r4.
    const TRACKED: u16 = (1 << 3) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11);
    let mut tracked_popped = false;
    let mut sp_popped = false;
    for op in ops {
        match op {
            Op::Finish => break,
            Op::Refuse => return Some(ExidxDropReason::RefuseToUnwind),
            Op::PacModifier => continue,
            _ => {}
        }
        // After a pop of SP, vsp is a value loaded from the stack: nothing that reads or moves
        // it can be expressed.
        if sp_popped {
            return Some(ExidxDropReason::SpPopped);
        }
        match *op {
            Op::PopMask(m) => {
                tracked_popped |= m & TRACKED != 0;
                sp_popped = m & (1 << 9) != 0;
            }
            Op::PopRange(n, lr) => tracked_popped |= lr || n >= 3,
            Op::SetVsp(n) => {
                if ![7, 11, 12, 14].contains(&n) {
                    return Some(ExidxDropReason::VspFromUntrackedRegister);
                }
                // Registers saved so far are relative to the old vsp.
                if tracked_popped {
                    return Some(ExidxDropReason::BaseSwitchAfterSave);
                }
            }
            _ => {}
        }
    }
    None
}

const STACK_BASE: u32 = 0x4000_0000;
const STACK_LEN: usize = 128 * 1024;

struct Stack {
    bytes: Vec<u8>,
}

impl Stack {
    fn read(&self, addr: u32) -> Option<u32> {
        let o = addr.checked_sub(STACK_BASE)? as usize;
        let b = self.bytes.get(o..o + 4)?;
        Some(u32::from_le_bytes(b.try_into().unwrap()))
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
    /// A 4-aligned address in the middle half of the stack.
    fn in_stack(&mut self) -> u32 {
        (STACK_BASE + (STACK_LEN as u32 / 4) + (self.next() % (STACK_LEN as u32 / 2))) & !3
    }
}

const FUNC: u64 = 0x8000;
const EXIDX: u64 = 0x1_0000;
const EXTAB: u64 = 0x2_0000;

fn p31(target: u64, place: u64) -> u32 {
    (target.wrapping_sub(place) as u32) & 0x7fff_ffff
}

/// Places `bytes` in one entry of an index (with a `CANTUNWIND` sentinel after it) in one of
/// four encodings: inline, compact index 0 (in the table), compact index 1/2, generic.
fn sections(bytes: &[u8], encoding: u8) -> (Vec<u8>, Vec<u8>) {
    let pad = |mut v: Vec<u8>, head: usize| {
        while v.len() < head || !(v.len() - head).is_multiple_of(4) {
            v.push(0xb0);
        }
        v
    };
    let msb_words =
        |v: &[u8]| -> Vec<u8> { v.chunks(4).flat_map(|w| [w[3], w[2], w[1], w[0]]).collect() };
    let short = bytes.len() <= 3;
    let (second, extab): (u32, Vec<u8>) = match (encoding, short) {
        (0, true) => {
            let b = pad(bytes.to_vec(), 3);
            (
                0x8000_0000 | u32::from_be_bytes([0, b[0], b[1], b[2]]),
                Vec::new(),
            )
        }
        (1, true) => {
            let b = pad(bytes.to_vec(), 3);
            (0, msb_words(&[&[0x80], &b[..]].concat()))
        }
        (3, _) => {
            let b = pad(bytes.to_vec(), 3);
            let count = ((b.len() - 3) / 4) as u8;
            let mut tab = p31(0x7000, EXTAB).to_le_bytes().to_vec();
            tab.extend(msb_words(&[&[count], &b[..]].concat()));
            // LSDA-like trailing data.
            tab.extend([0xff; 8]);
            (0, tab)
        }
        (e, _) => {
            let b = pad(bytes.to_vec(), 2);
            let count = ((b.len() - 2) / 4) as u8;
            let index = if e == 1 { 0x82 } else { 0x81 };
            (0, msb_words(&[&[index, count], &b[..]].concat()))
        }
    };
    let second = if extab.is_empty() {
        second
    } else {
        p31(EXTAB, EXIDX + 4)
    };
    let mut exidx = Vec::new();
    exidx.extend(p31(FUNC, EXIDX).to_le_bytes());
    exidx.extend(second.to_le_bytes());
    exidx.extend(p31(FUNC + 0x100, EXIDX + 8).to_le_bytes());
    exidx.extend(1u32.to_le_bytes());
    (exidx, extab)
}

#[derive(Default, Debug)]
struct Counts {
    cases: u64,
    unwound: u64,
    dropped: BTreeMap<&'static str, u64>,
    encodings: [u64; 4],
    instructions: u64,
}

#[test]
fn translation_matches_reference_interpreter() {
    let cases = 4000;
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let counts = RefCell::new(Counts::default());
    let strategy = (vec(op(), 0..12), any::<u64>(), 0u8..4);
    runner
        .run(&strategy, |(ops, seed, encoding)| {
            let bytes = encode(&ops);
            let (exidx, extab) = sections(&bytes, encoding);
            let s = ExidxSections {
                exidx: &exidx,
                exidx_svma: EXIDX,
                extab: Some(&extab),
                extab_svma: EXTAB,
                text_end: None,
                functions: &[],
            };
            let (rows, stats) = rows(&s).unwrap();
            prop_assert_eq!(stats.entries, 2);
            prop_assert_eq!(stats.cant_unwind, 1);
            let mut c = counts.borrow_mut();
            c.cases += 1;
            c.encodings[usize::from(encoding)] += 1;
            c.instructions += ops.len() as u64;

            let expected = expected_drop(&ops);
            if let Some(reason) = expected {
                prop_assert!(rows.is_empty(), "expected a drop for {:?}", reason);
                prop_assert_eq!(stats.dropped_for(reason), 1, "{:?}", stats);
                *c.dropped.entry(reason.name()).or_default() += 1;
                return Ok(());
            }
            prop_assert_eq!(stats.dropped_total(), 0, "unexpected drop: {:?}", stats);
            prop_assert_eq!(rows.len(), 1);
            let (start, end, rule) = rows[0];
            prop_assert_eq!((start, end), (FUNC, FUNC + 0x100));

            // Concrete state: random stack contents and registers; the registers vsp may be
            // set from point into the stack.
            let mut rng = Rng(seed | 1);
            let stack = Stack {
                bytes: (0..STACK_LEN / 4)
                    .flat_map(|_| rng.next().to_le_bytes())
                    .collect(),
            };
            let mut r = [0u32; 16];
            for v in r.iter_mut() {
                *v = rng.next();
            }
            for n in [7, 11, 12, 14] {
                r[n] = rng.in_stack();
            }
            r[13] = STACK_BASE + STACK_LEN as u32 / 2;
            let callee = Regs {
                pc: r[15],
                lr: r[14],
                sp: r[13],
                r12: r[12],
                r11: r[11],
                r7: r[7],
            };
            let mut caller = r;
            prop_assert_eq!(interpret(&bytes, &mut caller, &stack), Ok(()));

            let mut b = ModuleRulesBuilder::new();
            b.push(start, end, rule).unwrap();
            let mut t = RuleTableBuilder::new(NonZeroU32::new(1).unwrap());
            t.add(
                FUNC,
                FUNC + 0x100,
                0,
                "f".into(),
                Arc::new(b.build().unwrap()),
            );
            let table = t.build().unwrap();
            let found = table.lookup(FUNC + 0x10).unwrap();
            prop_assert_eq!(found.rule, rule);
            let image = StackImage::new(u64::from(STACK_BASE), &stack.bytes);
            let step = Arm::step_rule(&table, found.module, &found.rule, &callee, true, &image);
            // The caller made a call: its LR is its return address (`Regs::lr`), whatever
            // the interpreter restored into LR.
            let want = Regs {
                pc: caller[15],
                lr: caller[15],
                sp: caller[13],
                r12: caller[12],
                r11: caller[11],
                r7: caller[7],
            };
            prop_assert_eq!(
                step.map(|s| s.caller),
                Ok(want),
                "bytes {:02x?} rule {:?}",
                bytes,
                rule
            );
            c.unwound += 1;
            Ok(())
        })
        .unwrap();
    let c = counts.into_inner();
    println!("{c:#?}");
    assert_eq!(c.cases, u64::from(cases));
    // Both outcomes are exercised in earnest.
    assert!(c.unwound >= u64::from(cases) / 3, "{c:?}");
    for reason in [
        "base-switch-after-save",
        "vsp-from-untracked-register",
        "sp-popped",
    ] {
        assert!(
            c.dropped.get(reason).copied().unwrap_or(0) > 20,
            "{reason}: {c:?}"
        );
    }
}
