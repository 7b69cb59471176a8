//! Malformed input never panics or hangs, and the result says what happened: truncated and
//! corrupted `.eh_frame`, arbitrary bytes as `.eh_frame` and `.debug_frame`, truncated and
//! corrupted ELF files, an ELF file without CFI and garbage `.eh_frame_hdr`. Every case must end
//! with `Ok` or an error value, in bounded time, and each test checks which: an error naming
//! the problem, a bad entry reported at the right offset, rows dropped with a reason, and FDEs
//! before the first corrupted byte unchanged. Whatever rules come out of corrupted input are
//! also applied once, to check that stepping with them cannot panic either.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gimli::{BaseAddresses, EhFrame, LittleEndian, UnwindSection};
use object::{Object, ObjectSection};
use proptest::prelude::*;
use unwind_core::table::ModuleRules;
use unwind_core::x86_64::{Regs, Rule};
use unwind_core::{Arch, X86_64};
use unwind_core::{Cache, Found, RuleTableBuilder, StackImage};
use unwind_dwarf::plt::{PltKind, PltSection};
use unwind_dwarf::{
    eh_frame_address_from_hdr, rules_from_elf, rules_from_sections, BadEntry, BadEntryKind,
    CfiSection, CfiSections, CfiStats, DropReason, DwarfError,
};
use unwind_test_support::thread_cpu_time;

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
const LS: &str = "/bin/ls";

/// Every case must finish within this much of the test thread's own CPU time: a hang, not
/// slowness, is what it catches (the slowest, 200 corrupted `.eh_frame` variants, takes 10 s of
/// CPU in a debug build; an armv7 debug build under qemu-user is some 15 times slower). The
/// thread's CPU time, not the wall clock: a busy machine stretched that case to 31 s.
const CASE_LIMIT: Duration = Duration::from_secs(if cfg!(target_arch = "arm") { 600 } else { 60 });

/// SplitMix64: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A section's bytes and its file address.
fn section(path: &str, name: &str) -> (Vec<u8>, u64) {
    let data = std::fs::read(path).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let s = elf
        .section_by_name(name)
        .unwrap_or_else(|| panic!("{path} has no {name}"));
    (s.data().unwrap().to_vec(), s.address())
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = thread_cpu_time();
    let r = f();
    let e = thread_cpu_time().saturating_sub(t);
    println!("{what}: {e:?} of CPU time");
    assert!(e < CASE_LIMIT, "{what} took {e:?} of CPU time");
    r
}

/// Applies every extent's rule of `rules` once to a small synthetic stack and unwinds from each
/// extent start: none of this may panic, whatever the rules say.
fn exercise(rules: ModuleRules<Rule>) {
    let words: Vec<u8> = (0..512u64)
        .flat_map(|i| (0x7000_0000_0000 + i * 8).to_le_bytes())
        .collect();
    let image = StackImage::new(0x7000_0000_0000, &words);
    let starts: Vec<u64> = rules.extents().map(|e| e.0).collect();
    let mut b = RuleTableBuilder::new(NonZeroU32::new(1).unwrap());
    b.add(0, u64::MAX, 0, "m".into(), Arc::new(rules));
    let table = b.build().unwrap();
    let mut cache = Cache::<unwind_core::X86_64>::new();
    let mut pcs = [0u64; 16];
    for (i, &pc) in starts.iter().enumerate().step_by(starts.len() / 512 + 1) {
        let regs = Regs {
            pc,
            sp: 0x7000_0000_0100,
            fp: 0x7000_0000_0200 + (i as u64 % 8),
        };
        if let Some(Found { module: m, rule }) = table.lookup(pc) {
            let _ = X86_64::step_rule(&table, m, &rule, &regs, true, &image);
        }
        let r = unwind_core::unwind(&table, &mut cache, regs, &image, &mut pcs, None);
        assert!(r.frames >= 1 && r.frames <= pcs.len());
    }
}

fn load(sections: &CfiSections<'_>) -> Result<CfiStats, DwarfError> {
    load_rules(sections).map(|(_, stats)| stats)
}

/// [`load`], keeping the rules.
fn load_rules(sections: &CfiSections<'_>) -> Result<(ModuleRules<Rule>, CfiStats), DwarfError> {
    let (rules, stats) = rules_from_sections::<X86_64>(sections, None)?;
    exercise(rules.clone());
    Ok((rules, stats.cfi))
}

/// An entry of a CFI section found by walking its length fields (independently of the loader):
/// its offset, where it ends, and whether it is shaped like an FDE (its CIE id is not the CIE
/// marker, or it is too short to have one).
#[derive(Clone, Copy, Debug)]
struct Walked {
    offset: usize,
    end: usize,
    fde: bool,
}

