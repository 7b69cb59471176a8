//! The direct-mapped rule cache: 509 slots keyed by lookup address, stamped with the generation
//! of the table the rule came from.
//!
//! A slot holds a copy of the rule (never a pointer into a table) and the index of the module it
//! belongs to, or a negative entry ("no rule here"). An entry whose generation differs from the
//! current table's is treated as empty, so publishing a new table invalidates every cache
//! without touching it. 509 is prime, so `addr % 509` spreads return addresses well; it is the
//! size Valgrind, LUL and framehop settled on.

use crate::table::{Found, RuleTable};

/// The number of slots.
pub const CACHE_SLOTS: usize = 509;

/// Module index stored in negative entries.
const NEGATIVE: u16 = u16::MAX;

#[derive(Clone, Copy, Debug)]
struct Entry<R> {
    addr: u64,
    generation: u32,
    module: u16,
    rule: R,
}

/// A per-thread (or per-sampler) rule cache. It is `&mut` while unwinding, so each signal
/// handler must use its own.
#[derive(Clone, Debug)]
pub struct Cache<R> {
    entries: [Entry<R>; CACHE_SLOTS],
    hits: u64,
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
            entries: [Entry {
                addr: 0,
                generation: 0,
                module: NEGATIVE,
                rule: R::default(),
            }; CACHE_SLOTS],
            hits: 0,
            misses: 0,
        }
    }
}

impl<R: Copy> Cache<R> {
    /// The rule for `addr` in `table`, from the cache or, on a miss, from the table (and then
    /// remembered, including "no rule").
    #[inline]
    pub fn lookup(&mut self, table: &RuleTable<R>, addr: u64) -> Option<Found<R>> {
        let generation = table.generation();
        let slot = (addr % CACHE_SLOTS as u64) as usize;
        if let Some(e) = self.entries.get_mut(slot) {
            if e.addr == addr && e.generation == generation {
                self.hits = self.hits.wrapping_add(1);
                return (e.module != NEGATIVE).then_some((e.module, e.rule));
            }
            self.misses = self.misses.wrapping_add(1);
            let found = table.lookup(addr);
            e.addr = addr;
            e.generation = generation;
            match found {
                Some((module, rule)) => {
                    e.module = module;
                    e.rule = rule;
                }
                None => e.module = NEGATIVE,
            }
            return found;
        }
        table.lookup(addr)
    }

    /// Lookups answered from the cache.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Lookups that went to the table.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Forgets every entry and zeroes the counters.
    pub fn clear(&mut self) {
        for e in &mut self.entries {
            e.generation = 0;
        }
        self.hits = 0;
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
    fn hits_misses_negative_entries_and_generations() {
        let t1 = table(1, 5);
        let mut c = Cache::<u8>::new();
        assert_eq!(c.lookup(&t1, 0x150), Some((0, 5)));
        assert_eq!(c.lookup(&t1, 0x150), Some((0, 5)));
        assert_eq!((c.hits(), c.misses()), (1, 1));
        assert_eq!(c.lookup(&t1, 0x250), None);
        assert_eq!(c.lookup(&t1, 0x250), None);
        assert_eq!((c.hits(), c.misses()), (2, 2));
        // Same address, new table: the old entry must not be used.
        let t2 = table(2, 6);
        assert_eq!(c.lookup(&t2, 0x150), Some((0, 6)));
        assert_eq!((c.hits(), c.misses()), (2, 3));
        // Two addresses in the same slot evict each other.
        let a = 0x150 + CACHE_SLOTS as u64;
        assert_eq!(c.lookup(&t2, a), None);
        assert_eq!(c.lookup(&t2, 0x150), Some((0, 6)));
        assert_eq!(c.misses(), 5);
        c.clear();
        assert_eq!(c.lookup(&t2, 0x150), Some((0, 6)));
        assert_eq!((c.hits(), c.misses()), (0, 1));
    }
}
