//! The direct-mapped rule cache: 509 slots keyed by lookup address, stamped with the generation
//! of the table the rule came from.
//!
//! A slot holds what the loop does at its address ([`Cached`]): a copy of a simple rule in the
//! architecture's decoded form ([`crate::Arch::Simple`], never a pointer into a table), where a
//! rarer rule is in the table ([`RuleRef`]), a stop, or "no rule here". An entry whose
//! generation differs from the current table's is treated as empty, so publishing a new table
//! invalidates every cache without touching it.
//!
//! 509 slots is the size Valgrind, LUL and framehop settled on. They index with `addr % 509`;
//! here the slot is a Fibonacci hash scaled to 509 by a multiply and a shift, because the slot
//! computation sits on the unwind loop's chain of dependent loads and a division would lengthen
//! it.
//!
//! Behind the slots are two more levels, because real programs' return addresses do not fit
//! 509 slots and a signal handler meets most addresses for the first time:
//! - a second level of [`SECOND_LEVEL_SETS`] sets of [`SECOND_LEVEL_WAYS`] entries holding
//!   every answer the table gave, probed out of line when a slot misses; a hit moves to the
//!   front of its set, a new entry goes in front;
//! - an extent level of [`EXTENT_SETS`] sets of [`EXTENT_WAYS`] extents (start, length,
//!   answer), the set picked by the address's granule of 1 KiB ([`EXTENT_GRANULE_BITS`]): the
//!   table's answer is the same for every address of an extent, so an answer kept with its
//!   extent answers addresses never looked up before. Frame 0's extent set is prefetched with
//!   its second-level set at the walk's start.
//!
//! Both are allocated once, zeroed, when the cache is made (never in a handler), their memory
//! committed as sets are first used, and stamped with the cache's epoch, so that a new table
//! (or [`Cache::clear`]) empties them without writing them.
//!
//! In a handler every line a walk reads is cold, so the layout counts lines: the slots start
//! the cache and never straddle two lines, the fields a walk touches besides them share one,
//! and a second-level set is one line (two on ARM), its epoch beside it.
//!
//! The sizes, the hash, the replacement order and the levels were chosen by measurement on
//! real programs' sequences; the figures, and the designs tried and dropped (an xor-fold hash,
//! a victim cache), are in BENCHMARKS.md, "Design decisions".

use alloc::boxed::Box;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use crate::arch::Arch;
use crate::stop::StopReason;
use crate::table::RuleTable;

pub use crate::table::RuleRef;

/// The number of slots.
pub const CACHE_SLOTS: usize = 509;

/// A rule as a cache slot holds it: what the unwind loop does at the address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cached<S> {
    /// A simple rule ([`Arch::Simple`]), applied inline by [`Arch::step_simple`].
    Simple(S),
    /// Any other rule, applied from the table by [`Arch::step_rule`].
    Table(RuleRef),
    /// The walk ends at this frame ([`Arch::stop`]).
    Stop(StopReason),
    /// No rule covers the address, which is in a module's code: the fallbacks apply
    /// ([`Arch::step_without_rule`]).
    NoRule,
    /// No module of the table has code at the address. For frame 0 (from the registers) the
    /// fallbacks apply; a caller here ends the walk unwritten ([`StopReason::OutsideModules`]).
    Outside,
}

/// A rule's form ready for the cache ([`TableRule::ready`](crate::table::TableRule::ready)),
/// made when its module's table is built: the [`Cached`] form itself, except that a rule applied
/// from the table ([`Cached::Table`]) has no place yet (its module's index is known only in a
/// published table), which a miss fills in. A miss copies it and fills in that place, which
/// is cheaper than converting a separate enum into [`Cached`] field by field (BENCHMARKS.md,
/// "Design decisions").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ready<S>(Cached<S>);

impl<S: Copy> Ready<S> {
    /// The ready form of `rule`, for architecture `A` (whose [`Arch::Rule`]'s
    /// [`TableRule::ready`](crate::table::TableRule::ready) this is).
    pub fn of<A: Arch<Simple = S>>(rule: &A::Rule) -> Self {
        Ready(if let Some(stop) = A::stop(rule) {
            Cached::Stop(stop)
        } else if let Some(simple) = A::simple(rule) {
            Cached::Simple(simple)
        } else {
            Cached::Table(RuleRef {
                module: 0,
                index: 0,
            })
        })
    }

    /// The simple form, if the rule has one ([`Arch::simple`]).
    pub fn simple(&self) -> Option<S> {
        match self.0 {
            Cached::Simple(simple) => Some(simple),
            _ => None,
        }
    }
}

impl<S: Copy> Cached<S> {
    /// The cached form of a rule with ready form `ready`, entry `at` of its table.
    #[inline]
    fn of(ready: &Ready<S>, at: RuleRef) -> Self {
        let mut cached = ready.0;
        if let Cached::Table(place) = &mut cached {
            *place = at;
        }
        cached
    }
}

/// The slot of `addr`: Fibonacci hashing of its low 32 bits (multiply by -2^32 / phi), the
/// product scaled to the 509 slots by a multiply and a shift (Lemire's "fastrange", in place of
/// a modulo). Two multiplies on every architecture (a 64-bit one is several instructions on
/// 32-bit ARM, so only the low 32 bits are hashed); it spreads structured sets of return
/// addresses (functions at aligned offsets, call sites at similar offsets) without the
/// systematic collisions of a fold. Addresses 4 GiB apart share a slot, which costs only a miss.
#[cfg(test)]
fn slot_of(addr: u64) -> usize {
    slot_offset::<u8>(addr)
}

/// `slot_of(addr)` times the size of a slot, `E`: the slot's byte offset in the array, from the
/// same two multiplies and shift and a mask (`floor(16x) & !15 = 16 floor(x)`, for a power-of-two
/// size), where an index scaled by 16 would take a further instruction in the loop (x86_64
/// scales an index by at most 8). For a size of 1 it is the slot itself.
#[inline(always)]
fn slot_offset<E>(addr: u64) -> usize {
    const { assert!(core::mem::size_of::<E>().is_power_of_two()) };
    let size = core::mem::size_of::<E>();
    (((u64::from(fibonacci(addr)) * (CACHE_SLOTS * size) as u64) >> 32) as usize) & !(size - 1)
}

