//! `record --export`: the profile sent as OTLP profiles to a real OpenTelemetry Collector
//! (built by `scripts/otelcol`, started here on loopback ports, writing what it receives with
//! its file exporter), and what the collector wrote read back:
//!
//! - the bundled demo workload for 3 s: one export, whose resource attributes are the ones asked
//!   for (`--service`, `--label`, `OTEL_RESOURCE_ATTRIBUTES`) and the process's own; its total
//!   CPU time equals the local profile's samples times the period, exactly, and each leaf
//!   function's share equals the folded stacks' (the same profile, by another path); function
//!   names, thread names and the workload's GNU build id present;
//! - a collector that is not there: the outputs are written, the warning names the URL, and the
//!   run fails with 73 although the program succeeded;
//! - the preload library used alone (`LD_PRELOAD`, its variables): the process exports its
//!   profile at exit, its totals those of the files it wrote;
//! - continuous profiling (`--period 5s`) of the demo workload for 60 s, the collector stopped
//!   for 15 s in the middle: every period arrives (at least 11), none lost, the retries
//!   counted; their samples are `record`'s own count within 1 %, each hot function's share
//!   that of the local period files within 2 points; names, thread names, resource attributes
//!   and build ids in what the collector wrote.
//!
//! Needs the release build of the command, the preload library and the demo workload, and the
//! collector (a missing one fails under `CI=true`): `cargo build --release -p unwind-profiler
//! -p unwind-profiler-preload -p unwind-demo-workload && cargo test --release -p unwind-profiler
//! --test export`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use unwind_profiler::output::Outputs;
use unwind_test_support::collector::{otelcol_path, Collector};

/// The release artifacts' directory: this test runs from `target/release/deps/`.
fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("unwind-export-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A collector started for test `name`, and the test's scratch directory; `None` (failing
/// under `CI=true`) if the collector is not built.
fn collector(name: &str) -> Option<(PathBuf, Collector)> {
    if otelcol_path().is_none() {
        unwind_test_support::missing("the OpenTelemetry Collector, built by scripts/otelcol");
        return None;
    }
    let dir = scratch(name);
    let collector = Collector::start(&dir.join("collector")).expect("collector");
    Some((dir, collector))
}

/// The one export the collector received, as it wrote it; the collector stopped.
fn the_export(collector: &mut Collector) -> Value {
    let text = collector
        .wait_written("resourceProfiles", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("nothing written; collector log:\n{}", collector.log()));
    collector.stop();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one export: {text}");
    serde_json::from_str(lines[0]).unwrap()
}

/// The local profile's folded stacks in `out`.
fn folded(out: &std::path::Path) -> Vec<(Vec<String>, u64)> {
    unwind_profiler::output::folded::parse(
        &std::fs::read_to_string(Outputs::paths(out, "profile").folded).unwrap(),
    )
}

/// `record` on the demo workload for 3 s with `args`, outputs in `out`.
fn record(out: &std::path::Path, args: &[&str]) -> std::process::Output {
    let dir = release_dir();
    Command::new(dir.join("unwind-profiler"))
        .arg("record")
        .args(args)
        .arg("--output")
        .arg(out)
        .arg("--")
        .arg(dir.join("demo-workload"))
        .args(["--seconds", "3"])
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment.name=test,team=a%20b",
        )
        .env_remove("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .output()
        .unwrap()
}

/// What the collector wrote: the request, its dictionary's tables resolved by index.
struct Written<'a> {
    request: &'a Value,
    dictionary: &'a Value,
}

