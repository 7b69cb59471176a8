//! The output formats, each written from a [`crate::profile::Profile`].
//!
//! [`write_all`] writes every format next to each other, as `DIR/STEM.EXT`:
//!
//! | file | format | read with |
//! |------|--------|-----------|
//! | `STEM.folded` | Brendan Gregg's folded stacks ([`folded`]) | `flamegraph.pl`, `inferno-flamegraph`, speedscope |
//! | `STEM.svg` | an interactive flame graph ([`flamegraph`]) | a web browser |
//! | `STEM.pb.gz` | gzipped `profile.proto` ([`pprof`]) | `go tool pprof`, `pprof` |
//! | `STEM.firefox.json.gz` | gzipped Firefox Profiler processed profile ([`firefox`]) | <https://profiler.firefox.com> (load the file as is) |
//! | `STEM.summary.txt` | the run's counters and top functions ([`summary`]) | a person |
//! | `STEM.heap.pb.gz` | with allocations sampled: a heap profile as Go's ([`pprof::build_heap`]) | `go tool pprof -sample_index=inuse_space` |
//! | `STEM.alloc.svg`, `STEM.inuse.svg` | with allocations sampled: flame graphs of the bytes allocated and of those live at the end ([`flamegraph::write_heap`]) | a web browser |
//!
//! The files are written safely in a directory other users may reach: see [`write_all_with_mode`]
//! and [`check_directory`].
//!
//! Every format names a frame by [`function_name`], so that the functions of one format are
//! those of the others.
//!
//! A profile of several processes (see [`Profile::merge`](crate::profile::Profile::merge))
//! tells them apart in every format: pprof labels each sample with its thread's process, the
//! Firefox profile has one process per pid, the folded stacks and the flame graph start each
//! stack with its process's name ([`process_name`]), and the summary lists the processes.

pub mod firefox;
pub mod flamegraph;
pub mod folded;
pub mod otlp;
pub mod pprof;
pub mod summary;

use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::profile::{Frame, Profile};

/// The name given to a frame whose function name is empty.
pub const UNKNOWN_FUNCTION: &str = "[unknown]";

/// The name given to a process whose program name is empty.
pub const UNKNOWN_PROCESS: &str = "[unknown process]";

/// The files [`write_all`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outputs {
    /// `STEM.folded`: folded stacks.
    pub folded: PathBuf,
    /// `STEM.svg`: the flame graph.
    pub flamegraph: PathBuf,
    /// `STEM.pb.gz`: the pprof profile.
    pub pprof: PathBuf,
    /// `STEM.firefox.json.gz`: the Firefox Profiler profile.
    pub firefox: PathBuf,
    /// `STEM.summary.txt`: the summary.
    pub summary: PathBuf,
    /// `STEM.heap.pb.gz`: the heap profile, written when the profile has one.
    pub heap: PathBuf,
    /// `STEM.alloc.svg`: the flame graph of the bytes allocated, written with the heap profile.
    pub alloc_flamegraph: PathBuf,
    /// `STEM.inuse.svg`: the flame graph of the bytes live at the end, written with the heap
    /// profile.
    pub inuse_flamegraph: PathBuf,
}

impl Outputs {
    /// The files for `dir` and `stem`, in the order [`write_all`] writes them.
    pub fn paths(dir: &Path, stem: &str) -> Outputs {
        let path = |ext: &str| dir.join(format!("{stem}.{ext}"));
        Outputs {
            folded: path("folded"),
            flamegraph: path("svg"),
            pprof: path("pb.gz"),
            firefox: path("firefox.json.gz"),
            summary: path("summary.txt"),
            heap: path("heap.pb.gz"),
            alloc_flamegraph: path("alloc.svg"),
            inuse_flamegraph: path("inuse.svg"),
        }
    }

    /// Every path but the heap profile's, in the order [`write_all`] writes them.
    pub fn all(&self) -> [&Path; 5] {
        [
            &self.folded,
            &self.flamegraph,
            &self.pprof,
            &self.firefox,
            &self.summary,
        ]
    }
}

