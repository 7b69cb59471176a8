//! The per-thread timers that send the sampling signal: a POSIX timer (`timer_create` with
//! `SIGEV_THREAD_ID`) or a perf event (`perf_event_open` on the software `task-clock`, its
//! overflow delivered as a signal to the thread with `F_SETOWN_EX`/`F_SETSIG`).
//!
//! A perf event can also signal by itself, with `sigtrap`: Linux 5.13+ then sends `SIGTRAP`
//! (`si_code` `TRAP_PERF`, carrying the event's `sig_data`, here the record index) to the thread
//! from its return to user mode, instead of waking the descriptor's owner from an `irq_work`
//! interrupt. That saves the self-interrupt, the costliest part of delivery in a VM (measured
//! with a handler that only counts, `bench-overhead`: 9.1 against 13.0 us per signal). It is
//! opt-in (`--timer perf-sigtrap`) because `SIGTRAP` is not a signal a profiler can own
//! quietly: a debugger stops at each one, and a crash reporter that installs its handler after
//! ours would take a sample for a crash.
//!
//! Why two: the kernel checks POSIX CPU-time timers only at its tick (`CONFIG_HZ`, 250 Hz on
//! many distribution kernels), so a 1 kHz CPU timer fires at most 250 times a second, each
//! signal standing for several periods (its `si_overrun`). A `task-clock` event samples from an
//! hrtimer, at the rate asked (measured here: 9,963 signals per CPU second at 10 kHz on a
//! 250 Hz kernel). It needs `perf_event_open` (containers with seccomp filters may forbid it),
//! and costs a file descriptor per thread, so the profiler uses it within a budget of
//! descriptors and falls back to the POSIX timer past it. Wall-clock timers are hrtimers
//! already: they are always POSIX timers.
//!
//! Neither `libc` nor a bindings crate has what this needs for both x86_64 and 32-bit ARM
//! (`libc` has no `F_SETSIG`/`F_SETOWN_EX` or perf types for glibc targets), so the few
//! constants and the version-0 `perf_event_attr` (64 bytes, every kernel since 2.6.31) are
//! declared here, from the Linux UAPI headers.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::time::Duration;

/// Which kind of timer samples a thread's CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerChoice {
    /// A perf event where the kernel allows it and the descriptor budget lasts, else a POSIX
    /// timer.
    Auto,
    /// Only perf events: a thread whose event cannot be opened is not sampled (counted).
    PerfEvent,
    /// Only perf events that send `SIGTRAP` themselves (`sigtrap`, Linux 5.13+).
    PerfSigtrap,
    /// Only POSIX timers.
    Posix,
}

impl TimerChoice {
    /// Every choice with its name on the command line (`--timer`, `UNWIND_PROFILER_TIMER`).
    pub const NAMES: [(&'static str, TimerChoice); 4] = [
        ("auto", TimerChoice::Auto),
        ("perf", TimerChoice::PerfEvent),
        ("perf-sigtrap", TimerChoice::PerfSigtrap),
        ("posix", TimerChoice::Posix),
    ];

    /// The choice named `name` ([`NAMES`](Self::NAMES)).
    pub fn from_name(name: &str) -> Option<TimerChoice> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, choice)| choice)
    }
}

/// A thread's timer, as created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadTimer {
    /// A POSIX timer (its `timer_t`); its signals are `SI_TIMER`, carrying the record index.
    Posix(usize),
    /// A perf event's descriptor and its kernel id (to tell it from a descriptor the program
    /// may have reused the number for); its signals are `POLL_IN`, carrying the descriptor.
    PerfEvent {
        /// The descriptor.
        fd: i32,
        /// `PERF_EVENT_IOC_ID`'s answer.
        id: u64,
        /// Whether it sends `SIGTRAP` itself (`TRAP_PERF`, carrying the record index) rather
        /// than the sampling signal to its owner.
        sigtrap: bool,
    },
}

/// The kinds, for counting threads by kind.
pub const KINDS: [&str; 3] = [
    "perf_event task-clock",
    "timer_create",
    "perf_event task-clock (SIGTRAP)",
];

impl ThreadTimer {
    /// Its index in [`KINDS`].
    pub fn kind(&self) -> usize {
        match self {
            ThreadTimer::PerfEvent { sigtrap: false, .. } => 0,
            ThreadTimer::Posix(_) => 1,
            ThreadTimer::PerfEvent { sigtrap: true, .. } => 2,
        }
    }
}

