//! A client of debuginfod servers (elfutils' protocol: `GET URL/buildid/ID/debuginfo`), for the
//! debug files of modules nothing on this machine describes, as gdb, perf and elfutils' tools
//! fetch them: the servers of `DEBUGINFOD_URLS` (space-separated) in order, each file kept in the
//! same cache elfutils uses (`$DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/debuginfod_client`,
//! else `~/.cache/debuginfod_client`, as `ID/debuginfo`), so each is fetched once for every
//! tool. A file a server sends is used only if its build id is the one asked for; a build id
//! no server has is not asked again for 10 minutes (elfutils' negative cache entries).
//!
//! A server that does not answer within the timeout (`DEBUGINFOD_TIMEOUT` seconds, default 5),
//! or whose certificate the system's authorities (or those of `SSL_CERT_FILE`) do not vouch for,
//! is said once on stderr and asked nothing more in this run. `https://` servers need the
//! `https` feature (on by default).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest debug file fetched (unstripped browsers' reach 2-3 GiB).
const MAX_FILE: u64 = 4 << 30;
/// How many timeouts a server has to send a whole file (2 minutes by default).
const BODY_TIMEOUTS: u32 = 24;
/// How long a server has to connect and answer, unless `DEBUGINFOD_TIMEOUT` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The servers and the cache.
#[derive(Debug)]
pub struct Client {
    /// The servers, in order; `None` once one has failed to answer.
    servers: Vec<Option<String>>,
    cache: PathBuf,
    timeout: Duration,
    /// What was said on stderr about servers that failed (for the summary too).
    pub problems: Vec<String>,
}

impl Client {
    /// A client of the servers `DEBUGINFOD_URLS` names (read through `var`), with its cache and
    /// timeout; `None` if it names none.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<Client> {
        let servers: Vec<Option<String>> = var("DEBUGINFOD_URLS")?
            .split_ascii_whitespace()
            .map(|u| Some(u.trim_end_matches('/').to_owned()))
            .collect();
        if servers.is_empty() {
            return None;
        }
        let cache = match var("DEBUGINFOD_CACHE_PATH").filter(|p| !p.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => match var("XDG_CACHE_HOME").filter(|p| !p.is_empty()) {
                Some(p) => Path::new(&p).join("debuginfod_client"),
                None => Path::new(&var("HOME")?).join(".cache/debuginfod_client"),
            },
        };
        let timeout = var("DEBUGINFOD_TIMEOUT")
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&t| t > 0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        Some(Client {
            servers,
            cache,
            timeout,
            problems: Vec::new(),
        })
    }

    /// The servers asked, in order.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.servers.iter().flatten().map(String::as_str)
    }

    /// The debug file of build id `id` (lowercase hex): from the cache, else from the first
    /// server that has it (then cached), with the server's address; `None` if no server has
    /// it or none answered.
    pub fn debuginfo(&mut self, id: &str) -> Option<(PathBuf, String)> {
        if id.len() < 2 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let wanted = parse_hex(id)?;
        let cached = self.cache.join(id).join("debuginfo");
        if unwind_samples::debug_files::build_id_of(&cached).as_deref() == Some(&wanted[..]) {
            return Some((cached, "debuginfod cache".to_owned()));
        }
        if self.recently_missed(&cached) {
            return None;
        }
        let (mut answered, mut failed) = (false, false);
        for i in 0..self.servers.len() {
            let Some(server) = self.servers[i].clone() else {
                continue;
            };
            let tls = cfg!(feature = "https") && server.starts_with("https://");
            if !server.starts_with("http://") && !tls {
                let why = if server.starts_with("https://") {
                    "this build has no TLS (the `https` feature): only http:// servers are asked"
                } else {
                    "not an http:// or https:// address"
                };
                self.fail(i, &server, why);
                continue;
            }
            let url = format!("{server}/buildid/{id}/debuginfo");
            match self.fetch(&url, &cached) {
                Ok(true) => {
                    if unwind_samples::debug_files::build_id_of(&cached).as_deref()
                        == Some(&wanted[..])
                    {
                        return Some((cached, server));
                    }
                    // Not the file asked for: never used, and not kept.
                    let _ = std::fs::remove_file(&cached);
                    self.fail(i, &server, &format!("sent a file without build id {id}"));
                }
                Ok(false) => answered = true,
                Err(e) => {
                    failed = true;
                    self.fail(i, &server, &e);
                }
            }
        }
        if answered && !failed {
            self.note_missed(&cached);
        }
        None
    }

    /// Whether `cached` marks a build id no server had, less than the cache's retry time ago:
    /// elfutils' negative entry, an empty file with no permissions, retried after
    /// `cache_miss_s` seconds (a file of that name in the cache; 600 by default).
    fn recently_missed(&self, cached: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = std::fs::symlink_metadata(cached) else {
            return false;
        };
        let retry = std::fs::read_to_string(self.cache.join("cache_miss_s"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(600);
        let age = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .unwrap_or(Duration::MAX);
        meta.is_file()
            && meta.len() == 0
            && meta.permissions().mode() & 0o777 == 0
            && age < Duration::from_secs(retry)
    }

    /// Marks `cached` as a build id no server had (see [`recently_missed`](Self::recently_missed)).
    fn note_missed(&self, cached: &Path) {
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(dir) = cached.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::remove_file(cached);
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o000)
            .custom_flags(libc::O_NOFOLLOW)
            .open(cached);
    }

    /// Says once that `server` failed and why, and asks it nothing more.
    fn fail(&mut self, i: usize, server: &str, why: &str) {
        let line = format!("debuginfod server {server}: {why}; not asked again in this run");
        eprintln!("unwind-profiler: {line}");
        self.problems.push(line);
        self.servers[i] = None;
    }

    /// Fetches `url` into `to` (through a temporary file beside it); `Ok(false)` if the server
    /// does not have it, `Err` if it did not answer or the file could not be kept.
    fn fetch(&self, url: &str, to: &Path) -> Result<bool, String> {
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(self.timeout))
            .timeout_recv_response(Some(self.timeout))
            // A server that sends the file slower than this never holds the run up for longer.
            .timeout_recv_body(Some(self.timeout * BODY_TIMEOUTS))
            .http_status_as_error(false);
        #[cfg(feature = "https")]
        let config = config.tls_config(tls_config());
        let agent: ureq::Agent = config.build().into();
        let response = agent.get(url).call().map_err(|e| e.to_string())?;
        match response.status().as_u16() {
            200 => {}
            // elfutils' servers answer 404 for a build id they do not know.
            404 => return Ok(false),
            other => return Err(format!("answered {other} for {url}")),
        }
        let dir = to.parent().ok_or("no cache directory")?;
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot make the cache directory {}: {e}", dir.display()))?;
        let temp = dir.join(format!(".debuginfo.{}.tmp", std::process::id()));
        let mut out = std::fs::File::create(&temp)
            .map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
        let mut body = response.into_body().into_reader().take(MAX_FILE + 1);
        let copied = std::io::copy(&mut body, &mut out);
        let kept = match copied {
            Ok(n) if n > MAX_FILE => Err(format!("sent more than {MAX_FILE} bytes for {url}")),
            Ok(_) => {
                std::fs::rename(&temp, to).map_err(|e| format!("cannot keep {}: {e}", to.display()))
            }
            Err(e) => Err(format!("reading {url}: {e}")),
        };
        if kept.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        kept.map(|()| true)
    }
}