/// The mode [`write_all`] gives the files: readable and writable by their owner only, as
/// `perf record` writes its data (a profile names the program's files and functions).
pub const DEFAULT_MODE: u32 = 0o600;

/// Writes every format of `profile` as `dir/stem.EXT` (see the [module documentation](self)),
/// each file with mode [`DEFAULT_MODE`], and returns the paths; see [`write_all_with_mode`].
pub fn write_all(profile: &Profile, dir: &Path, stem: &str) -> io::Result<Outputs> {
    write_all_with_mode(profile, dir, stem, DEFAULT_MODE)
}

/// Writes every format of `profile` as `dir/stem.EXT` (see the [module documentation](self)),
/// each file with exactly `mode` (read and write bits only, whatever the umask), and returns
/// the paths.
///
/// `dir` is created, with its parents, if it does not exist, then opened once and refused
/// unless it is safe to write in: see [`check_directory`]. Each file is written as a temporary
/// file in it, then renamed over `STEM.EXT`, so that a link planted at that name is replaced,
/// never followed, and a file that cannot be written in full (a full disk, `ENOSPC`, or the file
/// size limit, `EFBIG`) leaves the previous file of that name, if any, as it was. A file that
/// fails does not stop the others: the error names every file that failed, and why (`PATH:
/// REASON`, joined by `; `), or the directory (`DIR: REASON`, naming its owner and mode where
/// they are the reason).
pub fn write_all_with_mode(
    profile: &Profile,
    dir: &Path,
    stem: &str,
    mode: u32,
) -> io::Result<Outputs> {
    if mode & !0o666 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file mode {mode:04o}: only read and write bits (at most 0666) are allowed"),
        ));
    }
    if stem.is_empty() || stem.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file name stem {stem:?}: a file name without '/' is expected"),
        ));
    }
    let outputs = Outputs::paths(dir, stem);
    let out = OutputDir::open(dir)
        .map_err(|(kind, reason)| io::Error::new(kind, format!("{}: {reason}", dir.display())))?;
    type Body<'a> = &'a dyn Fn(&mut dyn Write) -> io::Result<()>;
    let files: [(&Path, &str, Body); 5] = [
        (&outputs.folded, "folded", &|w| folded::write(profile, w)),
        (&outputs.flamegraph, "svg", &|w| {
            flamegraph::write(profile, w)
        }),
        (&outputs.pprof, "pb.gz", &|w| pprof::write(profile, w)),
        (&outputs.firefox, "firefox.json.gz", &|w| {
            firefox::write(profile, w)
        }),
        (&outputs.summary, "summary.txt", &|w| {
            summary::write(profile, w)
        }),
    ];
    let mut failed: Vec<(&Path, io::Error)> = Vec::new();
    let write_heap = |w: &mut dyn Write| pprof::write_heap(profile, w);
    let write_alloc =
        |w: &mut dyn Write| flamegraph::write_heap(profile, flamegraph::HeapGraph::Allocated, w);
    let write_inuse =
        |w: &mut dyn Write| flamegraph::write_heap(profile, flamegraph::HeapGraph::Live, w);
    let heap: [(&Path, &str, Body); 3] = [
        (&outputs.heap, "heap.pb.gz", &write_heap),
        (&outputs.alloc_flamegraph, "alloc.svg", &write_alloc),
        (&outputs.inuse_flamegraph, "inuse.svg", &write_inuse),
    ];
    let heap = heap.into_iter().filter(|_| profile.heap.is_some());
    for (path, ext, body) in files.into_iter().chain(heap) {
        let name = format!("{stem}.{ext}");
        if let Err(e) = out.write_file(name.as_bytes(), mode, body) {
            failed.push((path, e));
        }
    }
    let Some(kind) = failed.first().map(|(_, e)| e.kind()) else {
        return Ok(outputs);
    };
    let list: Vec<String> = failed
        .iter()
        .map(|(path, e)| format!("{}: {e}", path.display()))
        .collect();
    Err(io::Error::new(kind, list.join("; ")))
}