/// Walks `data` as `.eh_frame` (or `.debug_frame`) by its length fields; also returns where a
/// length could not be read or ran past the end, if it did.
fn walk(data: &[u8], debug: bool) -> (Vec<Walked>, Option<usize>) {
    let u32_at = |o: usize| Some(u32::from_le_bytes(data.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(data.get(o..o + 8)?.try_into().ok()?));
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let Some(l) = u32_at(at) else {
            return (out, Some(at));
        };
        let (header, len, wide) = match l {
            0xffff_ffff => match u64_at(at + 4) {
                Some(l) => (12, l, true),
                None => return (out, Some(at)),
            },
            l if l >= 0xffff_fff0 => return (out, Some(at)),
            l => (4, u64::from(l), false),
        };
        if len == 0 {
            if !debug {
                break;
            }
            at += header;
            continue;
        }
        let end = match usize::try_from(len)
            .ok()
            .and_then(|l| (at + header).checked_add(l))
        {
            Some(e) if e <= data.len() => e,
            _ => return (out, Some(at)),
        };
        let id_at = at + header;
        let cie = match (debug, wide) {
            (false, _) => id_at + 4 <= end && u32_at(id_at) == Some(0),
            (true, false) => id_at + 4 <= end && u32_at(id_at) == Some(u32::MAX),
            (true, true) => id_at + 8 <= end && u64_at(id_at) == Some(u64::MAX),
        };
        out.push(Walked {
            offset: at,
            end,
            fde: !cie,
        });
        at = end;
    }
    (out, None)
}

/// Where [`walk`] of `.eh_frame` bytes stops at a length it cannot follow, if it does.
fn stop_at(data: &[u8]) -> Option<usize> {
    walk(data, false).1
}

/// `(entry offset, entry end, start, end)` of every FDE gimli parses at the entries `walked`
/// of `.eh_frame` bytes `data` at `svma`.
fn fde_ranges(data: &[u8], svma: u64, walked: &[Walked]) -> Vec<(usize, usize, u64, u64)> {
    let section = EhFrame::new(data, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(svma);
    walked
        .iter()
        .filter(|w| w.fde)
        .filter_map(|w| {
            let partial = section
                .partial_fde_from_offset(&bases, w.offset.into())
                .ok()?;
            let fde = partial.parse(|s, b, o| s.cie_from_offset(b, o)).ok()?;
            let start = fde.initial_address();
            Some((w.offset, w.end, start, start.saturating_add(fde.len())))
        })
        .collect()
}

/// Offsets of the entries of a `.eh_frame` (each length field), including the terminator.
fn entry_offsets(data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut o = 0usize;
    while o + 4 <= data.len() {
        out.push(o);
        let len = u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
        assert_ne!(len, u32::MAX, "64-bit DWARF entry in libc?");
        if len == 0 {
            break;
        }
        o += 4 + len as usize;
    }
    out
}

#[test]
fn truncated_eh_frame() {
    let (data, svma) = section(LIBC, ".eh_frame");
    let boundaries = entry_offsets(&data);
    let mut lengths: Vec<usize> = (0..64).chain((0..data.len()).step_by(997)).collect();
    // Exactly at a few entry boundaries, and one byte either side of them.
    for &b in boundaries.iter().step_by(97) {
        lengths.extend([b.saturating_sub(1), b, b + 1]);
    }
    lengths.push(data.len());
    lengths.sort_unstable();
    lengths.dedup();
    let (mut cut_mid, mut cut_mid_bad, mut at_boundary) = (0, 0, 0);
    let mut last_fdes = 0;
    timed("truncated .eh_frame", || {
        for &n in &lengths {
            let s = CfiSections {
                eh_frame: Some(&data[..n]),
                eh_frame_svma: svma,
                ..Default::default()
            };
            let stats = load(&s).unwrap_or_else(|e| panic!("truncation at {n}: {e}"));
            let boundary = n == data.len() || boundaries.binary_search(&n).is_ok();
            if boundary {
                at_boundary += 1;
                assert_eq!(stats.bad_entries, 0, "cut at entry boundary {n}: {stats:?}");
            } else {
                cut_mid += 1;
                if stats.bad_entries > 0 {
                    cut_mid_bad += 1;
                }
                // Exactly one bad entry: the one the cut is in, whose length runs past the end.
                let cut_entry = boundaries[boundaries.partition_point(|&b| b < n) - 1];
                assert_eq!(stats.bad_entries, 1, "cut at {n}: {stats:?}");
                let bad = stats.first_bad_entry().unwrap();
                assert!(
                    matches!(
                        bad,
                        BadEntry {
                            section: CfiSection::EhFrame,
                            kind: BadEntryKind::RestUnread,
                            error: gimli::Error::UnexpectedEof(_),
                            ..
                        }
                    ),
                    "cut at {n}: {bad}"
                );
                assert_eq!(bad.offset, cut_entry as u64, "cut at {n}: {bad}");
            }
            assert!(stats.fdes >= last_fdes, "FDE count fell at {n}");
            last_fdes = stats.fdes;
        }
    });
    println!(
        "{} truncations: {cut_mid} inside an entry ({cut_mid_bad} reported bad entries), {at_boundary} at entry boundaries",
        lengths.len()
    );
    assert!(cut_mid_bad > 0);
}

/// What a corrupted `.eh_frame` gave, compared with the clean one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// An error (only a span over 4 GiB, naming the FDEs at both ends, is expected).
    Error,
    /// A bad entry reported, at or after the entry holding the first corrupted byte.
    BadEntry,
    /// No bad entry, but rows dropped with a reason (or fewer FDEs) compared with the clean
    /// section.
    RowsDropped,
    /// Loaded without complaint but different rules (a flip in an operand or an address).
    SilentlyDifferent,
    /// The same rules (a flip in padding, or in a field that changes nothing).
    Identical,
}

