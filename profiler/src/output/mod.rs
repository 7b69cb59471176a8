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
pub mod pprof;
pub mod summary;

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

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
        }
    }

    /// Every path, in the order [`write_all`] writes them.
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

/// Writes every format of `profile` as `dir/stem.EXT` (see the [module documentation](self))
/// and returns the paths, creating `dir` if it does not exist; existing files are replaced.
///
/// An error names the file it concerns.
pub fn write_all(profile: &Profile, dir: &Path, stem: &str) -> io::Result<Outputs> {
    let outputs = Outputs::paths(dir, stem);
    // The preload library may be pointed at a directory that does not exist yet.
    std::fs::create_dir_all(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    write_file(&outputs.folded, |w| folded::write(profile, w))?;
    write_file(&outputs.flamegraph, |w| flamegraph::write(profile, w))?;
    write_file(&outputs.pprof, |w| pprof::write(profile, w))?;
    write_file(&outputs.firefox, |w| firefox::write(profile, w))?;
    write_file(&outputs.summary, |w| summary::write(profile, w))?;
    Ok(outputs)
}

/// Creates `path`, writes it with `body` and flushes it; an error is prefixed with the path.
fn write_file(path: &Path, body: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let result = File::create(path).and_then(|file| {
        let mut w = BufWriter::new(file);
        body(&mut w)?;
        w.flush()
    });
    result.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
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
