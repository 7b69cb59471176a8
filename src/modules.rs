//! Discovering the modules loaded in this process (`dl_iterate_phdr`, the vdso included) and
//! reading each one's unwind tables from its mapped image.

// Program-header fields are u64 on 64-bit targets and u32 on 32-bit ones: the widening
// conversions are needed on one and no-ops on the other.
#![allow(clippy::useless_conversion)]

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::arch::{ImageTables, Native, Phdr, Rule, RuntimeArch, Segment};
use unwind_core::table::ModuleRules;
use unwind_core::ReturnSites;
use unwind_dwarf::{CfiSections, CfiStats, DwarfError, ExidxError, ExidxStats, LoadStats};

/// One loaded module as the dynamic loader reports it.
#[derive(Clone, Debug)]
pub struct LoadedModule {
    /// Path (or `linux-vdso.so.1`, or the executable's path for the main program).
    pub name: String,
    /// Load bias: runtime address minus file address.
    pub bias: u64,
    /// Lowest runtime address of its executable segments.
    pub start: u64,
    /// One past the highest.
    pub end: u64,
    /// The file offset of `start` (the lowest executable segment's `p_offset`): with `start`,
    /// what `/proc/PID/maps` says of the code's mapping, which profile formats record so that
    /// other tools can find the code in the file (pprof's `Mapping.file_offset`).
    pub file_offset: u64,
    /// Runtime address of `.eh_frame_hdr` (`PT_GNU_EH_FRAME`), if any.
    pub eh_frame_hdr: Option<u64>,
    /// Runtime address of the image: the load bias plus the lowest `PT_LOAD` address rounded
    /// down to 4096 (a minidump module's base, which Breakpad's `STACK CFI` addresses are
    /// relative to).
    pub image_start: u64,
    /// One past the end of the highest `PT_LOAD` segment (runtime address).
    pub image_end: u64,
    /// The ELF build id (`NT_GNU_BUILD_ID`, read from the mapped `PT_NOTE` segments), if any.
    pub build_id: Option<Vec<u8>>,
    /// How the code came to be mapped.
    pub kind: ModuleKind,
}

/// How a module's code came to be mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModuleKind {
    /// An ELF object the dynamic loader lists (the program, its libraries, `dlopen`ed ones, the
    /// vdso).
    Loaded,
    /// A second mapping of an ELF file's code that the loader does not list (node maps V8's
    /// builtins from its own file so): `bias` places the file there, its symbols name it.
    Remapped,
    /// Executable memory no file describes: code generated at run time (a JIT compiler's, an
    /// interpreter's trampolines). Its rules are those its JIT describes (a jitdump file's
    /// unwinding records; the GDB JIT interface's symbol files, [`crate::jit_functions`]);
    /// elsewhere its frames are crossed by frame pointers, and named after the run from the
    /// process's perf map (`/tmp/perf-PID.map`).
    Anonymous,
}

#[cfg(feature = "minidump")]
impl From<&LoadedModule> for unwind_samples::minidump::DumpModule {
    fn from(m: &LoadedModule) -> Self {
        unwind_samples::minidump::DumpModule {
            base: m.image_start,
            size: m.image_end.saturating_sub(m.image_start),
            name: m.name.clone(),
            build_id: m.build_id.clone().unwrap_or_default(),
        }
    }
}

impl From<&LoadedModule> for unwind_samples::offline::ModuleFile {
    fn from(m: &LoadedModule) -> Self {
        unwind_samples::offline::ModuleFile {
            path: m.name.clone().into(),
            start: m.start,
            end: m.end,
            bias: m.bias,
        }
    }
}

/// The identity of a parsed module, so that a refresh reuses what is already parsed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ModuleKey {
    name: String,
    bias: u64,
    eh_frame_hdr: Option<u64>,
}

/// A module placed in the process with its rules, or why it has none.
#[derive(Clone, Debug)]
pub(crate) struct ParsedModule {
    pub module: LoadedModule,
    pub parsed: Parsed,
    pub reused: bool,
    /// Left out of the table: its code overlaps the named module's (see [`resolve_overlaps`]).
    pub overlaps: Option<String>,
}

/// What a module's parse produced, kept between refreshes.
#[derive(Clone, Debug)]
pub(crate) struct Parsed {
    pub rules: Arc<ModuleRules<Rule>>,
    /// DWARF CFI (and PLT rows); none if the module has no rules.
    pub stats: Option<CfiStats>,
    /// 32-bit ARM: what reading `.ARM.exidx` found, if the module has it.
    pub exidx: Option<ExidxStats>,
    /// 32-bit ARM: why `.ARM.exidx` could not be read (its DWARF rows were kept).
    pub exidx_error: Option<ExidxError>,
    /// Why the module has no rules.
    pub error: Option<String>,
    /// Why rules that only the module's file on disk has (PLT sections, ARM `.debug_frame`) were
    /// not used, if they were not.
    pub file_note: Option<String>,
    /// Its return sites, found when stack scanning is on and its file on disk is the mapped
    /// image ([`crate::set_stack_scanning`]).
    pub return_sites: Option<Arc<ReturnSites>>,
}

impl Parsed {
    /// Rules read back from the rules cache.
    fn from_cache(rules: ModuleRules<Rule>) -> Self {
        Parsed {
            rules: Arc::new(rules),
            stats: None,
            exidx: None,
            exidx_error: None,
            error: None,
            file_note: Some("rules read from the rules cache (built by another process)".into()),
            return_sites: None,
        }
    }

    /// A module without rules, and why.
    fn failed(error: String, file_note: Option<String>) -> Self {
        Parsed {
            rules: Arc::new(ModuleRules::empty()),
            stats: None,
            exidx: None,
            exidx_error: None,
            error: Some(error),
            file_note,
            return_sites: None,
        }
    }
}

