//! Discovering the modules loaded in this process (`dl_iterate_phdr`, the vdso included) and
//! reading each one's unwind tables from its mapped image.

// Program-header fields are u64 on 64-bit targets and u32 on 32-bit ones: the widening
// conversions are needed on one and no-ops on the other.
#![allow(clippy::useless_conversion)]

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::Arc;

use crate::arch::{Phdr, Rule};
use unwind_core::table::ModuleRules;
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
    let bias = u64::from(info.dlpi_addr);
    let phdrs: &[Phdr] = if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
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
            let vaddr = bias.wrapping_add(u64::from(p.p_vaddr));
            start = start.min(vaddr);
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
        eh_frame_hdr: hdr.map(|h| bias.wrapping_add(u64::from(h.p_vaddr))),
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
    let parsed = unsafe { rules_from_image(&module.name, bias, hdr, phdrs, &plt, code) };
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

/// A mapped segment's file-address range `[vaddr, vaddr + filesz)`.
fn file_range(p: &Phdr) -> (u64, u64) {
    let vaddr = u64::from(p.p_vaddr);
    (vaddr, vaddr.saturating_add(u64::from(p.p_filesz)))
}

/// The bytes of a mapped module from file address `svma` to the end of the readable `PT_LOAD`
/// segment that contains it, with that segment's range.
///
/// # Safety
/// `phdrs` must be the program headers of a module mapped at `bias`, mapped during the call.
unsafe fn mapped_from<'a>(bias: u64, phdrs: &[Phdr], svma: u64) -> Option<(&'a [u8], (u64, u64))> {
    let seg = phdrs
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .map(file_range)
        .find(|&(lo, hi)| lo <= svma && svma < hi)?;
    let len = usize::try_from(seg.1 - svma).ok()?;
    // SAFETY: `[svma, seg.1)` lies inside a PT_LOAD segment the loader keeps mapped and
    // readable during the caller's dl_iterate_phdr callback.
    let bytes =
        unsafe { std::slice::from_raw_parts(bias.wrapping_add(svma) as usize as *const u8, len) };
    Some((bytes, seg))
}

/// `.eh_frame` of a mapped module: `.eh_frame_hdr` gives its address, and the readable
/// `PT_LOAD` segment that contains it bounds the slice (parsing stops at its zero terminator).
///
/// # Safety
/// As for [`mapped_from`].
unsafe fn eh_frame_of<'a>(
    bias: u64,
    hdr: &Phdr,
    phdrs: &[Phdr],
) -> Result<(&'a [u8], u64), DwarfError> {
    let hdr_svma = u64::from(hdr.p_vaddr);
    // SAFETY: forwarded.
    let (hdr_bytes, _) = unsafe { mapped_from(bias, phdrs, hdr_svma) }.ok_or(DwarfError::NoCfi)?;
    let hdr_len = usize::try_from(u64::from(hdr.p_memsz)).unwrap_or(usize::MAX);
    let hdr_bytes = hdr_bytes
        .get(..hdr_len.min(hdr_bytes.len()))
        .unwrap_or(hdr_bytes);
    let address_size = std::mem::size_of::<usize>() as u8;
    let eh_svma = unwind_dwarf::eh_frame_address_from_hdr(hdr_bytes, hdr_svma, address_size)?;
    // SAFETY: forwarded.
    let (eh_frame, _) = unsafe { mapped_from(bias, phdrs, eh_svma) }.ok_or(DwarfError::NoCfi)?;
    Ok((eh_frame, eh_svma))
}

