//! The program's side of a session: the connection to `record` that the preload library of
//! each process makes, and the messages it sends (see the [module docs](super)).
//!
//! The program owns its descriptor table, not us: it may close every descriptor (daemons do, at
//! start) and reuse the numbers. The connection is therefore kept on a high descriptor number,
//! out of the way of the numbers a program hands out, and its identity (device and inode) is
//! checked before every message: a descriptor that is no longer our socket is never written to.
//! A process whose connection is gone connects again and says so ([`Message::Hello`] with
//! `rejoin`), up to [`MAX_REJOINS`] times.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::shared_memory;
use super::wire::{self, Key, Message};
use crate::collect;
use crate::sampler::{self, ProcessRecord, Work};
use crate::{Config, StartError};

/// This process's connection to `record`.
struct Client {
    /// The process that connected: a child forked from it (and not yet `exec`ed) inherits the
    /// connection but is not that process, and sends nothing on it.
    pid: u32,
    socket: Socket,
    /// The loader's counts of loads and unloads when the modules were last sent (also keeps
    /// one [`Message::Modules`] list from interleaving with another).
    sent: Mutex<(u64, u64)>,
    /// `record`'s socket, for a forked child's own connection.
    address: (libc::sockaddr_un, libc::socklen_t),
    /// The run's key.
    key: Key,
    /// The program's file, as `Hello` named it (a forked child's too).
    program: String,
}

/// A connected socket and what identifies it, so that a number the program closed and reused is
/// never taken for it. Never closed by its drop: the number may be the program's by then (see
/// [`Socket::close`]).
struct Socket {
    fd: RawFd,
    identity: (u64, u64),
}

impl Socket {
    /// Takes `socket`, moving it to a high descriptor number (see the module docs).
    fn new(socket: OwnedFd) -> io::Result<Socket> {
        let socket = to_high_descriptor(socket);
        let identity = identity(socket.as_raw_fd()).ok_or_else(io::Error::last_os_error)?;
        let fd = socket.as_raw_fd();
        std::mem::forget(socket);
        Ok(Socket { fd, identity })
    }

    /// The descriptor, if it is still this socket. Async-signal-safe (one `fstat`).
    fn get(&self) -> Option<RawFd> {
        (identity(self.fd) == Some(self.identity)).then_some(self.fd)
    }

    /// Closes the socket if its descriptor is still ours.
    fn close(&self) {
        if let Some(fd) = self.get() {
            // SAFETY: the descriptor is still our socket (checked just above); closed once, by
            // the process that no longer uses it.
            unsafe { libc::close(fd) };
        }
    }
}

/// The device and inode of the file behind `fd`. Async-signal-safe.
fn identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat is valid; fstat fills it, or fails on a closed descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev as u64, st.st_ino as u64))
}

/// The lowest descriptor number the connection is moved to: high enough to stay clear of the
/// numbers a program uses (they are handed out lowest first), below the descriptor limit.
fn high_descriptor() -> RawFd {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes into a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    let below_limit = limit.rlim_cur.saturating_sub(64);
    below_limit.min(1000) as RawFd
}

/// `socket` on a descriptor numbered at least [`high_descriptor`], if one is free (else where
/// it is).
fn to_high_descriptor(socket: OwnedFd) -> OwnedFd {
    let low = high_descriptor();
    if socket.as_raw_fd() >= low {
        return socket;
    }
    // SAFETY: duplicates our descriptor, close-on-exec, to the lowest free number >= low.
    let high = unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_DUPFD_CLOEXEC, low) };
    if high < 0 {
        return socket;
    }
    // SAFETY: a descriptor just made, ours; `socket` is closed by its drop.
    unsafe { OwnedFd::from_raw_fd(high) }
}

/// How many times a process connects again after the program closed its connection.
pub const MAX_REJOINS: u32 = 16;

/// The connection of this process, or of the process it was forked from (a leaked box, never
/// freed: a signal handler may be reading it when a forked child or a rejoin replaces it).
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

/// Publishes `c` as this process's connection (the one it replaces is leaked: a handler may
/// still read it).
fn publish(c: Client) -> &'static Client {
    let c = Box::leak(Box::new(c));
    CLIENT.store(c, Release);
    c
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

