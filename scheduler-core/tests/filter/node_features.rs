//! NodeDeclaredFeatures: a pod whose spec needs a kubelet feature goes only
//! to nodes declaring it (`status.declaredFeatures`), read from the
//! Kubernetes objects as kube-scheduler reads them, with upstream's reason.

use crate::verdicts;
use gputopo_api::k8s_openapi::api::core::v1::{Node, Pod};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use gputopo_scheduler_core::snapshot::{LiveSnapshot, NodeInput, SnapshotBuilder};
use serde_json::json;

fn node(name: &str, declared: &[&str]) -> NodeInput {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"declaredFeatures": declared,
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
    }))
    .expect("a node");
    node_input(
        &node,
        None,
        ReadingTrust::at("2026-01-01T00:10:00Z".parse().expect("a time")),
    )
    .expect("readable")
}

/// A pod restarting all its containers when one exits with 42: it needs
/// `RestartAllContainersOnContainerExits`.
fn restarting_pod() -> PendingPod {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "restarts", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "x",
            "restartPolicy": "Never",
            "restartPolicyRules": [{"action": "RestartAllContainers",
                "exitCodes": {"operator": "In", "values": [42]}}]}]}
    }))
    .expect("a pod");
    PendingPod::from_k8s(&pod).expect("readable")
}

fn build(nodes: Vec<NodeInput>) -> gputopo_scheduler_core::snapshot::Snapshot {
    let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
    for n in nodes {
        b.node(n);
    }
    b.build().expect("a snapshot")
}

#[test]
fn a_pod_needing_a_feature_goes_to_the_node_declaring_it() {
    let snap = build(vec![
        node("old", &[]),
        node("new", &["RestartAllContainersOnContainerExits"]),
        node("other", &["VolumeBindMountOptions"]),
    ]);
    let pod = restarting_pod();
    match schedule(&snap, &pod, &SchedulerConfig::default()) {
        Decision::Placed(p) => assert_eq!(p.node, "new"),
        other => panic!("{other:?}"),
    }
    let v = verdicts(&snap, &pod);
    let refused: Vec<&str> = v
        .iter()
        .filter(|(_, r)| matches!(r, Some(FilterReason::NodeFeatures(_))))
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(refused, ["old", "other"]);
}

#[test]
fn no_node_declaring_the_feature_is_upstreams_message_naming_it_per_node() {
    let snap = build(vec![node("a", &[]), node("b", &["SomethingNewer"])]);
    let pod = restarting_pod();
    let Decision::Unschedulable(u) = schedule(&snap, &pod, &SchedulerConfig::default()) else {
        panic!("no node declares the feature");
    };
    assert_eq!(
        u.message,
        "0/2 nodes are available: 2 node(s) didn't match Pod's required features."
    );
    let detail = u.rejections[0].reason.to_string();
    assert!(
        detail.contains("RestartAllContainersOnContainerExits"),
        "{detail}"
    );
    // A plain pod is not refused by it.
    assert!(matches!(
        schedule(&snap, &pod_without_rules(), &SchedulerConfig::default()),
        Decision::Placed(_)
    ));
}

fn pod_without_rules() -> PendingPod {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "plain", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "x"}]}
    }))
    .expect("a pod");
    PendingPod::from_k8s(&pod).expect("readable")
}

/// A kubelet restarted with the feature: the kept snapshot sees the new
/// declaration (it is not one of the fields updated in place).
#[test]
fn a_node_that_starts_declaring_the_feature_is_seen_by_the_live_snapshot() {
    let mut live = LiveSnapshot::new(&SchedulerConfig::default());
    live.set_node(node("n", &[]));
    let pod = restarting_pod();
    let config = SchedulerConfig::default();
    assert!(matches!(
        schedule(live.snapshot().expect("built"), &pod, &config),
        Decision::Unschedulable(_)
    ));
    live.set_node(node("n", &["RestartAllContainersOnContainerExits"]));
    assert!(matches!(
        schedule(live.snapshot().expect("built"), &pod, &config),
        Decision::Placed(_)
    ));
}
