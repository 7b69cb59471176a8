//! Differential test: our unwinder against framehop 0.16 on the same stack bytes.
//!
//! Three registered worker threads run distinct workloads while the main thread sends each of
//! them `SIGPROF` about once a millisecond. The `SIGPROF` handler copies the interrupted thread's
//! registers and stack into a preallocated slot with [`unwind_in_process::capture_signal`] (no allocation in
//! the handler). After sampling, every copy is unwound twice, by [`unwind_in_process::unwind_copy`] and by
//! framehop's `UnwinderX86_64` (built from the `.eh_frame`/`.eh_frame_hdr` of every loaded
//! module, read from the files on disk, the vdso from memory), and the frames are compared.
//!
//! Workloads:
//! - `rust-recursion`: mutually recursive `rec_a -> rec_b -> rec_c -> rec_d -> rec_a ...` with
//!   different frame sizes, depth 20-60, spinning in a leaf at the bottom.
//! - `libc-qsort`: glibc `qsort` with a Rust comparator that spins, so samples have Rust frames
//!   above C frames above Rust frames.
//! - `sigusr1-handler`: the thread raises `SIGUSR1` at itself in a loop; the handler spins in
//!   nested Rust calls, so most samples have a signal trampoline (`__restore_rt`) frame.
//!
//! Samples whose stack crosses a signal frame (our walk has a `__restore_rt` frame, index `t`)
//! are compared in two parts, because framehop cannot unwind `__restore_rt`: its CFA is a DWARF
//! expression that reads memory (the saved `rsp` in the `ucontext_t`), which framehop does not
//! evaluate, so it takes its frame-pointer fallback there.
//! - Frames `0..=t` (up to and including the trampoline): ours against framehop's walk. All must
//!   be identical; the test counts them and fails otherwise.
//! - Frame `t + 1`: ours must be the PC the kernel saved in the signal frame's `ucontext_t` (read
//!   from the copied stack at framehop's SP for frame `t`). framehop's frame `t + 1`, if its walk
//!   goes that far, must be what its frame-pointer fallback gives (`[bp + 8]`, SP `bp + 16`); its
//!   frames past that follow from a guess and are not compared (only counted, with how many of
//!   them are ours). Either way the sample is explained, in one of two counted classes: framehop
//!   stops at `t + 1` at the latest, or goes on by frame pointer.
//! - Frames `t + 1..`: ours against framehop restarted from the context saved in the signal
//!   frame (PC, SP, FP), classified like a whole walk (identical, or explained as below, or
//!   genuine). The test counts the frames compared and identical, and fails unless all are.
//!
//! Other known, explained differences (not failures):
//! - The outermost frames: one unwinder stops a frame or more before the other, where the frames
//!   only the other has are thread/process start functions (`clone3`, `start_thread`, `_start`).
//! - A frame before the first difference is in a module without CFI, so both fall back to frame
//!   pointers, each its own way.
//!
//! Anything else, a different address where both have a frame, with every earlier frame in a
//! module with CFI and no signal frame crossed before it, is a genuine disagreement: the test
//! dumps both symbolized stacks and fails. (An address without an FDE inside a module with CFI,
//! such as a PLT stub that lld emits no CFI for, is not excused: framehop's guess for frame 0
//! there, the return address at `[sp]`, is right, and following `rbp` is not.)
//!
//! Independently of framehop, our stacks are checked: at least 99 % reach the end of the stack;
//! recursion samples show the recursion in call order and end at the thread start; samples taken
//! inside the SIGUSR1 handler have the `__restore_rt` frame and continue through it to
//! `signal_worker` and the thread start.
//!
//! The last line, read by CI, is `framehop differential: N passed, M failed`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::fmt::Write as _;
use std::hint::black_box;
use std::ops::Range;
use std::sync::atomic::{
    compiler_fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{
    ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind, Unwinder,
};
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
use object::{Object, ObjectSection};
use unwind_core::StackImage;
use unwind_in_process::{LoadedModule, Regs, StopReason, Trust};
use unwind_samples::symbolize::Symbolizer;

const WORKLOADS: [&str; 3] = ["rust-recursion", "libc-qsort", "sigusr1-handler"];
const RECURSION: usize = 0;
const QSORT: usize = 1;
const SIGNAL: usize = 2;
/// Samples wanted from each workload.
const QUOTA: usize = 150;
/// Slots: the quotas plus room for signals still in flight when a quota is reached.
const MAX_SAMPLES: usize = WORKLOADS.len() * QUOTA + 48;
const STACK_BYTES: usize = 64 * 1024;
const MAX_FRAMES: usize = 256;
const SAMPLING_TIMEOUT: Duration = Duration::from_secs(15);
/// The recursion's call cycle: each function calls the next one.
const REC_CYCLE: [&str; 4] = ["rec_a", "rec_b", "rec_c", "rec_d"];
/// Functions where a thread's (or the process's) stack begins.
const THREAD_START: [&str; 4] = ["clone3", "__clone3", "clone", "__clone"];
const OUTERMOST: [&str; 7] = [
    "clone3",
    "__clone3",
    "clone",
    "__clone",
    "start_thread",
    "_start",
    "__libc_start_call_main",
];
/// `mov $15, %rax; syscall` (`rt_sigreturn`): the code of glibc's `__restore_rt`.
const SIGRETURN_CODE: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

// ---------------------------------------------------------------------------------------------
// Sample storage, written by the SIGPROF handler.

/// One sample's registers and stack extent; its bytes are slot `i` of `STACKS`.
struct Slot {
    ready: AtomicBool,
    kind: AtomicUsize,
    in_usr1: AtomicBool,
    pc: AtomicU64,
    sp: AtomicU64,
    fp: AtomicU64,
    base: AtomicU64,
    len: AtomicUsize,
}

impl Slot {
    fn new() -> Self {
        Slot {
            ready: AtomicBool::new(false),
            kind: AtomicUsize::new(0),
            in_usr1: AtomicBool::new(false),
            pc: AtomicU64::new(0),
            sp: AtomicU64::new(0),
            fp: AtomicU64::new(0),
            base: AtomicU64::new(0),
            len: AtomicUsize::new(0),
        }
    }
}

static SLOTS: OnceLock<Box<[Slot]>> = OnceLock::new();
/// `MAX_SAMPLES * STACK_BYTES` bytes, leaked; slot `i` owns `[i * STACK_BYTES, (i+1) * ...)`.
static STACKS: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static NEXT: AtomicUsize = AtomicUsize::new(0);
static TAKEN: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];
static CAPTURE_FAILED: AtomicUsize = AtomicUsize::new(0);
static STOP: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The workload this thread runs (`usize::MAX`: not a sampled worker).
    static KIND: Cell<usize> = const { Cell::new(usize::MAX) };
    /// True while this thread runs the body of the SIGUSR1 handler.
    static IN_USR1: Cell<bool> = const { Cell::new(false) };
}