/// Parsed rules kept between refreshes: those of the modules loaded at the last refresh, by
/// their place, and, by what identifies a build wherever it is loaded, those of the last
/// [`MODULES_REMEMBERED`] modules with a build id, unloaded ones included, so that a library
/// loaded again (at the same place or another: rules are relative to the module) is not read
/// again. A program that loads and unloads libraries in a loop would otherwise spend most of a
/// refresh reading them back.
#[derive(Default)]
pub(crate) struct ModuleCache {
    placed: BTreeMap<ModuleKey, Parsed>,
    by_build: BTreeMap<BuildKey, (Parsed, u64)>,
    /// Bumped at each refresh: how recently each of `by_build` was loaded.
    age: u64,
}

/// How many modules with a build id [`ModuleCache`] remembers, loaded or not.
const MODULES_REMEMBERED: usize = 256;

/// A module's build wherever it is loaded: its name, build id, and the file addresses of its
/// code and `.eh_frame_hdr`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct BuildKey {
    name: String,
    build_id: Vec<u8>,
    code: (u64, u64),
    eh_frame_hdr: Option<u64>,
}

impl BuildKey {
    /// `m`'s key, if it has a build id long enough to tell builds apart.
    fn of(m: &LoadedModule) -> Option<Self> {
        let build_id = m.build_id.clone().filter(|id| id.len() >= 8)?;
        Some(BuildKey {
            name: m.name.clone(),
            build_id,
            code: code_range(m),
            eh_frame_hdr: m.eh_frame_hdr.map(|h| h.wrapping_sub(m.bias)),
        })
    }
}

impl ModuleCache {
    /// An empty cache.
    pub(crate) const fn new() -> Self {
        ModuleCache {
            placed: BTreeMap::new(),
            by_build: BTreeMap::new(),
            age: 0,
        }
    }

    /// The rules of `m`, if parsed before: at its place, or (without return sites, which are
    /// addresses of the place they were found at) the same build elsewhere.
    fn get(&self, key: &ModuleKey, m: &LoadedModule) -> Option<&Parsed> {
        self.placed.get(key).or_else(|| {
            let (p, _) = self.by_build.get(&BuildKey::of(m)?)?;
            p.return_sites.is_none().then_some(p)
        })
    }
}

/// What [`discover`] found.
pub(crate) struct Discovered {
    /// Every module with executable code, with rules: the loader's, in its order, then the
    /// executable mappings it does not list ([`crate::mappings`]).
    pub modules: Vec<ParsedModule>,
    /// How long the dynamic loader's lock was held (the `dl_iterate_phdr` walk, in which new
    /// modules' unwind sections are copied; parsing happens after it).
    pub loader_lock: Duration,
    /// Where in `modules` the executable mappings the loader does not list start.
    pub unlisted_from: usize,
    /// Whether they were read from `/proc/self/maps` now (else taken from an earlier read).
    pub maps_read: bool,
}

/// A module seen during the `dl_iterate_phdr` walk: parsed before, or new with a copy of what its
/// tables are read from.
enum Seen {
    Known(LoadedModule, Box<Parsed>),
    New(LoadedModule, Vec<Phdr>, ImageCopy),
    /// New, with rules in the rules cache at this path ([`crate::set_rules_cache`]): nothing
    /// copied (a process reads the rules of most of its modules back, and copying their unwind
    /// sections was a tenth of its start).
    Cached(LoadedModule, std::path::PathBuf),
}

struct Walk<'a> {
    cache: &'a ModuleCache,
    out: Vec<Seen>,
    /// Whether stack scanning is on (the rules cache is not used then).
    scan: bool,
    /// For a second walk: copy only the modules with these keys (whose cached rules could not
    /// be read back), and nothing else.
    only: Option<&'a [ModuleKey]>,
}

// The `p_type`, `p_flags` and note type values of the libc program headers (plain integers).
const PT_LOAD: u32 = object::elf::PT_LOAD.0;
const PT_NOTE: u32 = object::elf::PT_NOTE.0;
const PT_GNU_EH_FRAME: u32 = object::elf::PT_GNU_EH_FRAME.0;
const PF_X: u32 = object::elf::PF_X.0;
const NT_GNU_BUILD_ID: u32 = object::elf::NT_GNU_BUILD_ID.0;

