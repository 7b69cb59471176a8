//! Allocation profiling (`record --alloc`, `UNWIND_PROFILER_ALLOC` with the preload library
//! alone) on a C program of known allocations (`allocations/known.c`, built with `gcc -O2 -g`):
//! six call chains, each with its own mix of sizes and entry points (small-object churn through
//! `malloc` and `free`, `calloc`, `realloc` growth, `posix_memalign` and `aligned_alloc`, blocks
//! kept live to the end, a leak through `strdup`), each printing what it allocated and what it
//! keeps live.
//!
//! At the default interval (one sample per 512 KiB), the heap profile's estimate of each
//! chain's `alloc_space` is within 10 % of what it allocated (each chain allocates 800 MiB:
//! about 1,600 samples, whose spread is 2.5 %), its `inuse_space`
//! within 10 % of what it keeps live (0 exactly for the chains that free everything: a single
//! free missed would show), every sample's stack is the chain's whole call path, from the
//! allocating function to `main` and the thread's first frame, and `go tool pprof` reads each
//! of the four sample types.
//!
//! The hazards program (`allocations/hazards.c`) does, with allocations sampled, what programs
//! do around their allocator: blocks allocated by a library's constructor before the profiler
//! started and freed at the end, threads that free what others allocated, a library
//! `dlopen`ed and `dlclose`d forty times while threads allocate (its constructor and the
//! loader allocate too), and a `fork` whose child allocates 100 MiB, keeps it and exits. Under
//! `record --alloc` it runs to its end; the threads' and the library's blocks, all freed, are
//! exactly 0 bytes live; the child's kept blocks are live in the profile (within 25 %: about
//! 200 samples).
//!
//! Real programs: python3 on a dict- and JSON-heavy script (`allocations/records.py`, with
//! `PYTHONMALLOC=malloc`: pymalloc's arenas are mapped with `mmap`, as heaptrack's and
//! valgrind's documentation say) and a C++ program of containers (`allocations/containers.cpp`:
//! `operator new` reaches the hooks through libstdc++'s `malloc`): their allocation sites are
//! named, their stacks go from the allocating function through the interpreter's or the
//! program's to `main`, and `go tool pprof` reads the profiles.
//!
//! Needs gcc, g++, python3 and go (a missing one fails under `CI=true`, skips visibly elsewhere) and the
//! release builds of the command and the preload library: `cargo build --release -p
//! unwind-profiler -p unwind-profiler-preload && cargo test --release -p unwind-profiler --test
//! allocations`.

#[path = "common/firefox.rs"]
mod firefox;
#[path = "common/record.rs"]
mod record_command;
#[allow(dead_code)]
#[path = "common/runs.rs"]
mod runs;
#[path = "common/summary.rs"]
mod summary_text;
#[path = "common/svg.rs"]
mod svg;

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use unwind_profiler::output::pprof::proto;

/// Held by each test: two profiled programs at once on a small machine would slow each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Each chain: its name as the program prints it, and its call path from the allocating
/// function (the leaf the profile shows, under the allocator's entry point) to `main`.
const CHAINS: [(&str, &[&str]); 6] = [
    ("churn", &["make_node", "churn", "main"]),
    ("calloc", &["zeroed_tables", "main"]),
    ("realloc", &["grow_buffer", "main"]),
    ("aligned", &["aligned_blocks", "main"]),
    ("kept", &["keep_live", "main"]),
    ("strdup", &["strdup", "leak_strings", "main"]),
];

/// What a chain allocated and keeps live, as the program printed it.
#[derive(Debug, Default, Clone, Copy)]
struct Truth {
    alloc: u64,
    live: u64,
}

/// Builds `known.c` into `dir`.
fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("known");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/allocations/known.c");
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success(), "gcc failed");
    exe
}

/// The program's lines `CHAIN alloc BYTES live BYTES`.
fn truths(stdout: &str) -> HashMap<String, Truth> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [chain, "alloc", alloc, "live", live] => Some((
                    chain.to_owned(),
                    Truth {
                        alloc: alloc.parse().ok()?,
                        live: live.parse().ok()?,
                    },
                )),
                _ => None,
            }
        })
        .collect()
}

/// The CPU timers the known program held at its end (its line `timers N`).
fn timers(stdout: &str) -> usize {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("timers ")?.trim().parse().ok())
        .expect("the program's timers line")
}