/// Writes one file, `dir/name`, with `body` and exactly `mode`, in the same safe way as
/// [`write_all_with_mode`] (the directory checked, a temporary file renamed over the name).
pub(crate) fn write_one(
    dir: &Path,
    name: &str,
    mode: u32,
    body: &dyn Fn(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let out = OutputDir::open(dir)
        .map_err(|(kind, reason)| io::Error::new(kind, format!("{}: {reason}", dir.display())))?;
    out.write_file(name.as_bytes(), mode, body)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.join(name).display())))
}

/// Removes `dir/name` (never through a link: a link is removed, not what it names).
pub(crate) fn remove_one(dir: &Path, name: &str) -> io::Result<()> {
    let out = OutputDir::open(dir)
        .map_err(|(kind, reason)| io::Error::new(kind, format!("{}: {reason}", dir.display())))?;
    let name = CString::new(name).map_err(|_| nul_in_name())?;
    out.unlink(&name)
}

/// Checks that the output directory `dir` is one [`write_all`] will write in: creates it, with
/// its parents, if it does not exist; opens it; refuses it unless it belongs to this process's
/// effective user and no other user can write in it (writable by others: never; by its group:
/// only if that is this process's effective group), since whoever can write in it can replace
/// the profile; and creates and removes a file in it.
///
/// The error reads `cannot write to the output directory DIR: REASON`, naming the directory's
/// owner and mode where they are the reason.
pub fn check_directory(dir: &Path) -> io::Result<()> {
    let checked = OutputDir::open(dir).and_then(|out| {
        let (name, file) = out
            .create_temporary(b"unwind-profiler-check", 0o600)
            .map_err(|e| (e.kind(), format!("cannot create a file in it: {e}")))?;
        drop(file);
        out.unlink(&name)
            .map_err(|e| (e.kind(), format!("cannot remove a file from it: {e}")))
    });
    checked.map_err(|(kind, reason)| {
        io::Error::new(
            kind,
            format!(
                "cannot write to the output directory {}: {reason}",
                dir.display()
            ),
        )
    })
}

/// Why a directory cannot be written to: the error's kind, and a reason that calls the
/// directory "it" (each caller names it in its own way).
type Refusal = (io::ErrorKind, String);

/// An output directory, opened once: every file is created and renamed through its descriptor,
/// so that a path component replaced during the run cannot send the files elsewhere.
struct OutputDir {
    fd: OwnedFd,
}

impl OutputDir {
    /// Creates `dir` (and its parents) if missing, opens it and checks who can write in it.
    fn open(dir: &Path) -> Result<OutputDir, Refusal> {
        // The preload library may be pointed at a directory that does not exist yet.
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(dir)
            .map_err(|e| (e.kind(), format!("cannot create it: {e}")))?;
        let c_dir = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| (io::ErrorKind::InvalidInput, "a NUL byte in its name".into()))?;
        // SAFETY: `c_dir` is a NUL-terminated path; the descriptor returned is owned below.
        let fd = unsafe {
            libc::open(
                c_dir.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err((e.kind(), format!("cannot open it: {e}")));
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed `stat` is valid for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is an open descriptor and `st` a valid out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            let e = io::Error::last_os_error();
            return Err((e.kind(), format!("cannot stat it: {e}")));
        }
        // SAFETY: geteuid and getegid cannot fail.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let mode = st.st_mode & 0o7777;
        let owner = format!(
            "owner uid {}, group {}, mode {mode:04o}",
            st.st_uid, st.st_gid
        );
        let refused = if st.st_uid != euid {
            Some(format!(
                "it belongs to another user ({owner}), not to this process's effective uid {euid}: its owner could replace the profile; use a directory of your own"
            ))
        } else if mode & 0o002 != 0 {
            Some(format!(
                "every user can write in it ({owner}): another user could replace the profile; use a directory only you can write to"
            ))
        } else if mode & 0o020 != 0 && st.st_gid != egid {
            Some(format!(
                "its group can write in it ({owner}), and that group is not this process's effective gid {egid}: another user could replace the profile; use a directory only you can write to"
            ))
        } else {
            None
        };
        if let Some(reason) = refused {
            return Err((io::ErrorKind::PermissionDenied, reason));
        }
        Ok(OutputDir { fd })
    }

