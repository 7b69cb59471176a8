//! Sending a profile to an OpenTelemetry Collector: OTLP profiles over HTTP, protobuf-encoded
//! ([`crate::output::otlp`]), configured by `record`'s flags and the OpenTelemetry variables
//! (`OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, and `_HEADERS`, `_COMPRESSION`
//! (`gzip`), `_TIMEOUT` (milliseconds) and `_PROTOCOL` (`http/protobuf`), each as
//! `OTEL_EXPORTER_OTLP_X` or, taking precedence, `OTEL_EXPORTER_OTLP_PROFILES_X`). The HTTP
//! client is ureq, plain HTTP: a collector is most often a sidecar or agent on the same host,
//! and forwards with TLS where the backend is remote. Settings it cannot honour (gRPC, JSON,
//! `https://`) are an error at start ([`ExportError::Settings`]), not sends that fail forever.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use prost::Message;

use crate::config::Config;
use crate::output::otlp::{request, Resource};
use crate::profile::Profile;

/// The path of OTLP/HTTP's profiles signal, added to a base endpoint.
pub const PROFILES_PATH: &str = "/v1development/profiles";

/// OTLP/HTTP's default endpoint.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// How long a send may take, connection included, unless `OTEL_EXPORTER_OTLP_TIMEOUT` says
/// otherwise (OTLP's default).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request sent whole, unless `UNWIND_PROFILER_EXPORT_MAX_BYTES` says otherwise: a
/// period whose request (before compression) is larger goes in parts, each below it, so that
/// the collector's OTLP receiver takes them (it refuses bodies over its
/// `max_request_body_size`, 20 MiB by default, compressed or not).
pub const MAX_REQUEST: usize = 16 << 20;

/// The most of a collector's answer read: an error's text or a success's partial-success
/// message is shown cut, and a server answering without end is not read to its end.
const ANSWER_READ: u64 = 64 * 1024;

/// The most of a collector's message shown, in characters.
const MESSAGE_SHOWN: usize = 200;

/// Where and as what profiles are exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// The URL profiles are posted to (`.../v1development/profiles`).
    pub url: String,
    /// The resource attributes.
    pub resource: Resource,
    /// Headers sent with each request (`OTEL_EXPORTER_OTLP_HEADERS`: an authorization, a
    /// tenant).
    pub headers: Vec<(String, String)>,
    /// Whether request bodies are gzip-compressed (`OTEL_EXPORTER_OTLP_COMPRESSION=gzip`).
    pub gzip: bool,
    /// How long a send may take.
    pub timeout: Duration,
    /// The largest request sent whole ([`MAX_REQUEST`]).
    pub max_request: usize,
}

/// Why a profile was not exported.
#[derive(Debug)]
#[non_exhaustive]
pub enum ExportError {
    /// The collector could not be reached, or did not answer in time.
    Unreachable(String),
    /// The export's settings ask for what cannot be done (`https://`, gRPC), or cannot be
    /// read: the named variable or flag, and why.
    Settings(String),
    /// It answered with an error status (and its body, cut), or took the request but said it
    /// rejected profiles in it (OTLP's partial success; the status is then 2xx).
    Refused {
        /// The HTTP status.
        status: u16,
        /// The body's start.
        body: String,
    },
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportError::Unreachable(e) => write!(f, "the collector could not be reached: {e}"),
            ExportError::Settings(e) => write!(f, "the export's settings: {e}"),
            ExportError::Refused { status, body } => {
                write!(f, "the collector answered {status}: {body}")
            }
        }
    }
}

impl std::error::Error for ExportError {}

impl ExportError {
    /// Whether sending again later may succeed: the collector unreachable, or one of the
    /// statuses OTLP/HTTP says to retry (429, 502, 503, 504).
    pub fn retryable(&self) -> bool {
        match self {
            ExportError::Unreachable(_) => true,
            ExportError::Settings(_) => false,
            ExportError::Refused { status, .. } => matches!(status, 429 | 502 | 503 | 504),
        }
    }
}

/// `k=v,k2=v2` (`OTEL_RESOURCE_ATTRIBUTES`'s format: values percent-encoded, spaces around
/// keys and values trimmed) as pairs; `None` if an entry has no `=` or an empty key.
pub fn parse_attributes(s: &str) -> Option<Vec<(String, String)>> {
    s.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|entry| {
            let (k, v) = entry.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (percent_decoded(k), percent_decoded(v.trim())))
        })
        .collect()
}

/// Whether `key: value` can be sent as an HTTP header (a token for a name; no line breaks or
/// other control characters in the value).
fn header_allowed(key: &str, value: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        && !value.chars().any(|c| c.is_control() && c != '\t')
}

/// `s` with `%XX` escapes decoded (invalid ones left as they are).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The profiles URL for a base endpoint: `PROFILES_PATH` added where it has no path.
fn profiles_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let has_path = trimmed
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains('/'));
    if has_path {
        trimmed.to_owned()
    } else {
        format!("{trimmed}{PROFILES_PATH}")
    }
}