// Linux UAPI: include/uapi/asm-generic/fcntl.h (the same on x86_64 and ARM).
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;
/// `si_code` of a signal sent for an fd that has data (include/uapi/asm-generic/siginfo.h).
pub const POLL_IN: libc::c_int = 1;
/// `si_code` of a `SIGTRAP` sent by a perf event with `sigtrap` (the same header).
pub const TRAP_PERF: libc::c_int = 6;
// include/uapi/linux/perf_event.h.
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;
const ATTR_REMOVE_ON_EXEC: u64 = 1 << 36;
const ATTR_SIGTRAP: u64 = 1 << 37;
/// `PERF_ATTR_SIZE_VER0`: every field up to `config1`, all that a signalling event needs.
const ATTR_SIZE_VER0: u32 = 64;
/// `_IOR('$', 7, __u64 *)`: the pointer's size is in the number.
const PERF_EVENT_IOC_ID: libc::c_ulong =
    (2 << 30) | ((std::mem::size_of::<usize>() as libc::c_ulong) << 16) | (0x24 << 8) | 7;

/// `struct perf_event_attr` up to `sig_data` (`PERF_ATTR_SIZE_VER7`); the fields between
/// `config1` and `sig_data` are zero here, and an event without `sigtrap` declares the
/// version-0 size so that kernels older than 5.13 take it.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    /// `config2` to `__reserved_3`, unused here.
    unused: [u64; 7],
    sig_data: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 128);
const _: () = assert!(std::mem::offset_of!(PerfEventAttr, sig_data) == 120);

/// `struct f_owner_ex`.
#[repr(C)]
struct OwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// The part of a `siginfo_t` that a `POLL_IN` signal fills (`_sigpoll`: `si_band`, `si_fd`).
/// `c_long` after three ints puts `band` where the union starts on both 32- and 64-bit.
#[repr(C)]
struct SigPoll {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    band: libc::c_long,
    fd: libc::c_int,
}

const _: () = assert!(std::mem::size_of::<SigPoll>() <= std::mem::size_of::<libc::siginfo_t>());

/// The part of a `siginfo_t` that a `TRAP_PERF` signal fills (`_sigfault`: `si_addr`, then
/// `_perf`: `si_perf_data`, `si_perf_type`, `si_perf_flags`); glibc's `siginfo_t` does not
/// name them.
#[repr(C)]
struct SigPerf {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    addr: usize,
    data: libc::c_ulong,
    kind: u32,
    flags: u32,
}

const _: () = assert!(std::mem::size_of::<SigPerf>() <= std::mem::size_of::<libc::siginfo_t>());

/// The record index a `TRAP_PERF` signal carries, if an event of ours (a software event)
/// sent it.
///
/// # Safety
/// `info` is a `SIGTRAP` `siginfo_t` with `si_code == TRAP_PERF`.
#[inline(always)]
pub unsafe fn signal_perf_data(info: &libc::siginfo_t) -> Option<usize> {
    // SAFETY: the caller's contract: the kernel filled `_sigfault._perf`, which `SigPerf` lays
    // out, and `SigPerf` fits in a `siginfo_t`.
    let p = unsafe { &*(info as *const libc::siginfo_t).cast::<SigPerf>() };
    (p.kind == PERF_TYPE_SOFTWARE).then_some(p.data as usize)
}

/// Descriptors below this can be perf events of ours: the handler maps them to records.
const FD_SLOTS: usize = 1 << 16;
/// Record index + 1 by descriptor (0: none). A signal for a stale entry finds a record whose
/// thread is not the interrupted one, and is counted as foreign.
static FD_OWNER: [AtomicU32; FD_SLOTS] = [const { AtomicU32::new(0) }; FD_SLOTS];
/// Perf events open now.
static PERF_OPEN: AtomicUsize = AtomicUsize::new(0);

/// The descriptor a `POLL_IN` signal names.
///
/// # Safety
/// `info` is a `siginfo_t` with `si_code == POLL_IN`.
#[inline(always)]
pub unsafe fn signal_fd(info: &libc::siginfo_t) -> libc::c_int {
    // SAFETY: the caller's contract: the kernel filled the `_sigpoll` member, which `SigPoll`
    // lays out, and `SigPoll` fits in a `siginfo_t`.
    unsafe { (*(info as *const libc::siginfo_t).cast::<SigPoll>()).fd }
}

/// The record index a perf event's descriptor was opened for, if any (async-signal-safe).
#[inline(always)]
pub fn perf_owner(fd: libc::c_int) -> Option<usize> {
    let v = FD_OWNER.get(usize::try_from(fd).ok()?)?.load(Relaxed);
    (v as usize).checked_sub(1)
}

