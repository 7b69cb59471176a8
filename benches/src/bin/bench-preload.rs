//! Preload cost: `bench-preload FILE...` builds the rule table of each ELF file and, in the same
//! run, the floor: gimli iterating every row of the same `.eh_frame` without building anything.
//! `bench-preload --process` does the same for every module loaded in this process (the table
//! built by `unwind_in_process::refresh`, the floor over the modules' files). Prints one line per input:
//! `preload NAME: build S s, floor S s, ratio R x, rows N, distinct D, bytes/row B, rss BYTES`.
//!
//! `bench-preload --dlopen FILE` loads FILE into this process and times the `unwind_in_process::refresh`
//! that parses it, while another thread calls `dl_iterate_phdr` in a loop (as C++ exception
//! unwinding does): how long refresh held the dynamic loader's lock, and the longest that thread
//! waited for it. Prints `dlopen NAME: refresh S s, loader lock held S s, longest wait S s (N
//! calls)`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindContext, UnwindSection};
use object::{Object, ObjectSection};

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

/// The floor: maps the file and walks every row of every FDE of its `.eh_frame` with gimli.
fn gimli_floor(path: &str) -> u64 {
    let Ok(data) = std::fs::read(path) else {
        return 0;
    };
    let Ok(file) = object::File::parse(&*data) else {
        return 0;
    };
    let Some(section) = file.section_by_name(".eh_frame") else {
        return 0;
    };
    let Ok(bytes) = section.data() else { return 0 };
    let mut eh = EhFrame::new(bytes, LittleEndian);
    eh.set_address_size(8);
    let bases = BaseAddresses::default().set_eh_frame(section.address());
    let mut ctx = UnwindContext::new();
    let mut rows = 0u64;
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else {
            continue;
        };
        let Ok(mut table) = fde.rows(&eh, &bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(row)) = table.next_row() {
            black_box(row.cfa());
            rows += 1;
        }
    }
    rows
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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, path] = &args[..] {
        if flag == "--dlopen" {
            dlopen_refresh(path);
            return;
        }
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
        let (mut build, mut floor) = (vec![first.build_time], Vec::new());
        for _ in 0..RUNS {
            // A full rebuild: parse every module again (refresh would reuse them).
            let t = Instant::now();
            for p in &paths {
                black_box(unwind_dwarf::load_elf_file::<unwind_dwarf::X86_64>(p.as_ref()).ok());
            }
            build.push(t.elapsed());
            let t = Instant::now();
            for p in &paths {
                black_box(gimli_floor(p));
            }
            floor.push(t.elapsed());
        }
        report(
            "process",
            median(build),
            median(floor),
            first.rows(),
            first.distinct_rules(),
            first.bytes(),
            rss1.saturating_sub(rss0),
        );
        return;
    }
    for path in &args {
        let (mut build, mut floor) = (Vec::new(), Vec::new());
        let rss0 = rss();
        let mut kept = None;
        for _ in 0..RUNS {
            let t = Instant::now();
            let loaded =
                unwind_dwarf::load_elf_file::<unwind_dwarf::X86_64>(path.as_ref()).expect("load");
            build.push(t.elapsed());
            let t = Instant::now();
            black_box(gimli_floor(path));
            floor.push(t.elapsed());
            kept.get_or_insert(loaded);
        }
        let loaded = kept.expect("runs");
        let rss1 = rss();
        let name = std::path::Path::new(path)
            .file_name()
            .map_or(path.clone(), |n| n.to_string_lossy().into_owned());
        report(
            &name,
            median(build),
            median(floor),
            loaded.rules.rows(),
            loaded.rules.dictionary().len(),
            loaded.rules.bytes(),
            rss1.saturating_sub(rss0),
        );
    }
}