impl Export {
    /// The export `config` and the environment (`var`: a variable's value by name) ask for, if
    /// any (see the module docs and `--export`); [`ExportError::Settings`] for settings that
    /// cannot be honoured.
    pub fn configured(
        config: &Config,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Export>, ExportError> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        // The profiles signal's own variable, else the general one: (name, value).
        let setting = |x: &str| {
            let own = format!("OTEL_EXPORTER_OTLP_PROFILES_{x}");
            let general = format!("OTEL_EXPORTER_OTLP_{x}");
            var(&own)
                .map(|v| (own, v))
                .or_else(|| var(&general).map(|v| (general, v)))
        };
        // The URL and the setting it came from.
        const PROFILES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT";
        const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
        let (source, url) = match config.export.as_deref() {
            Some("otlp") | None => match var(PROFILES_ENDPOINT) {
                Some(url) => (PROFILES_ENDPOINT, url),
                None if config.export.is_some() => match var(ENDPOINT) {
                    Some(base) => (ENDPOINT, profiles_url(&base)),
                    None => ("the default endpoint", profiles_url(DEFAULT_ENDPOINT)),
                },
                None => return Ok(None),
            },
            Some(url) => ("--export", profiles_url(url)),
        };
        let refuse = |e: String| Err(ExportError::Settings(e));
        if url.starts_with("https://") {
            return refuse(format!(
                "{source} {url}: https is not built in; export over http to a collector (a \
                 sidecar or node agent), which forwards with TLS"
            ));
        }
        if !url.starts_with("http://") {
            return refuse(format!("{source} {url}: not an http:// URL"));
        }
        if let Some((name, protocol)) = setting("PROTOCOL") {
            if protocol.trim() != "http/protobuf" {
                return refuse(format!(
                    "{name}={protocol}: only http/protobuf is sent (OTLP/HTTP, port 4318; \
                     OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL=http/protobuf says so for profiles \
                     alone)"
                ));
            }
        }
        let headers = match setting("HEADERS") {
            None => Vec::new(),
            Some((name, v)) => match parse_attributes(&v) {
                Some(h) if h.iter().all(|(k, v)| header_allowed(k, v)) => h,
                _ => return refuse(format!("{name}: not key=value,key=value header pairs")),
            },
        };
        let gzip = match setting("COMPRESSION") {
            None => false,
            Some((_, v)) if v.trim() == "none" => false,
            Some((_, v)) if v.trim() == "gzip" => true,
            Some((name, v)) => return refuse(format!("{name}={v}: gzip or none")),
        };
        let max_request = match var("UNWIND_PROFILER_EXPORT_MAX_BYTES") {
            None => MAX_REQUEST,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n >= 1024 => n,
                _ => {
                    return refuse(format!(
                        "UNWIND_PROFILER_EXPORT_MAX_BYTES={v}: a number of bytes, 1024 or more"
                    ))
                }
            },
        };
        let timeout = match setting("TIMEOUT") {
            None => TIMEOUT,
            Some((name, v)) => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => return refuse(format!("{name}={v}: milliseconds, more than 0")),
            },
        };
        let mut attributes: Vec<(String, String)> = var("OTEL_RESOURCE_ATTRIBUTES")
            .and_then(|v| parse_attributes(&v))
            .unwrap_or_default();
        for (k, v) in &config.labels {
            attributes.retain(|(key, _)| key != k);
            attributes.push((k.clone(), v.clone()));
        }
        // service.name is the resource's first attribute, from its own setting.
        let from_attributes = attributes
            .iter()
            .position(|(k, _)| k == "service.name")
            .map(|i| attributes.remove(i).1);
        let service_name = config
            .service
            .clone()
            .or_else(|| var("OTEL_SERVICE_NAME").filter(|v| !v.is_empty()))
            .or(from_attributes);
        Ok(Some(Export {
            url,
            resource: Resource {
                service_name,
                attributes,
            },
            headers,
            gzip,
            timeout,
            max_request,
        }))
    }

    /// Where profiles go to: the settings but the URL (the resource, headers, compression and
    /// timeout) as `configured` reads them with no variable set.
    pub fn to(url: impl Into<String>) -> Export {
        Export {
            url: url.into(),
            resource: Resource::default(),
            headers: Vec::new(),
            gzip: false,
            timeout: TIMEOUT,
            max_request: MAX_REQUEST,
        }
    }

    /// The requests `profile` is sent in: one, or, if that one is larger than
    /// [`max_request`](Self::max_request), parts of its totals (halved until each is below
    /// it, or is a single total), each with the tables its totals use, and its heap profile in
    /// a request of its own ([`Profile::heap_part`]).
    pub fn requests(&self, profile: &Profile) -> Vec<ExportProfilesServiceRequest> {
        let whole = request(profile, &self.resource);
        if whole.encoded_len() <= self.max_request || profile.totals.len() < 2 {
            return vec![whole];
        }
        let (first, second) = profile.totals.split_at(profile.totals.len() / 2);
        let mut parts = self.requests(&profile.part(first));
        parts.extend(self.requests(&profile.part(second)));
        // The heap profile, which the parts of the timers' samples leave out, on its own.
        if let Some(heap) = profile.heap_part() {
            parts.push(request(&heap, &self.resource));
        }
        parts
    }

    /// Sends `profile` (in parts if it is large, see [`requests`](Self::requests)); returns
    /// the bytes sent. A part that fails stops the rest.
    pub fn send(&self, profile: &Profile) -> Result<usize, ExportError> {
        self.requests(profile)
            .iter()
            .try_fold(0, |bytes, r| Ok(bytes + self.send_request(r)?))
    }

    /// Sends a request made of profiles; returns the bytes sent.
    pub fn send_request(
        &self,
        request: &ExportProfilesServiceRequest,
    ) -> Result<usize, ExportError> {
        let mut body = request.encode_to_vec();
        if self.gzip {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut gz, &body)
                .and_then(|()| gz.finish())
                .map(|compressed| body = compressed)
                .map_err(|e| ExportError::Unreachable(format!("compressing: {e}")))?;
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        let mut post = agent
            .post(&self.url)
            .header("Content-Type", "application/x-protobuf");
        if self.gzip {
            post = post.header("Content-Encoding", "gzip");
        }
        for (k, v) in &self.headers {
            post = post.header(k, v);
        }
        let response = post
            .send(&body[..])
            .map_err(|e| ExportError::Unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        let mut answer = Vec::new();
        // A short read is fine: what was read is shown; the rest is never read.
        let _ = std::io::Read::read_to_end(
            &mut std::io::Read::take(response.into_body().into_reader(), ANSWER_READ),
            &mut answer,
        );
        if !(200..300).contains(&status) {
            return Err(ExportError::Refused {
                status,
                body: shown(&String::from_utf8_lossy(&answer)),
            });
        }
        // OTLP/HTTP: a 2xx may still say some profiles were rejected (they are not retried).
        if let Ok(ExportProfilesServiceResponse {
            partial_success: Some(partial),
        }) = ExportProfilesServiceResponse::decode(&answer[..])
        {
            if partial.rejected_profiles > 0 {
                let message = shown(&partial.error_message);
                return Err(ExportError::Refused {
                    status,
                    body: format!(
                        "{} profile(s) rejected: {message}",
                        partial.rejected_profiles
                    ),
                });
            }
        }
        Ok(body.len())
    }
}

