//! The per-pod decision: placement fields, tie-breaks, applying a placement,
//! malformed pods, snapshots from Kubernetes objects, and `explain` agreeing
//! with `schedule`.

mod common;

use common::*;
use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::api::core::v1::{Node, Pod};
use gputopo_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::explain::{Verdict, explain, explain_pod};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::schedule::{
    Decision, failed_scheduling_message, schedule, schedule_pod,
};
use gputopo_scheduler_core::snapshot::from_k8s::{bound_pod_input, node_input};
use gputopo_scheduler_core::snapshot::{GpuHolding, SnapshotBuilder, SnapshotWarning};
use serde_json::json;

#[test]
fn placement_names_gpus_uuids_and_why() {
    let snap = snapshot(vec![gpu_node("dgx1", dgx1())], vec![]);
    let d = schedule(&snap, &pod(4, &[]), &SchedulerConfig::default());
    let p = d.placement().expect("placed");
    // The set is the gpuset choice for the empty node.
    let shape = NodeShape::from_spec(&dgx1()).unwrap();
    let expected = shape
        .choose(0xff, &SetRequest::from_gpu_request(&request(4, &[])))
        .unwrap();
    assert_eq!(p.gpus, expected.gpus);
    assert_eq!(p.bottleneck, expected.bottleneck);
    assert_eq!(p.assigned_gpus(), expected.assigned_gpus());
    assert_eq!(
        p.gpu_uuids,
        p.gpus
            .iter()
            .map(|g| format!("GPU-{g:08x}-test"))
            .collect::<Vec<_>>()
    );
    assert!(
        p.explanation.contains(&expected.explanation),
        "{}",
        p.explanation
    );
    assert!(p.explanation.contains("node dgx1"), "{}", p.explanation);
    assert!(p.score <= 100 && p.feasible_nodes == 1);
}

#[test]
fn ties_go_to_the_first_node_by_name() {
    let names = ["node-c", "node-a", "node-b"];
    let snap = snapshot(names.iter().map(|n| gpu_node(n, a100())).collect(), vec![]);
    for k in 1..=8 {
        let d = schedule(&snap, &pod(k, &[]), &SchedulerConfig::default());
        let p = d.placement().unwrap();
        assert_eq!(p.node, "node-a");
        assert!(
            p.explanation.contains("next best node-b"),
            "{}",
            p.explanation
        );
    }
}

#[test]
fn applied_placements_fill_the_cluster_without_overlap() {
    let mut snap = snapshot(vec![gpu_node("a", dgx1()), gpu_node("b", a100())], vec![]);
    let config = SchedulerConfig::default();
    let mut held: Vec<(String, Vec<u32>)> = Vec::new();
    for i in 0..16 {
        let mut p = pod(1, &[]);
        p.name = format!("p{i}");
        let d = schedule(&snap, &p, &config);
        let placed = d.placement().expect("16 GPUs for 16 pods").clone();
        for (node, gpus) in &held {
            if *node == placed.node {
                assert!(
                    !gpus.iter().any(|g| placed.gpus.contains(g)),
                    "reused a GPU"
                );
            }
        }
        held.push((placed.node.clone(), placed.gpus.clone()));
        snap.add_pod(placed.bound_pod(&p)).expect("node exists");
    }
    let d = schedule(&snap, &pod(1, &[]), &config);
    assert_eq!(
        d.unschedulable().unwrap().message,
        "0/2 nodes are available: 2 too few free GPUs."
    );
    // Removing a pod frees its GPU again.
    let id = snap.pod_id("default", "p3").unwrap();
    let removed = snap.remove_pod(id).unwrap();
    let d = schedule(&snap, &pod(1, &[]), &config);
    let p = d.placement().unwrap();
    assert_eq!(
        (p.node.as_str(), p.gpus.clone()),
        (
            snap.node(removed.node).name(),
            vec![removed.gpus.trailing_zeros()]
        )
    );
}

