//! The pull endpoint: Go's convention, `GET /debug/pprof/profile?seconds=N`, answered with a
//! gzipped pprof profile of the next N seconds, so that `go tool pprof http://ADDR/...`,
//! Parca's and Grafana Alloy's scrapers read a program that profiles itself (the library, or
//! the preload library used alone with `UNWIND_PROFILER_PPROF_LISTEN`). With allocations
//! sampled, `GET /debug/pprof/heap` answers at once with the heap profile as Go's does: what
//! is live now, and what was allocated since the start (or the last period's cut).
//!
//! A plain `std::net` server on its own thread (one of the profiler's, never sampled), each
//! request answered on a thread of its own, at most [`MAX_CONNECTIONS`] at once (more are
//! answered 503 at once); at most [`MAX_SECONDS`] a window, and one window at a time (a second
//! concurrent profile request is answered 409 at once, as Go answers 500 while a CPU profile is
//! being taken). It binds where it is told; the default everywhere is loopback.
//!
//! Loopback is open to every user of the machine, so a connection from a process of this host
//! (its socket is in this network namespace's `/proc/net/tcp` or `tcp6`) is answered only if
//! that socket's owner is this process's user or root; others get 403 before a window starts
//! (a profile names the program's functions and threads, and a window held by another user
//! would keep the owner's scraper out). A connection from elsewhere reaches the endpoint only
//! where it was bound to a non-loopback address, which is the operator's choice.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// The path served.
pub const PROFILE_PATH: &str = "/debug/pprof/profile";

/// The heap profile's path.
pub const HEAP_PATH: &str = "/debug/pprof/heap";

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
    /// The heap profile, now.
    Heap,
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
    if path == HEAP_PATH {
        return Request::Heap;
    }
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
    /// The gzipped heap profile now, `None` if allocations are not sampled.
    fn heap(&self) -> Option<Vec<u8>> {
        None
    }
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
    // The request is read before any answer, a refusal's too: a socket closed with bytes
    // unread is reset, and the client may lose the answer.
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
    if let Err(why) = peer_allowed(&stream) {
        return respond(
            &mut stream,
            "403 Forbidden",
            "text/plain",
            format!("{why}\n").as_bytes(),
        );
    }
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
        Request::Heap => match windows.heap() {
            Some(body) => respond(&mut stream, "200 OK", "application/octet-stream", &body),
            None => respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                b"allocations are not sampled (--alloc)\n",
            ),
        },
        Request::NotFound => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            format!("only {PROFILE_PATH}?seconds=N and {HEAP_PATH} are served\n").as_bytes(),
        ),
        Request::Bad(why) => respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            format!("{why}\n").as_bytes(),
        ),
    }
}

/// Whether the process at the other end of `stream` may read profiles (see the module docs):
/// `Err` says why not.
fn peer_allowed(stream: &TcpStream) -> Result<(), String> {
    let (peer, local) = (stream.peer_addr(), stream.local_addr());
    let (Ok(peer), Ok(local)) = (peer, local) else {
        return Err("the connection's addresses could not be read".into());
    };
    // The connecting socket's own entry: its local address is our peer, its remote ours.
    let (peer, local) = (canonical(peer), canonical(local));
    let mut owner = None;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            owner = owner.or_else(|| socket_owner(&text, peer, local));
        }
    }
    // SAFETY: geteuid has no preconditions.
    let us = unsafe { libc::geteuid() };
    match owner {
        Some(uid) if uid == us || uid == 0 => Ok(()),
        Some(uid) => Err(format!(
            "profiles are served to user {us} and root only; this connection is user {uid}'s"
        )),
        None if peer.ip().is_loopback() => {
            Err("the connecting socket's owner could not be found".into())
        }
        // From another host or network namespace: where the operator bound the endpoint.
        None => Ok(()),
    }
}

/// An IPv4 address in IPv6 clothes (`::ffff:127.0.0.1`, a dual-stack listener's view of an
/// IPv4 client) as the IPv4 address it is.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The uid owning the socket of `text` (`/proc/net/tcp` or `tcp6`) whose local address is
/// `local` and remote address `remote`.
fn socket_owner(text: &str, local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (l, r, uid) = (fields.get(1)?, fields.get(2)?, fields.get(7)?);
        (proc_net_address(l)? == local && proc_net_address(r)? == remote)
            .then(|| uid.parse().ok())
            .flatten()
    })
}

/// An address as `/proc/net/tcp{,6}` writes it: the address's bytes in memory order printed
/// as native-endian 32-bit words in hex, a colon, the port in hex.
fn proc_net_address(field: &str) -> Option<SocketAddr> {
    let (address, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = address.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match address.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(canonical(SocketAddr::new(ip, port)))
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
        assert_eq!(p("GET /debug/pprof/heap HTTP/1.1"), Request::Heap);
        assert_eq!(p("GET /debug/pprof/goroutine HTTP/1.1"), Request::NotFound);
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

    #[test]
    fn addresses_as_proc_net_tcp_writes_them() {
        let a = |s: &str| s.parse::<SocketAddr>().ok();
        let little = cfg!(target_endian = "little");
        let v4 = if little {
            "0100007F:1F90"
        } else {
            "7F000001:1F90"
        };
        assert_eq!(proc_net_address(v4), a("127.0.0.1:8080"));
        let v6 = if little {
            "00000000000000000000000001000000:01BB"
        } else {
            "00000000000000000000000000000001:01BB"
        };
        assert_eq!(proc_net_address(v6), a("[::1]:443"));
        // An IPv4 client of a dual-stack listener, as the IPv4 address it is.
        let mapped = if little {
            "0000000000000000FFFF00000100007F:0050"
        } else {
            "00000000000000000000FFFF7F000001:0050"
        };
        assert_eq!(proc_net_address(mapped), a("127.0.0.1:80"));
        for bad in [
            "",
            "0100007F",
            "0100007F:",
            "0100007G:1F90",
            "01007F:1F90",
            "0100007F:10000",
        ] {
            assert_eq!(proc_net_address(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_loopback_connection_of_this_user_is_found_and_allowed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let owner = socket_owner(
            &text,
            client.local_addr().unwrap(),
            server.local_addr().unwrap(),
        );
        // SAFETY: geteuid has no preconditions.
        assert_eq!(owner, Some(unsafe { libc::geteuid() }));
        assert_eq!(peer_allowed(&server), Ok(()));
        // No socket connects from the listening address to the client: no owner.
        let none = socket_owner(
            &text,
            listener.local_addr().unwrap(),
            "127.0.0.1:1".parse().unwrap(),
        );
        assert_eq!(none, None);
    }
}
