//! `node_fit`: one pod judged on named nodes (the extender's filter,
//! prioritize and bind) agrees with `schedule` and `explain`, and says
//! whether preemption could help a rejected node.

mod common;

use common::*;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::explain::explain;
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::gpuset::NoFitReason;
use gputopo_scheduler_core::node_fit::{NodeJudge, NodeVerdict, PlaceError};
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::NodeInput;

fn cluster() -> gputopo_scheduler_core::snapshot::Snapshot {
    snapshot(
        vec![
            gpu_node("dgx1", dgx1()),
            gpu_node("a100", a100()),
            gpu_node("pcie", pcie()),
        ],
        vec![holder("busy", "a100", &[0, 1, 2, 3, 4, 5], None)],
    )
}

#[test]
fn judging_every_node_agrees_with_schedule_and_explain() {
    let snap = cluster();
    let config = SchedulerConfig::default();
    for (gpus, annotations) in [
        (1, vec![]),
        (2, vec![]),
        (4, vec![("gputopo.dev/workload", "training")]),
        (4, vec![("gputopo.dev/collective", "all-to-all")]),
        (8, vec![]),
    ] {
        let pod = pod(gpus, &annotations);
        let judge = NodeJudge::new(&snap, &pod, &config);
        let explanation = explain(&snap, &pod, &config);
        for row in &explanation.rows {
            match judge.judge(&row.node) {
                NodeVerdict::Fits { score, .. } => {
                    assert_eq!(Some(score), row.score, "{gpus} GPUs on {}", row.node)
                }
                NodeVerdict::Rejected(r) => {
                    assert_eq!(
                        Some(r.reason),
                        row.filter_reason,
                        "{gpus} GPUs on {}",
                        row.node
                    )
                }
                NodeVerdict::Unknown => panic!("{} is in the snapshot", row.node),
            }
        }
        // Placing on the node schedule picks gives schedule's GPUs.
        match schedule(&snap, &pod, &config) {
            Decision::Placed(best) => {
                let on = judge.place_on(&best.node).expect("the chosen node fits");
                assert_eq!(on.node, best.node);
                assert_eq!(on.gpus, best.gpus, "{gpus} GPUs");
                assert_eq!(on.gpu_uuids, best.gpu_uuids);
                assert_eq!(on.bottleneck, best.bottleneck);
                assert_eq!(on.score, best.score);
                assert!(
                    on.explanation.starts_with(&format!("node {}: ", best.node)),
                    "{}",
                    on.explanation
                );
            }
            Decision::Unschedulable(u) => panic!("{gpus} GPUs: {}", u.message),
        }
    }
}

#[test]
fn placing_on_a_node_that_is_not_the_best_gives_that_nodes_set() {
    let snap = cluster();
    let config = SchedulerConfig::default();
    let pod = pod(2, &[]);
    let best = schedule(&snap, &pod, &config);
    assert_ne!(best.placement().map(|p| p.node.as_str()), Some("pcie"));
    let on = NodeJudge::new(&snap, &pod, &config)
        .place_on("pcie")
        .expect("pcie has 8 free GPUs");
    assert_eq!(on.node, "pcie");
    // A PIX pair: the best two PCIe GPUs share a switch.
    assert_eq!(on.gpus.len(), 2);
    assert_eq!(on.gpus[0] / 2, on.gpus[1] / 2, "{:?}", on.gpus);
    assert_eq!(on.bottleneck.map(|b| b.to_string()).as_deref(), Some("PIX"));
}

#[test]
fn unknown_nodes_are_said_to_be_unknown() {
    let snap = cluster();
    let config = SchedulerConfig::default();
    let pod = pod(1, &[]);
    let judge = NodeJudge::new(&snap, &pod, &config);
    assert_eq!(judge.judge("ghost"), NodeVerdict::Unknown);
    assert_eq!(
        judge.place_on("ghost"),
        Err(PlaceError::UnknownNode {
            node: "ghost".into()
        })
    );
}

fn rejection(
    snap: &gputopo_scheduler_core::snapshot::Snapshot,
    node: &str,
    pod: &gputopo_scheduler_core::pod::PendingPod,
) -> (FilterReason, bool) {
    let config = SchedulerConfig::default();
    match NodeJudge::new(snap, pod, &config).judge(node) {
        NodeVerdict::Rejected(r) => (r.reason, r.resolvable),
        other => panic!("{node} should reject the pod: {other:?}"),
    }
}