impl Written<'_> {
    fn table(&self, name: &str) -> &[Value] {
        self.dictionary[name].as_array().map_or(&[], Vec::as_slice)
    }

    fn string(&self, index: &Value) -> &str {
        let i = index.as_u64().unwrap_or(0) as usize;
        self.table("stringTable")
            .get(i)
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// An attribute's value as text: its string (inline or by index) or its integer.
    fn value(&self, v: &Value) -> String {
        if let Some(s) = v["stringValue"].as_str() {
            return s.to_owned();
        }
        if !v["stringValueStrindex"].is_null() {
            return self.string(&v["stringValueStrindex"]).to_owned();
        }
        match &v["intValue"] {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => String::new(),
        }
    }

    /// A key-value list (a resource's attributes), keys by index or inline.
    fn attributes(&self, list: &Value) -> HashMap<String, String> {
        list.as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|kv| {
                let key = kv["key"]
                    .as_str()
                    .map_or_else(|| self.string(&kv["keyStrindex"]).to_owned(), str::to_owned);
                (key, self.value(&kv["value"]))
            })
            .collect()
    }

    /// An entry of the attribute table.
    fn table_attribute(&self, index: &Value) -> (String, String) {
        let a = &self.table("attributeTable")[index.as_u64().unwrap_or(0) as usize];
        (
            self.string(&a["keyStrindex"]).to_owned(),
            self.value(&a["value"]),
        )
    }

    /// The leaf function of a stack.
    fn leaf(&self, stack: &Value) -> String {
        let s = &self.table("stackTable")[stack.as_u64().unwrap_or(0) as usize];
        let location = &s["locationIndices"][0];
        let l = &self.table("locationTable")[location.as_u64().unwrap_or(0) as usize];
        let f = &self.table("functionTable")
            [l["lines"][0]["functionIndex"].as_u64().unwrap_or(0) as usize];
        self.string(&f["nameStrindex"]).to_owned()
    }
}

fn number(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        v => v.as_u64().unwrap_or(0),
    }
}

