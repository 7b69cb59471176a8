//! The directories where the processes of a run share the rules of their modules
//! ([`unwind_in_process::set_rules_cache`]).

use std::time::Duration;

use crate::collect;

/// The user's lasting cache of modules' rules for the preload library `library`'s build:
/// `$XDG_CACHE_HOME/unwind-profiler/rules-BUILDID` (`~/.cache/...` without it), made readable
/// by this user only, so that later runs read back the rules of the modules earlier ones
/// built (files named by each module's build id; `unwind_in_process::set_rules_cache`). Keyed
/// by the library's build id: another build may build other rules. Other builds' directories
/// unused for a week are removed, and past the newest `OTHER_BUILDS_KEPT` (8) of them the rest
/// (each rebuild of the library is another build: a developer's cache grew to 650 MB in a
/// day). `None` if the library has no build id or the directory cannot be made.
pub fn lasting_rules_cache(library: &std::path::Path) -> Option<std::path::PathBuf> {
    lasting_rules_cache_in(&crate::user_cache::root()?, library)
}

/// How many other builds' rules directories are kept (the most recently used), besides the
/// running build's: the builds one machine runs at once (x86_64 with glibc and with musl,
/// 32-bit ARM and aarch64 under qemu) and a few more.
pub const OTHER_BUILDS_KEPT: usize = 8;

/// [`lasting_rules_cache`] in the user's cache directory `cache`.
fn lasting_rules_cache_in(
    cache: &std::path::Path,
    library: &std::path::Path,
) -> Option<std::path::PathBuf> {
    let file = std::fs::File::open(library).ok()?;
    // SAFETY: a read-only private mapping of the library, only parsed here; a library
    // rewritten meanwhile gives bytes like any other to the parser.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let id = object::Object::build_id(&object::File::parse(&*map).ok()?).ok()??;
    // Only a directory of this user's, closed to others, is shared (not one planted there).
    let dir = crate::user_cache::private_directory(cache, &format!("rules-{}", collect::hex(id)))?;
    let base = cache.join("unwind-profiler");
    // Used now: its time is what keeps it among the newest for other builds' runs.
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.set_modified(std::time::SystemTime::now());
    }
    let week = Duration::from_secs(7 * 24 * 3600);
    let mut others: Vec<(std::time::SystemTime, std::path::PathBuf)> = std::fs::read_dir(&base)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("rules-") && e.path() != dir)
        .filter_map(|e| Some((e.metadata().and_then(|m| m.modified()).ok()?, e.path())))
        .collect();
    // Newest first: past the kept ones, or unused for a week, removed.
    others.sort_by_key(|o| std::cmp::Reverse(o.0));
    for (i, (used, path)) in others.iter().enumerate() {
        let stale = used.elapsed().is_ok_and(|age| age > week);
        if stale || i >= OTHER_BUILDS_KEPT {
            let _ = std::fs::remove_dir_all(path);
        }
    }
    Some(dir)
}

/// A new directory named `name` in the temporary directory, readable by this user only.
pub(super) fn private_directory(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(name);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .ok()
        .map(|()| dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

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
        // Past the newest OTHER_BUILDS_KEPT other builds, the rest go, oldest first.
        let builds: Vec<std::path::PathBuf> = (0..OTHER_BUILDS_KEPT + 3)
            .map(|i| base.join(format!("rules-build{i:02}")))
            .collect();
        for (i, d) in builds.iter().enumerate() {
            std::fs::create_dir_all(d).unwrap();
            let used = SystemTime::now() - Duration::from_secs(3600 * (1 + i as u64));
            std::fs::File::open(d).unwrap().set_modified(used).unwrap();
        }
        assert_eq!(lasting_rules_cache_in(&cache, &library), Some(dir.clone()));
        // `recent` (made just now) is the newest other build, then build00, build01, ...
        let kept: Vec<bool> = builds.iter().map(|d| d.exists()).collect();
        let expected: Vec<bool> = (0..builds.len())
            .map(|i| i + 1 < OTHER_BUILDS_KEPT)
            .collect();
        assert_eq!(kept, expected);
        assert!(recent.exists() && dir.join("kept.rules").is_file());
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
