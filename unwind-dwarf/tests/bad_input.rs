//! Malformed input never panics or hangs: truncated and corrupted `.eh_frame`, arbitrary bytes
//! as `.eh_frame` and `.debug_frame`, truncated and corrupted ELF files, an ELF file without CFI
//! and garbage `.eh_frame_hdr`. Every case must end with `Ok` or an error value, in bounded time.
//! Whatever rules come out of corrupted input are also applied once, to check that stepping
//! with them cannot panic either.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object::{Object, ObjectSection};
use proptest::prelude::*;
use unwind_core::table::ModuleRules;
use unwind_core::x86_64::{step_cfi, Regs, Rule};
use unwind_core::{Cache, RuleTableBuilder, StackImage};
use unwind_dwarf::plt::{PltKind, PltSection};
use unwind_dwarf::{
    eh_frame_address_from_hdr, rules_from_elf, rules_from_sections, CfiSections, CfiStats,
    DwarfError,
};

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
const LS: &str = "/bin/ls";

/// Every case must finish well within this.
const CASE_LIMIT: Duration = Duration::from_secs(30);

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
    let t = Instant::now();
    let r = f();
    let e = t.elapsed();
    println!("{what}: {e:?}");
    assert!(e < CASE_LIMIT, "{what} took {e:?}");
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
    let mut cache = Cache::new();
    let mut pcs = [0u64; 16];
    for (i, &pc) in starts.iter().enumerate().step_by(starts.len() / 512 + 1) {
        let regs = Regs {
            pc,
            sp: 0x7000_0000_0100,
            fp: 0x7000_0000_0200 + (i as u64 % 8),
        };
        if let Some((m, rule)) = table.lookup(pc) {
            let _ = step_cfi(&table, m, &rule, &regs, &image);
        }
        let r = unwind_core::x86_64::unwind(&table, &mut cache, regs, &image, &mut pcs, None);
        assert!(r.frames >= 1 && r.frames <= pcs.len());
    }
}

