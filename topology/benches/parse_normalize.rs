//! Parse and normalize a real `nvidia-smi topo -m` (DGX A100, 8 GPUs, 12 NICs).
//! Target (issue "Discovery agent"): ≤ 50 µs. Figures go in BENCHMARKS.md.

use criterion::{Criterion, criterion_group, criterion_main};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::discover::build;
use gputopo_topology::labels::{LabelOptions, node_labels};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt"
    ))
    .expect("fixture readable");
    let mut g = c.benchmark_group("dgx-a100-12nic");
    g.bench_function("parse", |b| {
        b.iter(|| facts_from_topo(black_box(&text)).expect("parses"))
    });
    g.bench_function("parse+normalize+health", |b| {
        b.iter(|| {
            let facts = facts_from_topo(black_box(&text)).expect("parses");
            build("dgx-a100", facts).expect("normalizes")
        })
    });
    g.bench_function("parse+normalize+health+labels", |b| {
        b.iter(|| {
            let facts = facts_from_topo(black_box(&text)).expect("parses");
            let d = build("dgx-a100", facts).expect("normalizes");
            node_labels(&d.spec, LabelOptions::default())
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
