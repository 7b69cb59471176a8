//! `record`'s side of a session: the socket the program's processes connect to, and what they
//! share with it (see the [module docs](super)).
//!
//! Everything here was written by a process that may be hostile: the profiled program itself,
//! or, if it can reach the socket, another process. So:
//! - a connection is taken only from a process of this user or a descendant of `record` (the
//!   socket's peer credentials, which the kernel records at `connect`), and it must say hello
//!   with the run's key, which only the run's processes have (from their environment); others
//!   are refused and counted;
//! - shared memory is mapped only if it is a sealed `memfd` of the size its contents call for
//!   ([`shared_memory`]);
//! - every count, length and index is checked against a limit (the constants below, and the
//!   collector's own: frames per sample, distinct stacks); a process that breaks the protocol
//!   has its connection closed, and a ring that holds what cannot be right is not read again;
//!   what was refused is counted, by what and by process, in the profile's counters.
//!
//! Memory: per process, at most [`MAX_MODULES`] modules whose paths add up to
//! [`MAX_MODULE_BYTES`], [`sampler::MAX_THREADS`] thread records of at most [`MAX_RING_WORDS`]
//! words each (shared memory, charged to the process that made it), the collector's distinct
//! stacks ([`collect::MAX_STACK_FRAMES`]) and timeline ([`crate::profile::TIMELINE_SAMPLES`]).

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::{Duration, Instant, SystemTime};

use super::rules_cache::{lasting_rules_cache, private_directory};
use super::shared_memory::{self, Refused};
use super::wire::{self, Key, Message, Received, MAX_MESSAGE};
use crate::collect::{self, Collector, ProcessInfo};
use crate::profile::{Module, Profile};
use crate::ring::Ring;
use crate::sampler::{self, ProcessRecord, ThreadRecord};
use crate::symbolize::{SymbolSources, Symbolizer};
use crate::Config;

/// The most distinct modules one process may announce over its life (a JIT's regions and
/// libraries loaded and unloaded at new addresses each count). Past it, new ones are ignored
/// (their samples unnamed) and counted.
pub const MAX_MODULES: usize = 16_384;
/// The most bytes the distinct modules' paths of one process may take.
pub const MAX_MODULE_BYTES: usize = 4 << 20;
/// The longest module path (`PATH_MAX`) and build id (hex of 64 bytes).
const MAX_PATH: usize = 4096;
const MAX_BUILD_ID: usize = 128;
/// The largest thread ring (the preload library makes rings of 2^14 words, 2^16 with
/// allocations sampled).
pub const MAX_RING_WORDS: usize = 1 << 16;
/// Messages taken from one connection per collection, so that a process that floods its
/// connection does not keep `record` from the others.
const MESSAGES_PER_COLLECT: usize = 4096;
/// How long `record` waits between two snapshots that processes ask for.
const SNAPSHOT_EVERY: Duration = Duration::from_secs(1);
/// How long a connection may stay without saying hello (a process of the run says it at once).
const HELLO_WITHIN: Duration = Duration::from_secs(10);

/// A thread record received from a process, checked.
struct SharedThread {
    record: &'static ThreadRecord,
    ring: Ring,
    /// The owner's CPU time when last looked at (ns), while its timer runs, and its tid.
    cpu_seen_ns: u64,
    cpu_seen_tid: i32,
}

/// How often `record` reads the CPU time of the threads whose timer runs, and of their
/// processes: what it adds for a thread that ends without deleting its timer (the main thread
/// at `exit`, every thread at a `SIGKILL`), which misses at most this much of each, and what it
/// compares with the process's to tell the CPU time no timer sampled.
const CPU_LOOK_EVERY: Duration = Duration::from_millis(100);

