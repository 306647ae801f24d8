//! The fragmentation part of the score (FGD's measure against a target
//! workload): the measure against a brute-force oracle, the part's range, the
//! choices it changes, and that callers without a target workload see no
//! change at all.

mod common;

use common::*;
use gputopo_api::GpuShare;
use gputopo_scheduler_core::config::{PodType, TargetWorkload};
use gputopo_scheduler_core::config::{SchedulerConfig, ScoreWeights};
use gputopo_scheduler_core::explain::{Verdict, explain};
use gputopo_scheduler_core::fragmentation::{self, NodeFree};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::snapshot::{BoundPodInput, GpuHolding, NodeInput, Snapshot};
use proptest::prelude::*;
use std::sync::Arc;

/// The measure written as the module docs state it, one type at a time.
fn oracle(w: &TargetWorkload, node: &NodeFree<'_>) -> f64 {
    let free: Vec<u32> = node.gpu_milli.iter().map(|&g| g.min(1000)).collect();
    let total: f64 = free.iter().map(|&g| f64::from(g)).sum();
    let mut frag = 0.0;
    for t in w.types() {
        let allowed =
            t.models.is_empty() || node.model.is_some_and(|m| t.models.iter().any(|x| x == m));
        let fitting = free.iter().filter(|&&g| g >= t.milli).count() as u32;
        let runs = t.gpus >= 1
            && allowed
            && node.cpu_milli >= 0
            && node.cpu_milli as u64 >= t.cpu_milli
            && fitting >= t.gpus;
        let unusable = if runs {
            free.iter()
                .filter(|&&g| g < t.milli)
                .map(|&g| f64::from(g))
                .sum()
        } else {
            total
        };
        frag += t.weight * unusable;
    }
    frag
}

fn type_strategy() -> impl Strategy<Value = PodType> {
    (
        0u64..40_000,
        prop_oneof![Just(0u32), Just(1), Just(2), Just(4), Just(8)],
        1u32..=1000,
        prop_oneof![
            Just(vec![]),
            Just(vec!["A".to_string()]),
            Just(vec!["B".to_string(), "A".to_string()])
        ],
        1u32..50,
    )
        .prop_map(|(cpu, gpus, milli, models, weight)| PodType {
            cpu_milli: cpu,
            gpus,
            // Several GPUs are whole; one may be a share.
            milli: if gpus > 1 { 1000 } else { milli },
            models,
            weight: f64::from(weight),
        })
}

