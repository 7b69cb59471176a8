//! Symbolization, after sampling: addresses to functions (inlined ones included), files and
//! lines with `addr2line`, demangled; symbol tables where there is no debug information.
//!
//! A module's file is read under the symbol root first ([`SymbolSources::search`]), and only a
//! file with the module's build id names its code. Debug information is looked for where gdb
//! and elfutils look ([`unwind_samples::debug_files`]: the build-id tree, `.gnu_debuglink`,
//! `.gnu_debugaltlink`), then from debuginfod servers ([`crate::debuginfod`]); `addr2line`'s
//! loader searches none of these itself. Where there is none, the file's own symbol tables
//! (MiniDebugInfo included) name its functions, then its unwind tables' function starts.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::profile::{Frame, Module, NameSource};
use unwind_in_process::SIGRETURN;
use unwind_samples::debug_files::DebugSearch;
use unwind_samples::offline::ModuleFile;
use unwind_samples::symbolize::has_file;

/// The largest module file read (unstripped browsers reach 2-3 GiB).
const MAX_MODULE_FILE: u64 = 4 << 30;
/// The largest perf map or jitdump file read.
const MAX_JIT_FILE: u64 = 1 << 30;

/// Opens `path` to read it if it is a regular file of at most `most` bytes (and, with
/// `nofollow`, not a symbolic link), without blocking on a FIFO or a device: the paths come
/// from the profiled program, or from a directory anyone can write to.
fn open_regular(path: &Path, nofollow: bool, most: u64) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = libc::O_NONBLOCK | libc::O_NOCTTY | if nofollow { libc::O_NOFOLLOW } else { 0 };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    (meta.is_file() && meta.len() <= most).then_some(file)
}

/// One module file (by path and build id) and what names its addresses, shared by every
/// process that loaded it, at whatever address.
struct File {
    /// The file, open while it is read: its parsers read `/proc/self/fd/N`, this very file,
    /// whatever its path names by then.
    _open: Option<std::fs::File>,
    /// The DWARF of the separate debug file (first) and of the module's own file, those that
    /// have any.
    loaders: Vec<crate::debug_info::DebugInfo>,
    /// Its symbol tables (dynamic ones included; the vdso's from its image) and the functions
    /// its unwind tables describe, at file addresses: the fallback for names, read when first
    /// needed (debug information names most addresses without them).
    symbols: std::cell::OnceCell<unwind_samples::symbolize::Symbolizer>,
    /// The file, for `symbols`.
    whole_file: ModuleFile,
    /// The separate debug file found for it, whose symbol table completes the file's own.
    debug_path: Option<PathBuf>,
    /// Frames already found, by file address and leaf or not.
    frames: HashMap<(u64, bool), Vec<Frame>>,
    /// Where its names come from, as the summary says it.
    names_from: String,
}

/// Where names are looked for besides the module files themselves.
#[derive(Debug, Default)]
pub struct SymbolSources {
    /// The symbol root and the debug directories.
    pub search: DebugSearch,
    /// The debuginfod servers to ask, if any.
    pub debuginfod: Option<crate::debuginfod::Client>,
    /// Where decompressed DWARF is kept across runs ([`crate::debug_info`]), if anywhere.
    pub dwarf_cache: Option<PathBuf>,
}

impl SymbolSources {
    /// The sources `config` asks for: its symbol root, the default debug directory, and unless
    /// turned off the debuginfod servers of `DEBUGINFOD_URLS` (read through `var`).
    pub fn of_config(
        config: &crate::config::Config,
        var: impl Fn(&str) -> Option<String>,
    ) -> SymbolSources {
        SymbolSources {
            search: DebugSearch {
                root: config.symfs.clone(),
                ..DebugSearch::default()
            },
            debuginfod: config
                .debuginfod
                .then(|| crate::debuginfod::Client::from_vars(var))
                .flatten(),
            dwarf_cache: crate::debug_info::cache_directory(),
        }
    }
}

