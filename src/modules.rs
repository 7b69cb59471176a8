//! Discovering the modules loaded in this process (`dl_iterate_phdr`, the vdso included) and
//! reading each one's `.eh_frame` from its mapped image.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::Arc;

use unwind_core::table::ModuleRules;
use unwind_core::x86_64::Rule;
use unwind_dwarf::{CfiSections, CfiStats, DwarfError};

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
    /// Runtime address of `.eh_frame_hdr` (`PT_GNU_EH_FRAME`), if any.
    pub eh_frame_hdr: Option<u64>,
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
    pub rules: Arc<ModuleRules<Rule>>,
    pub stats: Option<CfiStats>,
    pub error: Option<String>,
    pub reused: bool,
}

/// Parsed rules kept between refreshes.
pub(crate) type ModuleCache =
    BTreeMap<ModuleKey, (Arc<ModuleRules<Rule>>, Option<CfiStats>, Option<String>)>;

struct Walk<'a> {
    cache: &'a ModuleCache,
    out: Vec<ParsedModule>,
}

const PT_LOAD: u32 = 1;
const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
const PF_X: u32 = 1;

/// Every loaded module, each with its rules: reused from `cache` when the same module (name,
/// bias, `.eh_frame_hdr`) was parsed before, otherwise read from its mapped `.eh_frame`.
///
/// Parsing happens inside the `dl_iterate_phdr` callback, under the loader's lock, so no module
/// can be unloaded while its image is read.
pub(crate) fn discover(cache: &ModuleCache) -> Vec<ParsedModule> {
    let mut walk = Walk {
        cache,
        out: Vec::new(),
    };
    // SAFETY: the callback matches the signature dl_iterate_phdr expects and only reads the
    // `dl_phdr_info` it is given; `walk` outlives the call.
    unsafe {
        libc::dl_iterate_phdr(Some(callback), &mut walk as *mut Walk as *mut libc::c_void);
    }
    walk.out
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
        if let Some(m) = unsafe { module_from_info(info, walk.cache) } {
            walk.out.push(m);
        }
    }));
    0
}

/// # Safety
/// `info` must come from `dl_iterate_phdr` and be used only during its callback.
unsafe fn module_from_info(info: &libc::dl_phdr_info, cache: &ModuleCache) -> Option<ParsedModule> {
    let bias = info.dlpi_addr;
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
        &[]
    } else {
        // SAFETY: the loader gives `dlpi_phnum` program headers at `dlpi_phdr`.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let mut start = u64::MAX;
    let mut end = 0u64;
    let mut hdr = None;
    for p in phdrs {
        if p.p_type == PT_LOAD && p.p_flags & PF_X != 0 {
            start = start.min(bias.wrapping_add(p.p_vaddr));
            end = end.max(bias.wrapping_add(p.p_vaddr).wrapping_add(p.p_memsz));
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
    let name = if name.is_empty() {
        std::env::current_exe()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "[main]".into())
    } else {
        name
    };
    let module = LoadedModule {
        name,
        bias,
        start,
        end,
        eh_frame_hdr: hdr.map(|h| bias.wrapping_add(h.p_vaddr)),
    };
    let key = ModuleKey {
        name: module.name.clone(),
        bias,
        eh_frame_hdr: module.eh_frame_hdr,
    };
    if let Some((rules, stats, error)) = cache.get(&key) {
        return Some(ParsedModule {
            module,
            rules: rules.clone(),
            stats: stats.clone(),
            error: error.clone(),
            reused: true,
        });
    }
    // PLT stubs without CFI (lld writes none) get synthesized rules; only the file on disk has
    // the section headers that locate them. The vdso has no file and no PLT.
    let plt = if module.name.starts_with('/') {
        unwind_dwarf::plt::plt_sections_of_file(std::path::Path::new(&module.name))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let code = (start.wrapping_sub(bias), end.wrapping_sub(bias));
    // SAFETY: the program headers describe this module's mapped segments.
    let parsed = unsafe { rules_from_image(bias, hdr, phdrs, &plt, code) };
    let (rules, stats, error) = match parsed {
        Ok((rules, stats)) => (Arc::new(rules), Some(stats), None),
        Err(e) => (Arc::new(ModuleRules::empty()), None, Some(e.to_string())),
    };
    Some(ParsedModule {
        module,
        rules,
        stats,
        error,
        reused: false,
    })
}

/// Reads `.eh_frame` of a mapped module: `.eh_frame_hdr` gives its address, and the readable
/// `PT_LOAD` segment that contains it bounds the slice (parsing stops at its zero terminator).
///
/// # Safety
/// `phdrs` must be the program headers of a module mapped at `bias`, mapped during the call.
unsafe fn rules_from_image(
    bias: u64,
    hdr: Option<&libc::Elf64_Phdr>,
    phdrs: &[libc::Elf64_Phdr],
    plt: &[unwind_dwarf::plt::PltSection],
    code: (u64, u64),
) -> Result<(ModuleRules<Rule>, CfiStats), DwarfError> {
    let Some(hdr) = hdr else {
        return unwind_dwarf::rules_from_sections(&CfiSections {
            plt,
            code_range: Some(code),
            ..CfiSections::default()
        });
    };
    let segment_of = |svma: u64| {
        phdrs
            .iter()
            .find(|p| p.p_type == PT_LOAD && p.p_vaddr <= svma && svma < p.p_vaddr + p.p_filesz)
    };
    let hdr_svma = hdr.p_vaddr;
    let hdr_seg = segment_of(hdr_svma).ok_or(DwarfError::NoCfi)?;
    let hdr_len = hdr
        .p_memsz
        .min(hdr_seg.p_vaddr + hdr_seg.p_filesz - hdr_svma);
    // SAFETY: `[hdr_svma, hdr_svma + hdr_len)` lies inside a mapped, readable PT_LOAD segment.
    let hdr_bytes = unsafe {
        std::slice::from_raw_parts(bias.wrapping_add(hdr_svma) as *const u8, hdr_len as usize)
    };
    let eh_svma = unwind_dwarf::eh_frame_address_from_hdr(hdr_bytes, hdr_svma)?;
    let seg = segment_of(eh_svma).ok_or(DwarfError::NoCfi)?;
    let len = seg.p_vaddr + seg.p_filesz - eh_svma;
    // SAFETY: `[eh_svma, eh_svma + len)` lies inside a mapped, readable PT_LOAD segment.
    let eh_frame = unsafe {
        std::slice::from_raw_parts(bias.wrapping_add(eh_svma) as *const u8, len as usize)
    };
    unwind_dwarf::rules_from_sections(&CfiSections {
        eh_frame: Some(eh_frame),
        eh_frame_svma: eh_svma,
        plt,
        code_range: Some(code),
        ..CfiSections::default()
    })
}

/// Keys of the parsed modules, for the next refresh's cache.
pub(crate) fn cache_of(modules: &[ParsedModule]) -> ModuleCache {
    modules
        .iter()
        .map(|m| {
            (
                ModuleKey {
                    name: m.module.name.clone(),
                    bias: m.module.bias,
                    eh_frame_hdr: m.module.eh_frame_hdr,
                },
                (m.rules.clone(), m.stats.clone(), m.error.clone()),
            )
        })
        .collect()
}
