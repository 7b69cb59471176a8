//! Go's goroutine stacks: where a walk may read when a thread runs Go code.
//!
//! A goroutine runs on a stack Go allocates in its heap, not on the thread's stack, so a walk
//! from a sample in Go code could read nothing past its first frame (it stopped there). Go
//! keeps the goroutine a thread runs, its `g`, in a thread-local word of the executable's TLS
//! block: `runtime.tlsg` on x86_64, `runtime.tls_g` on arm64 (a Go program the preload
//! library can enter is dynamically linked, so built with cgo, which uses that word; its
//! symbol is in `.symtab`). A `g` starts with the goroutine's stack bounds `[lo, hi)` (its
//! field `stack`, "offset known to runtime/cgo", the same since Go 1.0). So, where the
//! interrupted stack pointer is on neither the thread's registered stack nor anything else the
//! walk knows, the handler reads that word and the two words it points to, and lets the walk
//! read the goroutine's stack from the stack pointer up if it lies there.
//!
//! Why those reads are safe: the executable's TLS block is static (allocated with every thread
//! the C library creates, and every registered thread is one), and the word holds 0 (a thread
//! that has not run Go) or the address of a `g`, which Go never frees (every `g` stays on its
//! list of all goroutines, to be reused). Go's frames themselves are described by the
//! executable's `.debug_frame`, which the tables read from its file.

use std::borrow::Cow;
use std::sync::atomic::{AtomicIsize, AtomicU8, AtomicUsize, Ordering};

use unwind_core::{LiveStack, Memory};

use crate::modules::LoadedModule;

/// The offset of the `g` word from the thread pointer, if the executable is a Go program
/// whose word was found (0: not found, or not looked for yet).
static G_OFFSET: AtomicIsize = AtomicIsize::new(0);

/// The offsets of `g.m` and `m.curg` (the goroutine an M runs, whose stack a walk from the
/// system stack reaches through a cgo call), from the executable's DWARF types (0: not known).
static G_M: AtomicUsize = AtomicUsize::new(0);
static M_CURG: AtomicUsize = AtomicUsize::new(0);

/// Whether the executable was looked at ([`Found`] as a byte, 0 before).
static LOOKED: AtomicU8 = AtomicU8::new(0);

/// The largest goroutine stack Go allows (`maxstacksize` on 64-bit machines): bounds wider than
/// this are not a goroutine's.
const MAX_STACK: usize = 1 << 30;

/// What looking at the executable found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum GoRuntime {
    /// Not a Go program (no Go runtime in the executable).
    NotGo = 1,
    /// A Go program whose goroutine stacks walks read.
    Found = 2,
    /// A Go program whose `g` word could not be found: its symbol table is stripped (`-s`), or
    /// its file on disk is not the running one; walks stop at a goroutine's first frame.
    NoSymbol = 3,
}

/// What was found of the executable's Go runtime, once [`detect`] has looked (`None` before).
pub fn runtime() -> Option<GoRuntime> {
    match LOOKED.load(Ordering::Relaxed) {
        1 => Some(GoRuntime::NotGo),
        2 => Some(GoRuntime::Found),
        3 => Some(GoRuntime::NoSymbol),
        _ => None,
    }
}

/// The name of the `g` word's symbol on this architecture.
const G_SYMBOL: &str = if cfg!(target_arch = "x86_64") {
    "runtime.tlsg"
} else {
    "runtime.tls_g"
};

/// Looks at the executable among `modules` once (outside signal handlers): if it is a Go
/// program, finds where its `g` word is.
pub(crate) fn detect(modules: &[LoadedModule]) {
    if LOOKED.load(Ordering::Relaxed) != 0 {
        return;
    }
    let Some((bias, tls_block)) = executable_tls() else {
        LOOKED.store(GoRuntime::NotGo as u8, Ordering::Relaxed);
        return;
    };
    let Some(module) = modules.iter().find(|m| m.bias == bias) else {
        return;
    };
    let found = match crate::modules::matching_file(module) {
        Ok((_, map)) => {
            let found = g_symbol(&map);
            if let (Symbol::At(_), Some((g_m, m_curg))) = (&found, field_offsets(&map)) {
                G_M.store(g_m, Ordering::Relaxed);
                M_CURG.store(m_curg, Ordering::Relaxed);
            }
            found
        }
        Err(_) => Symbol::Unknown,
    };
    let looked = match found {
        Symbol::At(offset) => {
            let word = tls_block
                .wrapping_add(offset)
                .wrapping_sub(crate::arch::thread_pointer());
            G_OFFSET.store(word as isize, Ordering::Relaxed);
            GoRuntime::Found
        }
        Symbol::NotGo => GoRuntime::NotGo,
        Symbol::Unknown => GoRuntime::NoSymbol,
    };
    LOOKED.store(looked as u8, Ordering::Relaxed);
}