/// Symbolizes addresses in modules, each module file read once however many processes (or
/// loads) it had.
pub struct Symbolizer {
    files: HashMap<(String, String), File>,
    sources: SymbolSources,
    vdso_image: Option<Vec<u8>>,
    /// Each process's perf map, read when first needed (`None`: it has none).
    perf_maps: HashMap<u32, Option<PerfMap>>,
    /// Jitdump files a process mapped (as JITs map theirs, for perf to find them), by pid.
    jitdumps: HashMap<u32, Vec<PathBuf>>,
    /// When each process's sampling started: a perf map or jitdump last written before is
    /// another process's (an earlier one with the same pid).
    started: HashMap<u32, std::time::SystemTime>,
    /// The functions each process's JIT compilers named through the GDB JIT interface, by
    /// start: the end and the name.
    jit_functions: HashMap<u32, std::collections::BTreeMap<u64, (u64, String)>>,
    /// Addresses whose frames are cached, in every file (see [`FRAMES_CACHED`]).
    cached: usize,
    /// Times the caches were emptied for holding [`FRAMES_CACHED`] addresses.
    cache_resets: u64,
}

/// The most addresses whose frames a symbolizer keeps (with inlined frames and names, about
/// 200 bytes each: 100 MiB at most). Past it, at the next [`Symbolizer::start_period`], every
/// cache is emptied and counted ([`Symbolizer::cache_resets`]): a run of many periods pays to
/// name again the addresses it still samples, and its memory stays bounded.
pub const FRAMES_CACHED: usize = 1 << 19;

/// The code a JIT compiler described in `/tmp/perf-PID.map` (node `--perf-basic-prof`, the JVM's
/// perf map agents, python `-X perf`): lines `START SIZE NAME`, START and SIZE in hexadecimal;
/// or in a jitdump file, `/tmp/jit-PID.dump` (python 3.13 `-X perf_jit`, node `--perf-prof`):
/// its code-load records. A later entry for the same start wins (code freed and reused).
#[derive(Debug, Default)]
pub struct PerfMap {
    /// By start: the end and the name.
    entries: std::collections::BTreeMap<u64, (u64, String)>,
}

impl PerfMap {
    /// Parses a perf map's text; lines that do not read as one are skipped.
    pub fn parse(text: &str) -> PerfMap {
        let mut entries = std::collections::BTreeMap::new();
        for line in text.lines() {
            let mut fields = line.splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok();
            let (Some(start), Some(size)) = (hex(start), hex(size)) else {
                continue;
            };
            let name = name.trim();
            if size == 0 || name.is_empty() {
                continue;
            }
            entries.insert(start, (start.saturating_add(size), name.to_owned()));
        }
        PerfMap { entries }
    }

    /// Adds the code loads (and moves) of a jitdump file (see [`unwind_samples::jitdump`]).
    pub fn add_jitdump(&mut self, dump: &[u8]) {
        use unwind_samples::jitdump::{records, Record};
        for record in records(dump) {
            match record {
                Record::CodeLoad { addr, size, name } if size > 0 && !name.is_empty() => {
                    let name = String::from_utf8_lossy(name).into_owned();
                    self.entries.insert(addr, (addr.saturating_add(size), name));
                }
                Record::CodeMove { old, new, size } => {
                    if let Some((_, name)) = self.entries.remove(&old) {
                        self.entries.insert(new, (new.saturating_add(size), name));
                    }
                }
                _ => {}
            }
        }
    }

    /// The name of the code at `address`, if the map describes it.
    pub fn lookup(&self, address: u64) -> Option<&str> {
        let (_, (end, name)) = self.entries.range(..=address).next_back()?;
        (address < *end).then_some(name.as_str())
    }

