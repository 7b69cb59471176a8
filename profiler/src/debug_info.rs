//! A module's DWARF, for naming addresses (functions, inlined ones, files and lines): only the
//! sections naming reads. Compressed sections (`SHF_COMPRESSED`, as Debian's and Fedora's debug
//! files have them) are decompressed once and kept across runs by build id in the user's cache
//! (`~/.cache/unwind-profiler/dwarf/BUILDID`, a directory only the user can enter), so later
//! runs map them instead of inflating them again: inflating is most of what naming libc costs.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSection};

/// The sections naming reads (the location lists, macros and types it does not).
const SECTIONS: [&str; 10] = [
    ".debug_abbrev",
    ".debug_addr",
    ".debug_aranges",
    ".debug_info",
    ".debug_line",
    ".debug_line_str",
    ".debug_ranges",
    ".debug_rnglists",
    ".debug_str",
    ".debug_str_offsets",
];

/// The first bytes of a cache file (its format's version in the last).
const MAGIC: &[u8; 8] = b"UWDWARF1";

/// Bytes a section is read from: a file's mapping or a decompressed copy, shared by the
/// readers of its parts.
#[derive(Clone, Debug)]
pub struct Bytes(Arc<Backing>);

#[derive(Debug)]
enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &*self.0 {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

// SAFETY: the bytes live in the `Arc`'s allocation (a mapping or a vector never resized), so
// they stay where they are however the `Bytes` is moved, and clones share them.
unsafe impl stable_deref_trait::StableDeref for Bytes {}
// SAFETY: as above: a clone is the same `Arc`, its target the same bytes.
unsafe impl stable_deref_trait::CloneStableDeref for Bytes {}

/// What sections are read through.
pub type Reader = gimli::EndianReader<gimli::RunTimeEndian, Bytes>;

/// The DWARF of one file, ready to name addresses.
pub struct DebugInfo {
    context: addr2line::Context<Reader>,
}

/// A frame the DWARF gives: the function's name (demangled), its file and line.
pub type NamedFrame = (String, Option<String>, Option<u32>);

/// The sections of [`SECTIONS`] in `file` (whose bytes are `whole`), each as a reader;
/// compressed ones decompressed. Also whether any was compressed.
fn sections_of(
    file: &object::File<'_>,
    whole: &Bytes,
    endian: gimli::RunTimeEndian,
) -> Option<(Vec<Option<Reader>>, bool)> {
    let base = whole.as_ptr() as usize;
    let mut compressed = false;
    let mut out = Vec::new();
    for name in SECTIONS {
        let Some(section) = file.section_by_name(name) else {
            out.push(None);
            continue;
        };
        let data = section.uncompressed_data().ok()?;
        let reader = match data {
            std::borrow::Cow::Borrowed(slice) => {
                let at = (slice.as_ptr() as usize).checked_sub(base)?;
                let whole_reader = gimli::EndianReader::new(whole.clone(), endian);
                whole_reader.range(at..at.checked_add(slice.len())?)
            }
            std::borrow::Cow::Owned(v) => {
                compressed = true;
                gimli::EndianReader::new(Bytes(Arc::new(Backing::Owned(v))), endian)
            }
        };
        out.push(Some(reader));
    }
    Some((out, compressed))
}

/// The cache file of build id `id` in `dir`.
fn cache_file(dir: &Path, id: &[u8]) -> PathBuf {
    dir.join(crate::collect::hex(id))
}

/// Reads the sections back from cache file `path`, written for build id `id`: `None` if it is
/// missing, of another format or build, or cut short.
fn read_cache(path: &Path, id: &[u8], endian: gimli::RunTimeEndian) -> Option<Vec<Option<Reader>>> {
    let map = unwind_samples::debug_files::map(path)?;
    let bytes = Bytes(Arc::new(Backing::Mapped(map)));
    let head = bytes.get(..8 + 2)?;
    if &head[..8] != MAGIC {
        return None;
    }
    let id_len = usize::from(u16::from_le_bytes([head[8], head[9]]));
    if bytes.get(10..10 + id_len)? != id {
        return None;
    }
    let mut at = 10 + id_len;
    let mut out = Vec::new();
    for _ in SECTIONS {
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(i..i + 8)?.try_into().ok()?))
        };
        let (offset, len) = (word(at)?, word(at + 8)?);
        at += 16;
        if offset == u64::MAX {
            out.push(None);
            continue;
        }
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        if end > bytes.len() {
            return None;
        }
        out.push(Some(
            gimli::EndianReader::new(bytes.clone(), endian).range(start..end),
        ));
    }
    Some(out)
}