fn load(sections: &CfiSections<'_>) -> Result<CfiStats, DwarfError> {
    let (rules, stats) = rules_from_sections(sections)?;
    exercise(rules);
    Ok(stats)
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
                assert!(
                    stats.bad_entries > 0,
                    "cut inside an entry at {n} but no bad entry reported: {stats:?}"
                );
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

#[test]
fn corrupted_eh_frame() {
    let (data, svma) = section(LIBC, ".eh_frame");
    let mut rng = Rng(0x5eed_0001);
    let (mut ok, mut bad) = (0, 0);
    let mut errors: Vec<String> = Vec::new();
    timed("200 corrupted .eh_frame variants", || {
        for variant in 0..200 {
            let mut d = data.clone();
            let flips = 1 + rng.below(16);
            for _ in 0..flips {
                let i = rng.below(d.len());
                d[i] ^= (rng.next() as u8) | 1;
            }
            // Half the variants: the same bytes also as .debug_frame.
            let s = CfiSections {
                eh_frame: Some(&d),
                eh_frame_svma: svma,
                debug_frame: (variant % 2 == 1).then_some(&d[..]),
                ..Default::default()
            };
            match load(&s) {
                Ok(stats) => {
                    ok += 1;
                    if stats.bad_entries > 0 {
                        bad += 1;
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
    });
    errors.sort();
    errors.dedup();
    println!(
        "corrupted .eh_frame: {ok} Ok ({bad} with bad entries), {} Err: {errors:?}",
        200 - ok
    );
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
    let (mut outside, mut errors) = (0u64, Vec::new());
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
            Ok(stats) => outside += stats.fdes_outside_code,
            Err(e) => errors.push(e.to_string()),
        }
    }
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

    #[test]
    fn arbitrary_bytes_as_cfi(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        svma in any::<u64>(),
        as_debug in any::<bool>(),
    ) {
        let t = Instant::now();
        let s = if as_debug {
            CfiSections { debug_frame: Some(&bytes), ..Default::default() }
        } else {
            CfiSections { eh_frame: Some(&bytes), eh_frame_svma: svma, ..Default::default() }
        };
        let _ = load(&s);
        let both = CfiSections {
            eh_frame: Some(&bytes),
            eh_frame_svma: svma,
            debug_frame: Some(&bytes),
            text_svma: svma,
            got_svma: svma,
            ..Default::default()
        };
        let _ = load(&both);
        prop_assert!(t.elapsed() < CASE_LIMIT);
    }

    /// A well-formed CIE with arbitrary initial instructions and an FDE with arbitrary
    /// instructions: this gets past the entry headers into the instruction and expression
    /// parsers.
    #[test]
    fn arbitrary_instructions(
        cie_insns in proptest::collection::vec(any::<u8>(), 0..40),
        fde_insns in proptest::collection::vec(any::<u8>(), 0..200),
        range in 1u32..0x1000,
        debug in any::<bool>(),
    ) {
        let data = cie_and_fde(&cie_insns, &fde_insns, range, debug);
        let s = if debug {
            CfiSections { debug_frame: Some(&data), ..Default::default() }
        } else {
            CfiSections { eh_frame: Some(&data), eh_frame_svma: 0x40_0000, ..Default::default() }
        };
        let _ = load(&s);
    }

    /// PLT sections with arbitrary addresses and sizes (from corrupted section headers), alone
    /// and next to real CFI.
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
        let _ = load(&s);
    }

    #[test]
    fn arbitrary_bytes_as_eh_frame_hdr(bytes in proptest::collection::vec(any::<u8>(), 0..64), svma in any::<u64>()) {
        let _ = eh_frame_address_from_hdr(&bytes, svma, 8);
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
        let s = if debug {
            CfiSections {
                debug_frame: Some(&data),
                ..Default::default()
            }
        } else {
            CfiSections {
                eh_frame: Some(&data),
                eh_frame_svma: 0x40_0000,
                ..Default::default()
            }
        };
        let (rules, stats) = rules_from_sections(&s).unwrap();
        assert_eq!((stats.fdes, stats.rows, stats.bad_entries), (1, 1, 0));
        assert_eq!(rules.lookup(0x1000), Some(Rule::default()));
        assert_eq!(rules.lookup(0x100f), Some(Rule::default()));
        assert_eq!(rules.lookup(0x1010), None);
    }
}

#[test]
fn truncated_and_corrupted_elf() {
    let data = std::fs::read(LS).unwrap();
    let full = rules_from_elf(&data).expect("/bin/ls loads");
    assert!(full.rules.rows() > 0);
    let mut lengths: Vec<usize> = (0..256).chain((0..data.len()).step_by(4096)).collect();
    lengths.push(data.len() - 1);
    let (mut ok, mut err) = (0, 0);
    timed("truncated /bin/ls", || {
        for &n in &lengths {
            match rules_from_elf(&data[..n]) {
                Ok(r) => {
                    ok += 1;
                    exercise(r.rules);
                }
                Err(_) => err += 1,
            }
        }
    });
    println!("truncated /bin/ls: {ok} Ok, {err} Err");
    // Everything shorter than the ELF header cannot be parsed.
    for n in 0..64 {
        assert!(rules_from_elf(&data[..n]).is_err(), "{n} bytes parsed");
    }

    // Corrupt the headers: ELF header, program headers and the section header table.
    // e_shoff, the file offset of the section header table.
    let shoff = u64::from_le_bytes(data[0x28..0x30].try_into().unwrap()) as usize;
    assert!(shoff < data.len());
    let mut rng = Rng(0x5eed_0002);
    let (mut ok, mut err) = (0, 0);
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
            match rules_from_elf(&d) {
                Ok(r) => {
                    ok += 1;
                    exercise(r.rules);
                }
                Err(_) => err += 1,
            }
        }
    });
    println!("corrupted /bin/ls headers: {ok} Ok, {err} Err");

    // Random bytes, some behind a valid ELF identification.
    let mut rng = Rng(0x5eed_0003);
    timed("random ELF bytes", || {
        for i in 0..300 {
            let len = rng.below(8192);
            let mut d = rng.bytes(len);
            if i % 2 == 0 && d.len() >= 64 {
                d[..20].copy_from_slice(&data[..20]);
            }
            if let Ok(r) = rules_from_elf(&d) {
                exercise(r.rules);
            }
        }
    });
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
    match status {
        Ok(s) if s.success() => {}
        other => {
            println!("note: gcc unavailable or failed ({other:?}); skipped");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
    }
    let r = unwind_dwarf::load_elf_file(&exe);
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
        rules_from_sections(&CfiSections::default()),
        Err(DwarfError::NoCfi)
    ));
    // A missing file is an I/O error, not a panic.
    assert!(matches!(
        unwind_dwarf::load_elf_file(Path::new("/nonexistent/libnothing.so")),
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

    let cases: &[(&str, &[u8])] = &[
        ("empty", &[]),
        ("version only", &[1]),
        ("version 2", &[2, 0x1b, 0x03, 0x3b, 0, 0, 0, 0]),
        ("version 0", &[0, 0x1b, 0x03, 0x3b, 0, 0, 0, 0]),
        ("truncated pointer", &[1, 0x1b, 0x03, 0x3b, 0, 0]),
        (
            "omitted eh_frame pointer",
            &[1, 0xff, 0x03, 0x3b, 0, 0, 0, 0],
        ),
        (
            "indirect eh_frame pointer",
            &[1, 0x9b, 0x03, 0x3b, 0, 0, 0, 0],
        ),
        ("unknown pointer format", &[1, 0x0e, 0x03, 0x3b, 0, 0, 0, 0]),
        ("all ones", &[0xff; 16]),
        ("libc header truncated", &hdr[..5]),
    ];
    for (what, bytes) in cases {
        let r = eh_frame_address_from_hdr(bytes, 0x1000, 8);
        assert!(r.is_err(), "{what}: {r:?}");
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