/// What an executable's file says of its `g` word.
enum Symbol {
    /// Its offset in the TLS block.
    At(usize),
    /// Not a Go program.
    NotGo,
    /// A Go program (it has `.gopclntab`) without the symbol.
    Unknown,
}

/// Where `file`'s `g` word is.
fn g_symbol(file: &[u8]) -> Symbol {
    use object::{Object, ObjectSymbol, SymbolKind};
    let Ok(elf) = object::File::parse(file) else {
        return Symbol::NotGo;
    };
    if elf.section_by_name(".gopclntab").is_none() {
        return Symbol::NotGo;
    }
    elf.symbols()
        .find(|s| s.kind() == SymbolKind::Tls && s.name() == Ok(G_SYMBOL))
        .and_then(|s| usize::try_from(s.address()).ok())
        .map_or(Symbol::Unknown, Symbol::At)
}

/// The executable's load bias and the calling thread's address of its TLS block, if it has one
/// (the module of TLS id 1).
fn executable_tls() -> Option<(u64, usize)> {
    unsafe extern "C" fn callback(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid `info` and the `data` we gave it.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut Option<(u64, usize)>)) };
        if info.dlpi_tls_modid == 1 && !info.dlpi_tls_data.is_null() {
            // `dlpi_addr` is 32 bits wide on 32-bit machines.
            #[allow(clippy::useless_conversion)]
            let bias = u64::from(info.dlpi_addr);
            *out = Some((bias, info.dlpi_tls_data as usize));
            return 1;
        }
        0
    }
    let mut out: Option<(u64, usize)> = None;
    // SAFETY: the callback matches the signature dl_iterate_phdr expects and only reads the
    // entry it is given during the call.
    unsafe {
        libc::dl_iterate_phdr(Some(callback), &mut out as *mut _ as *mut libc::c_void);
    }
    out
}

/// The offsets of `g.m` and `m.curg` in `file`'s DWARF (`runtime.g`'s member `m`,
/// `runtime.m`'s member `curg`); `None` without DWARF (`-w`) or without both.
fn field_offsets(file: &[u8]) -> Option<(usize, usize)> {
    use object::{Object, ObjectSection};
    let elf = object::File::parse(file).ok()?;
    // Only what names and offsets are read from (decompressing the others would take most of
    // the time).
    let sections = gimli::DwarfSections::load(|id| -> Result<Cow<'_, [u8]>, ()> {
        use gimli::SectionId::{
            DebugAbbrev, DebugAddr, DebugInfo, DebugLineStr, DebugStr, DebugStrOffsets,
        };
        let wanted = matches!(
            id,
            DebugAbbrev | DebugAddr | DebugInfo | DebugLineStr | DebugStr | DebugStrOffsets
        );
        Ok(elf
            .section_by_name(id.name())
            .filter(|_| wanted)
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    })
    .ok()?;
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, gimli::LittleEndian));
    let mut units = dwarf.units();
    let (mut g_m, mut m_curg) = (None, None);
    // Units are read from their headers (a `gimli::Unit` would read each one's line program).
    while let Ok(Some(header)) = units.next() {
        let Ok(abbrevs) = dwarf.abbreviations(&header) else {
            continue;
        };
        // Go's linker writes names inline or in `.debug_str`: no form that needs the unit.
        let name = |e: &gimli::DebuggingInformationEntry<_>| {
            e.attr_value(gimli::DW_AT_name)
                .and_then(|v| dwarf.attr_line_string(v).ok())
        };
        // Go's linker writes the runtime's types into the runtime package's unit: the others'
        // entries are not read.
        let mut entries = header.entries(&abbrevs);
        match entries.next_dfs() {
            Ok(Some(root)) if name(root).is_some_and(|n| n.slice() == b"runtime") => {}
            _ => continue,
        }
        // The structure whose members are being read, and its depth.
        let mut inside: Option<(&str, isize)> = None;
        while let Ok(Some(e)) = entries.next_dfs() {
            let name = || name(e).and_then(|s| std::str::from_utf8(s.slice()).ok());
            if inside.is_some_and(|(_, depth)| e.depth() <= depth) {
                inside = None;
            }
            match (e.tag(), inside) {
                (gimli::DW_TAG_structure_type, _) => {
                    inside = match name() {
                        Some(n @ ("runtime.g" | "runtime.m")) => Some((n, e.depth())),
                        _ => None,
                    }
                }
                (gimli::DW_TAG_member, Some((of, _))) => {
                    let offset = || {
                        e.attr_value(gimli::DW_AT_data_member_location)
                            .and_then(|v| v.udata_value())
                            .and_then(|v| usize::try_from(v).ok())
                    };
                    match (of, name()) {
                        ("runtime.g", Some("m")) => g_m = offset(),
                        ("runtime.m", Some("curg")) => m_curg = offset(),
                        _ => {}
                    }
                }
                _ => {}
            }
            if let (Some(a), Some(b)) = (g_m, m_curg) {
                return Some((a, b));
            }
        }
    }
    None
}

