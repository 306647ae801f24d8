//! The scheduling cycle's preparation on 5,000 and 20,000 DGX A100 nodes
//! with two bound pods each: from the watched objects to the pods due and
//! the snapshot the decisions read (`Cycle::prepare`), when one pod changed
//! since the last cycle: told so by the watches' change list, as the daemon
//! runs (`one-pod-changed`), and without it, every object compared
//! (`one-pod-changed-compared`). Beside them, the snapshot built whole from
//! the same objects (`build_snapshot`), which every cycle paid before the
//! snapshot was kept from cycle to cycle.
//!
//! `cargo bench -p gputopo-scheduler --bench cycle`

#[path = "common/cluster.rs"]
mod cluster;

use cluster::{Cluster, cluster, pod};
use criterion::{Criterion, criterion_group, criterion_main};
use gputopo_scheduler::change_feed::ChangedObjects;
use gputopo_scheduler::cluster::{AssumeCache, Objects, ReadingTrust, build_snapshot};
use gputopo_scheduler::config::Settings;
use gputopo_scheduler::cycle::{Clock, Cycle};
use gputopo_scheduler::gangs::GangObjects;
use gputopo_scheduler_core::config::SchedulerConfig;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let gangs = GangObjects::default();
    let dra = gputopo_scheduler::claims::DraObjects::default();
    for size in [5_000usize, 20_000] {
        let mut cl = cluster(size);
        let mut group = c.benchmark_group(format!("cycle-prepare-{size}-nodes"));
        group.sample_size(10);
        fn objects<'a>(
            cl: &'a Cluster,
            gangs: &'a GangObjects,
            dra: &'a gputopo_scheduler::claims::DraObjects,
        ) -> Objects<'a> {
            Objects {
                nodes: &cl.nodes,
                topologies: &cl.topologies,
                pods: &cl.pods,
                namespaces: &[],
                workloads: &gputopo_scheduler::workload_objects::NO_WORKLOADS,
                storage: &gputopo_scheduler::storage_objects::NO_STORAGE,
                gangs,
                dra,
                changed: None,
            }
        }
        let trust = ReadingTrust {
            now: k8s_openapi::jiff::Timestamp::now(),
            max_age: Duration::from_secs(120),
        };
        let config = SchedulerConfig::default();
        group.bench_function("snapshot-built-whole", |b| {
            b.iter(|| {
                black_box(
                    build_snapshot(
                        &objects(&cl, &gangs, &dra),
                        &AssumeCache::default(),
                        &config,
                        trust,
                    )
                    .expect("builds"),
                )
            })
        });
        let mut cycle = Cycle::new(Settings::default());
        let first = cycle
            .prepare(&objects(&cl, &gangs, &dra), Clock::system())
            .expect("prepares");
        assert!(first.is_some(), "the pending pod is due");
        // One bound pod changes between cycles: its GPUs move.
        let changed = size / 2;
        let name = format!("gpu-{changed:05}");
        let versions = [
            Arc::new(pod(&format!("{name}-a"), Some(&name), "2,3")),
            Arc::new(pod(&format!("{name}-a"), Some(&name), "0,1")),
        ];
        let mut turn = 0;
        // Without a change list: every object compared by pointer.
        group.bench_function("one-pod-changed-compared", |b| {
            b.iter(|| {
                turn ^= 1;
                cl.pods[changed * 2] = versions[turn].clone();
                black_box(
                    cycle
                        .prepare(&objects(&cl, &gangs, &dra), Clock::system())
                        .expect("prepares"),
                )
            })
        });
        // As the daemon runs: the watches name the one pod that changed.
        group.bench_function("one-pod-changed", |b| {
            b.iter(|| {
                turn ^= 1;
                cl.pods[changed * 2] = versions[turn].clone();
                let list = ChangedObjects {
                    pods: vec![(format!("jobs/{name}-a"), Some(versions[turn].clone()))],
                    ..ChangedObjects::default()
                };
                let mut o = objects(&cl, &gangs, &dra);
                o.changed = Some(&list);
                black_box(cycle.prepare(&o, Clock::system()).expect("prepares"))
            })
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
