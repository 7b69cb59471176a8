//! Sequences of real samples ([`unwind_samples::sequence`], captured by the profiler's
//! `--capture-samples`) replayed in order, one rule cache per thread, as the signal handler saw
//! them: ours (x86_64 and 32-bit ARM) and framehop (x86_64), with the CPU caches warm or
//! evicted before a walk.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Instant;

use framehop::x86_64::CacheX86_64;
use framehop::MustNotAllocateDuringUnwind;
use unwind_core::{Cache, RuleTable, StackImage};
use unwind_samples::sequence::{SampleRegs, Sequence, SequenceSample};

use crate::unwinders::Framehop;

/// The frames a replayed walk may write: the profiler's default (`--max-frames`), so that a
/// replay does the handler's work, no more.
pub const MAX_FRAMES: usize = 128;

/// An architecture whose samples a sequence holds.
pub trait SequenceArch: unwind_dwarf::DwarfArch {
    /// The registers of `regs`, if they are this architecture's.
    fn regs(regs: &SampleRegs) -> Option<Self::Regs>;
}

impl SequenceArch for unwind_dwarf::X86_64 {
    fn regs(regs: &SampleRegs) -> Option<Self::Regs> {
        match regs {
            SampleRegs::X86_64(r) => Some(*r),
            _ => None,
        }
    }
}

impl SequenceArch for unwind_dwarf::Arm {
    fn regs(regs: &SampleRegs) -> Option<Self::Regs> {
        match regs {
            SampleRegs::Arm(r) => Some(*r),
            _ => None,
        }
    }
}

impl SequenceArch for unwind_dwarf::Aarch64 {
    fn regs(regs: &SampleRegs) -> Option<Self::Regs> {
        match regs {
            SampleRegs::Aarch64 { regs, .. } => Some(*regs),
            _ => None,
        }
    }
}

/// What a replay counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Walks.
    pub samples: u64,
    /// Frames written.
    pub frames: u64,
    /// Rule-cache lookups (ours only).
    pub lookups: u64,
    /// Lookups that went to the table (ours only).
    pub misses: u64,
    /// Lookups answered by the second level of the cache (ours only).
    pub second_hits: u64,
    /// Lookups answered by the extent level of the cache (ours only).
    pub extent_hits: u64,
    /// Walks whose frames are not the handler's (compared over the handler's frames).
    pub differing: u64,
}

impl Counts {
    /// Lookups answered from the cache, in percent.
    pub fn hit_rate(&self) -> f64 {
        100.0 * (self.lookups - self.misses) as f64 / self.lookups.max(1) as f64
    }

    /// Misses per walk.
    pub fn misses_per_sample(&self) -> f64 {
        self.misses as f64 / self.samples.max(1) as f64
    }

    fn since(&self, before: &Counts) -> Counts {
        Counts {
            samples: self.samples - before.samples,
            frames: self.frames - before.frames,
            lookups: self.lookups - before.lookups,
            misses: self.misses - before.misses,
            second_hits: self.second_hits - before.second_hits,
            extent_hits: self.extent_hits - before.extent_hits,
            differing: self.differing - before.differing,
        }
    }
}

/// Whether a replayed walk found the frames the handler found: the same first frames, as many
/// as the handler wrote (it may have stopped at its buffer's end).
pub fn same_as_handler(found: &[u64], handler: &[u64]) -> bool {
    found.get(..handler.len()) == Some(handler)
}

/// Ours: the table built from the sequence's module files, and a cache per thread.
pub struct OursReplay<A: SequenceArch> {
    /// The table.
    pub table: RuleTable<A::Rule>,
    caches: BTreeMap<u32, Box<Cache<A>>>,
    counts: Counts,
}

impl<A: SequenceArch> OursReplay<A> {
    /// Builds the table (with a cache for every thread of the sequence, so that none is
    /// allocated while replaying).
    pub fn new(seq: &Sequence) -> Self {
        let (table, _) =
            unwind_samples::offline::table_from_files::<A>(&seq.modules, NonZeroU32::MIN)
                .expect("table");
        let caches = seq
            .samples
            .iter()
            .map(|s| (s.thread, Box::new(Cache::new())))
            .collect();
        OursReplay {
            table,
            caches,
            counts: Counts::default(),
        }
    }

