//! `dlopen` interposed without moving the load to this library.
//!
//! glibc's `dlopen` takes its caller's return address to find the "calling object": a file
//! name without a '/' is searched along that object's DT_RPATH or DT_RUNPATH, and `$ORIGIN` in
//! a file name is that object's directory. Called from here, the calling object would be this
//! library, and a program whose library loads a plugin through its own search path would fail
//! under the profiler. So the exported `dlopen` is a stub that passes its return address on to
//! [`dlopen_from`], which resolves such names as glibc would from the real caller and hands the
//! C library's `dlopen` a path that no longer depends on who calls it.
//!
//! What cannot be seen from outside glibc is left to the C library (searched as if called from
//! this library, which has no search path of its own): the DT_RPATH of the objects that loaded
//! the caller (glibc searches them after the caller's own DT_RPATH), and the `glibc-hwcaps`
//! subdirectories of each directory. In a set-user-ID program (`AT_SECURE`), where glibc
//! restricts `$ORIGIN` and ignores `LD_LIBRARY_PATH`, every call goes to the C library as is.

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::AtomicPtr;
use std::sync::OnceLock;
use unwind_profiler::sampler::Work;

/// `dlopen`'s signature.
type Dlopen = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;

/// The C library's `dlopen`.
static REAL_DLOPEN: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// `LD_LIBRARY_PATH` as the process started with it: glibc reads it once, at startup.
static STARTUP_LIBRARY_PATH: OnceLock<Option<Vec<u8>>> = OnceLock::new();

/// Records `LD_LIBRARY_PATH` while it is still the one glibc read (from the library's
/// constructor, before the program's `main`).
pub(crate) fn remember_library_path() {
    STARTUP_LIBRARY_PATH
        .get_or_init(|| std::env::var_os("LD_LIBRARY_PATH").map(|v| v.as_bytes().to_vec()));
}

// The exported `dlopen`: the caller's return address becomes the third argument of
// `dlopen_from`, and the jump (not a call) leaves the stack as the caller made it, so that
// `dlopen_from` returns straight to the caller. The stub touches neither the stack nor a
// callee-saved register, so the unwind rules of a function's entry (the return address on the
// stack on x86_64, in the link register on ARM and AArch64) hold at each of its instructions:
// its CFI (and on ARM its EHABI entry, which with no opcodes returns to `lr`) says just that;
// the compiler gives a naked function none.

/// Interposes the C library's `dlopen` (see the module docs).
///
/// # Safety
/// The contract of `dlopen`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov rdx, qword ptr [rsp]",
        "jmp {}",
        ".cfi_endproc",
        sym dlopen_from,
    )
}

/// Interposes the C library's `dlopen` (see the module docs).
///
/// # Safety
/// The contract of `dlopen`.
#[cfg(target_arch = "arm")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void {
    // Valid as ARM and as Thumb-2 code, whichever this function is compiled as; `dlopen_from`
    // is compiled in the same state, so the branch needs no interworking.
    core::arch::naked_asm!(".fnstart", "mov r2, lr", "b {}", ".fnend", sym dlopen_from)
}

/// Interposes the C library's `dlopen` (see the module docs).
///
/// # Safety
/// The contract of `dlopen`.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov x2, x30",
        "b {}",
        ".cfi_endproc",
        sym dlopen_from,
    )
}

/// The C library's `dlopen` (found by [`dlopen_from`] before any call), called as the program's
/// own work (see [`unwind_profiler::sampler::Work`]).
///
/// # Safety
/// The contract of `dlopen`.
unsafe extern "C" fn real_as_program(file: *const c_char, flags: c_int) -> *mut c_void {
    let p = REAL_DLOPEN.load(std::sync::atomic::Ordering::Acquire);
    // SAFETY: set by `dlopen_from` to the next object's `dlopen`, the C library's, of this
    // type, before this is called; forwarded.
    unwind_profiler::sampler::program_call(|| unsafe {
        std::mem::transmute::<*mut c_void, Dlopen>(p)(file, flags)
    })
}

