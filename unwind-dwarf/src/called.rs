//! 32-bit ARM functions that neither a symbol nor an unwind entry describes, found by what
//! calls them or points at them.
//!
//! Debian's armhf libraries are stripped, and linkers merge runs of `EXIDX_CANTUNWIND` entries
//! into one, so a library's internal functions often have neither (libgcc_s's own unwinder,
//! libstdc++'s `read_encoded_value_with_base`). A profile would name their frames by address.
//! Their entries are still known:
//! - the target of a `bl`, read from the instruction stream as the processor runs it (Thumb,
//!   decoded one instruction after another from a known boundary), never at every alignment,
//!   which takes data and misaligned halves for calls;
//! - an address the code makes relative to the PC (`ldr Rd, [pc, #imm]`, `add Rd, pc`): a
//!   callback (glibc's for `dl_iterate_phdr`), or the A32 `memcpy` an ifunc resolver returns;
//! - a Thumb function pointer the dynamic linker relocates (`R_ARM_RELATIVE` with bit 0 set):
//!   constructors in `.init_array`, destructors, virtual functions.
//!
//! `unwind_arm_prologue::calls::thumb_references` decodes the instructions.
//!
//! A found entry is kept only where no symbol or FDE covers it (an `.ARM.exidx` entry's range,
//! which runs to the next entry, is a guess that it ends), and only 4-byte aligned, as GCC
//! aligns every function: a table of data read as `bl` gives targets at 2 modulo 4. Such a
//! function runs to the next known start. A function reached in none of these ways is taken
//! as part of the one before it, as with an unwind entry.

use object::{Object, ObjectSection, RelocationFlags, SectionKind};

use crate::functions::Function;

/// The functions of ARM ELF file `elf` found by calls, PC-relative addresses and function
/// pointers that its symbols and `exact` (sorted functions of its FDEs) leave out, sorted. `guessed` (sorted
/// functions of `.ARM.exidx`, each to the next entry) are starts, but a function found inside
/// one is kept: its range was a guess.
pub(crate) fn functions_between(
    elf: &object::File<'_>,
    exact: &[Function],
    guessed: &[Function],
) -> Vec<Function> {
    // Executable sections, but the PLT: its entries are calls' targets too, named apart.
    let code: Vec<(u64, &[u8])> = elf
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .filter(|s| {
            !s.name()
                .is_ok_and(|n| n.starts_with(".plt") || n == ".iplt")
        })
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .collect();
    let in_code = |a: u64| {
        code.iter()
            .any(|&(s, d)| s <= a && a < s.wrapping_add(d.len() as u64))
    };
    // Symbols' ranges: a sized symbol covers its code; one without a size marks a start.
    let symbols = crate::elf::function_ranges(elf);
    // The code sized symbols cover, as disjoint ranges (aliases and nested symbols merged).
    let mut by_symbols: Vec<(u64, u64)> = Vec::new();
    for &(s, e) in symbols.iter().filter(|(s, e)| s < e) {
        match by_symbols.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => by_symbols.push((s, e)),
        }
    }
    let starts_guessed = |a: u64| guessed.binary_search_by_key(&a, |f| f.start).is_ok();
    let covered = |a: u64| {
        let d = exact.partition_point(|f| f.start <= a);
        let s = by_symbols.partition_point(|r| r.0 <= a);
        starts_guessed(a)
            || d.checked_sub(1)
                .and_then(|d| exact.get(d))
                .is_some_and(|f| a < f.end)
            || s.checked_sub(1)
                .and_then(|s| by_symbols.get(s))
                .is_some_and(|r| a < r.1)
    };
    // Every place the instruction stream is known to restart: functions' and sections' edges.
    let mut boundaries: Vec<u64> = exact
        .iter()
        .chain(guessed)
        .flat_map(|f| [f.start, f.end])
        .chain(symbols.iter().flat_map(|&(s, e)| [s, e]))
        .chain(
            code.iter()
                .flat_map(|&(s, d)| [s, s.wrapping_add(d.len() as u64)]),
        )
        .collect();
    boundaries.sort_unstable();
    boundaries.dedup();
    let mut targets = Vec::new();
    for &(svma, data) in &code {
        let end = svma.wrapping_add(data.len() as u64);
        let from = boundaries.partition_point(|&b| b < svma);
        let after = boundaries.get(from..).unwrap_or_default();
        for (&b, &e) in after.iter().zip(after.iter().skip(1)) {
            let e = e.min(end);
            if b >= end {
                break;
            }
            let (Ok(i), Ok(j)) = (
                usize::try_from(b.wrapping_sub(svma)),
                usize::try_from(e.wrapping_sub(svma)),
            ) else {
                continue;
            };
            unwind_arm_prologue::calls::thumb_references(data, svma, i & !1..j, &mut targets);
        }
    }
    targets.extend(relocated_thumb_pointers(elf));
    let mut starts: Vec<u64> = targets
        .into_iter()
        .map(|t| t & !1)
        .filter(|&t| t % 4 == 0 && in_code(t) && !covered(t))
        .collect();
    starts.sort_unstable();
    starts.dedup();
    // Each runs to the next start of any kind: a target, a symbol, an unwind entry, a
    // section's end.
    let mut next: Vec<u64> = exact
        .iter()
        .chain(guessed)
        .map(|f| f.start)
        .chain(symbols.iter().map(|&(s, _)| s))
        .chain(starts.iter().copied())
        .chain(code.iter().map(|&(s, d)| s.wrapping_add(d.len() as u64)))
        .collect();
    next.sort_unstable();
    next.dedup();
    starts
        .iter()
        .filter_map(|&start| {
            let end = *next.get(next.partition_point(|&n| n <= start))?;
            Some(Function { start, end })
        })
        .collect()
}

/// The Thumb code addresses (bit 0 set) that `elf`'s `R_ARM_RELATIVE` dynamic relocations
/// store: pointers to functions, whose value the file holds in place (REL).
fn relocated_thumb_pointers(elf: &object::File<'_>) -> Vec<u64> {
    let Some(relocations) = elf.dynamic_relocations() else {
        return Vec::new();
    };
    relocations
        .filter(|(_, r)| {
            r.flags()
                == RelocationFlags::Elf {
                    r_type: object::elf::R_ARM_RELATIVE,
                }
        })
        .filter_map(|(at, _)| crate::elf::word_at(elf, at).map(u64::from))
        .filter(|v| v & 1 == 1)
        .collect()
}
