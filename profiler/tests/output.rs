//! Every output format, written from a small hand-built profile and read back: the folded text
//! exactly, the SVG as XML, the pprof protobuf decoded (and read by `go tool pprof`), the Firefox
//! JSON checked for the structure the Firefox Profiler reads, the summary's numbers.
//!
//! fxprof-processed-profile 0.8 has no validation of its own (it only builds and serializes),
//! so [`check_firefox`] checks what the Firefox Profiler relies on: the version fields, every
//! table's columns as long as its `length`, every index in range, prefixes before their stacks.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

#[path = "common/firefox.rs"]
mod firefox;
#[path = "common/svg.rs"]
mod svg;

use firefox::check_firefox;
use prost::Message;
use serde_json::Value;
use svg::svg_text;
use unwind_profiler::output::{self, folded, pprof, summary, Outputs};
use unwind_profiler::profile::{
    totals_of, Counters, Frame, Location, Module, Profile, Sample, Thread,
};

const MS: Duration = Duration::from_millis(1);
const PERIOD_NS: i64 = 10_000_000;
const PROGRAM: &str = "/opt/demo/bin/demo";
const LIB: &str = "/opt/demo/lib/libdemo.so";

fn frame(function: &str, file: Option<&str>, line: Option<u32>) -> Frame {
    Frame {
        function: function.to_string(),
        file: file.map(str::to_string),
        line,
    }
}

fn location(address: u64, module: Option<usize>, frames: Vec<Frame>) -> Location {
    Location {
        address,
        module,
        frames,
    }
}

/// The rust-style name with a `;`, which the folded format must replace.
const WORKER: &str = "worker::run<[u8; 4]>";

/// Two threads; an inlined function (`helper` in `compute`); an address in no module; recursion
/// (`recurse` three times on one stack, at two addresses); one stack sampled on both threads.
fn sample_profile() -> Profile {
    let demo_c = Some("/src/demo.c");
    let locations = vec![
        /* 0 */ location(0x1100, Some(0), vec![frame("main", demo_c, Some(10))]),
        /* 1 */
        location(
            0x1200,
            Some(0),
            vec![
                frame("helper", Some("/src/util.h"), Some(5)),
                frame("compute", demo_c, Some(20)),
            ],
        ),
        /* 2 */ location(0x1300, Some(0), vec![frame("recurse", demo_c, Some(30))]),
        /* 3 */ location(0x1310, Some(0), vec![frame("recurse", demo_c, Some(31))]),
        /* 4 */ location(0x7f00_0000_1500, Some(1), vec![frame("memcpy", None, None)]),
        /* 5 */ location(0xdead_0000, None, vec![frame("0xdead0000", None, None)]),
        /* 6 */ location(0x1400, Some(0), vec![frame(WORKER, demo_c, Some(40))]),
        /* 7 */
        location(
            0x7f00_0000_1600,
            Some(1),
            vec![frame("start_thread", None, None)],
        ),
    ];
    let stacks = vec![
        /* 0 */ vec![1, 0],
        /* 1 */ vec![2, 3, 3, 0],
        /* 2 */ vec![4, 1, 0],
        /* 3 */ vec![5, 6, 7],
        /* 4 */ vec![4, 6, 7],
        /* 5 */ vec![6, 7],
    ];
    // (thread, stack) in time order per thread.
    let main = [0, 0, 1, 0, 2, 1];
    let worker = [3, 4, 0, 3, 4, 5];
    let mut samples = Vec::new();
    for (i, &stack) in main.iter().enumerate() {
        samples.push(Sample {
            thread: 0,
            time: MS * (10 * i as u32),
            weight: 1,
            stack,
        });
    }
    for (i, &stack) in worker.iter().enumerate() {
        samples.push(Sample {
            thread: 1,
            time: MS * (10 * i as u32 + 5),
            weight: 1,
            stack,
        });
    }
    Profile {
        program: PROGRAM.to_string(),
        pid: 100,
        start: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        duration: MS * 70,
        interval: MS * 10,
        wall_clock: false,
        modules: vec![
            Module {
                path: PROGRAM.to_string(),
                start: 0x1000,
                end: 0x9000,
                bias: 0,
                file_offset: 0x1000,
                build_id: "0123456789abcdef0123456789abcdef01234567".to_string(),
                generated: false,
            },
            Module {
                path: LIB.to_string(),
                start: 0x7f00_0000_1000,
                end: 0x7f00_0000_9000,
                bias: 0x7f00_0000_0000,
                file_offset: 0x1000,
                build_id: String::new(),
                generated: false,
            },
        ],
        locations,
        stacks,
        threads: vec![
            Thread {
                tid: 100,
                name: "demo".to_string(),
                pid: 100,
                process: "demo".to_string(),
            },
            Thread {
                tid: 101,
                name: "worker".to_string(),
                pid: 100,
                process: "demo".to_string(),
            },
        ],
        totals: totals_of(&samples),
        samples,
        counters: Counters {
            signals: 15,
            stored: 12,
            dropped: vec![("no-memory".to_string(), 2), ("busy".to_string(), 1)],
            merged_expirations: 7,
            perf_unsignalled: 0,
            sampled_cpu: Duration::from_millis(125),
            timers: vec![("timer_create".to_string(), 2)],
            foreign_signals: 0,
            threads_not_sampled: vec![("thread limit".to_string(), 0)],
            stops: vec![("end-of-stack".to_string(), 10), ("no-rule".to_string(), 2)],
            frames: 40,
            stack_scanning: true,
            cpu_not_sampled: false,
            scanned_frames: 3,
            cache_hits: 90,
            cache_misses: 10,
            unwind_time: Duration::from_nanos(24_000),
            store_time: Duration::from_nanos(1_200),
            preload_time: MS * 5,
            table_bytes: 4096,
            table_rows: 128,
            refreshes: 1,
            collector_cpu: Duration::from_micros(6),
            threads: 2,
            refused: vec![(
                "process 7 (demo): thread rings written over (a record of 16777216 words): not read from there on".to_string(),
                1,
            )],
            process_cpu: MS * 150,
            unsampled_cpu: MS * 25,
            lifetime_cpu: MS * 160,
            descendants_cpu: Some(MS * 170),
            program_actions: 0,
            jit_names_dropped: 0,
            go_programs: (0, 0),
            reconnections: 0,
            timers_rearmed: 0,
            profiler_work: Vec::new(),
            periods: None,
            recorder_cpu: None,
        },
        heap: None,
        names: Vec::new(),
    }
}

