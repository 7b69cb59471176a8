//! Preload cost: `bench-preload FILE...` builds the rule table of each ELF file (x86_64 or 32-bit
//! ARM, by its header) and, in the same run, the floor: its unwind tables read without building
//! anything (gimli iterating every row of `.eh_frame` and `.debug_frame`; on ARM the EHABI index
//! decoded, without the rows read from instructions).
//! `bench-preload --process` does the same for every module loaded in this process (the table
//! built by `unwind_in_process::refresh`, the floor over the modules' files). Prints one line per input:
//! `preload NAME: build S s, floor S s, ratio R x, rows N, distinct D, bytes/row B, rss BYTES`.
//!
//! `bench-preload --dlopen FILE` loads FILE into this process and times the `unwind_in_process::refresh`
//! that parses it, while another thread calls `dl_iterate_phdr` in a loop (as C++ exception
//! unwinding does): how long refresh held the dynamic loader's lock, and the longest that thread
//! waited for it. Prints `dlopen NAME: refresh S s, loader lock held S s, longest wait S s (N
//! calls)`.
//!
//! `bench-preload --read-back FILE...` reads rules files of the rule cache back (as every process
//! under `unwind-profiler record` does for the modules another built; the files are in
//! `~/.cache/unwind-profiler/rules-*`): `read-back NAME: S s for B bytes (MB/s)`, and the time
//! of the start report's count of the bytes without rules.

use std::hint::black_box;
use std::time::{Duration, Instant};

use gimli::{
    BaseAddresses, CieOrFde, DebugFrame, EhFrame, LittleEndian, UnwindContext, UnwindSection,
};
use object::{Object, ObjectSection};
use unwind_dwarf::{ArchVisitor, Architecture, DwarfArch};

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// The floor: maps the file and reads every row of its unwind tables without building anything:
/// gimli iterating every row of every FDE of `.eh_frame` and `.debug_frame`, and on 32-bit ARM
/// the EHABI index decoded into rules (`unwind_arm_exidx::rows`, no instructions read).
fn floor(path: &str) -> u64 {
    let Ok(data) = std::fs::read(path) else {
        return 0;
    };
    let Ok(file) = object::File::parse(&*data) else {
        return 0;
    };
    let address_size = if file.is_64() { 8 } else { 4 };
    let mut rows = 0;
    for name in [".eh_frame", ".debug_frame"] {
        let Some(section) = file.section_by_name(name) else {
            continue;
        };
        let Ok(bytes) = section.data() else { continue };
        rows += if name == ".eh_frame" {
            let mut eh = EhFrame::new(bytes, LittleEndian);
            eh.set_address_size(address_size);
            let bases = BaseAddresses::default().set_eh_frame(section.address());
            cfi_rows(&eh, &bases)
        } else {
            let mut debug = DebugFrame::new(bytes, LittleEndian);
            debug.set_address_size(address_size);
            cfi_rows(&debug, &BaseAddresses::default())
        };
    }
    if let (Some(exidx), extab) = (
        file.section_by_name(".ARM.exidx"),
        file.section_by_name(".ARM.extab"),
    ) {
        let extab_data = extab.as_ref().and_then(|s| s.data().ok());
        if let Ok(data) = exidx.data() {
            let sections = unwind_arm_exidx::ExidxSections {
                exidx: data,
                exidx_svma: exidx.address(),
                extab: extab_data,
                extab_svma: extab.as_ref().map_or(0, |s| s.address()),
                text_end: None,
                functions: &[],
            };
            if let Ok((exidx_rows, _)) = unwind_arm_exidx::rows(&sections) {
                rows += black_box(exidx_rows).len() as u64;
            }
        }
    }
    rows
}

/// Every row of every FDE of a CFI section, read with gimli.
fn cfi_rows<'a, S: UnwindSection<gimli::EndianSlice<'a, LittleEndian>>>(
    section: &S,
    bases: &BaseAddresses,
) -> u64 {
    let mut ctx = UnwindContext::new();
    let mut rows = 0u64;
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else {
            continue;
        };
        let Ok(mut table) = fde.rows(section, bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(row)) = table.next_row() {
            black_box(row.cfa());
            rows += 1;
        }
    }
    rows
}

/// A file's table, built for the architecture its ELF header names.
struct Built {
    rows: u64,
    distinct: usize,
    bytes: usize,
}

/// Builds the table of the file at `.0` for architecture `A`.
struct Load<'p>(&'p str);

impl ArchVisitor for Load<'_> {
    type Output = Result<Built, unwind_dwarf::DwarfError>;
    fn visit<A: DwarfArch>(self) -> Self::Output {
        let loaded = unwind_dwarf::load_elf_file::<A>(self.0.as_ref())?;
        Ok(Built {
            rows: loaded.rules.rows(),
            distinct: loaded.rules.dictionary().len(),
            bytes: loaded.rules.bytes(),
        })
    }
}

/// The architecture of the ELF file at `path`.
fn architecture(path: &str) -> Architecture {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("{path}: {e}"));
    Architecture::of_elf(&file).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn report(
    name: &str,
    build: Duration,
    floor: Duration,
    rows: u64,
    distinct: usize,
    bytes: usize,
    rss: u64,
) {
    println!(
        "preload {name}: build {:.4} s, floor {:.4} s, ratio {:.2} x, rows {rows}, distinct {distinct}, bytes/row {:.2}, rss {rss}",
        build.as_secs_f64(),
        floor.as_secs_f64(),
        build.as_secs_f64() / floor.as_secs_f64().max(1e-9),
        bytes as f64 / rows.max(1) as f64,
    );
}