/// The low 32 bits of `addr` times -2^32 / phi (modulo 2^32: 2^32 less the prime 0x9e37_79b1
/// nearest 2^32 / phi, the same spread): as a 64-bit immediate the constant fits x86_64's
/// signed 32 bits, where LLVM, which widens the multiply, kept 0x9e37_79b1 in a register and
/// reloaded it every frame.
#[inline(always)]
fn fibonacci(addr: u64) -> u32 {
    (addr as u32).wrapping_mul(0x61c8_864f)
}

/// A slot: the rule first, at the slot's address, so that the unwind loop reads it with the
/// same base register as the key, without an addition (`repr(C)` keeps that order).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Entry<S> {
    rule: Cached<S>,
    addr: u64,
}

/// Sets of the second level ([module docs](self)): a power of two.
pub const SECOND_LEVEL_SETS: usize = 4096;

/// Entries per set of the second level.
pub const SECOND_LEVEL_WAYS: usize = 4;

/// A set of the second level: its entries' addresses and rules, valid only if its epoch (in
/// [`SecondLevel::epochs`]) is the cache's. All zeros is a valid (empty, stale) set, so the
/// second level is allocated zeroed and its memory is committed only as sets are used: a thread
/// that is rarely sampled costs little of it. A set is stamped with the cache's epoch when first
/// used in it, and every one of its rules written then ([`INVALID`] keys with
/// [`Cached::Outside`], the right answer at that address): a set of the current epoch has no
/// uninitialized rule.
///
/// A set is its keys and rules, line-aligned: one line on x86_64 (four 8-byte keys, four 8-byte
/// rules), two on ARM. The epochs are apart, 16 KiB for all the sets, and a probe reads the
/// epoch's line beside the set's (neither address depends on the other): with its epoch in it,
/// an x86_64 set was 104 bytes and spanned two or three lines.
#[repr(C, align(64))]
struct Set<S> {
    keys: [u64; SECOND_LEVEL_WAYS],
    /// Initialized in every set whose epoch is the cache's (see above).
    rules: [MaybeUninit<Cached<S>>; SECOND_LEVEL_WAYS],
}

impl<S: Copy> Clone for Set<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Copy> Copy for Set<S> {}

impl<S> core::fmt::Debug for Set<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Set")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// The second level: its sets and, apart, their epochs (see [`Set`]). Valid all zeros.
#[derive(Debug)]
#[repr(C)]
struct SecondLevel<S> {
    sets: [Set<S>; SECOND_LEVEL_SETS],
    /// The epoch each set was last stamped with.
    epochs: [u32; SECOND_LEVEL_SETS],
}

impl<S: Copy> Clone for SecondLevel<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Copy> Copy for SecondLevel<S> {}

/// The set of `addr`: the top bits of a 64-bit Fibonacci hash, independent of the bits that
/// pick its slot.
#[inline(always)]
fn set_of(addr: u64) -> usize {
    (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % SECOND_LEVEL_SETS
}

/// Puts `e` in front of `ways`, dropping the last.
#[inline(always)]
fn push_front<T: Copy>(ways: &mut [T; 4], e: T) {
    let [a, b, c, _] = *ways;
    *ways = [e, a, b, c];
}

/// Sets of the extent level ([module docs](self)): a power of two.
pub const EXTENT_SETS: usize = 1024;

/// Entries per set of the extent level.
pub const EXTENT_WAYS: usize = 4;

/// The extent level's sets are picked by the address's granule of `1 << EXTENT_GRANULE_BITS`
/// bytes: the addresses of one function's body share a set, where they can find the extent one
/// of them brought in.
pub const EXTENT_GRANULE_BITS: u32 = 10;

/// A set of the extent level: extents of runtime addresses (`starts[w]..starts[w] + lens[w]`)
/// and their answers, valid only if `epoch` is the cache's. The ranges and the epoch share the
/// first cache line, the answers the second. All zeros is a valid (stale) set; a set is stamped
/// with the current epoch with every length 0 (a way that answers nothing), and a way's answer
/// is written whenever its length is: a way of a current set with a length above 0 has an
/// initialized answer.
#[repr(C, align(64))]
struct ExtentSet<S> {
    starts: [u64; EXTENT_WAYS],
    lens: [u32; EXTENT_WAYS],
    epoch: u32,
    _pad: [u32; 3],
    /// Initialized in every way of positive length of a set of the cache's epoch (see above).
    rules: [MaybeUninit<Cached<S>>; EXTENT_WAYS],
}

impl<S: Copy> Clone for ExtentSet<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Copy> Copy for ExtentSet<S> {}

impl<S> core::fmt::Debug for ExtentSet<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ExtentSet")
            .field("epoch", &self.epoch)
            .field("starts", &self.starts)
            .field("lens", &self.lens)
            .finish_non_exhaustive()
    }
}

/// The extent level's sets.
type ExtentSets<S> = [ExtentSet<S>; EXTENT_SETS];

/// `T` allocated zeroed (committed by the system only when first written). `T` must be valid
/// all zeros, and not zero-sized.
fn zeroed<T>() -> Box<T> {
    let layout = core::alloc::Layout::new::<T>();
    // SAFETY: the callers' types are not zero-sized (thousands of sets of at least 36 bytes).
    let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        alloc::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `ptr` comes from the global allocator with the layout of `T`, which a `Box<T>`
    // frees with; the callers' types are valid all zeros (integers and `MaybeUninit`s).
    unsafe { Box::from_raw(ptr) }
}

/// A copy of `value` in a new allocation, written there directly (`Box::new(*value)` of a
/// level this large would build it on the stack first).
fn boxed_copy<T: Copy>(value: &T) -> Box<T> {
    let mut copy: Box<T> = zeroed();
    core::slice::from_mut(&mut *copy).copy_from_slice(core::slice::from_ref(value));
    copy
}