/// A collector's message as it may be shown on a terminal: its first characters, control
/// characters (escape sequences included) as `?`.
fn shown(message: &str) -> String {
    message
        .chars()
        .take(MESSAGE_SHOWN)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The attribute a delivered profile carries when periods before it were dropped: how many,
/// since the last one delivered.
pub const PERIODS_DROPPED_ATTRIBUTE: &str = "unwind_profiler.periods_dropped";

/// The first wait before sending a period again, doubled at each failure up to
/// [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// The longest wait between two tries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a [`Delivery`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryCounts {
    /// Periods the collector took.
    pub delivered: u64,
    /// Their bytes of OTLP.
    pub bytes: u64,
    /// Tries that failed and were tried again.
    pub retries: u64,
    /// Periods dropped because the queue was full (the oldest go first).
    pub dropped: u64,
    /// Periods the collector refused for good (a status not worth retrying).
    pub refused: u64,
    /// Periods still queued when the delivery had to end.
    pub undelivered: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// CPU time making the requests and sending them (protobuf encoding, HTTP).
    pub cpu: Duration,
}

/// The queue between the periods cut and the collector: each period the requests still to
/// send for it (more than one for a large period: see [`Export::requests`]).
struct Queue {
    pending: VecDeque<VecDeque<ExportProfilesServiceRequest>>,
    capacity: usize,
    counts: DeliveryCounts,
    /// Periods dropped since the last one delivered: the next one delivered says so.
    dropped_unsaid: u64,
    /// When set, deliver what is queued until then, then end.
    deadline: Option<Instant>,
}

