//! ARM's fallbacks for a frame no rule describes (the link register of a leaf, then the frame
//! record) accept a candidate only if it returns into a module's code; a rule's caller in no
//! module ends the walk unwritten. With scanning on, a 4-byte stack word that is a return site
//! is the last resort.

use std::sync::Arc;

use std::num::NonZeroU32;
use unwind_core::arm::{Regs, Rule};
use unwind_core::{
    unwind, Arm, Cache, ModuleRulesBuilder, ReturnSites, RuleTable, RuleTableBuilder, StackImage,
    StopReason, Trust,
};

/// The module's code: 0x10000..0x20000, with no rules at all (code built without unwind
/// tables), except `start` at 0x18000..0x18100, where the walk ends.
fn table() -> RuleTable<Rule> {
    let mut m = ModuleRulesBuilder::new();
    m.push(0x18000, 0x18100, Rule::cant_unwind()).unwrap();
    one_module(m)
}

const STACK: u32 = 0x7000_0000;

/// A table of one module, code at 0x10000..0x20000, with the rules of `m`.
fn one_module(m: ModuleRulesBuilder<Rule>) -> RuleTable<Rule> {
    let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
    b.add(
        0x10000,
        0x20000,
        0,
        "m".into(),
        Arc::new(m.build().unwrap()),
    );
    b.build().unwrap()
}