    /// Writes `name` with `body` and `mode` through a temporary file renamed over it; the
    /// temporary file is removed if anything fails.
    fn write_file(
        &self,
        name: &[u8],
        mode: u32,
        body: &dyn Fn(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let final_name = CString::new(name).map_err(|_| nul_in_name())?;
        let (temporary, file) = self.create_temporary(name, mode)?;
        let written = (|| {
            let mut w = BufWriter::new(file);
            body(&mut w)?;
            let file = w.into_inner().map_err(io::IntoInnerError::into_error)?;
            close(file)?;
            // SAFETY: both names are NUL-terminated and relative to our open directory.
            let renamed = unsafe {
                libc::renameat(
                    self.fd.as_raw_fd(),
                    temporary.as_ptr(),
                    self.fd.as_raw_fd(),
                    final_name.as_ptr(),
                )
            };
            if renamed != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })();
        if written.is_err() {
            // The write's error is the one to report, not a failure to clean up after it.
            let _ = self.unlink(&temporary);
        }
        written
    }

    /// Creates a new file `.NAME.PID.RANDOM` with `mode` (exactly: the umask does not narrow an
    /// explicit mode), never through a link or over an existing file.
    fn create_temporary(&self, name: &[u8], mode: u32) -> io::Result<(CString, File)> {
        let mut attempts = 0;
        loop {
            let mut temporary = Vec::with_capacity(name.len() + 40);
            temporary.push(b'.');
            temporary.extend_from_slice(name);
            temporary
                .extend_from_slice(format!(".{}.{:016x}", std::process::id(), random()).as_bytes());
            let temporary = CString::new(temporary).map_err(|_| nul_in_name())?;
            // SAFETY: the name is NUL-terminated and relative to our open directory; the
            // descriptor returned is owned below.
            let fd = unsafe {
                libc::openat(
                    self.fd.as_raw_fd(),
                    temporary.as_ptr(),
                    libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_WRONLY
                        | libc::O_CLOEXEC
                        | libc::O_NOFOLLOW,
                    mode as libc::c_uint,
                )
            };
            if fd < 0 {
                let e = io::Error::last_os_error();
                attempts += 1;
                // Another file of that name (a collision, or one planted there): another name.
                if e.kind() == io::ErrorKind::AlreadyExists && attempts < 16 {
                    continue;
                }
                return Err(e);
            }
            // SAFETY: `fd` was just opened and is owned by nothing else.
            let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
            // SAFETY: `fd` is open (owned by `file`); fchmod changes only its mode bits.
            if unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) } != 0 {
                let e = io::Error::last_os_error();
                drop(file);
                let _ = self.unlink(&temporary);
                return Err(e);
            }
            return Ok((temporary, file));
        }
    }

    /// Removes `name` from the directory.
    fn unlink(&self, name: &CStr) -> io::Result<()> {
        // SAFETY: the name is NUL-terminated and relative to our open directory.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Closes `file`, reporting the error a network file system may keep until then (a full disk).
fn close(file: File) -> io::Result<()> {
    let fd = file.into_raw_fd();
    // SAFETY: `fd` was owned by `file`, which gave it up: it is closed exactly once, here.
    if unsafe { libc::close(fd) } != 0 {
        let e = io::Error::last_os_error();
        // After EINTR the descriptor is closed all the same on Linux: nothing was lost.
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// The error for a file name that the system cannot take.
fn nul_in_name() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the file name")
}

/// 64 bits for a temporary file's name, from the kernel's random source (the time and a
/// counter if it fails): a name nobody can plant in advance.
fn random() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    // SAFETY: `bytes` is a valid buffer of its length; GRND_NONBLOCK never blocks.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), libc::GRND_NONBLOCK) };
    if n == bytes.len() as isize {
        return u64::from_ne_bytes(bytes);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(48)
}

/// The name every format gives `frame`: its function name, with line breaks and other control
/// characters replaced by spaces (every format is line-based or shows names on one line), and
/// [`UNKNOWN_FUNCTION`] for an empty name.
pub fn function_name(frame: &Frame) -> Cow<'_, str> {
    printable(&frame.function, UNKNOWN_FUNCTION)
}

/// The name every format gives a process whose program name (see
/// [`Thread::process`](crate::profile::Thread::process)) is `name`: that name, with control
/// characters replaced by spaces, and [`UNKNOWN_PROCESS`] for an empty name.
pub fn process_name(name: &str) -> Cow<'_, str> {
    printable(name, UNKNOWN_PROCESS)
}