/// Writes `sections` for build id `id` to `path`, through a temporary file renamed into place.
fn write_cache(path: &Path, id: &[u8], sections: &[Option<Reader>]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut head = Vec::new();
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&u16::try_from(id.len()).unwrap_or(0).to_le_bytes());
    head.extend_from_slice(id);
    let mut offset = (head.len() + 16 * sections.len()) as u64;
    for s in sections {
        match s {
            Some(r) => {
                head.extend_from_slice(&offset.to_le_bytes());
                head.extend_from_slice(&(r.len() as u64).to_le_bytes());
                offset += r.len() as u64;
            }
            None => {
                head.extend_from_slice(&u64::MAX.to_le_bytes());
                head.extend_from_slice(&0u64.to_le_bytes());
            }
        }
    }
    let temp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)?;
        f.write_all(&head)?;
        for r in sections.iter().flatten() {
            f.write_all(r.bytes())?;
        }
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// How long a cache file is kept unused.
const KEPT_UNUSED: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Removes the files of `dir` unused (not modified: a use touches its file) for
/// [`KEPT_UNUSED`].
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > KEPT_UNUSED));
        if old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The directory of cached DWARF in the user's cache (`$XDG_CACHE_HOME`, else `~/.cache`):
/// made if missing, and used only if it is the user's own and closed to others. Files unused
/// for a week are removed.
pub fn cache_directory() -> Option<PathBuf> {
    let dir = crate::user_cache::private_directory(&crate::user_cache::root()?, "dwarf")?;
    prune(&dir);
    Some(dir)
}

impl DebugInfo {
    /// The DWARF of the file at `path` (with the supplementary file `sup`, dwz's, if given);
    /// `None` if it has none. With a cache directory, compressed sections come from (or go
    /// to) the cache by the file's build id.
    pub fn open(path: &Path, sup: Option<&Path>, cache: Option<&Path>) -> Option<DebugInfo> {
        let whole = Bytes(Arc::new(Backing::Mapped(unwind_samples::debug_files::map(
            path,
        )?)));
        let file = object::File::parse(&*whole).ok()?;
        file.section_by_name(".debug_info")?;
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let id = file.build_id().ok().flatten().filter(|id| id.len() >= 2);
        let cached = match (cache, id) {
            (Some(dir), Some(id)) => {
                let path = cache_file(dir, id);
                let read = read_cache(&path, id, endian);
                if read.is_some() {
                    // Used: kept another week.
                    if let Ok(f) = std::fs::File::options().append(true).open(&path) {
                        let _ = f.set_modified(std::time::SystemTime::now());
                    }
                }
                read
            }
            _ => None,
        };
        let sections = match cached {
            Some(s) => s,
            None => {
                let (sections, compressed) = sections_of(&file, &whole, endian)?;
                if let (true, Some(dir), Some(id)) = (compressed, cache, id) {
                    let _ = write_cache(&cache_file(dir, id), id, &sections);
                }
                sections
            }
        };
        let empty = gimli::EndianReader::new(Bytes(Arc::new(Backing::Owned(Vec::new()))), endian);
        let mut dwarf = dwarf_of(&sections, &empty);
        if let Some(sup) = sup.and_then(|p| {
            let bytes = Bytes(Arc::new(Backing::Mapped(unwind_samples::debug_files::map(
                p,
            )?)));
            let file = object::File::parse(&*bytes).ok()?;
            let (sections, _) = sections_of(&file, &bytes, endian)?;
            Some(dwarf_of(&sections, &empty))
        }) {
            dwarf.sup = Some(Arc::new(sup));
        }
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
        let context = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(DebugInfo { context })
    }

