//! The direct-mapped rule cache: 509 slots keyed by lookup address, stamped with the generation
//! of the table the rule came from.
//!
//! A slot holds a copy of the rule (never a pointer into a table) in the architecture's compact
//! cached form ([`CacheRule`]), and the index of the module it belongs to, or a negative entry
//! ("no rule here"). An entry whose generation differs from the current table's is treated as
//! empty, so publishing a new table invalidates every cache without touching it.
//!
//! 509 slots is the size Valgrind, LUL and framehop settled on. They index with `addr % 509`;
//! here [`slot_of`] uses one multiply (Fibonacci hashing) instead of the two a modulo by a
//! constant compiles to, because the slot computation sits on the unwind loop's chain of
//! dependent loads. A cheaper xor-fold was tried and dropped: it made structured sets of return
//! addresses collide (two misses per unwind on a 32-frame recursion).

use crate::table::RuleTable;

/// The number of slots.
pub const CACHE_SLOTS: usize = 509;

/// The cached form of a rule of type `R`.
pub trait CacheRule<R>: Copy + Default {
    /// The cached form of `rule`, which is entry `index` of its module's dictionary.
    fn cached(rule: &R, index: u16) -> Self;
    /// The cached form of "no rule here" (a negative entry).
    fn none() -> Self;
}

/// Any rule can be cached as itself.
impl<R: Copy + Default> CacheRule<R> for R {
    fn cached(rule: &R, _: u16) -> Self {
        *rule
    }
    fn none() -> Self {
        R::default()
    }
}

/// The slot of `addr`: Fibonacci hashing of its low 32 bits (multiply by 2^32 / phi, keep the
/// top 9 bits), the 3 values past the last slot wrapped to the first. One 32-bit multiply on
/// every architecture (a 64-bit one is several instructions on 32-bit ARM); it spreads
/// structured sets of return addresses (functions at aligned offsets, call sites at similar
/// offsets) without the systematic collisions of a fold. Addresses 4 GiB apart share a slot,
/// which costs only a miss.
#[inline(always)]
pub fn slot_of(addr: u64) -> usize {
    let x = ((addr as u32).wrapping_mul(0x9e37_79b1) >> 23) as usize;
    if x >= CACHE_SLOTS {
        x - CACHE_SLOTS
    } else {
        x
    }
}

/// Module index stored in negative entries.
const NEGATIVE: u16 = u16::MAX;

#[derive(Clone, Copy, Debug)]
struct Entry<R> {
    addr: u64,
    module: u16,
    rule: R,
}

/// The key of an invalid entry. No lookup can wrongly hit it: no module contains `u64::MAX`
/// (ranges are half-open), so "no rule", which invalid entries hold, is its right answer.
const INVALID: u64 = u64::MAX;

/// A per-thread (or per-sampler) rule cache. It is `&mut` while unwinding, so each signal
/// handler must use its own.
///
/// The cache is stamped with the generation of the table its entries came from; an unwind
/// checks that stamp once ([`Cache::prepare`]) and, if the table changed, invalidates every
/// entry before its first lookup. Per-frame lookups then compare only the address.
#[derive(Clone, Debug)]
pub struct Cache<R> {
    generation: u32,
    entries: [Entry<R>; CACHE_SLOTS],
    lookups: u64,
    misses: u64,
}

impl<R: Copy + Default> Default for Cache<R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Copy + Default> Cache<R> {
    /// An empty cache: generation 0 matches no table.
    pub fn new() -> Self {
        Cache {
            generation: 0,
            entries: [Entry {
                addr: INVALID,
                module: NEGATIVE,
                rule: R::default(),
            }; CACHE_SLOTS],
            lookups: 0,
            misses: 0,
        }
    }
}

impl<C: Copy> Cache<C> {
    /// Makes the cache valid for `table`: if its entries came from another table (another
    /// generation), invalidates them all. Call once per unwind, before
    /// [`lookup_prepared`](Self::lookup_prepared).
    #[inline(always)]
    pub fn prepare<R>(&mut self, table: &RuleTable<R>)
    where
        R: Copy,
        C: CacheRule<R>,
    {
        if self.generation != table.generation() {
            self.reset(table.generation());
        }
    }

    #[cold]
    #[inline(never)]
    fn reset<R>(&mut self, generation: u32)
    where
        C: CacheRule<R>,
    {
        for e in &mut self.entries {
            e.addr = INVALID;
            e.module = NEGATIVE;
            e.rule = C::none();
        }
        self.generation = generation;
    }

