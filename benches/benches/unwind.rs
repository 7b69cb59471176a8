//! Nanoseconds per frame of the unwind loop over a captured stack, cache warm and cold.
//! (Instruction counts and comparisons with framehop and Breakpad: the benchmark issue.)

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use unwind_benches::capture_recursion;

fn bench(c: &mut Criterion) {
    unwind::init().expect("init");
    let mut group = c.benchmark_group("unwind");
    for depth in [20u32, 60, 200] {
        let captured = capture_recursion(depth);
        let image = captured.image();
        let mut pcs = vec![0u64; 512];
        let mut cache = Box::new(unwind_core::Cache::new());
        let frames = unwind::unwind_with(captured.regs, &image, &mut cache, &mut pcs, None)
            .expect("unwind")
            .frames;
        assert!(frames as u32 > depth, "only {frames} frames");
        group.throughput(Throughput::Elements(frames as u64));
        group.bench_with_input(BenchmarkId::new("warm", frames), &frames, |b, _| {
            b.iter(|| unwind::unwind_with(captured.regs, &image, &mut cache, &mut pcs, None))
        });
        group.bench_with_input(BenchmarkId::new("cold", frames), &frames, |b, _| {
            b.iter(|| {
                cache.clear();
                unwind::unwind_with(captured.regs, &image, &mut cache, &mut pcs, None)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