    /// `/tmp/jit-PID.dump` (or the jitdump files of `dumps`) and `/tmp/perf-PID.map` (the
    /// map's entries winning), those of them that are there, this user's (as `perf` asks:
    /// another user's file could name this user's code at will) and, if the process's start is
    /// given, written since (a second of slack for the file system's clock); `None` if none is.
    fn of_process(
        pid: u32,
        dumps: &[PathBuf],
        started: Option<std::time::SystemTime>,
    ) -> Option<PerfMap> {
        use std::os::unix::fs::MetadataExt;
        let since = started.and_then(|s| s.checked_sub(std::time::Duration::from_secs(1)));
        let read = |path: &Path| -> Option<Vec<u8>> {
            // Not through a symbolic link, not a FIFO (opening one would wait for a writer).
            let mut file = open_regular(path, true, MAX_JIT_FILE)?;
            let meta = file.metadata().ok()?;
            // SAFETY: getuid has no preconditions.
            if meta.uid() != unsafe { libc::getuid() } {
                return None;
            }
            if since.is_some_and(|s| meta.modified().is_ok_and(|m| m < s)) {
                return None;
            }
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut file, &mut bytes).ok()?;
            Some(bytes)
        };
        let tmp = PathBuf::from(format!("/tmp/jit-{pid}.dump"));
        let dumps: Vec<Vec<u8>> = dumps
            .iter()
            .chain(Some(&tmp).filter(|t| !dumps.contains(t)))
            .filter_map(|p| read(p))
            .collect();
        let map = read(Path::new(&format!("/tmp/perf-{pid}.map")));
        if dumps.is_empty() && map.is_none() {
            return None;
        }
        let mut out = map.map_or_else(PerfMap::default, |m| {
            PerfMap::parse(&String::from_utf8_lossy(&m))
        });
        for dump in dumps {
            let mut from_dump = PerfMap::default();
            from_dump.add_jitdump(&dump);
            for (start, entry) in from_dump.entries {
                out.entries.entry(start).or_insert(entry);
            }
        }
        Some(out)
    }
}

/// The bytes of `file`, mapped.
fn map(file: &std::fs::File) -> Option<memmap2::Mmap> {
    // SAFETY: a private read-only mapping of a regular file (checked by `open_regular`); a
    // file truncated under it would fault the reads, as it would gdb's and perf's.
    unsafe { memmap2::Mmap::map(file) }.ok()
}