/// The `g` the calling thread runs (0 for none). Async-signal-safe: one load.
#[inline]
fn current_g() -> usize {
    let offset = G_OFFSET.load(Ordering::Relaxed);
    if offset == 0 {
        return 0;
    }
    let word = crate::arch::thread_pointer().wrapping_add_signed(offset) as *const usize;
    // SAFETY: `word` is in the executable's static TLS block of this thread (see the module's
    // doc), found by `detect` as the same offset from the thread pointer in every thread.
    let g = unsafe { word.read() };
    if !g.is_multiple_of(std::mem::align_of::<usize>()) {
        return 0;
    }
    g
}

/// The stack bounds `[lo, hi)` of the `g` at `g` (non-zero), if they can be a goroutine's.
///
/// # Safety
/// `g` is the address of a `g` (never freed: see the module's doc).
#[inline]
unsafe fn stack_of(g: usize) -> Option<(u64, u64)> {
    // SAFETY: the caller's; a `g`'s first two words are its stack's bounds.
    let (lo, hi) = unsafe {
        (
            (g as *const usize).read(),
            (g as *const usize).add(1).read(),
        )
    };
    (lo < hi && hi - lo <= MAX_STACK).then_some((lo as u64, hi as u64))
}

/// The goroutine the calling thread's M runs (`g.m.curg`) while the thread itself runs `g`
/// (`g0`, the system stack), if the offsets are known and it is another `g`.
#[inline]
fn current_goroutine(g: usize) -> Option<usize> {
    let (g_m, m_curg) = (G_M.load(Ordering::Relaxed), M_CURG.load(Ordering::Relaxed));
    if g == 0 || m_curg == 0 {
        return None;
    }
    // SAFETY: `g` is a `g` (see `current_g`), whose `m` word is 0 or its M, which lives as
    // long as its thread runs (this one); an M's `curg` is 0 or a `g`.
    let curg = unsafe {
        let m = ((g + g_m) as *const usize).read();
        if m == 0 || !m.is_multiple_of(std::mem::align_of::<usize>()) {
            return None;
        }
        ((m + m_curg) as *const usize).read()
    };
    (curg != 0 && curg != g && curg.is_multiple_of(std::mem::align_of::<usize>())).then_some(curg)
}

/// What a walk may read in a Go program: the stack the interrupted stack pointer is on (the
/// thread's registered stack, or the running goroutine's), and, on the system stack, the stack
/// of the goroutine that called into C through cgo and that goroutine's stack bounds (the
/// rule at `runtime.asmcgocall`'s return site reads them, see
/// [`unwind_dwarf::go`]). The first is checked first: walks that stay on it cost what they
/// cost with [`LiveStack`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct GoMemory {
    stack: LiveStack,
    goroutine: LiveStack,
    g_words: LiveStack,
}