extern "C" fn on_sigprof(_: c_int, _: *mut libc::siginfo_t, uc: *mut c_void) {
    let kind = KIND.with(Cell::get);
    if kind >= WORKLOADS.len() {
        return;
    }
    let in_usr1 = IN_USR1.with(Cell::get);
    let stacks = STACKS.load(Ordering::Acquire);
    let Some(slots) = SLOTS.get() else { return };
    if stacks.is_null() {
        return;
    }
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    let Some(slot) = slots.get(i) else { return };
    // SAFETY: slot `i`'s bytes lie inside the leaked `MAX_SAMPLES * STACK_BYTES` block; the atomic
    // index hands them to this handler invocation alone, and they are read only after sampling.
    let buf = unsafe { std::slice::from_raw_parts_mut(stacks.add(i * STACK_BYTES), STACK_BYTES) };
    // SAFETY: `uc` is the context the kernel passed to this SA_SIGINFO handler, on this thread.
    match unsafe { unwind_in_process::capture_signal(uc, buf) } {
        Ok(c) => {
            slot.kind.store(kind, Ordering::Relaxed);
            slot.in_usr1.store(in_usr1, Ordering::Relaxed);
            slot.pc.store(c.regs.pc, Ordering::Relaxed);
            slot.sp.store(c.regs.sp, Ordering::Relaxed);
            slot.fp.store(c.regs.fp, Ordering::Relaxed);
            slot.base.store(c.base, Ordering::Relaxed);
            slot.len.store(c.len, Ordering::Relaxed);
            slot.ready.store(true, Ordering::Release);
            TAKEN[kind].fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            CAPTURE_FAILED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads.

#[inline(never)]
fn leaf_spin(iters: u64, seed: u64) -> u64 {
    let mut x = seed | 1;
    for i in 0..iters {
        x = black_box(x.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(i));
    }
    x
}

/// Workload (a): `rec_a -> rec_b -> rec_c -> rec_d -> rec_a ...`, frames of 24, 136, 296 and
/// 520 bytes of locals, the recursion's leaf spinning.
#[inline(never)]
fn rec_a(depth: u32, seed: u64) -> u64 {
    let mut locals = [0u64; 3];
    locals[0] = seed;
    black_box(&mut locals);
    let r = if depth == 0 {
        leaf_spin(20_000, seed)
    } else {
        rec_b(depth - 1, seed.rotate_left(7))
    };
    black_box(&locals);
    r ^ locals[0]
}

#[inline(never)]
fn rec_b(depth: u32, seed: u64) -> u64 {
    let mut locals = [0u64; 17];
    locals[16] = seed;
    black_box(&mut locals);
    let r = if depth == 0 {
        leaf_spin(20_000, seed)
    } else {
        rec_c(depth - 1, seed.rotate_left(11))
    };
    black_box(&locals);
    r.wrapping_add(locals[16])
}

#[inline(never)]
fn rec_c(depth: u32, seed: u64) -> u64 {
    let mut locals = [0u64; 37];
    locals[36] = seed;
    black_box(&mut locals);
    let r = if depth == 0 {
        leaf_spin(20_000, seed)
    } else {
        rec_d(depth - 1, seed.rotate_left(13))
    };
    black_box(&locals);
    r.wrapping_sub(locals[36])
}

#[inline(never)]
fn rec_d(depth: u32, seed: u64) -> u64 {
    let mut locals = [0u64; 65];
    locals[64] = seed;
    black_box(&mut locals);
    let r = if depth == 0 {
        leaf_spin(20_000, seed)
    } else {
        rec_a(depth - 1, seed.rotate_left(17))
    };
    black_box(&locals);
    r ^ locals[64].rotate_left(1)
}

#[inline(never)]
fn recursion_worker() -> u64 {
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut acc = 0u64;
    while !STOP.load(Ordering::Relaxed) {
        seed = seed
            .wrapping_mul(0x5851_f42d_4c95_7f2d)
            .wrapping_add(0x1405_7b7e_f767_814f);
        let depth = 20 + ((seed >> 33) % 41) as u32;
        acc = acc.wrapping_add(rec_a(black_box(depth), seed));
    }
    acc
}

/// Workload (b)'s comparator: called by glibc's merge sort, spins a little.
///
/// # Safety
/// `a` and `b` point to `u64`s (qsort passes elements of the array being sorted).
unsafe extern "C" fn compare_spinning(a: *const c_void, b: *const c_void) -> c_int {
    // SAFETY: per this function's contract.
    let (x, y) = unsafe { (*(a as *const u64), *(b as *const u64)) };
    black_box(leaf_spin(64, x ^ y));
    x.cmp(&y) as c_int
}

#[inline(never)]
fn qsort_round(v: &mut [u64], seed: u64) -> u64 {
    for (i, e) in v.iter_mut().enumerate() {
        *e = (i as u64 ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    // SAFETY: `v` holds `v.len()` elements of 8 bytes that the comparator reads as u64.
    unsafe {
        libc::qsort(
            v.as_mut_ptr().cast(),
            v.len(),
            std::mem::size_of::<u64>(),
            Some(compare_spinning),
        )
    };
    v[v.len() / 2]
}

#[inline(never)]
fn qsort_worker() -> u64 {
    let mut v = vec![0u64; 2048];
    let mut acc = 0u64;
    while !STOP.load(Ordering::Relaxed) {
        acc = acc.wrapping_add(qsort_round(&mut v, acc));
    }
    acc
}

/// Workload (c)'s handler: nested Rust calls that spin for a while.
extern "C" fn on_sigusr1(_: c_int) {
    IN_USR1.with(|f| f.set(true));
    compiler_fence(Ordering::SeqCst);
    black_box(usr1_outer(black_box(3)));
    compiler_fence(Ordering::SeqCst);
    IN_USR1.with(|f| f.set(false));
}

#[inline(never)]
fn usr1_outer(n: u64) -> u64 {
    let mut locals = [0u64; 9];
    locals[8] = n;
    black_box(&mut locals);
    let r = usr1_middle(n + 1);
    black_box(&locals);
    r ^ locals[8]
}

#[inline(never)]
fn usr1_middle(n: u64) -> u64 {
    let mut locals = [0u64; 30];
    locals[29] = n;
    black_box(&mut locals);
    let r = usr1_leaf(n + 1);
    black_box(&locals);
    r.wrapping_add(locals[29])
}

#[inline(never)]
fn usr1_leaf(n: u64) -> u64 {
    leaf_spin(20_000, n)
}

#[inline(never)]
fn signal_worker() -> u64 {
    let mut acc = 0u64;
    while !STOP.load(Ordering::Relaxed) {
        // SAFETY: raises SIGUSR1, whose handler is installed, at this thread.
        let rc = unsafe { libc::raise(libc::SIGUSR1) };
        assert_eq!(rc, 0, "raise(SIGUSR1)");
        acc = acc.wrapping_add(leaf_spin(2_000, acc));
    }
    acc
}

fn install(signal: c_int, handler: usize, flags: c_int) {
    // SAFETY: installs a handler that only runs async-signal-safe code; the sigaction struct is
    // fully initialised (zeroed, then the handler, flags and an empty mask).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = flags;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(
            libc::sigaction(signal, &sa, std::ptr::null_mut()),
            0,
            "sigaction({signal})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// framehop's view of the process.

/// A module's CFI sections as read from its ELF image (to build framehop's module and to tell
/// independently of both unwinders whether an address has an FDE).
struct CfiModule {
    name: String,
    start: u64,
    end: u64,
    bias: u64,
    eh_frame: Option<(Range<u64>, Vec<u8>)>,
    eh_frame_hdr: Option<(Range<u64>, Vec<u8>)>,
    text: Option<(Range<u64>, Vec<u8>)>,
    got: Option<Range<u64>>,
}

impl CfiModule {
    fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() && self.eh_frame_hdr.is_some()
    }

    fn bases(&self) -> BaseAddresses {
        let start = |s: &Option<(Range<u64>, Vec<u8>)>| s.as_ref().map_or(0, |s| s.0.start);
        BaseAddresses::default()
            .set_eh_frame(start(&self.eh_frame))
            .set_eh_frame_hdr(start(&self.eh_frame_hdr))
            .set_text(start(&self.text))
            .set_got(self.got.as_ref().map_or(0, |g| g.start))
    }

    /// True if an FDE covers runtime address `addr` (looked up in `.eh_frame_hdr` with gimli).
    fn covers(&self, addr: u64) -> bool {
        let (Some((_, eh)), Some((_, hdr))) = (&self.eh_frame, &self.eh_frame_hdr) else {
            return false;
        };
        let bases = self.bases();
        let Ok(parsed) = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8) else {
            return false;
        };
        let Some(table) = parsed.table() else {
            return false;
        };
        let mut eh_frame = EhFrame::new(eh, LittleEndian);
        eh_frame.set_address_size(8);
        table
            .fde_for_address(
                &eh_frame,
                &bases,
                addr.wrapping_sub(self.bias),
                EhFrame::cie_from_offset,
            )
            .is_ok()
    }

    fn framehop_module(&self) -> Module<Vec<u8>> {
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.as_ref().map(|s| s.0.clone()),
            text: self.text.as_ref().map(|s| s.1.clone()),
            got_svma: self.got.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|s| s.0.clone()),
            eh_frame: self.eh_frame.as_ref().map(|s| s.1.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|s| s.0.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|s| s.1.clone()),
            ..Default::default()
        };
        Module::new(self.name.clone(), self.start..self.end, self.bias, info)
    }
}

fn cfi_module(m: &LoadedModule) -> CfiModule {
    let image = if m.name.contains("linux-vdso") {
        unwind_in_process::vdso_image()
    } else {
        std::fs::read(&m.name).ok()
    };
    let mut out = CfiModule {
        name: m.name.clone(),
        start: m.start,
        end: m.end,
        bias: m.bias,
        eh_frame: None,
        eh_frame_hdr: None,
        text: None,
        got: None,
    };
    let Some(image) = image else { return out };
    let Ok(file) = object::File::parse(&*image) else {
        return out;
    };
    let section = |name: &str| {
        let s = file.section_by_name(name)?;
        let data = s.data().ok()?.to_vec();
        Some((s.address()..s.address() + s.size(), data))
    };
    out.eh_frame = section(".eh_frame");
    out.eh_frame_hdr = section(".eh_frame_hdr");
    out.text = section(".text");
    out.got = file
        .section_by_name(".got")
        .map(|s| s.address()..s.address() + s.size());
    out
}

// ---------------------------------------------------------------------------------------------
// Analysis.

struct Sample<'a> {
    index: usize,
    kind: usize,
    in_usr1: bool,
    regs: Regs,
    base: u64,
    bytes: &'a [u8],
}

impl Sample<'_> {
    /// The 8-byte word at `addr` in the copied stack.
    fn read(&self, addr: u64) -> Option<u64> {
        let off = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        let word = self.bytes.get(off..off.checked_add(8)?)?;
        Some(u64::from_le_bytes(word.try_into().ok()?))
    }
}