#[test]
fn a_rejection_says_whether_evicting_pods_could_help() {
    let mut cordoned = gpu_node("cordoned", a100());
    cordoned.unschedulable = true;
    let bare = NodeInput {
        name: "bare".into(),
        allocatable: Resources::allocatable(
            [
                ("cpu", "8"),
                ("memory", "64Gi"),
                ("pods", "110"),
                ("nvidia.com/gpu", "8"),
            ],
            "test",
        )
        .expect("valid quantities"),
        ..NodeInput::default()
    };
    let cpu_only = NodeInput {
        name: "cpu-only".into(),
        ..NodeInput::default()
    };
    let snap = snapshot(
        vec![
            gpu_node("dgx1", dgx1()),
            gpu_node("full", a100()),
            gpu_node("pcie", pcie()),
            cordoned,
            bare,
            cpu_only,
        ],
        vec![holder("busy", "full", &[0, 1, 2, 3, 4, 5], None)],
    );

    // Too few free GPUs now, but 8 when the holder goes: preemption may help.
    let (reason, resolvable) = rejection(&snap, "full", &pod(4, &[]));
    assert_eq!(
        reason,
        FilterReason::GpuSet(NoFitReason::TooFewFreeGpus {
            requested: 4,
            free: 2
        })
    );
    assert!(resolvable);
    // No NVLink at all on PCIe cards, and no NV3 pair on a DGX-1, whoever leaves.
    let nvlink = pod(2, &[("gputopo.dev/min-nvlink-level", "1")]);
    let (reason, resolvable) = rejection(&snap, "pcie", &nvlink);
    assert!(
        matches!(
            reason,
            FilterReason::GpuSet(NoFitReason::NoNvlinkSet { .. })
        ),
        "{reason:?}"
    );
    assert!(!resolvable);
    let (_, resolvable) = rejection(
        &snap,
        "dgx1",
        &pod(2, &[("gputopo.dev/min-nvlink-level", "3")]),
    );
    assert!(!resolvable);
    // More GPUs than the node has.
    let (_, resolvable) = rejection(&snap, "dgx1", &pod(16, &[]));
    assert!(!resolvable);
    // Cordoned: evictions do not uncordon.
    let (reason, resolvable) = rejection(&snap, "cordoned", &pod(1, &[]));
    assert_eq!(reason, FilterReason::Unschedulable);
    assert!(!resolvable);
    // No GpuTopology to vouch for NVLink; no GPUs at all.
    let (reason, resolvable) = rejection(&snap, "bare", &nvlink);
    assert!(
        matches!(reason, FilterReason::UnknownTopology { .. }),
        "{reason:?}"
    );
    assert!(!resolvable);
    let (reason, resolvable) = rejection(&snap, "cpu-only", &pod(1, &[]));
    assert!(
        matches!(&reason, FilterReason::Insufficient(s) if s[0].resource == "nvidia.com/gpu"),
        "{reason:?}"
    );
    assert!(!resolvable, "the node has no nvidia.com/gpu at all");
    // Short of CPU: evicting pods frees CPU, up to what the node has.
    let mut hungry = pod(1, &[]);
    hungry.requests.cpu_milli = 16_000;
    let (reason, resolvable) = rejection(&snap, "bare", &hungry);
    assert!(
        matches!(reason, FilterReason::Insufficient(_)),
        "{reason:?}"
    );
    assert!(!resolvable, "16 CPUs asked of a node with 8");
    let bare_busy = snapshot(
        vec![NodeInput {
            name: "bare".into(),
            allocatable: Resources::allocatable(
                [
                    ("cpu", "8"),
                    ("memory", "64Gi"),
                    ("pods", "110"),
                    ("nvidia.com/gpu", "8"),
                ],
                "test",
            )
            .expect("valid quantities"),
            ..NodeInput::default()
        }],
        vec![{
            let mut h = holder("cpu-hog", "bare", &[], None);
            h.requests.cpu_milli = 6_000;
            h
        }],
    );
    let mut modest = pod(1, &[]);
    modest.requests.cpu_milli = 4_000;
    let (reason, resolvable) = rejection(&bare_busy, "bare", &modest);
    assert!(
        matches!(reason, FilterReason::Insufficient(_)),
        "{reason:?}"
    );
    assert!(resolvable, "4 of 8 CPUs, 6 held by a pod that could go");
    // And place_on says the same as judge.
    let config = SchedulerConfig::default();
    let p = pod(4, &[]);
    match NodeJudge::new(&snap, &p, &config).place_on("full") {
        Err(PlaceError::Rejected {
            node, rejection, ..
        }) => {
            assert_eq!(node, "full");
            assert!(rejection.resolvable);
        }
        other => panic!("{other:?}"),
    }
}