/// Random corruptions of libc's `.eh_frame`. For each: every FDE that ends before the first
/// corrupted byte keeps exactly the rules of the clean load (unless an FDE after it, its address
/// corrupted, now overlaps it); a reported bad entry is at or after the entry that holds the
/// first corrupted byte, at an entry boundary; an error is a span over 4 GiB naming the FDEs at
/// both ends. The outcomes are counted and printed.
#[test]
fn corrupted_eh_frame() {
    let (data, svma) = section(LIBC, ".eh_frame");
    let clean_sections = CfiSections {
        eh_frame: Some(&data),
        eh_frame_svma: svma,
        ..Default::default()
    };
    let (clean, clean_stats) = load_rules(&clean_sections).unwrap();
    assert_eq!(clean_stats.bad_entries, 0);
    let (clean_walk, stop) = walk(&data, false);
    assert_eq!(stop, None);
    let clean_fdes = fde_ranges(&data, svma, &clean_walk);
    assert_eq!(clean_fdes.len() as u64, clean_stats.fdes);
    let clean_extents: Vec<_> = clean.extents().collect();
    let mut rng = Rng(0x5eed_0001);
    let mut outcomes = std::collections::BTreeMap::<Outcome, u32>::new();
    let (mut intact_checked, mut overridden) = (0u64, 0u64);
    let mut messages = Vec::new();
    timed("200 corrupted .eh_frame variants", || {
        for _ in 0..200 {
            let mut d = data.clone();
            let flips = 1 + rng.below(16);
            let mut first = usize::MAX;
            for _ in 0..flips {
                let i = rng.below(d.len());
                d[i] ^= (rng.next() as u8) | 1;
                first = first.min(i);
            }
            // The entry that holds the first corrupted byte.
            let entry = clean_walk
                .iter()
                .find(|w| w.offset <= first && first < w.end)
                .map_or(data.len(), |w| w.offset);
            let s = CfiSections {
                eh_frame: Some(&d),
                ..clean_sections
            };
            let outcome = match load_rules(&s) {
                Err(e) => {
                    assert!(
                        matches!(e, DwarfError::RangeTooLarge { .. }),
                        "unexpected error {e}"
                    );
                    let msg = e.to_string();
                    assert!(msg.contains(".eh_frame at offset"), "{msg}");
                    messages.push(msg);
                    Outcome::Error
                }
                Ok((rules, stats)) => {
                    // The FDEs before the first corrupted byte.
                    let (walked, _) = walk(&d, false);
                    // The FDEs from the corrupted entry on (parsed only if needed).
                    let mut later: Option<Vec<_>> = None;
                    for &(_, end_offset, start, end) in clean_fdes.iter().filter(|f| f.1 <= first) {
                        let same = [start, start + (end - start) / 2, end - 1]
                            .iter()
                            .all(|&a| rules.lookup(a) == clean.lookup(a));
                        intact_checked += 1;
                        if !same {
                            assert!(
                                later
                                    .get_or_insert_with(|| {
                                        fde_ranges(&d, svma, &walked)
                                            .into_iter()
                                            .filter(|f| f.0 >= entry)
                                            .collect()
                                    })
                                    .iter()
                                    .any(|l| l.2 < end && start < l.3),
                                "FDE for {start:#x}..{end:#x} (entry ending at {end_offset:#x}) \
                                 changed, before the first corrupted byte at {first:#x}"
                            );
                            overridden += 1;
                        }
                    }
                    // Bad entries: at or after the corrupted entry, at entry boundaries.
                    for b in &stats.first_bad_entries {
                        assert!(b.offset >= entry as u64, "{b} before {entry:#x}");
                        let at_stop = stop_at(&d) == Some(b.offset as usize);
                        assert!(
                            walked.iter().any(|w| w.offset as u64 == b.offset) || at_stop,
                            "{b}: not an entry boundary"
                        );
                        assert_eq!(b.kind == BadEntryKind::RestUnread, at_stop, "{b}");
                        assert!(b.to_string().starts_with(".eh_frame at offset"), "{b}");
                    }
                    if stats.bad_entries > 0 {
                        Outcome::BadEntry
                    } else if stats.fdes < clean_stats.fdes
                        || DropReason::ALL
                            .iter()
                            .any(|&r| stats.dropped_for(r) > clean_stats.dropped_for(r))
                    {
                        Outcome::RowsDropped
                    } else if rules.extents().ne(clean_extents.iter().copied()) {
                        Outcome::SilentlyDifferent
                    } else {
                        Outcome::Identical
                    }
                }
            };
            *outcomes.entry(outcome).or_default() += 1;
        }
    });
    messages.sort();
    messages.dedup();
    println!(
        "corrupted .eh_frame: {outcomes:?}; {intact_checked} FDEs before the first corrupted \
         byte checked, {overridden} overlapped by a corrupted FDE after it"
    );
    for m in messages.iter().take(3) {
        println!("  error: {m}");
    }
    assert!(outcomes.get(&Outcome::BadEntry).copied().unwrap_or(0) > 0);
    assert!(intact_checked > 0);
}

