//! The real OpenTelemetry Collector, for tests of the OTLP profiles export: a collector of our
//! own on loopback ports that receives OTLP (HTTP and gRPC) and writes every profiles export it
//! gets as a line of OTLP/JSON into a file of the test's directory.
//!
//! `scripts/otelcol` (run by `scripts/setup`) builds the binary once per user into
//! `${XDG_CACHE_HOME:-$HOME/.cache}/unwind-profiler/otelcol-v0.161.0/otelcol`; the environment
//! variable `UNWIND_OTELCOL` names another one. Without it a test calls
//! [`missing`](crate::missing):
//!
//! ```no_run
//! use unwind_test_support::collector::{otelcol_path, Collector};
//!
//! if otelcol_path().is_none() {
//!     unwind_test_support::missing("the OpenTelemetry Collector, built by scripts/otelcol");
//!     return;
//! }
//! let dir = std::env::temp_dir().join("my-test");
//! let collector = Collector::start(&dir).unwrap();
//! // ... send profiles to collector.profiles_endpoint() ...
//! assert!(collector.written().contains("my_function"));
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The directory under `${XDG_CACHE_HOME:-$HOME/.cache}/unwind-profiler` that `scripts/otelcol`
/// builds the collector into (its `CORE` version; change both together).
pub const OTELCOL_DIR: &str = "otelcol-v0.161.0";

/// The environment variable that names a collector binary to use instead of the cached one.
pub const OTELCOL_ENV: &str = "UNWIND_OTELCOL";

/// The file, in the collector's directory, that the file exporter writes (one OTLP/JSON
/// `ExportProfilesServiceRequest` a line).
pub const PROFILES_FILE: &str = "profiles.jsonl";

/// The file, in the collector's directory, that gets the collector's stdout and stderr (kept
/// across [`Collector::restart`]).
pub const LOG_FILE: &str = "otelcol.log";

/// The file, in the collector's directory, that holds its configuration.
pub const CONFIG_FILE: &str = "otelcol.yaml";

/// How long [`Collector::start`] and [`Collector::restart`] wait for the collector to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Collector::stop`] waits for the collector to exit after SIGTERM before it kills it.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What the collector logs once its receivers listen and its pipelines run.
const READY_LINE: &str = "Everything is ready";