/// A function's name without the suffixes gcc gives its clones (`churn.constprop.0`) and with
/// the C library's internal aliases as the public name (`__GI___strdup`, `__strdup`).
fn plain(name: &str) -> String {
    let base = name.split('.').next().unwrap_or(name);
    let base = base.strip_prefix("__GI_").unwrap_or(base);
    base.trim_start_matches('_').to_owned()
}

/// A heap profile's samples: each stack's function names (leaf first, inlined frames
/// expanded) and its four values.
fn heap_samples(profile: &proto::Profile) -> Vec<(Vec<String>, [i64; 4])> {
    let strings = &profile.string_table;
    let functions: HashMap<u64, &str> = profile
        .function
        .iter()
        .map(|f| (f.id, strings[f.name as usize].as_str()))
        .collect();
    let locations: HashMap<u64, Vec<String>> = profile
        .location
        .iter()
        .map(|l| {
            let names = l
                .line
                .iter()
                .map(|line| plain(functions.get(&line.function_id).copied().unwrap_or("")))
                .collect();
            (l.id, names)
        })
        .collect();
    profile
        .sample
        .iter()
        .map(|s| {
            let stack = s
                .location_id
                .iter()
                .flat_map(|id| locations.get(id).cloned().unwrap_or_default())
                .collect();
            let v = &s.value;
            (stack, [v[0], v[1], v[2], v[3]])
        })
        .collect()
}

/// Whether `stack` (leaf first) is `path` whole, then glibc's start of the program.
fn whole_under_glibc(stack: &[String], path: &[&str]) -> bool {
    stack.len() > path.len()
        && stack[..path.len()] == path.iter().map(|s| s.to_string()).collect::<Vec<_>>()[..]
        && stack[path.len()..]
            .iter()
            .any(|f| f == "libc_start_call_main" || f == "libc_start_main")
        && stack.last().is_some_and(|f| f == "start")
}

/// Reads the heap profile in `out` and checks it against the program's own account (see the
/// module docs), each sampled stack with [`whole_under_glibc`].
fn check_heap(out: &Path, truth: &HashMap<String, Truth>) {
    check_heap_with(out, truth, &whole_under_glibc)
}

/// [`check_heap`], each sampled stack checked by `whole(stack, path)`.
fn check_heap_with(
    out: &Path,
    truth: &HashMap<String, Truth>,
    whole: &dyn Fn(&[String], &[&str]) -> bool,
) {
    let profile = heap_profile(out);
    let types: Vec<(&str, &str)> = profile
        .sample_type
        .iter()
        .map(|t| {
            (
                profile.string_table[t.r#type as usize].as_str(),
                profile.string_table[t.unit as usize].as_str(),
            )
        })
        .collect();
    assert_eq!(
        types,
        [
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes")
        ]
    );
    assert_eq!(profile.period, 512 * 1024);
    let samples = heap_samples(&profile);
    let mut estimates: HashMap<&str, [i64; 4]> = HashMap::new();
    let mut other = [0i64; 4];
    let mut wrong = Vec::new();
    for (stack, values) in &samples {
        let chain = CHAINS
            .iter()
            .find(|(_, path)| stack.iter().any(|f| f == path[0]));
        let Some((name, path)) = chain else {
            for (o, v) in other.iter_mut().zip(values) {
                *o += v;
            }
            continue;
        };
        // The whole path, from the allocating function to `main`, then the thread's start.
        if !whole(stack, path) {
            wrong.push(stack.clone());
        }
        let e = estimates.entry(name).or_default();
        for (e, v) in e.iter_mut().zip(values) {
            *e += v;
        }
    }
    for (name, _) in CHAINS {
        let t = truth[name];
        let e = estimates.get(name).copied().unwrap_or_default();
        println!(
            "{name:>8}: alloc {} estimated {} ({:+.1}%), live {} estimated {}",
            t.alloc,
            e[1],
            (e[1] as f64 / t.alloc as f64 - 1.0) * 100.0,
            t.live,
            e[3]
        );
    }
    println!("other sites: {other:?}");
    assert!(wrong.is_empty(), "stacks not whole or not right: {wrong:?}");
    for (name, _) in CHAINS {
        let t = truth[name];
        let e = estimates.get(name).copied().unwrap_or_default();
        let off = |estimate: i64, truth: u64| (estimate as f64 / truth as f64 - 1.0).abs();
        assert!(
            off(e[1], t.alloc) <= 0.10,
            "{name}: alloc_space {} for {} allocated",
            e[1],
            t.alloc
        );
        if t.live == 0 {
            assert_eq!(
                e[3], 0,
                "{name} freed everything, but inuse_space is {}",
                e[3]
            );
        } else {
            assert!(
                off(e[3], t.live) <= 0.10,
                "{name}: inuse_space {} for {} live",
                e[3],
                t.live
            );
        }
    }
    // What the program did not allocate itself (stdio's buffer) is a sliver.
    let all: i64 = estimates.values().map(|e| e[1]).sum();
    assert!(other[1] * 100 < all, "{other:?} of {all} elsewhere");
}

/// `go tool pprof -top -sample_index=TYPE` on the heap profile: each type is read, and the
/// chain that leads it is the one the program's account says.
fn check_with_go_pprof(out: &Path) {
    for (index, leader) in [
        ("alloc_space", None),
        ("alloc_objects", Some("make_node")),
        // keep_live and strdup keep as much.
        ("inuse_space", None),
        ("inuse_objects", Some("strdup")),
    ] {
        let top = Command::new("go")
            .args(["tool", "pprof", "-top", &format!("-sample_index={index}")])
            .arg(out.join("profile.heap.pb.gz"))
            .env("PPROF_TMPDIR", out)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&top.stdout);
        assert!(
            top.status.success(),
            "{}",
            String::from_utf8_lossy(&top.stderr)
        );
        let first = text
            .lines()
            .skip_while(|l| !l.contains("flat%"))
            .nth(1)
            .unwrap_or_default();
        println!("-sample_index={index}: {first}");
        if let Some(leader) = leader {
            assert!(first.contains(leader), "{index}: {text}");
        }
    }
}

