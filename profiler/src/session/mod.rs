//! Profiling under `record`: the program's processes sample into memory they share with the
//! `record` process, which collects, symbolizes and writes one profile of them all.
//!
//! `record` listens on a Unix socket in the abstract namespace and passes its name to the
//! program in [`SESSION_VAR`]. The preload library of every process the program becomes or
//! starts (it is inherited through `fork` and `exec`, and survives programs that close every
//! descriptor) connects to it and sends, as messages of one connection:
//!
//! - [`Message::Hello`]: its pid and executable, with a `memfd` holding its
//!   [`ProcessRecord`] (process-wide counters, sampling epoch, table figures);
//! - [`Message::Thread`]: for every thread record it allocates, a `memfd` holding the
//!   [`ThreadRecord`] and its ring;
//! - [`Message::Modules`]: the modules of its rule table, whenever they change (after a
//!   `dlopen` or `dlclose` the preload library interposes).
//!
//! A child `fork`ed without `exec` inherits its parent's connection but is not that process: it
//! makes a connection of its own from the `fork` child handler ([`join_after_fork`]) and sends
//! the same messages; the parent's it closes.
//!
//! Nothing of the profiler runs in the program besides its signal handler, the hooks on
//! `pthread_create`, `dlopen` and `dlclose`, and the constructor that sets up: no collector
//! thread (a single-threaded program stays single-threaded in its C library's eyes) and nothing
//! at exit. `record` maps each `memfd` it receives, drains the rings while the program runs,
//! and after the last process has ended (however: `exit`, `_exit`, a signal, `SIGKILL`) reads
//! what is left, the kernel keeping the memory as long as `record` maps it.
//!
//! The receiving side trusts nothing the program wrote: every record is checked for its magic
//! and its size against the mapping, and the rings' consumer checks every length.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::collect::{self, Collector, ProcessInfo};
use crate::profile::{Module, Profile};
use crate::ring::Ring;
use crate::sampler::{self, ProcessRecord, ThreadRecord};
use crate::{Config, StartError};

/// The environment variable that names `record`'s socket (in the abstract namespace).
pub const SESSION_VAR: &str = "UNWIND_PROFILER_SESSION";

/// The environment variable that names the directory where processes share the rules of their
/// modules ([`unwind_in_process::set_rules_cache`]): the user's lasting one for the preload
/// library's build ([`lasting_rules_cache`]), or one of the run's own.
pub const RULES_CACHE_VAR: &str = "UNWIND_PROFILER_RULES_CACHE";

/// The largest message: one module's path and build id (paths are at most `PATH_MAX`).
const MAX_MESSAGE: usize = 8192;

/// What a process tells `record`. Encoded as little-endian `u64` words, then bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// The process starts (with its [`ProcessRecord`]'s descriptor).
    Hello {
        /// Its process id.
        pid: u32,
        /// Its executable's path.
        program: String,
    },
    /// A thread record (with its descriptor): the record at `index` of the process.
    Thread {
        /// The record's index in the process.
        index: u64,
    },
    /// The modules of the rule table from now on: `count` [`Message::Module`]s follow.
    Modules {
        /// How many.
        count: u64,
    },
    /// One module of a [`Message::Modules`] list.
    Module(Module),
    /// The snapshot signal arrived: write the profile so far.
    Snapshot,
}

const HELLO: u64 = 1;
const THREAD: u64 = 2;
const MODULES: u64 = 3;
const MODULE: u64 = 4;
const SNAPSHOT: u64 = 5;

impl Message {
    /// The message as bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut word = |w: u64| out.extend_from_slice(&w.to_le_bytes());
        match self {
            Message::Hello { pid, program } => {
                word(HELLO);
                word(u64::from(*pid));
                out.extend_from_slice(program.as_bytes());
            }
            Message::Thread { index } => {
                word(THREAD);
                word(*index);
            }
            Message::Modules { count } => {
                word(MODULES);
                word(*count);
            }
            Message::Snapshot => word(SNAPSHOT),
            Message::Module(m) => {
                for w in [
                    MODULE,
                    m.start,
                    m.end,
                    m.bias,
                    m.file_offset,
                    u64::from(m.generated),
                    m.build_id.len() as u64,
                ] {
                    word(w);
                }
                out.extend_from_slice(m.build_id.as_bytes());
                out.extend_from_slice(m.path.as_bytes());
            }
        }
        out
    }

    /// Decodes a message, or `None` if it is not one.
    pub fn decode(bytes: &[u8]) -> Option<Message> {
        let word = |i: usize| -> Option<u64> {
            let b = bytes.get(i * 8..i * 8 + 8)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        };
        let text = |from: usize| -> Option<String> {
            Some(String::from_utf8_lossy(bytes.get(from..)?).into_owned())
        };
        match word(0)? {
            HELLO => Some(Message::Hello {
                pid: u32::try_from(word(1)?).ok()?,
                program: text(16)?,
            }),
            THREAD => Some(Message::Thread { index: word(1)? }),
            MODULES => Some(Message::Modules { count: word(1)? }),
            SNAPSHOT => Some(Message::Snapshot),
            MODULE => {
                let id_len = usize::try_from(word(6)?).ok()?;
                let id = bytes.get(56..56usize.checked_add(id_len)?)?;
                Some(Message::Module(Module {
                    start: word(1)?,
                    end: word(2)?,
                    bias: word(3)?,
                    file_offset: word(4)?,
                    generated: word(5)? != 0,
                    build_id: String::from_utf8_lossy(id).into_owned(),
                    path: text(56 + id_len)?,
                }))
            }
            _ => None,
        }
    }
}

