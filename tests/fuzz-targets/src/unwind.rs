//! The unwind loop over a rule table, registers and a stack image the fuzzer chooses, on
//! any architecture: up to three modules with random rules and expressions (some indices
//! out of range), return sites and stack scanning or not, stack words that look like return
//! addresses and stack addresses, and a buffer of any length.
//!
//! What must hold: the walk ends with a reason within its buffer; a second walk with the warm
//! cache (and without the trust array) finds the same frames; frame 0 is the PC; every frame
//! after it returns into a module's code, unless a signal frame's rule gave it (an exact
//! interrupted PC); only a table built to scan gives scanned frames. Every read goes through
//! the stack image, which AddressSanitizer watches.

use std::num::NonZeroU32;
use std::sync::Arc;

use arbitrary::{Result, Unstructured};
use unwind_core::table::{ModuleRulesBuilder, RuleTableBuilder};
use unwind_core::{unwind, Cache, ReturnSites, StackImage, Trust};

use crate::gen::{pick, Gen};

const STACK_BASE: u64 = 0x7f00_0000;
/// Module `i` is loaded at `MODULE * (i + 1)`, its code `CODE` bytes from file address
/// `FILE_START`.
const MODULE: u64 = 0x1000_0000;
const CODE: u64 = 0x1_0000;
const FILE_START: u64 = 0x1000;

/// Input: bytes for [`arbitrary::Unstructured`]: the architecture, then the table, the stack and
/// the registers.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    // Bit 0: 32-bit ARM (as when this byte was a `bool`); else bit 1: aarch64; else x86_64.
    let _ = match u.arbitrary::<u8>() {
        Ok(b) if b & 1 != 0 => walk::<unwind_dwarf::Arm>(&mut u),
        Ok(b) if b & 2 != 0 => walk::<unwind_dwarf::Aarch64>(&mut u),
        Ok(_) => walk::<unwind_dwarf::X86_64>(&mut u),
        Err(e) => Err(e),
    };
}

fn walk<A: Gen>(u: &mut Unstructured<'_>) -> Result<()> {
    let scan = u.arbitrary::<bool>()?;
    let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
    b.scan_stack(scan);
    let mut code = Vec::new();
    let regs_tracked = A::TRACKED - 1;
    for m in 0..u.int_in_range(1..=3u64)? {
        let start = MODULE * (m + 1);
        let bias = start - FILE_START;
        let mut rules = ModuleRulesBuilder::new();
        let exprs = u.int_in_range(0..=4u16)?;
        for _ in 0..exprs {
            let _ = rules.add_expr(crate::gen::expr(u, regs_tracked)?);
        }
        for _ in 0..u.int_in_range(0..=24usize)? {
            let s = FILE_START + u64::from(u.int_in_range(0..=0xfff0u16)?);
            let len = u64::from(u.int_in_range(1..=0x800u16)?);
            let _ = rules.push(s, (s + len).min(FILE_START + CODE), A::rule(u, exprs)?);
        }
        let Ok(rules) = rules.build() else { continue };
        let module = b.add(start, start + CODE, bias, format!("m{m}"), Arc::new(rules));
        if scan && u.arbitrary()? {
            let mut sites = Vec::new();
            for _ in 0..u.int_in_range(0..=16usize)? {
                let site = FILE_START + u64::from(u.int_in_range(0..=0xffffu16)?);
                let callee = match u.arbitrary()? {
                    true => Some(FILE_START + u64::from(u.int_in_range(0..=0xffffu16)?)),
                    false => None,
                };
                sites.push((site, callee));
            }
            let starts = sites.iter().filter_map(|s| s.1).collect();
            module.return_sites = ReturnSites::new(FILE_START, sites, starts)
                .ok()
                .map(Arc::new);
        }
        code.extend([start, start + 0x100, start + CODE / 2, start + CODE - 8]);
    }
    let Ok(table) = b.build() else { return Ok(()) };
    let word = u64::from(A::WORD_BYTES);
    let words = u.int_in_range(0..=512u64)?;
    let sps = [
        STACK_BASE,
        STACK_BASE + words * word / 2,
        STACK_BASE + words * word,
    ];
    let mut stack = Vec::new();
    for _ in 0..words {
        let w = match u.int_in_range(0..=2u8)? {
            0 => pick(u, &code)?,
            1 => pick(u, &sps)?,
            _ => u.arbitrary()?,
        };
        stack.extend_from_slice(&w.to_le_bytes()[..usize::from(A::WORD_BYTES)]);
    }
    let regs = A::regs(u, &code, &sps)?;
    let n = u.int_in_range(0..=64usize)?;
    // A pointer mask as aarch64 processes with pointer authentication have (0 elsewhere).
    let mask = match A::WORD_BYTES == 8 && u.arbitrary()? {
        true => 0x007f_0000_0000_0000,
        false => 0,
    };
    let image = StackImage::new(STACK_BASE, &stack).with_pointer_mask(mask);
    let mut cache = Box::new(Cache::<A>::new());
    let (mut pcs, mut trust) = (vec![0u64; n], vec![Trust::Context; n]);
    let r = unwind(&table, &mut cache, regs, &image, &mut pcs, Some(&mut trust));
    assert!(r.frames <= n, "{r:?}");
    let mut again = vec![0u64; n];
    let warm = unwind(&table, &mut cache, regs, &image, &mut again, None);
    assert_eq!(r, warm, "the warm cache walks differently");
    assert_eq!(pcs[..r.frames], again[..r.frames]);
    if r.frames > 0 {
        assert_eq!((pcs[0], trust[0]), (A::pc(&regs), Trust::Context));
    }
    let at = |pc: u64, exact: bool| A::lookup_address(&A::scanned_caller(&regs, pc, 0), exact);
    for i in 1..r.frames {
        assert!(
            scan || trust[i] != Trust::Scan,
            "a scanned frame without scanning"
        );
        let after_signal = [true, false].into_iter().any(|exact| {
            table
                .lookup(at(pcs[i - 1], exact))
                .is_some_and(|f| A::signal_frame(&f.rule))
        });
        // A return address may also be the first instruction of a signal trampoline that
        // nothing before it describes (the loop looks its rule up at the address itself).
        let trampoline = table
            .lookup(at(pcs[i], true))
            .is_some_and(|f| A::signal_frame(&f.rule));
        if !after_signal && !trampoline {
            assert!(
                table.module_for(at(pcs[i], false)).is_some(),
                "frame {i} ({:#x}) in no module: {:x?} {r:?}",
                pcs[i],
                &pcs[..r.frames]
            );
        }
    }
    Ok(())
}