const RUNS: usize = 5;

unsafe extern "C" fn nothing(
    _: *mut libc::dl_phdr_info,
    _: libc::size_t,
    _: *mut libc::c_void,
) -> libc::c_int {
    0
}

/// `--dlopen FILE`: see the module docs.
fn dlopen_refresh(path: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    unwind_in_process::init().expect("init");
    let c = std::ffi::CString::new(path).expect("path");
    // SAFETY: loads a shared library whose constructors are the toolchain's own.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {path} failed");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let prober = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut longest, mut calls) = (Duration::ZERO, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                // SAFETY: a callback that reads nothing.
                unsafe { libc::dl_iterate_phdr(Some(nothing), std::ptr::null_mut()) };
                longest = longest.max(t.elapsed());
                calls += 1;
            }
            (longest, calls)
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    let report = unwind_in_process::refresh().expect("refresh");
    stop.store(true, Ordering::Relaxed);
    let (longest, calls) = prober.join().expect("prober");
    let name = std::path::Path::new(path)
        .file_name()
        .map_or(path.into(), |n| n.to_string_lossy().into_owned());
    println!(
        "dlopen {name}: refresh {:.4} s, loader lock held {:.4} s, longest wait {:.4} s ({calls} calls)",
        report.build_time.as_secs_f64(),
        report.loader_lock.as_secs_f64(),
        longest.as_secs_f64(),
    );
}

/// `--read-back FILE...`: reads each rules file (written by the rule cache, see
/// `unwind_in_process::set_rules_cache`) back into a table, as every process of a `record` run
/// does for the modules an earlier one built, and prints the median time over 10 x [`RUNS`]
/// reads, from the file (read, where the library maps it) to the checked table: `read-back
/// NAME: S s for B bytes (MB/s)`; then the time of `bytes_without_rules` over the whole table
/// (each process's start report asks it of every module).
fn read_back(paths: &[String]) {
    type Rules = unwind_core::table::ModuleRules<unwind_core::x86_64::Rule>;
    let (mut total_bytes, mut total) = (0u64, Duration::ZERO);
    for p in paths {
        let bytes = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let times: Vec<Duration> = (0..RUNS * 10)
            .map(|_| {
                let t = Instant::now();
                let data = std::fs::read(p).expect("read");
                black_box(Rules::from_bytes(&data).expect("a rules file"));
                t.elapsed()
            })
            .collect();
        let m = median(times);
        let rules = Rules::from_bytes(&std::fs::read(p).expect("read")).expect("a rules file");
        let t = Instant::now();
        for _ in 0..100 {
            black_box(black_box(&rules).bytes_without_rules(0, u64::MAX));
        }
        println!(
            "  bytes_without_rules: {:.1} us",
            t.elapsed().as_secs_f64() * 1e4
        );
        total_bytes += bytes;
        total += m;
        println!(
            "read-back {}: {:.6} s for {bytes} bytes ({:.0} MB/s)",
            p.rsplit('/').next().unwrap_or(p),
            m.as_secs_f64(),
            bytes as f64 / m.as_secs_f64() / 1e6
        );
    }
    println!(
        "read-back all: {:.6} s for {total_bytes} bytes ({:.0} MB/s)",
        total.as_secs_f64(),
        total_bytes as f64 / total.as_secs_f64() / 1e6
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, path] = &args[..] {
        if flag == "--dlopen" {
            dlopen_refresh(path);
            return;
        }
    }
    if args.first().map(String::as_str) == Some("--read-back") {
        read_back(&args[1..]);
        return;
    }
    if args.first().map(String::as_str) == Some("--process") {
        let rss0 = rss();
        let first = unwind_in_process::init().expect("init");
        let rss1 = rss();
        let paths: Vec<String> = unwind_in_process::loaded_modules()
            .iter()
            .filter(|m| m.name.starts_with('/'))
            .map(|m| m.name.clone())
            .collect();
        let (mut build, mut floor_times) = (vec![first.build_time], Vec::new());
        for _ in 0..RUNS {
            // A full rebuild: parse every module again (refresh would reuse them).
            let t = Instant::now();
            for p in &paths {
                black_box(unwind_dwarf::load_elf_file::<unwind_dwarf::X86_64>(p.as_ref()).ok());
            }
            build.push(t.elapsed());
            let t = Instant::now();
            for p in &paths {
                black_box(floor(p));
            }
            floor_times.push(t.elapsed());
        }
        report(
            "process",
            median(build),
            median(floor_times),
            first.rows(),
            first.distinct_rules(),
            first.bytes(),
            rss1.saturating_sub(rss0),
        );
        return;
    }
    for path in &args {
        let arch = architecture(path);
        let (mut build, mut floor_times) = (Vec::new(), Vec::new());
        let rss0 = rss();
        let mut kept = None;
        for _ in 0..RUNS {
            let t = Instant::now();
            let built = arch
                .dispatch(Load(path))
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            build.push(t.elapsed());
            let t = Instant::now();
            black_box(floor(path));
            floor_times.push(t.elapsed());
            kept.get_or_insert(built);
        }
        let built = kept.expect("runs");
        let rss1 = rss();
        let name = std::path::Path::new(path)
            .file_name()
            .map_or(path.clone(), |n| n.to_string_lossy().into_owned());
        report(
            &format!("{name} ({arch})"),
            median(build),
            median(floor_times),
            built.rows,
            built.distinct,
            built.bytes,
            rss1.saturating_sub(rss0),
        );
    }
}
