//! Where a module's file and its separate debug information are, in the order gdb and elfutils
//! look: a symbol root first (`--symfs`, qemu's `-L` sysroot), the build-id tree of each debug
//! directory, then the file `.gnu_debuglink` names (beside the module, in `.debug/` beside it,
//! and under each debug directory), and the DWARF supplementary file `.gnu_debugaltlink` names
//! (dwz). Every file found is checked before it is used: by build id where both have one, else
//! by the CRC its debug link gives, so a different build of a file never names a module's code.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};

/// The directory distributions install debug files in (gdb's default `debug-file-directory`).
pub const DEBUG_DIRECTORY: &str = "/usr/lib/debug";

/// Where module files and their debug files are looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugSearch {
    /// A directory the process's paths are read under first (perf's `--symfs`, qemu's `-L`): the
    /// file system the profiled program saw, when it is not this one's. A path not there is
    /// read as it is, if its build id is the module's.
    pub root: Option<PathBuf>,
    /// The global debug directories, each with a `.build-id/` tree and the debug links' tree.
    pub debug_dirs: Vec<PathBuf>,
}

impl Default for DebugSearch {
    fn default() -> Self {
        DebugSearch {
            root: None,
            debug_dirs: vec![PathBuf::from(DEBUG_DIRECTORY)],
        }
    }
}

/// How a separate debug file was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Via {
    /// By build id, in a debug directory's `.build-id/` tree.
    BuildId,
    /// By the name and CRC in the module's `.gnu_debuglink`.
    DebugLink,
}

impl Via {
    /// How the summary says it: `build id` or `.gnu_debuglink`.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::BuildId => "build id",
            Via::DebugLink => ".gnu_debuglink",
        }
    }
}

/// A debug file beside a module that was not used: another user's (see
/// [`DebugSearch::debug_file_noting`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Where it is.
    pub path: PathBuf,
    /// The user who owns it, or the link to it.
    pub owner: u32,
}

/// A separate debug file found for a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugFile {
    /// Where it is.
    pub path: PathBuf,
    /// How it was found.
    pub via: Via,
}

/// The file name and CRC-32 in `file`'s `.gnu_debuglink` section: a NUL-terminated name, padding
/// to 4 bytes, then the debug file's CRC in the file's byte order.
pub fn debug_link(file: &object::File<'_>) -> Option<(String, u32)> {
    let data = file.section_by_name(".gnu_debuglink")?.data().ok()?;
    let nul = data.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&data[..nul]).ok()?;
    // A name with a directory in it would leave the directories searched.
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let at = (nul + 1).next_multiple_of(4);
    let crc: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
    let crc = if file.is_little_endian() {
        u32::from_le_bytes(crc)
    } else {
        u32::from_be_bytes(crc)
    };
    Some((name.to_owned(), crc))
}

/// The path and build id in `file`'s `.gnu_debugaltlink` section (dwz's supplementary file of
/// DWARF shared by several debug files): a NUL-terminated path, then the build id.
pub fn alt_link(file: &object::File<'_>) -> Option<(PathBuf, Vec<u8>)> {
    let data = file.section_by_name(".gnu_debugaltlink")?.data().ok()?;
    let nul = data.iter().position(|&b| b == 0)?;
    let path = std::str::from_utf8(&data[..nul]).ok()?;
    let id = &data[nul + 1..];
    (!path.is_empty() && !id.is_empty()).then(|| (PathBuf::from(path), id.to_vec()))
}

/// The build id of the ELF file at `path`, if it is one and has one.
pub fn build_id_of(path: &Path) -> Option<Vec<u8>> {
    let map = map(path)?;
    let file = object::File::parse(&*map).ok()?;
    file.build_id().ok().flatten().map(<[u8]>::to_vec)
}

/// `path`'s bytes, mapped; `None` if it is no regular file or cannot be read.
pub fn map(path: &Path) -> Option<memmap2::Mmap> {
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    // SAFETY: the mapping is read-only and private; a file truncated under it would fault the
    // reads, as every ELF reader's (gdb's, perf's) do; the files read are debug files and
    // libraries, which packages replace by renaming, not by writing in place.
    unsafe { memmap2::Mmap::map(&file) }.ok()
}

/// The CRC-32 of the file at `path` as `.gnu_debuglink` records it (the zlib/IEEE polynomial).
pub fn file_crc(path: &Path) -> Option<u32> {
    let map = map(path)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&map);
    Some(h.finalize())
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    crate::symbolize::hex(bytes)
}

/// `dir/.build-id/xx/rest.debug` for build id `id` (at least two bytes).
fn build_id_path(dir: &Path, id: &[u8]) -> Option<PathBuf> {
    if id.len() < 2 {
        return None;
    }
    let hex = hex(id);
    Some(
        dir.join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..])),
    )
}