/// The first entry of `.eh_frame` corrupt: no FDE, and the report says where and what.
#[test]
fn eh_frame_corrupt_at_its_first_entry() {
    let (data, svma) = section(LIBC, ".eh_frame");
    // A length past the end: nothing can be read.
    let mut d = data.clone();
    d[..4].copy_from_slice(&0x7fff_ff00u32.to_le_bytes());
    let stats = load(&CfiSections {
        eh_frame: Some(&d),
        eh_frame_svma: svma,
        ..Default::default()
    })
    .unwrap();
    assert_eq!((stats.fdes, stats.bad_entries), (0, 1));
    let bad = stats.first_bad_entry().unwrap();
    assert_eq!(
        (bad.section, bad.offset, bad.kind),
        (CfiSection::EhFrame, 0, BadEntryKind::RestUnread)
    );
    assert!(matches!(bad.error, gimli::Error::UnexpectedEof(_)));
    let msg = bad.to_string();
    println!("length past the end: {msg}");
    assert!(msg.starts_with(".eh_frame at offset 0x0: "), "{msg}");

    // The first CIE's version: the CIE is skipped, its FDEs too, and the rest is read.
    let mut d = data.clone();
    d[8] = 9;
    let clean = load(&CfiSections {
        eh_frame: Some(&data),
        eh_frame_svma: svma,
        ..Default::default()
    })
    .unwrap();
    let stats = load(&CfiSections {
        eh_frame: Some(&d),
        eh_frame_svma: svma,
        ..Default::default()
    })
    .unwrap();
    let bad = stats.first_bad_entry().unwrap();
    assert_eq!(
        (bad.section, bad.offset, bad.kind, bad.error),
        (
            CfiSection::EhFrame,
            0,
            BadEntryKind::CieSkipped,
            gimli::Error::UnknownVersion(9)
        )
    );
    // Every FDE is either read or counted bad.
    assert_eq!(stats.fdes + stats.bad_entries - 1, clean.fdes);
    println!(
        "bad first CIE: {bad}; {} FDEs read, {} bad entries",
        stats.fdes, stats.bad_entries
    );
}

/// Corruptions of one FDE in the middle of `.eh_frame`: its length (the rest of the section is
/// lost), its CIE pointer (only it is skipped) and its instructions (only its rows are dropped).
/// Each report names the offset of that FDE's entry.
#[test]
fn corrupted_fde_in_the_middle_is_named() {
    let (data, svma) = section(LIBC, ".eh_frame");
    let (walked, _) = walk(&data, false);
    let fdes = fde_ranges(&data, svma, &walked);
    // An FDE in the middle with no augmentation data (instructions at offset 17).
    let (i, &(offset, _, start, end)) = fdes
        .iter()
        .enumerate()
        .skip(fdes.len() / 2)
        .find(|(_, f)| data[f.0 + 16] == 0 && data[f.0 + 17] != 0)
        .expect("an FDE without augmentation data");
    let load_variant = |patch: &dyn Fn(&mut Vec<u8>)| {
        let mut d = data.clone();
        patch(&mut d);
        load(&CfiSections {
            eh_frame: Some(&d),
            eh_frame_svma: svma,
            ..Default::default()
        })
        .unwrap()
    };
    let n = fdes.len() as u64;

    let stats =
        load_variant(&|d| d[offset..offset + 4].copy_from_slice(&0x7fff_ff00u32.to_le_bytes()));
    let bad = *stats.first_bad_entry().unwrap();
    println!("length: {bad}");
    assert_eq!(
        (bad.offset, bad.kind),
        (offset as u64, BadEntryKind::RestUnread)
    );
    assert_eq!(stats.fdes, i as u64, "the FDEs before it are read");

    let stats =
        load_variant(&|d| d[offset + 4..offset + 8].copy_from_slice(&0x7fff_0000u32.to_le_bytes()));
    let bad = *stats.first_bad_entry().unwrap();
    println!("CIE pointer: {bad}");
    assert_eq!(
        (bad.offset, bad.kind),
        (offset as u64, BadEntryKind::FdeSkipped)
    );
    assert_eq!(
        (stats.fdes, stats.bad_entries),
        (n - 1, 1),
        "only it is skipped"
    );

    // DW_CFA_restore_state without DW_CFA_remember_state.
    let stats = load_variant(&|d| d[offset + 17] = 0x0b);
    let bad = *stats.first_bad_entry().unwrap();
    println!("instructions: {bad}");
    assert_eq!(
        (bad.offset, bad.kind),
        (offset as u64, BadEntryKind::RowsDropped { start, end })
    );
    assert_eq!((stats.fdes, stats.bad_entries), (n, 1));
    assert!(bad.to_string().contains(&format!("{start:#x}..{end:#x}")));
}

