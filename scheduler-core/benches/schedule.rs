//! One pod's whole decision on 5,000 nodes × 8 GPUs: every node filtered
//! (taints, selector, resources, GPU set) and every feasible node scored,
//! the best chosen and explained. The target: an 8-GPU pod in
//! ≤ 100 µs at p99.
//!
//! Before criterion's timings it prints p50/p99/max of single decisions
//! timed one by one, since criterion reports means.

#[path = "common/cluster.rs"]
mod cluster;

use cluster::{cluster, pod, shared_pod};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::snapshot::Snapshot;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The filter criterion was given (`cargo bench -- NAME`), if any: the
/// percentile runs honour it too.
fn filter() -> Option<String> {
    std::env::args().skip(1).find(|a| !a.starts_with('-'))
}

/// p50 / p99 / max of `runs` single decisions, timed one by one.
fn percentiles(
    name: &str,
    runs: usize,
    snapshot: &Snapshot,
    pod: &PendingPod,
    config: &SchedulerConfig,
) {
    if filter().is_some_and(|f| !name.contains(&f)) {
        return;
    }
    for _ in 0..50 {
        black_box(schedule(snapshot, pod, config));
    }
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            black_box(schedule(black_box(snapshot), black_box(pod), config));
            start.elapsed()
        })
        .collect();
    times.sort();
    let at = |q: f64| times[((runs as f64 * q) as usize).min(runs - 1)];
    eprintln!(
        "{name}: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs over {runs} decisions",
        at(0.50).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        times[runs - 1].as_secs_f64() * 1e6
    );
}

/// Every pod size the target names: whole 8, 4, 2 and 1 GPUs, and
/// a quarter of one GPU.
fn cases() -> Vec<(&'static str, PendingPod)> {
    vec![
        ("8-gpu-pod", pod(8)),
        ("4-gpu-pod", pod(4)),
        ("2-gpu-pod", pod(2)),
        ("1-gpu-pod", pod(1)),
        ("gpu-share-pod", shared_pod()),
    ]
}

fn bench(c: &mut Criterion) {
    let config = SchedulerConfig::default();
    let snapshot = cluster(5_000);
    for (name, p) in cases() {
        let d = schedule(&snapshot, &p, &config);
        let placed = d.placement().expect("some node fits");
        eprintln!(
            "{name}: {} feasible of {} nodes; chose {} GPUs {:?} score {}",
            placed.feasible_nodes,
            snapshot.len(),
            placed.node,
            placed.gpus,
            placed.score
        );
        percentiles(
            &format!("schedule-5000x8/{name}"),
            2_000,
            &snapshot,
            &p,
            &config,
        );
    }
    let mut nv18 = pod(8);
    nv18.request.min_nvlink_level = Some(19);
    percentiles(
        "schedule-5000x8/unschedulable-with-reasons",
        200,
        &snapshot,
        &nv18,
        &config,
    );

    let mut group = c.benchmark_group("schedule-5000x8");
    group.throughput(Throughput::Elements(snapshot.len() as u64));
    for (name, p) in cases() {
        group.bench_function(name, |b| {
            b.iter(|| black_box(schedule(black_box(&snapshot), black_box(&p), &config)))
        });
    }
    group.bench_function("unschedulable-with-reasons", |b| {
        b.iter(|| black_box(schedule(black_box(&snapshot), black_box(&nv18), &config)))
    });
    group.finish();

    // The scale model's check (BENCHMARKS.md): a decision's cost follows
    // the feasible nodes, so 20,000 nodes should cost about four times 5,000.
    let large = cluster(20_000);
    let mut group = c.benchmark_group("schedule-20000x8");
    group.sample_size(20);
    for (name, p) in cases() {
        if name == "8-gpu-pod" || name == "1-gpu-pod" {
            group.bench_function(name, |b| {
                b.iter(|| black_box(schedule(black_box(&large), black_box(&p), &config)))
            });
        }
    }
    group.finish();
    drop(large);

    let mut group = c.benchmark_group("snapshot-build");
    group.sample_size(10);
    group.bench_function("5000x8", |b| b.iter(|| black_box(cluster(5_000))));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