/// The owner of the file at `path`, or of the link there, if it is neither root, this
/// process's user, nor the owner of the file at `module`; `None` if there is no such file.
#[cfg(unix)]
fn foreign_owner(path: &Path, module: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let link = std::fs::symlink_metadata(path).ok()?;
    let target = std::fs::metadata(path).ok()?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let module_owner = std::fs::metadata(module).map_or(me, |m| m.uid());
    [link.uid(), target.uid()]
        .into_iter()
        .find(|&u| u != 0 && u != me && u != module_owner)
}

/// Elsewhere files have no owner to check.
#[cfg(not(unix))]
fn foreign_owner(_path: &Path, _module: &Path) -> Option<u32> {
    None
}

/// `path` read under `root`: `root` joined with `path` made relative.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

impl DebugSearch {
    /// The debug directories, those under the root first.
    fn dirs(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = match &self.root {
            Some(root) => self.debug_dirs.iter().map(|d| under(root, d)).collect(),
            None => Vec::new(),
        };
        out.extend(self.debug_dirs.iter().cloned());
        out
    }

    /// The file to read for a module the process loaded from `path`: under the root if it is
    /// there, else `path` itself; with the module's build id known, only a file with that build
    /// id (a file of the same name from another build, such as the host's `libc.so.6` for an
    /// emulated program's, names nothing). With a root and no build id to check, only the file
    /// under the root.
    pub fn module_file(&self, path: &Path, build_id: Option<&[u8]>) -> Option<PathBuf> {
        let candidates = match &self.root {
            Some(root) if build_id.is_none() => vec![under(root, path)],
            Some(root) => vec![under(root, path), path.to_path_buf()],
            None => vec![path.to_path_buf()],
        };
        candidates.into_iter().find(|p| match build_id {
            Some(id) => build_id_of(p).is_some_and(|found| found == id),
            None => p.is_file(),
        })
    }

    /// The separate debug file of the module whose file is `file`, read at `found_at` (see
    /// [`module_file`](Self::module_file)); `loaded_as` is the path the process loaded it from.
    /// By build id in each debug directory's tree, then by `.gnu_debuglink` beside the file, in
    /// `.debug/` beside it, and under each debug directory at the file's directory (as loaded
    /// and as found, links resolved). `None` if there is none, or none that matches.
    pub fn debug_file(
        &self,
        file: &object::File<'_>,
        found_at: &Path,
        loaded_as: &Path,
    ) -> Option<DebugFile> {
        self.debug_file_noting(file, found_at, loaded_as, &mut Vec::new())
    }

