//! Preemption for a gang with structure (docs/contract/gang-structure.md):
//! evictions free room inside the gang's required domain, and never a
//! scattered set that leaves the gang's slices unmet.

mod common;

use common::{a100, gpu_node, holder, labels, request, snapshot};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::preempt::PreemptionPolicy;
use gputopo_scheduler_core::preempt_schedule::{PreemptionError, propose_preemption};
use gputopo_scheduler_core::snapshot::{BoundPodInput, NodeInput, Snapshot};
use std::collections::BTreeSet;

fn now() -> Timestamp {
    "2026-11-21T12:00:00Z".parse().expect("a time")
}

/// Nodes `n1..` of 8 NV12 GPUs, `per_leaf` to a leaf under one spine.
fn nodes(count: usize, per_leaf: usize) -> Vec<NodeInput> {
    (1..=count)
        .map(|i| {
            let mut node = gpu_node(&format!("n{i}"), a100());
            node.labels.extend(labels(&[
                ("gputopo.dev/spine", "spine-1"),
                (
                    "gputopo.dev/leaf",
                    &format!("leaf-{}", (i - 1) / per_leaf + 1),
                ),
            ]));
            node
        })
        .collect()
}

/// A whole-node pod on `node`, of `workload`, started long ago.
fn full(name: &str, node: &str, workload: &str) -> BoundPodInput {
    let mut p = holder(name, node, &[0, 1, 2, 3, 4, 5, 6, 7], Some(workload));
    p.start_time = Some("2026-11-21T09:00:00Z".parse().expect("time"));
    p
}

fn gang(n: u32, annotations: &[(&str, &str)]) -> Vec<PendingPod> {
    let size = n.to_string();
    (0..n)
        .map(|i| {
            let mut all = vec![
                ("gputopo.dev/gang", "g"),
                ("gputopo.dev/gang-size", size.as_str()),
            ];
            all.extend_from_slice(annotations);
            all.push(("gputopo.dev/workload", "training"));
            let mut p = PendingPod::new("default", &format!("g-{i}"), request(8, &all));
            p.priority = 100;
            p
        })
        .collect()
}

fn leaf_of(snap: &Snapshot, victim: &str, pods: &[BoundPodInput]) -> String {
    let name = victim.split_once('/').map_or(victim, |(_, n)| n);
    let node = &pods.iter().find(|p| p.name == name).expect("a victim").node;
    let id = snap.node_id(node).expect("its node");
    snap.node(id)
        .label("gputopo.dev/leaf")
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_required_leaf_is_freed_in_one_leaf_even_at_a_higher_cost() {
    // leaf-1: n1 inference, n2 training; leaf-2: n3 inference, n4 training.
    let pods = vec![
        full("serve-1", "n1", "inference"),
        full("train-2", "n2", "training"),
        full("serve-3", "n3", "inference"),
        full("train-4", "n4", "training"),
    ];
    let snap = snapshot(nodes(4, 2), pods.clone());
    let config = SchedulerConfig::default();
    let policy = PreemptionPolicy::default();

    // Unconstrained, the two inference pods go, one per leaf.
    let plain = propose_preemption(&snap, &gang(2, &[]), &config, &policy, now()).expect("a plan");
    let leaves: BTreeSet<String> = plain
        .victims
        .iter()
        .map(|v| leaf_of(&snap, v, &pods))
        .collect();
    assert_eq!(leaves.len(), 2, "{:?}", plain.victims);

    // Required in one leaf: both victims in one leaf.
    let members = gang(
        2,
        &[(
            "kueue.x-k8s.io/podset-required-topology",
            "gputopo.dev/leaf",
        )],
    );
    let plan = propose_preemption(&snap, &members, &config, &policy, now()).expect("a plan");
    let leaves: BTreeSet<String> = plan
        .victims
        .iter()
        .map(|v| leaf_of(&snap, v, &pods))
        .collect();
    assert_eq!(leaves.len(), 1, "{:?}: {}", plan.victims, plan.explanation);
    assert_eq!(plan.victims.len(), 2);
}

#[test]
fn evictions_that_would_leave_the_slices_unmet_are_not_proposed() {
    // leaf-1: n1, n2 free, n3 inference; leaf-2: n4 free, n5 and n6 training.
    let pods = vec![
        full("serve-3", "n3", "inference"),
        full("train-5", "n5", "training"),
        full("train-6", "n6", "training"),
    ];
    let snap = snapshot(nodes(6, 3), pods);
    let members = gang(
        4,
        &[
            (
                "kueue.x-k8s.io/podset-slice-required-topology",
                "gputopo.dev/leaf",
            ),
            ("kueue.x-k8s.io/podset-slice-size", "2"),
        ],
    );
    // The cheapest eviction (serve-3) makes four free nodes, but three in
    // leaf-1 and one in leaf-2: one slice of two fits, not two.
    let e = propose_preemption(
        &snap,
        &members,
        &SchedulerConfig::default(),
        &PreemptionPolicy::default(),
        now(),
    )
    .expect_err("no scattered eviction");
    assert!(matches!(e, PreemptionError::StructureUnmet { .. }), "{e}");
    assert!(e.to_string().contains("slices of 2"), "{e}");
}
