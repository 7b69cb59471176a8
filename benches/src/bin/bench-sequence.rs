//! Replays a sequence of real samples (`unwind-profiler record --capture-samples N`) in order,
//! one rule cache per thread: `bench-sequence SEQUENCE MODE [ARGS] [--sysroot DIR]`.
//!
//! - `counts`: one counted pass of ours from empty caches (`ours first pass:`, what the
//!   handler met: every address new to it once), then one counted pass after it (`ours:`), and
//!   framehop's pass after an untimed one (x86_64): walks, frames, lookups, hit rate, misses,
//!   second-level hits, and walks whose frames differ from the handler's.
//! - `passes N ours`, `passes N framehop`: for callgrind: setup and one warm-up pass, then N
//!   passes (`passes N ours-first`: without the warm-up pass, so that N = 1 is the first pass),
//!   so that the difference between N = 1 and N = 0 of the instructions collected in
//!   `OursReplay::walk_with`, `Cache::fill` or `Framehop::unwind_with`
//!   (`--toggle-collect`) is what one pass in order costs there; prints the frames (and ours's
//!   misses and second-level hits) of the N passes.
//! - `time PASSES EVERY`: nanoseconds per frame, warm (median of PASSES passes) and with the CPU
//!   caches evicted before the walk of every EVERY-th sample ([`replay::time_per_frame`]).

use std::path::{Path, PathBuf};

use unwind_benches::replay::{self, Counts, Evictor, FramehopReplay, OursReplay, SequenceArch};
use unwind_samples::sequence::Sequence;

fn usage() -> ! {
    eprintln!("usage: bench-sequence SEQUENCE counts|passes N ours|ours-first|framehop|time PASSES EVERY [--sysroot DIR]");
    std::process::exit(2);
}

fn print_counts(who: &str, c: &Counts) {
    println!(
        "{who}: samples {} frames {} lookups {} hits {:.2} % misses {} ({:.3} per sample) second-level-hits {} extent-level-hits {} differing {}",
        c.samples,
        c.frames,
        c.lookups,
        c.hit_rate(),
        c.misses,
        c.misses_per_sample(),
        c.second_hits,
        c.extent_hits,
        c.differing
    );
}

fn run<A: SequenceArch>(seq: &Sequence, mode: &str, args: &[String]) {
    let x86 = replay::arch_of(seq) == Some(unwind_dwarf::Architecture::X86_64);
    let num = |i: usize, default: usize| -> usize {
        args.get(i)
            .map_or(default, |a| a.parse().unwrap_or_else(|_| usage()))
    };
    match mode {
        "counts" => {
            let longest = seq.samples.iter().map(|s| s.stack.len()).max().unwrap_or(0);
            let at_longest = seq
                .samples
                .iter()
                .filter(|s| s.stack.len() == longest)
                .count();
            println!(
                "threads {} modules {} longest stack copy {longest} bytes ({at_longest} samples)",
                seq.samples
                    .iter()
                    .map(|s| s.thread)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len(),
                seq.modules.len()
            );
            let mut ours = OursReplay::<A>::new(seq);
            print_counts("ours first pass", &ours.pass(seq));
            print_counts("ours", &ours.pass(seq));
            if std::env::var_os("BENCH_SHOW_DIFFERING").is_some() {
                let mut pcs = vec![0u64; replay::MAX_FRAMES];
                for (i, s) in seq.samples.iter().enumerate() {
                    let n = ours.walk(s, &mut pcs);
                    if !replay::same_as_handler(&pcs[..n], &s.pcs) {
                        println!(
                            "sample {i} thread {} stack {:#x}+{:#x}: handler {} frames, replay {n}: {:x?} / {:x?}",
                            s.thread, s.base, s.stack.len(), s.pcs.len(), &s.pcs, &pcs[..n]
                        );
                    }
                }
            }
            if x86 {
                let mut fh = FramehopReplay::new(seq);
                fh.pass(seq);
                print_counts("framehop", &fh.pass(seq));
            }
        }
        "passes" if matches!(args.get(1).map(String::as_str), Some("ours" | "ours-first")) => {
            let mut ours = OursReplay::<A>::new(seq);
            if args[1] == "ours" {
                ours.pass(seq);
            }
            let before = ours.totals();
            for _ in 0..num(0, 1) {
                ours.pass(seq);
            }
            let after = ours.totals();
            println!(
                "ours: frames {} misses {} second-level-hits {} extent-level-hits {}",
                after.frames - before.frames,
                after.misses - before.misses,
                after.second_hits - before.second_hits,
                after.extent_hits - before.extent_hits
            );
        }
        "passes" if x86 && args.get(1).map(String::as_str) == Some("framehop") => {
            let mut fh = FramehopReplay::new(seq);
            fh.pass(seq);
            let frames: u64 = (0..num(0, 1)).map(|_| fh.pass(seq).frames).sum();
            println!("framehop: frames {frames}");
        }
        "time" => {
            let (passes, every) = (num(0, 5), num(1, 8));
            let mut evictor = Evictor::new();
            let mut ours = OursReplay::<A>::new(seq);
            let (warm, cold) =
                replay::time_per_frame(seq, passes, every, &mut evictor, |s, p| ours.walk(s, p));
            println!(
                "ours: warm {warm:.2} ns/frame evicted {cold:.2} ns/frame (evicting {} MiB)",
                evictor.bytes() >> 20
            );
            if x86 {
                let mut fh = FramehopReplay::new(seq);
                let (warm, cold) =
                    replay::time_per_frame(seq, passes, every, &mut evictor, |s, p| fh.walk(s, p));
                println!("framehop: warm {warm:.2} ns/frame evicted {cold:.2} ns/frame");
            }
        }
        _ => usage(),
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let sysroot = args.iter().position(|a| a == "--sysroot").map(|i| {
        let dir = args.get(i + 1).cloned().unwrap_or_else(|| usage());
        args.drain(i..i + 2);
        PathBuf::from(dir)
    });
    let (Some(path), Some(mode)) = (args.first(), args.get(1)) else {
        usage()
    };
    let seq = Sequence::load(Path::new(path), sysroot.as_deref()).unwrap_or_else(|e| {
        eprintln!("bench-sequence: {e}");
        std::process::exit(1);
    });
    use unwind_dwarf::Architecture;
    match replay::arch_of(&seq) {
        Some(Architecture::X86_64) => run::<unwind_dwarf::X86_64>(&seq, mode, &args[2..]),
        Some(Architecture::Arm) => run::<unwind_dwarf::Arm>(&seq, mode, &args[2..]),
        Some(Architecture::Aarch64) => run::<unwind_dwarf::Aarch64>(&seq, mode, &args[2..]),
        None => {
            eprintln!("bench-sequence: {path}: no samples");
            std::process::exit(1);
        }
    }
}
