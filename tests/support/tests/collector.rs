//! The real OpenTelemetry Collector (`scripts/otelcol` builds it; `unwind_test_support::collector`
//! runs it) takes a minimal OTLP/JSON profiles request over hand-written HTTP/1.1 and its file
//! exporter writes it out, before and after a restart.
//!
//! The request's layout is opentelemetry-proto v1.10/v1.11's (`profiles/v1development`, which
//! the collector v0.161.0 speaks): the `dictionary` (string, function, location and stack tables,
//! each with its zero value at index 0) belongs to the `ExportProfilesServiceRequest`, beside
//! `resourceProfiles`; a profile has one `sampleType` and its `samples` refer to the dictionary's
//! `stackTable`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use unwind_test_support::collector::{otelcol_path, Collector};

/// The string the request carries (a function's name) and the file exporter must write.
const MARKER: &str = "unwind-smoke-marker";

/// How long the file exporter may take to write a request out (it flushes every 100 ms).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A minimal `ExportProfilesServiceRequest` in OTLP/JSON: one resource, scope and profile with
/// one sample type (`samples`/`count`) and one sample of value 1 whose stack is one location in
/// the function named `function`.
fn profiles_request(function: &str) -> String {
    format!(
        r#"{{
  "resourceProfiles": [{{
    "resource": {{"attributes": [{{"key": "service.name", "value": {{"stringValue": "unwind-smoke"}}}}]}},
    "scopeProfiles": [{{
      "scope": {{"name": "unwind-profiler"}},
      "profiles": [{{
        "sampleType": {{"typeStrindex": 1, "unitStrindex": 2}},
        "samples": [{{"stackIndex": 1, "values": ["1"]}}],
        "timeUnixNano": "1700000000000000000",
        "durationNano": "1000000000",
        "profileId": "0102030405060708090a0b0c0d0e0f10"
      }}]
    }}]
  }}],
  "dictionary": {{
    "mappingTable": [{{}}],
    "locationTable": [{{}}, {{"lines": [{{"functionIndex": 1, "line": 7}}]}}],
    "functionTable": [{{}}, {{"nameStrindex": 3}}],
    "linkTable": [{{}}],
    "stringTable": ["", "samples", "count", "{function}"],
    "attributeTable": [{{}}],
    "stackTable": [{{}}, {{"locationIndices": [1]}}]
  }}
}}"#
    )
}

/// POSTs `body` as `application/json` to `path` at `addr` over one HTTP/1.1 connection; returns
/// the response's status code and body (or the error: connection refused, a timeout...).
fn post_json(addr: SocketAddr, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not an HTTP/1.1 response: {response:?}"),
            )
        })?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// A fresh directory for one test's collector.
fn test_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// True, after a skip, if the collector is not installed.
fn collector_missing() -> bool {
    if otelcol_path().is_some() {
        return false;
    }
    unwind_test_support::missing("the OpenTelemetry Collector, built by scripts/otelcol");
    true
}

/// POSTs the request naming `function` and checks the collector's answer (200).
fn send(collector: &Collector, function: &str) {
    let path = "/v1development/profiles";
    assert!(collector.profiles_endpoint().ends_with(path));
    let (status, body) = post_json(collector.http_addr(), path, &profiles_request(function))
        .unwrap_or_else(|e| {
            panic!(
                "POST {}: {e}\n{}",
                collector.profiles_endpoint(),
                collector.log()
            )
        });
    assert_eq!(
        status,
        200,
        "POST {}: {body}\ncollector log:\n{}",
        collector.profiles_endpoint(),
        collector.log()
    );
}

#[test]
fn collector_writes_an_otlp_json_profiles_request_it_received() {
    if collector_missing() {
        return;
    }
    let start = Instant::now();
    let collector = Collector::start(&test_dir("collector-smoke")).unwrap();
    send(&collector, MARKER);
    let written = collector
        .wait_written(MARKER, WRITE_TIMEOUT)
        .unwrap_or_else(|| {
            panic!(
                "{MARKER} not in the file exporter's output within {WRITE_TIMEOUT:?}:\n{}\n\
                 collector log:\n{}",
                collector.written(),
                collector.log()
            )
        });
    // One line, the request as the collector understood it: the sample, its type's strings
    // and the function's name in the request's dictionary.
    assert_eq!(written.lines().count(), 1, "{written}");
    for expected in [
        r#""samples":[{"stackIndex":1,"values":["1"]}]"#,
        r#""stringTable":["","samples","count","unwind-smoke-marker""#,
        r#""functionTable":[{},{"nameStrindex":3}]"#,
    ] {
        assert!(written.contains(expected), "{expected} not in {written}");
    }
    println!("collector smoke test: {:?}", start.elapsed());
}

#[test]
fn a_restarted_collector_listens_on_the_same_port_and_keeps_its_output() {
    if collector_missing() {
        return;
    }
    let mut collector = Collector::start(&test_dir("collector-restart")).unwrap();
    let endpoint = collector.profiles_endpoint();
    send(&collector, "before_the_restart");
    collector.stop();
    // Stopped in order: what it received is written, and nothing listens any more.
    assert!(collector.written().contains("before_the_restart"));
    assert!(!collector.is_running());
    assert!(post_json(collector.http_addr(), "/v1development/profiles", "{}").is_err());
    collector.restart().unwrap();
    assert_eq!(collector.profiles_endpoint(), endpoint);
    send(&collector, "after_the_restart");
    let written = collector
        .wait_written("after_the_restart", WRITE_TIMEOUT)
        .unwrap_or_else(|| panic!("not written after the restart:\n{}", collector.written()));
    assert!(written.contains("before_the_restart"), "{written}");
    assert_eq!(written.lines().count(), 2, "{written}");
}
