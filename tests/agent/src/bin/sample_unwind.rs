//! Unwinds one armv7 sample (as the agent writes them) K times, for instruction counting:
//! `sample-unwind SAMPLE SYSROOT K` (SYSROOT `-` for none). Built for the host, it measures
//! ARM unwinding on x86_64 under callgrind; built for armv7, it runs under
//! `qemu-arm -singlestep -d nochain,exec`, which logs each guest instruction executed in the
//! address range it prints (`unwind_once`).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::path::Path;

use unwind_core::arm::Rule;
use unwind_core::{Arm, Cache, RuleTable, StackImage};
use unwind_samples::offline::{table_from_files, ArmSample};

/// One unwind; never inlined, so its instructions can be told apart in a trace. The stop
/// reason is kept (`black_box`), as a profiler keeps it: left unused, the compiler drops its
/// bookkeeping from the loop.
#[inline(never)]
fn unwind_once(
    table: &RuleTable<Rule>,
    cache: &mut Cache<Arm>,
    sample: &ArmSample,
    image: &StackImage<'_>,
    pcs: &mut [u64],
) -> usize {
    let r = unwind_core::unwind(table, cache, sample.regs, image, pcs, None);
    black_box(r.stop);
    r.frames
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(sysroot), Some(k)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: sample-unwind SAMPLE SYSROOT K");
        std::process::exit(2);
    };
    let k: u64 = k.parse().expect("K");
    let sysroot = (sysroot != "-").then(|| Path::new(sysroot));
    let sample = ArmSample::load(Path::new(path), sysroot).expect("sample");
    let (table, _) = table_from_files::<Arm>(&sample.modules, NonZeroU32::MIN).expect("table");
    let mut cache = Box::new(Cache::new());
    let image = StackImage::new(sample.base, &sample.bytes);
    let mut pcs = [0u64; 256];
    let frames = unwind_once(&table, &mut cache, &sample, &image, &mut pcs);
    for _ in 0..k {
        black_box(unwind_once(&table, &mut cache, &sample, &image, &mut pcs));
    }
    println!(
        "frames {frames} misses {} unwind_once {:#x} matches {}",
        cache.misses(),
        unwind_once as *const () as usize,
        pcs[..frames] == sample.pcs[..]
    );
}