/// The run's key from its hexadecimal form in [`super::KEY_VAR`].
fn parse_key(hex: &str) -> Option<Key> {
    let mut key = [0u8; 16];
    if hex.len() != 32 {
        return None;
    }
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

/// Starts profiling this process under `record`, whose socket is `name`: connects, shares its
/// process record, builds the tables, installs the signal handler and samples the calling
/// thread. Starts no thread and registers nothing at exit. On an error the process is not
/// profiled by this way (and nothing was installed if the connection failed).
pub fn start(config: &Config, name: &str) -> Result<(), StartError> {
    let session = |e: io::Error| StartError::Session(e);
    let (addr, len) = wire::address(name).map_err(session)?;
    let key = std::env::var(super::KEY_VAR)
        .ok()
        .and_then(|k| parse_key(&k))
        .ok_or_else(|| {
            session(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not the run's key", super::KEY_VAR),
            ))
        })?;
    let program = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let (socket, record) = hello(&addr, len, &key, &program, |_| {}).map_err(session)?;
    // SAFETY: `hello` maps the record for the rest of the process.
    unsafe { sampler::use_process_record(record) };
    let c = publish(Client {
        pid: std::process::id(),
        socket,
        sent: Mutex::new(collect::loader_counts()),
        address: (addr, len),
        key,
        program,
    });
    unwind_in_process::set_stack_scanning(config.stack_scanning).map_err(StartError::Unwinder)?;
    if let Some(dir) = std::env::var_os(super::RULES_CACHE_VAR).filter(|d| !d.is_empty()) {
        unwind_in_process::set_rules_cache(Some(dir.into()));
    }
    let report = unwind_in_process::init().map_err(StartError::Unwinder)?;
    sampler::process().table_built(&report, false);
    send_modules(c);
    watch_jit_interface();
    sampler::install(config.timing()).map_err(StartError::Signal)?;
    sampler::start_thread();
    sampler::start_allocation_sampling();
    Ok(())
}

/// Connects to `record`'s socket at `addr` and says hello with the run's `key` (this process
/// runs `program`) and a new process record, which `fill` sets up before `record` sees it;
/// returns the connection and the record (zeroed but for its magic and what `fill` wrote,
/// mapped for the rest of the process).
fn hello(
    addr: &libc::sockaddr_un,
    len: libc::socklen_t,
    key: &Key,
    program: &str,
    fill: impl FnOnce(&ProcessRecord),
) -> io::Result<(Socket, *mut ProcessRecord)> {
    let socket = wire::seqpacket(0)?;
    connect(&socket, addr, len)?;
    let (fd, region) = shared_memory::create(std::mem::size_of::<ProcessRecord>())?;
    // SAFETY: the region is zeroed (a valid ProcessRecord: all atomics), page-aligned, and
    // mapped for the rest of the process.
    let record = unsafe { &*(region as *const ProcessRecord) };
    fill(record);
    record.magic.store(sampler::PROCESS_RECORD_MAGIC, Release);
    let hello = Message::Hello {
        pid: std::process::id(),
        key: *key,
        rejoin: false,
        program: program.to_owned(),
    };
    let socket = say_hello(socket, &hello, Some(fd.as_raw_fd()))?;
    Ok((socket, region.cast()))
}

/// Moves `socket`, connected to `record`, to a high descriptor and sends `hello` on it, with
/// `fd` if given; the socket is closed if the hello cannot be sent.
fn say_hello(socket: OwnedFd, hello: &Message, fd: Option<RawFd>) -> io::Result<Socket> {
    let socket = Socket::new(socket)?;
    if let Err(e) = wire::send(socket.fd, hello, fd) {
        socket.close();
        return Err(e);
    }
    Ok(socket)
}

/// Set while a rejoin is in progress, so that only one thread makes the new connection.
static REJOINING: AtomicBool = AtomicBool::new(false);