/// What names a module's code when no debug file does, from its file's own sections: its
/// symbol table, MiniDebugInfo's, its dynamic symbols, or its unwind tables (and on 32-bit
/// ARM the calls between them, `unwind_dwarf::called`).
fn own_tables(file: &object::File<'_>) -> &'static str {
    use object::Object;
    let has = |name| file.section_by_name(name).is_some();
    let arm = file.architecture() == object::Architecture::Arm;
    if has(".symtab") {
        ".symtab"
    } else if has(".gnu_debugdata") {
        "MiniDebugInfo"
    } else if has(".dynsym") && arm {
        ".dynsym, unwind tables and calls"
    } else if has(".dynsym") {
        ".dynsym and unwind tables"
    } else if arm {
        "unwind tables and calls only"
    } else {
        "unwind tables only"
    }
}

impl Symbolizer {
    /// A symbolizer of the files as the process named them, with the default debug directory
    /// and no debuginfod server; `vdso_image` names the vdso's functions.
    pub fn new(vdso_image: Option<&[u8]>) -> Symbolizer {
        Symbolizer::with_sources(vdso_image, SymbolSources::default())
    }

    /// A symbolizer that looks for files and names where `sources` say.
    pub fn with_sources(vdso_image: Option<&[u8]>, sources: SymbolSources) -> Symbolizer {
        Symbolizer {
            files: HashMap::new(),
            sources,
            vdso_image: vdso_image.map(<[u8]>::to_vec),
            perf_maps: HashMap::new(),
            jitdumps: HashMap::new(),
            started: HashMap::new(),
            jit_functions: HashMap::new(),
            cached: 0,
            cache_resets: 0,
        }
    }

    /// Between two periods of a continuous run: perf maps and jitdump files are read again
    /// when next needed (a JIT names more code as it runs), and the caches are emptied if they
    /// hold [`FRAMES_CACHED`] addresses or more. Each module's file stays open and read.
    pub fn start_period(&mut self) {
        self.perf_maps.clear();
        if self.cached >= FRAMES_CACHED {
            for file in self.files.values_mut() {
                file.frames = HashMap::new();
            }
            self.cached = 0;
            self.cache_resets += 1;
        }
    }

    /// Addresses whose frames are cached now.
    pub fn cached_addresses(&self) -> usize {
        self.cached
    }

    /// How many times [`Symbolizer::start_period`] emptied the caches for holding too many.
    pub fn cache_resets(&self) -> u64 {
        self.cache_resets
    }

    /// Notes the functions process `pid`'s JIT compilers named through the GDB JIT interface
    /// (their symbol files), by start: they name its generated code where its perf map does
    /// not.
    pub fn note_jit_functions(
        &mut self,
        pid: u32,
        functions: &std::collections::BTreeMap<u64, (u64, String)>,
    ) {
        if !functions.is_empty() {
            self.jit_functions.insert(pid, functions.clone());
        }
    }

    /// Notes process `pid`: when its sampling started (a perf map or jitdump file last written
    /// before that is left alone: an earlier process's with the same pid), and its modules: a
    /// jitdump file among them (`jit-PID.dump`, which a JIT maps executable for perf to find it
    /// wherever it wrote it: node `--perf-prof` writes it in its working directory) names its
    /// code as `/tmp/jit-PID.dump` would.
    pub fn note_process(&mut self, pid: u32, started: std::time::SystemTime, modules: &[Module]) {
        self.started.insert(pid, started);
        let name = format!("jit-{pid}.dump");
        let dumps: Vec<PathBuf> = modules
            .iter()
            .filter(|m| m.generated && basename(&m.path) == name)
            .map(|m| PathBuf::from(&m.path))
            .collect();
        if !dumps.is_empty() {
            self.jitdumps.insert(pid, dumps);
        }
    }

    fn file(&mut self, m: &Module) -> &mut File {
        let sources = &mut self.sources;
        self.files
            .entry((m.path.clone(), m.build_id.clone()))
            .or_insert_with(|| open_module(m, sources))
    }

    /// Where the names of each module file read so far came from, by path.
    pub fn name_sources(&self) -> Vec<NameSource> {
        let mut out: Vec<NameSource> = self
            .files
            .iter()
            .map(|((path, _), f)| NameSource {
                module: path.clone(),
                from: f.names_from.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.module.cmp(&b.module));
        out
    }

    /// What went wrong with debuginfod servers in this run (each said once on stderr).
    pub fn debuginfod_problems(&self) -> &[String] {
        self.sources
            .debuginfod
            .as_ref()
            .map_or(&[], |c| c.problems.as_slice())
    }

    /// The frames at `address` in `module` of process `pid` (innermost first; never empty). A
    /// return address (`leaf` false) is looked up one byte back, inside its call instruction.
    /// An address in no module, or in generated code ([`Module::generated`]), is named by the
    /// process's perf map, if it has one.
    pub fn frames(
        &mut self,
        pid: u32,
        module: Option<&Module>,
        address: u64,
        leaf: bool,
    ) -> Vec<Frame> {
        // A signal trampoline in a mapping of its own (qemu-user's aarch64 one) is one function,
        // named as the mapping is.
        if let Some(m) = module.filter(|m| m.path == SIGRETURN) {
            return vec![Frame {
                function: m.path.clone(),
                file: None,
                line: None,
            }];
        }
        let Some(m) = module.filter(|m| !m.generated) else {
            let dumps = self.jitdumps.get(&pid).map_or(&[][..], Vec::as_slice);
            let started = self.started.get(&pid).copied();
            let jit = self.jit_functions.get(&pid);
            let map = self.perf_maps.entry(pid).or_insert_with(|| {
                let map = PerfMap::of_process(pid, dumps, started);
                match jit {
                    Some(functions) => {
                        let mut map = map.unwrap_or_default();
                        for (&start, (end, name)) in functions {
                            map.entries
                                .entry(start)
                                .or_insert_with(|| (*end, name.clone()));
                        }
                        Some(map)
                    }
                    None => map,
                }
            });
            let name = map
                .as_ref()
                .and_then(|map| map.lookup(code_address(address, leaf)));
            return vec![name.map_or_else(
                || unknown(address),
                |n| Frame {
                    function: n.to_owned(),
                    file: None,
                    line: None,
                },
            )];
        };
        let probe = code_address(address, leaf).wrapping_sub(m.bias);
        let vdso = self.vdso_image.clone();
        let file = self.file(m);
        let (loaders, cell, whole_file) = (&file.loaders, &file.symbols, &file.whole_file);
        let debug = file.debug_path.as_deref();
        let symbols = || symbols_of(cell, whole_file, vdso.as_deref(), debug);
        let before = file.frames.len();
        let frames = file
            .frames
            .entry((probe, leaf))
            .or_insert_with(|| {
                // A return address whose call byte no function holds: a signal trampoline
                // (glibc's `__restore_rt` follows a `nop` that is in no symbol, so that the byte
                // before the return address finds its unwind entry) is named at the address.
                let found = name_in_file(loaders, &symbols, probe).or_else(|| {
                    (!leaf)
                        .then(|| name_in_file(loaders, &symbols, probe.wrapping_add(1)))
                        .flatten()
                });
                found.unwrap_or_else(|| {
                    // No symbol: named by the start of its function as the unwind tables
                    // describe it (one name for all of a function's addresses), else by the
                    // address.
                    let at = symbols().function_bounds(probe).map_or(probe, |(s, _)| s);
                    vec![Frame {
                        function: format!("{}+{:#x}", basename(&m.path), at),
                        file: None,
                        line: None,
                    }]
                })
            })
            .clone();
        if file.frames.len() > before {
            self.cached += 1;
        }
        frames
    }

    /// The run-time bounds `(start, end)` of the function containing `address`, in `module`,
    /// as its unwind tables describe it.
    pub fn function_bounds(&mut self, module: &Module, address: u64) -> Option<(u64, u64)> {
        let vdso = self.vdso_image.clone();
        let file = self.file(module);
        let debug = file.debug_path.as_deref();
        let (start, end) = symbols_of(&file.symbols, &file.whole_file, vdso.as_deref(), debug)
            .function_bounds(address.wrapping_sub(module.bias))?;
        Some((
            start.wrapping_add(module.bias),
            end.wrapping_add(module.bias),
        ))
    }
}

/// Opens module `m`'s file where `sources` find it (only the build the process loaded), with
/// its debug file and that file's supplementary one, and says where its names will come from.
fn open_module(m: &Module, sources: &mut SymbolSources) -> File {
    let named = PathBuf::from(&m.path);
    let id = crate::debuginfod::parse_hex(&m.build_id).filter(|id| id.len() >= 2);
    let found = has_file(&named)
        .then(|| sources.search.module_file(&named, id.as_deref()))
        .flatten();
    let open = found
        .as_ref()
        .and_then(|p| open_regular(p, false, MAX_MODULE_FILE));
    // The file as opened; a path that is no regular file is read as none (a name without a
    // `/`).
    let path = match &open {
        Some(f) => PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())),
        None if has_file(&named) => PathBuf::from("[not a regular file]"),
        None => named.clone(),
    };
    let mapped = open.as_ref().and_then(map);
    let object = mapped.as_deref().and_then(|d| object::File::parse(d).ok());
    let hex_id = match object
        .as_ref()
        .and_then(|o| object::Object::build_id(o).ok().flatten())
    {
        Some(own) => crate::collect::hex(own),
        None => m.build_id.clone(),
    };
    // The debug file: on this machine, else from a debuginfod server.
    let mut refused = Vec::new();
    let local = match (&object, &found) {
        (Some(o), Some(at)) => sources
            .search
            .debug_file_noting(o, at, &named, &mut refused)
            .map(|d| (d.path, d.via.as_str())),
        _ => id
            .as_deref()
            .and_then(|id| sources.search.by_build_id(id))
            .map(|p| (p, "build id")),
    };
    let debug = local
        .map(|(p, via)| {
            let said = format!("debug file by {via}: {}", p.display());
            (p, said)
        })
        .or_else(|| {
            let (p, server) = sources.debuginfod.as_mut()?.debuginfo(&hex_id)?;
            let said = format!("debug file from {server}: {}", p.display());
            Some((p, said))
        });
    let mut loaders = Vec::new();
    let debug_path = debug.as_ref().map(|(p, _)| p.clone());
    let names_from = match &debug {
        Some((p, said)) => {
            let sup = supplementary(p, sources);
            let cache = sources.dwarf_cache.as_deref();
            match crate::debug_info::DebugInfo::open(p, sup.as_deref(), cache) {
                Some(l) => {
                    loaders.push(l);
                    match sup {
                        Some(s) => format!("{said} (and {})", s.display()),
                        None => said.clone(),
                    }
                }
                None => format!("{said} (its symbol table: it has no DWARF)"),
            }
        }
        None => match (&object, &found) {
            (Some(o), Some(at)) if at != &named => format!("{} of {}", own_tables(o), at.display()),
            (Some(o), _) => own_tables(o).to_owned(),
            (None, Some(at)) => format!("{} is no ELF file", at.display()),
            (None, None) if !has_file(&named) => "no file".to_owned(),
            (None, None) => missing_file(&named, id.as_deref(), &sources.search),
        },
    };
    // Said with the names' source: a file another user put beside the module.
    let names_from = refused.iter().fold(names_from, |said, r| {
        format!(
            "{said}; refused {} (owned by uid {}: not root, this user or the module's owner)",
            r.path.display(),
            r.owner
        )
    });
    if open.is_some() {
        let cache = sources.dwarf_cache.as_deref();
        loaders.extend(crate::debug_info::DebugInfo::open(&path, None, cache));
    }
    File {
        _open: open,
        loaders,
        symbols: std::cell::OnceCell::new(),
        whole_file: ModuleFile {
            path,
            start: 0,
            end: u64::MAX,
            bias: 0,
        },
        frames: HashMap::new(),
        names_from,
        debug_path,
    }
}