/// A stack of 64 words at STACK with a Thumb frame record at STACK + 0x40: the caller's r7
/// (0) and a return address `ra`.
fn stack(ra: u32) -> Vec<u8> {
    let mut w = [0u32; 64];
    w[0x40 / 4 + 1] = ra;
    w.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn walk(regs: Regs, bytes: &[u8]) -> (StopReason, Vec<u64>, Vec<Trust>) {
    let t = table();
    let mut cache = Cache::<Arm>::new();
    let mem = StackImage::new(u64::from(STACK), bytes);
    let mut pcs = [0u64; 8];
    let mut trust = [Trust::Context; 8];
    let r = unwind(&t, &mut cache, regs, &mem, &mut pcs, Some(&mut trust));
    (r.stop, pcs[..r.frames].to_vec(), trust[..r.frames].to_vec())
}

/// Frame 0 in Thumb code without a rule, r7 at the frame record.
fn regs(lr: u32) -> Regs {
    Regs {
        pc: 0x1_2001,
        lr,
        sp: STACK + 0x20,
        r7: STACK + 0x40,
        ..Regs::default()
    }
}

#[test]
fn link_register_in_code_is_the_leaf_caller() {
    let (stop, pcs, trust) = walk(regs(0x1_8011), &stack(0x1_3001));
    assert_eq!(pcs, [0x1_2001, 0x1_8011]);
    assert_eq!(trust, [Trust::Context, Trust::LinkRegister]);
    assert_eq!(stop, StopReason::CantUnwind);
}

#[test]
fn link_register_in_no_module_gives_way_to_the_frame_record() {
    // LR holds a stale value in no module: the frame record is used instead.
    let (_, pcs, trust) = walk(regs(0x4000_0001), &stack(0x1_8021));
    assert_eq!(pcs, [0x1_2001, 0x1_8021]);
    assert_eq!(trust, [Trust::Context, Trust::FramePointer]);
}

#[test]
fn no_candidate_in_code_is_no_rule() {
    // Neither LR nor the frame record returns into code (the record holds a stack address,
    // as a frame pointer that is an ordinary register makes it).
    let (stop, pcs, _) = walk(regs(0x4000_0001), &stack(STACK + 0x30));
    assert_eq!(pcs, [0x1_2001]);
    assert_eq!(stop, StopReason::NoRule);
}

/// With scanning on, the same frame (no rule, LR and the frame record in no module) finds its
/// caller in a 4-byte stack word that is a Thumb return site, Thumb bit and all; a word that is
/// an A32 site of a direct call to another function is passed over.
#[test]
fn scanning_finds_a_thumb_return_site_in_4_byte_words() {
    let rules = table().modules()[0].rules.clone();
    let sites = ReturnSites::new(
        0x10000,
        // A Thumb `bl` to the frame's function (0x12000), an A32 `bl` to another (0x15000).
        vec![(0x1_3005, Some(0x1_2000)), (0x1_4004, Some(0x1_5000))],
        vec![0x1_2000, 0x1_5000],
    )
    .unwrap();
    let mut b = RuleTableBuilder::new(NonZeroU32::new(1).unwrap());
    b.scan_stack(true);
    b.add(0x10000, 0x20000, 0, "armhf".into(), rules)
        .return_sites = Some(Arc::new(sites));
    let t = b.build().unwrap();
    let mut bytes = stack(STACK + 0x30);
    let mut put = |at: u32, v: u32| {
        let i = (at - STACK) as usize;
        bytes[i..i + 4].copy_from_slice(&v.to_le_bytes());
    };
    put(STACK + 0x24, 0x1_4004);
    put(STACK + 0x2c, 0x1_3005);
    let mut cache = Cache::<Arm>::new();
    let mem = StackImage::new(u64::from(STACK), &bytes);
    let (mut pcs, mut trust) = ([0u64; 2], [Trust::Context; 2]);
    let r = unwind(
        &t,
        &mut cache,
        regs(0x4000_0001),
        &mem,
        &mut pcs,
        Some(&mut trust),
    );
    assert_eq!(r.frames, 2, "{r:?}");
    assert_eq!(pcs, [0x1_2001, 0x1_3005]);
    assert_eq!(trust, [Trust::Context, Trust::Scan]);
}

/// A function whose calls never return need not save LR, and its rule at such a call says the
/// return address is still in LR with the frame allocated. At frame 1, LR holds the call's own
/// return address: the walk stops there rather than give the same function again, 32 bytes
/// higher, until the buffer is full.
#[test]
fn a_caller_without_its_return_address_is_not_repeated() {
    use unwind_core::arm::{CfaRule, Reg};
    let mut m = ModuleRulesBuilder::new();
    let die = Rule {
        cfa: CfaRule::RegOffset(Reg::Sp, 32),
        ..Rule::default()
    };
    m.push(0x14000, 0x14100, die).unwrap();
    m.push(0x15000, 0x15100, Rule::default()).unwrap();
    let t = one_module(m);
    let regs = Regs {
        pc: 0x15010,
        lr: 0x14024,
        sp: STACK,
        ..Regs::default()
    };
    let bytes = [0u8; 256];
    let mem = StackImage::new(u64::from(STACK), &bytes);
    let mut cache = Cache::<Arm>::new();
    let mut pcs = [0u64; 8];
    let r = unwind(&t, &mut cache, regs, &mem, &mut pcs, None);
    assert_eq!(&pcs[..r.frames], [0x15010, 0x14024], "{:?}", r.stop);
    assert_eq!(r.stop, StopReason::ReturnAddressLost);
}

/// A caller reached through its return address made a call, so its LR is that return address,
/// whatever a rule says of LR: here frame 0's rule restores LR from a slot of its own (holding
/// a code address) and frame 1's rule says the return address is still in LR. The walk stops
/// at frame 1 rather than write the slot's address as its caller, whether each rule is cached
/// or applied from the table.
#[test]
fn a_callers_lr_is_its_return_address() {
    use unwind_core::arm::{CfaRule, Reg, RegRule};
    // `f` (frame 0, at 0x14010): 16 bytes of frame, the return address (into `g`) at CFA - 4,
    // LR at CFA - 8.
    let f = Rule {
        cfa: CfaRule::RegOffset(Reg::Sp, 16),
        pc: RegRule::Offset(-4),
        lr: RegRule::Offset(-8),
        ..Rule::default()
    };
    // `g`: 32 bytes of frame, the return address not saved.
    let g = Rule {
        cfa: CfaRule::RegOffset(Reg::Sp, 32),
        ..Rule::default()
    };
    // Each rule again as one only the table applies (r12 saved is not a cached shape).
    let from_table = |r: Rule| Rule {
        r12: RegRule::Offset(-12),
        ..r
    };
    let mut words = [0u32; 64];
    words[2] = 0x1_6024; // LR's slot: a code address, not `g`'s caller
    words[3] = 0x1_5024; // the return address into `g`
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    for (f, g) in [
        (f, g),
        (from_table(f), g),
        (f, from_table(g)),
        (from_table(f), from_table(g)),
    ] {
        let mut m = ModuleRulesBuilder::new();
        m.push(0x14000, 0x14100, f).unwrap();
        m.push(0x15000, 0x15100, g).unwrap();
        let t = one_module(m);
        let regs = Regs {
            pc: 0x14010,
            lr: 0x1_4f00,
            sp: STACK,
            ..Regs::default()
        };
        let mem = StackImage::new(u64::from(STACK), &bytes);
        let mut cache = Cache::<Arm>::new();
        let mut pcs = [0u64; 8];
        let r = unwind(&t, &mut cache, regs, &mem, &mut pcs, None);
        assert_eq!(&pcs[..r.frames], [0x14010, 0x1_5024], "{f:?} {g:?}");
        assert_eq!(r.stop, StopReason::ReturnAddressLost, "{f:?} {g:?}");
    }
}