fn empty_profile() -> Profile {
    let mut p = Profile::empty(String::new(), 0, UNIX_EPOCH, Duration::ZERO);
    p.wall_clock = true;
    p
}

/// A fresh directory for one test's files.
fn out_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "unwind-profiler-output-{}-{test}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn gunzip(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    // The Firefox Profiler and pprof recognize gzip by these bytes (deflate method included).
    assert_eq!(
        &bytes[..3],
        &[0x1f, 0x8b, 0x08],
        "{} is not gzip",
        path.display()
    );
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Expected stacks, root first, joined by `;`, with their counts per thread id: computed from
/// the fixture's definition above by hand, not by the code under test.
fn expected_stacks_per_thread() -> BTreeMap<(i64, String), i64> {
    let s0 = "main;compute;helper";
    let s1 = "main;recurse;recurse;recurse";
    let s2 = "main;compute;helper;memcpy";
    let s3 = format!("start_thread;{WORKER};0xdead0000");
    let s4 = format!("start_thread;{WORKER};memcpy");
    let s5 = format!("start_thread;{WORKER}");
    BTreeMap::from([
        ((100, s0.to_string()), 3),
        ((100, s1.to_string()), 2),
        ((100, s2.to_string()), 1),
        ((101, s0.to_string()), 1),
        ((101, s3), 2),
        ((101, s4), 2),
        ((101, s5), 1),
    ])
}

#[test]
fn folded_text_is_exact() {
    let text: String = folded::lines(&sample_profile())
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        text,
        "main;compute;helper 4\n\
         main;recurse;recurse;recurse 2\n\
         start_thread;worker::run<[u8: 4]>;0xdead0000 2\n\
         start_thread;worker::run<[u8: 4]>;memcpy 2\n\
         main;compute;helper;memcpy 1\n\
         start_thread;worker::run<[u8: 4]> 1\n"
    );
    // Read back: the frames root first, and the counts.
    let parsed = folded::parse(&text);
    assert_eq!(parsed.len(), 6);
    assert_eq!(
        parsed[0],
        (vec!["main".into(), "compute".into(), "helper".into()], 4)
    );
    assert_eq!(
        parsed[5].0.last().map(String::as_str),
        Some("worker::run<[u8: 4]>")
    );
    assert_eq!(parsed.iter().map(|(_, n)| n).sum::<u64>(), 12);
}

#[test]
fn top_functions_by_self_and_total() {
    let top = summary::top_functions(&sample_profile(), 15);
    let pairs = |list: &[summary::FunctionCount]| {
        list.iter()
            .map(|f| (f.name.clone(), f.samples))
            .collect::<Vec<_>>()
    };
    let s = |name: &str, n| (name.to_string(), n);
    assert_eq!(top.samples, 12);
    assert_eq!(
        pairs(&top.by_self),
        [
            s("helper", 4),
            s("memcpy", 3),
            s("0xdead0000", 2),
            s("recurse", 2),
            s(WORKER, 1)
        ]
    );
    // `recurse` is three deep on its stack but counts once per sample.
    assert_eq!(
        pairs(&top.by_total),
        [
            s("main", 7),
            s("compute", 5),
            s("helper", 5),
            s("start_thread", 5),
            s(WORKER, 5),
            s("memcpy", 3),
            s("0xdead0000", 2),
            s("recurse", 2)
        ]
    );
    assert_eq!(
        summary::top_functions(&sample_profile(), 2).by_total.len(),
        2
    );
}