/// The supplementary DWARF file (dwz) of the debug file at `path`: on this machine, else from
/// a debuginfod server.
fn supplementary(path: &Path, sources: &mut SymbolSources) -> Option<PathBuf> {
    let file = std::fs::File::open(path).ok()?;
    let data = map(&file)?;
    let object = object::File::parse(&*data).ok()?;
    let (_, id) = unwind_samples::debug_files::alt_link(&object)?;
    sources.search.alt_file(&object, path).or_else(|| {
        let hex = crate::collect::hex(&id);
        sources.debuginfod.as_mut()?.debuginfo(&hex).map(|(p, _)| p)
    })
}

/// Why module file `named` was not read: not there (under the root either), or another build.
fn missing_file(named: &Path, id: Option<&[u8]>, search: &DebugSearch) -> String {
    let elsewhere = |p: &Path| {
        id.is_some()
            && unwind_samples::debug_files::build_id_of(p).is_some_and(|f| Some(&f[..]) != id)
    };
    let mut places: Vec<PathBuf> = search
        .root
        .iter()
        .map(|r| r.join(named.strip_prefix("/").unwrap_or(named)))
        .collect();
    places.push(named.to_path_buf());
    match places.iter().find(|p| elsewhere(p)) {
        Some(p) => format!(
            "not read: {} is another build than the one loaded (its build id differs)",
            p.display()
        ),
        None => format!(
            "not read: no file at {}",
            places
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    }
}

/// The symbol tables and unwind-table functions of `file`, read into `cell` on first use.
fn symbols_of<'a>(
    cell: &'a std::cell::OnceCell<unwind_samples::symbolize::Symbolizer>,
    file: &ModuleFile,
    vdso_image: Option<&[u8]>,
    debug: Option<&Path>,
) -> &'a unwind_samples::symbolize::Symbolizer {
    cell.get_or_init(|| {
        unwind_samples::symbolize::Symbolizer::with_debug_file(
            std::slice::from_ref(file),
            vdso_image,
            debug,
        )
    })
}

