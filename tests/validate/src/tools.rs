//! External tools the validation uses.

use std::path::PathBuf;

/// Mozilla's `dump_syms`: `$DUMP_SYMS`, else where `scripts/setup` installs it
/// (`~/.cache/unwind-in-process/tools/bin/dump_syms`, under `$XDG_CACHE_HOME` if set), else
/// `dump_syms` on the `PATH`.
pub fn dump_syms() -> PathBuf {
    if let Some(p) = std::env::var_os("DUMP_SYMS") {
        return p.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    if let Some(local) = cache.map(|c| c.join("unwind-in-process/tools/bin/dump_syms")) {
        if local.exists() {
            return local;
        }
    }
    PathBuf::from("dump_syms")
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .and_then(|p| p.parent())
        .map_or(here.clone(), PathBuf::from)
}