/// A cache's second and extent levels, for a caller that places them itself
/// ([`Cache::new_in`]). Their lines are read on a cache's misses, which a signal handler meets
/// with cold TLBs as well as cold caches: 272 KiB (x86_64) or 528 KiB (ARM) of sets and 128 or
/// 192 KiB of extents are 100 to 180 pages of 4 KiB, each a page walk to reach, and in one
/// 2 MiB page ([`Cache::new_in`] of memory so mapped) they are one.
#[repr(C)]
pub struct Levels<S> {
    second: SecondLevel<S>,
    extents: ExtentSets<S>,
}

impl<S: Copy> Clone for Levels<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Copy> Copy for Levels<S> {}

/// The [`Levels`] of a cache for architecture `A`.
pub type LevelsOf<A> = Levels<<A as Arch>::Simple>;

/// The extent set of `addr`: its granule's, by the same hash as [`set_of`].
#[inline(always)]
fn extent_set_of(addr: u64) -> usize {
    ((addr >> EXTENT_GRANULE_BITS).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % EXTENT_SETS
}

/// The way of `set` whose extent holds `addr`, if `set` is of `epoch`.
#[inline(always)]
fn extent_way<S>(set: &ExtentSet<S>, epoch: u32, addr: u64) -> Option<usize> {
    if set.epoch != epoch {
        return None;
    }
    (0..EXTENT_WAYS).find(|&w| addr.wrapping_sub(set.starts[w]) < u64::from(set.lens[w]))
}

/// What the unwinder does at `addr`, from `table` itself: a miss of every level. The module is
/// looked for first where the last miss found one (`near`, updated): a walk's misses are mostly
/// in one module, and a hit there reads that module's line instead of searching the modules'
/// starts first. Its own function, so that the benchmarks can count what a miss costs.
/// The extent of addresses that have the answer goes to `extent` as `(start, len)`, if the
/// table has one (outside every module, or past a module's last extent, `extent` is left as
/// it was).
#[cold]
#[inline(never)]
fn from_table<A: Arch>(
    table: &RuleTable<A::Rule>,
    addr: u64,
    near: &mut u16,
    extent: &mut (u64, u32),
) -> Cached<A::Simple> {
    let Some(module) = table.module_near(addr, *near) else {
        return Cached::Outside;
    };
    *near = module.index;
    let Some(e) = table.extent_in(module, addr) else {
        return Cached::NoRule;
    };
    *extent = (e.start, e.len);
    match e.rule {
        Some(found) => Cached::of(found.ready, found.at),
        None => Cached::NoRule,
    }
}

/// The key of an invalid entry. No lookup can wrongly hit it: no module contains `u64::MAX`
/// (ranges are half-open), so [`Cached::Outside`], which invalid entries hold, is its right
/// answer.
const INVALID: u64 = u64::MAX;

/// A per-thread (or per-sampler) rule cache for architecture `A`. It is `&mut` while
/// unwinding, so each signal handler must use its own.
///
/// The cache is stamped with the generation of the table its entries came from; an unwind
/// checks that stamp once and, if the table changed, invalidates every entry before its first
/// lookup. Per-frame lookups then compare only the address.
///
/// Every field a walk reads or writes besides its slots is in one line after the slots
/// (`Hot`), which the walk's first read (the generation) brings in: on a signal each line is
/// cold, and those fields spread over three lines cost two more line reads a walk. The slots
/// come first, at the cache's address, so that the loop addresses them and the cache with one
/// register (with the slots after a line of fields, the loop kept a second base and reloaded it
/// every frame: one instruction a frame).
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Cache<A: Arch> {
    entries: [Entry<A::Simple>; CACHE_SLOTS],
    hot: Hot<A::Simple>,
    /// Lookups answered by the extent level.
    extent_hits: u64,
    /// The last address in no module.
    last_outside: u64,
}

/// The fields of a [`Cache`] that walks touch besides its slots, in one line.
#[derive(Debug)]
#[repr(C, align(64))]
struct Hot<S> {
    generation: u32,
    /// Stamped on the second and extent levels' sets: a set with another epoch is stale. Never
    /// 0 once the cache has been prepared for a table (sets start at 0).
    epoch: u32,
    /// The second level (at [`set_of`] an address) and the extent level (at [`extent_set_of`]
    /// an address): in a `Box` if `owned`, else in memory lent for good ([`Cache::new_in`]).
    /// Unique to this cache either way.
    levels: NonNull<Levels<S>>,
    lookups: u64,
    misses: u64,
    /// Misses at addresses in no module of the table (code loaded after the table was built,
    /// or generated at run time).
    outside: u64,
    /// Lookups answered by the second level.
    second_hits: u64,
    /// The module of the last miss, tried first by the next ([`RuleTable::module_near`]).
    near: u16,
    /// Whether the levels are a `Box` of this cache's ([`Cache::new`]), freed with it.
    owned: bool,
}

// SAFETY: the levels are this cache's alone (owned, or lent to it for good), as with a `Box`.
unsafe impl<S: Send> Send for Hot<S> {}
// SAFETY: as above; a shared reference to the cache gives only shared access to them.
unsafe impl<S: Sync> Sync for Hot<S> {}

impl<S> Hot<S> {
    /// The levels.
    #[inline(always)]
    fn levels(&self) -> &Levels<S> {
        // SAFETY: `levels` points to levels valid for the cache's life and unique to it.
        unsafe { self.levels.as_ref() }
    }
}

/// A cache's levels, to change, from its `Hot::levels` field (borrowing that field alone, so
/// that the other fields stay writable).
#[inline(always)]
fn levels_mut<S>(levels: &mut NonNull<Levels<S>>) -> &mut Levels<S> {
    // SAFETY: as in `Hot::levels`; the field's `&mut` comes from the cache's, the only access.
    unsafe { levels.as_mut() }
}

impl<S> Drop for Hot<S> {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: owned levels came from `Box::leak` (`Cache::new`, `clone`), and are freed
            // only here, once.
            drop(unsafe { Box::from_raw(self.levels.as_ptr()) });
        }
    }
}

impl<S: Copy> Clone for Hot<S> {
    fn clone(&self) -> Self {
        Hot {
            levels: NonNull::from(Box::leak(boxed_copy(self.levels()))),
            owned: true,
            ..*self
        }
    }
}

