use super::*;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;

use breakpad_symbols::{FrameWalker, SimpleModule};
use unwind_core::expr::{Expr, Op};
use unwind_core::table::ModuleRulesBuilder;
use unwind_core::{arm, x86_64};
use unwind_core::{Found, RuleTable, RuleTableBuilder};

fn stack_cfi_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("STACK CFI"))
        .collect()
}

#[test]
fn ids_as_dump_syms_writes_them() {
    // libc.so.6 of Debian's glibc 2.36 (dump_syms: EC61AC938E5A39B16F9FBD350E3169A50).
    let build_id = [
        0x93, 0xac, 0x61, 0xec, 0x5a, 0x8e, 0xb1, 0x39, 0x6f, 0x9f, 0xbd, 0x35, 0x0e, 0x31, 0x69,
        0xa5, 0x58, 0x52, 0x8a, 0x40,
    ];
    let id = breakpad_id(&build_id);
    assert_eq!(id.debug_id, "EC61AC938E5A39B16F9FBD350E3169A50");
    assert_eq!(id.code_id, "93AC61EC5A8EB1396F9FBD350E3169A558528A40");
    let short = breakpad_id(&[1, 2, 3, 4, 5]);
    assert_eq!(short.debug_id, "040302010005000000000000000000000");
    assert_eq!(short.code_id, "0102030405");
    let text: Vec<u8> = (0..40u8).collect();
    let id = breakpad_id_from_text(&text);
    // Bytes 0..16 ^ 16..32 ^ 32..40 (the last block is short).
    let mut g = [0u8; 16];
    for (i, b) in text.iter().enumerate() {
        g[i % 16] ^= b;
    }
    assert_eq!(id.debug_id, guid_id(&g));
    assert_eq!(id.debug_id.len(), 33);
    assert!(id.code_id.is_empty());
    assert_eq!(
        store_path(Path::new("/s"), "libc.so.6", &breakpad_id(&build_id)),
        Path::new("/s/libc.so.6/EC61AC938E5A39B16F9FBD350E3169A50/libc.so.6.sym")
    );
}

fn x86_rule(cfa: x86_64::CfaRule, ra: x86_64::RegRule, fp: x86_64::RegRule) -> x86_64::Rule {
    x86_64::Rule {
        cfa,
        ra,
        fp,
        signal_frame: false,
    }
}

/// A function: entry, `push rbp`, `mov rbp, rsp`, `pop rbp` (rbp unchanged again), `ret`;
/// then `_start` (return address undefined), contiguous with it.
fn x86_function() -> ModuleRules<x86_64::Rule> {
    use x86_64::{CfaRule as C, RegRule as R};
    let mut b = ModuleRulesBuilder::new();
    let rows = [
        (0x1010, 0x1011, x86_64::Rule::default()),
        (
            0x1011,
            0x1014,
            x86_rule(C::SpOffset(16), R::Offset(-8), R::Offset(-16)),
        ),
        (
            0x1014,
            0x1020,
            x86_rule(C::FpOffset(16), R::Offset(-8), R::Offset(-16)),
        ),
        (
            0x1020,
            0x1021,
            x86_rule(C::SpOffset(8), R::Offset(-8), R::Same),
        ),
        (
            0x1021,
            0x1030,
            x86_rule(C::SpOffset(8), R::Undefined, R::Same),
        ),
        (0x1040, 0x1050, x86_64::Rule::default()),
    ];
    for (s, e, r) in rows {
        b.push(s, e, r).unwrap();
    }
    b.build().unwrap()
}

#[test]
fn x86_records_name_only_changes() {
    let mut out = String::new();
    let stats = write_stack_cfi::<crate::X86_64>(&x86_function(), 0x1000, &mut out);
    assert_eq!(
        stack_cfi_lines(&out),
        [
            "STACK CFI INIT 10 11 .cfa: $rsp 8 + .ra: .cfa -8 + ^",
            "STACK CFI 11 .cfa: $rsp 16 + $rbp: .cfa -16 + ^",
            "STACK CFI 14 .cfa: $rbp 16 +",
            "STACK CFI 20 .cfa: $rsp 8 + $rbp: $rbp",
            "STACK CFI INIT 21 f .cfa: $rsp 8 +",
            "STACK CFI INIT 40 10 .cfa: $rsp 8 + .ra: .cfa -8 + ^",
        ]
    );
    assert_eq!(stats.extents, 6);
    assert_eq!(stats.extents_exported, 6);
    assert_eq!((stats.init_records, stats.delta_records), (3, 3));
    assert_eq!(stats.end_of_stack_extents, 1);
    assert_eq!(stats.skipped_total(), 0);
}