    /// [`debug_file`](Self::debug_file), noting in `refused` the files beside the module that
    /// another user planted: one found beside the module or in `.debug/` beside it is used
    /// only if it (and the link to it, if it is one) belongs to root, to this process's user,
    /// or to the module file's owner, who could change the module itself. In a directory others
    /// can write to (`/tmp`), another user's file would name the code falsely.
    pub fn debug_file_noting(
        &self,
        file: &object::File<'_>,
        found_at: &Path,
        loaded_as: &Path,
        refused: &mut Vec<Refused>,
    ) -> Option<DebugFile> {
        let id = file.build_id().ok().flatten().filter(|id| id.len() >= 2);
        if let Some(path) = id.and_then(|id| self.by_build_id(id)) {
            return Some(DebugFile {
                path,
                via: Via::BuildId,
            });
        }
        let (name, crc) = debug_link(file)?;
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut add = |d: PathBuf| {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        };
        let found_dir = found_at.parent().map(Path::to_path_buf);
        let real_dir = std::fs::canonicalize(found_at)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf));
        // Beside the module: where its owner, not the system, put its debug files.
        let beside: Vec<PathBuf> = found_dir
            .iter()
            .chain(&real_dir)
            .flat_map(|d| [d.clone(), d.join(".debug")])
            .collect();
        for d in &beside {
            add(d.clone());
        }

        let loaded_dir = loaded_as.parent().filter(|d| d.is_absolute());
        for debug_dir in self.dirs() {
            for d in loaded_dir.iter().copied().chain(real_dir.as_deref()) {
                add(under(&debug_dir, d));
            }
        }
        dirs.into_iter().find_map(|d| {
            let p = d.join(&name);
            // The module file itself, when its link names its own name (a file that was not
            // stripped after all), is no debug file of its own.
            if p == found_at {
                return None;
            }
            if beside.contains(&d) {
                if let Some(owner) = foreign_owner(&p, found_at) {
                    refused.push(Refused { path: p, owner });
                    return None;
                }
            }
            let matches = match (id, build_id_of(&p)) {
                (Some(id), Some(found)) => found == id,
                _ => file_crc(&p) == Some(crc),
            };
            matches.then_some(DebugFile {
                path: p,
                via: Via::DebugLink,
            })
        })
    }

    /// The debug file of build id `id` in a debug directory's `.build-id/` tree, if there is
    /// one with that build id.
    pub fn by_build_id(&self, id: &[u8]) -> Option<PathBuf> {
        self.dirs()
            .iter()
            .filter_map(|d| build_id_path(d, id))
            .find(|p| build_id_of(p).is_some_and(|found| found == id))
    }

    /// The supplementary DWARF file (`.gnu_debugaltlink`, dwz) of the debug file `debug` read
    /// at `path`: the path it names (relative to the debug file's directory if relative, under
    /// the root first), else by its build id in each debug directory's tree; only a file whose
    /// build id is the one the link gives.
    pub fn alt_file(&self, debug: &object::File<'_>, path: &Path) -> Option<PathBuf> {
        let (named, id) = alt_link(debug)?;
        let named = match path.parent() {
            Some(dir) if named.is_relative() => dir.join(&named),
            _ => named,
        };
        let mut candidates = Vec::new();
        if let Some(root) = &self.root {
            candidates.push(under(root, &named));
        }
        candidates.push(named);
        candidates.extend(self.dirs().iter().filter_map(|d| build_id_path(d, &id)));
        candidates
            .into_iter()
            .find(|p| build_id_of(p).is_some_and(|found| found == id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A debug link's name, its padding and its CRC are read in the file's byte order; a name
    /// with a directory, or a section cut short, is no link.
    #[test]
    fn debug_links_are_read_and_checked() {
        type Case<'a> = (&'a [u8], Option<(&'a str, u32)>);
        let cases: [Case<'_>; 4] = [
            (
                b"lib.debug\0\0\0\x78\x56\x34\x12",
                Some(("lib.debug", 0x1234_5678)),
            ),
            (b"abc\0\x01\x02\x03\x04", Some(("abc", 0x0403_0201))),
            (b"../x\0\0\0\0\x01\x02\x03\x04", None),
            (b"lib.debug\0\0\0\x78\x56", None),
        ];
        for (section, want) in cases {
            let elf = crate::test_elf::with_section(".gnu_debuglink", section);
            let file = object::File::parse(&*elf).unwrap();
            let got = debug_link(&file);
            assert_eq!(
                got.as_ref().map(|(n, c)| (n.as_str(), *c)),
                want,
                "{section:?}"
            );
        }
    }

    #[test]
    fn alt_links_name_a_path_and_a_build_id() {
        let elf =
            crate::test_elf::with_section(".gnu_debugaltlink", b"/usr/lib/debug/.dwz/x\0\xab\xcd");
        let file = object::File::parse(&*elf).unwrap();
        assert_eq!(
            alt_link(&file),
            Some((PathBuf::from("/usr/lib/debug/.dwz/x"), vec![0xab, 0xcd]))
        );
    }

    /// The CRC is zlib's, as `objcopy --add-gnu-debuglink` computes it.
    #[test]
    fn the_crc_is_the_ieee_one() {
        let dir = std::env::temp_dir().join(format!("debug-files-crc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, b"123456789").unwrap();
        assert_eq!(file_crc(&p), Some(0xcbf4_3926));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Under a root, a path is read there first; a file elsewhere is taken only with the
    /// module's build id.
    #[test]
    fn a_root_is_read_first_and_build_ids_decide() {
        let dir = std::env::temp_dir().join(format!("debug-files-root-{}", std::process::id()));
        let root = dir.join("root");
        std::fs::create_dir_all(root.join("lib")).unwrap();
        let exe = std::env::current_exe().unwrap();
        let id = build_id_of(&exe).expect("the test binary has a build id");
        std::fs::copy(&exe, root.join("lib/copy")).unwrap();
        let search = DebugSearch {
            root: Some(root.clone()),
            ..DebugSearch::default()
        };
        assert_eq!(
            search.module_file(Path::new("/lib/copy"), Some(&id)),
            Some(root.join("lib/copy"))
        );
        assert_eq!(
            search.module_file(Path::new("/lib/copy"), None),
            Some(root.join("lib/copy"))
        );
        // Not under the root: the path itself, if its build id is the module's.
        assert_eq!(search.module_file(&exe, Some(&id)), Some(exe.clone()));
        assert_eq!(search.module_file(&exe, Some(&[1, 2, 3])), None);
        assert_eq!(search.module_file(&exe, None), None);
        assert_eq!(
            DebugSearch::default().module_file(&exe, None),
            Some(exe.clone())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
