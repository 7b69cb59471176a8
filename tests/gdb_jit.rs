//! Code a JIT compiler describes through the GDB JIT interface is unwound through: this test
//! plays the JIT as LLVM's does. It copies code gcc built (`gdb_jit/jitted.c`, no frame
//! pointers) into anonymous executable memory, and registers a symbol file for it in its own
//! `__jit_debug_descriptor` (the ELF file moved to the code's addresses, as LLVM's RuntimeDyld
//! moves the objects it registers), then calls `__jit_debug_register_code`. The descriptor is
//! in this executable's symbol table only (not exported), where gdb finds it too.
//!
//! Before the registration, a walk from a callback the generated code calls does not give the
//! generated code's frames and its caller's; after it (`jit_code_changed()`, then `refresh()`),
//! it gives them all, and the outer frames equal a walk taken in the caller itself;
//! `jit_functions()` names the code. After the code is unregistered, the names are gone.

use std::hint::black_box;
use std::path::PathBuf;
use std::ptr::{addr_of_mut, null_mut};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

/// `struct jit_code_entry`.
#[repr(C)]
struct JitCodeEntry {
    next: *mut JitCodeEntry,
    prev: *mut JitCodeEntry,
    symfile_addr: *const u8,
    symfile_size: u64,
}

/// `struct jit_descriptor`.
#[repr(C)]
pub struct JitDescriptor {
    version: u32,
    action_flag: u32,
    relevant_entry: *mut JitCodeEntry,
    first_entry: *mut JitCodeEntry,
}

const JIT_REGISTER_FN: u32 = 1;
const JIT_UNREGISTER_FN: u32 = 2;

/// The descriptor the GDB JIT interface names; in the executable's `.symtab` only.
#[no_mangle]
pub static mut __jit_debug_descriptor: JitDescriptor = JitDescriptor {
    version: 1,
    action_flag: 0,
    relevant_entry: null_mut(),
    first_entry: null_mut(),
};

/// Where gdb puts its breakpoint: called after every change of the list.
#[no_mangle]
#[inline(never)]
pub extern "C" fn __jit_debug_register_code() {
    black_box(());
}

/// Builds `gdb_jit/jitted.c` as a shared object without relocations.
fn build_jitted() -> Vec<u8> {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gdb-jit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("jitted.so");
    let (cc, extra) = unwind_test_support::target_c_compiler();
    unwind_test_support::build_jitted_object(&cc, extra, &out);
    std::fs::read(&out).unwrap()
}

/// Reads and writes an ELF file's words of its class (little-endian).
struct Words<'a> {
    bytes: &'a mut [u8],
    is64: bool,
}

impl Words<'_> {
    fn get(&self, at: usize, size: usize) -> u64 {
        let mut b = [0u8; 8];
        b[..size].copy_from_slice(&self.bytes[at..at + size]);
        u64::from_le_bytes(b)
    }

    fn add(&mut self, at: usize, size: usize, delta: u64) {
        let v = self.get(at, size).wrapping_add(delta);
        self.bytes[at..at + size].copy_from_slice(&v.to_le_bytes()[..size]);
    }

    /// A field of the class's size (an address or offset: 8 or 4 bytes).
    fn word(&self) -> usize {
        if self.is64 {
            8
        } else {
            4
        }
    }
}

// The ELF constants the move needs (gABI).
const SHF_ALLOC: u64 = 2;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const SHN_UNDEF: u16 = 0;
const SHN_ABS: u16 = 0xfff1;