/// The socket address of the abstract name `name`, and its length.
fn address(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    // The first byte stays 0: the abstract namespace.
    if bytes.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "session name too long",
        ));
    }
    for (to, &from) in addr.sun_path[1..].iter_mut().zip(bytes) {
        *to = from as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((addr, len as libc::socklen_t))
}

/// A new `SOCK_SEQPACKET` Unix socket, closed on `exec`.
fn seqpacket(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain system call.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | flags,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A `memfd` of `bytes` zeroed bytes, closed on `exec`, mapped shared; the mapping is never
/// unmapped.
fn shared_memory(bytes: usize) -> io::Result<(OwnedFd, *mut u8)> {
    // SAFETY: a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"unwind-profiler".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain system call on our descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), bytes as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let p = map(&fd, bytes)?;
    Ok((fd, p))
}

/// Maps `bytes` of `fd` shared, readable and writable.
fn map(fd: &OwnedFd, bytes: usize) -> io::Result<*mut u8> {
    // SAFETY: a new mapping of our descriptor, placed by the kernel.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// Sends `message` on `socket`, with `fd` if given.
fn send(socket: RawFd, message: &Message, fd: Option<RawFd>) -> io::Result<()> {
    let bytes = message.encode();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // Room for one descriptor, aligned for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic; the control buffer holds one descriptor's
        // message (CMSG_SPACE(4) is at most 24 bytes), and CMSG_FIRSTHDR of a msghdr with that
        // buffer points into it.
        unsafe {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
    }
    loop {
        // SAFETY: a valid msghdr; MSG_NOSIGNAL: a gone `record` gives EPIPE, not SIGPIPE.
        let n = unsafe { libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message from `socket` without blocking: its bytes and the descriptor it
/// carried. `Ok(None)` when none is waiting; an empty message at the end of the connection.
fn receive(socket: RawFd, buffer: &mut [u8]) -> io::Result<Option<(usize, Option<OwnedFd>)>> {
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: a valid msghdr whose buffers outlive the call.
    let n = unsafe {
        libc::recvmsg(
            socket,
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    let mut fd = None;
    // SAFETY: the kernel filled the control buffer; CMSG_FIRSTHDR/NXTHDR stay within
    // msg_controllen, and an SCM_RIGHTS message's data holds descriptors now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..count {
                    let owned = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    // One descriptor per message: any other is closed.
                    if fd.is_none() {
                        fd = Some(owned);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Some((n as usize, fd)))
}

// ---------------------------------------------------------------------------------------------
// The program's side.

/// This process's connection to `record`.
struct Client {
    /// The process that connected: a child forked from it (and not yet `exec`ed) inherits the
    /// connection but is not that process, and sends nothing on it.
    pid: u32,
    socket: OwnedFd,
    /// The loader's counts of loads and unloads when the modules were last sent (also keeps
    /// one [`Message::Modules`] list from interleaving with another).
    sent: Mutex<(u64, u64)>,
    /// `record`'s socket, for a forked child's own connection.
    address: (libc::sockaddr_un, libc::socklen_t),
    /// The program's file, as `Hello` named it (a forked child's too).
    program: String,
}

/// The connection of this process, or of the process it was forked from (a leaked box, never
/// freed: a signal handler may be reading it when a forked child replaces it).
static CLIENT: AtomicPtr<Client> = AtomicPtr::new(std::ptr::null_mut());

/// The connection in [`CLIENT`], whoever made it.
fn any_client() -> Option<&'static Client> {
    // SAFETY: CLIENT is null or a leaked box, never freed.
    unsafe { CLIENT.load(Acquire).as_ref() }
}

/// This process's connection, if it has one of its own (see [`Client::pid`]).
fn client() -> Option<&'static Client> {
    any_client().filter(|c| c.pid == std::process::id())
}

/// How long a process waits for `record` to take its connection before profiling itself
/// alone (`record`'s queue of connections is full: thousands of processes starting at once).
const CONNECT_PATIENCE: Duration = Duration::from_millis(200);

/// Connects `socket` to `record`'s socket at `addr` without blocking past
/// [`CONNECT_PATIENCE`] (a Unix socket's `connect` blocks while the listener's queue is full).
fn connect(socket: &OwnedFd, addr: &libc::sockaddr_un, len: libc::socklen_t) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    // SAFETY: plain fcntl calls on our descriptor.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    let start = Instant::now();
    let result = loop {
        // SAFETY: a valid address of the given length.
        if unsafe { libc::connect(fd, (addr as *const libc::sockaddr_un).cast(), len) } == 0 {
            break Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock || start.elapsed() >= CONNECT_PATIENCE {
            break Err(e);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Blocking from here on: a message waits for room rather than being lost.
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) };
    result
}

/// Starts profiling this process under `record`, whose socket is `name`: connects, shares its
/// process record, builds the tables, installs the signal handler and samples the calling
/// thread. Starts no thread and registers nothing at exit. On an error the process is not
/// profiled by this way (and nothing was installed if the connection failed).
pub fn start(config: &Config, name: &str) -> Result<(), StartError> {
    let session = |e: io::Error| StartError::Session(e);
    let (addr, len) = address(name).map_err(session)?;
    let program = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let (socket, record) = hello(&addr, len, &program, |_| {}).map_err(session)?;
    // SAFETY: `hello` maps the record for the rest of the process.
    unsafe { sampler::use_process_record(record) };
    CLIENT.store(
        Box::into_raw(Box::new(Client {
            pid: std::process::id(),
            socket,
            sent: Mutex::new(collect::loader_counts()),
            address: (addr, len),
            program,
        })),
        Release,
    );
    unwind_in_process::set_stack_scanning(config.stack_scanning).map_err(StartError::Unwinder)?;
    if let Some(dir) = std::env::var_os(RULES_CACHE_VAR).filter(|d| !d.is_empty()) {
        unwind_in_process::set_rules_cache(Some(dir.into()));
    }
    let report = unwind_in_process::init().map_err(StartError::Unwinder)?;
    sampler::process().table_built(&report, false);
    send_modules();
    sampler::install(config.timing()).map_err(StartError::Signal)?;
    sampler::start_thread();
    Ok(())
}

/// Connects to `record`'s socket at `addr` and says hello (this process runs `program`) with
/// a new process record, which `fill` sets up before `record` sees it; returns the connection
/// and the record (zeroed but for its magic and what `fill` wrote, mapped for the rest of the
/// process).
fn hello(
    addr: &libc::sockaddr_un,
    len: libc::socklen_t,
    program: &str,
    fill: impl FnOnce(&ProcessRecord),
) -> io::Result<(OwnedFd, *mut ProcessRecord)> {
    let socket = seqpacket(0)?;
    connect(&socket, addr, len)?;
    let (fd, region) = shared_memory(std::mem::size_of::<ProcessRecord>())?;
    // SAFETY: the region is zeroed (a valid ProcessRecord: all atomics), page-aligned, and
    // mapped for the rest of the process.
    let record = unsafe { &*(region as *const ProcessRecord) };
    fill(record);
    record.magic.store(sampler::PROCESS_RECORD_MAGIC, Release);
    let hello = Message::Hello {
        pid: std::process::id(),
        program: program.to_owned(),
    };
    send(socket.as_raw_fd(), &hello, Some(fd.as_raw_fd()))?;
    Ok((socket, region.cast()))
}

/// In a child just forked (not `exec`ed) from a process of a session, from the `fork` child
/// handler: joins the session as a process of its own, so that a program's forked workers
/// (Python's `multiprocessing`, servers' worker processes) are profiled as its `exec`ed
/// children are. The child inherits its parent's tables and settings; it gets its own
/// connection, process record, thread record and timer, and tells `record` its modules. If
/// it cannot join, it is not sampled. Without a session, does nothing.
///
/// Only the calling thread exists here. What this uses is safe in such a child: the C library
/// resets its allocator's and loader's locks before the child handlers run, and the unwinder's
/// own `fork` handlers (registered before this library's, so run first) leave its state free;
/// no lock the parent's other threads may have held is taken (the parent's connection is only
/// read).
pub fn join_after_fork() {
    let parent_record = sampler::process();
    sampler::forget_parent_in_child();
    let Some(parent) = any_client() else { return };
    let joined = hello(&parent.address.0, parent.address.1, &parent.program, |r| {
        r.inherit(parent_record)
    });
    let parent_fd = parent.socket.as_raw_fd();
    let Ok((socket, record)) = joined else {
        // The parent's connection is not this process's: closed here, so that `record` sees
        // the parent's end when the parent ends, and forgotten (a snapshot request or a
        // `fork` of this process then does nothing).
        CLIENT.store(std::ptr::null_mut(), Release);
        // SAFETY: closes this process's copy of the parent's socket, no longer reachable.
        unsafe { libc::close(parent_fd) };
        return;
    };
    // The parent's modules, as last sent: this process has the same tables.
    let sent = parent.sent.try_lock().map_or((0, 0), |s| *s);
    CLIENT.store(
        Box::into_raw(Box::new(Client {
            pid: std::process::id(),
            socket,
            sent: Mutex::new(sent),
            address: parent.address,
            program: parent.program.clone(),
        })),
        Release,
    );
    // SAFETY: as above; the parent's Client is leaked, never used again in this process.
    unsafe { libc::close(parent_fd) };
    send_modules_unchanged();
    // SAFETY: `hello` maps the record for the rest of the process.
    unsafe { sampler::resume_in_child(record) };
}

/// Asks `record` for a snapshot of the profile so far; async-signal-safe (one `sendmsg` of
/// bytes prepared here, errno kept), for the snapshot signal's handler. False outside a
/// session.
pub fn request_snapshot() -> bool {
    // Not `client()`: `getpid` is a system call, and a forked child's snapshot is harmless.
    let Some(c) = any_client() else {
        return false;
    };
    let message = SNAPSHOT.to_le_bytes();
    // SAFETY: this thread's errno, restored below so the interrupted code never sees a change.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: sends 8 bytes from a local buffer; send is async-signal-safe.
    unsafe {
        libc::send(
            c.socket.as_raw_fd(),
            message.as_ptr().cast(),
            message.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    true
}

/// Sends the modules of the published table.
fn send_modules() {
    let Some(c) = client() else { return };
    let mut sent = c.sent.lock().unwrap_or_else(|e| e.into_inner());
    *sent = collect::loader_counts();
    send_module_list(c);
}

/// Sends the modules of the published table, keeping the loader's counts as they were sent
/// (a forked child's, from its parent: asking the loader is what a child of a multi-threaded
/// process should not do).
fn send_modules_unchanged() {
    if let Some(c) = client() {
        let _held = c.sent.lock().unwrap_or_else(|e| e.into_inner());
        send_module_list(c);
    }
}

/// Sends `c`'s process's modules (the caller holds `c.sent`).
fn send_module_list(c: &Client) {
    let modules = collect::modules_now();
    let socket = c.socket.as_raw_fd();
    let count = Message::Modules {
        count: modules.len() as u64,
    };
    if send(socket, &count, None).is_err() {
        return;
    }
    for m in modules {
        if send(socket, &Message::Module(m), None).is_err() {
            return;
        }
    }
}

/// After the program's `dlopen` or `dlclose` returned: if modules were loaded or unloaded,
/// rebuilds the tables and tells `record`. Does nothing outside a session.
pub fn modules_may_have_changed() {
    let Some(c) = client() else { return };
    if *c.sent.lock().unwrap_or_else(|e| e.into_inner()) == collect::loader_counts()
        && !CODE_MAPPED_UNSEEN.swap(false, Relaxed)
    {
        return;
    }
    if let Ok(report) = unwind_in_process::refresh() {
        sampler::process().table_built(&report, true);
    }
    send_modules();
}

/// Set when memory was made executable while a refresh was in progress (which may have read
/// the process's mappings before): the next chance refreshes.
static CODE_MAPPED_UNSEEN: AtomicBool = AtomicBool::new(false);

/// After the program's `mmap` or `mprotect` made `[addr, addr + len)` executable: if no module
/// of the table covers it (code generated at run time, or a file's code mapped again), rebuilds
/// the tables, which then know it, and tells `record`. A JIT maps its code regions a few times
/// a run (node: 2 calls; the JVM: 4; python -X perf: 1 per 64 KiB of trampolines); changing
/// the protection of pages already known costs a look at the table. Never waits for a refresh
/// in progress (the caller may hold the loader's lock, which that refresh waits for): it is
/// left to the next call or `dlopen`. Does nothing outside a session; keeps `errno`.
pub fn code_mapped(addr: usize, len: usize) {
    if client().is_none() {
        return;
    }
    // SAFETY: errno is this thread's.
    let errno = unsafe { *libc::__errno_location() };
    let start = addr as u64;
    let end = start.saturating_add(len as u64);
    match unwind_in_process::covers_code(start, end) {
        None => CODE_MAPPED_UNSEEN.store(true, Relaxed),
        Some(covered) => {
            if !covered || CODE_MAPPED_UNSEEN.swap(false, Relaxed) {
                match unwind_in_process::refresh_unless_busy() {
                    Ok(report) => {
                        sampler::process().table_built(&report, true);
                        send_modules();
                    }
                    Err(_) => CODE_MAPPED_UNSEEN.store(true, Relaxed),
                }
            }
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// A zeroed region of `bytes` shared with `record`, for a thread record, or `None` outside a
/// session (or if it cannot be made). [`announce_thread`] hands it over once set up.
pub(crate) fn shared_thread_region(bytes: usize) -> Option<(OwnedFd, *mut u8)> {
    client()?;
    shared_memory(bytes).ok()
}

/// Hands the thread record at `index`, in the region of `fd`, over to `record`.
pub(crate) fn announce_thread(index: usize, fd: OwnedFd) {
    if let Some(c) = client() {
        let _ = send(
            c.socket.as_raw_fd(),
            &Message::Thread {
                index: index as u64,
            },
            Some(fd.as_raw_fd()),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// `record`'s side.

/// A thread record received from a process, checked.
struct SharedThread {
    record: &'static ThreadRecord,
    ring: Ring,
    /// The owner's CPU time when last looked at (ns), while its timer runs, and its tid.
    cpu_seen_ns: u64,
    cpu_seen_tid: i32,
}

/// How often `record` reads the CPU time of the threads whose timer runs: what it adds for a
/// thread that ends without deleting its timer (the main thread at `exit`, every thread at a
/// `SIGKILL`), which misses at most this much of each.
const CPU_LOOK_EVERY: Duration = Duration::from_millis(100);

/// The CPU time thread `tid` of process `pid` has run, in ns (`/proc`'s schedstat), if it
/// still exists.
fn thread_cpu_ns(pid: u32, tid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// One process (one program image: an `exec` starts another, with the same pid).
struct Process {
    /// Its connection, until it ends (then closed: a long run may see thousands of processes).
    socket: Option<OwnedFd>,
    pid: u32,
    program: String,
    record: Option<&'static ProcessRecord>,
    threads: Vec<SharedThread>,
    /// A [`Message::Modules`] list being received, and how many are still to come.
    modules: Vec<Module>,
    modules_due: u64,
    collector: Collector,
    /// When its connection ended (CLOCK_MONOTONIC ns).
    ended_ns: Option<u64>,
    /// Drained once more after its end.
    drained_after_end: bool,
    /// When the threads' CPU time was last read.
    cpu_looked: Option<Instant>,
}

/// `record`'s end of a session: the socket the program's processes connect to, and what they
/// shared.
pub struct Server {
    listener: OwnedFd,
    name: String,
    processes: Vec<Process>,
    interval: Duration,
    wall_clock: bool,
    /// Messages and descriptors that did not check out, by what was wrong.
    rejected: HashMap<&'static str, u64>,
    /// A process asked for a snapshot.
    snapshot: bool,
    /// `record`'s CLOCK_MONOTONIC and wall clock at the same instant.
    clocks: (u64, SystemTime),
    /// The directory where the processes share their modules' rules, and whether it is this
    /// run's own (removed with the server) rather than the user's lasting one.
    rules_cache: Option<(std::path::PathBuf, bool)>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some((dir, true)) = &self.rules_cache {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Server {
    /// Listens on a new abstract socket named after this process, for processes sampled with
    /// `config`'s period and clock by the preload library `library`, whose build's rules cache
    /// they share ([`lasting_rules_cache`]; a directory of this run's own if there is none).
    pub fn new(config: &Config, library: &std::path::Path) -> io::Result<Server> {
        let listener = seqpacket(libc::SOCK_NONBLOCK)?;
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!("unwind-profiler-{}-{nanos:x}", std::process::id());
        let (addr, len) = address(&name)?;
        // SAFETY: a valid address of the given length; then listen on our socket.
        unsafe {
            if libc::bind(
                listener.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            ) != 0
                || libc::listen(listener.as_raw_fd(), 4096) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Server {
            listener,
            name: name.clone(),
            processes: Vec::new(),
            interval: config.period(),
            wall_clock: config.clock == crate::Clock::Wall,
            rejected: HashMap::new(),
            snapshot: false,
            clocks: (sampler::now_ns(), SystemTime::now()),
            rules_cache: lasting_rules_cache(library)
                .map(|d| (d, false))
                .or_else(|| private_directory(&format!("{name}-rules")).map(|d| (d, true))),
        })
    }

    /// The socket's name, for [`SESSION_VAR`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory for [`RULES_CACHE_VAR`], if one could be made.
    pub fn rules_cache(&self) -> Option<&std::path::Path> {
        self.rules_cache.as_ref().map(|(d, _)| d.as_path())
    }

    /// Processes that connected so far.
    pub fn processes(&self) -> usize {
        self.processes.len()
    }

    /// Waits up to `timeout` for news, then takes every new connection and message and drains
    /// every ring.
    pub fn collect(&mut self, timeout: Duration) {
        let mut fds: Vec<libc::pollfd> = std::iter::once(self.listener.as_raw_fd())
            .chain(
                self.processes
                    .iter()
                    .filter_map(|p| p.socket.as_ref())
                    .map(|s| s.as_raw_fd()),
            )
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: a valid array of pollfds; a signal (Ctrl-C) ends the wait early (EINTR).
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                timeout.as_millis().min(1000) as libc::c_int,
            )
        };
        self.accept();
        let mut buffer = vec![0u8; MAX_MESSAGE];
        for i in 0..self.processes.len() {
            self.receive(i, &mut buffer);
        }
        self.drain();
    }

    fn accept(&mut self) {
        loop {
            // SAFETY: accepts on our listening socket; no address wanted.
            let fd = unsafe {
                libc::accept4(
                    self.listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                )
            };
            if fd < 0 {
                return;
            }
            self.processes.push(Process {
                // SAFETY: a descriptor accept just gave us.
                socket: Some(unsafe { OwnedFd::from_raw_fd(fd) }),
                pid: 0,
                program: String::new(),
                record: None,
                threads: Vec::new(),
                modules: Vec::new(),
                modules_due: 0,
                collector: Collector::new(self.interval, self.wall_clock, self.clocks.1),
                ended_ns: None,
                drained_after_end: false,
                cpu_looked: None,
            });
        }
    }

    fn reject(&mut self, what: &'static str) {
        *self.rejected.entry(what).or_default() += 1;
    }

    /// Takes every message waiting on process `i`'s connection.
    fn receive(&mut self, i: usize, buffer: &mut [u8]) {
        while let Some(socket) = self.processes[i].socket.as_ref() {
            let (n, fd) = match receive(socket.as_raw_fd(), buffer) {
                Ok(Some(m)) => m,
                Ok(None) => return,
                Err(_) => (0, None),
            };
            if n == 0 {
                let p = &mut self.processes[i];
                p.socket = None;
                p.ended_ns = Some(sampler::now_ns());
                return;
            }
            match Message::decode(&buffer[..n]) {
                Some(Message::Hello { pid, program }) => {
                    let record = fd.and_then(|fd| map_checked::<ProcessRecord>(&fd, 0));
                    let record =
                        record.filter(|r| r.magic.load(Acquire) == sampler::PROCESS_RECORD_MAGIC);
                    if record.is_none() {
                        self.reject("process record");
                    }
                    let p = &mut self.processes[i];
                    p.pid = pid;
                    p.program = program;
                    p.record = record;
                }
                Some(Message::Thread { .. }) => match fd.and_then(|fd| map_thread(&fd)) {
                    Some(t) => self.processes[i].threads.push(t),
                    None => self.reject("thread record"),
                },
                Some(Message::Modules { count }) => {
                    let p = &mut self.processes[i];
                    p.modules.clear();
                    p.modules_due = count;
                    if count == 0 {
                        p.collector.set_modules(Vec::new());
                    }
                }
                Some(Message::Module(m)) => {
                    let p = &mut self.processes[i];
                    if p.modules_due > 0 {
                        p.modules.push(m);
                        p.modules_due -= 1;
                        if p.modules_due == 0 {
                            let modules = std::mem::take(&mut p.modules);
                            // The samples so far were taken with the old modules.
                            p.drain();
                            p.collector.set_modules(modules);
                        }
                    }
                }
                Some(Message::Snapshot) => self.snapshot = true,
                None => self.reject("message"),
            }
        }
    }

    /// Drains every ring of every process still running, and once more those that ended.
    fn drain(&mut self) {
        for p in &mut self.processes {
            if p.drained_after_end {
                continue;
            }
            p.drain();
            if p.socket.is_none() {
                p.drained_after_end = true;
            }
        }
    }

    /// Whether a process asked for a snapshot since the last call.
    pub fn snapshot_requested(&mut self) -> bool {
        std::mem::take(&mut self.snapshot)
    }

    /// Every process's profile, symbolized, merged into one (`None` if no process connected or
    /// none had a record). Call after the last process has ended.
    pub fn finish(mut self) -> Option<Profile> {
        self.accept();
        let mut buffer = vec![0u8; MAX_MESSAGE];
        for i in 0..self.processes.len() {
            self.receive(i, &mut buffer);
        }
        for p in &mut self.processes {
            p.drain();
        }
        self.profile()
    }

    /// Every process's profile so far, symbolized, merged into one (`None` if no process
    /// connected or none had a record).
    pub fn profile(&self) -> Option<Profile> {
        // The vdso is the same image in every process of one kernel: ours names theirs.
        let vdso = unwind_in_process::vdso_image();
        let mut symbolizer = crate::symbolize::Symbolizer::new(vdso.as_deref());
        let now = sampler::now_ns();
        let (mono, wall) = self.clocks;
        let profiles: Vec<Profile> = self
            .processes
            .iter()
            .filter_map(|p| {
                let record = p.record?;
                let epoch = record.epoch_ns.load(Relaxed);
                if epoch == 0 {
                    return None; // never sampled
                }
                let end = p.ended_ns.unwrap_or(now);
                let info = ProcessInfo {
                    pid: p.pid,
                    program: p.program.clone(),
                    duration: Duration::from_nanos(end.saturating_sub(epoch)),
                    record,
                    unended_cpu: p.unended_cpu(),
                };
                let mut profile = p.collector.finish(
                    p.threads.iter().map(|t| (t.record, &t.ring)),
                    &info,
                    &mut symbolizer,
                );
                profile.start = if epoch >= mono {
                    wall + Duration::from_nanos(epoch - mono)
                } else {
                    wall - Duration::from_nanos(mono - epoch)
                };
                Some(profile)
            })
            .collect();
        crate::profile::Profile::merge(profiles)
    }

    /// Messages and descriptors that did not check out, by what was wrong (none, unless the
    /// program wrote over the profiler's memory or another program connected).
    pub fn rejected(&self) -> &HashMap<&'static str, u64> {
        &self.rejected
    }
}

impl Process {
    /// The CPU time of the threads whose timers still run, as last seen (the records' own
    /// counts have the threads that deleted their timers). Kept here: a record's counters have
    /// one writer, the program.
    fn unended_cpu(&self) -> Duration {
        let ns = self
            .threads
            .iter()
            .filter(|t| {
                t.record.active()
                    && t.cpu_seen_ns > 0
                    && t.cpu_seen_tid == t.record.tid.load(Relaxed)
            })
            .map(|t| {
                t.cpu_seen_ns
                    .saturating_sub(t.record.cpu_at_start.load(Relaxed))
            })
            .sum();
        Duration::from_nanos(ns)
    }

    fn drain(&mut self) {
        let start = Instant::now();
        let cpu = sampler::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
        self.collector.drain(
            self.threads.iter().map(|t| (t.record, &t.ring)),
            Some(self.pid),
        );
        // A closed connection: the process ended or exec'd another image, whose threads are
        // not these.
        if self.socket.is_some() && self.cpu_looked.is_none_or(|t| start - t >= CPU_LOOK_EVERY) {
            self.cpu_looked = Some(start);
            for t in &mut self.threads {
                if t.record.active() {
                    let tid = t.record.tid.load(Relaxed);
                    if let Some(cpu) = thread_cpu_ns(self.pid, tid) {
                        t.cpu_seen_ns = cpu;
                        t.cpu_seen_tid = tid;
                    }
                }
            }
        }
        self.collector.add_busy(Duration::from_nanos(
            sampler::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(cpu),
        ));
    }
}

/// The user's lasting cache of modules' rules for the preload library `library`'s build:
/// `$XDG_CACHE_HOME/unwind-profiler/rules-BUILDID` (`~/.cache/...` without it), made readable
/// by this user only, so that later runs read back the rules of the modules earlier ones
/// built (files named by each module's build id; `unwind_in_process::set_rules_cache`). Keyed
/// by the library's build id: another build may build other rules. Other builds' directories
/// unused for a week are removed. `None` if the library has no build id or the directory
/// cannot be made.
pub fn lasting_rules_cache(library: &std::path::Path) -> Option<std::path::PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| std::path::Path::new(d).is_absolute())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))?;
    lasting_rules_cache_in(&cache, library)
}

/// [`lasting_rules_cache`] in the user's cache directory `cache`.
fn lasting_rules_cache_in(
    cache: &std::path::Path,
    library: &std::path::Path,
) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let file = std::fs::File::open(library).ok()?;
    // SAFETY: a read-only private mapping of the library, only parsed here; a library
    // rewritten meanwhile gives bytes like any other to the parser.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let id = object::Object::build_id(&object::File::parse(&*map).ok()?).ok()??;
    let base = cache.join("unwind-profiler");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&base)
        .ok()?;
    let dir = base.join(format!("rules-{}", collect::hex(id)));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    // Only a directory of this user's, closed to others, is shared (not one planted there).
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    // SAFETY: getuid has no preconditions.
    if !meta.is_dir() || meta.uid() != unsafe { libc::getuid() } || meta.mode() & 0o077 != 0 {
        return None;
    }
    let week = Duration::from_secs(7 * 24 * 3600);
    for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        let old = entry.file_name().to_string_lossy().starts_with("rules-")
            && entry.path() != dir
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > week));
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Some(dir)
}

/// A new directory named `name` in the temporary directory, readable by this user only.
fn private_directory(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(name);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .ok()
        .map(|()| dir)
}

/// Raises this process's limit of open descriptors to its hard limit: `record` holds one
/// connection per running process of the program. Call it after starting the program, which
/// must inherit the limit it would have had.
pub fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and sets this process's own limit through a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// The size of the region behind `fd`.
fn size_of_fd(fd: &OwnedFd) -> Option<usize> {
    // SAFETY: a zeroed stat is valid; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our descriptor.
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0)
        .then(|| usize::try_from(st.st_size).ok())
        .flatten()
}

/// Maps the region of `fd`, if it holds at least a `T` and `extra` bytes; never unmapped.
fn map_checked<T>(fd: &OwnedFd, extra: usize) -> Option<&'static T> {
    let size = size_of_fd(fd)?;
    if size < std::mem::size_of::<T>().checked_add(extra)? {
        return None;
    }
    let p = map(fd, size).ok()?;
    // SAFETY: the mapping is page-aligned, at least a T long, never unmapped; T is made of
    // atomics (ProcessRecord, ThreadRecord), for which every bit pattern is valid.
    Some(unsafe { &*(p as *const T) })
}

/// Maps a thread record and its ring, checking its magic and that its ring fits the region.
fn map_thread(fd: &OwnedFd) -> Option<SharedThread> {
    let size = size_of_fd(fd)?;
    let record: &'static ThreadRecord = map_checked(fd, 0)?;
    if record.magic.load(Acquire) != sampler::THREAD_RECORD_MAGIC {
        return None;
    }
    let words = usize::try_from(record.ring_words.load(Relaxed)).ok()?;
    if sampler::record_region_bytes(words) > size || !words.is_power_of_two() {
        return None;
    }
    // SAFETY: the words follow the record inside the mapping (checked above), which is never
    // unmapped; AtomicU64 has u64's layout, and the offset is a multiple of 64.
    let words: &'static [AtomicU64] = unsafe {
        std::slice::from_raw_parts(
            (record as *const ThreadRecord)
                .cast::<u8>()
                .add(std::mem::size_of::<ThreadRecord>())
                .cast::<AtomicU64>(),
            words,
        )
    };
    let ring = Ring::over(&record.ring, words)?;
    Some(SharedThread {
        record,
        ring,
        cpu_seen_ns: 0,
        cpu_seen_tid: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        let messages = [
            Message::Hello {
                pid: 42,
                program: "/usr/bin/python3.11".into(),
            },
            Message::Thread { index: 7 },
            Message::Modules { count: 3 },
            Message::Module(Module {
                path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
                start: 0x7f00_0002_8000,
                end: 0x7f00_001b_d000,
                bias: 0x7f00_0000_0000,
                file_offset: 0x28000,
                build_id: "c289da5071a3399de893d2af81d6a30c62646e1e".into(),
                generated: false,
            }),
            Message::Module(Module {
                path: "[anon]".into(),
                start: 0x7f00_1000_0000,
                end: 0x7f00_1004_0000,
                bias: 0,
                file_offset: 0,
                build_id: String::new(),
                generated: true,
            }),
        ];
        for m in &messages {
            assert_eq!(Message::decode(&m.encode()).as_ref(), Some(m));
        }
        assert_eq!(Message::decode(&[]), None);
        assert_eq!(Message::decode(&99u64.to_le_bytes()), None);
        // A module whose build id runs past the message.
        let mut bad = messages[3].encode();
        bad[48..56].copy_from_slice(&1000u64.to_le_bytes());
        assert_eq!(Message::decode(&bad), None);
        // Truncated anywhere: never a panic.
        for m in &messages {
            let bytes = m.encode();
            for n in 0..bytes.len() {
                let _ = Message::decode(&bytes[..n]);
            }
        }
    }

    /// The lasting rules cache: one directory per build id of the library, closed to others,
    /// kept across calls; other builds' directories removed once unused for a week, and a
    /// directory others can enter refused.
    #[test]
    fn lasting_rules_cache_is_per_build_private_and_pruned() {
        use std::os::unix::fs::PermissionsExt;
        let cache = std::env::temp_dir().join(format!("lasting-rules-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        // This test's own executable stands for the library: it has a build id.
        let library = std::env::current_exe().unwrap();
        let dir = lasting_rules_cache_in(&cache, &library).expect("a directory");
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("rules-") && name.len() > 6 + 16, "{name}");
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        std::fs::write(dir.join("kept.rules"), b"x").unwrap();
        let base = cache.join("unwind-profiler");
        let (stale, recent) = (base.join("rules-stale"), base.join("rules-recent"));
        for d in [&stale, &recent] {
            std::fs::create_dir_all(d).unwrap();
        }
        let long_ago = SystemTime::now() - Duration::from_secs(8 * 24 * 3600);
        std::fs::File::open(&stale)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        assert_eq!(lasting_rules_cache_in(&cache, &library), Some(dir.clone()));
        assert!(
            dir.join("kept.rules").is_file(),
            "the build's own files are kept"
        );
        assert!(
            !stale.exists(),
            "another build's, unused for a week, is removed"
        );
        assert!(recent.exists(), "another build's, used lately, is kept");
        // Opened to others: not used.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(lasting_rules_cache_in(&cache, &library), None);
        // No build id (not an ELF file): none.
        let plain = cache.join("plain");
        std::fs::write(&plain, b"not an ELF file").unwrap();
        assert_eq!(lasting_rules_cache_in(&cache, &plain), None);
        let _ = std::fs::remove_dir_all(&cache);
    }
}
