//! External tools the validation uses.

use std::path::PathBuf;

/// Mozilla's `dump_syms`: `$DUMP_SYMS`, else `target/tools/bin/dump_syms` (where
/// `scripts/setup` installs it), else `dump_syms` on the `PATH`.
pub fn dump_syms() -> PathBuf {
    if let Some(p) = std::env::var_os("DUMP_SYMS") {
        return p.into();
    }
    let local = workspace_root().join("target/tools/bin/dump_syms");
    if local.exists() {
        return local;
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
