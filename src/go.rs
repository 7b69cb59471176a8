//! Go's goroutine stacks: where a walk may read when a thread runs Go code.
//!
//! A goroutine runs on a stack Go allocates in its heap, not on the thread's stack, so a walk
//! from a sample in Go code could read nothing past its first frame (it stopped there). Go
//! keeps the goroutine a thread runs, its `g`, in a word at a fixed offset from the thread
//! pointer, in the executable's TLS block (a Go program the preload library can enter is
//! dynamically linked, so built with cgo, which keeps `g` there). The offset is read from the
//! runtime's own code that loads or stores it, and checked against the word's symbol where the
//! symbol table is kept ([`unwind_dwarf::go::runtime_layout`]). A `g` starts with the
//! goroutine's stack bounds `[lo, hi)` (its field `stack`, "offset known to runtime/cgo", the
//! same since Go 1.0). So, where the interrupted stack pointer is not on the thread's
//! registered stack, the handler reads that word and the two words it points to, and lets the
//! walk read the goroutine's stack from the stack pointer up if it lies there. On the system
//! stack (C code called through cgo, Go's runtime), it finds the goroutine the thread's M runs
//! (`g.m.curg`, offsets read from the runtime's code: [`unwind_dwarf::go::RuntimeLayout`])
//! and lets the walk switch to that goroutine's stack where `asmcgocall`'s frame leads there.
//!
//! Why those reads are safe: the executable's TLS block is static (allocated with every thread
//! the C library creates, and every registered thread is one), and the word holds 0 (a thread
//! that has not run Go) or the address of a `g`, which Go never frees (every `g` stays on its
//! list of all goroutines, to be reused); an M lives as long as its thread. Go's frames
//! themselves are described by the executable's `.debug_frame`, or, without it, by Go's own
//! function table ([`unwind_dwarf::go`]).

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

/// The bytes of a `g`'s first two words (its stack's bounds), which walks may read.
const G_WORDS: u64 = 2 * std::mem::size_of::<usize>() as u64;

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
    /// A Go program whose `g` word could not be found (its code is not as expected: another
    /// Go version's; or its file on disk is not the running one): walks stop at a goroutine's
    /// first frame.
    Unknown = 3,
}

/// What was found of the executable's Go runtime, once [`detect`] has looked (`None` before).
pub fn runtime() -> Option<GoRuntime> {
    match LOOKED.load(Ordering::Relaxed) {
        1 => Some(GoRuntime::NotGo),
        2 => Some(GoRuntime::Found),
        3 => Some(GoRuntime::Unknown),
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
    let looked = match crate::modules::matching_file(module) {
        Ok((_, map)) => examine(&map, tls_block),
        Err(_) => GoRuntime::Unknown,
    };
    LOOKED.store(looked as u8, Ordering::Relaxed);
}

/// Finds the `g` word of the executable whose file is `file` (its TLS block at `tls_block` in
/// this thread), and the offsets that lead to the goroutine an M runs.
fn examine(file: &[u8], tls_block: usize) -> GoRuntime {
    use object::{Object, ObjectSymbol, SymbolKind};
    let Ok(elf) = object::File::parse(file) else {
        return GoRuntime::NotGo;
    };
    if elf.section_by_name(".gopclntab").is_none() {
        return GoRuntime::NotGo;
    }
    // From the code that loads or stores `g`; and, where the symbol table is kept, from the
    // word's symbol: both must agree where both are found.
    let layout = unwind_dwarf::go::runtime_layout(&elf).unwrap_or_default();
    let from_code = layout.g_offset;
    let from_symbol = elf
        .symbols()
        .find(|s| s.kind() == SymbolKind::Tls && s.name() == Ok(G_SYMBOL))
        .and_then(|s| usize::try_from(s.address()).ok())
        .map(|offset| {
            tls_block
                .wrapping_add(offset)
                .wrapping_sub(crate::arch::thread_pointer()) as isize as i64
        });
    let offset = match (from_code, from_symbol) {
        (Some(a), Some(b)) if a == b => a,
        (Some(a), None) | (None, Some(a)) => a,
        _ => return GoRuntime::Unknown,
    };
    // The executable's TLS block is next to the thread pointer (the first module's static
    // block): an offset further away is not its.
    let Ok(offset) = isize::try_from(offset).map_err(drop).and_then(|o| {
        if o.unsigned_abs() < 1 << 20 {
            Ok(o)
        } else {
            Err(())
        }
    }) else {
        return GoRuntime::Unknown;
    };
    // From the code that switches to the M's goroutine (the test checks it against the DWARF
    // types, which a release build may not have and which take milliseconds to read).
    // Offsets inside the structures as every Go since 1.18 has them (`g.m` among `g`'s first
    // words, `curg` in the first part of an `m`, which is kilobytes long): a decoding that gave
    // more would be read past them.
    let fields = layout
        .m_curg
        .filter(|&(g_m, m_curg)| g_m < 128 && m_curg < 1024)
        .and_then(|(g_m, m_curg)| {
            Some((usize::try_from(g_m).ok()?, usize::try_from(m_curg).ok()?))
        });
    if let Some((g_m, m_curg)) = fields {
        G_M.store(g_m, Ordering::Relaxed);
        M_CURG.store(m_curg, Ordering::Relaxed);
    }
    G_OFFSET.store(offset, Ordering::Relaxed);
    GoRuntime::Found
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
        // The executable's: under glibc TLS module 1 is always its (when it has TLS); musl
        // numbers the first object with TLS 1, which may be a library.
        // SAFETY: getauxval has no preconditions.
        let main = info.dlpi_phdr as usize == unsafe { libc::getauxval(libc::AT_PHDR) } as usize;
        if main && info.dlpi_tls_modid == 1 && !info.dlpi_tls_data.is_null() {
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
        let m = (g.wrapping_add(g_m) as *const usize).read();
        if m == 0 || !m.is_multiple_of(std::mem::align_of::<usize>()) {
            return None;
        }
        (m.wrapping_add(m_curg) as *const usize).read()
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
                    unsafe { LiveStack::new(curg as u64, (curg as u64).wrapping_add(G_WORDS)) },
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
    #[inline(always)]
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