#[test]
fn the_profile_reaches_a_collector_with_its_attributes_names_and_totals() {
    let Some((dir, mut collector)) = collector("collector") else {
        return;
    };
    let out = dir.join("out");
    let run = record(
        &out,
        &[
            "--export",
            &collector.http_endpoint(),
            "--service",
            "demo-service",
            "--label",
            "service.version=1.2.3",
            "--label",
            "team=override",
        ],
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("profile exported to"), "{stderr}");
    let request = the_export(&mut collector);
    let w = Written {
        request: &request,
        dictionary: &request["dictionary"],
    };

    // One process: its resource.
    let resources = w.request["resourceProfiles"].as_array().unwrap();
    assert_eq!(resources.len(), 1);
    let attributes = w.attributes(&resources[0]["resource"]["attributes"]);
    println!("resource: {attributes:?}");
    assert_eq!(attributes["service.name"], "demo-service");
    assert_eq!(attributes["service.version"], "1.2.3");
    assert_eq!(
        attributes["team"], "override",
        "--label overrides OTEL_RESOURCE_ATTRIBUTES"
    );
    assert_eq!(attributes["deployment.environment.name"], "test");
    assert_eq!(attributes["process.executable.name"], "demo-workload");
    assert!(attributes["process.pid"]
        .parse::<u32>()
        .is_ok_and(|p| p > 0));
    assert!(!attributes["host.name"].is_empty());

    // Totals: the local profile's periods times the period, exactly; leaf shares the same.
    let profile = &resources[0]["scopeProfiles"][0]["profiles"][0];
    let kind = &profile["sampleType"];
    assert_eq!(w.string(&kind["typeStrindex"]), "cpu");
    assert_eq!(w.string(&kind["unitStrindex"]), "nanoseconds");
    let period = number(&profile["period"]);
    assert_eq!(period, 1_000_000, "1000 Hz");
    let mut by_leaf: HashMap<String, u64> = HashMap::new();
    let mut threads = std::collections::HashSet::new();
    let mut total = 0;
    for s in profile["samples"].as_array().unwrap() {
        let v = number(&s["values"][0]);
        total += v;
        *by_leaf.entry(w.leaf(&s["stackIndex"])).or_default() += v;
        for a in s["attributeIndices"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
        {
            let (k, v) = w.table_attribute(a);
            if k == "thread.name" {
                threads.insert(v);
            } else if k == "thread.id" {
                // An integer, as the semantic conventions type it.
                let raw = &w.table("attributeTable")[a.as_u64().unwrap() as usize]["value"];
                assert!(!raw["intValue"].is_null(), "{raw}");
                assert!(v.parse::<u32>().is_ok_and(|t| t > 0), "{v}");
            }
        }
    }
    let folded = folded(&out);
    let local: u64 = folded.iter().map(|(_, n)| n).sum();
    println!(
        "exported {total} ns in {} leaves; local {local} periods",
        by_leaf.len()
    );
    assert!(local >= 1000, "{local} samples");
    assert_eq!(total, local * period);
    let mut local_by_leaf: HashMap<String, u64> = HashMap::new();
    for (stack, n) in &folded {
        *local_by_leaf
            .entry(stack.last().unwrap().clone())
            .or_default() += n * period;
    }
    assert_eq!(by_leaf, local_by_leaf, "leaf totals differ");
    assert!(threads.len() >= 2, "thread names: {threads:?}");

    // The workload's mapping carries its build id.
    let build_ids: Vec<(String, String)> = w
        .table("mappingTable")
        .iter()
        .filter_map(|m| {
            let file = w.string(&m["filenameStrindex"]).to_owned();
            m["attributeIndices"]
                .as_array()?
                .iter()
                .map(|a| w.table_attribute(a))
                .find(|(k, _)| k == "process.executable.build_id.gnu")
                .map(|(_, id)| (file, id))
        })
        .collect();
    assert!(
        build_ids
            .iter()
            .any(|(file, id)| file.ends_with("demo-workload") && id.len() >= 16),
        "{build_ids:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_preload_library_alone_exports_at_exit() {
    let Some((dir, mut collector)) = collector("alone") else {
        return;
    };
    let out = dir.join("out");
    let release = release_dir();
    let run = Command::new(release.join("demo-workload"))
        .args(["--seconds", "2"])
        .env("LD_PRELOAD", release.join("libunwind_profiler_preload.so"))
        .env("UNWIND_PROFILER_OUTPUT", &out)
        .env("UNWIND_PROFILER_EXPORT", collector.http_endpoint())
        .env("UNWIND_PROFILER_SERVICE", "alone")
        // Compressed, with a header, as to a gateway that wants a tenant: the collector's
        // receiver takes gzip bodies.
        .env("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-scope-orgid=alone")
        .env_remove("UNWIND_PROFILER_RECORD")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("profile exported to"), "{stderr}");
    let request = the_export(&mut collector);
    let w = Written {
        request: &request,
        dictionary: &request["dictionary"],
    };
    let resource = &w.request["resourceProfiles"][0];
    assert_eq!(
        w.attributes(&resource["resource"]["attributes"])["service.name"],
        "alone"
    );
    let profile = &resource["scopeProfiles"][0]["profiles"][0];
    let total: u64 = profile["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| number(&s["values"][0]))
        .sum();
    let folded = folded(&out);
    let local: u64 = folded.iter().map(|(_, n)| n).sum();
    println!("alone: exported {total} ns; local {local} periods");
    assert!(local >= 500, "{local} samples");
    assert_eq!(total, local * number(&profile["period"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// With allocations sampled (`record --alloc`, perl's allocation-heavy script), the export
/// holds the heap profile beside the CPU one: four profiles, `alloc_objects`, `alloc_space`,
/// `inuse_objects` and `inuse_space`, whose totals are the local heap profile's, type by type.
#[test]
fn allocation_profiles_reach_the_collector_beside_the_cpu_one() {
    let Some((dir, mut collector)) = collector("alloc") else {
        return;
    };
    let out = dir.join("out");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/malloc.pl");
    let run = Command::new(release_dir().join("unwind-profiler"))
        .args(["record", "--alloc", "--export", &collector.http_endpoint()])
        .arg("--output")
        .arg(&out)
        .arg("--")
        .args(["perl", script.to_str().unwrap(), "2"])
        .env_remove("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let request = the_export(&mut collector);
    let w = Written {
        request: &request,
        dictionary: &request["dictionary"],
    };
    let mut exported: HashMap<String, u64> = HashMap::new();
    for resource in w.request["resourceProfiles"].as_array().unwrap() {
        for profile in resource["scopeProfiles"][0]["profiles"].as_array().unwrap() {
            let kind = w.string(&profile["sampleType"]["typeStrindex"]).to_owned();
            let total: u64 = profile["samples"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .map(|s| number(&s["values"][0]))
                .sum();
            *exported.entry(kind).or_default() += total;
        }
    }
    let bytes = std::fs::read(out.join("profile.heap.pb.gz")).unwrap();
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut raw).unwrap();
    let local =
        <unwind_profiler::output::pprof::proto::Profile as prost::Message>::decode(&raw[..])
            .unwrap();
    println!("alloc: exported {exported:?}");
    for (i, kind) in [
        "alloc_objects",
        "alloc_space",
        "inuse_objects",
        "inuse_space",
    ]
    .into_iter()
    .enumerate()
    {
        let total: i64 = local.sample.iter().map(|s| s.value[i]).sum();
        assert_eq!(exported.get(kind).copied(), Some(total as u64), "{kind}");
    }
    assert!(exported["alloc_space"] > 50 << 20, "{exported:?}");
    assert!(exported["cpu"] > 0, "{exported:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A period whose request is larger than the receiver takes goes in parts: with parts of at
/// most 8 KiB (`UNWIND_PROFILER_EXPORT_MAX_BYTES`), each period arrives as several requests,
/// each under the limit, and together they hold exactly the period files' samples, leaf by
/// leaf (nothing lost, nothing twice); the summary counts periods, not parts.
#[test]
fn a_large_period_is_sent_in_parts_that_add_up_to_it() {
    let Some((dir, mut collector)) = collector("parts") else {
        return;
    };
    let out = dir.join("out");
    let release = release_dir();
    let run = Command::new(release.join("unwind-profiler"))
        .args(["record", "--period", "1s", "--export"])
        .arg(collector.http_endpoint())
        .arg("--output")
        .arg(&out)
        .arg("--")
        .arg(release.join("demo-workload"))
        .args(["--seconds", "3"])
        .env("UNWIND_PROFILER_EXPORT_MAX_BYTES", "8192")
        .env_remove("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    collector.stop();
    let requests = requests(&collector);
    let summary = std::fs::read_to_string(Outputs::paths(&out, "profile").summary).unwrap();
    let delivered = summary_field(&summary, "export ", 1);
    let cut = summary_field(&summary, "period profiles", 2);
    let mut exported: HashMap<String, u64> = HashMap::new();
    for request in &requests {
        let w = Written {
            request,
            dictionary: &request["dictionary"],
        };
        let profile = &request["resourceProfiles"][0]["scopeProfiles"][0]["profiles"][0];
        let period = number(&profile["period"]);
        for s in profile["samples"].as_array().unwrap() {
            *exported.entry(w.leaf(&s["stackIndex"])).or_default() +=
                number(&s["values"][0]) / period;
        }
    }
    let mut local: HashMap<String, u64> = HashMap::new();
    for f in std::fs::read_dir(out.join("profile-periods")).unwrap() {
        for (k, v) in pprof_leaves(&f.unwrap().path()) {
            *local.entry(k).or_default() += v;
        }
    }
    let samples: u64 = exported.values().sum();
    println!(
        "{cut} periods cut, {delivered} delivered in {} requests; {samples} samples",
        requests.len()
    );
    assert_eq!(delivered, cut, "{summary}");
    assert!(
        requests.len() as u64 >= 2 * delivered,
        "{} requests for {delivered} periods",
        requests.len()
    );
    assert_eq!(
        exported, local,
        "the parts' samples against the period files'"
    );
    assert!(samples >= 1000, "{samples} samples");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Export settings that cannot be honoured (an https endpoint, gRPC) stop `record` with a
/// clear error before the program runs, instead of a run whose every send fails and is retried.
#[test]
fn export_settings_that_cannot_be_honoured_stop_record_before_the_program_runs() {
    let dir = scratch("settings");
    let marker = dir.join("ran");
    let release = release_dir();
    for (flag, var, says) in [
        ("https://127.0.0.1:4318", None, "https is not built in"),
        (
            "otlp",
            Some(("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")),
            "only http/protobuf",
        ),
    ] {
        let mut cmd = Command::new(release.join("unwind-profiler"));
        cmd.args(["record", "--period", "1s", "--export", flag, "--output"])
            .arg(dir.join("out"))
            .args(["--", "/bin/sh", "-c"])
            .arg(format!("touch '{}'", marker.display()));
        if let Some((k, v)) = var {
            cmd.env(k, v);
        }
        let run = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!marker.exists(), "the program ran");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_collector_that_is_not_there_fails_the_run_with_the_outputs_written() {
    let dir = scratch("absent");
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = dir.join("out");
    let run = record(&out, &["--export", &url]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(73), "{stderr}");
    assert!(
        stderr.contains(&format!("not exported to {url}/v1development/profiles")),
        "{stderr}"
    );
    assert!(Outputs::paths(&out, "profile").pprof.is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pprof file's samples by leaf function (values of its first sample type).
fn pprof_leaves(path: &std::path::Path) -> HashMap<String, u64> {
    use prost::Message;
    use unwind_profiler::output::pprof::proto;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()),
        &mut bytes,
    )
    .unwrap();
    let p = proto::Profile::decode(&bytes[..]).unwrap();
    let mut out = HashMap::new();
    for s in &p.sample {
        let Some(location) = p
            .location
            .iter()
            .find(|l| Some(&l.id) == s.location_id.first())
        else {
            continue;
        };
        let Some(line) = location.line.first() else {
            continue;
        };
        let f = p
            .function
            .iter()
            .find(|f| f.id == line.function_id)
            .unwrap();
        *out.entry(p.string_table[f.name as usize].clone())
            .or_default() += s.value[0] as u64;
    }
    out
}

/// Each name's share of the whole, in percent.
fn shares(counts: &HashMap<String, u64>) -> HashMap<String, f64> {
    let total: u64 = counts.values().sum();
    counts
        .iter()
        .map(|(k, &v)| (k.clone(), 100.0 * v as f64 / total.max(1) as f64))
        .collect()
}

#[test]
fn continuous_periods_reach_the_collector_through_an_outage() {
    let Some((dir, mut collector)) = collector("periods") else {
        return;
    };
    let out = dir.join("out");
    let release = release_dir();
    let run = Command::new(release.join("unwind-profiler"))
        .args([
            "record",
            "--period",
            "5s",
            "--verbose",
            "--service",
            "periodic",
        ])
        .args(["--label", "service.version=9", "--export"])
        .arg(collector.http_endpoint())
        .arg("--output")
        .arg(&out)
        .arg("--")
        .arg(release.join("demo-workload"))
        .args(["--seconds", "60"])
        .env_remove("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The collector away from 20 s to 35 s: three periods fall in the gap.
    std::thread::sleep(Duration::from_secs(20));
    let before = collector.written().lines().count();
    collector.stop();
    std::thread::sleep(Duration::from_secs(15));
    collector.restart().expect("collector restarted");
    let output = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    collector.stop();
    let requests = requests(&collector);
    println!(
        "{} periods received, {before} before the collector stopped",
        requests.len()
    );
    assert!(before >= 2, "periods arrived before the outage: {before}");

    // record's own figures: its count of samples, and its periods.
    let summary = std::fs::read_to_string(Outputs::paths(&out, "profile").summary).unwrap();
    let field = |line: &str, word: usize| summary_field(&summary, line, word);
    let stored = field("samples stored", 2);
    let cut = field("period profiles", 2);
    let empty = field("period profiles", 7);
    let export_line = summary
        .lines()
        .find(|l| l.starts_with("export "))
        .unwrap_or_else(|| panic!("no export line:\n{summary}"));
    println!("{export_line}");
    let delivered = field("export ", 1);
    let retries = field("export ", 8);
    assert!(cut - empty >= 12, "{cut} periods cut, {empty} empty");
    assert!(
        empty <= 1,
        "{empty} empty periods (the last, partial one at most)"
    );
    assert_eq!(requests.len() as u64, cut - empty, "every period delivered");
    assert_eq!(delivered, cut - empty);
    assert!(retries >= 1, "{export_line}");
    assert!(
        export_line.contains(" 0 dropped") && export_line.contains(" 0 undelivered"),
        "{export_line}"
    );

    // Totals, names, threads, attributes and build ids, over every period.
    let mut exported: HashMap<String, u64> = HashMap::new();
    let mut samples = 0u64;
    let mut threads = std::collections::HashSet::new();
    let mut build_id = false;
    let mut starts = Vec::new();
    for request in &requests {
        let w = Written {
            request,
            dictionary: &request["dictionary"],
        };
        let resource = &w.request["resourceProfiles"][0];
        let attributes = w.attributes(&resource["resource"]["attributes"]);
        assert_eq!(attributes["service.name"], "periodic");
        assert_eq!(attributes["service.version"], "9");
        assert_eq!(attributes["process.executable.name"], "demo-workload");
        let profile = &resource["scopeProfiles"][0]["profiles"][0];
        starts.push(number(&profile["timeUnixNano"]));
        let duration = number(&profile["durationNano"]);
        assert!(duration <= 6_000_000_000, "a period of {duration} ns");
        let period = number(&profile["period"]);
        for s in profile["samples"].as_array().unwrap() {
            let v = number(&s["values"][0]);
            samples += v / period;
            *exported.entry(w.leaf(&s["stackIndex"])).or_default() += v / period;
            for a in s["attributeIndices"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
            {
                let (k, v) = w.table_attribute(a);
                if k == "thread.name" {
                    threads.insert(v);
                }
            }
        }
        build_id |= w.table("mappingTable").iter().any(|m| {
            w.string(&m["filenameStrindex"]).ends_with("demo-workload")
                && m["attributeIndices"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
        });
    }
    let mut sorted = starts.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), starts.len(), "each period its own start");
    println!("exported {samples} samples; record stored {stored}; threads {threads:?}");
    assert!(
        samples.abs_diff(stored) * 100 <= stored,
        "exported {samples} vs stored {stored}"
    );
    assert!(threads.len() >= 2, "{threads:?}");
    assert!(build_id, "the workload's mapping has no build id");

    // The local period files: the same periods, the same shares.
    let mut local: HashMap<String, u64> = HashMap::new();
    let files: Vec<_> = std::fs::read_dir(out.join("profile-periods"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len() as u64, cut, "every period written");
    for f in &files {
        for (k, v) in pprof_leaves(f) {
            *local.entry(k).or_default() += v;
        }
    }
    let (exported, local) = (shares(&exported), shares(&local));
    for hot in [
        "plugin_mandelbrot",
        "unwind_demo_workload::sort::sort_leaf",
        "c_checksum",
    ] {
        let (e, l) = (exported.get(hot).copied().unwrap_or(0.0), local[hot]);
        println!("{hot}: exported {e:.1}%, local {l:.1}%");
        assert!(l >= 10.0 && (e - l).abs() <= 2.0, "{hot}: {e} vs {l}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_service_profiles_itself_exports_its_periods_and_serves_go_tool_pprof() {
    let Some((dir, mut collector)) = collector("service") else {
        return;
    };
    if !unwind_test_support::tool_runs_with("go", &["version"]) {
        unwind_test_support::missing("go (for go tool pprof)");
        return;
    }
    let service = release_dir().join("examples").join("service");
    let mut run = Command::new(&service)
        .args(["--seconds", "8", "--period", "2s", "--export"])
        .arg(collector.http_endpoint())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (cargo build --release --example service)",
                service.display()
            )
        });
    let mut stdout = std::io::BufReader::new(run.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    let url = first
        .trim()
        .strip_prefix("pprof ")
        .unwrap_or_else(|| panic!("no pprof address: {first:?}"))
        .to_owned();
    // Go's own client, as a user (or Parca, or Alloy) reads the endpoint.
    let top = go_pprof_top(&dir, &format!("{url}?seconds=3"));
    assert_window(&top, 3.0);
    assert!(top.contains("service::handle_request"), "{top}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(run.wait().unwrap().success());
    println!("{rest}");
    // 8 s in periods of 2 s: 4, and the last partial one (empty if the work ended with the
    // fourth); all with samples delivered.
    let counts: Vec<u64> = rest
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(counts.len() == 6 && counts[0] >= 4, "{rest}");
    assert!(counts[1] <= 1, "{rest}");
    assert_eq!(counts[2] + counts[1], counts[0], "all delivered: {rest}");
    collector.stop();
    let requests = requests(&collector);
    assert_eq!(requests.len() as u64, counts[2]);
    let mut threads = std::collections::HashSet::new();
    for request in &requests {
        let w = Written {
            request,
            dictionary: &request["dictionary"],
        };
        let resource = &w.request["resourceProfiles"][0];
        let attributes = w.attributes(&resource["resource"]["attributes"]);
        assert_eq!(attributes["service.name"], "example-service");
        for s in resource["scopeProfiles"][0]["profiles"][0]["samples"]
            .as_array()
            .unwrap()
        {
            for a in s["attributeIndices"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
            {
                let (k, v) = w.table_attribute(a);
                if k == "thread.name" {
                    threads.insert(v);
                }
            }
        }
    }
    assert!(threads.contains("background"), "{threads:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The samples in a directory of period files (pprof), each standing for its value over the
/// period.
fn period_samples(dir: &std::path::Path) -> (u64, usize) {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let samples = files
        .iter()
        .map(|f| pprof_leaves(f).values().sum::<u64>())
        .sum();
    (samples, files.len())
}

#[test]
fn a_killed_programs_last_period_is_kept() {
    let dir = scratch("killed");
    let out = dir.join("out");
    let release = release_dir();
    let mut run = Command::new(release.join("unwind-profiler"))
        .args(["record", "--period", "1s", "--frequency", "200", "--output"])
        .arg(&out)
        .arg("--")
        .arg(release.join("demo-workload"))
        .args(["--seconds", "30"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    // The workload is record's child: killed as the OOM killer or `kill -9` would.
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", run.id()))
        .unwrap_or_default();
    let workload: i32 = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the workload's pid");
    // SAFETY: sends SIGKILL to the workload this test started (through record).
    unsafe { libc::kill(workload, libc::SIGKILL) };
    let status = run.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(128 + 9), "{stderr}");
    let summary = std::fs::read_to_string(Outputs::paths(&out, "profile").summary).unwrap();
    let stored = summary_field(&summary, "samples stored", 2);
    let (samples, files) = period_samples(&out.join("profile-periods"));
    println!("{files} period files, {samples} samples; {stored} stored");
    assert!(files >= 3, "2 whole periods and the last: {files}");
    // Every sample taken is in a period, the last partial one included (the pprof files'
    // first value is the sample count).
    assert_eq!(samples, stored);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_preload_library_alone_serves_go_tool_pprof() {
    if !unwind_test_support::tool_runs_with("go", &["version"]) {
        unwind_test_support::missing("go (for go tool pprof)");
        return;
    }
    let dir = scratch("pull");
    let release = release_dir();
    let (mut run, url) = serving(
        Command::new(release.join("demo-workload"))
            .args(["--seconds", "9"])
            .env("UNWIND_PROFILER_OUTPUT", dir.join("out")),
        "libunwind_profiler_preload.so",
    );
    let url = url.replace("?seconds=N", "?seconds=2");
    let top = go_pprof_top(&dir, &url);
    assert_window(&top, 2.0);
    assert!(top.contains("plugin_mandelbrot"), "{top}");
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let get = |path: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        std::io::Write::write_all(&mut s, format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        let mut answer = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut answer).unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    // Not a profile path: a clear 404, the process unharmed; the heap profile without
    // allocations sampled too.
    let answer = get("/debug/pprof/goroutine");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    let answer = get("/debug/pprof/heap");
    assert!(
        answer.starts_with("HTTP/1.1 404") && answer.contains("not sampled"),
        "{answer}"
    );
    // One window at a time: a second one asked for meanwhile is refused at once.
    std::thread::scope(|s| {
        let first = s.spawn(|| get("/debug/pprof/profile?seconds=2"));
        std::thread::sleep(Duration::from_millis(500));
        let started = std::time::Instant::now();
        let second = get("/debug/pprof/profile?seconds=1");
        assert!(second.starts_with("HTTP/1.1 409"), "{second}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let first = first.join().unwrap();
        assert!(
            first.starts_with("HTTP/1.1 200"),
            "{}",
            &first[..40.min(first.len())]
        );
    });
    assert!(run.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `go tool pprof -top URL` (its files in `dir`): what it printed; it must succeed.
/// With allocations sampled, the preload library alone serves `/debug/pprof/heap` as Go's
/// runtime does: `go tool pprof` reads it at once, in each of its four types, and finds perl's
/// allocating functions.
#[test]
fn the_preload_library_alone_serves_the_heap_profile() {
    if !unwind_test_support::tool_runs_with("go", &["version"]) {
        unwind_test_support::missing("go (for go tool pprof)");
        return;
    }
    let dir = scratch("pull-heap");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/malloc.pl");
    let (mut run, url) = serving(
        Command::new("perl")
            .arg(&script)
            .arg("40")
            .env("UNWIND_PROFILER_OUTPUT", dir.join("out"))
            .env("UNWIND_PROFILER_ALLOC", "1"),
        "libunwind_profiler_preload_alloc.so",
    );
    let url = url.replace("/debug/pprof/profile?seconds=N", "/debug/pprof/heap");
    std::thread::sleep(Duration::from_secs(2));
    for index in [
        "inuse_space",
        "inuse_objects",
        "alloc_space",
        "alloc_objects",
    ] {
        let pprof = Command::new("go")
            .args(["tool", "pprof", "-top", &format!("-sample_index={index}")])
            .arg(&url)
            .env("PPROF_TMPDIR", &dir)
            .output()
            .unwrap();
        let top = String::from_utf8_lossy(&pprof.stdout);
        assert!(
            pprof.status.success(),
            "{}",
            String::from_utf8_lossy(&pprof.stderr)
        );
        println!(
            "{index}: {}",
            top.lines().take(8).collect::<Vec<_>>().join("\n")
        );
        assert!(top.contains(&format!("Type: {index}")), "{top}");
        // perl's own allocator entry (Perl_safesysmalloc) under its interpreter loop.
        assert!(top.contains("Perl_"), "{top}");
    }
    let _ = run.kill();
    let _ = run.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `cmd` under the preload library alone (`library`, a build in the release directory)
/// with the pull endpoint on a free loopback port; returns the process and the URL it said it
/// serves (`...?seconds=N`).
fn serving(cmd: &mut Command, library: &str) -> (std::process::Child, String) {
    let mut run = cmd
        .env("LD_PRELOAD", release_dir().join(library))
        .env("UNWIND_PROFILER_PPROF_LISTEN", "127.0.0.1:0")
        .env_remove("UNWIND_PROFILER_RECORD")
        .env_remove("UNWIND_PROFILER_EXPORT")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(run.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("serving http://") {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0,
            "no address said"
        );
    }
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    // The rest of stderr read to its end: a closed pipe would kill the program's last words.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (run, url)
}

fn go_pprof_top(dir: &std::path::Path, url: &str) -> String {
    let pprof = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(url)
        .env("PPROF_TMPDIR", dir)
        .output()
        .unwrap();
    let top = String::from_utf8_lossy(&pprof.stdout).into_owned();
    println!("{top}");
    assert!(
        pprof.status.success(),
        "{}",
        String::from_utf8_lossy(&pprof.stderr)
    );
    top
}

/// Every request the collector wrote, in order (it is stopped or has flushed).
fn requests(collector: &Collector) -> Vec<Value> {
    collector
        .written()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The number that is word `word` (from 0) of the summary's line starting with `line`.
fn summary_field(summary: &str, line: &str, word: usize) -> u64 {
    summary
        .lines()
        .find(|l| l.starts_with(line))
        .and_then(|l| l.split_whitespace().nth(word))
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no {line:?} in the summary:\n{summary}"))
}

/// Checks that `go tool pprof -top`'s `Duration:` is the window asked for, `seconds` (and at
/// most half a second more: the window ends after the rings are drained once more).
fn assert_window(top: &str, seconds: f64) {
    let duration = top
        .lines()
        .find_map(|l| l.trim().strip_prefix("Duration: "))
        .and_then(|d| d.split([',', 's']).next())
        .and_then(|d| d.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no duration in\n{top}"));
    assert!(
        (seconds..seconds + 0.5).contains(&duration),
        "a window of {duration} s for {seconds} s:\n{top}"
    );
}