/// `dlopen(file, flags)` as called from the code at `caller`; under `record`, a load that added
/// modules rebuilds the tables once the C library has returned.
///
/// # Safety
/// The contract of `dlopen`; `caller` is the return address of the call.
unsafe extern "C" fn dlopen_from(
    file: *const c_char,
    flags: c_int,
    caller: *const c_void,
) -> *mut c_void {
    if crate::next_symbol(&REAL_DLOPEN, c"dlopen").is_null() {
        return std::ptr::null_mut();
    }
    // The search is the profiler's work; the C library's `dlopen` (`real_as_program`) the
    // program's.
    let handle = unwind_profiler::sampler::profiler_work(Work::DlopenSearch, || {
        if file.is_null() {
            // SAFETY: forwarded.
            unsafe { real_as_program(file, flags) }
        } else {
            // SAFETY: a non-null `file` is a C string by `dlopen`'s contract.
            let file = unsafe { CStr::from_ptr(file) };
            // SAFETY: forwarded, `caller` as received.
            unsafe { open_as_from(real_as_program, file, flags, caller) }
        }
    });
    // errno is not part of dlopen's contract (dlerror is), and the refresh leaves dlerror
    // alone: it makes no dl* call that fails.
    unwind_profiler::session::modules_may_have_changed();
    handle
}

/// `dlopen(file, flags)` with `file` resolved as glibc resolves it for the object containing
/// `caller`. The last call to the C library decides `dlerror`: it is the call with `file` itself
/// whenever the search found nothing, so that a failure reads as it would without us.
///
/// # Safety
/// `real` is the C library's `dlopen`; `flags` as for `dlopen`.
unsafe fn open_as_from(
    real: Dlopen,
    file: &CStr,
    flags: c_int,
    caller: *const c_void,
) -> *mut c_void {
    // SAFETY: `real` is `dlopen`, called with a C string.
    let plain = || unsafe { real(file.as_ptr(), flags) };
    let name = file.to_bytes();
    let bare = !name.contains(&b'/');
    if !bare && find_origin(name).is_none() {
        return plain();
    }
    // SAFETY: getauxval has no preconditions.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return plain();
    }
    // SAFETY: `caller` is only looked up, never read.
    let Some(object) = (unsafe { Object::containing(caller) }) else {
        return plain();
    };
    if !bare {
        // A path: only `$ORIGIN` depends on the caller ($LIB and $PLATFORM are left to glibc).
        let Some(path) = object.origin().map(|o| expand_origin(name, &o)) else {
            return plain();
        };
        let Ok(c_path) = CString::new(path.as_slice()) else {
            return plain();
        };
        // SAFETY: `real` is `dlopen`, called with a C string.
        let handle = unsafe { real(c_path.as_ptr(), flags) };
        if handle.is_null() && probe(&path) == Probe::Absent {
            // SAFETY: as for `open_as_from`.
            return unsafe { fail_as_given(real, file, flags, &c_path) };
        }
        return handle;
    }
    let (rpath, runpath) = object.search_paths();
    if rpath.is_none() && runpath.is_none() {
        return plain();
    }
    // A loaded object of that name is the answer before any search, wherever it was found.
    // SAFETY: `real` is `dlopen`, called with a C string; with RTLD_NOLOAD it loads nothing.
    let loaded = unsafe { real(file.as_ptr(), flags | libc::RTLD_NOLOAD) };
    if !loaded.is_null() {
        return loaded;
    }
    let origin = OnceLock::new();
    let origin = || origin.get_or_init(|| object.origin()).as_deref();
    // SAFETY: `real` is `dlopen`.
    let try_dirs = |list: &[u8]| unsafe { open_in_dirs(real, list, b":", name, flags, &origin) };
    match (rpath, runpath) {
        // DT_RPATH counts only without DT_RUNPATH; it comes before LD_LIBRARY_PATH, and what is
        // left (the executable's DT_RPATH, LD_LIBRARY_PATH, the cache, the default directories)
        // the C library searches in glibc's order.
        (Some(rpath), None) => {
            if let Some(handle) = try_dirs(rpath) {
                return handle;
            }
        }
        // LD_LIBRARY_PATH comes first: if it has the file, the C library finds it there.
        (_, Some(runpath)) => {
            if !in_library_path(name) {
                if let Some(handle) = try_dirs(runpath) {
                    return handle;
                }
            }
        }
        (None, None) => {}
    }
    plain()
}