#[test]
fn malformed_pods_are_unschedulable_with_the_key_named() {
    let snap = snapshot(vec![gpu_node("n", a100())], vec![]);
    let cases = [
        ("gputopo.dev/collective", "star"),
        ("gputopo.dev/min-nvlink-level", "NVX"),
        ("gputopo.dev/gpu-memory", "lots"),
        ("gputopo.dev/gpu-share", "2"),
        ("gputopo.dev/colective", "ring"),
        ("gputopo.dev/placement-strategy", "spread"),
    ];
    for (key, value) in cases {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "bad", "namespace": "ml", "annotations": {key: value}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
        }))
        .unwrap();
        let d = schedule_pod(&snap, &pod, &SchedulerConfig::default());
        let u = d.unschedulable().expect("a malformed pod is not placed");
        let error = u.invalid_pod.as_ref().expect("the pod's own error");
        assert_eq!(error.key(), key);
        assert!(
            u.message.contains(key) && u.message.contains("ml/bad"),
            "{}",
            u.message
        );
        assert!(
            explain_pod(&snap, &pod, &SchedulerConfig::default())
                .rows
                .is_empty()
        );
    }
    let bad_spec: &[(serde_json::Value, &str)] = &[
        (
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "two"}}}]}),
            "containers[c].resources.requests.cpu",
        ),
        (
            json!({"containers": [{"name": "c"}], "tolerations": [{"key": "k", "operator": "Maybe"}]}),
            "tolerations[0]",
        ),
        (
            json!({"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["x"]}]}]}}}}),
            "matchExpressions[0]",
        ),
    ];
    for (spec, field) in bad_spec {
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": "bad"}, "spec": spec})).unwrap();
        let d = schedule_pod(&snap, &pod, &SchedulerConfig::default());
        let u = d.unschedulable().unwrap();
        assert!(
            u.invalid_pod.as_ref().unwrap().key().contains(field),
            "{}",
            u.message
        );
        assert!(u.message.contains(field), "{}", u.message);
    }
}