struct Ours {
    pcs: Vec<u64>,
    trust: Vec<Trust>,
    stop: StopReason,
}

struct Theirs {
    frames: Vec<u64>,
    /// framehop's registers at each frame (`regs[0]` the sample's).
    regs: Vec<UnwindRegsX86_64>,
    end: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Explained {
    TrampolineFramehopStops,
    TrampolineFramehopFramePointer,
    FramehopStopsBeforeOutermost,
    FramehopPastOutermost,
    NoCfiModule,
}

impl Explained {
    fn describe(self) -> &'static str {
        match self {
            Explained::TrampolineFramehopStops => {
                "signal trampoline: framehop's walk ends at __restore_rt or the frame after it \
                 (it cannot evaluate the CFA expression with deref)"
            }
            Explained::TrampolineFramehopFramePointer => {
                "signal trampoline: framehop cannot evaluate __restore_rt's CFA expression (deref) \
                 and goes on by its frame-pointer fallback from there"
            }
            Explained::FramehopStopsBeforeOutermost => {
                "outermost: framehop stops before the thread/process start frames"
            }
            Explained::FramehopPastOutermost => {
                "outermost: framehop yields frames past our end at the thread/process start"
            }
            Explained::NoCfiModule => {
                "a frame before the difference is in a module without CFI (frame-pointer fallbacks)"
            }
        }
    }
}