/// The frames of file address `probe`: from debug information, else a symbol (`symbols` gives
/// the symbol tables, read only if needed).
fn name_in_file<'a>(
    loaders: &[crate::debug_info::DebugInfo],
    symbols: &impl Fn() -> &'a unwind_samples::symbolize::Symbolizer,
    probe: u64,
) -> Option<Vec<Frame>> {
    let mut frames = Vec::new();
    for loader in loaders {
        frames.extend(
            loader
                .frames(probe)
                .into_iter()
                .map(|(function, file, line)| Frame {
                    function,
                    file,
                    line,
                }),
        );
        if let Some(outer) = frames.last_mut() {
            // The function whose code it is, by its public name where the debug information
            // gives one of its aliases (`__libc_malloc` is `malloc`).
            let table = symbols();
            if table.names_function_at(probe, &outer.function) {
                if let Some(public) = table.lookup(probe).and_then(|s| s.function) {
                    outer.function = public.to_owned();
                }
            }
            return Some(frames);
        }
    }
    // No debug information: the symbol tables (the file's own and its debug file's).
    let f = symbols().lookup(probe).and_then(|s| s.function)?;
    Some(vec![symbol_frame(f)])
}

fn symbol_frame(name: &str) -> Frame {
    Frame {
        function: addr2line::demangle_auto(name.into(), None).into_owned(),
        file: None,
        line: None,
    }
}