/// The descriptor of `c`'s connection (this process's), connecting again if the program closed
/// it (see the module docs); `None` if it cannot be had.
fn connection(c: &'static Client) -> Option<(&'static Client, RawFd)> {
    if let Some(fd) = c.socket.get() {
        return Some((c, fd));
    }
    let record = sampler::process();
    if record.rejoins.load(Relaxed) >= u64::from(MAX_REJOINS) {
        return None;
    }
    // The connection another thread of this process made again since `c` was read, if any:
    // it serves this thread too (a second rejoin would be refused, `record` having the first).
    let current = || {
        let now = any_client().filter(|n| n.pid == c.pid && !std::ptr::eq(*n, c))?;
        now.socket.get().map(|fd| (now, fd))
    };
    if REJOINING.swap(true, Acquire) {
        // Another thread is connecting again: wait for its connection.
        for _ in 0..200 {
            std::thread::sleep(Duration::from_millis(5));
            if !REJOINING.load(Acquire) {
                return current();
            }
        }
        return None;
    }
    if let Some(done) = current() {
        // Another thread connected again just before this one took the flag.
        REJOINING.store(false, Release);
        return Some(done);
    }
    record.rejoins.fetch_add(1, Relaxed);
    sampler::profiler_work(Work::Reconnection, || rejoin(c))
}

/// Connects again for `c`'s process (see [`connection`]), with the rejoin flag held.
fn rejoin(c: &'static Client) -> Option<(&'static Client, RawFd)> {
    let joined = (|| -> io::Result<Socket> {
        let socket = wire::seqpacket(0)?;
        connect(&socket, &c.address.0, c.address.1)?;
        let hello = Message::Hello {
            pid: std::process::id(),
            key: c.key,
            rejoin: true,
            program: c.program.clone(),
        };
        say_hello(socket, &hello, None)
    })();
    let result = joined.ok().map(|socket| {
        let fd = socket.fd;
        // The caller may hold `c.sent` (a module list being sent): then the next change sends
        // the list again, which `record` takes as the same.
        let sent = c.sent.try_lock().map_or((0, 0), |s| *s);
        let new = publish(Client {
            pid: c.pid,
            socket,
            sent: Mutex::new(sent),
            address: c.address,
            key: c.key,
            program: c.program.clone(),
        });
        (new, fd)
    });
    REJOINING.store(false, Release);
    if result.is_some() {
        // The program closed the profiler's descriptors: its threads' timers among them.
        sampler::rearm_lost_timers();
    }
    result
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
    let joined = hello(
        &parent.address.0,
        parent.address.1,
        &parent.key,
        &parent.program,
        |r| r.inherit(parent_record),
    );
    // The parent's connection is not this process's: its copy here is closed (if the program
    // did not close it already), so that `record` sees the parent's end when the parent ends.
    parent.socket.close();
    let Ok((socket, record)) = joined else {
        // Forgotten: a snapshot request or a `fork` of this process then does nothing.
        CLIENT.store(std::ptr::null_mut(), Release);
        return;
    };
    // The parent's modules, as last sent: this process has the same tables.
    let sent = parent.sent.try_lock().map_or((0, 0), |s| *s);
    let c = publish(Client {
        pid: std::process::id(),
        socket,
        sent: Mutex::new(sent),
        address: parent.address,
        key: parent.key,
        program: parent.program.clone(),
    });
    send_modules_unchanged(c);
    // SAFETY: `hello` maps the record for the rest of the process.
    unsafe { sampler::resume_in_child(record) };
}