/// Every loaded module, each with its rules: reused from `cache` when the same module (name,
/// bias, `.eh_frame_hdr`) was parsed before, otherwise parsed from its image; then the
/// executable mappings the loader does not list, from `/proc/self/maps`, or `unlisted` (an
/// earlier read's) if given, less those a loaded module now overlaps.
///
/// The `dl_iterate_phdr` callback runs under the dynamic loader's lock, which other threads'
/// `dlopen`, `dlclose` and C++ exception unwinding wait for. So it only describes each module
/// and copies the parts of a new module's segments that its unwind tables are read from (a
/// module may be unloaded as soon as the lock is released); the parsing, which takes 0.1 s for
/// the largest libraries, happens after the lock, on the copies.
pub(crate) fn discover(
    cache: &ModuleCache,
    scan: bool,
    unlisted: Option<&[ParsedModule]>,
) -> Discovered {
    let (out, mut loader_lock) = walk(cache, scan, None);
    // Each module at its place in the loader's order.
    let mut modules: Vec<(usize, ParsedModule)> = Vec::with_capacity(out.len());
    let mut new = Vec::new();
    // Cached rules are read after the walk, outside the loader's lock. The few that cannot
    // be (a file removed or spoiled since the walk saw it) are copied in a second walk and
    // parsed as new.
    let mut unread: Vec<(ModuleKey, usize)> = Vec::new();
    for (at, seen) in out.into_iter().enumerate() {
        let parsed = |module, parsed, reused| ParsedModule {
            module,
            parsed,
            reused,
            overlaps: None,
        };
        match seen {
            Seen::Known(module, p) => modules.push((at, parsed(module, *p, true))),
            Seen::New(module, phdrs, image) => new.push((at, module, phdrs, image)),
            Seen::Cached(module, path) => match rules_cache::read(&path) {
                Some(rules) => modules.push((at, parsed(module, Parsed::from_cache(rules), false))),
                None => unread.push((ModuleKey::of(&module), at)),
            },
        }
    }
    if !unread.is_empty() {
        let keys: Vec<ModuleKey> = unread.iter().map(|(k, _)| k.clone()).collect();
        let (again, lock) = walk(cache, scan, Some(&keys));
        loader_lock += lock;
        for seen in again {
            if let Seen::New(module, phdrs, image) = seen {
                let key = ModuleKey::of(&module);
                let at = unread
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map_or(usize::MAX, |u| u.1);
                new.push((at, module, phdrs, image));
            }
        }
    }
    for (at, module, phdrs, image) in new {
        let parsed = guarded(|| parse(&module, &phdrs, &image, scan));
        modules.push((
            at,
            ParsedModule {
                module,
                parsed,
                reused: false,
                overlaps: None,
            },
        ));
    }
    modules.sort_by_key(|(at, _)| *at);
    let mut modules: Vec<ParsedModule> = modules.into_iter().map(|(_, m)| m).collect();
    resolve_overlaps(&mut modules);
    let unlisted_from = modules.len();
    // Code the program mapped itself, read outside the loader's lock (see `crate::mappings`).
    let maps_read = match unlisted {
        Some(earlier) => {
            let still: Vec<ParsedModule> = earlier
                .iter()
                .filter(|u| {
                    !modules[..unlisted_from]
                        .iter()
                        .any(|m| u.module.start < m.module.end && m.module.start < u.module.end)
                })
                .cloned()
                .collect();
            modules.extend(still);
            false
        }
        None => {
            if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
                let stacks = crate::threads::stacks();
                let unlisted = crate::mappings::unlisted_code(&maps, &modules, &stacks);
                modules.extend(unlisted);
            }
            true
        }
    };
    Discovered {
        modules,
        loader_lock,
        unlisted_from,
        maps_read,
    }
}

/// One `dl_iterate_phdr` walk (holding the loader's lock): every module, with what [`Seen`]
/// says of it, or with `only`, copies of the modules with those keys; and how long it took.
fn walk(cache: &ModuleCache, scan: bool, only: Option<&[ModuleKey]>) -> (Vec<Seen>, Duration) {
    let mut walk = Walk {
        cache,
        out: Vec::new(),
        scan,
        only,
    };
    let started = Instant::now();
    // SAFETY: the callback matches the signature dl_iterate_phdr expects and only reads the
    // `dl_phdr_info` it is given; `walk` outlives the call.
    unsafe {
        libc::dl_iterate_phdr(Some(callback), &mut walk as *mut Walk as *mut libc::c_void);
    }
    (walk.out, started.elapsed())
}

/// Every loaded module as the loader reports it, without reading unwind tables (for minidumps
/// of the process as it is now).
#[cfg(any(feature = "minidump", test))]
pub(crate) fn loaded_now() -> Vec<LoadedModule> {
    let mut out: Vec<LoadedModule> = Vec::new();
    // SAFETY: the callback matches the signature dl_iterate_phdr expects and only reads the
    // `dl_phdr_info` it is given; `out` outlives the call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(describe_callback),
            &mut out as *mut Vec<LoadedModule> as *mut libc::c_void,
        );
    }
    out
}

#[cfg(any(feature = "minidump", test))]
unsafe extern "C" fn describe_callback(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid `info` and the `data` we gave it, a Vec.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<LoadedModule>)) };
    // A panic must not unwind into the C caller.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `info` describes a module the loader keeps mapped during the callback.
        if let Some((module, _, _)) = unsafe { describe(info) } {
            out.push(module);
        }
    }));
    0
}

unsafe extern "C" fn callback(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid `info` and the `data` we gave it, a `Walk`.
    let (info, walk) = unsafe { (&*info, &mut *(data as *mut Walk)) };
    // A panic must not unwind into the C caller.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: as above; `info` describes a module the loader keeps mapped during the callback.
        let Some((module, phdrs, hdr)) = (unsafe { describe(info) }) else {
            return;
        };
        let key = ModuleKey::of(&module);
        if let Some(only) = walk.only {
            if !only.contains(&key) {
                return;
            }
        } else if let Some(p) = walk.cache.get(&key, &module) {
            walk.out.push(Seen::Known(module, Box::new(p.clone())));
            return;
        } else if let Some(path) = (!walk.scan)
            .then(|| rules_cache::path(&module, code_range(&module)))
            .flatten()
            .filter(|p| p.is_file())
        {
            walk.out.push(Seen::Cached(module, path));
            return;
        }
        // SAFETY: the loader keeps the module mapped during the callback.
        let mapped = unsafe { Mapped::new(module.bias, phdrs) };
        let image = copy_image(&mapped, hdr);
        walk.out.push(Seen::New(module, phdrs.to_vec(), image));
    }));
    0
}

impl ModuleKey {
    fn of(m: &LoadedModule) -> Self {
        ModuleKey {
            name: m.name.clone(),
            bias: m.bias,
            eh_frame_hdr: m.eh_frame_hdr,
        }
    }
}