/// Fails `dlopen(file, flags)` of a `$ORIGIN` path that names no file, with glibc's message,
/// which names the file as given (`path` is the expanded one). That message comes from the C
/// library called with `file` and RTLD_NOLOAD, which loads nothing; the C library expands
/// `$ORIGIN` as this library's directory, so that is done only where nothing is there either,
/// and should an object loaded from there come back, it is let go and `path` decides the
/// message.
///
/// # Safety
/// `real` is the C library's `dlopen`; `flags` as for `dlopen`.
unsafe fn fail_as_given(real: Dlopen, file: &CStr, flags: c_int, path: &CStr) -> *mut c_void {
    // SAFETY: the address of a function of this library is only looked up.
    let here = unsafe { Object::containing(fail_as_given as *const c_void) };
    let ours = here
        .and_then(|o| o.origin())
        .map(|o| expand_origin(file.to_bytes(), &o));
    if ours.is_some_and(|p| probe(&p) == Probe::Absent) {
        // SAFETY: `real` is `dlopen`, called with a C string; with RTLD_NOLOAD it loads
        // nothing.
        let handle = unsafe { real(file.as_ptr(), flags | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return handle;
        }
        if let Some(close) = crate::real_dlclose() {
            // SAFETY: drops the reference the call above took.
            unsafe { close(handle) };
        }
    }
    // SAFETY: `real` is `dlopen`, called with a C string.
    unsafe { real(path.as_ptr(), flags) }
}

/// The public head of glibc's `struct link_map` (`<link.h>`).
#[repr(C)]
struct LinkMap {
    /// Difference between the addresses in the object's file and in memory.
    l_addr: usize,
    /// The path the object was loaded from; empty for the executable.
    l_name: *const c_char,
    /// The object's dynamic section.
    l_ld: *const Dyn,
    l_next: *const LinkMap,
    l_prev: *const LinkMap,
}

/// An entry of a dynamic section (`ElfW(Dyn)`: the tag and value are word-sized).
#[repr(C)]
struct Dyn {
    tag: isize,
    val: usize,
}

/// `dladdr1`'s request for the object's `struct link_map`.
#[cfg(target_env = "gnu")]
const RTLD_DL_LINKMAP: c_int = 2;
const DT_NULL: isize = 0;
const DT_STRTAB: isize = 5;
const DT_RPATH: isize = 15;
const DT_RUNPATH: isize = 29;

/// A loaded object, as its `struct link_map` describes it.
struct Object {
    map: *const LinkMap,
}

impl Object {
    /// The loaded object containing `address`.
    ///
    /// # Safety
    /// None beyond `dladdr1`'s: `address` is not dereferenced.
    #[cfg(target_env = "gnu")]
    unsafe fn containing(address: *const c_void) -> Option<Object> {
        // SAFETY: Dl_info is plain data; zeroed is a valid value to be overwritten.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let mut map: *mut c_void = std::ptr::null_mut();
        // SAFETY: both out-pointers are valid; RTLD_DL_LINKMAP stores a `struct link_map *`.
        let found = unsafe { libc::dladdr1(address, &mut info, &mut map, RTLD_DL_LINKMAP) };
        (found != 0 && !map.is_null()).then_some(Object { map: map.cast() })
    }

    /// None: musl's `dlopen` searches the program's paths whoever calls it, so the name is
    /// handed to it as given.
    #[cfg(not(target_env = "gnu"))]
    unsafe fn containing(_: *const c_void) -> Option<Object> {
        None
    }

    /// The object's DT_RPATH and DT_RUNPATH strings.
    fn search_paths(&self) -> (Option<&[u8]>, Option<&[u8]>) {
        // SAFETY: `map` is a live `struct link_map` from dladdr1: the caller is in the middle
        // of a call from the object, which is loaded until at least then.
        let map = unsafe { &*self.map };
        let (mut strtab, mut rpath, mut runpath) = (None, None, None);
        let mut entry = map.l_ld;
        while !entry.is_null() {
            // SAFETY: the dynamic section is an array of entries ended by DT_NULL.
            let d = unsafe { &*entry };
            match d.tag {
                DT_NULL => break,
                DT_STRTAB => strtab = Some(d.val),
                DT_RPATH => rpath = Some(d.val),
                DT_RUNPATH => runpath = Some(d.val),
                _ => {}
            }
            // SAFETY: not past the DT_NULL entry, which ends the section.
            entry = unsafe { entry.add(1) };
        }
        let Some(mut strtab) = strtab else {
            return (None, None);
        };
        // glibc relocates the pointers of the dynamic section in place, except where that
        // section is read-only; an address below the load address is not yet relocated.
        if strtab < map.l_addr {
            strtab += map.l_addr;
        }
        // SAFETY: DT_RPATH and DT_RUNPATH are offsets of C strings in the string table, which
        // is mapped with the object.
        let string = |offset: usize| unsafe {
            CStr::from_ptr((strtab + offset) as *const c_char).to_bytes()
        };
        (rpath.map(string), runpath.map(string))
    }

    /// The directory `$ORIGIN` stands for, as glibc computes it (`_dl_new_object`,
    /// `_dl_get_origin`): the executable's directory for the executable; for a library, the
    /// directory part of the path it was loaded by, made absolute from the current directory
    /// (glibc's is the one at the time of loading). `dlinfo(RTLD_DI_ORIGIN)` would give glibc's
    /// own value but copies it without a check, and it is not computed for every object.
    fn origin(&self) -> Option<Vec<u8>> {
        // SAFETY: as in `search_paths`; `l_name` is a C string.
        let name = unsafe { CStr::from_ptr((*self.map).l_name) }.to_bytes();
        let path = if name.is_empty() {
            std::fs::read_link("/proc/self/exe")
                .ok()?
                .into_os_string()
                .into_vec()
        } else if name.starts_with(b"/") {
            name.to_vec()
        } else {
            let mut path = std::env::current_dir().ok()?.into_os_string().into_vec();
            if !path.ends_with(b"/") {
                path.push(b'/');
            }
            path.extend_from_slice(name);
            path
        };
        let slash = path.iter().rposition(|&b| b == b'/')?;
        Some(path[..slash.max(1)].to_vec())
    }
}

/// Where a `$ORIGIN` or `${ORIGIN}` starts in `text` and how long it is, by glibc's rule
/// (`is_dst`): the bare form must not be followed by a character of an identifier.
fn find_origin(text: &[u8]) -> Option<(usize, usize)> {
    (0..text.len()).find_map(|i| origin_at(text, i).map(|len| (i, len)))
}

/// The length of a `$ORIGIN` or `${ORIGIN}` at `text[i]`.
fn origin_at(text: &[u8], i: usize) -> Option<usize> {
    let rest = text[i..].strip_prefix(b"$")?;
    if rest.starts_with(b"{ORIGIN}") {
        return Some(9);
    }
    let after = rest.strip_prefix(b"ORIGIN")?;
    match after.first() {
        Some(c) if c.is_ascii_alphanumeric() || *c == b'_' => None,
        _ => Some(7),
    }
}

/// `text` with every `$ORIGIN` and `${ORIGIN}` replaced by `origin`.
fn expand_origin(text: &[u8], origin: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + origin.len());
    let mut i = 0;
    while i < text.len() {
        match origin_at(text, i) {
            Some(len) => {
                out.extend_from_slice(origin);
                i += len;
            }
            None => {
                out.push(text[i]);
                i += 1;
            }
        }
    }
    out
}