    /// The frames at file address `probe`, innermost first (the inlined functions, then the
    /// function whose code it is); empty if the DWARF describes no function there.
    pub fn frames(&self, probe: u64) -> Vec<NamedFrame> {
        let mut out = Vec::new();
        if let Ok(mut iter) = self.context.find_frames(probe).skip_all_loads() {
            while let Ok(Some(f)) = iter.next() {
                let Some(name) = f.function.as_ref().and_then(|n| n.demangle().ok()) else {
                    continue;
                };
                out.push((
                    name.into_owned(),
                    f.location.as_ref().and_then(|l| l.file).map(str::to_owned),
                    f.location.as_ref().and_then(|l| l.line),
                ));
            }
        }
        out
    }
}

/// A `gimli::Dwarf` of `sections` (in [`SECTIONS`]' order), `empty` for those missing.
fn dwarf_of(sections: &[Option<Reader>], empty: &Reader) -> gimli::Dwarf<Reader> {
    let get = |name: &str| {
        SECTIONS
            .iter()
            .position(|s| *s == name)
            .and_then(|i| sections.get(i).cloned().flatten())
            .unwrap_or_else(|| empty.clone())
    };
    gimli::Dwarf {
        debug_abbrev: get(".debug_abbrev").into(),
        debug_addr: get(".debug_addr").into(),
        debug_aranges: get(".debug_aranges").into(),
        debug_info: get(".debug_info").into(),
        debug_line: get(".debug_line").into(),
        debug_line_str: get(".debug_line_str").into(),
        debug_str: get(".debug_str").into(),
        debug_str_offsets: get(".debug_str_offsets").into(),
        debug_macinfo: empty.clone().into(),
        debug_macro: empty.clone().into(),
        debug_names: empty.clone().into(),
        debug_types: empty.clone().into(),
        locations: gimli::LocationLists::new(empty.clone().into(), empty.clone().into()),
        ranges: gimli::RangeLists::new(get(".debug_ranges").into(), get(".debug_rnglists").into()),
        file_type: gimli::DwarfFileType::Main,
        sup: None,
        abbreviations_cache: gimli::AbbreviationsCache::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache gives back the sections as they were written, and refuses a file of another
    /// build or cut short.
    #[test]
    fn cached_sections_read_back_and_checked() {
        let dir = std::env::temp_dir().join(format!("debug-info-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let endian = gimli::RunTimeEndian::Little;
        let owned = |v: &[u8]| {
            Some(gimli::EndianReader::new(
                Bytes(Arc::new(Backing::Owned(v.to_vec()))),
                endian,
            ))
        };
        let mut sections: Vec<Option<Reader>> = vec![None; SECTIONS.len()];
        sections[3] = owned(b"info bytes");
        sections[4] = owned(b"line");
        let path = dir.join("abcd");
        write_cache(&path, &[0xab, 0xcd], &sections).unwrap();
        let back = read_cache(&path, &[0xab, 0xcd], endian).expect("read back");
        let bytes = |s: &Option<Reader>| s.as_ref().map(|r| r.bytes().to_vec());
        assert_eq!(
            back.iter().map(bytes).collect::<Vec<_>>(),
            sections.iter().map(bytes).collect::<Vec<_>>()
        );
        assert!(
            read_cache(&path, &[0xab, 0xce], endian).is_none(),
            "another build"
        );
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() - 1]).unwrap();
        assert!(
            read_cache(&path, &[0xab, 0xcd], endian).is_none(),
            "cut short"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