/// The module `info` describes, its program headers and its `PT_GNU_EH_FRAME` header; `None`
/// for a module without executable segments.
///
/// # Safety
/// `info` must come from `dl_iterate_phdr` and be used only during its callback.
unsafe fn describe(info: &libc::dl_phdr_info) -> Option<(LoadedModule, &[Phdr], Option<&Phdr>)> {
    let bias = u64::from(info.dlpi_addr);
    let phdrs: &[Phdr] = if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
        &[]
    } else {
        // SAFETY: the loader gives `dlpi_phnum` program headers at `dlpi_phdr`.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let mut start = u64::MAX;
    let mut end = 0u64;
    let mut file_offset = 0u64;
    let mut image_lo = u64::MAX;
    let mut image_hi = 0u64;
    let mut hdr = None;
    for p in phdrs {
        if p.p_type == PT_LOAD {
            let vaddr = u64::from(p.p_vaddr);
            image_lo = image_lo.min(vaddr & !0xfff);
            image_hi = image_hi.max(vaddr.saturating_add(u64::from(p.p_memsz)));
        }
        if p.p_type == PT_LOAD && p.p_flags & PF_X != 0 {
            let vaddr = bias.wrapping_add(u64::from(p.p_vaddr));
            if vaddr < start {
                start = vaddr;
                file_offset = u64::from(p.p_offset);
            }
            end = end.max(vaddr.wrapping_add(u64::from(p.p_memsz)));
        }
        if p.p_type == PT_GNU_EH_FRAME {
            hdr = Some(p);
        }
    }
    if start >= end {
        return None;
    }
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: getauxval has no preconditions.
    let (main_phdr, vdso_base) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR),
            libc::getauxval(libc::AT_SYSINFO_EHDR),
        )
    };
    // glibc names the main program "" and the vdso "linux-vdso.so.1"; musl names the main
    // program by its argv[0] (relative, or a bare name found in PATH) and the vdso "".
    let main = main_phdr != 0 && info.dlpi_phdr as usize == main_phdr as usize;
    // `c_ulong` is 32 bits wide on 32-bit machines.
    #[allow(clippy::useless_conversion)]
    let vdso_base = u64::from(vdso_base);
    let name = if name.is_empty() && !main && vdso_base != 0 && bias == vdso_base {
        "linux-vdso.so.1".to_owned()
    } else if name.is_empty() || main {
        // The process's image is its executable's until it `exec`s (which starts it afresh):
        // read once, not at every refresh.
        static EXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        EXE.get_or_init(|| {
            std::env::current_exe()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "[main]".into())
        })
        .clone()
    } else {
        name
    };
    // SAFETY: the loader keeps the module mapped during the callback (this function's contract).
    let mapped = unsafe { Mapped::new(bias, phdrs) };
    let module = LoadedModule {
        name,
        bias,
        start,
        end,
        file_offset,
        eh_frame_hdr: hdr.map(|h| bias.wrapping_add(u64::from(h.p_vaddr))),
        image_start: bias.wrapping_add(image_lo),
        image_end: bias.wrapping_add(image_hi),
        build_id: build_id_of(&mapped),
        kind: ModuleKind::Loaded,
    };
    Some((module, phdrs, hdr))
}

/// Bytes of a module's image by file address: the mapped module itself, or copies of parts of it.
pub(crate) trait Image {
    /// The bytes from file address `svma` to the end of the file-backed part of the `PT_LOAD`
    /// segment that contains it, with that segment's file-address range.
    fn from(&self, svma: u64) -> Option<(&[u8], (u64, u64))>;
}

/// A module mapped in this process.
struct Mapped<'a> {
    bias: u64,
    phdrs: &'a [Phdr],
}

impl<'a> Mapped<'a> {
    /// # Safety
    /// `phdrs` are the program headers of a module mapped at `bias`, which stays mapped while
    /// the value is used (as the loader keeps it during a `dl_iterate_phdr` callback).
    unsafe fn new(bias: u64, phdrs: &'a [Phdr]) -> Self {
        Mapped { bias, phdrs }
    }
}

impl Image for Mapped<'_> {
    fn from(&self, svma: u64) -> Option<(&[u8], (u64, u64))> {
        let seg = self
            .phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .map(file_range)
            .find(|&(lo, hi)| lo <= svma && svma < hi)?;
        let len = usize::try_from(seg.1 - svma).ok()?;
        // SAFETY: `[svma, seg.1)` lies inside a PT_LOAD segment of the module, which stays
        // mapped and readable while `self` is used (the contract of `Mapped::new`).
        let bytes = unsafe {
            std::slice::from_raw_parts(self.bias.wrapping_add(svma) as usize as *const u8, len)
        };
        Some((bytes, seg))
    }
}

/// Copies of the parts of a module's segments that its unwind tables are read from: in each
/// segment that holds one of them, from the lowest such address to the segment's end.
#[derive(Default)]
pub(crate) struct ImageCopy {
    /// `(segment range, first copied address, bytes)`.
    regions: Vec<((u64, u64), u64, Vec<u8>)>,
}

impl Image for ImageCopy {
    fn from(&self, svma: u64) -> Option<(&[u8], (u64, u64))> {
        let (seg, at, bytes) = self
            .regions
            .iter()
            .find(|(_, at, b)| *at <= svma && svma - *at < b.len() as u64)?;
        let skip = usize::try_from(svma - at).ok()?;
        Some((bytes.get(skip..)?, *seg))
    }
}

/// Copies what [`RuntimeArch::rules_from_image`] reads of the mapped module: `.eh_frame_hdr`
/// and `.eh_frame` to the end of their segments and, on ARM, the whole segment holding
/// `.ARM.exidx` (its `.ARM.extab` entries lie in it).
fn copy_image(mapped: &Mapped<'_>, hdr: Option<&Phdr>) -> ImageCopy {
    let mut wanted: Vec<u64> = Vec::new();
    if let Some(h) = hdr {
        wanted.push(u64::from(h.p_vaddr));
        if let Ok((_, eh_svma)) = eh_frame_of(mapped, h) {
            wanted.push(eh_svma);
        }
    }
    for x in mapped
        .phdrs
        .iter()
        .filter(|p| Native::UNWIND_SEGMENTS.contains(&p.p_type))
    {
        if let Some((_, (seg_lo, _))) = mapped.from(u64::from(x.p_vaddr)) {
            wanted.push(seg_lo);
        }
    }
    let mut copy = ImageCopy::default();
    for seg in mapped
        .phdrs
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .map(file_range)
    {
        let Some(at) = wanted
            .iter()
            .copied()
            .filter(|&w| seg.0 <= w && w < seg.1)
            .min()
        else {
            continue;
        };
        if let Some((bytes, _)) = mapped.from(at) {
            copy.regions.push((seg, at, bytes.to_vec()));
        }
    }
    copy
}

