//! The pull endpoint: Go's convention, `GET /debug/pprof/profile?seconds=N`, answered with a
//! gzipped pprof profile of the next N seconds, so that `go tool pprof http://ADDR/...`,
//! Parca's and Grafana Alloy's scrapers read a program that profiles itself (the library, or
//! the preload library used alone with `UNWIND_PROFILER_PPROF_LISTEN`).
//!
//! A plain `std::net` server on its own thread (one of the profiler's, never sampled), each
//! request answered on a thread of its own, at most [`MAX_CONNECTIONS`] at once (more are
//! answered 503 at once); at most [`MAX_SECONDS`] a window, and one window at a time (a second
//! concurrent profile request is answered 409 at once, as Go answers 500 while a CPU profile is
//! being taken). It binds where it is told; the default everywhere is loopback.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// The path served.
pub const PROFILE_PATH: &str = "/debug/pprof/profile";

/// The window when a request names none (Go's default).
pub const DEFAULT_SECONDS: u64 = 30;

/// The longest window served.
pub const MAX_SECONDS: u64 = 300;

/// The most requests answered at once.
pub const MAX_CONNECTIONS: usize = 4;

/// How long a client may take to send its request line and headers.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes of request line and headers read.
const MAX_REQUEST_HEAD: u64 = 16 << 10;

/// A request, as far as the endpoint cares.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// A profile of the next `seconds`.
    Profile {
        /// The window's length.
        seconds: u64,
    },
    /// A path not served.
    NotFound,
    /// A method other than GET (or HEAD), or a line that is not HTTP.
    Bad(String),
}

/// Parses a request line (`GET /debug/pprof/profile?seconds=5 HTTP/1.1`).
pub fn parse_request_line(line: &str) -> Request {
    let mut words = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (words.next(), words.next(), words.next())
    else {
        return Request::Bad("not an HTTP request line".into());
    };
    if !version.starts_with("HTTP/1.") {
        return Request::Bad(format!("{version}: HTTP/1.x only"));
    }
    if method != "GET" {
        return Request::Bad(format!("{method}: GET only"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path != PROFILE_PATH {
        return Request::NotFound;
    }
    let mut seconds = DEFAULT_SECONDS;
    for pair in query.split('&') {
        if let Some(v) = pair.strip_prefix("seconds=") {
            match v.parse::<u64>() {
                Ok(n) if (1..=MAX_SECONDS).contains(&n) => seconds = n,
                _ => {
                    return Request::Bad(format!(
                        "seconds={v}: a whole number of seconds from 1 to {MAX_SECONDS}"
                    ))
                }
            }
        }
    }
    Request::Profile { seconds }
}

/// What the endpoint asks of the profiler it serves.
pub trait Windows: Send + Sync + 'static {
    /// Starts a window; `false` if one is being taken.
    fn start_window(&self) -> bool;
    /// Ends it: the gzipped pprof profile of the window.
    fn end_window(&self) -> Option<Vec<u8>>;
}

/// Serves `listener` on a thread of the profiler's own until the process ends; returns the
/// address it serves.
pub fn serve(listener: TcpListener, windows: Arc<dyn Windows>) -> std::io::Result<SocketAddr> {
    let addr = listener.local_addr()?;
    let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    crate::threads::spawn_unsampled("unwind-pprof", move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else {
                // Out of descriptors, say: not a loop that spins.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            use std::sync::atomic::Ordering::AcqRel;
            if busy.fetch_add(1, AcqRel) >= MAX_CONNECTIONS {
                busy.fetch_sub(1, AcqRel);
                let _ = respond(
                    &mut stream,
                    "503 Service Unavailable",
                    "text/plain",
                    b"too many requests at once\n",
                );
                continue;
            }
            let (windows, done) = (windows.clone(), busy.clone());
            let spawned = crate::threads::spawn_unsampled("unwind-pprof-request", move || {
                // A client that misbehaves loses its own request, nothing else.
                let _ = answer(stream, &*windows);
                done.fetch_sub(1, AcqRel);
            });
            if spawned.is_err() {
                busy.fetch_sub(1, AcqRel);
            }
        }
    })?;
    Ok(addr)
}

/// Reads one request from `stream` and answers it.
fn answer(stream: TcpStream, windows: &dyn Windows) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(std::io::Read::take(stream.try_clone()?, MAX_REQUEST_HEAD));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // The headers: read up to the blank line, not used.
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
    }
    let mut stream = stream;
    match parse_request_line(&line) {
        Request::Profile { seconds } => {
            if !windows.start_window() {
                return respond(
                    &mut stream,
                    "409 Conflict",
                    "text/plain",
                    b"a profile is being taken: try again when it is done\n",
                );
            }
            std::thread::sleep(Duration::from_secs(seconds));
            match windows.end_window() {
                Some(body) => respond(&mut stream, "200 OK", "application/octet-stream", &body),
                None => respond(
                    &mut stream,
                    "500 Internal Server Error",
                    "text/plain",
                    b"the profile could not be made\n",
                ),
            }
        }
        Request::NotFound => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            format!("only {PROFILE_PATH}?seconds=N is served\n").as_bytes(),
        ),
        Request::Bad(why) => respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            format!("{why}\n").as_bytes(),
        ),
    }
}

fn respond(stream: &mut TcpStream, status: &str, kind: &str, body: &[u8]) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        let p = |l: &str| parse_request_line(l);
        assert_eq!(
            p("GET /debug/pprof/profile?seconds=5 HTTP/1.1\r\n"),
            Request::Profile { seconds: 5 }
        );
        assert_eq!(
            p("GET /debug/pprof/profile HTTP/1.0"),
            Request::Profile { seconds: 30 }
        );
        assert_eq!(
            p("GET /debug/pprof/profile?x=1&seconds=2 HTTP/1.1"),
            Request::Profile { seconds: 2 }
        );
        assert_eq!(p("GET /debug/pprof/heap HTTP/1.1"), Request::NotFound);
        for bad in [
            "GET /debug/pprof/profile?seconds=0 HTTP/1.1",
            "GET /debug/pprof/profile?seconds=301 HTTP/1.1",
            "GET /debug/pprof/profile?seconds=-1 HTTP/1.1",
            "POST /debug/pprof/profile HTTP/1.1",
            "GET /debug/pprof/profile SPDY/3",
            "\u{0}\u{1}garbage",
            "",
        ] {
            assert!(matches!(p(bad), Request::Bad(_)), "{bad:?}");
        }
    }
}
