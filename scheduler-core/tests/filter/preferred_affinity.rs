//! Preferred node affinity, scored as kube-scheduler's NodeAffinity scores
//! it, and blended so that GPU topology still decides among nodes the
//! pod's preferences rank alike.

use crate::common::*;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use serde_json::json;

fn preferring(terms: serde_json::Value) -> PendingPod {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}
        }
    }))
    .unwrap();
    PendingPod::from_k8s(&pod).unwrap()
}

fn chosen(nodes: Vec<gputopo_scheduler_core::snapshot::NodeInput>, pod: &PendingPod) -> String {
    let snap = snapshot(nodes, vec![]);
    match schedule(&snap, pod, &SchedulerConfig::default()) {
        Decision::Placed(p) => p.node,
        Decision::Unschedulable(u) => panic!("{}", u.message),
    }
}

fn zoned(
    name: &str,
    zone: &str,
    spec: gputopo_api::GpuTopologySpec,
) -> gputopo_scheduler_core::snapshot::NodeInput {
    let mut n = gpu_node(name, spec);
    n.labels.insert("zone".into(), zone.into());
    n
}

#[test]
fn the_preferred_node_wins_over_better_wiring() {
    // Node b is better wired (NVLink A100 against PCIe), but the pod prefers zone 1.
    let pod = preferring(json!([{"weight": 50, "preference": {"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["z1"]}]}}]));
    assert_eq!(
        chosen(
            vec![zoned("a", "z1", pcie()), zoned("b", "z2", a100())],
            &pod
        ),
        "a"
    );
}

#[test]
fn heavier_terms_win() {
    let pod = preferring(json!([
        {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}},
        {"weight": 90, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}}
    ]));
    assert_eq!(
        chosen(
            vec![zoned("a", "z1", a100()), zoned("b", "z2", a100())],
            &pod
        ),
        "b"
    );
}

#[test]
fn among_nodes_the_preferences_rank_alike_gpu_topology_decides() {
    let pod = preferring(json!([{"weight": 50, "preference": {"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["z1"]}]}}]));
    let nodes = vec![
        zoned("a", "z1", pcie()),
        zoned("b", "z1", a100()),
        zoned("c", "z2", a100()),
    ];
    assert_eq!(chosen(nodes, &pod), "b");
}

#[test]
fn preferences_show_in_the_explanation() {
    let pod = preferring(json!([{"weight": 50, "preference": {"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["z1"]}]}}]));
    let snap = snapshot(
        vec![zoned("a", "z1", a100()), zoned("b", "z2", a100())],
        vec![],
    );
    let Decision::Placed(p) = schedule(&snap, &pod, &SchedulerConfig::default()) else {
        panic!("placed");
    };
    assert_eq!(p.parts.pod_preferences, Some(1.0));
    assert!(
        p.explanation.contains("pod preferences 100"),
        "{}",
        p.explanation
    );
}

#[test]
fn a_pod_without_preferences_scores_as_before() {
    let snap = snapshot(vec![zoned("a", "z1", a100())], vec![]);
    let Decision::Placed(p) = schedule(&snap, &pod(2, &[]), &SchedulerConfig::default()) else {
        panic!("placed");
    };
    assert_eq!(p.parts.pod_preferences, None);
}
