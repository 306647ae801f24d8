//! The snapshot kept up to date (`LiveSnapshot`) against building it whole,
//! at 5,000 and 20,000 nodes × 8 GPUs (two bound pods per node on average):
//! what one watch event costs the scheduler's next cycle.
//!
//! * `build`: the whole snapshot from its inputs (what every cycle paid
//!   before the live snapshot);
//! * `pod-bound` / `pod-gone`: a pod bound to a node, then gone again;
//! * `reading`: one node's kubelet reading of who holds which GPU changed;
//! * `node-heartbeat`: a node rewritten unchanged (a status update).

#[path = "common/cluster.rs"]
mod cluster;

use cluster::cluster_inputs;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use gputopo_api::GpuAllocation;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::snapshot::{BoundPodInput, GpuHolding, LiveSnapshot, NodeInput};
use std::hint::black_box;
use std::time::Duration;

fn live(nodes: &[NodeInput], pods: &[BoundPodInput]) -> LiveSnapshot {
    let mut live = LiveSnapshot::new(&SchedulerConfig::default());
    for n in nodes {
        live.set_node(n.clone());
    }
    for p in pods {
        live.set_pod(p.clone());
    }
    live.snapshot().expect("valid cluster");
    live
}

fn bench(c: &mut Criterion) {
    for size in [5_000usize, 20_000] {
        let (nodes, pods) = cluster_inputs(size, true);
        let mut group = c.benchmark_group(format!("live-snapshot-{size}x8"));
        group.sample_size(10);
        group.bench_function("build", |b| {
            b.iter_batched(
                || live(&nodes[..0], &[]),
                |mut l| {
                    for n in &nodes {
                        l.set_node(n.clone());
                    }
                    for p in &pods {
                        l.set_pod(p.clone());
                    }
                    black_box(l.snapshot().map(|s| s.len()).expect("builds"))
                },
                BatchSize::PerIteration,
            )
        });
        group.sample_size(50);
        let mut l = live(&nodes, &pods);
        let node = &nodes[size / 2];
        let mut pod = BoundPodInput::new("ml", "new", &node.name);
        pod.requests =
            Resources::from_list([("cpu", "8"), ("memory", "64Gi")], "bench").expect("ok");
        pod.requests.gpus = 1;
        pod.holding = GpuHolding::Unknown(1);
        group.bench_function("pod-bound-then-gone", |b| {
            b.iter(|| {
                l.set_pod(black_box(pod.clone()));
                black_box(l.snapshot().map(|s| s.len()).expect("kept"));
                l.remove_pod("ml", "new");
                black_box(l.snapshot().map(|s| s.len()).expect("kept"))
            })
        });
        let mut second = 0i64;
        let mut reading = node.clone();
        group.bench_function("reading", |b| {
            b.iter(|| {
                second += 1;
                reading.gpu_allocations = vec![GpuAllocation {
                    gpu: 0,
                    pods: vec![format!("jobs/{}-p0", node.name)],
                    holders: Vec::new(),
                }];
                reading.allocations_observed_at =
                    Some(Timestamp::from_second(1_000_000 + second).expect("a time"));
                l.set_node(reading.clone());
                black_box(l.snapshot().map(|s| s.len()).expect("kept"))
            })
        });
        group.bench_function("node-heartbeat", |b| {
            b.iter(|| {
                l.set_node(black_box(reading.clone()));
                black_box(l.snapshot().map(|s| s.len()).expect("kept"))
            })
        });
        let counts = l.counts();
        eprintln!("live-snapshot-{size}x8: {counts:?} (one whole build: the first)");
        assert_eq!(counts.full_builds, 1, "no change in this bench moves nodes");
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