#[test]
fn record_alloc_estimates_each_chain_and_what_stays_live() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !runs::have(&[("gcc", &["--version"]), ("go", &["version"])]) {
        return;
    }
    let dir = runs::scratch("allocations-record");
    let exe = build(&dir);
    let out = dir.join("out");
    let mut cmd = runs::record(&out, &["--alloc"], &[exe.to_str().unwrap()]);
    let (stdout, _) = run_bounded(&mut cmd, &dir);
    let truth = truths(&stdout);
    assert_eq!(truth.len(), CHAINS.len());
    // The program sees the CPU profiler's timer (which --alloc-only never makes).
    assert!(timers(&stdout) > 0, "{stdout}");
    let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
    assert!(
        !summary.contains("allocation samples not taken"),
        "{summary}"
    );
    check_heap(&out, &truth);
    check_with_go_pprof(&out);
    // The CPU profile is written as ever, beside it.
    assert!(runs::check_outputs_and("record --alloc", &out, 3) > 0);
    // The flame graphs of bytes allocated and live: each chain that allocates is in the first,
    // only those that keep blocks in the second.
    let alloc_svg = svg::svg_text(&std::fs::read_to_string(out.join("profile.alloc.svg")).unwrap());
    let inuse_svg = svg::svg_text(&std::fs::read_to_string(out.join("profile.inuse.svg")).unwrap());
    for f in [
        "make_node",
        "zeroed_tables",
        "grow_buffer",
        "aligned_blocks",
        "keep_live",
        "leak_strings",
    ] {
        assert!(
            alloc_svg.contains(f),
            "{f} not in the allocation flame graph"
        );
    }
    for f in ["keep_live", "leak_strings"] {
        assert!(inuse_svg.contains(f), "{f} not in the live flame graph");
    }
    for f in [
        "make_node",
        "zeroed_tables",
        "grow_buffer",
        "aligned_blocks",
    ] {
        assert!(
            !inuse_svg.contains(f),
            "{f} freed all, but is in the live flame graph"
        );
    }
}

/// Runs `cmd` (its stdout to `dir/stdout`), killing it if it hangs ([`runs::HANG`]), and
/// checks that it succeeded; returns its stdout and stderr.
#[test]
fn record_alloc_only_samples_allocations_and_not_cpu_time() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !runs::have(&[("gcc", &["--version"])]) {
        return;
    }
    let dir = runs::scratch("allocations-alone-record");
    let exe = build(&dir);
    let out = dir.join("out");
    let mut cmd = runs::record(&out, &["--alloc-only"], &[exe.to_str().unwrap()]);
    let (stdout, stderr) = run_bounded(&mut cmd, &dir);
    let truth = truths(&stdout);
    assert_eq!(truth.len(), CHAINS.len());
    check_heap(&out, &truth);
    assert_eq!(timers(&stdout), 0, "CPU timers with --alloc-only");
    assert!(
        stderr.contains("allocations alone") && stderr.contains("CPU not sampled (--alloc-only)"),
        "{stderr}"
    );
    let summary = std::fs::read_to_string(out.join("profile.summary.txt")).unwrap();
    assert!(
        summary.contains("\nCPU               not sampled"),
        "{summary}"
    );
    assert!(!summary.contains("CPU time was not sampled"), "{summary}");
    // No timer ran: the CPU profile is written, and holds no sample.
    let bytes = std::fs::read(out.join("profile.pb.gz")).unwrap();
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut raw).unwrap();
    let cpu = proto::Profile::decode(&raw[..]).unwrap();
    assert_eq!(cpu.sample.len(), 0, "CPU samples with --alloc-only");
}

