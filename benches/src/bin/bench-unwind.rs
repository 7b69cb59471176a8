//! Runs one unwinder K times on one sample, for instruction counting under callgrind:
//! `bench-unwind SAMPLE MODE K`, MODE one of `ours`, `ours-cold`, `ours-reset`, `framehop`,
//! `framehop-cold`, `fp`. Setup and one warm-up unwind run whatever K is, so
//! `(instructions(K) - instructions(0)) / (K * frames)` is the cost per frame.
//!
//! - `ours`, `framehop`: warm cache (every lookup after the warm-up a hit, in its slot or, where
//!   two of the stack's addresses share a slot, in the second level of ours's cache).
//! - `ours-cold`, `framehop-cold`: the cache emptied before every unwind.
//! - `ours-reset`: only empties the cache (what `ours-cold` spends besides misses).
//! - `ours-scan`: `ours` with stack scanning on (frames without a rule or a frame record are
//!   found by scanning: every such frame scans on every walk). Prints how many frames a scan
//!   found (`scanned N`).
//! - `fp`: the frame-pointer walk from the sample's `fp` (the floor).
//! - `breakpad`: rust-minidump's Breakpad-compatible walker with `dump_syms` symbol files from
//!   `syms/` beside the sample (loaded during the warm-up walk, so not counted per frame).
//! - `breakpad-setup`: the same setup without any walk, to count symbol-file loading apart.

use std::hint::black_box;
use std::path::Path;

use unwind_benches::breakpad::Breakpad;
use unwind_benches::sample::Sample;
use unwind_benches::unwinders::{frame_pointer_walk, Framehop, Ours};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(mode), Some(k)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: bench-unwind SAMPLE MODE K");
        std::process::exit(2);
    };
    let k: u64 = k.parse().expect("K");
    let sample = Sample::load(Path::new(path)).expect("sample");
    let image = sample.image();
    let mut pcs = vec![0u64; 1024];
    // Lookups answered by the second level of the cache, in the K unwinds (ours only).
    let mut second_hits = 0;
    // Frames found by a stack scan (ours-scan only, counted before the K unwinds).
    let mut scanned = 0;
    let (frames, misses) = match mode.as_str() {
        "ours" | "ours-cold" | "ours-reset" | "ours-scan" => {
            let mut ours = Ours::with_scanning(&sample, mode == "ours-scan");
            if mode == "ours-scan" {
                scanned = ours.scanned_frames(&sample, &image);
            }
            let frames = ours.unwind(&sample, &image, &mut pcs);
            let before = ours.cache.misses();
            let second_before = ours.cache.second_level_hits();
            // `clear` zeroes the counters: cold runs add up each unwind's misses.
            let mut cold_misses = 0;
            for _ in 0..k {
                match mode.as_str() {
                    "ours" | "ours-scan" => {
                        black_box(ours.unwind(&sample, &image, &mut pcs));
                    }
                    "ours-cold" => {
                        ours.cache.clear();
                        black_box(ours.unwind(&sample, &image, &mut pcs));
                        cold_misses += ours.cache.misses();
                    }
                    _ => {
                        ours.cache.clear();
                        ours.cache.prepare(&ours.table);
                    }
                }
            }
            let misses = if mode == "ours" || mode == "ours-scan" {
                second_hits = ours.cache.second_level_hits() - second_before;
                ours.cache.misses() - before
            } else {
                cold_misses
            };
            (frames, misses)
        }
        "framehop" | "framehop-cold" => {
            let mut fh = Framehop::new(&sample);
            let frames = fh.unwind(&sample, &image, &mut pcs);
            for _ in 0..k {
                if mode == "framehop-cold" {
                    fh.clear();
                }
                black_box(fh.unwind(&sample, &image, &mut pcs));
            }
            (frames, 0)
        }
        "breakpad" | "breakpad-setup" => {
            let syms = Path::new(path)
                .parent()
                .unwrap_or(Path::new("."))
                .join("syms");
            let bp = Breakpad::new(&sample, &syms);
            if mode == "breakpad-setup" {
                println!("frames 0 misses 0");
                return;
            }
            let frames = bp.unwind(&sample, &mut pcs);
            for _ in 0..k {
                black_box(bp.unwind(&sample, &mut pcs));
            }
            (frames, 0)
        }
        "fp" => {
            let frames = frame_pointer_walk(sample.regs.fp, &image, &mut pcs);
            for _ in 0..k {
                black_box(frame_pointer_walk(
                    black_box(sample.regs.fp),
                    &image,
                    &mut pcs,
                ));
            }
            (frames, 0)
        }
        other => {
            eprintln!("bench-unwind: unknown mode {other}");
            std::process::exit(2);
        }
    };
    println!("frames {frames} misses {misses} second_hits {second_hits} scanned {scanned}");
}