impl<A: Arch> Default for Cache<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: Arch> Cache<A> {
    /// An empty cache: generation 0 matches no table. Allocates its second and extent levels
    /// ([`SECOND_LEVEL_SETS`] and [`EXTENT_SETS`] sets), zeroed: the system commits their pages
    /// as the cache's lookups first reach them.
    pub fn new() -> Self {
        Self::with_levels(NonNull::from(Box::leak(zeroed())), true)
    }

    /// An empty cache whose second and extent levels are `levels`, which it zeroes and never
    /// frees: for a caller that places caches itself (in memory mapped in 2 MiB pages, for
    /// one, where a signal handler's misses reach the levels without a page walk each).
    pub fn new_in(levels: &'static mut MaybeUninit<LevelsOf<A>>) -> Self {
        // SAFETY: `levels` is valid for writes of one `Levels`.
        unsafe { levels.as_mut_ptr().write_bytes(0, 1) };
        // SAFETY: zeroed just now.
        unsafe { Self::new_in_zeroed(levels) }
    }

    /// [`Cache::new_in`] with levels that are zero already, left untouched: memory fresh from
    /// the system (a new anonymous mapping), whose pages are committed as the cache's lookups
    /// first reach them rather than all here.
    ///
    /// # Safety
    /// Every byte of `levels` is zero.
    pub unsafe fn new_in_zeroed(levels: &'static mut MaybeUninit<LevelsOf<A>>) -> Self {
        // SAFETY: a `Levels` is valid all zeros (integers and `MaybeUninit`s), as the caller
        // promises it is.
        Self::with_levels(NonNull::from(unsafe { levels.assume_init_mut() }), false)
    }

    /// An empty cache with the given levels (zeroed, unique to it, a `Box` if `owned`).
    fn with_levels(levels: NonNull<LevelsOf<A>>, owned: bool) -> Self {
        let empty = Entry {
            addr: INVALID,
            rule: Cached::Outside,
        };
        Cache {
            entries: [empty; CACHE_SLOTS],
            hot: Hot {
                generation: 0,
                epoch: 0,
                levels,
                lookups: 0,
                misses: 0,
                outside: 0,
                second_hits: 0,
                near: 0,
                owned,
            },
            extent_hits: 0,
            last_outside: 0,
        }
    }

    /// Makes the cache valid for `table`: if its entries came from another table (another
    /// generation), invalidates them all. Every unwind does this first; calling it ahead (after
    /// publishing a new table, say) takes the cost of that reset out of the next unwind.
    #[inline(always)]
    pub fn prepare(&mut self, table: &RuleTable<A::Rule>) {
        if self.hot.generation != table.generation() {
            self.reset(table.generation());
        }
    }

    #[cold]
    #[inline(never)]
    fn reset(&mut self, generation: u32) {
        for e in &mut self.entries {
            e.addr = INVALID;
            e.rule = Cached::Outside;
        }
        // A new epoch makes the second level stale; at the wrap (after 2^32 resets) its sets
        // are made stale by hand, so that none stamped long ago matches again.
        self.hot.epoch = self.hot.epoch.wrapping_add(1);
        if self.hot.epoch == 0 {
            let levels = levels_mut(&mut self.hot.levels);
            levels.second.epochs = [0; SECOND_LEVEL_SETS];
            for set in levels.extents.iter_mut() {
                set.epoch = 0;
            }
            self.hot.epoch = 1;
        }
        self.hot.generation = generation;
    }

    /// What the unwinder does at `addr` in `table`, from the cache or, on a miss, from the
    /// table (and then remembered, "no rule here" included).
    pub fn lookup(&mut self, table: &RuleTable<A::Rule>, addr: u64) -> Cached<A::Simple> {
        self.prepare(table);
        self.count_lookups(1);
        *self.lookup_prepared(table, addr)
    }

    /// [`lookup`](Self::lookup) for a cache already prepared for `table`, without counting the
    /// lookup (the unwind loop counts its lookups once, at the end). The rule is returned in
    /// place, in its slot.
    #[inline(always)]
    pub(crate) fn lookup_prepared(
        &mut self,
        table: &RuleTable<A::Rule>,
        addr: u64,
    ) -> &Cached<A::Simple> {
        let slot = slot_offset::<Entry<A::Simple>>(addr);
        let hit = self.entry(slot).addr == addr;
        if !hit {
            return self.fill(table, addr, slot);
        }
        &self.entry(slot).rule
    }

    /// The slot at byte offset `slot`, which must be a [`slot_offset`] of an address.
    #[inline(always)]
    fn entry(&mut self, slot: usize) -> &mut Entry<A::Simple> {
        // SAFETY: `slot_offset` is `slot_of(addr) * size_of::<Entry>()`, and `slot_of` returns
        // `(h * 509) >> 32` for a 32-bit `h`, below 509: an entry of the 509-entry array. (The
        // compiler does not always see it once this is inlined into the loop, and the bounds
        // check would cost two instructions a frame.)
        unsafe {
            &mut *self
                .entries
                .as_mut_ptr()
                .cast::<u8>()
                .add(slot)
                .cast::<Entry<A::Simple>>()
        }
    }