enum Verdict {
    Identical,
    Explained(Explained),
    Genuine(String),
}

fn short(name: &str) -> &str {
    name.rsplit("::").next().unwrap_or(name)
}

struct Context<'a> {
    sym: &'a Symbolizer,
    cfi: &'a [CfiModule],
}

impl Context<'_> {
    /// The name of frame `i` (callers at return address - 1).
    /// The trampoline's return address is its first instruction, so for it `addr - 1` names
    /// whatever precedes `__restore_rt` (glibc's FDE starts one byte early for that reason).
    fn frame_name(&self, i: usize, addr: u64) -> String {
        if i > 0 && self.is_trampoline(i, addr) {
            return "__restore_rt (signal trampoline)".to_string();
        }
        self.sym
            .name(if i == 0 { addr } else { addr.wrapping_sub(1) })
    }

    fn module_of(&self, addr: u64) -> Option<&CfiModule> {
        self.cfi.iter().find(|m| m.start <= addr && addr < m.end)
    }

    /// True if frame `i` at `addr` is glibc's `__restore_rt` (for callers: the return address
    /// the kernel pushed is the trampoline's first instruction).
    fn is_trampoline(&self, i: usize, addr: u64) -> bool {
        if self.sym.name(addr) == "__restore_rt" {
            return true;
        }
        if i == 0 {
            return false;
        }
        match self.module_of(addr) {
            Some(m) if addr + SIGRETURN_CODE.len() as u64 <= m.end => {
                // SAFETY: `[addr, addr + 9)` lies in an executable segment of a loaded module,
                // which is mapped readable for as long as the module stays loaded.
                let code =
                    unsafe { std::slice::from_raw_parts(addr as *const u8, SIGRETURN_CODE.len()) };
                code == SIGRETURN_CODE
            }
            _ => false,
        }
    }

    /// True if the rule for frame `i` (looked up at its PC, or return address - 1) comes from an
    /// FDE.
    fn frame_has_cfi(&self, i: usize, addr: u64) -> bool {
        let lookup = if i == 0 { addr } else { addr.wrapping_sub(1) };
        self.module_of(lookup).is_some_and(|m| m.covers(lookup))
    }

    /// Compares our walk of sample `s` with framehop's. `restart` walks the sample with framehop
    /// from other registers (a context saved in a signal frame).
    fn classify(
        &self,
        s: &Sample,
        ours: &Ours,
        theirs: &Theirs,
        restart: &mut dyn FnMut(Regs) -> Theirs,
        tt: &mut TrampolineTally,
    ) -> Verdict {
        let (o, f) = (&ours.pcs, &theirs.frames);
        let common = o.len().min(f.len());
        let d = (0..common).find(|&i| o[i] != f[i]).unwrap_or(common);
        if d == common && o.len() == f.len() {
            return Verdict::Identical;
        }
        // Frames up to and including a trampoline get no excuse from it (they fall through to
        // the checks below); only a difference past it does.
        let trampoline = (0..o.len()).find(|&i| self.is_trampoline(i, o[i]));
        if let Some(tr) = trampoline.filter(|&tr| d > tr) {
            return self.classify_past_trampoline(s, ours, theirs, tr, restart, tt);
        }
        let outermost = |i: usize, a: u64| OUTERMOST.contains(&short(&self.frame_name(i, a)));
        if d == common {
            if f.len() < o.len() {
                if ours.stop.is_complete() && (d..o.len()).all(|i| outermost(i, o[i])) {
                    return Verdict::Explained(Explained::FramehopStopsBeforeOutermost);
                }
                return Verdict::Genuine(format!(
                    "framehop stopped after {} frames ({}) where ours went on to {} frames",
                    f.len(),
                    theirs.end,
                    o.len()
                ));
            }
            if ours.stop.is_complete() && o.last().is_some_and(|&a| outermost(o.len() - 1, a)) {
                return Verdict::Explained(Explained::FramehopPastOutermost);
            }
            return Verdict::Genuine(format!(
                "ours stopped after {} frames ({:?}) where framehop went on to {} frames",
                o.len(),
                ours.stop,
                f.len()
            ));
        }
        // A frame before the difference in a module without any CFI: both fall back to
        // frame pointers, each its own way.
        let lookup = |i: usize| if i == 0 { f[i] } else { f[i].wrapping_sub(1) };
        if (0..d).any(|i| !self.module_of(lookup(i)).is_some_and(CfiModule::has_cfi)) {
            return Verdict::Explained(Explained::NoCfiModule);
        }
        // Inside modules with CFI, an address that no FDE covers (a linker-made PLT stub, an
        // assembly routine without CFI directives) is not an excuse: framehop's guess for it
        // (return address at [sp] in frame 0, frame pointer otherwise) is then the better one.
        let uncovered: Vec<String> = (0..d)
            .filter(|&i| !self.frame_has_cfi(i, f[i]))
            .map(|i| format!("frame {i} ({}) has no FDE", self.frame_name(i, f[i])))
            .collect();
        Verdict::Genuine(format!(
            "frame {d} differs: ours {:#x} ({}), framehop {:#x} ({}); frames 0..{d} agree, are \
             in modules with CFI, and no signal frame was crossed{}",
            o[d],
            self.frame_name(d, o[d]),
            f[d],
            self.frame_name(d, f[d]),
            if uncovered.is_empty() {
                String::new()
            } else {
                format!(" ({})", uncovered.join(", "))
            }
        ))
    }

    /// A difference past the trampoline at frame `tr`, every frame up to it identical. Explained
    /// only if all of these hold:
    /// - our frame `tr + 1` is the PC the kernel saved in the signal frame's `ucontext_t` (at
    ///   framehop's SP for frame `tr`, where `__restore_rt` finds it);
    /// - framehop's own walk either ends at `tr + 1` at the latest, or its frame `tr + 1` is what
    ///   its frame-pointer fallback gives there (`[bp + 8]`, SP `bp + 16`): framehop cannot
    ///   evaluate `__restore_rt`'s CFA expression, which reads memory;
    /// - framehop, restarted from the saved context (PC, SP, FP), walks the rest of the stack
    ///   as we do: identical, or different only in an explained way.
    fn classify_past_trampoline(
        &self,
        s: &Sample,
        ours: &Ours,
        theirs: &Theirs,
        tr: usize,
        restart: &mut dyn FnMut(Regs) -> Theirs,
        tt: &mut TrampolineTally,
    ) -> Verdict {
        let (o, f) = (&ours.pcs, &theirs.frames);
        let frame_sp = theirs.regs[tr].sp();
        let saved = |reg: c_int| s.read(frame_sp.wrapping_add(saved_greg_offset(reg)));
        let (Some(pc), Some(sp), Some(fp)) = (
            saved(libc::REG_RIP),
            saved(libc::REG_RSP),
            saved(libc::REG_RBP),
        ) else {
            return Verdict::Genuine(format!(
                "frame {tr} is __restore_rt, but its saved context at sp {frame_sp:#x} is outside \
                 the copied stack"
            ));
        };
        if o.get(tr + 1) != Some(&pc) {
            return Verdict::Genuine(format!(
                "past __restore_rt (frame {tr}) ours has {:x?}, where the signal frame saved pc \
                 {pc:#x}",
                o.get(tr + 1)
            ));
        }
        tt.resumed_at_saved_pc += 1;
        let class = if f.len() <= tr + 2 {
            Explained::TrampolineFramehopStops
        } else {
            let bp = theirs.regs[tr].bp();
            let fp_step = s.read(bp.wrapping_add(8)) == Some(f[tr + 1])
                && theirs.regs[tr + 1].sp() == bp.wrapping_add(16);
            if !fp_step {
                return Verdict::Genuine(format!(
                    "past __restore_rt (frame {tr}) framehop has {:#x}, neither the end of its walk \
                     nor its frame-pointer fallback (bp {bp:#x})",
                    f[tr + 1]
                ));
            }
            // framehop's frames from there, and how many of them are ours too (in order).
            let mut ours_after = o[tr + 1..].iter();
            tt.framehop_fp_frames += f.len() - (tr + 1);
            tt.framehop_fp_frames_ours += f[tr + 1..]
                .iter()
                .filter(|a| ours_after.any(|b| b == *a))
                .count();
            Explained::TrampolineFramehopFramePointer
        };
        let rest = restart(Regs { pc, sp, fp });
        let ours_rest = Ours {
            pcs: o[tr + 1..].to_vec(),
            trust: ours.trust[tr + 1..].to_vec(),
            stop: ours.stop,
        };
        let n = ours_rest.pcs.len().min(rest.frames.len());
        tt.after_compared += n;
        tt.after_identical += (0..n)
            .filter(|&i| ours_rest.pcs[i] == rest.frames[i])
            .count();
        match self.classify(s, &ours_rest, &rest, restart, tt) {
            Verdict::Identical => tt.after_all_identical += 1,
            Verdict::Explained(e) => *tt.after_explained.entry(e).or_default() += 1,
            Verdict::Genuine(why) => {
                return Verdict::Genuine(format!(
                    "past __restore_rt (frame {tr}), against framehop restarted from the saved \
                     context (frames counted from {}): {why}",
                    tr + 1
                ))
            }
        }
        Verdict::Explained(class)
    }

    fn dump(&self, s: &Sample, ours: &Ours, theirs: &Theirs) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "  sample {} [{}] pc={:#x} sp={:#x} fp={:#x} stack={:#x}+{:#x} in_usr1={}",
            s.index,
            WORKLOADS[s.kind],
            s.regs.pc,
            s.regs.sp,
            s.regs.fp,
            s.base,
            s.bytes.len(),
            s.in_usr1
        );
        let _ = writeln!(
            out,
            "  ours: {} frames, stop {:?}; framehop: {} frames, end {}",
            ours.pcs.len(),
            ours.stop,
            theirs.frames.len(),
            theirs.end
        );
        for i in 0..ours.pcs.len().max(theirs.frames.len()) {
            let o = ours.pcs.get(i).copied();
            let f = theirs.frames.get(i).copied();
            let mark = if o == f { ' ' } else { '!' };
            let col = |a: Option<u64>| {
                a.map_or_else(
                    || "-".to_string(),
                    |a| {
                        let cfi = if self.frame_has_cfi(i, a) {
                            ""
                        } else {
                            " [no FDE]"
                        };
                        format!("{a:#014x} {}{cfi}", self.frame_name(i, a))
                    },
                )
            };
            let trust = ours
                .trust
                .get(i)
                .map_or(String::new(), |t| format!("{t:?}"));
            let _ = writeln!(out, "  {mark}{i:3} {trust:>12} {:<70} | {}", col(o), col(f));
        }
        out
    }
}

