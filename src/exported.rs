//! Exported symbols of the loaded modules, looked up in their GNU hash tables in memory, the way
//! the dynamic loader looks them up, but without `dlsym`: a `dlsym` that finds nothing sets the
//! thread's `dlerror` state, which the program may read next (after its own `dlopen` failed,
//! inside whose interposer a refresh runs) and would then see our lookup's error instead of its
//! own.

// Program-header and dynamic-section fields are u64 on 64-bit targets and u32 on 32-bit ones:
// the widening conversions are needed on one and no-ops on the other.
#![allow(clippy::useless_conversion)]

use std::ffi::CStr;

use crate::arch::Phdr;

/// `ElfW(Dyn)`: a tag and a value, each a word (the `libc` crate does not declare it).
#[repr(C)]
struct Dyn {
    d_tag: isize,
    d_un: usize,
}
#[cfg(target_pointer_width = "64")]
type Sym = libc::Elf64_Sym;
#[cfg(target_pointer_width = "32")]
type Sym = libc::Elf32_Sym;

/// `DT_STRTAB`, `DT_SYMTAB`, `DT_GNU_HASH` (gABI, GNU).
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_GNU_HASH: u64 = 0x6fff_fef5;

/// The runtime addresses of the definitions of `name` that the loaded modules export, in the
/// loader's order (every module's, not only the first, as gdb sees each module's own).
pub(crate) fn exported(name: &CStr) -> Vec<u64> {
    let mut found = Lookup {
        name,
        hash: gnu_hash(name.to_bytes()),
        out: Vec::new(),
    };
    // SAFETY: the callback matches what dl_iterate_phdr expects and reads only the modules it is
    // given, which the loader keeps mapped during the call; `found` outlives it.
    unsafe {
        libc::dl_iterate_phdr(Some(callback), (&mut found as *mut Lookup).cast());
    }
    found.out
}

struct Lookup<'a> {
    name: &'a CStr,
    hash: u32,
    out: Vec<u64>,
}

/// The GNU hash of a symbol name (`dl_new_hash`).
fn gnu_hash(name: &[u8]) -> u32 {
    name.iter().fold(5381u32, |h, &c| {
        h.wrapping_mul(33).wrapping_add(u32::from(c))
    })
}

unsafe extern "C" fn callback(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid `info` and the `data` we gave it, a `Lookup`.
    let (info, lookup) = unsafe { (&*info, &mut *(data as *mut Lookup)) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the loader keeps the module mapped during the callback.
        if let Some(at) = unsafe { find_in(info, lookup.name, lookup.hash) } {
            lookup.out.push(at);
        }
    }));
    0
}

/// `name` (of GNU hash `hash`) in the module `info` describes, through its `PT_DYNAMIC`'s
/// `DT_GNU_HASH`, `DT_SYMTAB` and `DT_STRTAB`; a module without a GNU hash table is not
/// searched.
///
/// # Safety
/// `info` must come from `dl_iterate_phdr` and be used only during its callback.
unsafe fn find_in(info: &libc::dl_phdr_info, name: &CStr, hash: u32) -> Option<u64> {
    let base = u64::from(info.dlpi_addr);
    if info.dlpi_phdr.is_null() {
        return None;
    }
    // SAFETY: the loader gives `dlpi_phnum` program headers at `dlpi_phdr`.
    let phdrs: &[Phdr] =
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let dynamic = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
    // The loader relocates the dynamic section's addresses in place, but not a read-only one (the
    // vdso's; musl never does): an address below the module's base is still a file address.
    let at = |v: u64| if v < base { base.wrapping_add(v) } else { v };
    let dyn_start = at(u64::from(dynamic.p_vaddr));
    let count = usize::try_from(u64::from(dynamic.p_memsz)).ok()? / std::mem::size_of::<Dyn>();
    let (mut gnu, mut symtab, mut strtab) = (0u64, 0u64, 0u64);
    for i in 0..count {
        // SAFETY: the entries lie inside the module's PT_DYNAMIC, mapped.
        let d = unsafe { &*(dyn_start as *const Dyn).add(i) };
        match u64::try_from(d.d_tag).unwrap_or(0) {
            0 => break,
            DT_GNU_HASH => gnu = at(d.d_un as u64),
            DT_SYMTAB => symtab = at(d.d_un as u64),
            DT_STRTAB => strtab = at(d.d_un as u64),
            _ => {}
        }
    }
    if gnu == 0 || symtab == 0 || strtab == 0 {
        return None;
    }
    let word = |i: u64| -> u32 {
        // SAFETY: inside the module's GNU hash table, mapped (its header's counts bound it).
        unsafe { *((gnu + 4 * i) as *const u32) }
    };
    let (nbuckets, symoffset, bloom_size) = (word(0), word(1), word(2));
    if nbuckets == 0 {
        return None;
    }
    let word_size = std::mem::size_of::<usize>() as u64;
    let buckets = 4 + u64::from(bloom_size) * word_size / 4;
    let mut index = word(buckets + u64::from(hash % nbuckets));
    if index < symoffset {
        return None;
    }
    let chain = buckets + u64::from(nbuckets);
    loop {
        let h = word(chain + u64::from(index - symoffset));
        if h | 1 == hash | 1 {
            // SAFETY: `index` is a symbol of the table (the chain is the symbols').
            let sym = unsafe { &*(symtab as *const Sym).add(index as usize) };
            // SAFETY: its name is a NUL-terminated string in the mapped string table.
            let found = unsafe { CStr::from_ptr((strtab + u64::from(sym.st_name)) as *const _) };
            if found == name && sym.st_shndx != 0 {
                return Some(base.wrapping_add(u64::from(sym.st_value)));
            }
        }
        if h & 1 == 1 {
            return None;
        }
        index += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_dlsym_finds_and_leaves_dlerror_alone() {
        // SAFETY: dlerror only reads and clears this thread's state.
        unsafe { libc::dlerror() };
        let malloc = exported(c"malloc");
        // SAFETY: dlsym with a NUL-terminated name.
        let by_dlsym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) } as u64;
        assert!(malloc.contains(&by_dlsym), "{malloc:x?} {by_dlsym:#x}");
        assert!(exported(c"no_such_symbol_anywhere_1234").is_empty());
        // SAFETY: as above.
        assert!(unsafe { libc::dlerror() }.is_null());
    }
}