/// `elf` moved to `base`: every loaded section's and segment's address and every defined
/// symbol's value plus `base` (what a JIT's symbol file says of code it placed there).
fn moved(elf: &[u8], base: u64) -> Vec<u8> {
    let mut copy = elf.to_vec();
    let is64 = elf[4] == 2;
    let mut w = Words {
        bytes: &mut copy,
        is64,
    };
    let ws = w.word();
    let (phoff, shoff) = if is64 { (0x20, 0x28) } else { (0x1c, 0x20) };
    let (phentsize, phnum, shentsize, shnum) = if is64 {
        (0x36, 0x38, 0x3a, 0x3c)
    } else {
        (0x2a, 0x2c, 0x2e, 0x30)
    };
    let phoff = w.get(phoff, ws) as usize;
    let (phentsize, phnum) = (w.get(phentsize, 2) as usize, w.get(phnum, 2) as usize);
    for i in 0..phnum {
        let p = phoff + i * phentsize;
        let (vaddr, paddr) = if is64 { (16, 24) } else { (8, 12) };
        w.add(p + vaddr, ws, base);
        w.add(p + paddr, ws, base);
    }
    let shoff = w.get(shoff, ws) as usize;
    let (shentsize, shnum) = (w.get(shentsize, 2) as usize, w.get(shnum, 2) as usize);
    for i in 0..shnum {
        let s = shoff + i * shentsize;
        let sh_type = w.get(s + 4, 4) as u32;
        let flags = w.get(s + 8, ws);
        let (addr, offset, size, entsize) = if is64 {
            (16, 24, 32, 56)
        } else {
            (12, 16, 20, 36)
        };
        if flags & SHF_ALLOC != 0 {
            w.add(s + addr, ws, base);
        }
        if sh_type == SHT_SYMTAB || sh_type == SHT_DYNSYM {
            let (off, size, entsize) = (
                w.get(s + offset, ws) as usize,
                w.get(s + size, ws) as usize,
                w.get(s + entsize, ws) as usize,
            );
            for sym in (off..off + size).step_by(entsize) {
                let (value, shndx) = if is64 {
                    (sym + 8, sym + 6)
                } else {
                    (sym + 4, sym + 14)
                };
                let shndx = w.get(shndx, 2) as u16;
                if shndx != SHN_UNDEF && shndx != SHN_ABS {
                    w.add(value, ws, base);
                }
            }
        }
    }
    copy
}

/// The generated code: mapped, its symbol file, and the functions' addresses.
struct Placed {
    base: u64,
    len: usize,
    symfile: Vec<u8>,
    call: u64,
    inner: (u64, u64),
    call_range: (u64, u64),
}

/// Copies `elf`'s loaded segments into anonymous memory made executable, as a JIT places code.
fn place(elf: &[u8]) -> Placed {
    let file = object::File::parse(elf).unwrap();
    let end = file
        .segments()
        .map(|s| s.address() + s.size())
        .max()
        .unwrap();
    let len = (end as usize).div_ceil(4096) * 4096;
    // SAFETY: a new anonymous mapping; nothing else uses it.
    let at = unsafe {
        libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED);
    let base = at as u64;
    for s in file.segments() {
        let (offset, size) = s.file_range();
        let bytes = &elf[offset as usize..(offset + size) as usize];
        // SAFETY: the segment lies inside the mapping of `len` bytes, which is writable.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                (base + s.address()) as *mut u8,
                bytes.len(),
            )
        };
    }
    // SAFETY: the mapping made above, now read-only and executable.
    assert_eq!(
        unsafe { libc::mprotect(at, len, libc::PROT_READ | libc::PROT_EXEC) },
        0
    );
    // Instructions written as data: make them visible to instruction fetch (ARM).
    #[cfg(any(target_arch = "arm", target_arch = "aarch64"))]
    {
        extern "C" {
            fn __clear_cache(start: *mut libc::c_char, end: *mut libc::c_char);
        }
        // SAFETY: the range is the mapping made above.
        unsafe { __clear_cache(at.cast(), at.cast::<libc::c_char>().add(len)) };
    }
    let symbol = |name: &str| {
        let s = file
            .symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no {name} in jitted.so"));
        // Without ARM's Thumb bit.
        let thumb = if cfg!(target_arch = "arm") { 1 } else { 0 };
        let start = (base + s.address()) & !thumb;
        (start, start + s.size())
    };
    let text = file.section_by_name(".text").unwrap();
    assert!(text.size() > 0);
    Placed {
        base,
        len,
        symfile: moved(elf, base),
        // With ARM's Thumb bit: called.
        call: base
            + file
                .symbols()
                .find(|s| s.name() == Ok("jitted_call"))
                .unwrap()
                .address(),
        inner: symbol("jitted_inner"),
        call_range: symbol("jitted_call"),
    }
}

/// Registers `symfile` as the JIT interface's only entry, or unregisters it.
fn register(entry: &mut JitCodeEntry, on: bool) {
    let d = addr_of_mut!(__jit_debug_descriptor);
    // SAFETY: this test's descriptor and entry, changed by this thread only (as a JIT changes
    // its own under its lock); the unwinder reads them only in `refresh` and
    // `jit_code_changed`, called by this thread.
    unsafe {
        if on {
            (*d).first_entry = entry;
            (*d).relevant_entry = entry;
            (*d).action_flag = JIT_REGISTER_FN;
        } else {
            (*d).first_entry = null_mut();
            (*d).relevant_entry = entry;
            (*d).action_flag = JIT_UNREGISTER_FN;
        }
    }
    __jit_debug_register_code();
}