proptest! {
    #[test]
    fn the_measure_equals_the_formula_and_stays_within_the_free_gpu(
        types in proptest::collection::vec(type_strategy(), 1..12),
        free in proptest::collection::vec(prop_oneof![Just(0u32), Just(1000), 0u32..=1000], 0..9),
        cpu in -2_000i64..50_000,
        model in prop_oneof![Just(None), Just(Some("A")), Just(Some("C"))],
    ) {
        let w = TargetWorkload::new(types).unwrap();
        let sum: f64 = w.types().iter().map(|t| t.weight).sum();
        prop_assert!((sum - 1.0).abs() < 1e-9);
        let node = NodeFree { cpu_milli: cpu, model, gpu_milli: &free };
        let got = w.fragmentation(&node);
        let want = oracle(&w, &node);
        prop_assert!((got - want).abs() < 1e-6 * want.max(1.0), "{got} != {want}");
        let total: f64 = free.iter().map(|&g| f64::from(g)).sum();
        prop_assert!(got >= -1e-9 && got <= total + 1e-6, "{got} outside 0..={total}");
        // Less CPU never makes the free GPU more usable.
        let poorer = NodeFree { cpu_milli: cpu - 1_000, ..node };
        prop_assert!(w.fragmentation(&poorer) >= got - 1e-6);
    }

    #[test]
    fn the_part_is_one_half_at_no_change_and_falls_as_fragmentation_grows(
        a in -8_000.0f64..8_000.0, b in -8_000.0f64..8_000.0,
    ) {
        let (pa, pb) = (fragmentation::part(a), fragmentation::part(b));
        prop_assert!(pa > 0.0 && pa < 1.0);
        if a < b { prop_assert!(pa >= pb); }
        prop_assert!((fragmentation::part(0.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn without_a_target_workload_the_fragmentation_weight_changes_nothing(
        gpus in 0u32..=4, held in 0u32..=255, weight in 0u32..5_000, seed in any::<u64>(),
    ) {
        let snap = busy_nodes(held, seed);
        let p = pod(gpus, &[]);
        let plain = SchedulerConfig::default();
        let weighted = SchedulerConfig {
            weights: ScoreWeights { fragmentation: weight, ..ScoreWeights::default() },
            ..SchedulerConfig::default()
        };
        let rows = |c: &SchedulerConfig| -> Vec<(String, Option<f64>, Option<f64>)> {
            explain(&snap, &p, c)
                .rows
                .into_iter()
                .map(|r| (r.node, r.parts.map(|x| x.total), r.parts.and_then(|x| x.fragmentation)))
                .collect()
        };
        let (a, b) = (rows(&plain), rows(&weighted));
        prop_assert_eq!(&a, &b);
        prop_assert!(a.iter().all(|r| r.2.is_none()));
        prop_assert_eq!(
            schedule(&snap, &p, &plain).placement().map(|x| x.node.clone()),
            schedule(&snap, &p, &weighted).placement().map(|x| x.node.clone())
        );
    }

    #[test]
    fn with_a_target_workload_every_feasible_node_gets_a_part_in_whole_points(
        gpus in 0u32..=4, held in 0u32..=255, seed in any::<u64>(),
    ) {
        let snap = busy_nodes(held, seed);
        let config = with_target(&[(4_000, 2, 1000, 3.0), (2_000, 1, 500, 1.0), (1_000, 0, 0, 1.0)]);
        for row in explain(&snap, &pod(gpus, &[]), &config).rows {
            if row.verdict == Verdict::Rejected {
                continue;
            }
            let parts = row.parts.expect("feasible");
            let f = parts.fragmentation.expect("the part applies");
            prop_assert!((0.0..=1.0).contains(&f));
            prop_assert!(((f * 100.0).round() - f * 100.0).abs() < 1e-9, "{f} is not in whole points");
        }
    }
}

/// Three 8-GPU nodes with GPUs held per the bits of `held` (cycled by seed).
fn busy_nodes(held: u32, seed: u64) -> Snapshot {
    let mut rng = Rng(seed);
    let mut pods = Vec::new();
    let names = ["a", "b", "c"];
    for (i, name) in names.iter().enumerate() {
        let mask = (held.rotate_left(rng.below(8) as u32 + i as u32)) & 0xff;
        let gpus: Vec<u32> = (0..8).filter(|g| mask & (1 << g) != 0).collect();
        if !gpus.is_empty() {
            pods.push(holder(&format!("h-{name}"), name, &gpus, None));
        }
    }
    snapshot(names.iter().map(|n| gpu_node(n, a100())).collect(), pods)
}

fn with_target(types: &[(u64, u32, u32, f64)]) -> SchedulerConfig {
    let w = TargetWorkload::new(types.iter().map(|&(cpu, gpus, milli, weight)| PodType {
        weight,
        ..PodType::new(cpu, gpus, milli)
    }))
    .unwrap();
    SchedulerConfig {
        target_workload: Some(Arc::new(w)),
        ..SchedulerConfig::default()
    }
}

fn node_with_free(name: &str, free: u32) -> (NodeInput, Option<BoundPodInput>) {
    let node = gpu_node(name, a100());
    let held: Vec<u32> = (free..8).collect();
    let pod = (!held.is_empty()).then(|| holder(&format!("h-{name}"), name, &held, None));
    (node, pod)
}

fn cluster(free: &[(&str, u32)]) -> Snapshot {
    let (nodes, pods): (Vec<_>, Vec<_>) = free.iter().map(|&(n, f)| node_with_free(n, f)).unzip();
    snapshot(nodes, pods.into_iter().flatten().collect())
}

#[test]
fn a_single_gpu_pod_keeps_pairs_whole_when_pairs_are_expected() {
    // "a" has 3 free GPUs, "b" 2. Packing alone takes "b" (busier); with a
    // workload of 2-GPU pods, taking one of "b"'s two strands the other,
    // while "a" keeps a pair.
    let snap = cluster(&[("a", 3), ("b", 2)]);
    let p = pod(1, &[]);
    assert_eq!(
        schedule(&snap, &p, &SchedulerConfig::default())
            .placement()
            .unwrap()
            .node,
        "b"
    );
    let config = with_target(&[(1_000, 2, 1000, 1.0)]);
    let d = schedule(&snap, &p, &config);
    let placed = d.placement().unwrap();
    assert_eq!(placed.node, "a", "{}", placed.explanation);
    assert!(
        placed.explanation.contains("fragmentation"),
        "{}",
        placed.explanation
    );
    // The part says why: on "b" the pair breaks (more unusable GPU).
    let parts = |node: &str| {
        explain(&snap, &p, &config)
            .rows
            .into_iter()
            .find(|r| r.node == node)
            .and_then(|r| r.parts)
            .and_then(|x| x.fragmentation)
            .unwrap()
    };
    assert!(parts("a") > parts("b"), "{} vs {}", parts("a"), parts("b"));
}

#[test]
fn a_share_takes_the_gpu_whose_remainder_the_workload_can_still_use() {
    // GPU 0 has 300 milli in use, the others are idle. A 400-milli share on
    // GPU 0 fills it to 700 (inside the 70-80 % band: the choice without a
    // target) but leaves 300 that no 600-milli pod can use; on an idle GPU
    // it leaves 600, and GPU 0 keeps its 700: both still usable.
    let node = gpu_node("n", a100());
    let mut s = BoundPodInput::new("default", "s", "n");
    s.request = Ok(request(0, &[("gputopo.dev/gpu-share", "0.3")]));
    s.holding = GpuHolding::Shared {
        gpu: Some(0),
        share: GpuShare::Milli(300),
    };
    let snap = snapshot(vec![node], vec![s]);
    let p: PendingPod = pod(0, &[("gputopo.dev/gpu-share", "0.4")]);
    let plain = schedule(&snap, &p, &SchedulerConfig::default());
    assert_eq!(plain.placement().unwrap().gpus, [0]);
    let config = with_target(&[(1_000, 1, 600, 1.0)]);
    let d = schedule(&snap, &p, &config);
    let placed = d.placement().unwrap();
    assert_ne!(placed.gpus, [0], "{}", placed.explanation);
    assert_eq!(placed.parts.fragmentation, Some(0.5), "nothing stranded");
    // A workload of 300-milli pods would rather fill GPU 0 up to exactly 0.
    let config = with_target(&[(1_000, 1, 300, 1.0)]);
    assert_eq!(schedule(&snap, &p, &config).placement().unwrap().gpus, [0]);
}

#[test]
fn the_typical_pods_cut_at_the_popularity_threshold() {
    let mut pods = vec![PodType::new(4_000, 1, 1000); 80];
    pods.extend(vec![PodType::new(4_000, 1, 500); 15]);
    pods.extend(vec![PodType::new(90_000, 8, 1000); 5]);
    let w = TargetWorkload::typical(pods.clone(), 95.0).unwrap();
    assert_eq!(w.types().len(), 2, "{:?}", w.types());
    assert!(w.types().iter().all(|t| t.gpus == 1));
    let w = TargetWorkload::typical(pods, 100.0).unwrap();
    assert_eq!(w.types().len(), 3);
    let eight = w.types().iter().find(|t| t.gpus == 8).unwrap();
    assert!((eight.weight - 0.05).abs() < 1e-12);
    let e = TargetWorkload::typical([PodType::new(1, 1, 1000)], 0.0).unwrap_err();
    assert!(e.to_string().contains("(0, 100]"), "{e}");
}

#[test]
fn a_model_restricted_type_sees_other_models_as_fragment() {
    let w = TargetWorkload::new([PodType {
        models: vec!["NVIDIA-A100".into()],
        ..PodType::new(1_000, 1, 1000)
    }])
    .unwrap();
    let free = [1000, 1000];
    let a100 = NodeFree {
        cpu_milli: 8_000,
        model: Some("NVIDIA-A100"),
        gpu_milli: &free,
    };
    assert_eq!(w.fragmentation(&a100), 0.0);
    let t4 = NodeFree {
        model: Some("Tesla-T4"),
        ..a100
    };
    assert_eq!(w.fragmentation(&t4), 2000.0);
    let unlabelled = NodeFree {
        model: None,
        ..a100
    };
    assert_eq!(w.fragmentation(&unlabelled), 2000.0);
}
