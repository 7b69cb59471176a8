//! Profiling under `record`: the program's processes sample into memory they share with the
//! `record` process, which collects, symbolizes and writes one profile of them all.
//!
//! `record` listens on a Unix socket in the abstract namespace and passes its name to the
//! program in [`SESSION_VAR`], with the run's key in [`KEY_VAR`]. The preload library of every
//! process the program becomes or starts (it is inherited through `fork` and `exec`, and
//! survives programs that close every descriptor) connects to it and sends, as messages of one
//! connection ([`wire`]):
//!
//! - [`Message::Hello`]: its pid, the run's key and its executable, with a `memfd` holding its
//!   [`ProcessRecord`](crate::sampler::ProcessRecord) (process-wide counters, sampling epoch,
//!   table figures);
//! - [`Message::Thread`]: for every thread record it allocates, a `memfd` holding the
//!   [`ThreadRecord`](crate::sampler::ThreadRecord) and its ring;
//! - [`Message::Modules`]: the modules of its rule table, whenever they change (after a
//!   `dlopen` or `dlclose` the preload library interposes).
//!
//! A child `fork`ed without `exec` inherits its parent's connection but is not that process: it
//! makes a connection of its own from the `fork` child handler ([`join_after_fork`]) and sends
//! the same messages; the parent's it closes. A program that closes the connection (daemons
//! close every descriptor) gets a new one the next time the process has something to send
//! (`client.rs`).
//!
//! Nothing of the profiler runs in the program besides its signal handler, the hooks on
//! `pthread_create`, `dlopen` and `dlclose`, and the constructor that sets up: no collector
//! thread (a single-threaded program stays single-threaded in its C library's eyes) and nothing
//! at exit. `record` maps each `memfd` it receives, drains the rings while the program runs,
//! and after the last process has ended (however: `exit`, `_exit`, a signal, `SIGKILL`) reads
//! what is left, the kernel keeping the memory as long as `record` maps it.
//!
//! `record` trusts nothing it receives ([`Server`]): only processes of its user or its own
//! descendants, presenting the run's key, are taken; shared memory is mapped only once its size
//! is sealed (`shared_memory.rs`); every count and length is checked against a limit, and what
//! does not check out is refused and counted.

mod client;
mod rules_cache;
mod server;
mod shared_memory;
pub mod wire;

pub(crate) use client::{announce_thread, shared_thread_region};
pub use client::{
    code_mapped, join_after_fork, modules_may_have_changed, modules_unloaded, request_snapshot,
    start, MAX_REJOINS,
};
pub use rules_cache::lasting_rules_cache;
pub use server::{raise_descriptor_limit, Server, MAX_MODULES, MAX_MODULE_BYTES, MAX_RING_WORDS};
pub use shared_memory::Refused;
pub use wire::{Key, Message};

/// The environment variable that names `record`'s socket (in the abstract namespace).
pub const SESSION_VAR: &str = "UNWIND_PROFILER_SESSION";

/// The environment variable that carries the run's key (32 hexadecimal digits), which a process
/// presents when it connects: `record` makes it at random for each run, and only the run's
/// processes have it (another user cannot read their environment).
pub const KEY_VAR: &str = "UNWIND_PROFILER_SESSION_KEY";

/// The environment variable that names the directory where processes share the rules of their
/// modules ([`unwind_in_process::set_rules_cache`]): the user's lasting one for the preload
/// library's build ([`lasting_rules_cache`]), or one of the run's own.
pub const RULES_CACHE_VAR: &str = "UNWIND_PROFILER_RULES_CACHE";
