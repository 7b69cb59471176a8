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
//! here the slot is a Fibonacci hash scaled to 509 by a multiply and a shift (two multiplies,
//! no division), because the slot computation sits on the unwind loop's chain of dependent
//! loads. Scaling by a multiply is 2 instructions a frame cheaper than keeping the hash's top 9
//! bits and wrapping the 3 values past 508. A cheaper xor-fold was tried and dropped: it made
//! structured sets of return addresses collide (two misses per unwind on a 32-frame recursion).
//!
//! Behind the slots is a second level: [`SECOND_LEVEL_SETS`] sets of [`SECOND_LEVEL_WAYS`]
//! entries holding every answer the table gave. Real programs' return addresses do not fit 509
//! slots: replayed in order, cc1's samples (6,389 distinct addresses in 60,479 lookups) hit the
//! slots 76.6 % of the time, python3's 93.5 %, and each miss was a table lookup on cold memory. A
//! lookup that misses its slot probes the address's set (out of line, about 30 instructions and
//! no call when it hits), and the answer replaces what the slot held, which stays in its own
//! set. The sets are allocated once, zeroed, when the cache is made (never in a handler), and
//! stamped with the cache's epoch, so that a new table (or [`Cache::clear`]) empties them
//! without writing them; their memory is committed as sets are first used.
//!
//! A hit moves to the front of its set by swapping with the first way; a new entry goes in
//! front and the last way goes out. On the sequences this keeps a little more than strict
//! least-recently-used order (cc1: 400 misses a pass against 415), for fewer moves.
//!
//! An earlier design had 32 victim slots (Jouppi's victim cache) between the slots and the
//! table. With the second level they cost more than they saved: a victim hit was not moved back
//! into its slot, so an address that had once been evicted kept missing its slot. Without them
//! python3's lookups that miss their slot fell from 11,120 a pass to 3,991, and the walks from
//! 60.8 to 51.3 instructions a frame (cc1: 73.2 to 58.0). Two of a stack's return addresses
//! that share a slot now cost two second-level hits an unwind (rec20 in BENCHMARKS.md).
//!
//! The second level's size is chosen by those sequences (`bench-sequence SEQ counts`, the
//! second pass of each, 4 ways):
//!
//! | sets | entries | cc1 hits | python3 hits | rustfmt hits |
//! |---|---|---|---|---|
//! | none (the slots alone) | 509 | 76.6 % | 93.5 % | 90.5 % |
//! | 1024 | 4,096 | 91.1 % | 99.72 % | 99.78 % |
//! | 2048 | 8,192 | 96.5 % | 99.96 % | 99.95 % |
//! | 4096 | 16,384 | 99.3 % | 100 % | 100 % |
//! | 8192 | 32,768 | 99.9 % | 100 % | 100 % |
//!
//! 4096 sets: cc1's working set (6,389 distinct return addresses in 3 s) needs about twice its
//! size. Its sets are 104 bytes on x86_64 and 136 on ARM: 416 KiB and 544 KiB per cache
//! ([`Cache::bytes`]), per registered thread in-process, committed only as far as the thread's
//! samples reach. Smaller entries (a key and a rule reference) or one second level shared by
//! the threads would cut it.

use alloc::boxed::Box;
use core::mem::MaybeUninit;

use crate::arch::Arch;
use crate::table::RuleTable;
use crate::unwind::StopReason;

/// The number of slots.
pub const CACHE_SLOTS: usize = 509;

/// Where a rule is in a [`RuleTable`]: its module's index and its index in that module's
/// dictionary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuleRef {
    /// The module's index in the table.
    pub module: u16,
    /// The rule's index in the module's dictionary.
    pub index: u16,
}

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

impl<S> Cached<S> {
    /// The cached form of `rule`, entry `at` of its table.
    fn of<A: Arch<Simple = S>>(rule: &A::Rule, at: RuleRef) -> Self {
        if let Some(stop) = A::stop(rule) {
            Cached::Stop(stop)
        } else if let Some(simple) = A::simple(rule) {
            Cached::Simple(simple)
        } else {
            Cached::Table(at)
        }
    }
}