#[test]
fn snapshot_from_kubernetes_objects() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-1", "labels": {"gputopo.dev/leaf": "leaf-1", "gputopo.dev/spine": "s1"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "96", "memory": "1056482492Ki", "pods": "110", "nvidia.com/gpu": "8"}}
    }))
    .unwrap();
    let mut topology = GpuTopology::new("gpu-1", dgx1());
    topology.status = Some(gputopo_api::GpuTopologyStatus {
        conditions: vec![],
        allocations: vec![
            gputopo_api::GpuAllocation {
                gpu: 6,
                pods: vec!["other/legacy".into()],
                holders: vec![],
            },
            gputopo_api::GpuAllocation {
                gpu: 7,
                pods: vec!["other/legacy".into()],
                holders: vec![],
            },
        ],
        pod_resources: Some(gputopo_api::PodResourcesReading {
            observed_at: Time("2026-01-01T00:05:00Z".parse().unwrap()),
            last_error: None,
            unknown_devices: vec![],
        }),
    });
    let ours: Pod = serde_json::from_value(json!({
        "metadata": {"name": "ours", "namespace": "ml", "annotations": {
            "gputopo.dev/assigned-gpus": "0,3", "gputopo.dev/workload": "training"}},
        "spec": {"nodeName": "gpu-1", "priority": 100, "containers": [{"name": "c", "resources": {
            "requests": {"cpu": "8"}, "limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    }))
    .unwrap();
    let legacy: Pod = serde_json::from_value(json!({
        "metadata": {"name": "legacy", "namespace": "other"},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Running", "startTime": "2026-01-01T00:01:00Z"}
    }))
    .unwrap();
    let unknown: Pod = serde_json::from_value(json!({
        "metadata": {"name": "mystery", "namespace": "other"},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }))
    .unwrap();
    let done: Pod = serde_json::from_value(json!({
        "metadata": {"name": "done"},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Succeeded"}
    }))
    .unwrap();
    assert!(bound_pod_input(&done).unwrap().is_none());

    let config = SchedulerConfig::default();
    let mut b = SnapshotBuilder::new(&config);
    b.node(node_input(&node, Some(&topology), read_at("2026-01-01T00:10:00Z")).unwrap());
    for p in [&ours, &legacy, &unknown] {
        b.pod(bound_pod_input(p).unwrap().expect("bound"));
    }
    let snap = b.build().unwrap();
    let n = snap.node(snap.node_id("gpu-1").unwrap());
    // ours: 0,3 by annotation; legacy: 6,7 from the GpuTopology status;
    // mystery: charged to the highest free GPU (5), with a warning.
    assert_eq!(n.held_gpus(), 0b1110_1001, "{:#b}", n.held_gpus());
    assert!(
        snap.warnings()
            .iter()
            .any(|w| matches!(w, SnapshotWarning::UnknownGpus { count: 1, .. }))
    );
    assert_eq!(n.requested().cpu_milli, 8000);
    assert_eq!(n.requested().gpus, 5);
    assert_eq!(n.training_pods(), 1);
    assert_eq!(n.taints().len(), 1);
    let ours_id = snap.pod_id("ml", "ours").unwrap();
    let bound = snap.pod(ours_id).unwrap();
    assert_eq!((bound.priority, bound.gpus), (100, 0b1001));
    assert!(bound.start_time.is_some());
    let path: Vec<&str> = n
        .domain_path()
        .iter()
        .map(|d| snap.domain(d.unwrap()).name())
        .collect();
    assert_eq!(path, ["s1", "leaf-1"]);
    assert_eq!(n.allocatable().memory, 1_056_482_492 * 1024);

    // A pending pod must tolerate the taint; it gets GPUs among 1, 2, 4.
    let pending: Pod = serde_json::from_value(json!({
        "metadata": {"name": "next"},
        "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                 "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    }))
    .unwrap();
    let d = schedule_pod(&snap, &pending, &config);
    let p = d.placement().expect("placed");
    assert!(p.gpus.iter().all(|g| [1, 2, 4].contains(g)), "{:?}", p.gpus);
    let untolerating: Pod = serde_json::from_value(json!({
        "metadata": {"name": "next"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }))
    .unwrap();
    let d = schedule_pod(&snap, &untolerating, &config);
    assert_eq!(
        d.unschedulable().unwrap().message,
        "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: }."
    );
}

#[test]
fn shared_pod_annotations_are_tracked_per_gpu() {
    let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
    b.node(gpu_node("n", a100()));
    for (name, gpu, share) in [("a", 2, "0.5"), ("b", 2, "0.25"), ("c", 5, "20Gi")] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {
                "gputopo.dev/gpu-share": share, "gputopo.dev/assigned-gpus": gpu.to_string()}},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
        }))
        .unwrap();
        let input = bound_pod_input(&p).unwrap().unwrap();
        assert!(matches!(
            input.holding,
            GpuHolding::Shared { gpu: Some(_), .. }
        ));
        b.pod(input);
    }
    let snap = b.build().unwrap();
    let n = snap.node(snap.node_id("n").unwrap());
    assert_eq!(n.shared_gpus(), (1 << 2) | (1 << 5));
    assert_eq!(n.held_gpus(), 0);
    assert_eq!(n.shared_use(2).milli, 750);
    assert_eq!(n.shared_use(2).pods, 2);
    assert_eq!(n.shared_use(5).memory_mib, 20 * 1024);
    assert_eq!(n.free_gpus().count_ones(), 6);
}

/// `explain`'s first row is the node `schedule` picks, on random clusters.
#[test]
fn explain_agrees_with_schedule() {
    let mut rng = Rng(42);
    let specs = [dgx1(), a100(), pcie()];
    let (mut n_placed, mut n_refused) = (0, 0);
    for round in 0..60 {
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        for i in 0..(2 + rng.below(10)) {
            let name = format!("n{i:02}");
            nodes.push(gpu_node(&name, specs[rng.below(3) as usize].clone()));
            let busy = rng.next() as u32 & 0xff;
            let gpus: Vec<u32> = (0..8).filter(|g| busy & (1 << g) != 0).collect();
            if !gpus.is_empty() {
                pods.push(holder(&format!("h{i}"), &name, &gpus, None));
            }
        }
        let snap = snapshot(nodes, pods);
        let k = 1 + rng.below(8) as u32;
        let strategy = ["consolidated", "balanced", "distributed"][rng.below(3) as usize];
        let p = pod(k, &[("gputopo.dev/placement-strategy", strategy)]);
        let config = SchedulerConfig::default();
        let decision = schedule(&snap, &p, &config);
        let explanation = explain(&snap, &p, &config);
        assert_eq!(explanation.decision, decision, "round {round}");
        assert_eq!(explanation.rows.len(), snap.len());
        match &decision {
            Decision::Placed(placed) => {
                n_placed += 1;
                assert_eq!(explanation.rows[0].verdict, Verdict::Chosen);
                assert_eq!(explanation.rows[0].node, placed.node);
                assert_eq!(explanation.rows[0].gpus, placed.gpus);
                // No feasible row beats the chosen one.
                for row in &explanation.rows[1..] {
                    if let Some(parts) = row.parts {
                        assert!(parts.total <= placed.parts.total);
                    }
                }
                // The GPUs are free on that node.
                let node = snap.node(placed.node_id);
                for g in &placed.gpus {
                    assert!(node.free_gpus() & (1 << g) != 0);
                }
            }
            Decision::Unschedulable(u) => {
                n_refused += 1;
                assert!(
                    explanation
                        .rows
                        .iter()
                        .all(|r| r.verdict == Verdict::Rejected)
                );
                assert_eq!(u.rejections.len(), snap.len());
                assert_eq!(
                    u.message,
                    failed_scheduling_message(snap.len(), u.rejections.iter().map(|r| &r.reason))
                );
            }
        }
    }
    assert!(
        n_placed > 0 && n_refused > 0,
        "{n_placed} placed, {n_refused} refused"
    );
}

proptest::proptest! {
    /// Whatever a pod's annotations say, the decision is made: placed, or
    /// unschedulable naming the key; never a panic.
    #[test]
    fn any_annotation_value_gives_a_decision(
        key in proptest::sample::select(vec![
            "gputopo.dev/min-nvlink-level", "gputopo.dev/collective", "gputopo.dev/workload",
            "gputopo.dev/placement-strategy", "gputopo.dev/preferred-domain",
            "gputopo.dev/gpu-memory", "gputopo.dev/latency-sensitive", "gputopo.dev/gpu-share",
            "gputopo.dev/checkpoint-time", "gputopo.dev/network-bandwidth", "gputopo.dev/gpu-count",
        ]),
        value in "\\PC{0,16}",
        gpus in 0u32..10,
    ) {
        let snap = snapshot(vec![gpu_node("dgx1", dgx1()), gpu_node("a100", a100())], vec![]);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": {key: value}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
        }))
        .unwrap();
        match schedule_pod(&snap, &pod, &SchedulerConfig::default()) {
            Decision::Placed(p) => {
                proptest::prop_assert!(p.gpus.len() as u32 <= gpus.max(1));
            }
            Decision::Unschedulable(u) => {
                if let Some(e) = &u.invalid_pod {
                    proptest::prop_assert_eq!(e.key(), key);
                    proptest::prop_assert!(u.message.contains(key));
                } else {
                    proptest::prop_assert!(u.message.starts_with("0/2 nodes are available: "), "{}", u.message);
                }
            }
        }
    }
}