/// The walk the callback took.
#[derive(Default)]
struct Seen {
    pcs: Vec<u64>,
}

extern "C" fn walk_from_callback(arg: *mut libc::c_void) {
    let mut pcs = [0u64; 128];
    let r = unwind_in_process::unwind_here(black_box(&mut pcs), None).expect("unwind_here");
    // SAFETY: `arg` is the `Seen` that `call_through_jit` passed.
    let seen = unsafe { &mut *(arg as *mut Seen) };
    seen.pcs = pcs[..r.frames].to_vec();
}

type JittedCall = unsafe extern "C" fn(extern "C" fn(*mut libc::c_void), *mut libc::c_void) -> i64;

/// Calls the generated code, which calls back; returns the callback's walk and a walk taken
/// here (frame 0 in `unwind_here`, 1 here, then this function's callers).
#[inline(never)]
fn call_through_jit(call: JittedCall) -> (Seen, Vec<u64>) {
    let mut here = [0u64; 128];
    let r = unwind_in_process::unwind_here(black_box(&mut here), None).expect("unwind_here");
    let mut seen = Seen::default();
    // SAFETY: the generated code calls the callback with the argument, once.
    black_box(unsafe { call(walk_from_callback, (&mut seen as *mut Seen).cast()) });
    (seen, here[..r.frames].to_vec())
}

/// Whether `walk` goes through the generated code: a frame in `jitted_inner`, then one in
/// `jitted_call`, then the caller's frames as `here` (its own walk) gives them.
fn through_jit(walk: &[u64], here: &[u64], p: &Placed) -> bool {
    let Some(i) = walk
        .iter()
        .position(|pc| (p.inner.0..p.inner.1).contains(&(pc - 1)))
    else {
        return false;
    };
    let in_call = walk
        .get(i + 1)
        .is_some_and(|pc| (p.call_range.0..p.call_range.1).contains(&(pc - 1)));
    // Then the caller's frame (another call of `call_through_jit`'s than `here[1]`), and every
    // frame beyond equal.
    in_call && walk.len() > i + 3 && walk[i + 3..] == here[2..]
}

#[test]
fn jit_code_registered_through_the_gdb_interface_is_unwound_and_named() {
    unwind_in_process::init().expect("init");
    let placed = place(&build_jitted());
    // SAFETY: jitted_call has this signature (gdb_jit/jitted.c).
    let call: JittedCall = unsafe { std::mem::transmute(placed.call as usize) };
    let _ = unwind_in_process::jit_code_changed();

    // The code is mapped, not described: the table knows its memory, not its rules.
    unwind_in_process::refresh().expect("refresh");
    let (before, here) = call_through_jit(call);
    println!("before: {:x?}\nhere: {:x?}", before.pcs, here);
    assert!(
        !through_jit(&before.pcs, &here, &placed),
        "walked through without the symbol file"
    );
    assert!(unwind_in_process::jit_functions().is_empty());
    assert!(!unwind_in_process::jit_code_changed());

    let mut entry = JitCodeEntry {
        next: null_mut(),
        prev: null_mut(),
        symfile_addr: placed.symfile.as_ptr(),
        symfile_size: placed.symfile.len() as u64,
    };
    register(&mut entry, true);
    assert!(unwind_in_process::jit_code_changed());
    assert!(!unwind_in_process::jit_code_changed());
    let report = unwind_in_process::refresh().expect("refresh");
    assert_eq!(
        (report.jit_symbol_files, report.jit_symbol_files_unusable),
        (1, 0),
        "{report}"
    );
    let (after, here) = call_through_jit(call);
    println!("after: {:x?}\nhere: {:x?}", after.pcs, here);
    assert!(
        through_jit(&after.pcs, &here, &placed),
        "the walk does not go through the generated code to its caller"
    );
    let names = unwind_in_process::jit_functions();
    println!("{names:x?}");
    assert!(names
        .iter()
        .any(|f| f.name == "jitted_call" && (f.start, f.end) == placed.call_range));
    assert!(names
        .iter()
        .any(|f| f.name == "jitted_inner" && (f.start, f.end) == placed.inner));
    assert!(names
        .iter()
        .all(|f| placed.base <= f.start && f.end <= placed.base + placed.len as u64));

    register(&mut entry, false);
    assert!(unwind_in_process::jit_code_changed());
    unwind_in_process::refresh().expect("refresh");
    assert!(unwind_in_process::jit_functions().is_empty());
}