/// The build id in the module's `PT_NOTE` segments.
fn build_id_of(image: &Mapped<'_>) -> Option<Vec<u8>> {
    image
        .phdrs
        .iter()
        .filter(|p| p.p_type == PT_NOTE)
        .find_map(|p| {
            let (bytes, _) = image.from(u64::from(p.p_vaddr))?;
            let len = usize::try_from(u64::from(p.p_memsz)).unwrap_or(usize::MAX);
            let notes = bytes.get(..len.min(bytes.len()))?;
            gnu_build_id(notes, u64::from(p.p_align)).map(<[u8]>::to_vec)
        })
}

/// The descriptor of the `NT_GNU_BUILD_ID` note named `GNU` in a note segment whose entries are
/// padded to `align` (4, or 8 for segments aligned to 8).
pub(crate) fn gnu_build_id(mut notes: &[u8], align: u64) -> Option<&[u8]> {
    let align = if align == 8 { 8 } else { 4 };
    let word = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    while notes.len() >= 12 {
        let namesz = usize::try_from(word(notes, 0)?).ok()?;
        let descsz = usize::try_from(word(notes, 4)?).ok()?;
        let kind = word(notes, 8)?;
        let name_end = 12usize.checked_add(namesz)?;
        let desc_start = name_end.checked_next_multiple_of(align)?;
        let desc_end = desc_start.checked_add(descsz)?;
        let name = notes.get(12..name_end)?;
        let desc = notes.get(desc_start..desc_end)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(desc);
        }
        notes = notes.get(desc_end.checked_next_multiple_of(align)?..)?;
    }
    None
}