    /// Starts loading the second-level and extent sets of `addr` (see [`crate::prefetch`]). The
    /// walk does this for frame 0 before its first lookup: the interrupted instruction's address
    /// is rarely in a slot, and the sets' lines then load while the slot's is read instead of
    /// after it. On x86_64 only, where it was measured in the handler: on 32-bit ARM it cost
    /// instructions and was never timed there. And for x86_64's own walks only: a walk of
    /// another architecture's stack on an x86_64 machine is an offline one (a minidump, a
    /// replay). The figures: BENCHMARKS.md, "Design decisions".
    #[inline(always)]
    pub(crate) fn prefetch_set(&self, addr: u64) {
        #[cfg(target_arch = "x86_64")]
        if core::any::TypeId::of::<A>() == core::any::TypeId::of::<crate::X86_64>() {
            let levels = self.hot.levels();
            let at = set_of(addr);
            crate::prefetch::prefetch(levels.second.sets.as_ptr().wrapping_add(at));
            crate::prefetch::prefetch(levels.second.epochs.as_ptr().wrapping_add(at));
            let extents = levels.extents.as_ptr();
            crate::prefetch::prefetch(extents.wrapping_add(extent_set_of(addr)));
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = addr;
    }

    /// Adds `n` to the number of lookups.
    #[inline(always)]
    pub(crate) fn count_lookups(&mut self, n: u64) {
        self.hot.lookups = self.hot.lookups.wrapping_add(n);
    }

    /// Answers a lookup that missed `slot` from the second level or else the table, and puts
    /// the answer in the slot (what the slot held stays in the second level, which every answer
    /// from the table goes through). A second-level hit makes no call, so this needs no stack
    /// frame. Inlining the first way's test into the loop cost more than it saved, by the
    /// registers it took from the loop (BENCHMARKS.md, "Design decisions").
    #[cold]
    #[inline(never)]
    fn fill(&mut self, table: &RuleTable<A::Rule>, addr: u64, slot: usize) -> &Cached<A::Simple> {
        let at = set_of(addr);
        let epoch = self.hot.epoch;
        let second = &mut levels_mut(&mut self.hot.levels).second;
        if second.epochs[at] == epoch {
            let set = &mut second.sets[at];
            let k = &set.keys;
            // The hit moves to the front by a swap with the first way: cheaper than keeping
            // the ways in order of use, and as good on the sequences (BENCHMARKS.md). A hit in
            // the first way, the most frequent, writes nothing in the set.
            let w = if k[0] == addr {
                // SAFETY: the set is of the current epoch, whose rules are all initialized.
                let rule = unsafe { set.rules[0].assume_init() };
                self.hot.second_hits = self.hot.second_hits.wrapping_add(1);
                return self.install(slot, addr, rule);
            } else if k[1] == addr {
                1
            } else if k[2] == addr {
                2
            } else if k[3] == addr {
                3
            } else {
                return self.fill_from_extents_or_table(table, addr, slot);
            };
            // SAFETY: as above.
            let rule = unsafe { set.rules[w].assume_init() };
            set.keys[w] = set.keys[0];
            set.rules[w] = set.rules[0];
            set.keys[0] = addr;
            set.rules[0] = MaybeUninit::new(rule);
            self.hot.second_hits = self.hot.second_hits.wrapping_add(1);
            return self.install(slot, addr, rule);
        }
        self.fill_from_extents_or_table(table, addr, slot)
    }

    /// Puts `rule` for `addr` in the slot at byte offset `slot`, which must be
    /// `slot_offset(addr)`, and returns it there.
    #[inline(always)]
    fn install(&mut self, slot: usize, addr: u64, rule: Cached<A::Simple>) -> &Cached<A::Simple> {
        // Both callers have `slot` from `lookup_prepared`.
        let e = self.entry(slot);
        e.addr = addr;
        e.rule = rule;
        &e.rule
    }

    /// A miss of the slots and the second level: the answer from the extent level, or else
    /// from the table, whose extent then goes in front of its extent set (stamped with the
    /// current epoch first, if stale). The answer goes in the second level and in `slot`.
    #[cold]
    #[inline(never)]
    fn fill_from_extents_or_table(
        &mut self,
        table: &RuleTable<A::Rule>,
        addr: u64,
        slot: usize,
    ) -> &Cached<A::Simple> {
        let epoch = self.hot.epoch;
        let extents = &mut levels_mut(&mut self.hot.levels).extents[extent_set_of(addr)];
        let (rule, start, len) = match extent_way(extents, epoch, addr) {
            Some(w) => {
                // SAFETY: a way of positive length of a current set has its answer written.
                let rule = unsafe { extents.rules[w].assume_init() };
                if w != 0 {
                    extents.starts.swap(0, w);
                    extents.lens.swap(0, w);
                    extents.rules.swap(0, w);
                }
                self.extent_hits = self.extent_hits.wrapping_add(1);
                (rule, 0, 0)
            }
            None => {
                self.hot.misses = self.hot.misses.wrapping_add(1);
                let mut extent = (0, 0);
                let rule = from_table::<A>(table, addr, &mut self.hot.near, &mut extent);
                if rule == Cached::Outside {
                    self.hot.outside = self.hot.outside.wrapping_add(1);
                    self.last_outside = addr;
                }
                (rule, extent.0, extent.1)
            }
        };
        if len != 0 {
            if extents.epoch != epoch {
                extents.epoch = epoch;
                extents.lens = [0; EXTENT_WAYS];
            }
            push_front(&mut extents.starts, start);
            push_front(&mut extents.lens, len);
            push_front(&mut extents.rules, MaybeUninit::new(rule));
        }
        // Hashed again rather than passed in: from `set_of` the index is provably in range, so
        // this path has no bounds check (and no panic: tests/shared_object.rs reads the code).
        let at = set_of(addr);
        let second = &mut levels_mut(&mut self.hot.levels).second;
        let set = &mut second.sets[at];
        if second.epochs[at] != epoch {
            second.epochs[at] = epoch;
            set.keys = [INVALID; SECOND_LEVEL_WAYS];
            set.rules = [MaybeUninit::new(Cached::Outside); SECOND_LEVEL_WAYS];
        }
        push_front(&mut set.keys, addr);
        push_front(&mut set.rules, MaybeUninit::new(rule));
        self.install(slot, addr, rule)
    }

    /// Lookups answered by the second level (counted in [`hits`](Self::hits) too): misses of
    /// the slots that did not go to the table.
    pub fn second_level_hits(&self) -> u64 {
        self.hot.second_hits
    }

    /// Lookups answered by the extent level (counted in [`hits`](Self::hits) too): misses of
    /// the slots and the second level that did not go to the table.
    pub fn extent_level_hits(&self) -> u64 {
        self.extent_hits
    }

    /// Bytes of the cache: its slots, and its second and extent levels' reservations
    /// (committed only as far as they have been used).
    pub fn bytes(&self) -> usize {
        core::mem::size_of::<Self>() + core::mem::size_of_val(self.hot.levels())
    }

    /// Lookups answered from the cache (its second level included).
    pub fn hits(&self) -> u64 {
        self.hot.lookups.wrapping_sub(self.hot.misses)
    }

    /// Lookups that went to the table.
    pub fn misses(&self) -> u64 {
        self.hot.misses
    }

    /// Misses at an address in no module of the table: code the table does not know (loaded
    /// after it was built, or generated at run time). Each address counts once per table
    /// generation (the cache then remembers it); a profiler that sees this grow can rebuild
    /// the table, off the signal path.
    pub fn outside_modules(&self) -> u64 {
        self.hot.outside
    }

    /// The last address counted by [`outside_modules`](Self::outside_modules) (0 if none).
    pub fn last_outside_module(&self) -> u64 {
        self.last_outside
    }

    /// Forgets every entry (at the next lookup) and zeroes the counters.
    pub fn clear(&mut self) {
        self.hot.generation = 0;
        self.hot.lookups = 0;
        self.hot.misses = 0;
        self.hot.second_hits = 0;
        self.extent_hits = 0;
        self.hot.outside = 0;
        self.last_outside = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ModuleRulesBuilder, RuleTableBuilder};
    use alloc::sync::Arc;
    use core::num::NonZeroU32;

    /// An architecture whose rules are bytes: 0 ends the walk, odd ones are simple, even ones
    /// are applied from the table.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    struct Bytes;

    /// Byte rules (also the table module's tests' rules) are ready as [`Bytes`] makes them.
    impl crate::table::TableRule for u8 {
        type Ready = Ready<u8>;
        fn ready(&self) -> Ready<u8> {
            Ready::of::<Bytes>(self)
        }
    }

    impl Arch for Bytes {
        const NAME: &'static str = "bytes";
        const WORD_BYTES: u8 = 8;
        type Regs = u64;
        type Rule = u8;
        type Simple = u8;
        fn pc(regs: &u64) -> u64 {
            *regs
        }
        fn sp(_: &u64) -> u64 {
            0
        }
        fn lookup_address(regs: &u64, _: bool) -> u64 {
            *regs
        }
        fn stop(rule: &u8) -> Option<StopReason> {
            (*rule == 0).then_some(StopReason::EndOfStack)
        }
        fn simple(rule: &u8) -> Option<u8> {
            (rule % 2 == 1).then_some(*rule)
        }
        fn is_signal_frame(_: &u8) -> bool {
            false
        }
        fn step_simple<M: crate::Memory + ?Sized>(
            _: &u8,
            _: &u64,
            _: bool,
            _: &M,
        ) -> Result<u64, StopReason> {
            Err(StopReason::BadRule)
        }
        fn step_rule<M: crate::Memory + ?Sized>(
            _: &RuleTable<u8>,
            _: u16,
            _: &u8,
            _: &u64,
            _: bool,
            _: &M,
        ) -> Result<crate::Step<u64>, StopReason> {
            Err(StopReason::BadRule)
        }
        fn step_without_rule<M: crate::Memory + ?Sized>(
            _: &RuleTable<u8>,
            _: &u64,
            _: bool,
            _: &M,
        ) -> Result<crate::Step<u64>, StopReason> {
            Err(StopReason::NoRule)
        }
        fn scanned_caller(_: &u64, ret: u64, _: u64) -> u64 {
            ret
        }
        fn sp_increases(_: &u64, _: &u64, _: bool) -> bool {
            false
        }
    }

    fn table(generation: u32, rule: u8) -> RuleTable<u8> {
        let mut m = ModuleRulesBuilder::new();
        m.push(0x100, 0x200, rule).unwrap();
        let mut b = RuleTableBuilder::new(NonZeroU32::new(generation).unwrap());
        b.add(0x100, 0x1000, 0, "m".into(), Arc::new(m.build().unwrap()));
        b.build().unwrap()
    }

    /// A slot is the address and the cached rule, nothing else: 16 bytes on x86_64 and aarch64
    /// (509 slots in 8 KiB, four to a line), 32 on ARM.
    #[test]
    fn entry_sizes() {
        assert_eq!(core::mem::size_of::<Entry<crate::x86_64::Simple>>(), 16);
        assert_eq!(core::mem::size_of::<Entry<crate::arm::Simple>>(), 32);
        assert_eq!(core::mem::size_of::<Entry<crate::aarch64::Simple>>(), 16);
    }

    /// What a walk touches besides its slots is one line, the slots start the cache (so that no
    /// x86_64 slot spans two lines), and a second-level set is whole lines.
    fn layout_of<A: Arch>() {
        let cache = Cache::<A>::new();
        let base = core::ptr::addr_of!(cache) as usize;
        assert_eq!(base % 64, 0);
        assert_eq!(cache.entries.as_ptr() as usize, base);
        assert_eq!(core::mem::size_of::<Hot<A::Simple>>(), 64);
        assert_eq!((core::ptr::addr_of!(cache.hot) as usize) % 64, 0);
        assert_eq!(core::mem::size_of::<Set<A::Simple>>() % 64, 0);
        assert_eq!(cache.hot.levels().second.sets.as_ptr() as usize % 64, 0);
        assert_eq!(cache.hot.levels().extents.as_ptr() as usize % 64, 0);
    }

    #[test]
    fn hot_fields_share_a_line() {
        layout_of::<crate::X86_64>();
        layout_of::<crate::Arm>();
        layout_of::<crate::Aarch64>();
    }

    proptest::proptest! {
        /// The bound the unchecked indexing in `lookup_prepared` relies on.
        #[test]
        fn every_address_has_a_slot_in_range(addr in proptest::prelude::any::<u64>()) {
            proptest::prop_assert!(slot_of(addr) < CACHE_SLOTS);
            proptest::prop_assert_eq!(
                slot_offset::<Entry<crate::x86_64::Simple>>(addr),
                slot_of(addr) * core::mem::size_of::<Entry<crate::x86_64::Simple>>()
            );
            proptest::prop_assert_eq!(
                slot_offset::<Entry<crate::arm::Simple>>(addr),
                slot_of(addr) * core::mem::size_of::<Entry<crate::arm::Simple>>()
            );
        }
    }

    #[test]
    fn slots_are_in_range_and_spread() {
        let mut used = [0u32; CACHE_SLOTS];
        // 100,000 return addresses 1..16 bytes apart, as in real code.
        let mut a = 0x5555_5555_0000u64;
        for i in 0..100_000u64 {
            a += 1 + (i * 7) % 16;
            let s = slot_of(a);
            assert!(s < CACHE_SLOTS);
            used[s] += 1;
        }
        let expected = 100_000 / CACHE_SLOTS as u32;
        assert!(
            used.iter().all(|&n| n > expected / 2 && n < expected * 2),
            "{used:?}"
        );
    }

    #[test]
    fn hits_misses_negative_entries_and_generations() {
        let t1 = table(1, 5);
        let mut c = Cache::<Bytes>::new();
        assert_eq!(c.lookup(&t1, 0x150), Cached::Simple(5));
        assert_eq!(c.lookup(&t1, 0x150), Cached::Simple(5));
        assert_eq!((c.hits(), c.misses()), (1, 1));
        assert_eq!(c.lookup(&t1, 0x250), Cached::NoRule);
        assert_eq!(c.lookup(&t1, 0x250), Cached::NoRule);
        assert_eq!((c.hits(), c.misses()), (2, 2));
        // Same address, new table: the old entry must not be used.
        let t2 = table(2, 6);
        let six = Cached::Table(RuleRef {
            module: 0,
            index: 0,
        });
        assert_eq!(c.lookup(&t2, 0x150), six);
        assert_eq!((c.hits(), c.misses()), (2, 3));
        // Two addresses in the same slot: each evicts the other, and the second level answers
        // every lookup after the first of each, however the two alternate.
        let a = (0x151u64..)
            .find(|&a| slot_of(a) == slot_of(0x150))
            .unwrap();
        let at_a = if a < 0x200 { six } else { Cached::NoRule };
        assert_eq!(c.lookup(&t2, a), at_a);
        assert_eq!(c.misses(), 4);
        for _ in 0..10 {
            assert_eq!(c.lookup(&t2, 0x150), six);
            assert_eq!(c.lookup(&t2, a), at_a);
        }
        assert_eq!((c.hits(), c.misses(), c.second_level_hits()), (22, 4, 20));
        // A new generation empties the second level too.
        let t3 = table(3, 0);
        let stop = Cached::Stop(StopReason::EndOfStack);
        assert_eq!(c.lookup(&t3, 0x150), stop);
        assert_eq!((c.misses(), c.second_level_hits()), (5, 20));
        let at_a = if a < 0x200 { stop } else { Cached::NoRule };
        assert_eq!(c.lookup(&t3, a), at_a);
        assert_eq!((c.misses(), c.second_level_hits()), (6, 20));
        c.clear();
        assert_eq!(c.lookup(&t3, 0x150), stop);
        assert_eq!((c.hits(), c.misses(), c.second_level_hits()), (0, 1, 0));
    }

    /// The empty ways of a set in use hold the right answer for their key, [`INVALID`]: a
    /// lookup of that address through the second level finds [`Cached::Outside`], never an
    /// uninitialized rule.
    #[test]
    fn empty_ways_answer_their_key() {
        let t = table(1, 5);
        let mut c = Cache::<Bytes>::new();
        let same_slot = (0x100u64..)
            .find(|&a| slot_of(a) == slot_of(INVALID))
            .unwrap();
        let same_set = (0x100u64..)
            .find(|&a| set_of(a) == set_of(INVALID))
            .unwrap();
        c.lookup(&t, same_set);
        c.lookup(&t, same_slot);
        let hits = c.second_level_hits();
        assert_eq!(c.lookup(&t, INVALID), Cached::Outside);
        assert_eq!(c.second_level_hits(), hits + 1);
    }

    /// Every address of a set that shares a slot keeps being answered right, whichever of them
    /// the slot holds.
    #[test]
    fn conflicting_addresses_are_answered_right() {
        let t = table(1, 5);
        let mut c = Cache::<Bytes>::new();
        // Forty addresses in one slot, in and out of the module's rule range.
        let same: alloc::vec::Vec<u64> = (0x100u64..)
            .filter(|&a| slot_of(a) == slot_of(0x100))
            .take(40)
            .collect();
        for round in 0..3 {
            for (i, &a) in same.iter().enumerate() {
                let want = if a < 0x200 {
                    Cached::Simple(5)
                } else if a < 0x1000 {
                    Cached::NoRule
                } else {
                    Cached::Outside
                };
                assert_eq!(c.lookup(&t, a), want, "round {round}, address {i}: {a:#x}");
            }
        }
        assert_eq!(c.hot.lookups, 120);
        // The slot holds one; the second level keeps all forty (in sets of their own), so each
        // goes to the table once and the second level answers the other two rounds.
        assert_eq!((c.misses(), c.second_level_hits()), (40, 80));
        // A clone has the same entries, in levels of its own: it answers all forty from its
        // second level, and the original is unchanged.
        let mut d = c.clone();
        for &a in &same {
            d.lookup(&t, a);
        }
        assert_eq!((d.misses(), d.second_level_hits()), (40, 120));
        assert_eq!((c.misses(), c.second_level_hits()), (40, 80));
        // A new table, or a cleared cache, empties the second level too.
        let t2 = table(2, 7);
        for &a in &same {
            c.lookup(&t2, a);
        }
        assert_eq!(c.misses(), 80);
        c.clear();
        for &a in &same {
            c.lookup(&t2, a);
        }
        assert_eq!((c.misses(), c.second_level_hits()), (40, 0));
    }

    #[test]
    fn addresses_outside_every_module_are_counted_once_per_generation() {
        let t1 = table(1, 5);
        let mut c = Cache::<Bytes>::new();
        // In the module, with or without a rule: not outside.
        c.lookup(&t1, 0x150);
        c.lookup(&t1, 0x250);
        assert_eq!((c.outside_modules(), c.last_outside_module()), (0, 0));
        // Below and above the module's [0x100, 0x1000).
        c.lookup(&t1, 0x80);
        c.lookup(&t1, 0x1000);
        c.lookup(&t1, 0x1000);
        assert_eq!((c.outside_modules(), c.last_outside_module()), (2, 0x1000));
        // A new table: seen again.
        c.lookup(&table(2, 5), 0x80);
        assert_eq!((c.outside_modules(), c.last_outside_module()), (3, 0x80));
        c.clear();
        assert_eq!((c.outside_modules(), c.last_outside_module()), (0, 0));
    }

    /// A module at 0x1000..0x3000 with rows 5 at 0x1000..0x1040, 8 (applied from the table) at
    /// 0x1040..0x1100, a gap, 9 at 0x1180..0x1440 and 11 at 0x1440..0x1480, and `rule` at
    /// 0x2000..0x2010.
    /// A cache in lent levels (filled with garbage first, which `new_in` must clear) answers
    /// as one that allocated its own, level by level; dropping it leaves the levels alone.
    #[test]
    fn a_cache_in_lent_levels_answers_as_an_allocated_one() {
        let t = extents_table(1, 13);
        let lent = Box::leak(Box::<LevelsOf<Bytes>>::new_uninit());
        // SAFETY: the allocation is one `Levels`, writable.
        unsafe { lent.as_mut_ptr().write_bytes(0xab, 1) };
        let lent_at = lent.as_ptr() as usize;
        let mut a = Cache::<Bytes>::new();
        let mut b = Cache::<Bytes>::new_in(lent);
        assert_eq!(b.hot.levels.as_ptr() as usize, lent_at);
        assert_eq!(a.bytes(), b.bytes());
        // Addresses over the extents and past them, twice, and then with a new table.
        let addrs: alloc::vec::Vec<u64> = (0x0f00u64..0x2100).step_by(0x13).collect();
        for t in [&t, &t, &extents_table(2, 15)] {
            for &x in &addrs {
                assert_eq!(a.lookup(t, x), b.lookup(t, x), "{x:#x}");
            }
            let counts = |c: &Cache<Bytes>| {
                (
                    c.hits(),
                    c.misses(),
                    c.second_level_hits(),
                    c.extent_level_hits(),
                )
            };
            assert_eq!(counts(&a), counts(&b));
        }
        assert!(b.second_level_hits() > 0 && b.extent_level_hits() > 0);
        // A clone owns copies, which it frees. The original frees nothing: had it freed its
        // lent levels as `Box`es, the extents' (inside the allocation) would abort the test.
        let c = b.clone();
        assert!(c.hot.owned && !b.hot.owned);
        assert_ne!(c.hot.levels.as_ptr() as usize, lent_at);
        drop(c);
        drop(b);
    }

    fn extents_table(generation: u32, rule: u8) -> RuleTable<u8> {
        let mut m = ModuleRulesBuilder::new();
        for (s, e, r) in [
            (0x1000, 0x1040, 5),
            (0x1040, 0x1100, 8),
            (0x1180, 0x1440, 9),
            (0x1440, 0x1480, 11),
            (0x2000, 0x2010, rule),
        ] {
            m.push(s, e, r).unwrap();
        }
        let mut b = RuleTableBuilder::new(NonZeroU32::new(generation).unwrap());
        b.add(0x1000, 0x3000, 0, "m".into(), Arc::new(m.build().unwrap()));
        b.build().unwrap()
    }

    #[test]
    fn an_extent_answers_its_other_addresses_and_no_other() {
        let t = extents_table(1, 13);
        let mut c = Cache::<Bytes>::new();
        let at = |index| RuleRef { module: 0, index };
        // (address, answer, answered by the extent level)
        let steps: [(u64, Cached<u8>, bool); 13] = [
            (0x1010, Cached::Simple(5), false),
            (0x1020, Cached::Simple(5), true),
            (0x103f, Cached::Simple(5), true),
            // The next extent, in the same granule: its own table lookup.
            (0x1040, Cached::Table(at(1)), false),
            (0x10ff, Cached::Table(at(1)), true),
            // A gap is an extent without a rule.
            (0x1100, Cached::NoRule, false),
            (0x117f, Cached::NoRule, true),
            (0x1180, Cached::Simple(9), false),
            (0x13ff, Cached::Simple(9), true),
            // 0x1400 starts the next granule (1 KiB): the extent is not in its set.
            (0x1420, Cached::Simple(9), false),
            (0x1440, Cached::Simple(11), false),
            // Past the module's last extent: no extent to remember.
            (0x2100, Cached::NoRule, false),
            (0x2101, Cached::NoRule, false),
        ];
        for (i, &(addr, want, by_extent)) in steps.iter().enumerate() {
            let (misses, extent_hits) = (c.misses(), c.extent_level_hits());
            assert_eq!(c.lookup(&t, addr), want, "step {i}: {addr:#x}");
            assert_eq!(
                (c.misses() - misses, c.extent_level_hits() - extent_hits),
                if by_extent { (0, 1) } else { (1, 0) },
                "step {i}: {addr:#x}"
            );
        }
        // A new table makes the extent level stale: the same addresses go to it again.
        let t2 = extents_table(2, 13);
        assert_eq!(c.lookup(&t2, 0x1030), Cached::Simple(5));
        assert_eq!((c.misses(), c.extent_level_hits()), (9, 5));
        assert_eq!(c.lookup(&t2, 0x1031), Cached::Simple(5));
        assert_eq!((c.misses(), c.extent_level_hits()), (9, 6));
        c.clear();
        assert_eq!(c.extent_level_hits(), 0);
    }

    proptest::proptest! {
        /// Whatever the lookups and whichever level answers, the cache answers what the table
        /// does: lookups clustered in a few granules (many extents per set, ways evicted),
        /// alternating between two tables whose rules differ in one extent.
        #[test]
        fn every_answer_is_the_tables(
            lookups in proptest::collection::vec((0u64..0x1800, proptest::bool::ANY), 1..400),
        ) {
            let tables = [extents_table(1, 13), extents_table(2, 15)];
            let mut c = Cache::<Bytes>::new();
            for (i, &(off, second)) in lookups.iter().enumerate() {
                // 0x1000..0x1500 (the extents) and 0x1f00..0x2200 (one short extent, a gap).
                let addr = if off < 0x500 { 0x1000 + off } else { 0x1f00 + off % 0x300 };
                let t = &tables[usize::from(second && i % 7 == 0)];
                let want = t
                    .lookup_index(addr)
                    .map_or(Cached::NoRule, |found| Cached::of(found.ready, found.at));
                proptest::prop_assert_eq!(c.lookup(t, addr), want, "lookup {} at {:#x}", i, addr);
            }
        }
    }
}