    /// One walk of `s` with its thread's cache; returns the frames written to `pcs`.
    pub fn walk(&mut self, s: &SequenceSample, pcs: &mut [u64]) -> usize {
        let (Some(regs), Some(cache)) = (A::regs(&s.regs), self.caches.get_mut(&s.thread)) else {
            return 0;
        };
        Self::walk_with(
            &self.table,
            cache,
            regs,
            &StackImage::new(s.base, &s.stack).with_pointer_mask(s.regs.pointer_mask()),
            pcs,
        )
    }

    /// The walk alone (its own function, for callgrind's inclusive count): the stop reason is
    /// kept, as a profiler keeps it.
    #[inline(never)]
    pub fn walk_with(
        table: &RuleTable<A::Rule>,
        cache: &mut Cache<A>,
        regs: A::Regs,
        image: &StackImage<'_>,
        pcs: &mut [u64],
    ) -> usize {
        let r = unwind_core::unwind(table, cache, regs, image, pcs, None);
        std::hint::black_box(r.stop);
        r.frames
    }

    /// Replays every sample once, in order; returns what this pass counted.
    pub fn pass(&mut self, seq: &Sequence) -> Counts {
        let before = self.totals();
        let mut pcs = vec![0u64; MAX_FRAMES];
        let mut frames = 0;
        let mut differing = 0;
        for s in &seq.samples {
            let n = self.walk(s, &mut pcs);
            frames += n as u64;
            differing += u64::from(!same_as_handler(&pcs[..n], &s.pcs));
        }
        self.counts.samples += seq.samples.len() as u64;
        self.counts.frames += frames;
        self.counts.differing += differing;
        self.totals().since(&before)
    }

    /// Everything counted so far, the caches' counters included.
    pub fn totals(&self) -> Counts {
        let mut c = self.counts;
        for cache in self.caches.values() {
            c.lookups += cache.hits() + cache.misses();
            c.misses += cache.misses();
            c.second_hits += cache.second_level_hits();
            c.extent_hits += cache.extent_level_hits();
        }
        c
    }
}

/// framehop with a cache per thread (x86_64 only).
pub struct FramehopReplay {
    unwinder: Framehop,
    caches: BTreeMap<u32, Box<CacheX86_64<MustNotAllocateDuringUnwind>>>,
}

impl FramehopReplay {
    /// Adds every module of the sequence (with a cache for every thread).
    pub fn new(seq: &Sequence) -> Self {
        FramehopReplay {
            unwinder: Framehop::from_modules(&seq.modules),
            caches: seq
                .samples
                .iter()
                .map(|s| (s.thread, Box::new(CacheX86_64::new_in())))
                .collect(),
        }
    }

    /// One walk of `s` with its thread's cache; returns the frames written to `pcs`.
    pub fn walk(&mut self, s: &SequenceSample, pcs: &mut [u64]) -> usize {
        let (SampleRegs::X86_64(regs), Some(cache)) = (s.regs, self.caches.get_mut(&s.thread))
        else {
            return 0;
        };
        let image = StackImage::new(s.base, &s.stack);
        Framehop::unwind_with(&self.unwinder.unwinder, cache, regs, &image, pcs)
    }

    /// Replays every sample once, in order; returns the frames and walks that differ from the
    /// handler's.
    pub fn pass(&mut self, seq: &Sequence) -> Counts {
        let mut pcs = vec![0u64; MAX_FRAMES];
        let mut c = Counts {
            samples: seq.samples.len() as u64,
            ..Counts::default()
        };
        for s in &seq.samples {
            let n = self.walk(s, &mut pcs);
            c.frames += n as u64;
            c.differing += u64::from(!same_as_handler(&pcs[..n], &s.pcs));
        }
        c
    }
}

/// The largest eviction buffer [`Evictor::new`] makes.
pub const MAX_EVICT_BYTES: usize = 1 << 29;