/// How a thread's timer is made.
#[derive(Clone, Copy, Debug)]
pub struct TimerSpec {
    /// Which kind.
    pub choice: TimerChoice,
    /// The clock: `CLOCK_THREAD_CPUTIME_ID` or `CLOCK_MONOTONIC` (always a POSIX timer).
    pub clock: libc::clockid_t,
    /// The period.
    pub period: Duration,
    /// The signal number.
    pub signal: libc::c_int,
}

/// Starts a timer for thread `tid` whose signals carry `index` (not async-signal-safe).
pub fn create(spec: &TimerSpec, index: usize, tid: libc::pid_t) -> io::Result<ThreadTimer> {
    let perf = spec.clock == libc::CLOCK_THREAD_CPUTIME_ID && spec.choice != TimerChoice::Posix;
    if perf {
        match open_perf(spec, index, tid) {
            Ok(t) => return Ok(t),
            Err(e) if spec.choice != TimerChoice::Auto => return Err(e),
            Err(_) => {}
        }
    }
    create_posix(spec, index, tid)
}

/// Whether `timer` still is what was made: a perf event whose descriptor the program closed
/// (daemons close every descriptor at start) sends no more signals. Forgets such an event (its
/// number may be the program's now): its thread needs a new timer.
pub fn lost(timer: &ThreadTimer) -> bool {
    let ThreadTimer::PerfEvent { fd, id, .. } = *timer else {
        return false;
    };
    if is_our_event(fd, id) {
        return false;
    }
    PERF_OPEN.fetch_sub(1, Relaxed);
    true
}

/// Whether `fd` is still the perf event of kernel id `id`: the program may have closed our
/// descriptor and reused its number.
fn is_our_event(fd: libc::c_int, id: u64) -> bool {
    let mut now = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes a u64 through the pointer; on a descriptor that is not a
    // perf event it fails without writing.
    unsafe { libc::ioctl(fd, PERF_EVENT_IOC_ID as _, &mut now) == 0 && now == id }
}

/// Stops and frees a timer. For a perf event, returns the periods its clock counted (for the
/// signals it should have sent); `None` for a POSIX timer, or a descriptor no longer ours.
pub fn delete(timer: ThreadTimer, period: Duration) -> Option<u64> {
    match timer {
        ThreadTimer::Posix(t) => {
            // SAFETY: a timer this process created, deleted once (the caller took it).
            unsafe { libc::timer_delete(t as libc::timer_t) };
            None
        }
        ThreadTimer::PerfEvent { fd, id, .. } => {
            // Only what is still our event is closed; a lost one leaves the budget all the same.
            if !is_our_event(fd, id) {
                PERF_OPEN.fetch_sub(1, Relaxed);
                return None;
            }
            let mut count = 0u64;
            // SAFETY: reads 8 bytes (the counter value, read_format 0) into a u64.
            let n = unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) };
            // SAFETY: our descriptor (checked above), closed once.
            unsafe { libc::close(fd) };
            PERF_OPEN.fetch_sub(1, Relaxed);
            (n == 8).then(|| count / (period.as_nanos().max(1) as u64))
        }
    }
}

/// How many perf events may be open: a quarter of the descriptor limit, so that the program
/// keeps the rest of it.
fn perf_budget() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes into a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    (lim.rlim_cur as usize / 4).min(FD_SLOTS)
}

fn open_perf(spec: &TimerSpec, index: usize, tid: libc::pid_t) -> io::Result<ThreadTimer> {
    let owner = u32::try_from(index + 1).map_err(|_| io::Error::other("record index"))?;
    if PERF_OPEN.fetch_add(1, Relaxed) >= perf_budget() {
        PERF_OPEN.fetch_sub(1, Relaxed);
        return Err(io::Error::other("perf event descriptor budget used up"));
    }
    let sigtrap = spec.choice == TimerChoice::PerfSigtrap;
    let result = open_perf_event(spec, tid, sigtrap.then_some(index as u64)).and_then(|fd| {
        let fail = |fd| {
            let e = io::Error::last_os_error();
            // SAFETY: the descriptor just opened, not yet handed out.
            unsafe { libc::close(fd) };
            Err(e)
        };
        let Some(slot) = usize::try_from(fd).ok().and_then(|i| FD_OWNER.get(i)) else {
            // SAFETY: as in `fail`.
            unsafe { libc::close(fd) };
            return Err(io::Error::other("descriptor number too high"));
        };
        slot.store(owner, Relaxed);
        let mut id = 0u64;
        if sigtrap {
            // The event signals by itself (it was opened enabled): only its id is needed.
            // SAFETY: PERF_EVENT_IOC_ID writes a u64 through the pointer.
            if unsafe { libc::ioctl(fd, PERF_EVENT_IOC_ID as _, &mut id) } != 0 {
                return fail(fd);
            }
            return Ok(ThreadTimer::PerfEvent {
                fd,
                id,
                sigtrap: true,
            });
        }
        let to = OwnerEx {
            kind: F_OWNER_TID,
            pid: tid,
        };
        // SAFETY: fcntl and ioctl on our own descriptor with the argument types they take.
        unsafe {
            if libc::ioctl(fd, PERF_EVENT_IOC_ID as _, &mut id) != 0
                || libc::fcntl(fd, F_SETOWN_EX, &to) != 0
                || libc::fcntl(fd, F_SETSIG, spec.signal) != 0
            {
                return fail(fd);
            }
            // Last: from here on, every overflow sends the signal.
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC) != 0 {
                return fail(fd);
            }
        }
        Ok(ThreadTimer::PerfEvent {
            fd,
            id,
            sigtrap: false,
        })
    });
    if result.is_err() {
        PERF_OPEN.fetch_sub(1, Relaxed);
    }
    result
}

