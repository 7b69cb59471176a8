//! The profiler's directories in the user's cache (`$XDG_CACHE_HOME/unwind-profiler`, else
//! `~/.cache/unwind-profiler`): the rules of modules and decompressed DWARF, kept across runs.

use std::path::{Path, PathBuf};

/// The user's cache directory: `$XDG_CACHE_HOME` if it is an absolute path, else
/// `$HOME/.cache`, as the XDG base directory specification says; `None` without either.
pub fn root() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| Path::new(d).is_absolute())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
}

/// `root/unwind-profiler/name`, made if missing (with `unwind-profiler`) readable by this user
/// only; `None` if it cannot be made, or if what is there is not a directory of this user's
/// closed to others (one planted there: its files would be read as ours).
pub fn private_directory(root: &Path, name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let base = root.join("unwind-profiler");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&base)
        .ok()?;
    let dir = base.join(name);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    // SAFETY: getuid has no preconditions.
    let mine = meta.uid() == unsafe { libc::getuid() };
    (meta.is_dir() && mine && meta.mode() & 0o077 == 0).then_some(dir)
}
