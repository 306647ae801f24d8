//! The domain-fit part (whole domains kept whole): a GPU pod goes to a
//! network domain already partly in use, the fullest that holds it, before
//! an untouched one, at every tier; with the weight at 0 the choice is the
//! one made without it. And the count of whole free domains per tier
//! (`gputopo_free_domains{tier}`), kept as pods come and go.

mod common;

use common::*;
use gputopo_scheduler_core::config::{PodType, SchedulerConfig, ScoreWeights, TargetWorkload};
use gputopo_scheduler_core::explain::{Verdict, explain};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::score::ScoreParts;
use gputopo_scheduler_core::snapshot::{BoundPodInput, NodeInput, Snapshot};
use std::sync::Arc;

const SPINE: &str = "gputopo.dev/spine";
const LEAF: &str = "gputopo.dev/leaf";

/// An 8-GPU NVSwitch node under `spine`/`leaf`.
fn node(name: &str, spine: &str, leaf: &str) -> NodeInput {
    let mut n = gpu_node(name, a100());
    n.labels.insert(SPINE.into(), spine.into());
    n.labels.insert(LEAF.into(), leaf.into());
    n
}

/// A pod holding the first `gpus` GPUs of `node`.
fn held(name: &str, node: &str, gpus: u32) -> BoundPodInput {
    holder(name, node, &(0..gpus).collect::<Vec<_>>(), None)
}

fn off() -> SchedulerConfig {
    SchedulerConfig {
        weights: ScoreWeights {
            domain_fit: 0,
            ..ScoreWeights::default()
        },
        ..SchedulerConfig::default()
    }
}

/// FGD's configuration (a target workload of 1-GPU pods), as the
/// simulator's `gputopo` policy runs: the allocation part steps aside for
/// `balanced` pods, so nothing else prefers a busy domain.
fn fgd(domain_fit: u32) -> SchedulerConfig {
    let one_gpu = PodType {
        cpu_milli: 0,
        gpus: 1,
        milli: 1000,
        models: Vec::new(),
        weight: 1.0,
    };
    SchedulerConfig {
        target_workload: Some(Arc::new(TargetWorkload::new(vec![one_gpu]).unwrap())),
        weights: ScoreWeights {
            domain_fit,
            ..ScoreWeights::default()
        },
        ..SchedulerConfig::default()
    }
}

fn chosen(snap: &Snapshot, pod: &PendingPod, config: &SchedulerConfig) -> String {
    schedule(snap, pod, config)
        .placement()
        .expect("placed")
        .node
        .clone()
}