    /// The cached rule for `addr` in `table` (with its module's index), from the cache or, on a
    /// miss, from the table (and then remembered, "no rule here" included). The rule is returned
    /// in place, in its slot.
    #[inline(always)]
    pub fn lookup<R>(&mut self, table: &RuleTable<R>, addr: u64) -> Option<(u16, &C)>
    where
        R: Copy,
        C: CacheRule<R>,
    {
        self.prepare(table);
        self.count_lookups(1);
        self.lookup_prepared(table, addr)
            .filter(|&(module, _)| module != NEGATIVE)
    }

    /// [`lookup`](Self::lookup) for a cache already [`prepare`](Self::prepare)d for `table`,
    /// without counting the lookup (the unwind loop counts its lookups once, at the end).
    /// "No rule here" comes back as module `u16::MAX` with [`CacheRule::none`].
    #[inline(always)]
    pub fn lookup_prepared<R>(&mut self, table: &RuleTable<R>, addr: u64) -> Option<(u16, &C)>
    where
        R: Copy,
        C: CacheRule<R>,
    {
        let slot = slot_of(addr);
        if self.entries.get(slot).is_none_or(|e| e.addr != addr) {
            self.fill(table, addr, slot);
        }
        let e = self.entries.get(slot)?;
        Some((e.module, &e.rule))
    }

    /// Adds `n` to the number of lookups (see [`lookup_prepared`](Self::lookup_prepared)).
    #[inline(always)]
    pub fn count_lookups(&mut self, n: u64) {
        self.lookups = self.lookups.wrapping_add(n);
    }

    /// Looks `addr` up in the table and fills its slot.
    #[cold]
    #[inline(never)]
    fn fill<R>(&mut self, table: &RuleTable<R>, addr: u64, slot: usize)
    where
        R: Copy,
        C: CacheRule<R>,
    {
        self.misses = self.misses.wrapping_add(1);
        let found = table.lookup_index(addr);
        if let Some(e) = self.entries.get_mut(slot) {
            e.addr = addr;
            match found {
                Some((module, index, rule)) => {
                    e.module = module;
                    e.rule = C::cached(rule, index);
                }
                None => {
                    e.module = NEGATIVE;
                    e.rule = C::none();
                }
            }
        }
    }

    /// Lookups answered from the cache.
    pub fn hits(&self) -> u64 {
        self.lookups.wrapping_sub(self.misses)
    }

    /// Lookups that went to the table.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Forgets every entry (at the next [`prepare`](Self::prepare)) and zeroes the counters.
    pub fn clear(&mut self) {
        self.generation = 0;
        self.lookups = 0;
        self.misses = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ModuleRulesBuilder, RuleTableBuilder};
    use alloc::sync::Arc;
    use core::num::NonZeroU32;

    fn table(generation: u32, rule: u8) -> RuleTable<u8> {
        let mut m = ModuleRulesBuilder::new();
        m.push(0x100, 0x200, rule).unwrap();
        let mut b = RuleTableBuilder::new(NonZeroU32::new(generation).unwrap());
        b.add(0x100, 0x1000, 0, "m".into(), Arc::new(m.build().unwrap()));
        b.build().unwrap()
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
        // The 3 slots that also take the wrapped values see about twice as many.
        assert!(
            used.iter()
                .all(|&n| n > expected / 2 && n < expected * 5 / 2),
            "{used:?}"
        );
    }

    #[test]
    fn hits_misses_negative_entries_and_generations() {
        let t1 = table(1, 5);
        let mut c = Cache::<u8>::new();
        assert_eq!(c.lookup(&t1, 0x150), Some((0, &5)));
        assert_eq!(c.lookup(&t1, 0x150), Some((0, &5)));
        assert_eq!((c.hits(), c.misses()), (1, 1));
        assert_eq!(c.lookup(&t1, 0x250), None);
        assert_eq!(c.lookup(&t1, 0x250), None);
        assert_eq!((c.hits(), c.misses()), (2, 2));
        // Same address, new table: the old entry must not be used.
        let t2 = table(2, 6);
        assert_eq!(c.lookup(&t2, 0x150), Some((0, &6)));
        assert_eq!((c.hits(), c.misses()), (2, 3));
        // Two addresses in the same slot evict each other.
        let a = (0x151u64..)
            .find(|&a| slot_of(a) == slot_of(0x150))
            .unwrap();
        assert_eq!(
            c.lookup(&t2, a),
            if a < 0x200 { Some((0, &6)) } else { None }
        );
        assert_eq!(c.lookup(&t2, 0x150), Some((0, &6)));
        assert_eq!(c.misses(), 5);
        c.clear();
        assert_eq!(c.lookup(&t2, 0x150), Some((0, &6)));
        assert_eq!((c.hits(), c.misses()), (0, 1));
    }
}