/// The CPU time thread `tid` of process `pid` has run, in ns (`/proc`'s schedstat), if it
/// still exists.
fn thread_cpu_ns(pid: u32, tid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The fields of `/proc/PID/stat` after the command name (which may hold spaces and
/// parentheses): the state is the first.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The CPU time process `pid` has run (all its threads, those that ended too), in ns, as the
/// kernel counts it in clock ticks.
fn process_cpu_ns(pid: u32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    Some(ticks.saturating_mul(1_000_000_000) / hz.max(1))
}

/// Whether process `pid` descends from process `ancestor` (its parents, up to 256 generations).
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut p = pid;
    for _ in 0..256 {
        if p == ancestor {
            return true;
        }
        if p <= 1 {
            return false;
        }
        let Some(parent) = stat_fields(p).and_then(|f| f.get(1)?.parse().ok()) else {
            return false;
        };
        p = parent;
    }
    false
}

/// Whether process `pid` maps the `memfd` of inode `inode` that the preload library made: it
/// still runs the program image that connected.
fn maps_inode(pid: u32, inode: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    maps.lines().any(|line| {
        let mut fields = line.split_whitespace();
        fields.nth(4).and_then(|i| i.parse::<u64>().ok()) == Some(inode)
            && fields
                .next()
                .is_some_and(|p| p.starts_with("/memfd:unwind-profiler"))
    })
}

/// One process (one program image: an `exec` starts another, with the same pid).
struct Process {
    /// Its connection, until it ends (then closed: a long run may see thousands of processes).
    socket: Option<OwnedFd>,
    /// Its pid, as the kernel gave it for the connection.
    pid: u32,
    program: String,
    record: Option<&'static ProcessRecord>,
    /// The inode of its record's `memfd` (see [`maps_inode`]).
    record_inode: u64,
    threads: Vec<SharedThread>,
    /// The thread record indices announced.
    thread_indices: HashSet<u64>,
    /// A [`Message::Modules`] list being received, and how many are still to come.
    modules: Vec<Module>,
    modules_due: u64,
    collector: Collector,
    /// When the process ended (CLOCK_MONOTONIC ns): not when its connection did, which the
    /// program may close while the process runs on.
    ended_ns: Option<u64>,
    /// Drained once more after its end.
    drained_after_end: bool,
    /// Its last period was cut, after that drain: it is in no later period.
    cut_after_end: bool,
    /// When the threads' CPU time was last read.
    cpu_looked: Option<Instant>,
    /// At that look: the process's CPU time since sampling started, the sampled threads', and
    /// the process's since it started.
    cpu_at_look: Option<(u64, u64, u64)>,
    /// What was refused of what it sent, by what.
    refused: BTreeMap<String, u64>,
    /// A connection to drop (refused, or merged into an earlier process's as a rejoin).
    gone: bool,
    /// When the connection was accepted.
    accepted: Instant,
}

/// `record`'s end of a session: the socket the program's processes connect to, and what they
/// shared.
pub struct Server {
    listener: OwnedFd,
    name: String,
    key: Key,
    processes: Vec<Process>,
    interval: Duration,
    wall_clock: bool,
    /// Connections refused before they were a process's (another user's, no key), by what.
    refused: BTreeMap<String, u64>,
    /// A process asked for a snapshot, and when the last one was given.
    snapshot: bool,
    last_snapshot: Option<Instant>,
    /// `record`'s CLOCK_MONOTONIC and wall clock at the same instant.
    clocks: (u64, SystemTime),
    /// The directory where the processes share their modules' rules, and whether it is this
    /// run's own (removed with the server) rather than the user's lasting one.
    rules_cache: Option<(std::path::PathBuf, bool)>,
    /// `record`'s effective user and its pid.
    uid: u32,
    me: u32,
    /// Kept from one profile (or period) to the next: each address is named once.
    symbolizer: Option<Symbolizer>,
    /// Where the symbolizer is to look for names (taken when it is made).
    symbol_sources: Option<SymbolSources>,
    /// Whether the run is cut into periods (`--period`).
    periodic: bool,
    /// The buffer messages are received into (kept: the collection runs every few ms).
    buffer: Vec<u8>,
    /// When the current period started (CLOCK_MONOTONIC ns).
    period_start_ns: u64,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some((dir, true)) = &self.rules_cache {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A new random key (the kernel's random numbers).
fn new_key() -> io::Result<Key> {
    let mut key = [0u8; 16];
    // SAFETY: getrandom writes at most 16 bytes into the buffer.
    let n = unsafe { libc::getrandom(key.as_mut_ptr().cast(), key.len(), 0) };
    if n != key.len() as isize {
        return Err(io::Error::other("no random numbers for the session's key"));
    }
    Ok(key)
}

impl Server {
    /// Listens on a new abstract socket named after this process, for processes sampled with
    /// `config`'s period and clock by the preload library `library`, whose build's rules cache
    /// they share ([`lasting_rules_cache`]; a directory of this run's own if there is none).
    pub fn new(config: &Config, library: &std::path::Path) -> io::Result<Server> {
        let listener = wire::seqpacket(libc::SOCK_NONBLOCK)?;
        let key = new_key()?;
        // The name need not be secret (the key is): a random part keeps runs apart.
        let name = format!(
            "unwind-profiler-{}-{}",
            std::process::id(),
            collect::hex(&key[..4])
        );
        let (addr, len) = wire::address(&name)?;
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
            key,
            processes: Vec::new(),
            interval: config.sample_interval(),
            wall_clock: config.clock == crate::Clock::Wall,
            refused: BTreeMap::new(),
            snapshot: false,
            last_snapshot: None,
            clocks: (sampler::now_ns(), SystemTime::now()),
            rules_cache: lasting_rules_cache(library)
                .map(|d| (d, false))
                .or_else(|| private_directory(&format!("{name}-rules")).map(|d| (d, true))),
            // SAFETY: geteuid has no preconditions.
            uid: unsafe { libc::geteuid() },
            me: std::process::id(),
            symbolizer: None,
            symbol_sources: Some(SymbolSources::of_config(config, |n| std::env::var(n).ok())),
            periodic: config.profile_period.is_some(),
            buffer: Vec::new(),
            period_start_ns: sampler::now_ns(),
        })
    }

    /// The socket's name, for [`super::SESSION_VAR`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The run's key in hexadecimal, for [`super::KEY_VAR`].
    pub fn key(&self) -> String {
        collect::hex(&self.key)
    }

    /// The directory for [`super::RULES_CACHE_VAR`], if one could be made.
    pub fn rules_cache(&self) -> Option<&std::path::Path> {
        self.rules_cache.as_ref().map(|(d, _)| d.as_path())
    }

    /// Processes that joined so far.
    pub fn processes(&self) -> usize {
        self.processes.iter().filter(|p| p.record.is_some()).count()
    }

    /// Waits up to `timeout` for news, then takes every new connection and message and drains
    /// every ring. (The connections are waited on too: a program that sends faster than one
    /// collection's worth of messages would otherwise block on a full socket.)
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
        self.take_everything();
        self.drain();
    }

    /// Takes every new connection and every message waiting.
    fn take_everything(&mut self) {
        self.accept();
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.resize(MAX_MESSAGE, 0);
        for i in 0..self.processes.len() {
            self.receive(i, &mut buffer);
        }
        self.buffer = buffer;
        for p in &mut self.processes {
            if p.record.is_none() && p.socket.is_some() && p.accepted.elapsed() > HELLO_WITHIN {
                p.cut_off("no hello within 10 s");
            }
        }
        for p in self.processes.iter_mut().filter(|p| p.gone) {
            for (what, n) in std::mem::take(&mut p.refused) {
                *self.refused.entry(what).or_default() += n;
            }
        }
        self.processes.retain(|p| !p.gone);
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
            // SAFETY: a descriptor accept just gave us.
            let socket = unsafe { OwnedFd::from_raw_fd(fd) };
            let Ok((pid, uid)) = wire::peer(&socket) else {
                self.refuse("connections whose peer the kernel could not name".into());
                continue;
            };
            if uid != self.uid && !descends_from(pid, self.me) {
                self.refuse(format!(
                    "connections of another user (uid {uid}), not a process of the run"
                ));
                continue;
            }
            self.processes.push(Process {
                socket: Some(socket),
                pid,
                program: String::new(),
                record: None,
                record_inode: 0,
                threads: Vec::new(),
                thread_indices: HashSet::new(),
                modules: Vec::new(),
                modules_due: 0,
                collector: {
                    let mut c = Collector::new(self.interval, self.wall_clock, self.clocks.1);
                    if self.periodic {
                        c.set_periodic();
                    }
                    c
                },
                ended_ns: None,
                drained_after_end: false,
                cut_after_end: false,
                cpu_looked: None,
                cpu_at_look: None,
                refused: BTreeMap::new(),
                gone: false,
                accepted: Instant::now(),
            });
        }
    }

    /// Counts a refusal that is no process's.
    fn refuse(&mut self, what: String) {
        *self.refused.entry(what).or_default() += 1;
    }

    /// Takes the messages waiting on process `i`'s connection (up to [`MESSAGES_PER_COLLECT`]).
    fn receive(&mut self, i: usize, buffer: &mut [u8]) {
        for _ in 0..MESSAGES_PER_COLLECT {
            let Some(socket) = self.processes[i].socket.as_ref() else {
                return;
            };
            let (n, fd) = match wire::receive(socket.as_raw_fd(), buffer) {
                Ok(Received::Nothing) => return,
                Ok(Received::Message(n, fd)) => (n, fd),
                Ok(Received::End) | Err(_) => {
                    self.processes[i].connection_ended();
                    return;
                }
                Ok(Received::Truncated) => {
                    self.processes[i].cut_off("a message longer than any of the protocol's");
                    return;
                }
            };
            let Some(message) = Message::decode(&buffer[..n]) else {
                self.processes[i].cut_off("a message that is none of the protocol's");
                return;
            };
            if let Message::Hello {
                key,
                rejoin,
                program,
                ..
            } = message
            {
                self.hello(i, key, rejoin, program, fd);
                continue;
            }
            let p = &mut self.processes[i];
            if p.record.is_none() {
                p.cut_off("a message before its hello");
                return;
            }
            match message {
                Message::Hello { .. } => {}
                Message::Thread { index } => p.thread(index, fd),
                Message::Modules { count, first } => {
                    if count > MAX_MODULES as u64 {
                        p.cut_off("a module list longer than the limit");
                        return;
                    }
                    p.modules.clear();
                    p.modules_due = count;
                    if count == 0 {
                        p.collector.set_modules(Vec::new());
                    } else if !p.take_modules(first) {
                        return;
                    }
                }
                Message::Module(list) => {
                    if !p.take_modules(list) {
                        return;
                    }
                }
                Message::Snapshot => self.snapshot = true,
                Message::JitFunctions(functions) => p.collector.add_jit_functions(functions),
            }
        }
    }

    /// A hello on process `i`'s connection: a new process, or (`rejoin`) a process of the run
    /// whose program closed its first connection.
    fn hello(&mut self, i: usize, key: Key, rejoin: bool, program: String, fd: Option<OwnedFd>) {
        if key != self.key {
            self.refuse("connections without the run's key".into());
            self.processes[i].drop_connection();
            return;
        }
        if self.processes[i].record.is_some() {
            self.processes[i].cut_off("a second hello");
            return;
        }
        let pid = self.processes[i].pid;
        if rejoin {
            let earlier = self.processes.iter().position(|p| {
                p.pid == pid && p.record.is_some() && p.socket.is_none() && p.ended_ns.is_none()
            });
            match earlier {
                Some(j) => {
                    let socket = self.processes[i].socket.take();
                    self.processes[i].gone = true;
                    self.processes[j].socket = socket;
                }
                None => {
                    self.refuse("rejoins of no running process of the run".into());
                    self.processes[i].drop_connection();
                }
            }
            return;
        }
        let size = std::mem::size_of::<ProcessRecord>();
        let (fd, checked) = match fd
            .ok_or(Refused::NotSharedMemory)
            .and_then(|fd| shared_memory::check(&fd, |n| n == size).map(|c| (fd, c)))
        {
            Ok(checked) => checked,
            Err(why) => {
                let why = format!("process records refused: {}", why.name());
                self.processes[i].cut_off_for(why);
                return;
            }
        };
        // One process image, one record: a process that still maps the record it joined with
        // does not join again (an `exec`ed image is a new one, whose old record is gone).
        let running = self.processes.iter_mut().enumerate().any(|(j, p)| {
            j != i
                && p.pid == pid
                && p.record.is_some()
                && p.ended_ns.is_none()
                && (maps_inode(pid, p.record_inode) || {
                    p.ended_ns = Some(sampler::now_ns());
                    false
                })
        });
        if running {
            self.processes[i].cut_off("a second process record while its first is in use");
            return;
        }
        let record = shared_memory::map_region(&fd, checked);
        let p = &mut self.processes[i];
        match record {
            Ok(region) => {
                // SAFETY: the region is page-aligned, exactly a ProcessRecord long, never
                // unmapped; a ProcessRecord is made of atomics, valid for any bits.
                let record = unsafe { &*(region.start as *const ProcessRecord) };
                if record.magic.load(Acquire) != sampler::PROCESS_RECORD_MAGIC {
                    p.cut_off("a process record of another layout");
                    return;
                }
                p.program = program.chars().take(MAX_PATH).collect();
                p.record = Some(record);
                p.record_inode = region.inode;
            }
            Err(why) => {
                let why = format!("process records refused: {}", why.name());
                p.cut_off_for(why);
            }
        }
    }

    /// Drains every ring of every process still running, and once more those that ended;
    /// looks at the CPU time of the processes every [`CPU_LOOK_EVERY`].
    fn drain(&mut self) {
        for p in &mut self.processes {
            if p.drained_after_end {
                continue;
            }
            p.drain();
            if p.ended_ns.is_some() {
                p.drained_after_end = true;
            }
        }
    }

    /// Whether a process asked for a snapshot since the last call (at most one a second).
    pub fn snapshot_requested(&mut self) -> bool {
        if !self.snapshot
            || self
                .last_snapshot
                .is_some_and(|t| t.elapsed() < SNAPSHOT_EVERY)
        {
            return false;
        }
        self.snapshot = false;
        self.last_snapshot = Some(Instant::now());
        true
    }

    /// Every process's profile, symbolized, merged into one (`None` if no process connected or
    /// none had a record). Call after the last process has ended.
    pub fn finish(&mut self) -> Option<Profile> {
        self.take_everything();
        for p in &mut self.processes {
            p.drain();
        }
        self.profile()
    }

    /// Every process's profile so far, symbolized, merged into one (`None` if no process
    /// connected or none had a record).
    pub fn profile(&mut self) -> Option<Profile> {
        self.profiles(false)
    }

    /// The profile of the period since the last cut (or since sampling started), of every
    /// process that ran in it, merged into one; then starts the next (see
    /// [`Collector::cut_period`]). `None` if no process had a record.
    pub fn cut_period(&mut self) -> Option<Profile> {
        self.take_everything();
        self.drain();
        self.profiles(true)
    }

    /// How many times the symbolizer emptied its cache for holding too many addresses.
    pub fn symbol_cache_resets(&self) -> u64 {
        self.symbolizer.as_ref().map_or(0, Symbolizer::cache_resets)
    }

    /// The processes' profiles merged: of everything so far, or (`cut`) of the current period,
    /// which then ends.
    fn profiles(&mut self, cut: bool) -> Option<Profile> {
        // The vdso is the same image in every process of one kernel: ours names theirs.
        let symbolizer = self.symbolizer.get_or_insert_with(|| {
            Symbolizer::with_sources(
                unwind_in_process::vdso_image().as_deref(),
                self.symbol_sources.take().unwrap_or_default(),
            )
        });
        if cut {
            symbolizer.start_period();
        }
        let now = sampler::now_ns();
        let (mono, wall) = self.clocks;
        let wall_at = |ns: u64| {
            if ns >= mono {
                wall + Duration::from_nanos(ns - mono)
            } else {
                wall - Duration::from_nanos(mono - ns)
            }
        };
        let since = self.period_start_ns;
        if cut {
            self.period_start_ns = now;
        }
        let mut unprofiled: Vec<(String, u64)> = Vec::new();
        let mut profiles: Vec<Profile> = Vec::new();
        for p in &mut self.processes {
            let said: Vec<(String, u64)> =
                p.refused.iter().map(|(w, &n)| (p.said_of(w), n)).collect();
            if p.record.is_none_or(|r| r.epoch_ns.load(Relaxed) == 0) {
                unprofiled.extend(said.iter().cloned());
            }
            let Some(record) = p.record else { continue };
            let epoch = record.epoch_ns.load(Relaxed);
            if epoch == 0 || (cut && p.cut_after_end) {
                continue; // never sampled, or its last period was cut
            }
            let end = p.ended_ns.unwrap_or(now);
            let start = if cut { epoch.max(since) } else { epoch };
            let info = ProcessInfo {
                pid: p.pid,
                program: p.program.clone(),
                duration: Duration::from_nanos(end.saturating_sub(start)),
                record,
                unended_cpu: p.unended_cpu(),
                cpu: p.cpu_at_look.map(|(process, sampled, lifetime)| {
                    (
                        Duration::from_nanos(process),
                        Duration::from_nanos(process.saturating_sub(sampled)),
                        Duration::from_nanos(lifetime),
                    )
                }),
            };
            let records = p.threads.iter().map(|t| (t.record, &t.ring));
            let mut profile = if cut {
                p.cut_after_end = p.drained_after_end;
                p.collector
                    .cut_period(records, &info, symbolizer, wall_at(now))
            } else {
                p.collector.finish(records, &info, symbolizer)
            };
            // What was refused is said of the process it came from.
            let refused = std::mem::take(&mut profile.counters.refused);
            profile.counters.refused = refused
                .into_iter()
                .map(|(what, n)| (p.said_of(&what), n))
                .chain(said)
                .collect();
            profile.start = wall_at(start);
            profiles.push(profile);
        }
        let mut merged = Profile::merge(profiles)?;
        merged.counters.refused.extend(unprofiled);
        merged
            .counters
            .refused
            .extend(self.refused.iter().map(|(k, &n)| (k.clone(), n)));
        if cut {
            merged.start = wall_at(since);
            merged.duration = Duration::from_nanos(now.saturating_sub(since));
        }
        Some(merged)
    }

    /// What was refused, by what: connections that were no process's of the run, and what each
    /// process sent that did not check out (as the profile's counters say it too).
    pub fn refused(&self) -> Vec<(String, u64)> {
        let of_processes = self
            .processes
            .iter()
            .flat_map(|p| p.refused.iter().map(move |(k, &n)| (p.said_of(k), n)));
        self.refused
            .iter()
            .map(|(k, &n)| (k.clone(), n))
            .chain(of_processes)
            .collect()
    }
}