/// A buffer written over before a walk to evict the CPU caches, as the program's own work does
/// between two of its samples: 1.5 times the last-level cache (from sysfs; 64 MiB if unknown),
/// at most 512 MiB, or `BENCH_EVICT_BYTES`.
pub struct Evictor {
    buf: Vec<u8>,
    round: u8,
}

impl Default for Evictor {
    fn default() -> Self {
        Self::new()
    }
}

impl Evictor {
    /// A buffer of the size above.
    pub fn new() -> Self {
        let bytes = std::env::var("BENCH_EVICT_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                (last_level_cache_bytes().unwrap_or(1 << 26) * 3 / 2).min(MAX_EVICT_BYTES)
            });
        Evictor {
            buf: vec![1; bytes],
            round: 0,
        }
    }

    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Writes a byte of every cache line of the buffer.
    #[inline(never)]
    pub fn evict(&mut self) {
        self.round = self.round.wrapping_add(1);
        for line in self.buf.chunks_mut(64) {
            line[0] = self.round;
        }
        std::hint::black_box(&self.buf);
    }
}

/// The largest cache's size, from `/sys/devices/system/cpu/cpu0/cache/index*/size`.
pub fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let text = std::fs::read_to_string(e.ok()?.path().join("size")).ok()?;
        let t = text.trim();
        let (n, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
        let n: usize = n.parse().ok()?;
        Some(match unit {
            "K" => n << 10,
            "M" => n << 20,
            _ => n,
        })
    })
    .max()
}

/// Reads the stack's first 4 KiB, as the interrupted code had just used them.
fn touch_stack_top(s: &SequenceSample) {
    let top = &s.stack[..s.stack.len().min(4096)];
    let mut x = 0u8;
    for line in top.chunks(64) {
        x ^= line[0];
    }
    std::hint::black_box(x);
}

/// Nanoseconds per frame of replaying `seq`: `warm`, the median of `passes` timed passes after
/// one untimed one; `evicted`, the walks of every `every`-th sample of one more pass, each
/// timed alone after the CPU caches were evicted and the stack's top touched (the handler's
/// situation: the program's data hot, the unwinder's cold), the other walks replayed untimed
/// so that the rule caches see the whole sequence.
pub fn time_per_frame(
    seq: &Sequence,
    passes: usize,
    every: usize,
    evictor: &mut Evictor,
    mut walk: impl FnMut(&SequenceSample, &mut [u64]) -> usize,
) -> (f64, f64) {
    let mut pcs = vec![0u64; MAX_FRAMES];
    let mut pass = |walk: &mut dyn FnMut(&SequenceSample, &mut [u64]) -> usize| {
        let t = Instant::now();
        let frames: usize = seq.samples.iter().map(|s| walk(s, &mut pcs)).sum();
        t.elapsed().as_nanos() as f64 / frames.max(1) as f64
    };
    pass(&mut walk);
    let mut warm: Vec<f64> = (0..passes.max(1)).map(|_| pass(&mut walk)).collect();
    warm.sort_by(f64::total_cmp);
    let median = warm[warm.len() / 2];
    let (mut ns, mut frames) = (0u128, 0usize);
    for (i, s) in seq.samples.iter().enumerate() {
        if i % every.max(1) != 0 {
            walk(s, &mut pcs);
            continue;
        }
        evictor.evict();
        touch_stack_top(s);
        let t = Instant::now();
        frames += walk(s, &mut pcs);
        ns += t.elapsed().as_nanos();
    }
    (median, ns as f64 / frames.max(1) as f64)
}

/// The architecture of a sequence's samples, `None` if it has none.
pub fn arch_of(seq: &Sequence) -> Option<unwind_dwarf::Architecture> {
    use unwind_dwarf::Architecture;
    seq.samples.first().map(|s| match s.regs {
        SampleRegs::X86_64(_) => Architecture::X86_64,
        SampleRegs::Arm(_) => Architecture::Arm,
        SampleRegs::Aarch64 { .. } => Architecture::Aarch64,
    })
}