/// With the module's code range known (as preload and ELF loading know it), an FDE whose
/// corrupted address lies outside the code is skipped and counted, and the rest still loads.
#[test]
fn corrupted_fde_addresses_outside_the_code_are_skipped() {
    let (data, svma) = section(LIBC, ".eh_frame");
    let (text, text_svma) = section(LIBC, ".text");
    // Generous: every FDE of libc describes .text or the sections around it.
    let code = (
        text_svma.saturating_sub(1 << 20),
        text_svma + text.len() as u64 + (1 << 20),
    );
    let mut rng = Rng(0x5eed_0002);
    let (mut outside, mut errors, mut first_named) = (0u64, Vec::new(), None);
    for _ in 0..200 {
        let mut d = data.clone();
        for _ in 0..1 + rng.below(16) {
            let i = rng.below(d.len());
            d[i] ^= (rng.next() as u8) | 1;
        }
        let s = CfiSections {
            eh_frame: Some(&d),
            eh_frame_svma: svma,
            code_range: Some(code),
            ..Default::default()
        };
        match load(&s) {
            Ok(stats) => {
                outside += stats.fdes_outside_code;
                // The first one is named: where it is and what it describes.
                assert_eq!(
                    stats.first_fde_outside_code.is_some(),
                    stats.fdes_outside_code > 0
                );
                if let Some(o) = stats.first_fde_outside_code {
                    assert!(o.range.0 < code.0 || o.range.1 > code.1, "{o}");
                    assert_eq!(o.section, CfiSection::EhFrame);
                    assert!(o.to_string().starts_with(".eh_frame at offset"), "{o}");
                    if first_named.is_none() {
                        first_named = Some(o.to_string());
                    }
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    println!("first named: {first_named:?}");
    println!("corrupted .eh_frame with code range: {outside} FDEs outside the code skipped");
    assert!(errors.is_empty(), "{errors:?}");
    assert!(outside > 0);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Arbitrary bytes as one section: every FDE-shaped entry (found by walking the length
    /// fields independently) is read or counted bad; a length that cannot be followed is
    /// reported at its offset; bad entries are at entry boundaries. As both sections at once:
    /// `Ok`, or a span over 4 GiB.
    #[test]
    fn arbitrary_bytes_as_cfi(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        svma in any::<u64>(),
        as_debug in any::<bool>(),
    ) {
        let t = thread_cpu_time();
        let s = if as_debug {
            CfiSections { debug_frame: Some(&bytes), ..Default::default() }
        } else {
            CfiSections { eh_frame: Some(&bytes), eh_frame_svma: svma, ..Default::default() }
        };
        let (walked, stop) = walk(&bytes, as_debug);
        let fde_shaped = walked.iter().filter(|w| w.fde).count() as u64;
        match load(&s) {
            Ok(stats) => {
                prop_assert!(stats.fdes <= fde_shaped, "{stats:?}");
                prop_assert!(fde_shaped <= stats.fdes + stats.bad_entries, "{stats:?}");
                let section = if as_debug { CfiSection::DebugFrame } else { CfiSection::EhFrame };
                for b in &stats.first_bad_entries {
                    prop_assert_eq!(b.section, section);
                    let at = b.offset as usize;
                    prop_assert!(
                        walked.iter().any(|w| w.offset == at) || stop == Some(at),
                        "{} not at an entry", b
                    );
                    prop_assert_eq!(b.kind == BadEntryKind::RestUnread, stop == Some(at), "{}", b);
                }
                if stats.bad_entries <= CfiStats::BAD_ENTRIES_KEPT as u64 {
                    let rest_unread = stats
                        .first_bad_entries
                        .iter()
                        .filter(|b| b.kind == BadEntryKind::RestUnread)
                        .count();
                    prop_assert_eq!(rest_unread, usize::from(stop.is_some()));
                }
            }
            Err(e @ DwarfError::RangeTooLarge { .. }) => {
                prop_assert!(e.to_string().contains("FDE for"), "{}", e);
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
        let both = CfiSections {
            eh_frame: Some(&bytes),
            eh_frame_svma: svma,
            debug_frame: Some(&bytes),
            text_svma: svma,
            got_svma: svma,
            ..Default::default()
        };
        match load(&both) {
            Ok(_) | Err(DwarfError::RangeTooLarge { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
        prop_assert!(thread_cpu_time().saturating_sub(t) < CASE_LIMIT);
    }

    /// A well-formed CIE with arbitrary initial instructions and an FDE with arbitrary
    /// instructions: this gets past the entry headers into the instruction and expression
    /// parsers. The FDE is always read; malformed instructions drop its rows and name it.
    #[test]
    fn arbitrary_instructions(
        cie_insns in proptest::collection::vec(any::<u8>(), 0..40),
        fde_insns in proptest::collection::vec(any::<u8>(), 0..200),
        range in 1u32..0x1000,
        debug in any::<bool>(),
    ) {
        let data = cie_and_fde(&cie_insns, &fde_insns, range, debug);
        let fde_offset = 4 + u32::from_le_bytes(data[..4].try_into().unwrap()) as u64;
        let s = sections_for(&data, debug);
        let stats = load(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(stats.fdes, 1);
        prop_assert!(stats.bad_entries <= 1);
        if let Some(b) = stats.first_bad_entry() {
            prop_assert_eq!(b.offset, fde_offset);
            prop_assert_eq!(
                b.kind,
                BadEntryKind::RowsDropped { start: 0x1000, end: 0x1000 + u64::from(range) }
            );
        } else {
            prop_assert!(stats.rows > 0);
            prop_assert_eq!(stats.dropped_for(DropReason::CorruptFde), 0);
        }
    }

    /// PLT sections with arbitrary addresses and sizes (from corrupted section headers), alone
    /// and next to real CFI: every non-empty one has a rule at its start, or the module spans
    /// more than 4 GiB and the error names a PLT section.
    #[test]
    fn arbitrary_plt_sections(
        plts in proptest::collection::vec(
            (
                prop_oneof![0u64..0x10_0000, any::<u64>()],
                prop_oneof![0u64..0x1000, any::<u64>()],
                any::<bool>(),
            ),
            0..4,
        ),
        with_cfi in any::<bool>(),
    ) {
        let plt: Vec<PltSection> = plts
            .into_iter()
            .map(|(svma, size, lazy)| PltSection {
                svma,
                size,
                kind: if lazy { PltKind::Lazy } else { PltKind::Jump },
            })
            .collect();
        let cfi = cie_and_fde(&[], &[], 0x10, false);
        let s = CfiSections {
            eh_frame: with_cfi.then_some(&cfi[..]),
            eh_frame_svma: 0x40_0000,
            plt: &plt,
            ..Default::default()
        };
        match load_rules(&s) {
            Ok((rules, _)) => {
                for p in plt.iter().filter(|p| p.size > 0 && p.svma < u64::MAX) {
                    prop_assert!(rules.lookup(p.svma).is_some(), "{:x?}", p);
                }
            }
            Err(e @ DwarfError::RangeTooLarge { .. }) => {
                prop_assert!(e.to_string().contains("PLT section at"), "{}", e);
            }
            Err(DwarfError::NoCfi) => prop_assert!(plt.is_empty() && !with_cfi),
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }

    #[test]
    fn arbitrary_bytes_as_eh_frame_hdr(bytes in proptest::collection::vec(any::<u8>(), 0..64), svma in any::<u64>()) {
        match eh_frame_address_from_hdr(&bytes, svma, 8) {
            Ok(_) => prop_assert!(bytes.len() >= 5 && bytes[0] == 1),
            Err(DwarfError::BadEhFrameHdr { svma: at, offset, error }) => {
                prop_assert_eq!(at, svma);
                prop_assert!(offset <= bytes.len().min(4) as u64, "{} {:?}", offset, error);
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }
}

/// `data` (from [`cie_and_fde`]) as the module's `.debug_frame` or as its `.eh_frame` at
/// 0x40_0000.
fn sections_for(data: &[u8], debug: bool) -> CfiSections<'_> {
    if debug {
        CfiSections {
            debug_frame: Some(data),
            ..Default::default()
        }
    } else {
        CfiSections {
            eh_frame: Some(data),
            eh_frame_svma: 0x40_0000,
            ..Default::default()
        }
    }
}

/// One CIE (`zR`, pcrel|sdata4 pointers in `.eh_frame`; version 1 without augmentation in
/// `.debug_frame`) and one FDE at 0x1000 covering `range` bytes, then a terminator.
fn cie_and_fde(cie_insns: &[u8], fde_insns: &[u8], range: u32, debug: bool) -> Vec<u8> {
    let mut cie = Vec::new();
    if debug {
        cie.extend(u32::MAX.to_le_bytes()); // CIE id
        cie.push(1); // version
        cie.push(0); // augmentation ""
    } else {
        cie.extend(0u32.to_le_bytes());
        cie.push(1);
        cie.extend(b"zR\0");
    }
    cie.push(1); // code alignment
    cie.push(0x78); // data alignment -8
    cie.push(16); // return address register
    if !debug {
        cie.push(1); // augmentation data length
        cie.push(0x1b); // DW_EH_PE_pcrel | DW_EH_PE_sdata4
    }
    cie.extend([0x0c, 0x07, 0x08, 0x90, 0x01]); // def_cfa rsp+8; rip at cfa-8
    cie.extend(cie_insns);
    let mut out = Vec::new();
    out.extend((cie.len() as u32).to_le_bytes());
    out.extend(&cie);
    let fde_start = out.len();
    let mut fde = Vec::new();
    if debug {
        fde.extend(0u32.to_le_bytes()); // CIE offset
        fde.extend(0x1000u64.to_le_bytes());
        fde.extend(u64::from(range).to_le_bytes());
    } else {
        let ptr_field = fde_start + 4;
        fde.extend((ptr_field as u32).to_le_bytes()); // distance back to the CIE
        let pc_field = 0x40_0000 + ptr_field as i64 + 4;
        fde.extend(((0x1000 - pc_field) as i32).to_le_bytes());
        fde.extend(range.to_le_bytes());
        fde.push(0); // augmentation data length
    }
    fde.extend(fde_insns);
    out.extend((fde.len() as u32).to_le_bytes());
    out.extend(&fde);
    out.extend(0u32.to_le_bytes());
    out
}

#[test]
fn cie_and_fde_builder_is_valid() {
    // Sanity check for the proptest above: without extra instructions both forms load one FDE
    // with one row.
    for debug in [false, true] {
        let data = cie_and_fde(&[], &[], 0x10, debug);
        let s = sections_for(&data, debug);
        let (rules, stats) = rules_from_sections::<X86_64>(&s, None).unwrap();
        let stats = stats.cfi;
        assert_eq!((stats.fdes, stats.rows, stats.bad_entries), (1, 1, 0));
        assert_eq!(rules.lookup(0x1000), Some(Rule::default()));
        assert_eq!(rules.lookup(0x100f), Some(Rule::default()));
        assert_eq!(rules.lookup(0x1010), None);
    }
}

/// Rows that an FDE's instructions place outside its address range (gimli does not bound them)
/// are dropped or clipped: a corrupt FDE cannot describe addresses it does not claim, which
/// would escape the code-range check and the shadowing of `.debug_frame`.
#[test]
fn rows_outside_their_fde_are_dropped() {
    // advance_loc1 0x80; def_cfa_offset 16; advance_loc1 0x20; def_cfa_offset 24
    let insns = [0x02, 0x80, 0x0e, 0x10, 0x02, 0x20, 0x0e, 0x18];
    for debug in [false, true] {
        let data = cie_and_fde(&[], &insns, 0x10, debug);
        let s = sections_for(&data, debug);
        let (rules, stats) = load_rules(&s).unwrap();
        assert_eq!(stats.rows, 3, "{stats:?}");
        // [0x1000, 0x1080) clipped to the FDE; [0x1080, 0x10a0) outside it.
        assert_eq!(rules.lookup(0x1000), Some(Rule::default()));
        assert_eq!(rules.lookup(0x100f), Some(Rule::default()));
        assert_eq!(rules.lookup(0x1010), None);
        assert_eq!(rules.lookup(0x1090), None);
        assert_eq!(stats.dropped_for(DropReason::OutsideFde), 1);
        assert_eq!(stats.bad_entries, 0);
    }
}

/// What a corrupted ELF file gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ElfOutcome {
    /// Malformed ELF headers.
    BadHeaders,
    /// Another architecture (its `e_machine`, class or byte order changed).
    Architecture,
    /// No CFI section left.
    NoCfi,
    /// An unwind section could not be read and nothing else was left.
    UnreadableError,
    /// Other errors (named in the message).
    OtherError,
    /// Loaded, with unreadable sections named.
    UnreadableLeftOut,
    /// Loaded, the same rules as the clean file.
    Same,
    /// Loaded, different rules (a changed section address or size).
    Different,
}

/// Classifies `rules_from_elf(d)` against the clean file's rules, checking what each error
/// names.
fn classify_elf(d: &[u8], clean: &[(u64, u64, Rule)]) -> ElfOutcome {
    match rules_from_elf::<X86_64>(d) {
        Err(DwarfError::Elf(e)) => {
            assert!(!e.to_string().is_empty());
            ElfOutcome::BadHeaders
        }
        Err(DwarfError::UnsupportedArchitecture(_)) => ElfOutcome::Architecture,
        Err(DwarfError::NoCfi) => ElfOutcome::NoCfi,
        Err(e @ DwarfError::UnreadableSection(_)) => {
            let msg = e.to_string();
            assert!(
                msg.contains(".eh_frame") || msg.contains(".debug_frame"),
                "{msg}"
            );
            ElfOutcome::UnreadableError
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(".eh_frame") || msg.contains("PLT section"),
                "{msg}"
            );
            ElfOutcome::OtherError
        }
        Ok(r) => {
            for u in &r.stats.cfi.unreadable_sections {
                assert!(matches!(u.name, ".eh_frame" | ".debug_frame"), "{u}");
                assert!(u.to_string().starts_with(u.name));
            }
            let same = r.rules.extents().eq(clean.iter().copied());
            let outcome = if !r.stats.cfi.unreadable_sections.is_empty() {
                ElfOutcome::UnreadableLeftOut
            } else if same {
                ElfOutcome::Same
            } else {
                ElfOutcome::Different
            };
            exercise(r.rules);
            outcome
        }
    }
}

/// Truncated, header-corrupted and random ELF files: every truncation that cuts the section
/// header table is a header error; a corrupted header gives an error naming the problem, or
/// rules (with unreadable sections named); an architecture error only when `e_machine`, the
/// class or the byte order changed; bytes without the ELF magic are a header error.
#[test]
fn truncated_and_corrupted_elf() {
    let data = std::fs::read(LS).unwrap();
    let full = rules_from_elf::<X86_64>(&data).expect("/bin/ls loads");
    assert!(full.rules.rows() > 0);
    let clean: Vec<_> = full.rules.extents().collect();
    // e_shoff, e_shentsize, e_shnum: where the section header table ends.
    let shoff = u64::from_le_bytes(data[0x28..0x30].try_into().unwrap()) as usize;
    let shentsize = u16::from_le_bytes(data[0x3a..0x3c].try_into().unwrap()) as usize;
    let shnum = u16::from_le_bytes(data[0x3c..0x3e].try_into().unwrap()) as usize;
    let sht_end = shoff + shentsize * shnum;
    assert!(shoff < data.len() && sht_end <= data.len());
    let mut lengths: Vec<usize> = (0..256).chain((0..data.len()).step_by(4096)).collect();
    lengths.push(data.len() - 1);
    let mut outcomes = std::collections::BTreeMap::<ElfOutcome, u32>::new();
    timed("truncated /bin/ls", || {
        for &n in &lengths {
            let o = classify_elf(&data[..n], &clean);
            if n < sht_end {
                assert_eq!(o, ElfOutcome::BadHeaders, "truncated to {n}");
            }
            *outcomes.entry(o).or_default() += 1;
        }
    });
    println!("truncated /bin/ls (section headers end at {sht_end:#x}): {outcomes:?}");

    // Corrupt the headers: ELF header, program headers and the section header table.
    let mut rng = Rng(0x5eed_0002);
    let mut outcomes = std::collections::BTreeMap::<ElfOutcome, u32>::new();
    timed("300 corrupted /bin/ls headers", || {
        for _ in 0..300 {
            let mut d = data.clone();
            for _ in 0..1 + rng.below(6) {
                let i = match rng.below(3) {
                    0 => rng.below(64),
                    1 => 64 + rng.below(13 * 56),
                    _ => shoff + rng.below(data.len() - shoff),
                };
                d[i] ^= (rng.next() as u8) | 1;
            }
            let o = classify_elf(&d, &clean);
            if o == ElfOutcome::Architecture {
                // e_ident's class (4) and data (5), e_machine (18, 19).
                assert!(
                    [4, 5, 18, 19].iter().any(|&i| d[i] != data[i]),
                    "architecture error with the same e_machine"
                );
            }
            *outcomes.entry(o).or_default() += 1;
        }
    });
    println!("corrupted /bin/ls headers: {outcomes:?}");
    assert!(outcomes.get(&ElfOutcome::Same).copied().unwrap_or(0) > 0);

    // Random bytes, some behind a valid ELF identification.
    let mut rng = Rng(0x5eed_0003);
    let mut outcomes = std::collections::BTreeMap::<ElfOutcome, u32>::new();
    timed("random ELF bytes", || {
        for i in 0..300 {
            let len = rng.below(8192);
            let mut d = rng.bytes(len);
            if i % 2 == 0 && d.len() >= 64 {
                d[..20].copy_from_slice(&data[..20]);
            }
            let o = classify_elf(&d, &clean);
            if !d.starts_with(b"\x7fELF") {
                assert_eq!(o, ElfOutcome::BadHeaders);
            }
            *outcomes.entry(o).or_default() += 1;
        }
    });
    println!("random ELF bytes: {outcomes:?}");
}

#[test]
fn elf_without_cfi_is_no_cfi() {
    let dir = std::env::temp_dir().join(format!("unwind-dwarf-nocfi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("nocfi.c");
    let exe = dir.join("nocfi");
    std::fs::write(
        &src,
        "void _start(void) {\n\
         \t__asm__ volatile(\"mov $60, %eax\\n\\txor %edi, %edi\\n\\tsyscall\");\n\
         \tfor (;;) {}\n\
         }\n",
    )
    .unwrap();
    if !unwind_test_support::tool_runs("gcc") {
        unwind_test_support::missing("gcc: an ELF file without CFI not checked");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let status = std::process::Command::new("gcc")
        .args([
            "-O1",
            "-nostdlib",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-static",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .status();
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "gcc failed: {status:?}"
    );
    let r = unwind_dwarf::load_elf_file::<X86_64>(&exe);
    let _ = std::fs::remove_dir_all(&dir);
    match r {
        Err(DwarfError::NoCfi) => {}
        Err(e) => panic!("expected NoCfi, got error {e:?}"),
        Ok(l) => panic!(
            "expected NoCfi, got {} rows ({:?})",
            l.rules.rows(),
            l.stats
        ),
    }
    // No sections at all is also NoCfi.
    assert!(matches!(
        rules_from_sections::<X86_64>(&CfiSections::default(), None),
        Err(DwarfError::NoCfi)
    ));
    // A missing file is an I/O error, not a panic.
    assert!(matches!(
        unwind_dwarf::load_elf_file::<X86_64>(Path::new("/nonexistent/libnothing.so")),
        Err(DwarfError::Io(_))
    ));
}

#[test]
fn eh_frame_hdr_garbage_is_an_error() {
    // Positive control: libc's own header points at its .eh_frame.
    let (hdr, hdr_svma) = section(LIBC, ".eh_frame_hdr");
    let (_, eh_svma) = section(LIBC, ".eh_frame");
    assert_eq!(
        eh_frame_address_from_hdr(&hdr, hdr_svma, 8).unwrap(),
        eh_svma
    );

    // (what, bytes, the offset the error must name)
    let cases: &[(&str, &[u8], u64)] = &[
        ("empty", &[], 0),
        ("version only", &[1], 1),
        ("version 2", &[2, 0x1b, 0x03, 0x3b, 0, 0, 0, 0], 0),
        ("version 0", &[0, 0x1b, 0x03, 0x3b, 0, 0, 0, 0], 0),
        ("truncated pointer", &[1, 0x1b, 0x03, 0x3b, 0, 0], 6),
        (
            "omitted eh_frame pointer",
            &[1, 0xff, 0x03, 0x3b, 0, 0, 0, 0],
            1,
        ),
        (
            "indirect eh_frame pointer",
            &[1, 0x9b, 0x03, 0x3b, 0, 0, 0, 0, 0, 0, 0, 0],
            1,
        ),
        (
            "unknown pointer format",
            &[1, 0x0e, 0x03, 0x3b, 0, 0, 0, 0],
            1,
        ),
        (
            "unknown table encoding",
            &[1, 0x1b, 0x03, 0x0d, 0, 0, 0, 0, 0, 0, 0, 0],
            3,
        ),
        ("all ones", &[0xff; 16], 0),
        ("libc header truncated", &hdr[..5], 5),
    ];
    for (what, bytes, offset) in cases {
        match eh_frame_address_from_hdr(bytes, 0x1000, 8) {
            Err(e @ DwarfError::BadEhFrameHdr { .. }) => {
                let msg = e.to_string();
                println!("{what}: {msg}");
                assert!(
                    matches!(e, DwarfError::BadEhFrameHdr { svma: 0x1000, offset: o, .. } if o == *offset),
                    "{what}: {msg}"
                );
                assert!(
                    msg.contains(".eh_frame_hdr") && msg.contains(&format!("offset {offset:#x}")),
                    "{msg}"
                );
            }
            r => panic!("{what}: {r:?}"),
        }
    }
    let mut rng = Rng(0x5eed_0004);
    timed("random .eh_frame_hdr", || {
        for _ in 0..2000 {
            let len = rng.below(40);
            let mut d = rng.bytes(len);
            if !d.is_empty() && rng.below(2) == 0 {
                d[0] = 1;
            }
            let _ = eh_frame_address_from_hdr(&d, rng.next(), 8);
        }
    });
}