/// `name` with control characters replaced by spaces, or `unknown` if it is empty.
fn printable<'a>(name: &'a str, unknown: &'static str) -> Cow<'a, str> {
    if name.is_empty() {
        Cow::Borrowed(unknown)
    } else if name.contains(char::is_control) {
        Cow::Owned(name.replace(char::is_control, " "))
    } else {
        Cow::Borrowed(name)
    }
}

/// A path's last component (a program's or module's file name), or the whole text if it has
/// none.
pub(crate) fn file_name(path: &str) -> &str {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{totals_of, Counters, Location, Sample, Thread};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::{Duration, UNIX_EPOCH};

    /// One thread, one sample in `main`: enough for every format to write something.
    fn tiny_profile() -> Profile {
        let samples = vec![Sample {
            thread: 0,
            time: Duration::ZERO,
            weight: 1,
            stack: 0,
        }];
        Profile {
            program: "/bin/tiny".into(),
            pid: 1,
            start: UNIX_EPOCH,
            duration: Duration::from_millis(1),
            interval: Duration::from_millis(1),
            wall_clock: false,
            modules: Vec::new(),
            locations: vec![Location {
                address: 0x1000,
                module: None,
                frames: vec![Frame {
                    function: "main".into(),
                    file: None,
                    line: None,
                }],
            }],
            stacks: vec![vec![0]],
            threads: vec![Thread {
                tid: 1,
                name: "tiny".into(),
                pid: 1,
                process: "tiny".into(),
            }],
            totals: totals_of(&samples),
            samples,
            counters: Counters::default(),
            heap: None,
            names: Vec::new(),
        }
    }

    /// A fresh directory named for `test`, with the mode `DirBuilder` gives under umask 022.
    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "unwind-profiler-output-{test}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    /// The names in `dir` that start with a dot: temporary files left behind.
    fn hidden(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect()
    }

    #[test]
    fn a_link_planted_at_a_final_name_is_replaced_and_its_target_untouched() {
        let base = scratch("planted-link");
        let victim = base.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        let dir = base.join("out");
        std::fs::create_dir(&dir).unwrap();
        let outputs = Outputs::paths(&dir, "profile");
        std::os::unix::fs::symlink(&victim, &outputs.folded).unwrap();
        write_all(&tiny_profile(), &dir, "profile").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let meta = std::fs::symlink_metadata(&outputs.folded).unwrap();
        assert!(meta.file_type().is_file(), "{meta:?}");
        let folded = std::fs::read_to_string(&outputs.folded).unwrap();
        assert!(folded.contains("main"), "{folded}");
        assert_eq!(hidden(&dir), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn files_are_0600_by_default_and_as_asked_with_a_mode() {
        let dir = scratch("modes");
        let outputs = write_all(&tiny_profile(), &dir, "profile").unwrap();
        for f in outputs.all() {
            let mode = std::fs::metadata(f).unwrap().mode() & 0o7777;
            assert_eq!(mode, 0o600, "{}: {mode:04o}", f.display());
        }
        // Over the files of the first run: the new files, with the new mode.
        let outputs = write_all_with_mode(&tiny_profile(), &dir, "profile", 0o644).unwrap();
        for f in outputs.all() {
            let mode = std::fs::metadata(f).unwrap().mode() & 0o7777;
            assert_eq!(mode, 0o644, "{}: {mode:04o}", f.display());
        }
        let e = write_all_with_mode(&tiny_profile(), &dir, "profile", 0o755).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_other_users_can_write_in_is_refused_naming_it() {
        let dir = scratch("writable-by-others");
        for mode in [0o777, 0o1777, 0o757] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = write_all(&tiny_profile(), &dir, "profile").unwrap_err();
            let message = e.to_string();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{message}");
            for said in [
                format!("{}: ", dir.display()),
                format!("mode {mode:04o}"),
                "owner uid".to_string(),
                "every user can write in it".to_string(),
            ] {
                assert!(message.contains(&said), "{said:?} not in {message}");
            }
            assert_eq!(
                check_directory(&dir).unwrap_err().to_string(),
                format!("cannot write to the output directory {message}"),
                "check_directory refuses it as write_all does"
            );
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "wrote in it");
        }
        // Writable by its group, which is this process's own: accepted.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        check_directory(&dir).unwrap();
        write_all(&tiny_profile(), &dir, "profile").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Only root can give a directory away: as another user, the test has nothing to check.
    #[test]
    fn a_directory_of_another_user_or_group_is_refused_when_running_as_root() {
        // SAFETY: geteuid and getegid cannot fail.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        if euid != 0 {
            println!("not root: cannot make a directory of another user");
            return;
        }
        let dir = scratch("another-users");
        std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
        let e = write_all(&tiny_profile(), &dir, "profile").unwrap_err();
        let message = e.to_string();
        for said in [
            format!("{}: ", dir.display()),
            "owner uid 65534".to_string(),
            "mode 0755".to_string(),
            format!("effective uid {euid}"),
        ] {
            assert!(message.contains(&said), "{said:?} not in {message}");
        }
        assert!(check_directory(&dir).is_err());
        // Ours again, but writable by a group that is not ours.
        std::os::unix::fs::chown(&dir, Some(euid), Some(65534)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        let message = write_all(&tiny_profile(), &dir, "profile")
            .unwrap_err()
            .to_string();
        for said in [
            "group 65534".to_string(),
            "mode 0775".to_string(),
            format!("effective gid {egid}"),
        ] {
            assert!(message.contains(&said), "{said:?} not in {message}");
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "wrote in it");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_that_fails_leaves_the_others_written_and_is_named() {
        let dir = scratch("one-fails");
        let outputs = Outputs::paths(&dir, "profile");
        // A directory at the flame graph's name: renaming a file over it fails (EISDIR).
        std::fs::create_dir(&outputs.flamegraph).unwrap();
        let e = write_all(&tiny_profile(), &dir, "profile").unwrap_err();
        let message = e.to_string();
        assert!(
            message.starts_with(&format!("{}: ", outputs.flamegraph.display())),
            "{message}"
        );
        assert_eq!(e.kind(), io::ErrorKind::IsADirectory, "{message}");
        assert!(
            !message.contains("; "),
            "only the flame graph failed: {message}"
        );
        assert!(outputs.flamegraph.is_dir());
        for f in outputs.all() {
            if f != outputs.flamegraph {
                let len = std::fs::metadata(f).unwrap().len();
                assert!(len > 0, "{} is empty", f.display());
            }
        }
        assert_eq!(hidden(&dir), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn check_directory_creates_a_missing_directory_and_leaves_it_empty() {
        let base = scratch("missing");
        let dir = base.join("a/b");
        check_directory(&dir).unwrap();
        assert!(dir.is_dir());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // A file where the directory should be.
        let file = base.join("file");
        std::fs::write(&file, "").unwrap();
        let message = check_directory(&file).unwrap_err().to_string();
        assert!(
            message.starts_with(&format!(
                "cannot write to the output directory {}: ",
                file.display()
            )),
            "{message}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