impl Process {
    /// Closes the connection for `why`, a break of the protocol, and counts it. Its rings are
    /// still read, each checked on its own.
    fn cut_off(&mut self, why: &str) {
        self.cut_off_for(format!("connection closed: the process sent {why}"));
    }

    fn cut_off_for(&mut self, what: String) {
        *self.refused.entry(what).or_default() += 1;
        self.connection_ended();
    }

    /// Drops a connection that was never a process's (its refusal counted by the server).
    fn drop_connection(&mut self) {
        self.socket = None;
        self.gone = true;
    }

    /// The connection ended: the process ended or `exec`ed, or the program closed its end of it
    /// (then the process runs on, and is read until it ends). A connection that never said
    /// hello goes, its refusals to the server's counts.
    fn connection_ended(&mut self) {
        self.socket = None;
        if self.record.is_none() {
            self.gone = true;
        } else if !maps_inode(self.pid, self.record_inode) {
            self.ended_ns = Some(sampler::now_ns());
        }
    }

    /// `what`, said of this process (its pid and program name).
    fn said_of(&self, what: &str) -> String {
        let name = crate::symbolize::basename(&self.program);
        format!("process {} ({name}): {what}", self.pid)
    }

    /// A thread record's descriptor was announced at `index`: maps and checks it.
    fn thread(&mut self, index: u64, fd: Option<OwnedFd>) {
        if index >= sampler::MAX_THREADS as u64 || !self.thread_indices.insert(index) {
            self.cut_off("a thread record index out of range or announced twice");
            return;
        }
        let most = sampler::record_region_bytes(MAX_RING_WORDS);
        let region = fd.ok_or(Refused::NotSharedMemory).and_then(|fd| {
            shared_memory::map_checked(&fd, |n| {
                n >= std::mem::size_of::<ThreadRecord>() && n <= most
            })
        });
        match region.map(|r| map_thread(r.start, r.size)) {
            Ok(Some(t)) => self.threads.push(t),
            Ok(None) => self.cut_off("a thread record that does not fit its memory"),
            Err(why) => {
                let why = format!("thread records refused: {}", why.name());
                *self.refused.entry(why).or_default() += 1;
            }
        }
    }

