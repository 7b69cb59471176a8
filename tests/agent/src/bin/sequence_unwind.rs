//! Replays a sequence of samples (`unwind_samples::sequence`, as the profiler's
//! `--capture-samples` and the agent's `AGENT_SEQUENCE` write them) K times in order, one rule
//! cache per thread, for instruction counting: `sequence-unwind SEQUENCE SYSROOT K` (SYSROOT
//! `-` for none). Built for the host, it measures any architecture's rules on x86_64 under
//! callgrind; built for the sequence's own architecture, it runs under
//! `qemu-aarch64 -singlestep -d nochain,exec` (or qemu-arm), which logs each guest instruction
//! executed in the address range it prints (`unwind_once`): the unwinder's own instructions
//! on that architecture. One warm-up pass precedes the K counted ones, as in
//! `bench-sequence passes`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::path::Path;

use unwind_core::{Aarch64, Arch, Arm, Cache, RuleTable, StackImage, X86_64};
use unwind_dwarf::DwarfArch;
use unwind_samples::sequence::{SampleRegs, Sequence};

/// The frames a walk may write: the profiler's default, as `bench-sequence` replays.
const MAX_FRAMES: usize = 128;

/// One walk; never inlined, so its instructions can be told apart in a trace. The stop reason
/// is kept (`black_box`), as a profiler keeps it.
#[inline(never)]
fn unwind_once<A: Arch>(
    table: &RuleTable<A::Rule>,
    cache: &mut Cache<A>,
    regs: A::Regs,
    image: &StackImage<'_>,
    pcs: &mut [u64],
) -> usize {
    let r = unwind_core::unwind(table, cache, regs, image, pcs, None);
    black_box(r.stop);
    r.frames
}

/// Replays `seq` once plus `k` times with `A`'s rules (`regs` picks a sample's registers);
/// prints the frames of one pass, the misses of the counted passes and `unwind_once`'s address.
fn replay<A: DwarfArch>(seq: &Sequence, k: u64, regs: fn(&SampleRegs) -> Option<A::Regs>) {
    let (table, _) = unwind_samples::offline::table_from_files::<A>(&seq.modules, NonZeroU32::MIN)
        .expect("table");
    let mut caches: BTreeMap<u32, Box<Cache<A>>> = seq
        .samples
        .iter()
        .map(|s| (s.thread, Box::new(Cache::new())))
        .collect();
    let samples: Vec<_> = seq
        .samples
        .iter()
        .filter_map(|s| {
            let image = StackImage::new(s.base, &s.stack).with_pointer_mask(s.regs.pointer_mask());
            Some((s.thread, regs(&s.regs)?, image, &s.pcs))
        })
        .collect();
    let mut pcs = [0u64; MAX_FRAMES];
    let mut pass = |caches: &mut BTreeMap<u32, Box<Cache<A>>>| -> (u64, u64) {
        let (mut frames, mut differing) = (0u64, 0u64);
        for (thread, regs, image, handler) in &samples {
            let cache = caches.get_mut(thread).expect("a cache per thread");
            let n = unwind_once(&table, cache, *regs, image, &mut pcs);
            frames += n as u64;
            differing += u64::from(pcs.get(..handler.len()) != Some(&handler[..]));
        }
        (frames, differing)
    };
    let (frames, differing) = pass(&mut caches);
    let before: u64 = caches.values().map(|c| c.misses()).sum();
    for _ in 0..k {
        black_box(pass(&mut caches));
    }
    let misses = caches.values().map(|c| c.misses()).sum::<u64>() - before;
    println!(
        "samples {} frames {frames} differing {differing} misses {misses} unwind_once {:#x}",
        samples.len(),
        unwind_once::<A> as *const () as usize
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(sysroot), Some(k)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: sequence-unwind SEQUENCE SYSROOT K");
        std::process::exit(2);
    };
    let k: u64 = k.parse().expect("K");
    let sysroot = (sysroot != "-").then(|| Path::new(sysroot));
    let seq = Sequence::load(Path::new(path), sysroot).expect("sequence");
    match seq.samples.first().map(|s| s.regs) {
        Some(SampleRegs::X86_64(_)) => replay::<X86_64>(&seq, k, |r| match r {
            SampleRegs::X86_64(r) => Some(*r),
            _ => None,
        }),
        Some(SampleRegs::Arm(_)) => replay::<Arm>(&seq, k, |r| match r {
            SampleRegs::Arm(r) => Some(*r),
            _ => None,
        }),
        Some(SampleRegs::Aarch64 { .. }) => replay::<Aarch64>(&seq, k, |r| match r {
            SampleRegs::Aarch64 { regs, .. } => Some(*regs),
            _ => None,
        }),
        None => eprintln!("sequence-unwind: no samples"),
    }
}