/// Delivers profiles to a collector from a thread of its own, so that whoever cuts them never
/// waits on the network: a bounded queue (the oldest period dropped and counted when it is
/// full), each failure tried again after a backoff ([`FIRST_BACKOFF`] doubling up to
/// [`MAX_BACKOFF`]) as long as the failure is one worth retrying ([`ExportError::retryable`]),
/// the count of dropped periods carried by the next one delivered
/// ([`PERIODS_DROPPED_ATTRIBUTE`]).
pub struct Delivery {
    shared: Arc<(Mutex<Queue>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    export: Export,
}

impl Delivery {
    /// Starts delivering to `export`'s collector, at most `capacity` periods queued.
    pub fn start(export: Export, capacity: usize) -> std::io::Result<Delivery> {
        let shared = Arc::new((
            Mutex::new(Queue {
                pending: VecDeque::new(),
                capacity: capacity.max(1),
                counts: DeliveryCounts::default(),
                dropped_unsaid: 0,
                deadline: None,
            }),
            Condvar::new(),
        ));
        let (s, e) = (shared.clone(), export.clone());
        // One of the profiler's own threads: in the program (the preload library, a library
        // user), never sampled as the program's.
        let thread =
            crate::threads::spawn_unsampled("unwind-export", move || deliver_until_done(&s, &e))?;
        Ok(Delivery {
            shared,
            thread: Some(thread),
            export,
        })
    }

    /// Where it delivers.
    pub fn export(&self) -> &Export {
        &self.export
    }

    /// Queues `profile` (made into requests here, off the delivering thread).
    pub fn deliver(&self, profile: &Profile) {
        let cpu = crate::collect::thread_cpu();
        let parts = VecDeque::from(self.export.requests(profile));
        let (lock, wake) = &*self.shared;
        let mut q = lock.lock().unwrap_or_else(|e| e.into_inner());
        q.counts.cpu += crate::collect::thread_cpu().saturating_sub(cpu);
        if q.pending.len() >= q.capacity {
            q.pending.pop_front();
            q.counts.dropped += 1;
            q.dropped_unsaid += 1;
        }
        q.pending.push_back(parts);
        wake.notify_all();
    }

    /// What it did so far.
    pub fn counts(&self) -> DeliveryCounts {
        let (lock, _) = &*self.shared;
        let q = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut counts = q.counts.clone();
        counts.undelivered = q.pending.len() as u64;
        counts
    }