/// Each feasible node's score parts, by name.
fn parts(snap: &Snapshot, pod: &PendingPod, config: &SchedulerConfig) -> Vec<(String, ScoreParts)> {
    let mut rows: Vec<(String, ScoreParts)> = explain(snap, pod, config)
        .rows
        .into_iter()
        .filter(|r| r.verdict != Verdict::Rejected)
        .map(|r| (r.node, r.parts.expect("feasible")))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

fn fit_of(rows: &[(String, ScoreParts)], node: &str) -> Option<f64> {
    rows.iter()
        .find(|(n, _)| n == node)
        .expect("a feasible node")
        .1
        .domain_fit
}

/// Two leaves under one spine: `leaf-1` untouched (`a-1`), `leaf-2` partly
/// used (`b-1` full, `b-2` empty). A tie on names would go to `a-1`.
fn partly_used_and_empty() -> Snapshot {
    snapshot(
        vec![
            node("a-1", "s", "leaf-1"),
            node("b-1", "s", "leaf-2"),
            node("b-2", "s", "leaf-2"),
        ],
        vec![held("h", "b-1", 8)],
    )
}

#[test]
fn a_one_gpu_pod_goes_to_the_partly_used_leaf() {
    let snap = partly_used_and_empty();
    let p = pod(1, &[]);
    // By default the allocation part leans the same way.
    assert_eq!(chosen(&snap, &p, &SchedulerConfig::default()), "b-2");
    // Under FGD's configuration only this part tells the two empty nodes
    // apart: with it the partly used leaf, without it the old choice (the
    // nodes score alike and the name decides).
    assert_eq!(chosen(&snap, &p, &fgd(15)), "b-2");
    assert_eq!(chosen(&snap, &p, &fgd(0)), "a-1");
    let rows = parts(&snap, &p, &SchedulerConfig::default());
    // An untouched leaf in a partly used spine stays below 0.5; a partly
    // used leaf is above it.
    let (a, b) = (fit_of(&rows, "a-1").unwrap(), fit_of(&rows, "b-2").unwrap());
    assert!(0.0 < a && a < 0.5 && 0.5 < b, "{rows:?}");
    // The explanation names the part.
    let text = explain(&snap, &p, &SchedulerConfig::default())
        .rows
        .into_iter()
        .find(|r| r.node == "b-2")
        .expect("b-2")
        .parts
        .expect("feasible")
        .to_string();
    assert!(text.contains("domain fit "), "{text}");
}

#[test]
fn with_the_weight_at_zero_the_part_is_gone() {
    let snap = partly_used_and_empty();
    let p = pod(1, &[]);
    let rows = parts(&snap, &p, &off());
    assert!(rows.iter().all(|(_, x)| x.domain_fit.is_none()), "{rows:?}");
    assert!(!rows[0].1.to_string().contains("domain fit"));
}

#[test]
fn the_outer_tiers_count_too() {
    // Both free nodes sit in untouched leaves; only `b-free`'s spine is in
    // use. Without the part the nodes score alike and `a-free` wins on its
    // name; with it the partly used spine keeps spine s2 whole.
    let snap = snapshot(
        vec![
            node("a-free", "s2", "leaf-3"),
            node("b-free", "s1", "leaf-2"),
            node("c-busy", "s1", "leaf-1"),
        ],
        vec![held("h", "c-busy", 8)],
    );
    let p = pod(1, &[]);
    assert_eq!(chosen(&snap, &p, &off()), "a-free");
    assert_eq!(chosen(&snap, &p, &SchedulerConfig::default()), "b-free");
    let rows = parts(&snap, &p, &SchedulerConfig::default());
    let (a, b) = (
        fit_of(&rows, "a-free").unwrap(),
        fit_of(&rows, "b-free").unwrap(),
    );
    // The leaf counts twice the spine: an untouched leaf stays below 0.5.
    assert!(a == 0.0 && 0.0 < b && b < 0.5, "{a} {b}");
}

#[test]
fn a_pod_that_does_not_fit_the_partly_used_leaf_goes_to_the_empty_one() {
    let snap = snapshot(
        vec![node("a-1", "s", "leaf-1"), node("b-1", "s", "leaf-2")],
        vec![held("h", "b-1", 4)],
    );
    // Four GPUs fit the partly used leaf, and fill it.
    assert_eq!(
        chosen(&snap, &pod(4, &[]), &SchedulerConfig::default()),
        "b-1"
    );
    let rows = parts(&snap, &pod(4, &[]), &SchedulerConfig::default());
    // The leaf filled (1) and the spine left with a-1's 8 GPUs free
    // (0.75), the leaf counting twice.
    let b = fit_of(&rows, "b-1").unwrap();
    assert!((b - (2.0 + 0.75) / 3.0).abs() < 1e-12, "{rows:?}");
    // Eight do not: the untouched leaf takes them.
    assert_eq!(
        chosen(&snap, &pod(8, &[]), &SchedulerConfig::default()),
        "a-1"
    );
}

#[test]
fn the_fullest_partly_used_leaf_wins() {
    // leaf-1 has 2 GPUs free, leaf-2 has 6 (each node's own use alike: the
    // free node of each leaf is empty, the other holds the rest).
    let snap = snapshot(
        vec![
            node("a-1", "s", "leaf-1"),
            node("a-2", "s", "leaf-1"),
            node("b-1", "s", "leaf-2"),
            node("b-2", "s", "leaf-2"),
        ],
        vec![
            held("x", "a-2", 8),
            held("y", "a-1", 6),
            held("z", "b-2", 2),
        ],
    );
    let p = pod(2, &[]);
    let rows = parts(&snap, &p, &fgd(15));
    let (a, b) = (fit_of(&rows, "a-1").unwrap(), fit_of(&rows, "b-1").unwrap());
    assert!(a > b && b > 0.5, "{a} {b}");
    assert_eq!(chosen(&snap, &p, &fgd(15)), "a-1");
}

#[test]
fn equally_full_leaves_tie_and_the_other_parts_decide() {
    // Both leaves 4 of 8 in use: the part is equal, so the choice is the
    // one made without it (the name, everything else equal).
    let snap = snapshot(
        vec![node("a-1", "s", "leaf-1"), node("b-1", "s", "leaf-2")],
        vec![held("x", "a-1", 4), held("y", "b-1", 4)],
    );
    let p = pod(1, &[]);
    let rows = parts(&snap, &p, &SchedulerConfig::default());
    assert_eq!(fit_of(&rows, "a-1"), fit_of(&rows, "b-1"));
    assert_eq!(chosen(&snap, &p, &SchedulerConfig::default()), "a-1");
    assert_eq!(chosen(&snap, &p, &off()), "a-1");
    // On an idle cluster every leaf is untouched: the part is 0 everywhere
    // and changes no choice.
    let idle = snapshot(
        vec![node("a-1", "s1", "leaf-1"), node("b-1", "s2", "leaf-2")],
        vec![],
    );
    let rows = parts(&idle, &p, &SchedulerConfig::default());
    assert!(
        rows.iter().all(|(_, x)| x.domain_fit == Some(0.0)),
        "{rows:?}"
    );
    assert_eq!(
        chosen(&idle, &p, &SchedulerConfig::default()),
        chosen(&idle, &p, &off())
    );
}

#[test]
fn the_part_applies_to_gpu_pods_on_clusters_with_domains_to_choose_between() {
    let snap = partly_used_and_empty();
    let none = |p: &PendingPod, s: &Snapshot| {
        parts(s, p, &SchedulerConfig::default())
            .iter()
            .all(|(_, x)| x.domain_fit.is_none())
    };
    // `distributed` pods spread on purpose.
    assert!(none(
        &pod(1, &[("gputopo.dev/placement-strategy", "distributed")]),
        &snap
    ));
    // Pods without GPUs.
    assert!(none(&pod(0, &[]), &snap));
    // Shared GPUs count.
    assert!(!none(&pod(0, &[("gputopo.dev/gpu-share", "0.5")]), &snap));
    // One leaf under one spine: nothing to choose between.
    let one = snapshot(
        vec![node("a-1", "s", "leaf-1"), node("a-2", "s", "leaf-1")],
        vec![held("h", "a-1", 2)],
    );
    assert!(none(&pod(1, &[]), &one));
}

#[test]
fn free_domains_count_whole_free_domains_per_tier_as_pods_come_and_go() {
    let mut cpu_only = NodeInput {
        name: "d-cpu".into(),
        labels: labels(&[(SPINE, "s3"), (LEAF, "leaf-9")]),
        ..NodeInput::default()
    };
    cpu_only.allocatable.cpu_milli = 8_000;
    let mut snap = snapshot(
        vec![
            node("a-1", "s1", "leaf-1"),
            node("b-1", "s1", "leaf-2"),
            node("c-1", "s2", "leaf-3"),
            cpu_only,
        ],
        vec![held("h", "b-1", 4)],
    );
    // Spines: s2 whole (s1 has b-1's pod, s3 no GPUs); leaves: 1 and 3.
    assert_eq!(snap.free_domains(), vec![1, 2]);
    let id = snap.add_pod(held("n", "c-1", 1)).expect("added");
    assert_eq!(snap.free_domains(), vec![0, 1]);
    snap.remove_pod(id).expect("removed");
    assert_eq!(snap.free_domains(), vec![1, 2]);
}

#[test]
fn the_part_outweighs_filling_a_small_node_in_an_untouched_leaf() {
    // leaf-1: one 2-GPU node; leaf-2: four 8-GPU nodes, one GPU in use.
    // Packing by node alone fills the small node (the old choice); the
    // part keeps leaf-1 whole and fills the busy leaf.
    let two = spec_with(
        2,
        |_, _| gputopo_api::LinkClass::Nv(12),
        |_| Gpu {
            numa: Some(0),
            memory_mib: None,
            mig: false,
        },
    );
    let mut small = gpu_node("a-small", two);
    small.labels.insert(SPINE.into(), "s".into());
    small.labels.insert(LEAF.into(), "leaf-1".into());
    let mut nodes = vec![small];
    for i in 1..=4 {
        nodes.push(node(&format!("b-{i}"), "s", "leaf-2"));
    }
    let snap = snapshot(nodes, vec![held("h", "b-1", 1)]);
    let p = pod(1, &[]);
    assert_eq!(chosen(&snap, &p, &off()), "a-small");
    assert_eq!(chosen(&snap, &p, &SchedulerConfig::default()), "b-1");
}

#[test]
fn a_better_wired_gpu_set_still_wins() {
    // A 2-GPU pod: NVSwitch in the untouched leaf, PCIe in the partly used one.
    let mut pcie_node = gpu_node("b-pcie", pcie());
    pcie_node.labels.insert(SPINE.into(), "s".into());
    pcie_node.labels.insert(LEAF.into(), "leaf-2".into());
    let snap = snapshot(
        vec![node("a-nv", "s", "leaf-1"), pcie_node],
        vec![held("h", "b-pcie", 4)],
    );
    let p = pod(2, &[]);
    assert_eq!(chosen(&snap, &p, &SchedulerConfig::default()), "a-nv");
}