/// Runs a module's parse, turning a panic (which the parsers are built never to raise) into an
/// error of that module, instead of losing the module silently or unwinding further.
fn guarded(parse: impl FnOnce() -> Parsed) -> Parsed {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).unwrap_or_else(|panic| {
        Parsed::failed(
            format!("parsing panicked: {}", panic_message(&*panic)),
            None,
        )
    })
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// A build id as lowercase hex (a refresh names every cached module's file by it: no
/// formatting machinery per byte).
fn hex(id: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(id.len() * 2);
    for &b in id {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The module's file on disk, if it is the mapped image: both have the same build id. A file
/// replaced on disk since the module was loaded (an upgrade while the program runs) would give
/// another build's rules; then, or when that cannot be checked, the reason.
pub(crate) fn matching_file(
    module: &LoadedModule,
) -> Result<(std::fs::File, memmap2::Mmap), String> {
    if !module.name.starts_with('/') {
        return Err("no file (the vdso)".into());
    }
    let Some(mapped_id) = &module.build_id else {
        return Err("the mapped image has no build id to check its file against".into());
    };
    let file = std::fs::File::open(&module.name).map_err(|e| format!("cannot open: {e}"))?;
    // SAFETY: a read-only private mapping, used only while the module is parsed (see
    // unwind_dwarf::load_elf_file on files changed concurrently).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("cannot map: {e}"))?;
    let file_id = object::File::parse(&*map).ok().and_then(|f| {
        object::Object::build_id(&f)
            .ok()
            .flatten()
            .map(<[u8]>::to_vec)
    });
    match file_id {
        Some(id) if id == *mapped_id => Ok((file, map)),
        Some(id) => Err(format!(
            "the file on disk is another build (build id {} on disk, {} mapped)",
            hex(&id),
            hex(mapped_id)
        )),
        None => Err(format!(
            "the file on disk has no build id (mapped: {})",
            hex(mapped_id)
        )),
    }
}

/// Parses a new module from the copy of its image (and, where they match, its file on disk).
/// The file addresses of `module`'s code.
fn code_range(module: &LoadedModule) -> (u64, u64) {
    (
        module.start.wrapping_sub(module.bias),
        module.end.wrapping_sub(module.bias),
    )
}

fn parse(module: &LoadedModule, phdrs: &[Phdr], image: &ImageCopy, scan: bool) -> Parsed {
    let hdr = phdrs.iter().find(|p| p.p_type == PT_GNU_EH_FRAME);
    let code = code_range(module);
    // Where the rules go for other processes (see `crate::set_rules_cache`; reading them back
    // is `discover`'s); with stack scanning on, the module's file is read for its return sites
    // anyway, and nothing is kept.
    let cached = if scan {
        None
    } else {
        rules_cache::path(module, code)
    };
    let file = matching_file(module);
    let map = file.as_ref().ok().map(|(_, m)| &m[..]);
    let elf = map.and_then(|m| object::File::parse(m).ok());
    // PLT stubs without CFI (lld writes none) get synthesized rules; only the file on disk has
    // the section headers that locate them.
    let plt = elf
        .as_ref()
        .map(unwind_dwarf::plt::plt_sections)
        .unwrap_or_default();
    // Read from the file, not the image: copying a module's code under the loader's lock would
    // hold it for as long as the copy takes.
    let return_sites = elf
        .as_ref()
        .filter(|_| scan)
        .and_then(|elf| {
            unwind_dwarf::return_sites::<Native>(&unwind_dwarf::CallSiteSources::of_elf(elf)).ok()
        })
        .map(Arc::new);
    let file_note = file.as_ref().err().cloned();
    // The code itself, where libgcc's unwinder is recognised (`unwind_dwarf::eh_return`): from
    // the file too.
    let file_code = elf
        .as_ref()
        .map(unwind_dwarf::return_sites::executable_segments)
        .unwrap_or_default();
    let go = elf
        .as_ref()
        .map(|elf| unwind_dwarf::go::read::<Native>(elf, &file_code))
        .filter(|go| !go.is_empty());
    let mut unreadable = Vec::new();
    let debug_frame = elf
        .as_ref()
        .and_then(|elf| unwind_dwarf::debug_frame(elf, &mut unreadable));
    let tables = image_tables(
        image,
        hdr,
        phdrs,
        (&plt, &file_code, debug_frame.as_deref(), go.as_ref()),
        code,
    );
    match Native::rules_from_image(tables, map).map(|(rules, mut stats)| {
        stats.cfi.unreadable_sections.append(&mut unreadable);
        Read::new(vdso_trampoline(module, rules), stats)
    }) {
        Ok(read) => Parsed {
            rules: {
                if let Some(path) = &cached {
                    rules_cache::write(path, &read.rules);
                }
                Arc::new(read.rules)
            },
            stats: Some(read.cfi),
            exidx: read.exidx,
            exidx_error: read.exidx_error,
            error: None,
            file_note,
            return_sites,
        },
        Err(e) => Parsed {
            return_sites,
            ..Parsed::failed(e.to_string(), file_note)
        },
    }
}

/// `rules` of `module`, with the rows of the architecture's signal return trampoline
/// ([`unwind_dwarf::sigreturn::SignalTrampoline`]) where the module is the vdso and holds
/// it (aarch64's `__kernel_rt_sigreturn`): they replace the vdso's own CFI there.
fn vdso_trampoline(module: &LoadedModule, rules: ModuleRules<Rule>) -> ModuleRules<Rule> {
    let forms = <Native as unwind_dwarf::DwarfArch>::SIGNAL_TRAMPOLINES;
    if forms.is_empty() {
        return rules;
    }
    if module.name.starts_with('/') {
        return rules;
    }
    let Some(image) = crate::vdso_image() else {
        return rules;
    };
    let Ok(elf) = object::File::parse(&*image) else {
        return rules;
    };
    unwind_dwarf::sigreturn::SignalTrampoline::replacing_in_elf(forms, rules, &elf)
}

/// Leaves out of the table every module whose code overlaps one before it (by start address),
/// naming both: the table needs disjoint ranges, and one bad module must not cost the others.
pub(crate) fn resolve_overlaps(modules: &mut [ParsedModule]) {
    let mut order: Vec<usize> = (0..modules.len()).collect();
    order.sort_by_key(|&i| (modules[i].module.start, modules[i].module.end));
    let mut last: Option<usize> = None;
    for i in order {
        if let Some(k) = last {
            let (prev, this) = (&modules[k].module, &modules[i].module);
            if this.start < prev.end {
                let why = format!(
                    "its code [{:#x}, {:#x}) overlaps that of {} [{:#x}, {:#x})",
                    this.start, this.end, prev.name, prev.start, prev.end
                );
                modules[i].overlaps = Some(why);
                continue;
            }
        }
        last = Some(i);
    }
}

/// A mapped segment's file-address range `[vaddr, vaddr + filesz)`.
fn file_range(p: &Phdr) -> (u64, u64) {
    let vaddr = u64::from(p.p_vaddr);
    (vaddr, vaddr.saturating_add(u64::from(p.p_filesz)))
}

/// `.eh_frame` of a module: `.eh_frame_hdr` gives its address, and the `PT_LOAD` segment that
/// contains it bounds the slice (parsing stops at its zero terminator).
fn eh_frame_of<'a>(image: &'a impl Image, hdr: &Phdr) -> Result<(&'a [u8], u64), DwarfError> {
    let hdr_svma = u64::from(hdr.p_vaddr);
    let (hdr_bytes, _) = image.from(hdr_svma).ok_or(DwarfError::NoCfi)?;
    let hdr_len = usize::try_from(u64::from(hdr.p_memsz)).unwrap_or(usize::MAX);
    let hdr_bytes = hdr_bytes
        .get(..hdr_len.min(hdr_bytes.len()))
        .unwrap_or(hdr_bytes);
    let address_size = std::mem::size_of::<usize>() as u8;
    let eh_svma = unwind_dwarf::eh_frame_address_from_hdr(hdr_bytes, hdr_svma, address_size)?;
    let (eh_frame, _) = image.from(eh_svma).ok_or(DwarfError::NoCfi)?;
    Ok((eh_frame, eh_svma))
}

/// What the architecture reads of a module's image copy: the DWARF CFI ([`cfi_sections`]) and
/// the segments of its own tables' types ([`RuntimeArch::UNWIND_SEGMENTS`]).
fn image_tables<'a>(
    image: &'a ImageCopy,
    hdr: Option<&Phdr>,
    phdrs: &[Phdr],
    file: FileSections<'a>,
    code: (u64, u64),
) -> ImageTables<'a> {
    let segments = phdrs
        .iter()
        .filter(|p| Native::UNWIND_SEGMENTS.contains(&p.p_type))
        .map(|p| {
            let svma = u64::from(p.p_vaddr);
            let found = image.from(svma);
            let bytes = found.map(|(bytes, _)| {
                let len = usize::try_from(u64::from(p.p_memsz)).unwrap_or(usize::MAX);
                bytes.get(..len).unwrap_or(bytes)
            });
            let loadable = found
                .and_then(|(_, (seg_lo, _))| image.from(seg_lo).map(|(whole, _)| (seg_lo, whole)));
            Segment {
                p_type: p.p_type,
                svma,
                bytes,
                loadable,
            }
        })
        .collect();
    ImageTables {
        cfi: cfi_sections(image, hdr, file, code),
        segments,
        code,
    }
}

/// What only a module's file has, for its CFI: its PLT sections, its code (where libgcc's
/// unwinder is recognised), its `.debug_frame` and Go's stack switches.
type FileSections<'a> = (
    &'a [unwind_dwarf::plt::PltSection],
    &'a unwind_dwarf::eh_return::Code<'a>,
    Option<&'a [u8]>,
    Option<&'a unwind_dwarf::go::GoTables>,
);

