//! Nanoseconds per frame, ours against framehop 0.16, on the same captured samples in the same
//! run (the samples `bench-capture` writes; captured here if missing).

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use unwind_benches::capture;
use unwind_benches::sample::Sample;
use unwind_benches::unwinders::{frame_pointer_walk, Framehop, Ours};

/// The sample `bench-capture` wrote, or (for example in `cargo test --all-targets` on a clean
/// checkout) one captured by this process into a directory of its own.
fn sample(name: &str) -> Sample {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-samples");
    let path = shared.join(format!("{name}.sample"));
    if path.exists() {
        return Sample::load(&path).expect("sample");
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-samples-criterion");
    std::fs::create_dir_all(&dir).expect("sample directory");
    let dir = std::fs::canonicalize(&dir).expect("sample directory");
    unwind_in_process::init().expect("init");
    match name {
        "rec200" => capture::recursion(&dir, 200),
        "profile" => capture::profile(&dir),
        "fp200" => capture::fp_chain(&dir, 200).expect("frame-pointer sample"),
        other => panic!("no sample {other}"),
    }
}

fn bench(c: &mut Criterion) {
    for name in ["rec200", "profile"] {
        let s = sample(name);
        let image = s.image();
        let mut pcs = vec![0u64; 1024];
        let mut ours = Ours::new(&s);
        let mut fh = Framehop::new(&s);
        let frames = ours.unwind(&s, &image, &mut pcs);
        assert_eq!(
            frames, s.expect,
            "{name}: stale sample? recapture with bench-capture"
        );
        assert_eq!(
            frames,
            fh.unwind(&s, &image, &mut pcs),
            "frame counts differ"
        );
        let mut group = c.benchmark_group(format!("unwind-{name}"));
        group.throughput(Throughput::Elements(frames as u64));
        group.bench_function("ours", |b| b.iter(|| ours.unwind(&s, &image, &mut pcs)));
        group.bench_function("framehop", |b| b.iter(|| fh.unwind(&s, &image, &mut pcs)));
        group.finish();
    }
    // The floor: the frame-pointer walk over a chain built with frame pointers.
    let s = sample("fp200");
    let image = s.image();
    let mut pcs = vec![0u64; 1024];
    let frames = frame_pointer_walk(s.regs.fp, &image, &mut pcs);
    let mut group = c.benchmark_group("unwind-fp200");
    group.throughput(Throughput::Elements(frames as u64));
    group.bench_function("frame-pointers", |b| {
        b.iter(|| frame_pointer_walk(s.regs.fp, &image, &mut pcs))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