#[test]
fn x86_signal_frame_and_unwritable_rules() {
    use x86_64::{CfaRule as C, RegRule as R};
    let mut b = ModuleRulesBuilder::new();
    let e = |b: &mut ModuleRulesBuilder<x86_64::Rule>, ops: &[Op]| {
        b.add_expr(Expr::new(ops).unwrap()).unwrap()
    };
    // __restore_rt: CFA = *(rsp + 160); rip at rsp + 168, rbp at rsp + 120.
    let cfa = e(&mut b, &[Op::Reg(1), Op::Const(160), Op::Add, Op::Deref]);
    let rip = e(&mut b, &[Op::Reg(1), Op::Const(168), Op::Add]);
    let rbp = e(&mut b, &[Op::Reg(1), Op::Const(120), Op::Add]);
    let restore_rt = x86_64::Rule {
        cfa: C::Expr(cfa),
        ra: R::Expr(rip),
        fp: R::Expr(rbp),
        signal_frame: true,
    };
    b.push(0x2000, 0x2009, restore_rt).unwrap();
    // No Breakpad form: a comparison of rsp and rbp.
    let cmp = e(&mut b, &[Op::Reg(1), Op::Reg(2), Op::Lt]);
    b.push(
        0x3000,
        0x3010,
        x86_rule(C::Expr(cmp), R::Offset(-8), R::Same),
    )
    .unwrap();
    b.push(
        0x3010,
        0x3020,
        x86_rule(C::SpOffset(8), R::Expr(cmp), R::Same),
    )
    .unwrap();
    b.push(
        0x3020,
        0x3030,
        x86_rule(C::SpOffset(8), R::Offset(-8), R::Expr(cmp)),
    )
    .unwrap();
    b.push(0x3030, 0x3040, x86_rule(C::SpOffset(8), R::Same, R::Same))
        .unwrap();
    let rules = b.build().unwrap();
    let mut out = String::new();
    let stats = write_stack_cfi::<crate::X86_64>(&rules, 0, &mut out);
    assert_eq!(
        stack_cfi_lines(&out),
        [
            "STACK CFI INIT 2000 9 .cfa: $rsp 160 + ^ .ra: $rsp 168 + ^ $rbp: $rsp 120 + ^",
            "STACK CFI INIT 3020 10 .cfa: $rsp 8 + .ra: .cfa -8 + ^ $rbp: .undef",
        ]
    );
    assert_eq!(stats.signal_frame_extents, 1);
    assert_eq!(stats.registers_undefined, 1);
    assert_eq!(stats.skipped_for(SkipReason::CfaExpression), 1);
    assert_eq!(stats.skipped_for(SkipReason::ReturnAddressExpression), 1);
    assert_eq!(stats.skipped_for(SkipReason::ReturnAddressRule), 1);
    assert_eq!(
        stats.skipped_bytes[SkipReason::CfaExpression as usize],
        0x10
    );
    assert_eq!(
        stats.skip_reason_at(0x3015),
        Some(SkipReason::ReturnAddressExpression)
    );
    assert_eq!(stats.skip_reason_at(0x3025), None);
    assert!(stats.to_string().contains("cfa-expression: 1 (16 bytes)"));
}