/// What a file in a searched directory is to glibc.
#[derive(Debug, PartialEq)]
enum Probe {
    /// Not there, or not readable: glibc goes on to the next directory.
    Absent,
    /// An ELF file of another class or machine: glibc skips it.
    Foreign,
    /// The file glibc would take: whether it then loads or fails, the search ends there.
    Found,
}

/// Looks at `path` as glibc's search does (`open_path`, `open_verify`).
fn probe(path: &[u8]) -> Probe {
    let Ok(mut f) = std::fs::File::open(OsStr::from_bytes(path)) else {
        return Probe::Absent;
    };
    // e_ident (16 bytes), e_type (2), e_machine (2); ELF files of every machine here are
    // little-endian.
    let mut header = [0u8; 20];
    if f.read_exact(&mut header).is_err() || &header[..4] != b"\x7fELF" {
        return Probe::Found;
    }
    const CLASS: u8 = if cfg!(target_pointer_width = "64") {
        2
    } else {
        1
    };
    const MACHINE: u16 = if cfg!(target_arch = "x86_64") {
        62
    } else if cfg!(target_arch = "aarch64") {
        183
    } else {
        40
    };
    if header[4] != CLASS || u16::from_le_bytes([header[18], header[19]]) != MACHINE {
        return Probe::Foreign;
    }
    Probe::Found
}

/// `dlopen` of `name` in the first directory of `list` (separated by any of `separators`,
/// `$ORIGIN` expanded by `origin`) that glibc would take it from: `None` if none has it.
///
/// # Safety
/// `real` is the C library's `dlopen`; `flags` as for `dlopen`.
unsafe fn open_in_dirs<'a>(
    real: Dlopen,
    list: &[u8],
    separators: &[u8],
    name: &[u8],
    flags: c_int,
    origin: &dyn Fn() -> Option<&'a [u8]>,
) -> Option<*mut c_void> {
    for dir in list.split(|b| separators.contains(b)) {
        let Some(path) = path_in(dir, name, origin) else {
            continue;
        };
        // A $LIB or $PLATFORM left for glibc to expand: its `dlopen` is the only probe.
        if path.contains(&b'$') {
            let Ok(path) = CString::new(path) else {
                continue;
            };
            // SAFETY: `real` is `dlopen`, called with a C string.
            let handle = unsafe { real(path.as_ptr(), flags) };
            if !handle.is_null() {
                return Some(handle);
            }
            continue;
        }
        if probe(&path) != Probe::Found {
            continue;
        }
        let Ok(path) = CString::new(path) else {
            continue;
        };
        // SAFETY: `real` is `dlopen`, called with a C string.
        return Some(unsafe { real(path.as_ptr(), flags) });
    }
    None
}