fn unknown(address: u64) -> Frame {
    Frame {
        function: format!("[unknown]+{address:#x}"),
        file: None,
        line: None,
    }
}

/// The address whose code a frame is in: a leaf's PC, or for a return address the byte before
/// it (inside the call instruction: the return address itself may start another function).
pub fn code_address(pc: u64, leaf: bool) -> u64 {
    if leaf {
        pc
    } else {
        pc.saturating_sub(1)
    }
}

/// The file name of a path.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A perf map names the addresses its lines cover, a later line for the same start
    /// replacing an earlier one; lines that do not read as `START SIZE NAME` are skipped.
    #[test]
    fn perf_map_lines_name_their_ranges() {
        let map = PerfMap::parse(
            "7f0000001000 40 LazyCompile:*fib /tmp/x.js:1\n\
             garbage\n\
             7f0000002000 0 empty\n\
             0x7f0000003000 10 Interpreter\n\
             7f0000001000 20 replaced\n\
             zz 10 bad start\n",
        );
        assert_eq!(map.lookup(0x7f00_0000_0fff), None);
        assert_eq!(map.lookup(0x7f00_0000_1000), Some("replaced"));
        assert_eq!(map.lookup(0x7f00_0000_101f), Some("replaced"));
        assert_eq!(map.lookup(0x7f00_0000_1020), None);
        assert_eq!(map.lookup(0x7f00_0000_2000), None);
        assert_eq!(map.lookup(0x7f00_0000_3008), Some("Interpreter"));
        assert_eq!(map.lookup(0x7f00_0000_3010), None);
    }

    /// A jitdump's code loads name their code, a move carries the name along, other records
    /// are skipped, and a truncated record ends the reading.
    #[test]
    fn jitdump_code_loads_name_their_code() {
        let mut dump = Vec::new();
        let (w32, w64) = (
            |d: &mut Vec<u8>, v: u32| d.extend_from_slice(&v.to_ne_bytes()),
            |d: &mut Vec<u8>, v: u64| d.extend_from_slice(&v.to_ne_bytes()),
        );
        // Header: magic, version, size (40), machine, padding, pid, timestamp, flags.
        for v in [0x4a69_5444, 1, 40, 62, 0, 7] {
            w32(&mut dump, v);
        }
        w64(&mut dump, 0);
        w64(&mut dump, 0);
        let load = |d: &mut Vec<u8>, addr: u64, len: u64, name: &str| {
            let size = 16 + 40 + name.len() + 1 + len as usize;
            w32(d, 0);
            w32(d, size as u32);
            w64(d, 0);
            w32(d, 7);
            w32(d, 7);
            for v in [addr, addr, len, 1] {
                w64(d, v);
            }
            d.extend_from_slice(name.as_bytes());
            d.push(0);
            d.extend(std::iter::repeat_n(0xc3, len as usize));
        };
        load(&mut dump, 0x7f00_0000_1000, 0x20, "py::fib:/tmp/x.py");
        // An unwinding-info record (id 4): skipped by its size.
        w32(&mut dump, 4);
        w32(&mut dump, 24);
        w64(&mut dump, 0);
        w64(&mut dump, 0);
        load(&mut dump, 0x7f00_0000_2000, 0x10, "moved");
        // A move of "moved" to 0x3000: pid, tid, vma, old, new, size, index.
        w32(&mut dump, 1);
        w32(&mut dump, 16 + 48);
        w64(&mut dump, 0);
        w32(&mut dump, 7);
        w32(&mut dump, 7);
        for v in [
            0x7f00_0000_2000u64,
            0x7f00_0000_2000,
            0x7f00_0000_3000,
            0x10,
            2,
        ] {
            w64(&mut dump, v);
        }
        // A truncated record.
        w32(&mut dump, 0);
        w32(&mut dump, 500);
        let mut map = PerfMap::default();
        map.add_jitdump(&dump);
        assert_eq!(map.lookup(0x7f00_0000_101f), Some("py::fib:/tmp/x.py"));
        assert_eq!(map.lookup(0x7f00_0000_1020), None);
        assert_eq!(map.lookup(0x7f00_0000_2000), None, "moved away");
        assert_eq!(map.lookup(0x7f00_0000_300f), Some("moved"));
        let mut bad = PerfMap::default();
        bad.add_jitdump(b"not a jitdump at all, not at all");
        assert_eq!(bad.entries.len(), 0);
    }

    /// A perf map written before the process started is another process's (a pid reused):
    /// left alone.
    #[test]
    fn a_perf_map_older_than_the_process_is_left_alone() {
        use std::time::{Duration, SystemTime};
        // No process has this pid (above the kernel's limit): the file is the test's alone.
        let pid = u32::MAX - 7 - std::process::id() % 1000;
        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "7f0000001000 40 stale\n").unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        file.set_modified(an_hour_ago).unwrap();
        let named = |started| {
            PerfMap::of_process(pid, &[], started)
                .and_then(|m| m.lookup(0x7f00_0000_1000).map(str::to_owned))
        };
        assert_eq!(named(None).as_deref(), Some("stale"));
        assert_eq!(named(Some(an_hour_ago)).as_deref(), Some("stale"));
        assert_eq!(named(Some(SystemTime::now())), None);
        let _ = std::fs::remove_file(&path);
    }

    /// A copy of the test binary without symbols or debug information names an address by the
    /// start of the function its unwind tables put it in: one name for the function's addresses.
    #[test]
    fn code_without_symbols_is_named_by_its_function() {
        let exe = std::env::current_exe().unwrap();
        let dir =
            std::env::temp_dir().join(format!("unwind-profiler-strip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stripped = dir.join("stripped-copy");
        let ran = std::process::Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(&exe)
            .status();
        if !ran.is_ok_and(|s| s.success()) {
            unwind_test_support::missing("strip (binutils)");
            return;
        }
        unwind_in_process::refresh().expect("the modules");
        let main = unwind_in_process::loaded_modules()
            .into_iter()
            .next()
            .expect("the test binary's module");
        let module = |path: &Path| Module {
            path: path.display().to_string(),
            start: main.start,
            end: main.end,
            bias: main.bias,
            file_offset: main.file_offset,
            build_id: String::new(),
            generated: false,
        };
        // A function that has code of its own (a pointer to it is taken).
        let f = basename as fn(&str) -> &str as usize as u64;
        let mut symbolizer = Symbolizer::new(None);
        assert_eq!(
            symbolizer.frames(0, Some(&module(&exe)), f + 2, true)[0].function,
            "unwind_profiler::symbolize::basename"
        );
        let want = format!("stripped-copy+{:#x}", f - main.bias);
        for at in [f, f + 1, f + 2] {
            assert_eq!(
                symbolizer.frames(0, Some(&module(&stripped)), at, true)[0].function,
                want
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
