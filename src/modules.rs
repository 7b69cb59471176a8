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
    /// Runtime address of the image: the load bias plus the lowest `PT_LOAD` address rounded
    /// down to 4096 (a minidump module's base, which Breakpad's `STACK CFI` addresses are
    /// relative to).
    pub image_start: u64,
    /// One past the end of the highest `PT_LOAD` segment (runtime address).
    pub image_end: u64,
    /// The ELF build id (`NT_GNU_BUILD_ID`, read from the mapped `PT_NOTE` segments), if any.
    pub build_id: Option<Vec<u8>>,
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
const PT_NOTE: u32 = 4;
const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
const PF_X: u32 = 1;
const NT_GNU_BUILD_ID: u32 = 3;

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

/// Every loaded module as the loader reports it, without reading unwind tables (for minidumps
/// and symbolization of the process as it is now).
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
        if let Some(m) = unsafe { module_from_info(info, walk.cache) } {
            walk.out.push(m);
        }
    }));
    0
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
        image_start: bias.wrapping_add(image_lo),
        image_end: bias.wrapping_add(image_hi),
        // SAFETY: forwarded: the module is mapped during the callback.
        build_id: unsafe { build_id_of(bias, phdrs) },
    };
    Some((module, phdrs, hdr))
}

/// The build id in the module's mapped `PT_NOTE` segments.
///
/// # Safety
/// As for [`mapped_from`].
unsafe fn build_id_of(bias: u64, phdrs: &[Phdr]) -> Option<Vec<u8>> {
    phdrs.iter().filter(|p| p.p_type == PT_NOTE).find_map(|p| {
        // SAFETY: forwarded from the caller.
        let (bytes, _) = unsafe { mapped_from(bias, phdrs, u64::from(p.p_vaddr)) }?;
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

/// # Safety
/// `info` must come from `dl_iterate_phdr` and be used only during its callback.
unsafe fn module_from_info(info: &libc::dl_phdr_info, cache: &ModuleCache) -> Option<ParsedModule> {
    // SAFETY: forwarded from the caller.
    let (module, phdrs, hdr) = unsafe { describe(info) }?;
    let bias = module.bias;
    let (start, end) = (module.start, module.end);
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

#[cfg(test)]
mod tests {
    use super::gnu_build_id;

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
}