/// The slot of `addr`: Fibonacci hashing of its low 32 bits (multiply by 2^32 / phi), the
/// product scaled to the 509 slots by a multiply and a shift (Lemire's "fastrange", in place of
/// a modulo). Two multiplies on every architecture (a 64-bit one is several instructions on
/// 32-bit ARM, so only the low 32 bits are hashed); it spreads structured sets of return
/// addresses (functions at aligned offsets, call sites at similar offsets) without the
/// systematic collisions of a fold. Addresses 4 GiB apart share a slot, which costs only a miss.
#[inline(always)]
fn slot_of(addr: u64) -> usize {
    ((u64::from(fibonacci(addr)) * CACHE_SLOTS as u64) >> 32) as usize
}

/// The low 32 bits of `addr` times 2^32 / phi.
#[inline(always)]
fn fibonacci(addr: u64) -> u32 {
    (addr as u32).wrapping_mul(0x9e37_79b1)
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

/// A set of the second level: its entries' addresses and rules, valid only if `epoch` is the
/// cache's. All zeros is a valid (empty, stale) set, so the second level is allocated zeroed
/// and its memory is committed only as sets are used: a thread that is rarely sampled costs
/// little of it. A set is stamped with the cache's epoch when first used in it, and every one
/// of its rules written then ([`INVALID`] keys with [`Cached::Outside`], the right answer at
/// that address): a set of the current epoch has no uninitialized rule.
struct Set<S> {
    epoch: u32,
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
            .field("epoch", &self.epoch)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// The second level's sets.
type Sets<S> = [Set<S>; SECOND_LEVEL_SETS];

/// The second level's sets, allocated zeroed (stale, and committed by the system only when
/// first written).
fn zeroed_sets<S: Copy>() -> Box<Sets<S>> {
    let layout = core::alloc::Layout::new::<Sets<S>>();
    // SAFETY: the layout's size is not zero (thousands of sets of at least 36 bytes).
    let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) }.cast::<Sets<S>>();
    if ptr.is_null() {
        alloc::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `ptr` comes from the global allocator with the layout of `Sets<S>`, which a
    // `Box<Sets<S>>` frees with; all zeros is a valid `Set` (integers and `MaybeUninit`s).
    unsafe { Box::from_raw(ptr) }
}

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

/// What the unwinder does at `addr`, from `table` itself: a miss of every level. The module is
/// looked for first where the last miss found one (`near`, updated): a walk's misses are mostly
/// in one module, and a hit there reads that module's line instead of searching the modules'
/// starts first. Its own function, so that the benchmarks can count what a miss costs.
#[cold]
#[inline(never)]
fn from_table<A: Arch>(table: &RuleTable<A::Rule>, addr: u64, near: &mut u16) -> Cached<A::Simple> {
    let Some(module) = table.module_near(addr, *near) else {
        return Cached::Outside;
    };
    *near = module.index;
    match table.lookup_in(module, addr) {
        Some(found) => Cached::of::<A>(found.rule, found.at),
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
#[derive(Debug)]
pub struct Cache<A: Arch> {
    generation: u32,
    entries: [Entry<A::Simple>; CACHE_SLOTS],
    /// The second level, at [`set_of`] an address.
    second: Box<Sets<A::Simple>>,
    /// Stamped on the second level's sets: a set with another epoch is stale. Never 0 once the
    /// cache has been prepared for a table (sets start at 0).
    epoch: u32,
    lookups: u64,
    misses: u64,
    /// Lookups answered by the second level.
    second_hits: u64,
    /// Misses at addresses in no module of the table (code loaded after the table was built,
    /// or generated at run time).
    outside: u64,
    /// The last such address.
    last_outside: u64,
    /// The module of the last miss, tried first by the next ([`RuleTable::module_near`]).
    near: u16,
}

impl<A: Arch> Clone for Cache<A> {
    fn clone(&self) -> Self {
        // The sets are copied into a new zeroed allocation: `Box::clone` of an array this large
        // would build it on the stack first.
        let mut second = zeroed_sets();
        second.copy_from_slice(&self.second[..]);
        Cache {
            second,
            entries: self.entries,
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
    /// An empty cache: generation 0 matches no table. Allocates its second level
    /// ([`SECOND_LEVEL_SETS`] sets).
    pub fn new() -> Self {
        let empty = Entry {
            addr: INVALID,
            rule: Cached::Outside,
        };
        Cache {
            generation: 0,
            entries: [empty; CACHE_SLOTS],
            second: zeroed_sets(),
            epoch: 0,
            lookups: 0,
            misses: 0,
            second_hits: 0,
            outside: 0,
            last_outside: 0,
            near: 0,
        }
    }

    /// Makes the cache valid for `table`: if its entries came from another table (another
    /// generation), invalidates them all. Every unwind does this first; calling it ahead (after
    /// publishing a new table, say) takes the cost of that reset out of the next unwind.
    #[inline(always)]
    pub fn prepare(&mut self, table: &RuleTable<A::Rule>) {
        if self.generation != table.generation() {
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
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            for set in self.second.iter_mut() {
                set.epoch = 0;
            }
            self.epoch = 1;
        }
        self.generation = generation;
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
        let slot = slot_of(addr);
        // SAFETY: `slot_of` returns `(h * 509) >> 32` for a 32-bit `h`, below 509, and the
        // array has 509 entries. (The compiler does not always see it once this is
        // inlined into the loop, and the bounds check would cost two instructions a frame.)
        let hit = unsafe { self.entries.get_unchecked(slot) }.addr == addr;
        if !hit {
            return self.fill(table, addr, slot);
        }
        // SAFETY: as above.
        &unsafe { self.entries.get_unchecked(slot) }.rule
    }

    /// Starts loading the second-level set of `addr` (see [`crate::prefetch`]). The walk does
    /// this for frame 0 before its first lookup: the interrupted instruction's address is
    /// rarely in a slot (cc1: 82 % of frame-0 lookups went on to the table), and the set's line
    /// then loads while the slot's is read instead of after it. On x86_64 only, where it was
    /// measured in the handler: on 32-bit ARM it cost 6 to 8 instructions a frame (armv7
    /// samples counted under qemu: 84.8 to 93.0, 74.4 to 80.9), and was never timed there.
    #[inline(always)]
    pub(crate) fn prefetch_set(&self, addr: u64) {
        #[cfg(target_arch = "x86_64")]
        crate::prefetch::prefetch(self.second.as_ptr().wrapping_add(set_of(addr)));
        #[cfg(not(target_arch = "x86_64"))]
        let _ = addr;
    }

    /// Adds `n` to the number of lookups.
    #[inline(always)]
    pub(crate) fn count_lookups(&mut self, n: u64) {
        self.lookups = self.lookups.wrapping_add(n);
    }

    /// Answers a lookup that missed `slot` from the second level or else the table, and puts
    /// the answer in the slot (what the slot held stays in the second level, which every answer
    /// from the table goes through). A second-level hit makes no call, so this needs no stack
    /// frame: 24 instructions for a hit in the first way, and about 16 more in the loop for
    /// the call and the registers it saves around it. Inlining the first way's test into the
    /// loop cost more than it saved (cc1's sequence: 56.3 -> 58.5 instructions a frame), by the
    /// registers it took from the loop.
    #[cold]
    #[inline(never)]
    fn fill(&mut self, table: &RuleTable<A::Rule>, addr: u64, slot: usize) -> &Cached<A::Simple> {
        let at = set_of(addr);
        let set = &mut self.second[at];
        if set.epoch == self.epoch {
            let k = &set.keys;
            // The hit moves to the front by a swap with the first way: cheaper than keeping
            // the ways in order of use, and as good on the sequences (module docs). A hit in
            // the first way, the most frequent, writes nothing in the set.
            let w = if k[0] == addr {
                // SAFETY: the set is of the current epoch, whose rules are all initialized.
                let rule = unsafe { set.rules[0].assume_init() };
                self.second_hits = self.second_hits.wrapping_add(1);
                return self.install(slot, addr, rule);
            } else if k[1] == addr {
                1
            } else if k[2] == addr {
                2
            } else if k[3] == addr {
                3
            } else {
                return self.fill_from_table(table, addr, slot);
            };
            // SAFETY: as above.
            let rule = unsafe { set.rules[w].assume_init() };
            set.keys[w] = set.keys[0];
            set.rules[w] = set.rules[0];
            set.keys[0] = addr;
            set.rules[0] = MaybeUninit::new(rule);
            self.second_hits = self.second_hits.wrapping_add(1);
            return self.install(slot, addr, rule);
        }
        self.fill_from_table(table, addr, slot)
    }

    /// Puts `rule` for `addr` in `slot`, which must be `slot_of(addr)`, and returns it there.
    #[inline(always)]
    fn install(&mut self, slot: usize, addr: u64, rule: Cached<A::Simple>) -> &Cached<A::Simple> {
        // SAFETY: `slot` is `slot_of(addr)`, below 509 (see `lookup_prepared`); both callers
        // have it from there.
        let e = unsafe { self.entries.get_unchecked_mut(slot) };
        e.addr = addr;
        e.rule = rule;
        &e.rule
    }

    /// A miss of both levels: the rule from the table, put in the second level (whose set is
    /// stamped with the current epoch first, if stale) and in `slot`.
    #[cold]
    #[inline(never)]
    fn fill_from_table(
        &mut self,
        table: &RuleTable<A::Rule>,
        addr: u64,
        slot: usize,
    ) -> &Cached<A::Simple> {
        self.misses = self.misses.wrapping_add(1);
        let rule = from_table::<A>(table, addr, &mut self.near);
        if rule == Cached::Outside {
            self.outside = self.outside.wrapping_add(1);
            self.last_outside = addr;
        }
        let epoch = self.epoch;
        // Hashed again rather than passed in: from `set_of` the index is provably in range, so
        // this path has no bounds check (and no panic: tests/shared_object.rs reads the code).
        let set = &mut self.second[set_of(addr)];
        if set.epoch != epoch {
            set.epoch = epoch;
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
        self.second_hits
    }

    /// Bytes of the cache: its slots, and its second level's reservation (committed
    /// only as far as it has been used).
    pub fn bytes(&self) -> usize {
        core::mem::size_of::<Self>() + core::mem::size_of_val(&*self.second)
    }

    /// Lookups answered from the cache (its second level included).
    pub fn hits(&self) -> u64 {
        self.lookups.wrapping_sub(self.misses)
    }

    /// Lookups that went to the table.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Misses at an address in no module of the table: code the table does not know (loaded
    /// after it was built, or generated at run time). Each address counts once per table
    /// generation (the cache then remembers it); a profiler that sees this grow can rebuild
    /// the table, off the signal path.
    pub fn outside_modules(&self) -> u64 {
        self.outside
    }

    /// The last address counted by [`outside_modules`](Self::outside_modules) (0 if none).
    pub fn last_outside_module(&self) -> u64 {
        self.last_outside
    }

    /// Forgets every entry (at the next lookup) and zeroes the counters.
    pub fn clear(&mut self) {
        self.generation = 0;
        self.lookups = 0;
        self.misses = 0;
        self.second_hits = 0;
        self.outside = 0;
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
        fn step_simple<M: crate::Memory + ?Sized>(
            _: &u8,
            _: &u64,
            _: &M,
        ) -> Result<u64, StopReason> {
            Err(StopReason::BadRule)
        }
        fn step_rule<M: crate::Memory + ?Sized>(
            _: &RuleTable<u8>,
            _: u16,
            _: &u8,
            _: &u64,
            _: &M,
        ) -> Result<crate::Step<u64>, StopReason> {
            Err(StopReason::BadRule)
        }
        fn step_without_rule<M: crate::Memory + ?Sized>(
            _: &RuleTable<u8>,
            _: &u64,
            _: usize,
            _: &M,
        ) -> Result<crate::Step<u64>, StopReason> {
            Err(StopReason::NoRule)
        }
        fn scanned_caller(_: &u64, ret: u64, _: u64) -> u64 {
            ret
        }
        fn sp_increases(_: &u64, _: &u64, _: usize) -> bool {
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

    /// A slot is the address and the cached rule, nothing else: 24 bytes on x86_64 (509 slots
    /// in 12 KiB), 32 on ARM.
    #[test]
    fn entry_sizes() {
        assert_eq!(core::mem::size_of::<Entry<crate::x86_64::Simple>>(), 24);
        assert_eq!(core::mem::size_of::<Entry<crate::arm::Simple>>(), 32);
    }

    proptest::proptest! {
        /// The bound the unchecked indexing in `lookup_prepared` relies on.
        #[test]
        fn every_address_has_a_slot_in_range(addr in proptest::prelude::any::<u64>()) {
            proptest::prop_assert!(slot_of(addr) < CACHE_SLOTS);
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
        assert_eq!(c.lookups, 120);
        // The slot holds one; the second level keeps all forty (in sets of their own), so each
        // goes to the table once and the second level answers the other two rounds.
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
}