/// A tenant who may edit their own running pod cannot make the scheduler
/// forget it: an unreadable `assigned-gpus` record, or one naming fewer
/// GPUs than the pod holds, still counts every GPU it requested.
#[test]
fn an_edited_assignment_record_never_lowers_what_a_pod_holds() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "hgx"},
        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}}
    }))
    .unwrap();
    let topology = GpuTopology::new("hgx", a100());
    let bound = |name: &str, record: &str, gpus: u32| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "demo",
                "annotations": {"gputopo.dev/assigned-gpus": record}},
            "spec": {"nodeName": "hgx", "containers": [{"name": "c", "resources": {
                "limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    };
    let config = SchedulerConfig::default();
    let quad = gputopo_scheduler_core::pod::PendingPod::from_k8s(
        &serde_json::from_value(json!({
            "metadata": {"name": "next", "namespace": "demo"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}
        }))
        .unwrap(),
    )
    .unwrap();
    for (ddp_record, warning) in [
        ("x", "is not a GPU index list"),
        ("7", "names 1 usable GPU"),
    ] {
        let mut b = SnapshotBuilder::new(&config);
        b.node(node_input(&node, Some(&topology), read_at("2026-01-01T00:10:00Z")).unwrap());
        for p in [bound("ddp", ddp_record, 4), bound("other", "0,1", 2)] {
            b.pod(bound_pod_input(&p).unwrap().expect("kept, never dropped"));
        }
        let snap = b.build().unwrap();
        let n = snap.node(snap.node_id("hgx").unwrap());
        assert_eq!(
            n.held_gpus().count_ones(),
            6,
            "record {ddp_record:?}: {:#b}",
            n.held_gpus()
        );
        assert_eq!(n.requested().gpus, 6);
        assert!(
            snap.warnings()
                .iter()
                .any(|w| w.to_string().contains(warning)),
            "{:?}",
            snap.warnings()
        );
        assert!(
            matches!(schedule(&snap, &quad, &config), Decision::Unschedulable(_)),
            "record {ddp_record:?}: a 4-GPU pod fit beside 6 held GPUs"
        );
    }
}

/// Nodes' kubelet readings judged at `now`.
fn read_at(now: &str) -> ReadingTrust {
    ReadingTrust::at(now.parse().expect("a time"))
}