fn unwind_ours(s: &Sample) -> Ours {
    let mut pcs = [0u64; MAX_FRAMES];
    let mut trust = [Trust::Context; MAX_FRAMES];
    let r = unwind_in_process::unwind_copy(
        s.regs,
        &StackImage::new(s.base, s.bytes),
        &mut pcs,
        Some(&mut trust),
    )
    .expect("unwind_copy on the registered main thread");
    Ours {
        pcs: pcs[..r.frames].to_vec(),
        trust: trust[..r.frames].to_vec(),
        stop: r.stop,
    }
}

/// framehop's walk of sample `s`, from `regs` (the sample's registers, or a saved context in its
/// stack): [`Unwinder::unwind_frame`] called the way framehop's own `iter_frames` calls it, with
/// framehop's registers kept at every frame.
fn unwind_framehop(
    unwinder: &UnwinderX86_64<Vec<u8>, MustNotAllocateDuringUnwind>,
    cache: &mut CacheX86_64<MustNotAllocateDuringUnwind>,
    s: &Sample,
    regs: Regs,
) -> Theirs {
    let mut read_stack = |addr: u64| s.read(addr).ok_or(());
    let mut fh_regs = UnwindRegsX86_64::new(regs.pc, regs.sp, regs.fp);
    let mut address = FrameAddress::InstructionPointer(regs.pc);
    let mut frames = vec![regs.pc];
    let mut frame_regs = vec![fh_regs];
    let end = loop {
        if frames.len() >= MAX_FRAMES {
            break "frame limit".to_string();
        }
        match unwinder.unwind_frame(address, &mut fh_regs, cache, &mut read_stack) {
            Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                Some(a) => {
                    address = a;
                    frames.push(ra);
                    frame_regs.push(fh_regs);
                }
                None => break format!("error: {:?}", framehop::Error::ReturnAddressIsNull),
            },
            Ok(None) => break "end of stack".to_string(),
            Err(e) => break format!("error: {e:?}"),
        }
    };
    Theirs {
        frames,
        regs: frame_regs,
        end,
    }
}