/// musl's `calloc`, `realloc` and aligned functions call its `malloc` (or each other), which
/// the hooks interpose too: each allocation must still count once, and each chain's estimate
/// stay within 10 %.
#[test]
#[cfg(target_arch = "x86_64")]
fn record_alloc_of_a_musl_program_counts_each_allocation_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !runs::have(&[("musl-gcc", &["--version"])]) {
        return;
    }
    let dir = runs::scratch("allocations-musl");
    let exe = dir.join("known-musl");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/allocations/known.c");
    // Linked as Alpine's gcc links (Debian's musl-gcc wrapper leaves these out).
    let status = Command::new("musl-gcc")
        .args(["-O2", "-g", "-Wl,--eh-frame-hdr", "-Wl,--build-id", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success(), "musl-gcc failed");
    let out = dir.join("out");
    let mut cmd = runs::record(&out, &["--alloc"], &[exe.to_str().unwrap()]);
    let (stdout, _) = run_bounded(&mut cmd, &dir);
    let truth = truths(&stdout);
    assert_eq!(truth.len(), CHAINS.len());
    // musl builds its own code without unwind tables: a walk ends in it, counted (`main`'s
    // caller in musl's start, or `strdup`, which called `malloc`), never past it.
    let musl_name = |f: &String| f.starts_with("ld-musl");
    check_heap_with(&out, &truth, &|stack, path| {
        let through = stack.len() >= path.len()
            && stack[..path.len()] == path.iter().map(|s| s.to_string()).collect::<Vec<_>>()[..]
            && stack[path.len()..].iter().all(musl_name)
            && stack.len() > path.len();
        through || (path[0] == "strdup" && stack == ["strdup"])
    });
}

fn run_bounded(cmd: &mut Command, dir: &Path) -> (String, String) {
    let path = dir.join("stdout");
    cmd.stdout(std::fs::File::create(&path).unwrap());
    let (status, stderr) = runs::run(cmd, None);
    let stdout = std::fs::read_to_string(&path).unwrap();
    assert!(status.success(), "{status}: {stdout}{stderr}");
    (stdout, stderr)
}

/// Builds the hazards program and its two libraries into `dir`; returns the program.
fn build_hazards(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/allocations");
    let gcc = |args: &[&str]| {
        let status = Command::new("gcc")
            .current_dir(dir)
            .args(["-O2", "-g"])
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "gcc {args:?} failed");
    };
    let early = src.join("early.c");
    let plugin = src.join("plugin.c");
    let hazards = src.join("hazards.c");
    gcc(&[
        "-shared",
        "-fPIC",
        "-o",
        "libearly.so",
        early.to_str().unwrap(),
    ]);
    gcc(&[
        "-shared",
        "-fPIC",
        "-o",
        "libplugin.so",
        plugin.to_str().unwrap(),
    ]);
    gcc(&[
        "-o",
        "hazards",
        hazards.to_str().unwrap(),
        "-L.",
        "-learly",
        "-Wl,-rpath,$ORIGIN",
        "-lpthread",
        "-ldl",
    ]);
    dir.join("hazards")
}

