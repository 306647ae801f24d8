//! What inter-pod affinity and topology spread cost a decision, on the
//! 5,000-node bench cluster where 20 % of the bound pods carry labels and
//! required anti-affinity or a spread constraint (#27's target: a pod with
//! affinity or spread costs at most 2× a plain pod's decision).
//!
//! Before criterion's timings it prints p50/p99 of single decisions timed
//! one by one, and each case's p50 against the plain pod's. `ONLY=<case>`
//! times that case alone (to run under a profiler).

#[path = "common/cluster.rs"]
mod cluster;

use cluster::{Rng, cluster_inputs, pod};
use criterion::{Criterion, criterion_group, criterion_main};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::pod_constraints::{
    AffinityTerm, LabelSelector, PodAffinity, PodConstraints, SpreadConstraint, WeightedTerm,
    WhenUnsatisfiable,
};
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::snapshot::{Snapshot, SnapshotBuilder};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
/// Services the labelled pods belong to.
const SERVICES: u64 = 50;

fn app(k: u64) -> String {
    format!("svc-{k}")
}

fn anti_affinity(namespace: &str, app: &str) -> PodAffinity {
    PodAffinity {
        required_anti: vec![AffinityTerm::new(
            namespace,
            LabelSelector::equal(&[("app", app)]),
            HOSTNAME,
        )],
        ..PodAffinity::default()
    }
}

fn spread(app: &str, key: &str, when: WhenUnsatisfiable) -> SpreadConstraint {
    SpreadConstraint::new(1, key, when, LabelSelector::equal(&[("app", app)]))
}

/// The bench cluster, a fifth of its bound pods labelled into services,
/// half of those with required anti-affinity against their own service per
/// node, half with a zone spread constraint.
fn cluster_with_rules(nodes: usize) -> Snapshot {
    let (nodes, mut pods) = cluster_inputs(nodes, true);
    let mut rng = Rng(11);
    for p in &mut pods {
        if !rng.next().is_multiple_of(5) {
            continue;
        }
        let k = rng.next() % SERVICES;
        let mut c = PodConstraints::labelled(&[("app", &app(k))]);
        if rng.next().is_multiple_of(2) {
            c.affinity = anti_affinity(&p.namespace, &app(k));
        } else {
            c.spread = vec![spread(&app(k), ZONE, WhenUnsatisfiable::DoNotSchedule)];
        }
        p.constraints = Arc::new(c);
    }
    let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
    for n in nodes {
        b.node(n);
    }
    for p in pods {
        b.pod(p);
    }
    b.build().expect("valid cluster")
}

/// A 1-GPU pod of service 3 in the bound pods' namespace with `rules`.
fn ruled(rules: impl FnOnce(&mut PodConstraints)) -> PendingPod {
    let mut p = pod(1);
    p.namespace = "jobs".into();
    let mut c = PodConstraints::labelled(&[("app", &app(3))]);
    rules(&mut c);
    p.constraints = Arc::new(c);
    p
}

fn cases() -> Vec<(&'static str, PendingPod)> {
    vec![
        ("plain-1-gpu", pod(1)),
        ("labelled-1-gpu", ruled(|_| {})),
        (
            "required-anti-affinity",
            ruled(|c| c.affinity = anti_affinity("jobs", &app(3))),
        ),
        (
            "preferred-anti-affinity",
            ruled(|c| {
                c.affinity.preferred_anti = vec![WeightedTerm {
                    weight: 100,
                    term: AffinityTerm::new(
                        "jobs",
                        LabelSelector::equal(&[("app", &app(3))]),
                        HOSTNAME,
                    ),
                }]
            }),
        ),
        (
            "spread-zone-and-hostname",
            ruled(|c| {
                c.spread = vec![
                    spread(&app(3), ZONE, WhenUnsatisfiable::DoNotSchedule),
                    spread(&app(3), HOSTNAME, WhenUnsatisfiable::ScheduleAnyway),
                ]
            }),
        ),
    ]
}

/// p50 and p99 of `runs` single decisions, timed one by one.
fn percentiles(snapshot: &Snapshot, pod: &PendingPod, config: &SchedulerConfig) -> (f64, f64) {
    let runs = 400;
    for _ in 0..20 {
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
    let at = |q: f64| times[((runs as f64 * q) as usize).min(runs - 1)].as_secs_f64() * 1e6;
    (at(0.50), at(0.99))
}

fn bench(c: &mut Criterion) {
    let config = SchedulerConfig::default();
    let snapshot = cluster_with_rules(5_000);
    eprintln!(
        "{} nodes, {} bound pods, {} with affinity terms",
        snapshot.len(),
        snapshot.pod_count(),
        snapshot.affinity_pods().count()
    );
    let mut plain = None;
    for (name, p) in cases()
        .into_iter()
        .filter(|(n, _)| std::env::var("ONLY").map_or(true, |o| o == *n))
    {
        let d = schedule(&snapshot, &p, &config);
        let placed = d.placement().map_or("none".to_string(), |p| p.node.clone());
        let (p50, p99) = percentiles(&snapshot, &p, &config);
        let base = *plain.get_or_insert(p50);
        eprintln!(
            "pod-rules-5000x8/{name}: p50 {p50:.1} µs, p99 {p99:.1} µs, {:.2}× the plain pod's p50; placed on {placed}",
            p50 / base
        );
    }
    let mut group = c.benchmark_group("pod-rules-5000x8");
    for (name, p) in cases() {
        group.bench_function(name, |b| {
            b.iter(|| black_box(schedule(black_box(&snapshot), black_box(&p), &config)))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