/// The certificate authorities a server's certificate is checked against, as curl and OpenSSL
/// take them: the PEM file `SSL_CERT_FILE` names, else the system's bundle (Debian's, Fedora's),
/// else Mozilla's list built in.
#[cfg(feature = "https")]
fn tls_config() -> ureq::tls::TlsConfig {
    use ureq::tls::{PemItem, RootCerts, TlsConfig};
    let bundle = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .or_else(|| {
            [
                "/etc/ssl/certs/ca-certificates.crt",
                "/etc/pki/tls/certs/ca-bundle.crt",
            ]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
        });
    let certs: Vec<_> = bundle
        .and_then(|p| std::fs::read(p).ok())
        .map(|pem| {
            ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(PemItem::Certificate(c)) => Some(c.to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let roots = if certs.is_empty() {
        RootCerts::WebPki
    } else {
        RootCerts::new_with_certs(&certs)
    };
    TlsConfig::builder().root_certs(roots).build()
}

/// The bytes of a hex string (a build id as profiles spell it); `None` if it is not one.
pub(crate) fn parse_hex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The servers, cache and timeout come from elfutils' variables, with its defaults.
    #[test]
    fn settings_come_from_elfutils_variables() {
        let vars = |pairs: &'static [(&str, &str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(Client::from_vars(vars(&[("HOME", "/h")])).is_none());
        assert!(Client::from_vars(vars(&[("DEBUGINFOD_URLS", "  ")])).is_none());
        let c = Client::from_vars(vars(&[
            ("DEBUGINFOD_URLS", "http://a:1/ https://b"),
            ("HOME", "/h"),
        ]))
        .unwrap();
        assert_eq!(c.servers().collect::<Vec<_>>(), ["http://a:1", "https://b"]);
        assert_eq!(c.cache, Path::new("/h/.cache/debuginfod_client"));
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        let c = Client::from_vars(vars(&[
            ("DEBUGINFOD_URLS", "http://a"),
            ("XDG_CACHE_HOME", "/x"),
            ("DEBUGINFOD_TIMEOUT", "2"),
        ]))
        .unwrap();
        assert_eq!(c.cache, Path::new("/x/debuginfod_client"));
        assert_eq!(c.timeout, Duration::from_secs(2));
        let c = Client::from_vars(vars(&[
            ("DEBUGINFOD_URLS", "http://a"),
            ("DEBUGINFOD_CACHE_PATH", "/c"),
            ("XDG_CACHE_HOME", "/x"),
        ]))
        .unwrap();
        assert_eq!(c.cache, Path::new("/c"));
    }

    /// A build id with a fresh negative entry is not asked about (a server that would fail is
    /// not even tried); an old entry, or one that is no negative entry, is asked again.
    #[test]
    fn negative_entries_spare_the_servers_for_a_while() {
        use std::os::unix::fs::PermissionsExt;
        let cache = std::env::temp_dir().join(format!("debuginfod-neg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        // A loopback port nothing listens on: asking it fails at once, and says so.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = || {
            let url = format!("http://127.0.0.1:{closed}");
            let cache = cache.display().to_string();
            Client::from_vars(|k| match k {
                "DEBUGINFOD_URLS" => Some(url.clone()),
                "DEBUGINFOD_CACHE_PATH" => Some(cache.clone()),
                _ => None,
            })
            .unwrap()
        };
        let id = "0123456789abcdef";
        let entry = cache.join(id).join("debuginfo");
        client().note_missed(&entry);
        let meta = std::fs::metadata(&entry).unwrap();
        assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (0, 0));
        let mut fresh = client();
        assert_eq!(fresh.debuginfo(id), None);
        assert!(fresh.problems.is_empty(), "{:?}", fresh.problems);
        // Older than the retry time (cache_miss_s): asked again.
        std::fs::write(cache.join("cache_miss_s"), "0\n").unwrap();
        let mut stale = client();
        assert_eq!(stale.debuginfo(id), None);
        assert_eq!(stale.problems.len(), 1, "{:?}", stale.problems);
        std::fs::remove_dir_all(&cache).unwrap();
    }

    /// A hostile server: for one build id it sends a file of another (here not even ELF), for
    /// the other it sends its answer a byte at a time, longer than the client allows. Neither
    /// file is used or kept, and each refusal is said, once: the server is not asked again.
    #[test]
    fn a_server_sending_another_file_or_trickling_is_refused() {
        use std::io::{BufRead, BufReader, Write};
        let cache = std::env::temp_dir().join(format!("debuginfod-hostile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // How many bytes of the trickled body the client took before hanging up.
        let (sent_tx, sent_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request = String::new();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                while reader.read_line(&mut request).is_ok_and(|n| n > 2) {}
                if request.contains("/buildid/aaaa") {
                    let body = b"not the debug file";
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(body);
                } else {
                    let total = 10_000;
                    let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n");
                    let mut sent = 0;
                    while sent < total && stream.write_all(b"x").is_ok() {
                        sent += 1;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let _ = sent_tx.send(sent);
                }
            }
        });
        let client = || Client {
            servers: vec![Some(format!("http://127.0.0.1:{port}"))],
            cache: cache.clone(),
            // Long enough for a busy machine to answer; the body's limit is 12 s.
            timeout: Duration::from_millis(500),
            problems: Vec::new(),
        };
        let mut c = client();
        assert_eq!(c.debuginfo("aaaa"), None);
        assert!(!cache.join("aaaa/debuginfo").exists());
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert!(
            c.problems[0].contains("sent a file without build id aaaa"),
            "{:?}",
            c.problems
        );
        // Refused once, the server is not asked about the next build id.
        assert_eq!(c.debuginfo("bbbb"), None);
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        // 10,000 bytes at one per 10 ms would take 100 s; the whole file has 24 timeouts.
        let mut c = client();
        assert_eq!(c.debuginfo("bbbb"), None);
        assert!(!cache.join("bbbb/debuginfo").exists());
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert!(c.problems[0].contains("reading"), "{:?}", c.problems);
        let sent = sent_rx.recv().unwrap();
        assert!(sent < 10_000, "the whole body was read: {sent} bytes");
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn build_ids_are_hex() {
        assert_eq!(parse_hex("0aff"), Some(vec![0x0a, 0xff]));
        assert_eq!(parse_hex("0g"), None);
        assert_eq!(parse_hex("abc"), None);
    }
}
