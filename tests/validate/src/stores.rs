//! Breakpad symbol stores (`<store>/<name>/<DEBUG_ID>/<name>.sym`) for the modules of the
//! samples: one written by our exporter (`unwind_dwarf::breakpad`), one by Mozilla's
//! `dump_syms`, on demand one of our `STACK CFI` with dump_syms's names
//! ([`Stores::named_ours_supplier`]), and the supplier that hands their files to rust-minidump's
//! walker.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use minidump::Module;
use minidump_unwind::{
    FileError, FileKind, LocateSymbolsResult, SymbolError, SymbolFile, SymbolSupplier,
};

use unwind_dwarf::Architecture;

use crate::sample::SampleModule;

/// Which symbol files the Breakpad walker reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Symbols {
    /// `dump_syms`'s file where it has STACK CFI, ours for modules where it has none (armhf
    /// glibc and the Rust std of armv7 are EXIDX-only, which dump_syms does not read).
    Combined,
    /// Only `dump_syms`'s files.
    DumpSyms,
    /// Only the files our exporter writes.
    Ours,
}

impl Symbols {
    /// Every choice, the headline first.
    pub const ALL: [Symbols; 3] = [Symbols::Combined, Symbols::DumpSyms, Symbols::Ours];

    /// A description for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Symbols::Combined => "dump_syms's files, ours where dump_syms has no STACK CFI",
            Symbols::DumpSyms => "dump_syms's files only",
            Symbols::Ours => "our exported files only",
        }
    }
}

/// What was written for one module.
#[derive(Clone, Debug)]
pub struct StoredModule {
    /// The module.
    pub module: SampleModule,
    /// The file read on this host.
    pub host_path: PathBuf,
    /// Our file, if the export succeeded.
    pub ours: Option<PathBuf>,
    /// dump_syms's file, if it ran.
    pub dump_syms: Option<PathBuf>,
    /// Whether dump_syms's file has STACK CFI records.
    pub dump_syms_has_cfi: bool,
    /// Problems met (debug id mismatch, export or dump_syms failure).
    pub notes: Vec<String>,
}

/// The two stores.
#[derive(Clone, Debug, Default)]
pub struct Stores {
    /// Root of our store.
    pub ours: PathBuf,
    /// Root of dump_syms's store.
    pub dump_syms: PathBuf,
    /// Per module (by name and debug id).
    pub modules: BTreeMap<(String, String), StoredModule>,
}