/// Offset, from the start of the `ucontext_t` a signal frame holds, of saved register `reg`
/// (`libc::REG_*`). At `__restore_rt` the stack pointer points at that `ucontext_t`.
fn saved_greg_offset(reg: c_int) -> u64 {
    let gregs = std::mem::offset_of!(libc::ucontext_t, uc_mcontext.gregs);
    (gregs + reg as usize * std::mem::size_of::<libc::greg_t>()) as u64
}

/// What is compared in samples whose stack (ours) crosses a signal trampoline.
#[derive(Default)]
struct TrampolineTally {
    /// Samples with a `__restore_rt` frame in our walk.
    samples: usize,
    /// Frames up to and including `__restore_rt` that framehop has too, and how many are
    /// identical (all must be).
    before_compared: usize,
    before_identical: usize,
    /// Samples whose frame after `__restore_rt` is the PC saved in the signal frame.
    resumed_at_saved_pc: usize,
    /// Frames past `__restore_rt`, ours against framehop restarted from the saved context
    /// (where both have one), and how many are identical.
    after_compared: usize,
    after_identical: usize,
    /// Samples whose frames past `__restore_rt` are all identical to framehop's restarted
    /// walk; the others by the explanation of their difference.
    after_all_identical: usize,
    after_explained: BTreeMap<Explained, usize>,
    /// Frames framehop's own walk yields past `__restore_rt` by its frame-pointer fallback, and
    /// how many of them are frames of ours (in order).
    framehop_fp_frames: usize,
    framehop_fp_frames_ours: usize,
}

#[derive(Default)]
struct Tally {
    samples: usize,
    identical: usize,
    explained: usize,
    genuine: usize,
    complete: usize,
    frames: usize,
    trampolines: usize,
    /// Samples with a genuine disagreement or a failed check of our stack.
    failed: usize,
}