/// The DWARF CFI of a module's image: its `.eh_frame` (if it has `.eh_frame_hdr`) and code
/// range, with what its file adds.
fn cfi_sections<'a>(
    image: &'a ImageCopy,
    hdr: Option<&Phdr>,
    (plt, file_code, debug_frame, go): FileSections<'a>,
    code: (u64, u64),
) -> Result<CfiSections<'a>, DwarfError> {
    let mut sections = CfiSections {
        plt,
        code_range: Some(code),
        code: file_code,
        debug_frame,
        go,
        ..CfiSections::default()
    };
    if let Some(hdr) = hdr {
        let (eh_frame, eh_svma) = eh_frame_of(image, hdr)?;
        sections.eh_frame = Some(eh_frame);
        sections.eh_frame_svma = eh_svma;
    }
    Ok(sections)
}

/// What [`RuntimeArch::rules_from_image`] read.
pub(crate) struct Read {
    rules: ModuleRules<Rule>,
    cfi: CfiStats,
    exidx: Option<ExidxStats>,
    exidx_error: Option<ExidxError>,
}

impl Read {
    /// The rules with what the loader found.
    pub(crate) fn new(rules: ModuleRules<Rule>, stats: LoadStats<Native>) -> Self {
        let (exidx, exidx_error) = Native::report_extra(&stats.arch);
        Read {
            rules,
            cfi: stats.cfi,
            exidx,
            exidx_error,
        }
    }
}

/// The cache after a refresh that found `modules`, keeping what `old` remembered of builds
/// (see [`ModuleCache`]).
pub(crate) fn cache_of(modules: &[ParsedModule], old: &mut ModuleCache) -> ModuleCache {
    let loaded = modules
        .iter()
        .filter(|m| m.module.kind == ModuleKind::Loaded);
    let age = old.age + 1;
    let mut by_build = std::mem::take(&mut old.by_build);
    for m in loaded.clone().filter(|m| m.parsed.error.is_none()) {
        if let Some(key) = BuildKey::of(&m.module) {
            by_build.insert(key, (m.parsed.clone(), age));
        }
    }
    if by_build.len() > MODULES_REMEMBERED {
        // The least recently loaded go first.
        let mut ages: Vec<u64> = by_build.values().map(|(_, a)| *a).collect();
        ages.sort_unstable();
        let keep_from = ages[ages.len() - MODULES_REMEMBERED];
        by_build.retain(|_, (_, a)| *a >= keep_from);
    }
    ModuleCache {
        placed: loaded
            .map(|m| (ModuleKey::of(&m.module), m.parsed.clone()))
            .collect(),
        by_build,
        age,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed_module(name: &str, start: u64, end: u64) -> ParsedModule {
        ParsedModule {
            module: LoadedModule {
                name: name.into(),
                bias: 0,
                start,
                end,
                file_offset: 0,
                eh_frame_hdr: None,
                image_start: start,
                image_end: end,
                build_id: None,
                kind: ModuleKind::Loaded,
            },
            parsed: Parsed {
                error: None,
                ..Parsed::failed(String::new(), None)
            },
            reused: false,
            overlaps: None,
        }
    }

    #[test]
    fn overlapping_modules_are_left_out_naming_both_and_the_rest_kept() {
        let mut m = vec![
            parsed_module("/c.so", 0x5000, 0x6000),
            parsed_module("/a.so", 0x1000, 0x3000),
            parsed_module("/b.so", 0x2000, 0x4000),
            parsed_module("/d.so", 0x3000, 0x5000),
        ];
        resolve_overlaps(&mut m);
        let out: Vec<(&str, Option<&str>)> = m
            .iter()
            .map(|p| (p.module.name.as_str(), p.overlaps.as_deref()))
            .collect();
        assert_eq!(out[0], ("/c.so", None));
        assert_eq!(out[1], ("/a.so", None));
        assert_eq!(
            out[2].1,
            Some("its code [0x2000, 0x4000) overlaps that of /a.so [0x1000, 0x3000)")
        );
        // Adjacent is not overlapping; /d.so is compared with /a.so, the last one kept.
        assert_eq!(out[3], ("/d.so", None));
        // What refresh builds from the rest is a valid table.
        let mut b = unwind_core::RuleTableBuilder::<Rule>::new(std::num::NonZeroU32::MIN);
        for p in m.iter().filter(|p| p.overlaps.is_none()) {
            b.add(
                p.module.start,
                p.module.end,
                0,
                p.module.name.clone(),
                p.parsed.rules.clone(),
            );
        }
        assert!(b.build().is_ok());
        // And the report names both.
        let report = crate::PreloadReport::new(1, &m, Duration::ZERO, Duration::ZERO);
        let text = report.to_string();
        assert!(
            text.contains("/b.so: 0 rows")
                && text.contains("LEFT OUT: its code [0x2000, 0x4000) overlaps that of /a.so"),
            "{text}"
        );
    }

    /// On 32-bit ARM the report carries what reading `.ARM.exidx` found: this test program's
    /// own index (Rust emits one for every function).
    #[cfg(target_arch = "arm")]
    #[test]
    fn arm_modules_report_their_exidx() {
        let found = discover(&ModuleCache::new(), false, None);
        let exe = std::env::current_exe().expect("current_exe");
        let exe = exe.to_str().expect("utf-8");
        let me = found
            .modules
            .iter()
            .find(|m| m.module.name == exe)
            .expect("this program among the modules");
        let x = me.parsed.exidx.as_ref().expect("its .ARM.exidx was read");
        assert!(x.entries > 100 && x.rows > 100, "{x:?}");
        assert_eq!(me.parsed.exidx_error, None);
        let report = crate::PreloadReport::new(1, &found.modules, Duration::ZERO, Duration::ZERO);
        let text = report.to_string();
        assert!(
            text.contains(&format!("{exe}: ")) && text.contains(".ARM.exidx: "),
            "{text}"
        );
    }

    #[test]
    fn a_panicking_parse_becomes_the_modules_error() {
        let p = guarded(|| panic!("crafted input at offset 0x40"));
        assert_eq!(
            p.error.as_deref(),
            Some("parsing panicked: crafted input at offset 0x40")
        );
        assert_eq!(p.rules.rows(), 0);
        let p = guarded(|| std::panic::panic_any(7u8));
        assert_eq!(p.error.as_deref(), Some("parsing panicked: (no message)"));
    }

    fn note(name: &[u8], kind: u32, desc: &[u8], align: usize) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        v.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(name);
        v.resize(v.len().next_multiple_of(align), 0);
        v.extend_from_slice(desc);
        v.resize(v.len().next_multiple_of(align), 0);
        v
    }

    #[test]
    fn finds_the_gnu_build_id_after_other_notes() {
        let mut notes = note(b"GNU\0", 5, &[1; 12], 4);
        notes.extend(note(b"Go\0", 3, &[2; 5], 4));
        notes.extend(note(b"GNU\0", 3, &[0xab, 0xcd, 0xef], 4));
        assert_eq!(gnu_build_id(&notes, 4), Some(&[0xab, 0xcd, 0xef][..]));
        let notes8 = note(b"GNU\0", 3, &[7; 20], 8);
        assert_eq!(gnu_build_id(&notes8, 8), Some(&[7; 20][..]));
    }

    #[test]
    fn truncated_or_absent_notes_give_none() {
        let notes = note(b"GNU\0", 3, &[9; 20], 4);
        assert_eq!(gnu_build_id(&notes[..30], 4), None);
        assert_eq!(gnu_build_id(&[], 4), None);
        assert_eq!(gnu_build_id(&note(b"GNU\0", 1, &[1; 4], 4), 4), None);
        let mut huge = notes.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(gnu_build_id(&huge, 4), None);
    }

    #[test]
    fn loaded_modules_have_images_and_build_ids() {
        let modules = super::loaded_now();
        let main = modules.first().expect("the main program");
        assert!(main.image_start <= main.start && main.end <= main.image_end);
        assert_eq!(main.image_start % 4096, 0);
        let libc = modules
            .iter()
            .find(|m| m.name.contains("libc.so"))
            .expect("libc");
        assert!(libc.build_id.as_ref().is_some_and(|id| id.len() >= 16));
    }

    /// Each module's code starts where its file's lowest executable segment is loaded, and
    /// `file_offset` is that segment's offset in the file (as `/proc/PID/maps` relates them).
    #[test]
    fn a_modules_file_offset_is_its_codes_place_in_the_file() {
        use object::read::elf::{FileHeader, ProgramHeader};
        #[cfg(target_pointer_width = "64")]
        type Header = object::elf::FileHeader64<object::Endianness>;
        #[cfg(target_pointer_width = "32")]
        type Header = object::elf::FileHeader32<object::Endianness>;
        let mut checked = 0;
        for m in super::loaded_now() {
            if !m.name.starts_with('/') {
                continue; // the vdso
            }
            let data = std::fs::read(&m.name).expect("a loaded module's file");
            let header = Header::parse(&*data).expect("an ELF file");
            let endian = header.endian().unwrap();
            let code = header
                .program_headers(endian, &*data)
                .unwrap()
                .iter()
                .filter(|p| {
                    p.p_type(endian) == object::elf::PT_LOAD && p.p_flags(endian).0 & PF_X != 0
                })
                .min_by_key(|p| -> u64 { p.p_vaddr(endian).into() })
                .expect("an executable segment");
            let vaddr: u64 = code.p_vaddr(endian).into();
            assert_eq!(m.start, m.bias.wrapping_add(vaddr), "{}", m.name);
            assert_eq!(m.file_offset, code.p_offset(endian).into(), "{}", m.name);
            checked += 1;
        }
        assert!(checked >= 2, "the program and libc at least");
    }
}