/// The DWARF CFI of a mapped module: its `.eh_frame` (if it has `.eh_frame_hdr`), PLT sections
/// and code range.
///
/// # Safety
/// As for [`mapped_from`].
unsafe fn cfi_sections<'a>(
    bias: u64,
    hdr: Option<&Phdr>,
    phdrs: &[Phdr],
    plt: &'a [unwind_dwarf::plt::PltSection],
    code: (u64, u64),
) -> Result<CfiSections<'a>, DwarfError> {
    let mut sections = CfiSections {
        plt,
        code_range: Some(code),
        ..CfiSections::default()
    };
    if let Some(hdr) = hdr {
        // SAFETY: forwarded from the caller.
        let (eh_frame, eh_svma) = unsafe { eh_frame_of(bias, hdr, phdrs) }?;
        sections.eh_frame = Some(eh_frame);
        sections.eh_frame_svma = eh_svma;
    }
    Ok(sections)
}

/// Reads the unwind tables of a mapped module (x86_64: `.eh_frame`).
///
/// # Safety
/// `phdrs` must be the program headers of a module mapped at `bias`, mapped during the call.
#[cfg(target_arch = "x86_64")]
unsafe fn rules_from_image(
    _name: &str,
    bias: u64,
    hdr: Option<&Phdr>,
    phdrs: &[Phdr],
    plt: &[unwind_dwarf::plt::PltSection],
    code: (u64, u64),
) -> Result<(ModuleRules<Rule>, CfiStats), DwarfError> {
    // SAFETY: forwarded from the caller.
    let sections = unsafe { cfi_sections(bias, hdr, phdrs, plt, code) }?;
    unwind_dwarf::rules_from_sections(&sections)
}

/// `PT_ARM_EXIDX`: the segment holding `.ARM.exidx`.
#[cfg(target_arch = "arm")]
const PT_ARM_EXIDX: u32 = 0x7000_0001;

/// Reads the unwind tables of a mapped module (32-bit ARM: `.ARM.exidx` with the `.ARM.extab`
/// entries it points to, and `.eh_frame` where present, which wins where both describe code).
///
/// # Safety
/// `phdrs` must be the program headers of a module mapped at `bias`, mapped during the call.
#[cfg(target_arch = "arm")]
unsafe fn rules_from_image(
    name: &str,
    bias: u64,
    hdr: Option<&Phdr>,
    phdrs: &[Phdr],
    plt: &[unwind_dwarf::plt::PltSection],
    code: (u64, u64),
) -> Result<(ModuleRules<Rule>, CfiStats), DwarfError> {
    // `.debug_frame` is exact in prologues and epilogues where EXIDX is not, but it is not
    // loaded: read the module's file when there is one (the vdso has none).
    if name.starts_with('/') {
        if let Ok(loaded) = unwind_dwarf::load_elf_file_arm(std::path::Path::new(name)) {
            return Ok((loaded.rules, loaded.stats.cfi));
        }
    }
    // SAFETY: forwarded from the caller.
    let sections = unsafe { cfi_sections(bias, hdr, phdrs, plt, code) }?;
    let exidx = phdrs.iter().find(|p| p.p_type == PT_ARM_EXIDX);
    let mut exidx_sections = None;
    if let Some(x) = exidx {
        let svma = u64::from(x.p_vaddr);
        // SAFETY: forwarded from the caller.
        let (bytes, (seg_lo, _)) =
            unsafe { mapped_from(bias, phdrs, svma) }.ok_or(DwarfError::NoCfi)?;
        let len = usize::try_from(u64::from(x.p_memsz))
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        // `.ARM.extab` is not a segment: its entries lie in the same read-only segment, which
        // is handed over whole (prel31 pointers into it are resolved against its range).
        // SAFETY: forwarded from the caller.
        let (segment, _) = unsafe { mapped_from(bias, phdrs, seg_lo) }.ok_or(DwarfError::NoCfi)?;
        exidx_sections = Some(unwind_arm_exidx::ExidxSections {
            exidx: bytes.get(..len).unwrap_or(bytes),
            exidx_svma: svma,
            extab: Some(segment),
            extab_svma: seg_lo,
            text_end: Some(code.1),
        });
    }
    // The report shows the DWARF statistics; `table` in them counts the merged extents.
    unwind_dwarf::rules_from_sections_arm(&sections, exidx_sections.as_ref())
        .map(|(r, s)| (r, s.cfi))
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