#[test]
fn flamegraph_is_svg_with_the_functions() {
    let mut svg = Vec::new();
    output::flamegraph::write(&sample_profile(), &mut svg).unwrap();
    let text = svg_text(&String::from_utf8(svg).unwrap());
    assert!(text.contains("demo: 12 samples"), "title missing:\n{text}");
    for name in [
        "main",
        "compute",
        "helper",
        "recurse",
        "memcpy",
        "0xdead0000",
        "start_thread",
        "worker::run<[u8: 4]>",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{name} ("))),
            "{name} missing from the SVG:\n{text}"
        );
    }
}

fn decode_pprof(path: &Path) -> pprof::proto::Profile {
    pprof::proto::Profile::decode(&gunzip(path)[..]).expect("not a pprof profile")
}

#[test]
fn pprof_decodes_and_agrees_with_the_model() {
    let dir = out_dir("pprof");
    let model = sample_profile();
    let outputs = output::write_all(&model, &dir, "p").unwrap();
    let p = decode_pprof(&outputs.pprof);
    let s = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!(s(0), "");
    let types: Vec<_> = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    let period_type = p.period_type.as_ref().unwrap();
    assert_eq!(
        (s(period_type.r#type), s(period_type.unit)),
        ("cpu", "nanoseconds")
    );
    assert_eq!(p.period, PERIOD_NS);
    assert_eq!(p.time_nanos, 1_700_000_000_000_000_000);
    assert_eq!(p.duration_nanos, 70_000_000);

    // Mappings: the program first, with what the locations' frames say.
    assert_eq!(p.mapping.len(), 2);
    let m0 = &p.mapping[0];
    assert_eq!(
        (m0.id, s(m0.filename), m0.memory_start, m0.memory_limit),
        (1, PROGRAM, 0x1000, 0x9000)
    );
    assert_eq!(m0.file_offset, 0x1000, "the file offset of memory_start");
    assert_eq!(s(m0.build_id), "0123456789abcdef0123456789abcdef01234567");
    assert!(m0.has_functions && m0.has_filenames && m0.has_line_numbers && m0.has_inline_frames);
    let m1 = &p.mapping[1];
    assert_eq!((m1.id, s(m1.filename), s(m1.build_id)), (2, LIB, ""));
    assert!(m1.has_functions && !m1.has_filenames && !m1.has_line_numbers && !m1.has_inline_frames);

    // Functions: one per distinct (name, file).
    let functions: HashMap<u64, (&str, &str)> = p
        .function
        .iter()
        .map(|f| (f.id, (s(f.name), s(f.filename))))
        .collect();
    assert_eq!(functions.len(), p.function.len(), "function ids not unique");
    let mut names: Vec<_> = functions.values().copied().collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("0xdead0000", ""),
            ("compute", "/src/demo.c"),
            ("helper", "/src/util.h"),
            ("main", "/src/demo.c"),
            ("memcpy", ""),
            ("recurse", "/src/demo.c"),
            ("start_thread", ""),
            (WORKER, "/src/demo.c"),
        ]
    );

    // Locations: one per model location, lines innermost first.
    assert_eq!(p.location.len(), model.locations.len());
    let locations: HashMap<u64, &pprof::proto::Location> =
        p.location.iter().map(|l| (l.id, l)).collect();
    for (loc, model_loc) in p.location.iter().zip(&model.locations) {
        assert_eq!(loc.address, model_loc.address);
        let mapping = p.mapping.iter().find(|m| m.id == loc.mapping_id);
        assert_eq!(
            mapping.map(|m| s(m.filename)),
            model_loc.module.map(|m| model.modules[m].path.as_str())
        );
        let lines: Vec<_> = loc
            .line
            .iter()
            .map(|l| (functions[&l.function_id].0, l.line))
            .collect();
        let expected: Vec<_> = model_loc
            .frames
            .iter()
            .map(|f| (f.function.as_str(), f.line.map_or(0, i64::from)))
            .collect();
        assert_eq!(lines, expected);
    }
    assert_eq!(
        locations[&2].line.len(),
        2,
        "helper inlined into compute: two lines"
    );

    // Samples: aggregated per (stack, thread), values [count, count × period], thread labels.
    assert_eq!(p.sample.len(), 7);
    let mut stacks = BTreeMap::new();
    for sample in &p.sample {
        assert_eq!(sample.value.len(), 2);
        assert_eq!(sample.value[1], sample.value[0] * PERIOD_NS);
        let label = |key: &str| sample.label.iter().find(|l| s(l.key) == key).unwrap();
        let tid = label("thread_id").num;
        let name = s(label("thread").str);
        assert_eq!(name, if tid == 100 { "demo" } else { "worker" });
        // The process: its id and its program's file name.
        assert_eq!(label("pid").num, 100);
        assert_eq!(s(label("process").str), PROGRAM.rsplit('/').next().unwrap());
        let mut frames = Vec::new();
        for id in sample.location_id.iter().rev() {
            for line in locations[id].line.iter().rev() {
                frames.push(functions[&line.function_id].0);
            }
        }
        *stacks.entry((tid, frames.join(";"))).or_insert(0) += sample.value[0];
    }
    assert_eq!(stacks, expected_stacks_per_thread());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rows of `go tool pprof -top` output: (flat%, name) for every function with flat samples,
/// in pprof's order.
fn pprof_top_rows(stdout: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in stdout.lines() {
        if line.contains("flat%") && line.contains("cum%") {
            in_table = true;
            continue;
        }
        if !in_table || line.trim().is_empty() {
            continue;
        }
        // flat flat% sum% cum cum% name (the name may hold spaces).
        let mut rest = line.trim_start();
        let mut fields = Vec::new();
        for _ in 0..5 {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            fields.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
        if fields[0] != "0" {
            // pprof marks a function seen only inlined at the leaf.
            let name = rest.strip_suffix(" (inline)").unwrap_or(rest);
            rows.push((fields[1].to_string(), name.to_string()));
        }
    }
    rows
}

#[test]
fn go_tool_pprof_top_matches_the_summary() {
    if !unwind_test_support::tool_runs_with("go", &["version"]) {
        unwind_test_support::missing("go (golang), for go tool pprof");
        return;
    }
    let dir = out_dir("go-pprof");
    let model = sample_profile();
    let outputs = output::write_all(&model, &dir, "p").unwrap();
    let stdout = go_pprof(&["-top", "-nodecount=20"], &outputs.pprof);
    let top = summary::top_functions(&model, 20);
    let expected: Vec<(String, String)> = top
        .by_self
        .iter()
        .map(|f| (summary::percent(f.samples, top.samples), f.name.clone()))
        .collect();
    assert_eq!(
        pprof_top_rows(&stdout),
        expected,
        "go tool pprof -top:\n{stdout}"
    );
    // The summary file prints the same list.
    let text = std::fs::read_to_string(&outputs.summary).unwrap();
    for (pct, name) in &expected {
        assert!(
            text.lines()
                .any(|l| l.contains(pct.as_str()) && l.ends_with(&format!("  {name}"))),
            "{pct} {name} missing from the summary:\n{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn firefox_profile_has_the_structure_and_the_stacks() {
    let dir = out_dir("firefox");
    let outputs = output::write_all(&sample_profile(), &dir, "p").unwrap();
    let json: Value = serde_json::from_slice(&gunzip(&outputs.firefox)).unwrap();
    assert_eq!(json["meta"]["product"], "demo");
    assert_eq!(json["meta"]["interval"], 10.0);
    assert_eq!(json["meta"]["startTime"], 1_700_000_000_000.0);
    assert_eq!(json["meta"]["symbolicated"], true);
    // One 10 ms interval of CPU time per sample.
    let (stacks, threads) = check_firefox(&json, Some(10_000));
    assert_eq!(stacks, expected_stacks_per_thread());
    assert_eq!(threads.len(), 2);
    for thread in &threads {
        assert_eq!(thread["pid"], "100");
        assert_eq!(thread["processName"], "demo");
        let main = thread["tid"] == "100";
        assert_eq!(thread["isMainThread"], main);
        // The crate names a main thread after its process.
        assert_eq!(thread["name"], if main { "demo" } else { "worker" });
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A wall-clock profile says so in every format that has a place for it; it claims no CPU time.
#[test]
fn wall_clock_profile() {
    let dir = out_dir("wall");
    let mut model = sample_profile();
    model.wall_clock = true;
    let outputs = output::write_all(&model, &dir, "w").unwrap();
    let p = decode_pprof(&outputs.pprof);
    let s = |i: i64| p.string_table[i as usize].as_str();
    let types: Vec<_> = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("wall", "nanoseconds")]);
    let period_type = p.period_type.as_ref().unwrap();
    assert_eq!(s(period_type.r#type), "wall");
    let json: Value = serde_json::from_slice(&gunzip(&outputs.firefox)).unwrap();
    let (stacks, _) = check_firefox(&json, Some(0));
    assert_eq!(stacks, expected_stacks_per_thread());
    let summary = std::fs::read_to_string(&outputs.summary).unwrap();
    assert!(
        summary.contains("(one sample per 10.000 ms of wall-clock time)"),
        "{summary}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn summary_has_the_counts_and_percentages() {
    let text = summary::text(&sample_profile());
    let expected = [
        "program           /opt/demo/bin/demo",
        "pid               100",
        "duration          0.070 s",
        "rate              100.0 Hz per thread (one sample per 10.000 ms of CPU time)",
        "samples stored    12 (80.00% of signals; 12 in the profile)",
        "signals           15",
        "timers            timer_create on 2 threads",
        "periods           12 (samples weighted by the timer periods each stands for; 7 POSIX timer expirations merged by the kernel, which checks CPU timers once per tick)",
        "CPU time sampled  0.125 s by the threads' clocks; periods x interval = 0.120 s (96.0%)",
        "CPU not sampled   0.025 s of the processes' 0.150 s since sampling started (16.67%): threads without a timer or record (see \"threads not sampled\"), as the kernel counted it",
        "run's CPU         0.170 s: the program and every process it started, as the kernel counted them when they ended; 0.160 s of it in the processes that joined the profile (1), from their start to record's last look",
        "dropped           3 (20.00% of signals)",
        "  no-memory              2   13.33%",
        "  busy                   1    6.67%",
        "stop reasons      (of 12 stored samples)",
        "  end-of-stack          10   83.33%",
        "  no-rule                2   16.67%",
        "mean stack depth  3.33 frames (40 frames / 12 stored)",
        "stack scanning    7.50% of the frames (3 frames found by a scan)",
        "rule cache        90.00% hits (90 hits, 10 misses)",
        "unwind cost       2000.0 ns per sample, 600.0 ns per frame",
        "store cost        100.0 ns per sample",
        "preload           5.000 ms, 4096 table bytes, 128 rows, 1 refreshes",
        "collector         0.006 ms CPU draining and refreshing, 500.0 ns per sample",
        "refused           1 process 7 (demo): thread rings written over (a record of 16777216 words): not read from there on",
        "threads           2 sampled",
        "       100  demo                       6 samples   50.00%",
        "       101  worker                     6 samples   50.00%",
        "",
        "top 15 functions by self samples (of 12 samples)",
        "     samples        %  function",
        "           4   33.33%  helper",
        "           3   25.00%  memcpy",
        "           2   16.67%  0xdead0000",
        "           2   16.67%  recurse",
        "           1    8.33%  worker::run<[u8; 4]>",
        "",
        "top 15 functions by total samples (of 12 samples)",
        "     samples        %  function",
        "           7   58.33%  main",
        "           5   41.67%  compute",
        "           5   41.67%  helper",
        "           5   41.67%  start_thread",
        "           5   41.67%  worker::run<[u8; 4]>",
        "           3   25.00%  memcpy",
        "           2   16.67%  0xdead0000",
        "           2   16.67%  recurse",
    ];
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        expected,
        "summary:\n{text}"
    );
}

/// What `record` prints at the end: what was refused, threads not sampled, CPU time no timer
/// sampled past a tenth and 100 ms, foreign signals; nothing for a run where all was sampled.
#[test]
fn warnings_say_what_was_refused_and_not_sampled() {
    let mut p = sample_profile();
    let w = summary::warnings(&p);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("refused or dropped: 1 process 7 (demo): thread rings written over"),
        "{w:?}"
    );
    // 25 ms of 150 ms not sampled: a sixth, but below 100 ms.
    p.counters.refused.clear();
    assert!(summary::warnings(&p).is_empty());
    p.counters.unsampled_cpu = MS * 600;
    p.counters.process_cpu = MS * 800;
    p.counters.threads_not_sampled = vec![("timer could not be created".into(), 3)];
    p.counters.foreign_signals = 4;
    // 1.2 s of 1.5 s in processes that never joined (past 200 ms + 100 ms for the one that
    // did, and past a tenth).
    p.counters.descendants_cpu = Some(MS * 1500);
    p.counters.lifetime_cpu = MS * 300;
    let w = summary::warnings(&p);
    assert_eq!(
        w,
        [
            "threads not sampled: 3 (timer could not be created)",
            "75.00% of the processes' CPU time was not sampled (0.600 s of 0.800 s): threads the profiler did not see start, or could not sample",
            "1.200 s of the run's 1.500 s of CPU time (80.00%) was in processes that never joined the profile: statically linked or set-ID programs (the loader ignores LD_PRELOAD for them), or programs started without the profiler's environment",
            "4 signals of the sampling signal's number came from elsewhere than the profiler's timers (ignored: --signal chooses another)",
        ]
    );
    assert!(summary::warnings(&empty_profile()).is_empty());
}

#[test]
fn empty_profile_writes_every_file() {
    // In a directory that does not exist yet (the preload library's output may name one).
    let dir = out_dir("empty").join("made").join("here");
    let outputs = output::write_all(&empty_profile(), &dir, "empty").unwrap();
    assert_eq!(outputs, Outputs::paths(&dir, "empty"));
    assert_eq!(outputs.firefox, dir.join("empty.firefox.json.gz"));
    assert_eq!(std::fs::read_to_string(&outputs.folded).unwrap(), "");
    let text = svg_text(&std::fs::read_to_string(&outputs.flamegraph).unwrap());
    assert!(text.contains("no samples"), "{text}");
    let p = decode_pprof(&outputs.pprof);
    assert!(p.sample.is_empty() && p.location.is_empty() && p.mapping.is_empty());
    assert_eq!(p.string_table[0], "");
    let json: Value = serde_json::from_slice(&gunzip(&outputs.firefox)).unwrap();
    let (stacks, threads) = check_firefox(&json, Some(10_000));
    assert!(stacks.is_empty() && threads.is_empty());
    let summary = std::fs::read_to_string(&outputs.summary).unwrap();
    assert!(
        summary.contains("dropped           0 (- of signals)"),
        "{summary}"
    );
    assert!(summary.contains("rule cache        - hits"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Indices out of range, empty names and names with line breaks: every file is still written,
/// and every sample still counts.
#[test]
fn odd_input_does_not_panic() {
    let mut p = sample_profile();
    p.locations[0].frames[0].function = String::new();
    p.locations[2].frames[0].function = "two\nlines;x".to_string();
    p.locations[4].module = Some(99);
    p.stacks[3].push(1000);
    p.samples[0].stack = 77;
    p.samples[1].thread = 55;
    p.totals = totals_of(&p.samples);
    let dir = out_dir("odd");
    let outputs = output::write_all(&p, &dir, "odd").unwrap();
    let folded = std::fs::read_to_string(&outputs.folded).unwrap();
    let total: u64 = folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 12, "{folded}");
    assert!(
        folded.contains(&format!("{} 1\n", folded::NO_FRAMES)),
        "{folded}"
    );
    assert!(
        folded.contains("[unknown];recurse;recurse;two lines:x 2\n"),
        "{folded}"
    );
    let pp = decode_pprof(&outputs.pprof);
    assert_eq!(pp.sample.iter().map(|s| s.value[0]).sum::<i64>(), 12);
    assert_eq!(pp.location[4].mapping_id, 0, "module 99 does not exist");
    let json: Value = serde_json::from_slice(&gunzip(&outputs.firefox)).unwrap();
    let (stacks, threads) = check_firefox(&json, Some(10_000));
    assert_eq!(stacks.values().sum::<i64>(), 12);
    assert!(threads.iter().any(|t| t["name"] == "[unknown thread]"));
    let summary = std::fs::read_to_string(&outputs.summary).unwrap();
    assert!(summary.contains("two lines;x"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_name_the_file() {
    let base = out_dir("errors");
    // A directory that cannot be made (a file is in the way): the error names it.
    std::fs::write(base.join("file"), "").unwrap();
    let dir = base.join("file").join("sub");
    let err = output::write_all(&sample_profile(), &dir, "x").unwrap_err();
    assert!(
        err.to_string().starts_with(&format!("{}: ", dir.display())),
        "{err}"
    );
    // A file that cannot be written (a directory has its name): the error names the file.
    let folded = base.join("x.folded");
    std::fs::create_dir(&folded).unwrap();
    let err = output::write_all(&sample_profile(), &base, "x").unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("{}: ", folded.display())),
        "{err}"
    );
    assert_eq!(err.kind(), std::io::ErrorKind::IsADirectory);
    let _ = std::fs::remove_dir_all(&base);
}

/// A long run's profile: a thinned timeline (each sample standing for two), and the exact totals
/// with the threads that exited merged by name (tid 0). Counted outputs use the totals; the
/// Firefox profile draws the timeline, weighted, with no track for the merged threads.
#[test]
fn totals_count_and_the_timeline_is_drawn() {
    let mut p = sample_profile();
    let exact = p.totals.clone();
    p.samples
        .retain(|s| s.time.as_millis() % 20 == 0 || s.thread == 1);
    for s in &mut p.samples {
        s.weight = 2;
    }
    p.threads.push(Thread {
        tid: 0,
        name: "short-lived".into(),
        pid: 100,
        process: "demo".into(),
    });
    let merged = p.threads.len() - 1;
    p.totals.push(unwind_profiler::profile::Total {
        thread: merged,
        stack: 2,
        samples: 5,
        periods: 5,
    });
    let dir = out_dir("totals");
    let outputs = output::write_all(&p, &dir, "totals").unwrap();
    let folded = folded::parse(&std::fs::read_to_string(&outputs.folded).unwrap());
    let total: u64 = folded.iter().map(|(_, n)| n).sum();
    let exact_total: u64 = exact.iter().map(|t| t.periods).sum();
    assert_eq!(total, exact_total + 5);
    let pp = decode_pprof(&outputs.pprof);
    assert_eq!(
        pp.sample.iter().map(|s| s.value[0]).sum::<i64>(),
        exact_total as i64 + 5
    );
    let merged_sample = pp
        .sample
        .iter()
        .find(|s| {
            s.label
                .iter()
                .any(|l| pp.string_table[l.str as usize] == "short-lived")
        })
        .expect("the merged threads' sample");
    let thread_id = pp
        .string_table
        .iter()
        .position(|s| s == "thread_id")
        .unwrap() as i64;
    assert!(
        merged_sample.label.iter().all(|l| l.key != thread_id),
        "no thread id for merged threads"
    );
    let summary = std::fs::read_to_string(&outputs.summary).unwrap();
    assert!(summary.contains("  exited  short-lived"), "{summary}");
    assert!(
        summary.contains("of the samples kept, evenly spread"),
        "{summary}"
    );
    let json: Value = serde_json::from_slice(&gunzip(&outputs.firefox)).unwrap();
    let (stacks, threads) = check_firefox(&json, None);
    assert_eq!(threads.len(), 2, "no track for the merged threads");
    let drawn: i64 = stacks.values().sum();
    assert_eq!(
        drawn as usize,
        p.samples.len(),
        "every timeline sample drawn"
    );
    for t in &threads {
        let weights = t["samples"]["weight"].as_array().expect("weights");
        assert!(weights.iter().all(|w| w.as_i64() == Some(2)), "{weights:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const PYTHON: &str = "/usr/bin/python3.11";

/// The sample profile (pid 100, `demo`) merged with a second process that started 30 ms later:
/// `python3.11`, pid 200, threads 200 and 201 (the second also named `worker`, as one of demo's).
fn two_process_profile() -> Profile {
    let python_samples = vec![
        Sample {
            thread: 0,
            time: Duration::ZERO,
            weight: 1,
            stack: 1,
        },
        Sample {
            thread: 0,
            time: MS * 10,
            weight: 1,
            stack: 1,
        },
        Sample {
            thread: 1,
            time: MS * 5,
            weight: 1,
            stack: 1,
        },
        Sample {
            thread: 1,
            time: MS * 15,
            weight: 1,
            stack: 0,
        },
    ];
    let python = Profile {
        program: PYTHON.to_string(),
        pid: 200,
        start: sample_profile().start + MS * 30,
        duration: MS * 50,
        interval: MS * 10,
        wall_clock: false,
        modules: vec![Module {
            path: PYTHON.to_string(),
            start: 0x40_0000,
            end: 0x50_0000,
            bias: 0x40_0000,
            file_offset: 0,
            build_id: "feed".to_string(),
            generated: false,
        }],
        locations: vec![
            location(0x40_1000, Some(0), vec![frame("Py_Main", None, None)]),
            location(0x40_2000, Some(0), vec![frame("eval", None, None)]),
        ],
        stacks: vec![vec![0], vec![1, 0]],
        threads: vec![
            Thread {
                tid: 200,
                name: "python3.11".to_string(),
                pid: 200,
                process: "python3.11".to_string(),
            },
            Thread {
                tid: 201,
                name: "worker".to_string(),
                pid: 200,
                process: "python3.11".to_string(),
            },
        ],
        totals: totals_of(&python_samples),
        samples: python_samples,
        counters: Counters {
            signals: 4,
            stored: 4,
            threads: 2,
            ..Counters::default()
        },
        heap: None,
        names: Vec::new(),
    };
    Profile::merge(vec![sample_profile(), python]).unwrap()
}

/// The stacks per thread of [`two_process_profile`], as [`expected_stacks_per_thread`] gives
/// them.
fn expected_two_process_stacks() -> BTreeMap<(i64, String), i64> {
    let mut stacks = expected_stacks_per_thread();
    stacks.insert((200, "Py_Main;eval".to_string()), 2);
    stacks.insert((201, "Py_Main;eval".to_string()), 1);
    stacks.insert((201, "Py_Main".to_string()), 1);
    stacks
}

/// The process every thread of [`two_process_profile`] belongs to, by tid.
fn process_of_tid(tid: i64) -> (i64, &'static str) {
    if tid < 200 {
        (100, "demo")
    } else {
        (200, "python3.11")
    }
}

/// Processes that share a name (a multiprocessing parent and its workers) are kept apart in the
/// folded stacks and the flame graph by their pid; a name only one process has stays as it is.
#[test]
fn processes_of_one_name_kept_apart() {
    let mut second = two_process_profile();
    for t in &mut second.threads {
        if t.process == "python3.11" {
            t.pid = 300;
            t.tid += 100;
        }
    }
    let model = Profile::merge(vec![two_process_profile(), second]).unwrap();
    let lines: Vec<String> = output::folded::lines(&model);
    for want in [
        "python3.11-200;Py_Main;eval 3",
        "python3.11-300;Py_Main;eval 3",
        "python3.11-200;Py_Main 1",
        "python3.11-300;Py_Main 1",
        "demo;main;compute;helper 8",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want} not in {lines:#?}");
    }
    assert!(
        !lines.iter().any(|l| l.starts_with("python3.11;")),
        "{lines:#?}"
    );
    let dir = out_dir("one-name");
    let outputs = output::write_all(&model, &dir, "one-name").unwrap();
    let svg = svg_text(&std::fs::read_to_string(&outputs.flamegraph).unwrap());
    assert!(
        svg.contains("python3.11-200 (") && svg.contains("python3.11-300 ("),
        "{svg}"
    );
}

#[test]
fn two_processes_in_every_format() {
    let dir = out_dir("two-processes");
    let model = two_process_profile();
    assert!(model.is_multi_process());
    assert_eq!((model.program.as_str(), model.pid), (PROGRAM, 100));
    assert_eq!(model.duration, MS * 80, "until python's end");
    let outputs = output::write_all(&model, &dir, "two").unwrap();

    // Folded: each stack starts with its process's name, aggregated over the process's threads.
    let text = std::fs::read_to_string(&outputs.folded).unwrap();
    assert_eq!(
        text,
        "demo;main;compute;helper 4\n\
         python3.11;Py_Main;eval 3\n\
         demo;main;recurse;recurse;recurse 2\n\
         demo;start_thread;worker::run<[u8: 4]>;0xdead0000 2\n\
         demo;start_thread;worker::run<[u8: 4]>;memcpy 2\n\
         demo;main;compute;helper;memcpy 1\n\
         demo;start_thread;worker::run<[u8: 4]> 1\n\
         python3.11;Py_Main 1\n"
    );

    // The flame graph counts processes, not one program.
    let svg = svg_text(&std::fs::read_to_string(&outputs.flamegraph).unwrap());
    assert!(
        svg.contains("2 processes: 16 samples"),
        "title missing:\n{svg}"
    );
    assert!(svg.contains("python3.11 ("), "python3.11 missing:\n{svg}");

    // pprof: every sample labelled with its own thread's process; a mapping per module.
    let p = decode_pprof(&outputs.pprof);
    let s = |i: i64| p.string_table[i as usize].as_str();
    let files: Vec<_> = p.mapping.iter().map(|m| s(m.filename)).collect();
    assert_eq!(files, [PROGRAM, LIB, PYTHON]);
    let mut stacks = BTreeMap::new();
    for sample in &p.sample {
        let label = |key: &str| sample.label.iter().find(|l| s(l.key) == key).unwrap();
        let tid = label("thread_id").num;
        let (pid, process) = process_of_tid(tid);
        assert_eq!(label("pid").num, pid, "pid of thread {tid}");
        assert_eq!(s(label("process").str), process, "process of thread {tid}");
        let mut frames = Vec::new();
        for id in sample.location_id.iter().rev() {
            let location = p.location.iter().find(|l| l.id == *id).unwrap();
            for line in location.line.iter().rev() {
                let function = p.function.iter().find(|f| f.id == line.function_id);
                frames.push(s(function.unwrap().name));
            }
        }
        *stacks.entry((tid, frames.join(";"))).or_insert(0) += sample.value[0];
    }
    assert_eq!(stacks, expected_two_process_stacks());

    // Firefox: two processes, each with its own threads and main thread; python's starts at its
    // first sample, 30 ms into the profile.
    let json: Value = serde_json::from_slice(&gunzip(&outputs.firefox)).unwrap();
    assert_eq!(json["meta"]["product"], "demo");
    let (stacks, threads) = check_firefox(&json, Some(10_000));
    assert_eq!(stacks, expected_two_process_stacks());
    assert_eq!(threads.len(), 4);
    let mut pids = Vec::new();
    for thread in &threads {
        let tid: i64 = thread["tid"].as_str().unwrap().parse().unwrap();
        let (pid, process) = process_of_tid(tid);
        assert_eq!(thread["pid"], pid.to_string(), "pid of thread {tid}");
        assert_eq!(thread["processName"], process, "process of thread {tid}");
        assert_eq!(thread["isMainThread"], tid == pid, "thread {tid}");
        let startup = if pid == 200 { 30.0 } else { 0.0 };
        assert_eq!(thread["processStartupTime"], startup, "thread {tid}");
        pids.push(pid);
    }
    pids.dedup();
    assert_eq!(pids, [100, 200], "threads grouped by process");
    // Python's samples count from the merged start.
    let python_main = threads.iter().find(|t| t["tid"] == "200").unwrap();
    let deltas = python_main["samples"]["timeDeltas"].as_array().unwrap();
    assert_eq!(deltas[0], 30.0, "{deltas:?}");

    // The summary lists the processes, and still the threads.
    let summary = std::fs::read_to_string(&outputs.summary).unwrap();
    let lines: Vec<_> = summary.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == "processes         2")
        .unwrap_or_else(|| panic!("no processes section:\n{summary}"));
    assert_eq!(
        lines[at + 1..at + 3],
        [
            "       100  demo                      12 samples   75.00%",
            "       200  python3.11                 4 samples   25.00%",
        ],
        "{summary}"
    );
    assert!(lines.contains(&"program           /opt/demo/bin/demo"));
    assert!(lines.contains(&"threads           4 sampled"), "{summary}");
    assert!(
        lines.iter().any(|l| l.starts_with("       201  worker ")),
        "{summary}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A profile whose threads have one process is written as before: no process prefix.
#[test]
fn one_process_is_not_prefixed() {
    let model = Profile::merge(vec![sample_profile()]).unwrap();
    assert!(!model.is_multi_process());
    assert_eq!(folded::lines(&model), folded::lines(&sample_profile()));
    assert_eq!(
        output::flamegraph::title(&model),
        output::flamegraph::title(&sample_profile())
    );
    let text = summary::text(&model);
    assert!(!text.lines().any(|l| l.starts_with("processes")), "{text}");
}

/// `go tool pprof` tells the processes apart by their label (`-tagfocus process=...`).
#[test]
fn go_tool_pprof_focuses_on_one_process() {
    if !unwind_test_support::tool_runs_with("go", &["version"]) {
        unwind_test_support::missing("go (golang), for go tool pprof");
        return;
    }
    let dir = out_dir("go-pprof-processes");
    let outputs = output::write_all(&two_process_profile(), &dir, "p").unwrap();
    let stdout = go_pprof(&["-top", "-tagfocus=process=python3.11"], &outputs.pprof);
    let rows = pprof_top_rows(&stdout);
    let names: Vec<_> = rows.iter().map(|(_, name)| name.as_str()).collect();
    assert_eq!(names, ["eval", "Py_Main"], "go tool pprof -top:\n{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `go tool pprof ARGS FILE` prints; fails the test if it fails.
fn go_pprof(args: &[&str], file: &std::path::Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "go tool pprof failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