/// Asks `record` for a snapshot of the profile so far; async-signal-safe (an `fstat` and one
/// `send` of bytes prepared here, errno kept), for the snapshot signal's handler. False outside
/// a session.
pub fn request_snapshot() -> bool {
    // Not `client()`: `getpid` is a system call, and a forked child's snapshot is harmless.
    let Some(c) = any_client() else {
        return false;
    };
    let message = wire::SNAPSHOT.to_le_bytes();
    // SAFETY: this thread's errno, restored below so the interrupted code never sees a change.
    let errno = unsafe { *libc::__errno_location() };
    if let Some(fd) = c.socket.get() {
        // SAFETY: sends 8 bytes from a local buffer on our socket; send is async-signal-safe.
        unsafe {
            libc::send(
                fd,
                message.as_ptr().cast(),
                message.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    true
}

/// Sends the modules of the published table on `c`, this process's connection.
fn send_modules(c: &'static Client) {
    let mut sent = c.sent.lock().unwrap_or_else(|e| e.into_inner());
    *sent = collect::loader_counts();
    send_module_list(c);
}

/// The process whose JIT watcher runs (0: none yet): a forked child, which has no such thread,
/// starts its own.
static JIT_WATCHER: AtomicU32 = AtomicU32::new(0);

/// How often the JIT watcher looks at the GDB JIT interface's descriptors.
pub const JIT_WATCH_PERIOD: Duration = Duration::from_millis(20);

/// In a process with a GDB JIT interface ([`unwind_in_process::jit_interface_present`]),
/// starts a thread of ours (once per process) that looks at its descriptors every
/// [`JIT_WATCH_PERIOD`] and, when the JIT registered or removed code, rebuilds the tables and
/// tells `record`. A JIT registers its code after it made it executable (LLVM's ORC, ART),
/// where the `mmap`/`mprotect` hooks have already passed; without it, that code would have
/// rules only from the next code mapped. Processes without the interface get no thread.
/// Called where the dynamic loader's lock is not held (at the start, after `dlopen`):
/// starting a thread allocates its TLS, which may wait for it.
fn watch_jit_interface() {
    let pid = std::process::id();
    if JIT_WATCHER.load(Relaxed) == pid || !unwind_in_process::jit_interface_present() {
        return;
    }
    if JIT_WATCHER.swap(pid, Relaxed) == pid {
        return;
    }
    let _ = crate::threads::spawn_unsampled("unwind-jit-watch", move || loop {
        std::thread::sleep(JIT_WATCH_PERIOD);
        if std::process::id() != pid {
            return;
        }
        if unwind_in_process::jit_code_changed() {
            sampler::profiler_work(Work::TableRebuild, || {
                let Some(c) = client() else { return };
                if let Ok(report) = unwind_in_process::refresh() {
                    sampler::process().table_built(&report, true);
                }
                send_modules(c);
            });
        }
    });
}

/// Sends the modules of the published table on `c`, keeping the loader's counts as they were
/// sent (a forked child's, from its parent: asking the loader is what a child of a
/// multi-threaded process should not do).
fn send_modules_unchanged(c: &'static Client) {
    let _held = c.sent.lock().unwrap_or_else(|e| e.into_inner());
    send_module_list(c);
}

/// Sends this process's modules on `c` (the caller holds its `sent`, so that one list does not
/// interleave with another).
fn send_module_list(c: &'static Client) {
    let Some((_, socket)) = connection(c) else {
        return;
    };
    let modules = collect::modules_now();
    let jit = wire::pack_jit_functions(unwind_in_process::jit_functions());
    for m in wire::pack_modules(modules).into_iter().chain(jit) {
        if wire::send(socket, &m, None).is_err() {
            return;
        }
    }
}

/// After the program's `dlopen` or `dlclose` returned: if modules were loaded or unloaded,
/// rebuilds the tables and tells `record`. Does nothing outside a session.
pub fn modules_may_have_changed() {
    sampler::profiler_work(Work::TableRebuild, || {
        let Some(c) = client() else { return };
        // Code a JIT registered (GDB JIT interface) is read with the executable mappings.
        let code_mapped =
            CODE_MAPPED_UNSEEN.swap(false, Relaxed) | unwind_in_process::jit_code_changed();
        if *c.sent.lock().unwrap_or_else(|e| e.into_inner()) == collect::loader_counts()
            && !code_mapped
        {
            return;
        }
        // Memory made executable meanwhile needs /proc/self/maps read again; a load or an
        // unload alone does not (a loop of them would spend most of its time there).
        TABLES_KEEP_UNLOADED.store(false, Relaxed);
        let refreshed = if code_mapped {
            unwind_in_process::refresh()
        } else {
            unwind_in_process::refresh_after_load()
        };
        if let Ok(report) = refreshed {
            sampler::process().table_built(&report, true);
        }
        send_modules(c);
        watch_jit_interface();
    });
}

/// After the program's `dlclose` returned: nothing is rebuilt or sent, the tables are marked
/// as keeping modules that may be gone (`TABLES_KEEP_UNLOADED`). A walk cannot meet the code
/// of an unloaded module (no frame runs there), `record`'s list keeps it for the samples taken
/// before the unload, and the next load rebuilds the tables and sends the list (the lists are
/// whole: the next one drops it); code mapped meanwhile where it was is seen by
/// [`code_mapped`]. A loop of loads and unloads so pays for one rebuild a load, not two (the
/// unload's rebuild and message were half of a `dlopen`/`dlclose` loop's overhead).
pub fn modules_unloaded() {
    TABLES_KEEP_UNLOADED.store(true, Relaxed);
}

/// Set by an unload ([`modules_unloaded`]) and cleared by the next rebuild after a load: the
/// tables may still describe modules that are gone.
static TABLES_KEEP_UNLOADED: AtomicBool = AtomicBool::new(false);

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
    let start = addr as u64;
    let end = start.saturating_add(len as u64);
    sampler::profiler_work(Work::TableRebuild, || {
        // SAFETY: errno is this thread's.
        let errno = unsafe { *libc::__errno_location() };
        let restore = || {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno }
        };
        let Some(c) = client() else {
            return restore();
        };
        match unwind_in_process::covers_code(start, end) {
            None => CODE_MAPPED_UNSEEN.store(true, Relaxed),
            Some(covered) => {
                // Covered by a module that may have been unloaded: code mapped where it was.
                let stale = covered && TABLES_KEEP_UNLOADED.swap(false, Relaxed);
                // A JIT's registration through the GDB JIT interface is seen here too (the
                // next time code is mapped), as no thread of ours could notice it later.
                let jit = unwind_in_process::jit_code_changed();
                if !covered || stale || CODE_MAPPED_UNSEEN.swap(false, Relaxed) || jit {
                    match unwind_in_process::refresh_unless_busy() {
                        Ok(report) => {
                            sampler::process().table_built(&report, true);
                            send_modules(c);
                        }
                        Err(_) => CODE_MAPPED_UNSEEN.store(true, Relaxed),
                    }
                }
            }
        }
        restore();
    });
}

/// A zeroed region of `bytes` shared with `record`, for a thread record: `None` outside a
/// session, an error if it cannot be made (no descriptor left, say). [`announce_thread`] hands
/// it over once set up.
pub(crate) fn shared_thread_region(bytes: usize) -> Option<io::Result<(OwnedFd, *mut u8)>> {
    client()?;
    Some(shared_memory::create(bytes))
}

/// Hands the thread record at `index`, in the region of `fd`, over to `record`; false if it
/// could not.
pub(crate) fn announce_thread(index: usize, fd: OwnedFd) -> bool {
    client().and_then(connection).is_some_and(|(_, socket)| {
        let thread = Message::Thread {
            index: index as u64,
        };
        wire::send(socket, &thread, Some(fd.as_raw_fd())).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_hex() {
        let key = parse_key("000102030405060708090a0b0c0d0eff").unwrap();
        assert_eq!(key[1], 1);
        assert_eq!(key[15], 0xff);
        assert_eq!(parse_key("00"), None);
        assert_eq!(parse_key("zz0102030405060708090a0b0c0d0eff"), None);
        assert_eq!(parse_key("é0102030405060708090a0b0c0d0ef"), None);
    }

    /// The connection's descriptor, once the program closed it and reused its number for a file
    /// of its own, is not taken for it, and is not closed by us.
    #[test]
    fn a_reused_descriptor_is_not_the_connection() {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors we then own.
        assert_eq!(
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) },
            0
        );
        // SAFETY: just made, ours.
        let (a, _b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let socket = Socket::new(a).unwrap();
        let fd = socket.get().expect("our socket");
        assert!(fd >= high_descriptor().min(fd));
        // The program closes it and opens a file, which gets the same number.
        // SAFETY: closes the test's own descriptor.
        unsafe { libc::close(fd) };
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        // SAFETY: dup2 onto the number just freed, then the copy is ours.
        let reused = unsafe { libc::dup2(file.as_raw_fd(), fd) };
        assert_eq!(reused, fd);
        assert_eq!(socket.get(), None);
        socket.close();
        assert!(identity(fd).is_some(), "the program's file stays open");
        // SAFETY: the test's own copy.
        unsafe { libc::close(fd) };
    }
}