/// `dir/name` as glibc builds it (`fillin_rpath`): an empty directory is the current one,
/// trailing slashes go, and a directory whose `$ORIGIN` is unknown is dropped.
fn path_in<'a>(dir: &[u8], name: &[u8], origin: &dyn Fn() -> Option<&'a [u8]>) -> Option<Vec<u8>> {
    let mut path = if dir.is_empty() {
        b".".to_vec()
    } else if find_origin(dir).is_some() {
        expand_origin(dir, origin()?)
    } else {
        dir.to_vec()
    };
    if path.is_empty() {
        return None;
    }
    while path.len() > 1 && path.ends_with(b"/") {
        path.pop();
    }
    if !path.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    Some(path)
}

/// Whether glibc would find `name` in a directory of `LD_LIBRARY_PATH` (separated by ':' or
/// ';', `$ORIGIN` being the executable's directory).
fn in_library_path(name: &[u8]) -> bool {
    let startup = STARTUP_LIBRARY_PATH
        .get_or_init(|| std::env::var_os("LD_LIBRARY_PATH").map(|v| v.as_bytes().to_vec()));
    let Some(list) = startup.as_deref() else {
        return false;
    };
    let origin = OnceLock::new();
    let origin = || {
        origin
            .get_or_init(|| {
                let exe = std::fs::read_link("/proc/self/exe").ok()?;
                Some(exe.parent()?.as_os_str().as_bytes().to_vec())
            })
            .as_deref()
    };
    list.split(|b| b":;".contains(b))
        .filter_map(|dir| path_in(dir, name, &origin))
        .any(|path| probe(&path) == Probe::Found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_is_found_and_expanded_by_glibcs_rule() {
        assert_eq!(find_origin(b"$ORIGIN/../p/libx.so"), Some((0, 7)));
        assert_eq!(find_origin(b"/a/${ORIGIN}/x"), Some((3, 9)));
        assert_eq!(find_origin(b"$ORIGINAL/x"), None);
        assert_eq!(find_origin(b"$ORIGIN_x/x"), None);
        assert_eq!(find_origin(b"/usr/$LIB/x"), None);
        assert_eq!(
            expand_origin(b"$ORIGIN/a:${ORIGIN}/b:$ORIGINX", b"/o"),
            b"/o/a:/o/b:$ORIGINX"
        );
    }

    #[test]
    fn directories_are_joined_as_glibc_joins_them() {
        let origin = || Some(&b"/opt/app/lib"[..]);
        let none = || None;
        let join = |dir: &[u8]| path_in(dir, b"libp.so", &origin);
        assert_eq!(join(b"/a/b//").unwrap(), b"/a/b/libp.so");
        assert_eq!(join(b"/").unwrap(), b"/libp.so");
        assert_eq!(join(b"").unwrap(), b"./libp.so");
        assert_eq!(
            join(b"$ORIGIN/../plugins").unwrap(),
            b"/opt/app/lib/../plugins/libp.so"
        );
        assert_eq!(path_in(b"$ORIGIN/x", b"libp.so", &none), None);
    }

    #[test]
    fn a_file_of_another_machine_is_skipped_and_others_are_taken() {
        let dir = std::env::temp_dir().join(format!("preload-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = |n: &str| dir.join(n).into_os_string().into_vec();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(probe(exe.as_os_str().as_bytes()), Probe::Found);
        let mut other = std::fs::read(&exe).unwrap()[..64].to_vec();
        other[18] ^= 0x55;
        std::fs::write(dir.join("other"), &other).unwrap();
        assert_eq!(probe(&path("other")), Probe::Foreign);
        std::fs::write(dir.join("script"), b"GROUP ( libx.so )").unwrap();
        assert_eq!(probe(&path("script")), Probe::Found);
        assert_eq!(probe(&path("absent")), Probe::Absent);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