/// The collector binary: `$UNWIND_OTELCOL` if set, else the one `scripts/otelcol` builds into
/// the user's cache directory; `None` if that file does not exist.
pub fn otelcol_path() -> Option<PathBuf> {
    let path = match std::env::var_os(OTELCOL_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => cache_dir()?
            .join("unwind-profiler")
            .join(OTELCOL_DIR)
            .join("otelcol"),
    };
    path.is_file().then_some(path)
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}` (an XDG_CACHE_HOME that is empty or relative is ignored,
/// as the XDG specification says and as the shell's default expansion does for an empty one).
fn cache_dir() -> Option<PathBuf> {
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
        if xdg.is_absolute() {
            return Some(xdg);
        }
    }
    Some(PathBuf::from(std::env::var_os("HOME")?).join(".cache"))
}

/// A running OpenTelemetry Collector with an OTLP receiver on two loopback ports (HTTP and
/// gRPC) and a profiles pipeline into the file exporter, which writes [`PROFILES_FILE`] in its
/// directory. Dropping it stops the collector.
#[derive(Debug)]
pub struct Collector {
    binary: PathBuf,
    dir: PathBuf,
    http_port: u16,
    grpc_port: u16,
    child: Option<Child>,
}

impl Collector {
    /// Starts a collector in `dir` (created if missing): writes its configuration there
    /// ([`CONFIG_FILE`]; OTLP/HTTP and gRPC on free loopback ports, the file exporter into
    /// [`PROFILES_FILE`], no metrics port of its own, so that collectors run side by side), runs
    /// it with the profiles feature gate, its output into [`LOG_FILE`], and waits (30 s at most)
    /// until it is ready and its HTTP port accepts connections.
    ///
    /// An error says why, with the end of the collector's log; a collector that is not installed
    /// ([`otelcol_path`] is `None`) is one.
    pub fn start(dir: &Path) -> Result<Collector, String> {
        let binary = otelcol_path().ok_or_else(|| {
            format!("no OpenTelemetry Collector (${OTELCOL_ENV}, or scripts/otelcol builds it)")
        })?;
        fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        // Another process may take a port between our probe and the collector's bind: then the
        // collector exits at once and a new pair of ports is tried.
        let mut last_error = String::new();
        for _ in 0..3 {
            let (http_port, grpc_port) = free_ports()?;
            let mut collector = Collector {
                binary: binary.clone(),
                dir: dir.to_path_buf(),
                http_port,
                grpc_port,
                child: None,
            };
            fs::write(collector.config_path(), collector.config()?)
                .map_err(|e| format!("writing {}: {e}", collector.config_path().display()))?;
            match collector.spawn() {
                Ok(()) => return Ok(collector),
                Err(e) => {
                    let port_taken = e.contains("address already in use");
                    last_error = e;
                    if !port_taken {
                        break;
                    }
                }
            }
        }
        Err(last_error)
    }

    /// The OTLP/HTTP receiver's base address, `http://127.0.0.1:PORT`.
    pub fn http_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// The OTLP/HTTP profiles address, `http://127.0.0.1:PORT/v1development/profiles` (protobuf
    /// or JSON, by the request's `Content-Type`).
    pub fn profiles_endpoint(&self) -> String {
        format!("{}/v1development/profiles", self.http_endpoint())
    }

    /// The OTLP/gRPC receiver's address, `http://127.0.0.1:PORT` (plaintext).
    pub fn grpc_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// The OTLP/HTTP receiver's loopback address (for a hand-written request over a
    /// `TcpStream`).
    pub fn http_addr(&self) -> SocketAddr {
        (Ipv4Addr::LOCALHOST, self.http_port).into()
    }

    /// The directory the collector runs in (its configuration, log and output).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the file exporter has written so far: one OTLP/JSON `ExportProfilesServiceRequest`
    /// a line, in the order received (empty if nothing yet). It flushes every 100 ms, and on
    /// [`stop`](Self::stop).
    pub fn written(&self) -> String {
        fs::read_to_string(self.dir.join(PROFILES_FILE)).unwrap_or_default()
    }

    /// Waits, `timeout` at most, until [`written`](Self::written) contains `needle`; returns
    /// what was written then, or `None` if it never did.
    pub fn wait_written(&self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let written = self.written();
            if written.contains(needle) {
                return Some(written);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The collector's stdout and stderr so far (for a failing test's message).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join(LOG_FILE)).unwrap_or_default()
    }

    /// True while the collector's process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops the collector: SIGTERM, so that it shuts down in order and the file exporter
    /// flushes, then after 10 s SIGKILL; waits for it. Does nothing if it is not running. Its
    /// ports are free afterwards (a sender sees connections refused) until
    /// [`restart`](Self::restart).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(None)) {
            #[cfg(unix)]
            {
                let pid = child.id() as libc::pid_t;
                // SAFETY: `pid` is our child, not yet waited for, so the id is not reused.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                let deadline = Instant::now() + STOP_TIMEOUT;
                while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the collector if it runs and starts it again on the same ports, configuration and
    /// output file (the file exporter appends: what it wrote before stays), waiting as
    /// [`start`](Self::start) does. For a test that takes the collector away in the middle of a
    /// run.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.spawn()
    }

    fn config_path(&self) -> PathBuf {
        self.dir.join(CONFIG_FILE)
    }

    /// The collector's configuration (YAML).
    fn config(&self) -> Result<String, String> {
        let output = self.dir.join(PROFILES_FILE);
        let output = output
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", output.display()))?;
        Ok(format!(
            "\
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{http}
      grpc:
        endpoint: 127.0.0.1:{grpc}
exporters:
  file:
    path: {path}
    # Keep what was written before a restart (without rotation it would truncate).
    append: true
    flush_interval: 100ms
service:
  telemetry:
    # No metrics server (its default port 8888 would clash between collectors).
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [file]
",
            http = self.http_port,
            grpc = self.grpc_port,
            path = yaml_string(output),
        ))
    }

    /// Runs the collector and waits until it is ready; on failure it is stopped.
    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.join(LOG_FILE);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("opening {}: {e}", log_path.display()))?;
        // This run's output starts here (a restart appends to the same log).
        let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
        let stdout = log
            .try_clone()
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        let child = Command::new(&self.binary)
            .arg("--config")
            .arg(self.config_path())
            .arg("--feature-gates=+service.profilesSupport")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("running {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        let result = self.wait_ready(&log_path, log_start);
        if result.is_err() {
            self.stop();
        }
        result
    }

    /// Waits until the collector logs that it is ready (after `log_start` in its log) and its
    /// HTTP port accepts a connection; an error if it exits first or [`READY_TIMEOUT`] passes.
    fn wait_ready(&mut self, log_path: &Path, log_start: u64) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let log = read_from(log_path, log_start);
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(format!(
                    "the OpenTelemetry Collector ({}) exited at start ({status}); its log ({}):\n{}",
                    self.binary.display(),
                    log_path.display(),
                    tail(&log)
                ));
            }
            if log.contains(READY_LINE)
                && TcpStream::connect_timeout(&self.http_addr(), Duration::from_millis(500)).is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the OpenTelemetry Collector ({}) was not ready on port {} within {:?}; its \
                     log ({}):\n{}",
                    self.binary.display(),
                    self.http_port,
                    READY_TIMEOUT,
                    log_path.display(),
                    tail(&log)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Collector {
    /// Stops the collector and waits for it ([`Collector::stop`]).
    fn drop(&mut self) {
        self.stop();
    }
}

/// Two distinct loopback ports that were free a moment ago: both are bound at once, so that they
/// differ, and released for the collector.
fn free_ports() -> Result<(u16, u16), String> {
    let bind = || {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| Ok((l.local_addr()?.port(), l)))
            .map_err(|e| format!("binding a loopback port: {e}"))
    };
    let (a, _first) = bind()?;
    let (b, _second) = bind()?;
    Ok((a, b))
}

/// `s` as a double-quoted YAML string, with `$` doubled (the collector's configuration expands
/// `${...}` in strings; `$$` is a `$`).
fn yaml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '$' => out.push_str("$$"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The file `path` from byte `start` on (lossily decoded; empty if unreadable).
fn read_from(path: &Path, start: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut f) = File::open(path) {
        if f.seek(SeekFrom::Start(start)).is_ok() {
            let _ = f.read_to_end(&mut bytes);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The last 40 lines of `log`.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_strings_are_quoted_and_escaped() {
        assert_eq!(yaml_string("/tmp/a b/p.jsonl"), "\"/tmp/a b/p.jsonl\"");
        assert_eq!(yaml_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(yaml_string("/x/${HOME}"), "\"/x/$${HOME}\"");
    }

    #[test]
    fn free_ports_differ() {
        let (a, b) = free_ports().unwrap();
        assert_ne!(a, b);
        assert!(a != 0 && b != 0);
    }

    #[test]
    fn the_tail_is_the_last_lines() {
        let log: String = (0..50).map(|i| format!("{i}\n")).collect();
        let t = tail(&log);
        assert!(t.starts_with("10\n") && t.ends_with("49"), "{t}");
    }
}
