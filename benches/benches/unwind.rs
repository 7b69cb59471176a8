//! Nanoseconds per frame, ours against framehop 0.16, on the same captured samples in the same
//! run (the samples `bench-capture` writes; captured here if missing).

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use unwind_benches::sample::Sample;
use unwind_benches::unwinders::{Framehop, Ours};

fn sample(name: &str) -> Sample {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-samples");
    let path = dir.join(format!("{name}.sample"));
    if !path.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args([
                "run",
                "--release",
                "-p",
                "unwind-benches",
                "--bin",
                "bench-capture",
                "--",
            ])
            .arg(&dir)
            .status()
            .expect("bench-capture");
        assert!(status.success());
    }
    Sample::load(&path).expect("sample")
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