impl Stores {
    /// Writes both stores under `root` for `modules` (the host file of each is found by
    /// [`crate::programs::host_path`]). Modules without a file on this host
    /// (the vdso) are listed with a note.
    pub fn build(
        root: &Path,
        modules: &[SampleModule],
        arch: Architecture,
        dump_syms: &Path,
    ) -> Stores {
        let mut stores = Stores {
            ours: root.join("ours"),
            dump_syms: root.join("dump_syms"),
            modules: BTreeMap::new(),
        };
        for m in modules {
            let key = (m.name().to_string(), m.debug_id.clone());
            if stores.modules.contains_key(&key) {
                continue;
            }
            let host_path = crate::programs::host_path(&m.code_file, arch);
            let mut s = StoredModule {
                module: m.clone(),
                host_path: host_path.clone(),
                ours: None,
                dump_syms: None,
                dump_syms_has_cfi: false,
                notes: Vec::new(),
            };
            if !host_path.exists() {
                s.notes
                    .push(format!("no file on this host ({})", host_path.display()));
                stores.modules.insert(key, s);
                continue;
            }
            let target = |store: &Path| {
                let dir = store.join(m.name()).join(&m.debug_id);
                let _ = std::fs::create_dir_all(&dir);
                dir.join(format!("{}.sym", m.name()))
            };
            match unwind_dwarf::breakpad::symbol_file_for_elf(&host_path) {
                Ok(f) if f.id.debug_id == m.debug_id => {
                    let path = target(&stores.ours);
                    match std::fs::write(&path, f.text.as_bytes()) {
                        Ok(()) => s.ours = Some(path),
                        Err(e) => s.notes.push(format!("writing our file: {e}")),
                    }
                }
                Ok(f) => s.notes.push(format!(
                    "our export's debug id {} differs from the minidump's",
                    f.id.debug_id
                )),
                Err(e) => s.notes.push(format!("our export failed: {e}")),
            }
            match Command::new(dump_syms).arg(&host_path).output() {
                Ok(out) if out.status.success() => {
                    let text = String::from_utf8_lossy(&out.stdout);
                    let id = text
                        .lines()
                        .next()
                        .and_then(|l| l.split(' ').nth(3))
                        .unwrap_or("");
                    if id == m.debug_id {
                        let path = target(&stores.dump_syms);
                        s.dump_syms_has_cfi = text.contains("\nSTACK CFI ");
                        match std::fs::write(&path, &out.stdout) {
                            Ok(()) => s.dump_syms = Some(path),
                            Err(e) => s.notes.push(format!("writing dump_syms's file: {e}")),
                        }
                    } else {
                        s.notes.push(format!(
                            "dump_syms's debug id {id} differs from the minidump's"
                        ));
                    }
                }
                Ok(out) => s.notes.push(format!(
                    "dump_syms failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
                Err(e) => s
                    .notes
                    .push(format!("dump_syms: {e} (scripts/setup installs it)")),
            }
            stores.modules.insert(key, s);
        }
        stores
    }

    /// The supplier giving the walker the files `choice` selects.
    pub fn supplier(&self, choice: Symbols) -> Supplier {
        let mut files = BTreeMap::new();
        for (key, m) in &self.modules {
            let ours = || m.ours.clone().map(|p| (p, SymbolSource::Ours));
            let theirs = || m.dump_syms.clone().map(|p| (p, SymbolSource::DumpSyms));
            let file = match choice {
                Symbols::Ours => ours(),
                Symbols::DumpSyms => theirs(),
                Symbols::Combined if m.dump_syms_has_cfi => theirs(),
                Symbols::Combined => ours(),
            };
            if let Some(f) = file {
                files.insert(key.clone(), f);
            }
        }
        Supplier { files }
    }

    /// A third store under `root`: per module, our exported file's `STACK` records with every
    /// other record of dump_syms's file (`FILE`, `FUNC` and its lines, `INLINE`, `PUBLIC`: the
    /// names), as a symbol server would hold them for crashes unwound with our CFI; our file
    /// alone where dump_syms's is missing. The supplier giving the walker those files.
    ///
    /// The names matter to the walker beyond naming frames: rust-minidump's stack scan
    /// (`instruction_seems_valid_by_symbols`) accepts a candidate return address in a module with
    /// a symbol file only where that file names a function, so with our files alone, which hold
    /// only `STACK CFI`, it accepts none.
    pub fn named_ours_supplier(&self, root: &Path) -> Supplier {
        let mut files = BTreeMap::new();
        for (key, m) in &self.modules {
            let Some(ours) = &m.ours else { continue };
            let Ok(cfi) = std::fs::read_to_string(ours) else {
                continue;
            };
            let names = m
                .dump_syms
                .as_ref()
                .and_then(|p| std::fs::read_to_string(p).ok());
            let text = match names {
                Some(names) => {
                    let mut text = String::with_capacity(names.len() + cfi.len());
                    for line in names.lines().filter(|l| !l.starts_with("STACK ")) {
                        text.push_str(line);
                        text.push('\n');
                    }
                    for line in cfi.lines().filter(|l| l.starts_with("STACK ")) {
                        text.push_str(line);
                        text.push('\n');
                    }
                    text
                }
                None => cfi,
            };
            let dir = root.join(&key.0).join(&key.1);
            let path = dir.join(format!("{}.sym", key.0));
            if std::fs::create_dir_all(&dir).is_ok() && std::fs::write(&path, text).is_ok() {
                files.insert(key.clone(), (path, SymbolSource::Ours));
            }
        }
        Supplier { files }
    }

    /// Modules that dump_syms wrote no STACK CFI for.
    pub fn without_dump_syms_cfi(&self) -> HashSet<String> {
        self.modules
            .values()
            .filter(|m| !m.dump_syms_has_cfi)
            .map(|m| m.module.name().to_string())
            .collect()
    }
}

/// Finds a module's symbol file by file name and debug id.
pub struct Supplier {
    files: BTreeMap<(String, String), (PathBuf, SymbolSource)>,
}

/// Who wrote a symbol file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolSource {
    /// Our exporter.
    Ours,
    /// Mozilla's dump_syms.
    DumpSyms,
}

impl Supplier {
    /// Which symbol file it gives the walker for `module`, if any.
    pub fn source(&self, module: &SampleModule) -> Option<SymbolSource> {
        self.files
            .get(&(module.name().to_string(), module.debug_id.clone()))
            .map(|(_, source)| *source)
    }
}

#[async_trait::async_trait]
impl SymbolSupplier for Supplier {
    async fn locate_symbols(
        &self,
        module: &(dyn Module + Sync),
    ) -> Result<LocateSymbolsResult, SymbolError> {
        let file = module.code_file();
        let name = file.rsplit('/').next().unwrap_or(&file).to_string();
        let id = module
            .debug_identifier()
            .map_or_else(String::new, |d| d.breakpad().to_string());
        let (path, _) = self.files.get(&(name, id)).ok_or(SymbolError::NotFound)?;
        let bytes = std::fs::read(path)?;
        Ok(LocateSymbolsResult {
            symbols: SymbolFile::from_bytes(&bytes)?,
            extra_debug_info: None,
        })
    }

    async fn locate_file(
        &self,
        _module: &(dyn Module + Sync),
        _kind: FileKind,
    ) -> Result<PathBuf, FileError> {
        Err(FileError::NotFound)
    }
}