    /// Takes modules of the list being received; false if they break the protocol (then the
    /// connection is cut off).
    fn take_modules(&mut self, list: Vec<Module>) -> bool {
        if list.len() as u64 > self.modules_due {
            self.cut_off("a module outside a module list");
            return false;
        }
        let bad = |m: &Module| {
            m.path.len() > MAX_PATH || m.build_id.len() > MAX_BUILD_ID || m.start >= m.end
        };
        if list.iter().any(bad) {
            self.cut_off("a module that cannot be one");
            return false;
        }
        self.modules_due -= list.len() as u64;
        self.modules.extend(list);
        if self.modules_due == 0 {
            self.modules_complete();
        }
        true
    }

    /// A [`Message::Modules`] list is complete: the modules from now on, those new to this
    /// process within [`MAX_MODULES`] and [`MAX_MODULE_BYTES`].
    fn modules_complete(&mut self) {
        let mut modules = std::mem::take(&mut self.modules);
        let (mut known, mut bytes) = self.collector.modules_known();
        let mut over = 0;
        modules.retain(|m| {
            if self.collector.knows(m) {
                return true;
            }
            if known >= MAX_MODULES || bytes + m.path.len() > MAX_MODULE_BYTES {
                over += 1;
                return false;
            }
            known += 1;
            bytes += m.path.len();
            true
        });
        if over > 0 {
            *self
                .refused
                .entry(format!(
                    "modules past the limit of {MAX_MODULES} modules or {MAX_MODULE_BYTES} bytes of paths (ignored)"
                ))
                .or_default() += over;
        }
        // The samples so far were taken with the old modules.
        self.drain();
        self.collector.set_modules(modules);
    }

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
            .fold(0u64, u64::saturating_add);
        Duration::from_nanos(ns)
    }

    fn drain(&mut self) {
        let start = Instant::now();
        let cpu = sampler::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
        // Where the preload library is, once the process said (when sampling started).
        if let Some(r) = self.record.filter(|r| r.preloaded.load(Relaxed) != 0) {
            self.collector.set_own_code(r.trampoline.load(Relaxed));
        }
        // A record written over says nothing of the process's allocations.
        if let Some(r) = self.record.filter(|r| r.plausible()) {
            self.collector.set_alloc_mean(r.alloc_mean.load(Relaxed));
        }
        self.collector.drain(
            self.threads.iter().map(|t| (t.record, &t.ring)),
            Some(self.pid),
        );
        if let Some(r) = self.record {
            self.collector.prune_heap(&r.live);
        }
        if self.ended_ns.is_none() && self.cpu_looked.is_none_or(|t| start - t >= CPU_LOOK_EVERY) {
            self.cpu_looked = Some(start);
            self.look_at_cpu();
        }
        self.collector.add_busy(Duration::from_nanos(
            sampler::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(cpu),
        ));
    }

    /// Reads the CPU time of the threads whose timers run and of the whole process; notices
    /// that a process whose program closed its connection has ended.
    fn look_at_cpu(&mut self) {
        let Some(record) = self.record else { return };
        if self.socket.is_none() && !maps_inode(self.pid, self.record_inode) {
            self.ended_ns = Some(sampler::now_ns());
            return;
        }
        for t in &mut self.threads {
            if t.record.active() {
                let tid = t.record.tid.load(Relaxed);
                if let Some(cpu) = thread_cpu_ns(self.pid, tid) {
                    t.cpu_seen_ns = cpu;
                    t.cpu_seen_tid = tid;
                }
            }
        }
        let Some(total) = process_cpu_ns(self.pid) else {
            return;
        };
        let before = record.cpu_before_sampling.load(Relaxed).min(total);
        let ended: u64 = self
            .threads
            .iter()
            .filter(|t| t.record.counters.plausible())
            .map(|t| t.record.counters.cpu_ns.get())
            .fold(0, u64::saturating_add);
        let sampled = ended.saturating_add(self.unended_cpu().as_nanos() as u64);
        self.cpu_at_look = Some((total - before, sampled, total));
    }
}