fn main() {
    let started = Instant::now();
    let report = unwind_in_process::init().expect("unwind_in_process::init");
    println!(
        "preloaded {} modules, table generation {}",
        unwind_in_process::loaded_modules().len(),
        report.generation
    );

    // Storage, allocated and touched before any signal is sent.
    SLOTS.get_or_init(|| (0..MAX_SAMPLES).map(|_| Slot::new()).collect());
    let stacks: &'static mut [u8] = vec![0xa5u8; MAX_SAMPLES * STACK_BYTES].leak();
    STACKS.store(stacks.as_mut_ptr(), Ordering::Release);

    install(
        libc::SIGPROF,
        on_sigprof as *const () as usize,
        libc::SA_SIGINFO | libc::SA_RESTART,
    );
    install(
        libc::SIGUSR1,
        on_sigusr1 as *const () as usize,
        libc::SA_RESTART,
    );

    let tids: &'static [AtomicI32; 3] = Box::leak(Box::new([const { AtomicI32::new(0) }; 3]));
    let workers: Vec<_> = (0..WORKLOADS.len())
        .map(|kind| {
            std::thread::Builder::new()
                .name(WORKLOADS[kind].to_string())
                .spawn(move || {
                    unwind_in_process::register_thread().expect("register_thread");
                    KIND.with(|k| k.set(kind));
                    // SAFETY: gettid has no preconditions.
                    tids[kind].store(unsafe { libc::gettid() }, Ordering::Release);
                    let r = match kind {
                        RECURSION => recursion_worker(),
                        QSORT => qsort_worker(),
                        _ => signal_worker(),
                    };
                    KIND.with(|k| k.set(usize::MAX));
                    unwind_in_process::unregister_thread();
                    r
                })
                .expect("spawn")
        })
        .collect();
    while tids.iter().any(|t| t.load(Ordering::Acquire) == 0) {
        std::thread::sleep(Duration::from_millis(1));
    }

    // The sampler: SIGPROF to each worker that still needs samples, about every millisecond.
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let sampling = Instant::now();
    let mut sent = 0u64;
    loop {
        let needy: Vec<usize> = (0..WORKLOADS.len())
            .filter(|&k| TAKEN[k].load(Ordering::Relaxed) < QUOTA)
            .collect();
        if needy.is_empty() || sampling.elapsed() > SAMPLING_TIMEOUT {
            break;
        }
        for k in needy {
            // SAFETY: sends SIGPROF, whose handler is installed, to a live worker of this process.
            if unsafe { libc::tgkill(pid, tids[k].load(Ordering::Acquire), libc::SIGPROF) } == 0 {
                sent += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let sampling_time = sampling.elapsed();
    STOP.store(true, Ordering::Relaxed);
    for w in workers {
        black_box(w.join().expect("worker panicked"));
    }
    let capture_failed = CAPTURE_FAILED.load(Ordering::Relaxed);
    println!(
        "sampling: {sent} SIGPROF sent in {:.2} s, {} samples taken, {capture_failed} capture \
         errors",
        sampling_time.as_secs_f64(),
        NEXT.load(Ordering::Relaxed).min(MAX_SAMPLES)
    );

    // Collect the samples.
    let slots = SLOTS.get().expect("slots");
    let stacks: &[u8] = stacks;
    let samples: Vec<Sample> = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.ready.load(Ordering::Acquire))
        .map(|(i, s)| Sample {
            index: i,
            kind: s.kind.load(Ordering::Relaxed),
            in_usr1: s.in_usr1.load(Ordering::Relaxed),
            regs: Regs {
                pc: s.pc.load(Ordering::Relaxed),
                sp: s.sp.load(Ordering::Relaxed),
                fp: s.fp.load(Ordering::Relaxed),
            },
            base: s.base.load(Ordering::Relaxed),
            bytes: &stacks[i * STACK_BYTES..][..s.len.load(Ordering::Relaxed)],
        })
        .collect();

    // framehop, with a module per loaded module.
    let modules = unwind_in_process::loaded_modules();
    let cfi: Vec<CfiModule> = modules.iter().map(cfi_module).collect();
    let mut unwinder: UnwinderX86_64<Vec<u8>, MustNotAllocateDuringUnwind> = UnwinderX86_64::new();
    for m in &cfi {
        println!(
            "module {:#x}..{:#x} bias {:#x} {}{}",
            m.start,
            m.end,
            m.bias,
            m.name,
            if m.has_cfi() {
                ""
            } else {
                "  [no .eh_frame/.eh_frame_hdr: frame pointers only]"
            }
        );
        unwinder.add_module(m.framehop_module());
    }
    let mut cache = CacheX86_64::<MustNotAllocateDuringUnwind>::new_in();
    let sym = unwind_in_process::symbolizer();
    let cx = Context {
        sym: &sym,
        cfi: &cfi,
    };

    let mut tally: [Tally; 3] = Default::default();
    let mut tt = TrampolineTally::default();
    let mut reasons: BTreeMap<Explained, [usize; 3]> = BTreeMap::new();
    let mut examples: BTreeMap<Explained, String> = BTreeMap::new();
    let mut stops: BTreeMap<String, usize> = BTreeMap::new();
    let mut framehop_ends: BTreeMap<String, usize> = BTreeMap::new();
    let mut fp_frames = 0usize;
    let mut genuine_dumps: Vec<String> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut rec_names_seen = [false; 4];
    let mut deep_recursion = 0usize;
    let mut mixed_rust_c = 0usize;
    let mut signal_through = 0usize;

    for s in &samples {
        let ours = unwind_ours(s);
        let theirs = unwind_framehop(&unwinder, &mut cache, s, s.regs);
        let names: Vec<String> = ours
            .pcs
            .iter()
            .enumerate()
            .map(|(i, &a)| cx.frame_name(i, a))
            .collect();
        let shorts: Vec<&str> = names.iter().map(|n| short(n)).collect();
        let t = &mut tally[s.kind];
        t.samples += 1;
        t.frames += ours.pcs.len();
        if ours.stop.is_complete() {
            t.complete += 1;
        }
        *stops.entry(format!("{:?}", ours.stop)).or_default() += 1;
        *framehop_ends.entry(theirs.end.clone()).or_default() += 1;
        fp_frames += ours
            .trust
            .iter()
            .filter(|&&t| t == Trust::FramePointer)
            .count();

        // Checks of our stack alone.
        let mut problems: Vec<String> = Vec::new();
        let ends_at_thread_start = shorts.last().is_some_and(|n| THREAD_START.contains(n));
        let trampoline = (0..ours.pcs.len()).find(|&i| cx.is_trampoline(i, ours.pcs[i]));
        if let Some(tr) = trampoline {
            t.trampolines += 1;
            tt.samples += 1;
            let n = (tr + 1).min(theirs.frames.len());
            tt.before_compared += n;
            tt.before_identical += (0..n).filter(|&i| ours.pcs[i] == theirs.frames[i]).count();
        }
        match s.kind {
            RECURSION => {
                let rec: Vec<usize> = shorts
                    .iter()
                    .filter_map(|n| REC_CYCLE.iter().position(|r| r == n))
                    .collect();
                for &r in &rec {
                    rec_names_seen[r] = true;
                }
                if rec.len() >= 21 {
                    deep_recursion += 1;
                }
                // Callers follow callees: after rec_b (innermost first) comes rec_a, and so on.
                for w in shorts.windows(2) {
                    let (callee, caller) = (
                        REC_CYCLE.iter().position(|r| *r == w[0]),
                        REC_CYCLE.iter().position(|r| *r == w[1]),
                    );
                    if let (Some(callee), Some(caller)) = (callee, caller) {
                        if (caller + 1) % 4 != callee {
                            problems.push(format!("{} called by {}", w[0], w[1]));
                        }
                    }
                }
                if !ends_at_thread_start {
                    problems.push("does not end at the thread start (clone3/clone)".into());
                }
            }
            QSORT => {
                let cmp = shorts.iter().position(|n| *n == "compare_spinning");
                let round = shorts.iter().position(|n| *n == "qsort_round");
                if let (Some(c), Some(r)) = (cmp, round) {
                    let libc_between = (c + 1..r).any(|i| {
                        cx.module_of(ours.pcs[i].wrapping_sub(1))
                            .is_some_and(|m| m.name.contains("libc.so"))
                    });
                    if libc_between {
                        mixed_rust_c += 1;
                    }
                }
                if !ends_at_thread_start {
                    problems.push("does not end at the thread start (clone3/clone)".into());
                }
            }
            _ => {
                if s.in_usr1 && trampoline.is_none() {
                    problems.push("inside the SIGUSR1 handler but no __restore_rt frame".into());
                }
                if let Some(tr) = trampoline {
                    let below = &shorts[tr + 1..];
                    if below.contains(&"signal_worker") && ends_at_thread_start {
                        signal_through += 1;
                    } else {
                        problems.push(
                            "did not continue through __restore_rt to signal_worker and the \
                             thread start"
                                .into(),
                        );
                    }
                }
            }
        }
        if !ours.stop.is_complete() && !problems.is_empty() {
            problems.push(format!("our unwind stopped with {:?}", ours.stop));
        }

        let mut restart = |regs: Regs| unwind_framehop(&unwinder, &mut cache, s, regs);
        let verdict = cx.classify(s, &ours, &theirs, &mut restart, &mut tt);
        if matches!(verdict, Verdict::Genuine(_)) || !problems.is_empty() {
            t.failed += 1;
        }
        match verdict {
            Verdict::Identical => t.identical += 1,
            Verdict::Explained(e) => {
                t.explained += 1;
                reasons.entry(e).or_default()[s.kind] += 1;
                examples
                    .entry(e)
                    .or_insert_with(|| cx.dump(s, &ours, &theirs));
            }
            Verdict::Genuine(why) => {
                t.genuine += 1;
                genuine_dumps.push(format!(
                    "GENUINE DISAGREEMENT: {why}\n{}",
                    cx.dump(s, &ours, &theirs)
                ));
            }
        }
        if !problems.is_empty() {
            failures.push(format!(
                "sample {} [{}]: {}\n{}",
                s.index,
                WORKLOADS[s.kind],
                problems.join("; "),
                cx.dump(s, &ours, &theirs)
            ));
        }
    }

    // Summary.
    let total: usize = tally.iter().map(|t| t.samples).sum();
    println!();
    println!(
        "{:<16} {:>7} {:>9} {:>9} {:>7} {:>9} {:>11} {:>11}",
        "workload",
        "samples",
        "identical",
        "explained",
        "genuine",
        "complete",
        "mean frames",
        "__restore_rt"
    );
    for (k, t) in tally.iter().enumerate() {
        println!(
            "{:<16} {:>7} {:>9} {:>9} {:>7} {:>9} {:>11.1} {:>11}",
            WORKLOADS[k],
            t.samples,
            t.identical,
            t.explained,
            t.genuine,
            t.complete,
            t.frames as f64 / t.samples.max(1) as f64,
            t.trampolines
        );
    }
    let identical: usize = tally.iter().map(|t| t.identical).sum();
    let explained: usize = tally.iter().map(|t| t.explained).sum();
    let genuine: usize = tally.iter().map(|t| t.genuine).sum();
    let complete: usize = tally.iter().map(|t| t.complete).sum();
    println!(
        "total            {total:>7} {identical:>9} {explained:>9} {genuine:>7} {complete:>9}"
    );
    println!("\nexplained differences (per workload: recursion/qsort/sigusr1):");
    if reasons.is_empty() {
        println!("  none");
    }
    for (e, n) in &reasons {
        println!(
            "  {:>4}  ({}/{}/{})  {}",
            n.iter().sum::<usize>(),
            n[0],
            n[1],
            n[2],
            e.describe()
        );
    }
    println!("our stop reasons: {stops:?}");
    println!("framehop ends: {framehop_ends:?}");
    println!("our frames found by the frame-pointer fallback: {fp_frames}");
    println!(
        "checks: recursion samples with >= 21 rec_* frames: {deep_recursion}/{}; qsort samples \
         Rust->libc->Rust: {mixed_rust_c}/{}; sigusr1 samples unwound through __restore_rt to \
         the thread start: {signal_through}/{}",
        tally[RECURSION].samples, tally[QSORT].samples, tally[SIGNAL].samples
    );
    let past_trampoline: usize = [
        Explained::TrampolineFramehopStops,
        Explained::TrampolineFramehopFramePointer,
    ]
    .iter()
    .filter_map(|e| reasons.get(e))
    .flatten()
    .sum();
    println!(
        "signal trampoline: {} samples cross __restore_rt; frames up to and including it: \
         {}/{} identical; {past_trampoline} samples differ past it, of which {} resume at the PC \
         saved in the signal frame; past it, ours against framehop restarted from the saved \
         context: {}/{} frames identical, {} samples entirely, others explained {:?}; framehop's \
         own walk past it (frame-pointer fallback): {} frames, {} of them ours",
        tt.samples,
        tt.before_identical,
        tt.before_compared,
        tt.resumed_at_saved_pc,
        tt.after_identical,
        tt.after_compared,
        tt.after_all_identical,
        tt.after_explained,
        tt.framehop_fp_frames,
        tt.framehop_fp_frames_ours
    );
    for (e, dump) in &examples {
        println!("\nexample ({}):\n{dump}", e.describe());
    }

    // Global checks.
    let mut global: Vec<String> = Vec::new();
    if total < 300 {
        global.push(format!("only {total} samples (want at least 300)"));
    }
    for (k, t) in tally.iter().enumerate() {
        if t.samples < QUOTA / 2 {
            global.push(format!("only {} samples of {}", t.samples, WORKLOADS[k]));
        }
    }
    if complete * 100 < total * 99 {
        global.push(format!(
            "ours reached the end of the stack in only {complete}/{total} samples (want 99 %)"
        ));
    }
    if deep_recursion * 10 < tally[RECURSION].samples * 9 {
        global.push(format!(
            "only {deep_recursion}/{} recursion samples show the recursion (want 90 %)",
            tally[RECURSION].samples
        ));
    }
    if rec_names_seen.contains(&false) {
        global.push(format!(
            "not every recursion function was seen: {rec_names_seen:?}"
        ));
    }
    if mixed_rust_c < 10 {
        global.push(format!(
            "only {mixed_rust_c} qsort samples have Rust frames above libc frames above Rust \
             frames"
        ));
    }
    if signal_through < 20 {
        global.push(format!(
            "only {signal_through} samples inside the SIGUSR1 handler were unwound through \
             __restore_rt"
        ));
    }
    if tt.before_identical != tt.before_compared {
        global.push(format!(
            "only {}/{} frames up to and including __restore_rt are identical",
            tt.before_identical, tt.before_compared
        ));
    }
    if tt.after_identical != tt.after_compared {
        global.push(format!(
            "only {}/{} frames past __restore_rt are identical to framehop's walk restarted from \
             the saved context",
            tt.after_identical, tt.after_compared
        ));
    }
    if past_trampoline < 20 || tt.after_compared < past_trampoline {
        global.push(format!(
            "{past_trampoline} samples differ past __restore_rt, {} frames there compared with \
             framehop restarted from the saved context (want at least 20 samples, a frame each)",
            tt.after_compared
        ));
    }
    if capture_failed > 0 {
        global.push(format!("{capture_failed} captures failed"));
    }

    for d in genuine_dumps.iter().take(8) {
        println!("\n{d}");
    }
    for f in failures.iter().take(8) {
        println!("\nFAILED CHECK: {f}");
    }
    for g in &global {
        println!("FAILED: {g}");
    }
    let failed: usize = tally.iter().map(|t| t.failed).sum();
    println!("\nrun time {:.1} s", started.elapsed().as_secs_f64());
    println!(
        "framehop differential: {} passed, {} failed",
        total - failed,
        failed
    );
    assert_eq!(genuine, 0, "genuine disagreements with framehop");
    assert!(
        failures.is_empty(),
        "{} samples failed checks",
        failures.len()
    );
    assert!(global.is_empty(), "{}", global.join("; "));
}