#[test]
fn record_alloc_through_threads_dlopen_fork_and_early_allocations() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !runs::have(&[("gcc", &["--version"])]) {
        return;
    }
    let dir = runs::scratch("allocations-hazards");
    let exe = build_hazards(&dir);
    let plugin = dir.join("libplugin.so");
    let out = dir.join("out");
    let mut cmd = runs::record(
        &out,
        &["--alloc"],
        &[exe.to_str().unwrap(), plugin.to_str().unwrap()],
    );
    let (stdout, _) = run_bounded(&mut cmd, &dir);
    assert!(stdout.contains("hazards ok"), "{stdout}");
    let kept: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("child kept "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    let profile = heap_profile(&out);
    let mut by_function: HashMap<&str, [i64; 2]> = HashMap::new();
    for (stack, values) in heap_samples(&profile) {
        for f in ["produce", "plugin_work", "plugin_start", "child_work"] {
            if stack.iter().any(|s| s == f) {
                let e = by_function.entry(f).or_default();
                e[0] += values[1];
                e[1] += values[3];
            }
        }
    }
    println!("{by_function:?}, child kept {kept}");
    for f in ["produce", "plugin_work"] {
        let [allocated, live] = by_function.get(f).copied().unwrap_or_default();
        assert!(allocated > 0, "{f}: nothing allocated: {by_function:?}");
        assert_eq!(live, 0, "{f}: everything was freed: {by_function:?}");
    }
    let [_, child_live] = by_function.get("child_work").copied().unwrap_or_default();
    assert!(
        (child_live as f64 / kept as f64 - 1.0).abs() <= 0.25,
        "child_work: {child_live} live of {kept} kept"
    );
}

/// The heap profile in `out`: each sample's stack (function names, leaf first) and values.
fn read_heap(out: &Path) -> Vec<(Vec<String>, [i64; 4])> {
    heap_samples(&heap_profile(out))
}

/// The heap profile in `out`, decoded.
fn heap_profile(out: &Path) -> proto::Profile {
    let bytes = std::fs::read(out.join("profile.heap.pb.gz")).unwrap();
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut raw).unwrap();
    proto::Profile::decode(&raw[..]).unwrap()
}

/// The bytes allocated at sites whose stack holds every one of `functions` (each the start of a
/// name: `work::build_map` for `work::build_map[abi:cxx11](int)`).
fn allocated_under(samples: &[(Vec<String>, [i64; 4])], functions: &[&str]) -> i64 {
    samples
        .iter()
        .filter(|(stack, _)| {
            functions
                .iter()
                .all(|f| stack.iter().any(|s| s.starts_with(f)))
        })
        .map(|(_, v)| v[1])
        .sum()
}

#[test]
fn python_and_cpp_allocations_are_named_where_they_were_made() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !runs::have(&[
        ("g++", &["--version"]),
        ("python3", &["--version"]),
        ("go", &["version"]),
    ]) {
        return;
    }
    let dir = runs::scratch("allocations-real");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/allocations");

    let out = dir.join("python");
    let script = src.join("records.py");
    let mut cmd = runs::record(
        &out,
        &["--alloc"],
        &[
            "env",
            "PYTHONMALLOC=malloc",
            "python3",
            script.to_str().unwrap(),
        ],
    );
    let (stdout, _) = run_bounded(&mut cmd, &dir);
    assert!(stdout.contains("records kept 24000"), "{stdout}");
    let python = read_heap(&out);
    let all: i64 = python.iter().map(|(_, v)| v[1]).sum();
    let interpreted = allocated_under(&python, &["PyEval_EvalFrameDefault", "Py_BytesMain"]);
    let encoder = allocated_under(
        &python,
        &["encoder_listencode_obj", "PyEval_EvalFrameDefault"],
    );
    let decoder = allocated_under(&python, &["scan_once_unicode", "PyEval_EvalFrameDefault"]);
    let dicts = allocated_under(&python, &["new_keys_object", "PyEval_EvalFrameDefault"]);
    println!(
        "python3: {all} bytes, {interpreted} under the interpreter, json encoder {encoder}, \
         decoder {decoder}, dict tables {dicts}"
    );
    // The script's work is nearly all of it (the rest: the shim's shell, the interpreter's
    // start); json's encoder and decoder and dicts' tables are each a visible share.
    assert!(interpreted * 10 > all * 8, "{interpreted} of {all}");
    for (what, n) in [("encoder", encoder), ("decoder", decoder), ("dicts", dicts)] {
        assert!(n * 100 > all, "{what}: {n} of {all}");
    }
    check_with_go_pprof_reads(&out);

    let exe = dir.join("containers");
    let status = Command::new("g++")
        .args(["-O2", "-g", "-o"])
        .arg(&exe)
        .arg(src.join("containers.cpp"))
        .status()
        .unwrap();
    assert!(status.success());
    let out = dir.join("cpp");
    let mut cmd = runs::record(&out, &["--alloc"], &[exe.to_str().unwrap()]);
    let (stdout, _) = run_bounded(&mut cmd, &dir);
    assert!(stdout.contains("containers ok"), "{stdout}");
    let cpp = read_heap(&out);
    let all: i64 = cpp.iter().map(|(_, v)| v[1]).sum();
    let through_new: i64 = cpp
        .iter()
        .filter(|(stack, _)| stack.first().is_some_and(|f| f.starts_with("operator new")))
        .map(|(_, v)| v[1])
        .sum();
    let functions = [
        "work::build_strings",
        "work::build_map",
        "work::churn_shared",
    ];
    let each: Vec<i64> = functions
        .iter()
        .map(|f| allocated_under(&cpp, &[f, "main"]))
        .collect();
    let live_map: i64 = cpp
        .iter()
        .filter(|(stack, _)| stack.iter().any(|s| s.starts_with("work::build_map")))
        .map(|(_, v)| v[3])
        .sum();
    println!("C++: {all} bytes, {through_new} through operator new, {each:?}, map live {live_map}");
    assert!(through_new * 100 > all * 99, "{through_new} of {all}");
    assert!(each.iter().all(|&n| n > 0), "{each:?}");
    assert!(
        each.iter().sum::<i64>() * 100 > all * 99,
        "{each:?} of {all}"
    );
    assert!(live_map > 0, "the kept map is not live");
    check_with_go_pprof_reads(&out);
}