impl GoMemory {
    /// What a walk from `sp` may read, `registered` being the thread's registered stack.
    /// Async-signal-safe: at most five loads.
    #[inline]
    pub(crate) fn at(sp: u64, registered: (u64, u64), pointer_mask: u64) -> Self {
        // SAFETY: the empty range.
        let empty = unsafe { LiveStack::new(0, 0) };
        let g = current_g();
        let on_registered = registered.0 <= sp && sp < registered.1;
        let (stack, curg) = if on_registered {
            (Some(registered), current_goroutine(g))
        } else if g != 0 {
            // SAFETY: a non-zero `g` word is a `g` (see `current_g`).
            let own = unsafe { stack_of(g) }.filter(|&(lo, hi)| lo <= sp && sp < hi);
            (own, None)
        } else {
            (None, None)
        };
        let live = |(lo, hi): (u64, u64)| {
            let floor = sp.saturating_sub(crate::RED_ZONE).max(lo);
            let lo = if lo <= sp && sp < hi { floor } else { lo };
            // SAFETY: a thread's registered stack, or a live goroutine's stack (Go's memory,
            // mapped while its `g` runs or waits), from its stack pointer's red zone up where
            // the stack pointer is on it.
            unsafe { LiveStack::new(lo, hi) }.with_pointer_mask(pointer_mask)
        };
        let (goroutine, g_words) = match curg {
            // SAFETY: `curg` is a `g` (see `current_goroutine`).
            Some(curg) => match unsafe { stack_of(curg) } {
                Some(bounds) => (
                    live(bounds),
                    // SAFETY: a `g`'s first two words (never freed).
                    unsafe { LiveStack::new(curg as u64, curg as u64 + 16) },
                ),
                None => (empty, empty),
            },
            None => (empty, empty),
        };
        GoMemory {
            stack: stack.map_or(empty, live),
            goroutine,
            g_words,
        }
    }

    /// Whether `[from, to)` is in one of the other ranges.
    #[cold]
    #[inline(never)]
    fn other_contains(&self, from: u64, to: u64) -> bool {
        self.goroutine.contains(from, to) || self.g_words.contains(from, to)
    }
}

impl Memory for GoMemory {
    #[inline(always)]
    fn read_u64(&self, addr: u64) -> Option<u64> {
        match self.stack.read_u64(addr) {
            Some(v) => Some(v),
            None => self
                .goroutine
                .read_u64(addr)
                .or_else(|| self.g_words.read_u64(addr)),
        }
    }

    #[inline(always)]
    fn read_u32(&self, addr: u64) -> Option<u32> {
        match self.stack.read_u32(addr) {
            Some(v) => Some(v),
            None => self
                .goroutine
                .read_u32(addr)
                .or_else(|| self.g_words.read_u32(addr)),
        }
    }

    #[inline(always)]
    fn contains(&self, from: u64, to: u64) -> bool {
        self.stack.contains(from, to) || self.other_contains(from, to)
    }

    #[inline(always)]
    unsafe fn load_u64(&self, addr: u64) -> u64 {
        // SAFETY: the caller's: inside a range `contains` answered for, which is readable.
        u64::from_le(unsafe { core::ptr::read_unaligned(addr as usize as *const u64) })
    }

    #[inline(always)]
    fn pointer_mask(&self) -> u64 {
        self.stack.pointer_mask()
    }

    /// From the system stack to the stack of the goroutine that called into C: the one switch
    /// a walk may make where the stack pointer does not increase.
    fn switches_stack(&self, callee_sp: u64, caller_sp: u64) -> bool {
        self.stack.contains(callee_sp, callee_sp.saturating_add(1))
            && self
                .goroutine
                .contains(caller_sp, caller_sp.saturating_add(1))
    }
}

/// Whether walks in this process read Go's stacks ([`GoMemory`]). Async-signal-safe.
#[inline(always)]
pub(crate) fn active() -> bool {
    G_OFFSET.load(Ordering::Relaxed) != 0
}