/// Opens an enabled task-clock event on `tid` that overflows every period, counting kernel time
/// too where `perf_event_paranoid` allows it (so that time in system calls is sampled, at the
/// call's return, as a POSIX CPU timer does). With `sigtrap_data`, the event sends `SIGTRAP`
/// carrying it at each overflow (the kernel requires `remove_on_exec` with it), and counts user
/// time only: an overflow in `execve` would deliver its `SIGTRAP` to the new program, whose
/// default action for it is a core dump, and `remove_on_exec` does not withdraw it (seen here:
/// a shell that `exec`s died of it), whereas an overflow in user mode is delivered on the
/// return from that very interrupt.
fn open_perf_event(
    spec: &TimerSpec,
    tid: libc::pid_t,
    sigtrap_data: Option<u64>,
) -> io::Result<libc::c_int> {
    let mut attr = PerfEventAttr {
        kind: PERF_TYPE_SOFTWARE,
        size: ATTR_SIZE_VER0,
        config: PERF_COUNT_SW_TASK_CLOCK,
        sample_period: spec.period.as_nanos().clamp(1, u64::MAX as u128) as u64,
        flags: ATTR_EXCLUDE_HV,
        wakeup_events: 1,
        ..PerfEventAttr::default()
    };
    let mut exclude_kernel_tries = [false, true].as_slice();
    if let Some(data) = sigtrap_data {
        attr.size = std::mem::size_of::<PerfEventAttr>() as u32;
        attr.flags |= ATTR_SIGTRAP | ATTR_REMOVE_ON_EXEC;
        attr.sig_data = data;
        exclude_kernel_tries = &[true];
    }
    let mut last = io::Error::other("perf_event_open");
    for &exclude_kernel in exclude_kernel_tries {
        if exclude_kernel {
            attr.flags |= ATTR_EXCLUDE_KERNEL;
        }
        // SAFETY: a valid attr of the size it declares; pid = tid, any CPU, no group.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                tid,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd >= 0 {
            return Ok(fd as libc::c_int);
        }
        last = io::Error::last_os_error();
        if last.raw_os_error() != Some(libc::EACCES) {
            break;
        }
    }
    Err(last)
}

fn create_posix(spec: &TimerSpec, index: usize, tid: libc::pid_t) -> io::Result<ThreadTimer> {
    // SAFETY: a zeroed sigevent is valid; the fields set are those SIGEV_THREAD_ID reads. The
    // timer id is written by timer_create before use.
    unsafe {
        let mut sev: libc::sigevent = std::mem::zeroed();
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = spec.signal;
        sev.sigev_value = libc::sigval {
            sival_ptr: index as *mut libc::c_void,
        };
        sev.sigev_notify_thread_id = tid;
        let mut timer: libc::timer_t = std::mem::zeroed();
        if libc::timer_create(spec.clock, &mut sev, &mut timer) != 0 {
            return Err(io::Error::last_os_error());
        }
        let period = libc::timespec {
            tv_sec: spec.period.as_secs() as _,
            tv_nsec: spec.period.subsec_nanos() as libc::c_long,
        };
        let it = libc::itimerspec {
            it_interval: period,
            it_value: period,
        };
        if libc::timer_settime(timer, 0, &it, std::ptr::null_mut()) != 0 {
            let e = io::Error::last_os_error();
            libc::timer_delete(timer);
            return Err(e);
        }
        Ok(ThreadTimer::Posix(timer as usize))
    }
}

/// In a forked child: closes the perf events inherited from the parent (they watch the
/// parent's threads, and would keep those events alive after the parent closes them).
/// Async-signal-safe (`close` only).
pub fn close_in_child(fd: libc::c_int) {
    // SAFETY: a descriptor the parent opened for a perf event; the child's copy is ours to close.
    unsafe { libc::close(fd) };
}