#[test]
fn plt_rules_are_expanded() {
    use crate::plt::{PltKind, PltSection};
    let plt = [PltSection {
        svma: 0x1000,
        size: 0x30,
        kind: PltKind::Lazy,
    }];
    let (rules, _) = crate::rules_from_sections::<crate::X86_64>(
        &crate::CfiSections {
            plt: &plt,
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let mut out = String::new();
    let stats = write_stack_cfi::<crate::X86_64>(&rules, 0, &mut out);
    assert_eq!(
        stack_cfi_lines(&out),
        [
            "STACK CFI INIT 1000 30 .cfa: $rsp 16 + .ra: .cfa -8 + ^",
            "STACK CFI 1006 .cfa: $rsp 24 +",
            "STACK CFI 1010 .cfa: $rsp 8 +",
            "STACK CFI 101b .cfa: $rsp 16 +",
            "STACK CFI 1020 .cfa: $rsp 8 +",
            "STACK CFI 102b .cfa: $rsp 16 +",
        ]
    );
    assert_eq!(stats.expanded_extents, 1);
    assert_eq!(stats.expanded_rows, 4);
}

fn arm_rule() -> arm::Rule {
    arm::Rule::default()
}

#[test]
fn arm_records() {
    use arm::{CfaRule as C, Reg, RegRule as R, Source};
    let pushed = arm::Rule {
        cfa: C::RegOffset(Reg::Sp, 8),
        pc: R::Offset(-4),
        lr: R::Offset(-4),
        r7: R::Offset(-8),
        ..arm_rule()
    };
    let exidx = arm::Rule {
        source: Source::Exidx,
        sp: R::Offset(-8),
        ..pushed
    };
    let mut b = ModuleRulesBuilder::new();
    b.push(0x400, 0x402, arm_rule()).unwrap();
    b.push(0x402, 0x404, pushed).unwrap();
    b.push(
        0x404,
        0x410,
        arm::Rule {
            cfa: C::RegOffset(Reg::R7, 8),
            ..pushed
        },
    )
    .unwrap();
    b.push(
        0x410,
        0x412,
        arm::Rule {
            lr: R::Same,
            r7: R::Same,
            pc: R::Register(Reg::Lr),
            ..arm_rule()
        },
    )
    .unwrap();
    b.push(0x412, 0x420, exidx).unwrap();
    b.push(0x420, 0x440, arm::Rule::cant_unwind()).unwrap();
    b.push(0x440, 0x460, exidx).unwrap();
    let rules = b.build().unwrap();
    let mut out = String::new();
    let stats = write_stack_cfi::<crate::Arm>(&rules, 0, &mut out);
    assert_eq!(
        stack_cfi_lines(&out),
        [
            "STACK CFI INIT 400 12 .cfa: sp 0 + .ra: lr",
            "STACK CFI 402 .cfa: sp 8 + .ra: .cfa -4 + ^ lr: .cfa -4 + ^ r7: .cfa -8 + ^",
            "STACK CFI 404 .cfa: r7 8 +",
            "STACK CFI 410 .cfa: sp 0 + .ra: lr lr: lr r7: r7",
            "STACK CFI INIT 412 e .cfa: sp 8 + .ra: .cfa -4 + ^ sp: .cfa -8 + ^ \
             lr: .cfa -4 + ^ r7: .cfa -8 + ^",
            "STACK CFI INIT 440 20 .cfa: sp 8 + .ra: .cfa -4 + ^ sp: .cfa -8 + ^ \
             lr: .cfa -4 + ^ r7: .cfa -8 + ^",
        ]
    );
    assert_eq!(stats.skipped_for(SkipReason::CantUnwind), 1);
    assert_eq!(stats.skip_reason_at(0x430), Some(SkipReason::CantUnwind));
}

/// A Breakpad walker over our registers and a memory where every word is a function of its
/// address.
struct Walker {
    pc: u64,
    regs: HashMap<&'static str, u64>,
    word: u8,
    caller: HashMap<String, u64>,
    cfa: Option<u64>,
    ra: Option<u64>,
}

fn word_at(a: u64, word: u8) -> u64 {
    let v = a.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 3;
    if word == 4 {
        v & 0xffff_ffff
    } else {
        v
    }
}

fn canonical(name: &str) -> &str {
    match name {
        "r13" => "sp",
        "r14" => "lr",
        "r15" => "pc",
        other => other,
    }
}

impl FrameWalker for Walker {
    fn get_instruction(&self) -> u64 {
        self.pc
    }
    fn has_grand_callee(&self) -> bool {
        false
    }
    fn get_grand_callee_parameter_size(&self) -> u32 {
        0
    }
    fn get_register_at_address(&self, address: u64) -> Option<u64> {
        Some(word_at(address, self.word))
    }
    fn get_callee_register(&self, name: &str) -> Option<u64> {
        self.regs.get(canonical(name)).copied()
    }
    fn set_caller_register(&mut self, name: &str, val: u64) -> Option<()> {
        self.caller.insert(canonical(name).to_string(), val);
        Some(())
    }
    fn clear_caller_register(&mut self, name: &str) {
        self.caller.remove(canonical(name));
    }
    fn set_cfa(&mut self, val: u64) -> Option<()> {
        self.cfa = Some(val);
        Some(())
    }
    fn set_ra(&mut self, val: u64) -> Option<()> {
        self.ra = Some(val);
        Some(())
    }
}

/// Memory for our unwinder with the same words as [`word_at`].
struct Words(u8);

impl unwind_core::Memory for Words {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        Some(word_at(addr, self.0))
    }
    fn read_u32(&self, addr: u64) -> Option<u32> {
        Some(word_at(addr, self.0) as u32)
    }
}

fn table<R: unwind_core::table::TableRule>(rules: ModuleRules<R>) -> RuleTable<R> {
    let mut b = RuleTableBuilder::new(NonZeroU32::new(1).unwrap());
    b.add(0, u64::MAX, 0, "m".into(), Arc::new(rules));
    b.build().unwrap()
}

fn symbols(text: &str) -> breakpad_symbols::SymbolFile {
    let text = format!("MODULE Linux x86_64 000000000000000000000000000000000 m\n{text}");
    breakpad_symbols::SymbolFile::from_bytes(text.as_bytes()).unwrap()
}

/// Every x86_64 rule written means to breakpad-symbols' walker what it means to our unwinder:
/// the same caller SP (the CFA), PC and rbp at every address.
#[test]
fn x86_export_means_the_same_to_breakpad() {
    let mut b = ModuleRulesBuilder::new();
    for (s, e, r) in x86_function().extents() {
        b.push(s, e, r).unwrap();
    }
    let restore_rt = {
        use x86_64::{CfaRule as C, RegRule as R};
        let mut e = |ops: &[Op]| b.add_expr(Expr::new(ops).unwrap()).unwrap();
        let cfa = e(&[Op::Reg(1), Op::Const(160), Op::Add, Op::Deref]);
        let rip = e(&[Op::Reg(1), Op::Const(168), Op::Add]);
        let rbp = e(&[Op::Dup, Op::Const(-64), Op::Add, Op::Swap, Op::Drop]);
        x86_64::Rule {
            cfa: C::Expr(cfa),
            ra: R::Expr(rip),
            fp: R::ValExpr(rbp),
            signal_frame: true,
        }
    };
    b.push(0x2000, 0x2010, restore_rt).unwrap();
    let plt = b.add_expr(x86_64::plt_cfa_expression()).unwrap();
    b.push(
        0x3000,
        0x3040,
        x86_rule(
            x86_64::CfaRule::Expr(plt),
            x86_64::RegRule::Offset(-8),
            x86_64::RegRule::Same,
        ),
    )
    .unwrap();
    let rules = b.build().unwrap();
    let mut text = String::new();
    let stats = write_stack_cfi::<crate::X86_64>(&rules, 0, &mut text);
    assert_eq!(stats.skipped_total(), 0);
    let sym = symbols(&text);
    let t = table(rules);
    let mut checked = 0;
    for pc in (0x1000..0x1060).chain(0x2000..0x2010).chain(0x3000..0x3040) {
        let regs = x86_64::Regs {
            pc,
            sp: 0x7fff_0000,
            fp: 0x7fff_0100,
        };
        let ours = t.lookup(pc).map(|Found { module: m, rule }| {
            <unwind_core::X86_64 as unwind_core::Arch>::step_rule(
                &t,
                m,
                &rule,
                &regs,
                true,
                &Words(8),
            )
        });
        let mut w = Walker {
            pc,
            regs: HashMap::from([("rip", pc), ("rsp", regs.sp), ("rbp", regs.fp)]),
            word: 8,
            caller: HashMap::new(),
            cfa: None,
            ra: None,
        };
        let theirs = sym.walk_frame(&SimpleModule::default(), &mut w);
        match ours {
            None => assert!(theirs.is_none(), "{pc:#x}: only Breakpad has a rule"),
            Some(Err(_)) => assert!(theirs.is_none(), "{pc:#x}: Breakpad finds a caller"),
            Some(Ok(step)) => {
                assert!(theirs.is_some(), "{pc:#x}: Breakpad finds no caller");
                assert_eq!(w.cfa, Some(step.caller.sp), "{pc:#x} cfa");
                assert_eq!(w.ra, Some(step.caller.pc), "{pc:#x} ra");
                let fp = w.caller.get("rbp").copied().unwrap_or(regs.fp);
                assert_eq!(fp, step.caller.fp, "{pc:#x} rbp");
                checked += 1;
            }
        }
    }
    assert!(checked > 100);
}

/// The same for 32-bit ARM rules: caller SP (an explicit `sp` rule, else the CFA), PC, and LR,
/// r7, r11 where we restore them.
#[test]
fn arm_export_means_the_same_to_breakpad() {
    use arm::{CfaRule as C, Reg, RegRule as R, Source};
    let pushed = arm::Rule {
        cfa: C::RegOffset(Reg::Sp, 16),
        pc: R::Offset(-4),
        lr: R::Offset(-4),
        r7: R::Offset(-8),
        r11: R::Offset(-12),
        ..arm_rule()
    };
    let mut b = ModuleRulesBuilder::new();
    let rows = [
        (0x400, 0x402, arm_rule()),
        (0x402, 0x404, pushed),
        (
            0x404,
            0x410,
            arm::Rule {
                cfa: C::RegOffset(Reg::R7, 8),
                ..pushed
            },
        ),
        (
            0x410,
            0x412,
            arm::Rule {
                r12: R::ValOffset(4),
                ..arm_rule()
            },
        ),
        (
            0x412,
            0x420,
            arm::Rule {
                source: Source::Exidx,
                sp: R::Offset(-16),
                ..pushed
            },
        ),
        (0x420, 0x430, arm::Rule::cant_unwind()),
        (
            0x430,
            0x440,
            arm::Rule {
                cfa: C::RegOffset(Reg::R11, 4),
                pc: R::Register(Reg::R12),
                lr: R::Undefined,
                ..arm_rule()
            },
        ),
    ];
    for (s, e, r) in rows {
        b.push(s, e, r).unwrap();
    }
    let rules = b.build().unwrap();
    let mut text = String::new();
    write_stack_cfi::<crate::Arm>(&rules, 0, &mut text);
    let sym = symbols(&text);
    let t = table(rules);
    for pc in 0x400u32..0x440 {
        let regs = arm::Regs {
            pc,
            lr: 0x1234,
            sp: 0x7000_0000,
            r12: 0x7000_0040,
            r11: 0x7000_0080,
            r7: 0x7000_00c0,
        };
        let ours = t.lookup(u64::from(pc)).map(|Found { module: m, rule }| {
            <unwind_core::Arm as unwind_core::Arch>::step_rule(&t, m, &rule, &regs, true, &Words(4))
        });
        let mut w = Walker {
            pc: u64::from(pc),
            regs: HashMap::from([
                ("pc", u64::from(pc)),
                ("lr", u64::from(regs.lr)),
                ("sp", u64::from(regs.sp)),
                ("r12", u64::from(regs.r12)),
                ("r11", u64::from(regs.r11)),
                ("r7", u64::from(regs.r7)),
            ]),
            word: 4,
            caller: HashMap::new(),
            cfa: None,
            ra: None,
        };
        let theirs = sym.walk_frame(&SimpleModule::default(), &mut w);
        match ours {
            None | Some(Err(_)) => assert!(theirs.is_none(), "{pc:#x}"),
            Some(Ok(step)) => {
                assert!(theirs.is_some(), "{pc:#x}: Breakpad finds no caller");
                let c = step.caller;
                let sp = w.caller.get("sp").copied().or(w.cfa);
                assert_eq!(sp, Some(u64::from(c.sp)), "{pc:#x} sp");
                assert_eq!(w.ra, Some(u64::from(c.pc)), "{pc:#x} ra");
                // The caller made a call: its LR is its return address (`arm::Regs::lr`),
                // whatever the rule restores into LR.
                assert_eq!(c.lr, c.pc, "{pc:#x} lr");
                // Restored registers: ours where the walker has a value (r12 "unchanged" is
                // left to the walker, which does not carry it into the caller).
                for (name, value) in [("r7", c.r7), ("r11", c.r11), ("r12", c.r12)] {
                    let callee = w.regs.get(name).copied();
                    let theirs = w.caller.get(name).copied().or(match name {
                        "r7" | "r11" => callee,
                        _ => None,
                    });
                    if let Some(v) = theirs {
                        assert_eq!(v, u64::from(value), "{pc:#x} {name}");
                    } else {
                        // Unknown to the walker: ours is "unchanged" or undefined (0).
                        let ok = Some(u64::from(value)) == callee || value == 0;
                        assert!(ok, "{pc:#x} {name} dropped");
                    }
                }
            }
        }
    }
}