    /// Delivers what is queued, trying for at most `within`, then ends; what it did.
    pub fn finish(mut self, within: Duration) -> DeliveryCounts {
        {
            let (lock, wake) = &*self.shared;
            lock.lock().unwrap_or_else(|e| e.into_inner()).deadline = Some(Instant::now() + within);
            wake.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.counts()
    }
}

/// The delivering thread: sends the oldest period queued, part by part (a part delivered is
/// not sent again), until the queue is empty at the deadline, or the deadline passed.
fn deliver_until_done(shared: &(Mutex<Queue>, Condvar), export: &Export) {
    let (lock, wake) = shared;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let (mut period, mut request, said) = {
            let mut q = lock.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let past = q.deadline.is_some_and(|d| Instant::now() >= d);
                if past || (q.pending.is_empty() && q.deadline.is_some()) {
                    return;
                }
                if let Some(mut period) = q.pending.pop_front() {
                    if let Some(r) = period.pop_front() {
                        break (period, r, q.dropped_unsaid);
                    }
                    continue;
                }
                q = wake.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        let cpu = crate::collect::thread_cpu();
        let original = (said > 0).then(|| request.clone());
        if said > 0 {
            say_dropped(&mut request, said);
        }
        let sent = export.send_request(&request);
        let mut q = lock.lock().unwrap_or_else(|e| e.into_inner());
        q.counts.cpu += crate::collect::thread_cpu().saturating_sub(cpu);
        match sent {
            Ok(bytes) => {
                q.counts.bytes += bytes as u64;
                q.dropped_unsaid -= said;
                backoff = FIRST_BACKOFF;
                if period.is_empty() {
                    q.counts.delivered += 1;
                } else {
                    // The period's other parts, next.
                    q.pending.push_front(period);
                }
            }
            Err(e) if e.retryable() => {
                q.counts.retries += 1;
                q.counts.last_error = Some(e.to_string());
                // Back at the front, as it was (a full queue drops it first).
                period.push_front(original.unwrap_or(request));
                q.pending.push_front(period);
                if q.pending.len() > q.capacity {
                    q.pending.pop_front();
                    q.counts.dropped += 1;
                    q.dropped_unsaid += 1;
                }
                let until = Instant::now() + backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                // Wait out the backoff (new periods queued meanwhile do not cut it short).
                loop {
                    let now = Instant::now();
                    let end = q.deadline.map_or(until, |d| d.min(until));
                    if now >= end {
                        break;
                    }
                    q = wake
                        .wait_timeout(q, end - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            Err(e) => {
                q.counts.refused += 1;
                q.counts.last_error = Some(e.to_string());
            }
        }
    }
}

/// Adds [`PERIODS_DROPPED_ATTRIBUTE`] (`n`) to every profile of `request`.
fn say_dropped(request: &mut ExportProfilesServiceRequest, n: u64) {
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
    use opentelemetry_proto::tonic::profiles::v1development::KeyValueAndUnit;
    let Some(d) = request.dictionary.as_mut() else {
        return;
    };
    let key = d.string_table.len() as i32;
    d.string_table.push(PERIODS_DROPPED_ATTRIBUTE.to_owned());
    let index = d.attribute_table.len() as i32;
    d.attribute_table.push(KeyValueAndUnit {
        key_strindex: key,
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(n as i64)),
        }),
        unit_strindex: 0,
    });
    for r in &mut request.resource_profiles {
        for s in &mut r.scope_profiles {
            for p in &mut s.profiles {
                p.attribute_indices.push(index);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(list: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            list.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    /// A profile with nothing in it but its period number as its pid.
    fn period(n: u32) -> Profile {
        let mut p = Profile::empty(
            "p".into(),
            n,
            std::time::UNIX_EPOCH,
            Duration::from_millis(1),
        );
        p.stacks.push(Vec::new());
        p.threads.push(crate::profile::Thread {
            tid: 1,
            name: "t".into(),
            pid: n,
            process: "p".into(),
        });
        p.totals.push(crate::profile::Total {
            thread: 0,
            stack: 0,
            samples: 1,
            periods: 1,
        });
        p
    }

    /// A profile of `n` totals, each of its own stack of three locations, the middle one
    /// shared by every stack; total `i` has `i + 1` samples.
    fn wide(n: usize) -> Profile {
        let mut p = period(1);
        p.stacks.clear();
        p.totals.clear();
        let location = |address: u64| crate::profile::Location {
            address,
            module: None,
            frames: vec![crate::profile::Frame {
                function: format!("function_{address:x}"),
                file: None,
                line: None,
            }],
        };
        p.locations.push(location(0xaaaa));
        for i in 0..n {
            p.locations.push(location(0x1000 + i as u64));
            p.locations.push(location(0x9000 + i as u64));
            let l = p.locations.len();
            p.stacks.push(vec![l - 2, 0, l - 1]);
            p.totals.push(crate::profile::Total {
                thread: 0,
                stack: i,
                samples: i as u64 + 1,
                periods: i as u64 + 1,
            });
        }
        p
    }

    /// The addresses of stack `index` of dictionary `d`, leaf first.
    fn addresses(
        d: &opentelemetry_proto::tonic::profiles::v1development::ProfilesDictionary,
        index: i32,
    ) -> Vec<u64> {
        d.stack_table[index as usize]
            .location_indices
            .iter()
            .map(|&l| d.location_table[l as usize].address)
            .collect()
    }

    /// Each sample of `requests` as (its stack's addresses, its value), in order.
    fn samples_of(requests: &[ExportProfilesServiceRequest]) -> Vec<(Vec<u64>, i64)> {
        let mut out = Vec::new();
        for r in requests {
            let d = r.dictionary.as_ref().unwrap();
            for s in &r.resource_profiles[0].scope_profiles[0].profiles[0].samples {
                out.push((addresses(d, s.stack_index), s.values[0]));
            }
        }
        out
    }

    #[test]
    fn a_large_profile_goes_in_parts_each_below_the_limit_adding_up_to_it() {
        let profile = wide(200);
        let mut export = Export::to("http://127.0.0.1:1/p");
        let whole = export.requests(&profile);
        assert_eq!(whole.len(), 1);
        let size = whole[0].encoded_len();
        export.max_request = size / 5;
        let parts = export.requests(&profile);
        let sizes: Vec<usize> = parts.iter().map(|r| r.encoded_len()).collect();
        assert!(parts.len() >= 5, "{sizes:?} of {size}");
        assert!(sizes.iter().all(|&s| s <= export.max_request), "{sizes:?}");
        // The same samples, stack by stack, in the same order: none lost, none twice.
        assert_eq!(samples_of(&parts), samples_of(&whole));
        // Each part has only the stacks and locations its samples use.
        for r in &parts {
            let d = r.dictionary.as_ref().unwrap();
            let n = r.resource_profiles[0].scope_profiles[0].profiles[0]
                .samples
                .len();
            assert_eq!(
                d.stack_table.len(),
                n + 1,
                "the empty stack and one a sample"
            );
            assert_eq!(
                d.location_table.len(),
                2 * n + 2,
                "the empty location, 2 own, 1 shared"
            );
        }
        // A single total is sent whole, whatever its size.
        export.max_request = 1;
        assert_eq!(export.requests(&wide(1)).len(), 1);
    }

    /// Samples as (their stack's addresses, their value).
    type Samples = Vec<(Vec<u64>, i64)>;

    /// The heap profiles of `request` (type name, then each sample's stack addresses and
    /// value).
    fn heap_of(r: &ExportProfilesServiceRequest) -> Vec<(String, Samples)> {
        let d = r.dictionary.as_ref().unwrap();
        let mut out = Vec::new();
        for rp in &r.resource_profiles {
            for p in &rp.scope_profiles[0].profiles {
                let kind = &d.string_table[p.sample_type.unwrap().type_strindex as usize];
                if !kind.starts_with("alloc_") && !kind.starts_with("inuse_") {
                    continue;
                }
                let samples = p
                    .samples
                    .iter()
                    .map(|s| (addresses(d, s.stack_index), s.values[0]))
                    .collect();
                out.push((kind.clone(), samples));
            }
        }
        out
    }

    #[test]
    fn a_heap_profile_is_sent_beside_the_cpu_one_and_on_its_own_when_split() {
        let mut profile = wide(200);
        profile.heap = Some(crate::profile::Heap {
            interval: 512 * 1024,
            sites: (0..40)
                .map(|i| crate::profile::HeapSite {
                    stack: 5 * i,
                    samples: 1,
                    alloc_objects: 10 + i as u64,
                    alloc_bytes: 1000 + i as u64,
                    live_samples: i as u64 % 2,
                    inuse_objects: i as u64 % 2,
                    inuse_bytes: (i as u64 % 2) * 500,
                })
                .collect(),
            ..Default::default()
        });
        let mut export = Export::to("http://127.0.0.1:1/p");
        let whole = export.requests(&profile);
        assert_eq!(whole.len(), 1);
        let heap = heap_of(&whole[0]);
        let kinds: Vec<&str> = heap.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "alloc_objects",
                "alloc_space",
                "inuse_objects",
                "inuse_space"
            ]
        );
        assert_eq!(heap[1].1.len(), 40);
        assert_eq!(heap[3].1.len(), 20, "sites with nothing live are left out");
        export.max_request = whole[0].encoded_len() / 5;
        let parts = export.requests(&profile);
        let with_heap: Vec<_> = parts.iter().filter(|r| !heap_of(r).is_empty()).collect();
        assert_eq!(with_heap.len(), 1, "the heap profile once, on its own");
        assert_eq!(
            heap_of(with_heap[0]),
            heap,
            "the same sites, stacks and values"
        );
        assert_eq!(samples_of(&parts[..parts.len() - 1]), samples_of(&whole));
    }

    #[test]
    fn the_parts_of_a_period_are_retried_without_sending_any_twice() {
        // Two parts taken, then two tries refused (503), then the rest taken.
        let (url, taken) = server_down_when(|n| (2..4).contains(&n));
        let mut export = Export::to(url);
        let profile = wide(100);
        export.max_request = export.requests(&profile)[0].encoded_len() / 4;
        let expected = samples_of(&export.requests(&profile));
        let delivery = Delivery::start(export, 4).unwrap();
        delivery.deliver(&profile);
        let counts = delivery.finish(Duration::from_secs(20));
        assert_eq!(counts.retries, 2, "{counts:?}");
        assert_eq!((counts.delivered, counts.undelivered), (1, 0), "{counts:?}");
        let taken = taken.lock().unwrap();
        assert!(taken.len() >= 4, "{} requests", taken.len());
        // Each part once, in order: the two taken before the refusals were not sent again.
        assert_eq!(samples_of(&taken), expected);
    }

    /// One HTTP request read from `stream`: its head (lowercased) and its body.
    fn read_request(stream: &std::net::TcpStream) -> (String, Vec<u8>) {
        use std::io::{BufRead, Read};
        let mut reader = std::io::BufReader::new(stream);
        let (mut head, mut length) = (String::new(), 0usize);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            let line = line.to_ascii_lowercase();
            if let Some(v) = line.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        (head, body)
    }

    /// An HTTP server on loopback answering 503 while `down`, else 200; the requests it took
    /// (with 200), decoded.
    fn server(
        down: Arc<std::sync::atomic::AtomicBool>,
    ) -> (String, Arc<Mutex<Vec<ExportProfilesServiceRequest>>>) {
        server_down_when(move |_| down.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// An HTTP server on loopback answering its `n`th request (from 0) 503 when `down(n)`,
    /// else 200; the requests it took (with 200), decoded.
    fn server_down_when(
        down: impl Fn(usize) -> bool + Send + 'static,
    ) -> (String, Arc<Mutex<Vec<ExportProfilesServiceRequest>>>) {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/p", listener.local_addr().unwrap());
        let taken = Arc::new(Mutex::new(Vec::new()));
        let t = taken.clone();
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { return };
                let (_, body) = read_request(&stream);
                let status = if down(n) {
                    "503 Service Unavailable"
                } else {
                    t.lock()
                        .unwrap()
                        .push(ExportProfilesServiceRequest::decode(&body[..]).unwrap());
                    "200 OK"
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
            }
        });
        (url, taken)
    }

    /// An HTTP server on loopback answering one request with `head` and then `body_length`
    /// bytes of `fill`; how many of those bytes it could write before the client went away.
    fn answering(
        head: String,
        fill: Vec<u8>,
        body_length: usize,
    ) -> (String, std::sync::mpsc::Receiver<usize>) {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/p", listener.local_addr().unwrap());
        let (written, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            read_request(&stream);
            let _ = write!(stream, "{head}content-length: {body_length}\r\n\r\n");
            let mut sent = 0;
            while sent < body_length {
                let n = fill.len().min(body_length - sent);
                if stream.write_all(&fill[..n]).is_err() {
                    break;
                }
                sent += n;
            }
            let _ = written.send(sent);
        });
        (url, receive)
    }

    fn send_to(url: String) -> Result<usize, ExportError> {
        Export::to(url).send(&period(1))
    }

    #[test]
    fn a_collectors_error_is_read_only_in_part_and_shown_without_control_characters() {
        // 256 MiB of an error text full of escape sequences: a collector (or whatever answers
        // at the configured address) answering without end.
        let fill = b"\x1b[2Jbad request \x07".repeat(4096);
        let length = 256 << 20;
        let head = "HTTP/1.1 400 Bad Request\r\nconnection: close\r\n".to_string();
        let (url, written) = answering(head, fill, length);
        let error = send_to(url).unwrap_err();
        let ExportError::Refused { status, body } = &error else {
            panic!("{error}")
        };
        assert_eq!(*status, 400);
        assert_eq!(body.chars().count(), MESSAGE_SHOWN, "{body}");
        assert!(body.starts_with("?[2Jbad request ?"), "{body}");
        assert!(!body.chars().any(char::is_control), "{body}");
        // The client stopped reading: the server could not write the whole body (socket
        // buffers hold a few MiB at most).
        let written = written.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(written < length / 2, "{written} of {length} bytes written");
    }

    #[test]
    fn a_partial_success_rejecting_profiles_is_an_error_and_an_empty_answer_is_not() {
        let answer = ExportProfilesServiceResponse {
            partial_success: Some(
                opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesPartialSuccess {
                    rejected_profiles: 1,
                    error_message: "no samples\n".into(),
                },
            ),
        }
        .encode_to_vec();
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n".to_string();
        let (url, _) = answering(head.clone(), answer.clone(), answer.len());
        let error = send_to(url).unwrap_err();
        assert!(!error.retryable());
        assert_eq!(
            error.to_string(),
            "the collector answered 200: 1 profile(s) rejected: no samples?"
        );
        // A partial success that rejected nothing (a warning at most) is a success.
        let fine = ExportProfilesServiceResponse {
            partial_success: Some(Default::default()),
        }
        .encode_to_vec();
        let (url, _) = answering(head.clone(), fine.clone(), fine.len());
        assert!(send_to(url).is_ok());
        let (url, _) = answering(head, Vec::new(), 0);
        assert!(send_to(url).is_ok());
    }

    #[test]
    fn periods_are_retried_and_those_past_the_queue_dropped_and_said() {
        let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (url, taken) = server(down.clone());
        let delivery = Delivery::start(Export::to(url), 2).unwrap();
        for n in 1..=4 {
            delivery.deliver(&period(n));
        }
        // While the collector answers 503: tries again, and the queue of 2 dropped 2 periods.
        std::thread::sleep(Duration::from_millis(1200));
        let counts = delivery.counts();
        assert!(counts.retries >= 2, "{counts:?}");
        assert_eq!((counts.delivered, counts.dropped), (0, 2), "{counts:?}");
        down.store(false, std::sync::atomic::Ordering::SeqCst);
        let counts = delivery.finish(Duration::from_secs(20));
        assert_eq!(
            (counts.delivered, counts.dropped, counts.undelivered),
            (2, 2, 0),
            "{counts:?}"
        );
        let taken = taken.lock().unwrap();
        let pids: Vec<String> = taken
            .iter()
            .map(|r| {
                let d = r.dictionary.as_ref().unwrap();
                let p = &r.resource_profiles[0].scope_profiles[0].profiles[0];
                let dropped: Vec<String> = p
                    .attribute_indices
                    .iter()
                    .map(|&i| &d.attribute_table[i as usize])
                    .filter(|a| {
                        d.string_table[a.key_strindex as usize] == PERIODS_DROPPED_ATTRIBUTE
                    })
                    .map(|a| format!("{:?}", a.value.as_ref().unwrap().value))
                    .collect();
                let pid = r.resource_profiles[0]
                    .resource
                    .as_ref()
                    .unwrap()
                    .attributes
                    .iter()
                    .find(|kv| kv.key == "process.pid")
                    .map(|kv| format!("{:?}", kv.value.as_ref().unwrap().value))
                    .unwrap();
                format!("{pid} {dropped:?}")
            })
            .collect();
        // The newest two, in order; the first delivered says 2 were dropped, the next nothing.
        assert_eq!(
            pids,
            [
                "Some(IntValue(3)) [\"Some(IntValue(2))\"]",
                "Some(IntValue(4)) []"
            ]
        );
    }

    #[test]
    fn the_endpoint_comes_from_the_flag_or_the_otel_variables() {
        let mut c = Config::default();
        assert_eq!(Export::configured(&c, vars(&[])).unwrap(), None);
        assert_eq!(
            Export::configured(
                &c,
                vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318")])
            )
            .unwrap(),
            None,
            "the generic endpoint alone (set for traces) does not turn profiles on"
        );
        let url =
            |c: &Config, v: &[(&str, &str)]| Export::configured(c, vars(v)).unwrap().unwrap().url;
        assert_eq!(
            url(
                &c,
                &[("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "http://c:1/p")]
            ),
            "http://c:1/p"
        );
        c.export = Some("otlp".into());
        assert_eq!(url(&c, &[]), "http://localhost:4318/v1development/profiles");
        assert_eq!(
            url(&c, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:9/")]),
            "http://h:9/v1development/profiles"
        );
        c.export = Some("http://127.0.0.1:4318".into());
        assert_eq!(url(&c, &[]), "http://127.0.0.1:4318/v1development/profiles");
        c.export = Some("http://127.0.0.1:4318/custom/path".into());
        assert_eq!(url(&c, &[]), "http://127.0.0.1:4318/custom/path");
    }

    #[test]
    fn resource_attributes_from_the_variables_then_the_labels() {
        let mut c = Config {
            export: Some("otlp".into()),
            labels: vec![("service.version".into(), "2".into())],
            ..Config::default()
        };
        let e = Export::configured(
            &c,
            vars(&[(
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=from-attrs, service.version=1,team=a%20b",
            )]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(e.resource.service_name.as_deref(), Some("from-attrs"));
        assert_eq!(
            e.resource.attributes,
            [
                ("team".into(), "a b".into()),
                ("service.version".into(), "2".into())
            ]
        );
        c.service = Some("flag".into());
        let e = Export::configured(&c, vars(&[("OTEL_SERVICE_NAME", "env")]))
            .unwrap()
            .unwrap();
        assert_eq!(e.resource.service_name.as_deref(), Some("flag"));
        c.service = None;
        let e = Export::configured(&c, vars(&[("OTEL_SERVICE_NAME", "env")]))
            .unwrap()
            .unwrap();
        assert_eq!(e.resource.service_name.as_deref(), Some("env"));
        assert_eq!(parse_attributes("a=1,=2"), None);
        assert_eq!(parse_attributes("novalue"), None);
    }

    #[test]
    fn headers_compression_timeout_and_protocol_from_the_variables() {
        let c = Config {
            export: Some("otlp".into()),
            ..Config::default()
        };
        let configured = |v: &[(&str, &str)]| Export::configured(&c, vars(v));
        let e = configured(&[
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Basic%20abc,x-scope-orgid=a",
            ),
            ("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "x-scope-orgid=b"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ])
        .unwrap()
        .unwrap();
        // The profiles signal's own variable wins, whole.
        assert_eq!(e.headers, [("x-scope-orgid".into(), "b".into())]);
        assert!(e.gzip);
        assert_eq!(e.timeout, Duration::from_millis(2500));
        let e = configured(&[("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Basic%20abc")])
            .unwrap()
            .unwrap();
        assert_eq!(e.headers, [("authorization".into(), "Basic abc".into())]);
        assert!(!e.gzip);
        assert_eq!(e.timeout, TIMEOUT);
        // What cannot be honoured is an error naming the setting, not sends failing forever.
        for (name, value, says) in [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "only http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL",
                "http/json",
                "only http/protobuf",
            ),
            (
                "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
                "https://c:4318/p",
                "https is not",
            ),
            (
                "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
                "c:4318/p",
                "not an http:// URL",
            ),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "gzip or none"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "milliseconds"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "a%0D%0Ainjected: 1=x",
                "header pairs",
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "a=x%0D%0Ainjected: 1",
                "header pairs",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "novalue", "header pairs"),
        ] {
            let e = configured(&[(name, value)]).unwrap_err();
            assert!(!e.retryable());
            let text = e.to_string();
            assert!(
                text.contains(says) && text.contains(name),
                "{name}={value}: {text}"
            );
            // Headers hold credentials: never repeated.
            let secret = name.ends_with("_HEADERS");
            assert_eq!(text.contains(value), !secret, "{name}={value}: {text}");
        }
    }

    #[test]
    fn headers_are_sent_and_a_gzip_body_is_the_request() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/p", listener.local_addr().unwrap());
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let (head, body) = read_request(&stream);
            let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
            let _ = send.send((head, body));
        });
        let mut export = Export::to(url);
        export.gzip = true;
        export.headers = vec![("Authorization".into(), "Bearer t0k".into())];
        let sent = export.send(&period(7)).unwrap();
        let (head, body) = receive.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
        assert!(head.contains("authorization: bearer t0k\r\n"), "{head}");
        assert_eq!(body.len(), sent, "the bytes counted are the bytes sent");
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut plain)
            .unwrap();
        let request = ExportProfilesServiceRequest::decode(&plain[..]).unwrap();
        assert_eq!(request, super::request(&period(7), &Resource::default()));
    }
}