/// Maps the thread record at `start` (a region of `size` bytes), checking its magic and that
/// its ring fills the rest of the region exactly.
fn map_thread(start: *const u8, size: usize) -> Option<SharedThread> {
    // SAFETY: the region is page-aligned, at least a ThreadRecord long (checked by the caller),
    // never unmapped; a ThreadRecord is made of atomics, valid for any bits.
    let record: &'static ThreadRecord = unsafe { &*(start as *const ThreadRecord) };
    if record.magic.load(Acquire) != sampler::THREAD_RECORD_MAGIC {
        return None;
    }
    let words = usize::try_from(record.ring_words.load(Relaxed)).ok()?;
    if !words.is_power_of_two()
        || words > MAX_RING_WORDS
        || sampler::record_region_bytes(words) != size
    {
        return None;
    }
    // SAFETY: the words follow the record inside the mapping (checked above), which is never
    // unmapped; AtomicU64 has u64's layout, and the offset is a multiple of 64.
    let words: &'static [AtomicU64] = unsafe {
        std::slice::from_raw_parts(
            start
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that says nothing is closed after [`HELLO_WITHIN`] and counted; one with
    /// the wrong key at once.
    #[test]
    fn silent_connections_and_wrong_keys_are_refused() {
        let library = std::path::Path::new("/nonexistent/libunwind_profiler_preload.so");
        let mut server = Server::new(&Config::default(), library).unwrap();
        let (addr, len) = wire::address(server.name()).unwrap();
        let connect = || {
            let s = wire::seqpacket(0).unwrap();
            // SAFETY: a valid address of the given length, on our socket.
            let rc = unsafe {
                libc::connect(
                    s.as_raw_fd(),
                    (&addr as *const libc::sockaddr_un).cast(),
                    len,
                )
            };
            assert_eq!(rc, 0);
            s
        };
        let _silent = connect();
        server.take_everything();
        assert_eq!(server.processes.len(), 1, "taken, waiting for its hello");
        server.processes[0].accepted = Instant::now() - HELLO_WITHIN - Duration::from_secs(1);
        server.take_everything();
        assert!(server.processes.is_empty());
        let wrong = connect();
        let hello = Message::Hello {
            pid: std::process::id(),
            key: [0; 16],
            rejoin: false,
            program: String::new(),
        };
        wire::send(wrong.as_raw_fd(), &hello, None).unwrap();
        server.take_everything();
        assert!(server.processes.is_empty());
        let refused = server.refused();
        assert!(
            refused.contains(&(
                "connection closed: the process sent no hello within 10 s".to_string(),
                1
            )) && refused.contains(&("connections without the run's key".to_string(), 1)),
            "{refused:?}"
        );
    }

    #[test]
    fn this_process_descends_from_its_parent_not_from_another() {
        let me = std::process::id();
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        assert!(descends_from(me, me));
        assert!(descends_from(me, parent));
        let child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(descends_from(child.id(), me));
        assert!(!descends_from(me, child.id()));
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        assert!(process_cpu_ns(me).is_some());
    }
}