/// The rules of modules shared by the processes of a run, as files of a directory: the first
/// process that builds a module's rules writes them ([`ModuleRules::to_bytes`]), the others read
/// them back ([`ModuleRules::from_bytes`], which checks everything) instead of parsing the
/// module's unwind sections again.
pub(crate) mod rules_cache {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    /// The directory, when set.
    pub(crate) static DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

    /// Where the rules of `module` (covering file addresses `code`) are kept: named by its build
    /// id, the code range and the architecture, so that only the same build's rules are read.
    /// `None` without a directory or a build id.
    pub(crate) fn path(module: &LoadedModule, code: (u64, u64)) -> Option<PathBuf> {
        let dir = DIR.lock().ok()?.clone()?;
        let id = module.build_id.as_deref().filter(|id| id.len() >= 8)?;
        let hex = hex(id);
        let arch = std::str::from_utf8(&<Rule as unwind_core::table::RuleBytes>::ARCH)
            .unwrap_or("arch")
            .trim_end_matches('\0')
            .to_owned();
        Some(dir.join(format!("{hex}-{:x}-{:x}-{arch}.rules", code.0, code.1)))
    }

    /// The rules kept at `path`, if they are there and read back whole.
    pub(crate) fn read(path: &Path) -> Option<ModuleRules<Rule>> {
        let file = std::fs::File::open(path).ok()?;
        // Mapped rather than read: the pages come from the page cache, where the process that
        // wrote them left them, without a copy into pages of this process's own.
        // SAFETY: a read-only private mapping, dropped before returning. The cache's files are
        // never changed in place (written aside, then renamed over: see `write`), so the
        // mapping cannot shrink under the reader; a file changed all the same is bytes like
        // any other to `from_bytes`, which checks them.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.ok()?;
        ModuleRules::from_bytes(&map).ok()
    }

    /// Keeps `rules` at `path` (written aside, then renamed: a reader sees all or nothing).
    /// Failing to is harmless: the next process builds them again.
    pub(crate) fn write(path: &Path, rules: &ModuleRules<Rule>) {
        let aside = path.with_extension(format!("{}.part", std::process::id()));
        if std::fs::write(&aside, rules.to_bytes()).is_ok()
            && std::fs::rename(&aside, path).is_err()
        {
            let _ = std::fs::remove_file(&aside);
        }
    }
}