/// `go tool pprof -top -sample_index=TYPE` reads each of the four types of the heap profile.
fn check_with_go_pprof_reads(out: &Path) {
    for index in [
        "alloc_objects",
        "alloc_space",
        "inuse_objects",
        "inuse_space",
    ] {
        let top = Command::new("go")
            .args(["tool", "pprof", "-top", &format!("-sample_index={index}")])
            .arg(out.join("profile.heap.pb.gz"))
            .env("PPROF_TMPDIR", out)
            .output()
            .unwrap();
        assert!(
            top.status.success(),
            "{index}: {}",
            String::from_utf8_lossy(&top.stderr)
        );
        assert!(String::from_utf8_lossy(&top.stdout).contains(&format!("Type: {index}")));
    }
}

#[test]
fn the_preload_library_alone_samples_allocations_too() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !runs::have(&[("gcc", &["--version"])]) {
        return;
    }
    let dir = runs::scratch("allocations-alone");
    let exe = build(&dir);
    let out = dir.join("out");
    let library = record_command::release_dir().join("libunwind_profiler_preload_alloc.so");
    let mut cmd = Command::new(&exe);
    cmd.env("LD_PRELOAD", &library)
        .env("UNWIND_PROFILER_ALLOC", "1")
        .env("UNWIND_PROFILER_OUTPUT", &out)
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let (stdout, _) = run_bounded(&mut cmd, &dir);
    let truth = truths(&stdout);
    assert_eq!(truth.len(), CHAINS.len());
    check_heap(&out, &truth);

    // The library without the hooks defines no allocator function (CPU profiling pays nothing
    // for them), and says that it samples no allocations when asked to.
    let plain = record_command::release_dir().join("libunwind_profiler_preload.so");
    let bytes = std::fs::read(&plain).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let defined: Vec<String> = object::Object::dynamic_symbols(&file)
        .filter(object::ObjectSymbol::is_definition)
        .filter_map(|s| object::ObjectSymbol::name(&s).ok().map(str::to_owned))
        .collect();
    for f in ["malloc", "free", "calloc", "realloc", "posix_memalign"] {
        assert!(
            !defined.iter().any(|d| d == f),
            "{} defines {f}",
            plain.display()
        );
    }
    let hooks_file = std::fs::read(&library).unwrap();
    let hooks = object::File::parse(&*hooks_file).unwrap();
    assert!(object::Object::dynamic_symbols(&hooks)
        .any(|s| object::ObjectSymbol::name(&s) == Ok("malloc")
            && object::ObjectSymbol::is_definition(&s)));
    let plain_out = dir.join("plain");
    let mut cmd = Command::new(&exe);
    cmd.arg("10")
        .env("LD_PRELOAD", &plain)
        .env("UNWIND_PROFILER_ALLOC", "1")
        .env("UNWIND_PROFILER_OUTPUT", &plain_out)
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let (_, stderr) = run_bounded(&mut cmd, &dir);
    assert!(
        stderr.contains("allocations are sampled by libunwind_profiler_preload_alloc.so"),
        "{stderr}"
    );
    assert!(!plain_out.join("profile.heap.pb.gz").exists());
    assert!(plain_out.join("profile.pb.gz").exists());
}
