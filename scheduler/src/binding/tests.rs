//! Both modes post the same `Binding` for the same pod and placement.

use super::*;
use crate::extender::protocol::{binding as extender_binding, decode_binding};
use gputopo_api::LinkClass;
use gputopo_scheduler_core::score::ScoreParts;
use gputopo_scheduler_core::snapshot::NodeId;
use serde_json::json;

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"schedulerName": "gputopo-scheduler", "containers": [{"name": "c", "image": "i"}]}
    }))
    .expect("a pod")
}

fn placement(pod: &str, gpus: &[u32], bottleneck: Option<LinkClass>) -> Placement {
    Placement {
        pod: format!("ml/{pod}"),
        node: "dgx1-b".into(),
        node_id: NodeId(1),
        gpus: gpus.to_vec(),
        gpu_uuids: gpus.iter().map(|g| format!("GPU-{g}")).collect(),
        shared: None,
        bottleneck,
        topology_known: true,
        by_count: false,
        score: 90,
        parts: ScoreParts {
            gpu_set: None,
            allocation: 0.9,
            domain_fit: None,
            keep_gpus_free: None,
            memory_fit: None,
            interference: None,
            preferred_domain: None,
            cost: None,
            node_preference: None,
            fragmentation: None,
            generation: None,
            balanced_allocation: None,
            image_locality: None,
            pod_preferences: None,
            total: 0.9,
        },
        explanation: String::new(),
        feasible_nodes: 1,
        volumes: Default::default(),
    }
}

/// What the secondary scheduler posts, and what the extender posts for
/// kube-scheduler's bind request naming the same pod and node.
fn both_modes(pod: &Pod, p: &Placement) -> (Binding, Binding) {
    let secondary = pod_binding(&PodIdentity::of(pod), p);
    let request = decode_binding(
        json!({
            "PodName": pod.metadata.name, "PodNamespace": pod.metadata.namespace,
            "PodUID": pod.metadata.uid, "Node": p.node,
        })
        .to_string()
        .as_bytes(),
    )
    .expect("a bind request");
    (secondary, extender_binding(&request, p))
}

#[test]
fn a_pod_without_gpus_is_bound_without_annotations_in_both_modes() {
    let cpu = pod("cpu", json!({}));
    let (secondary, extender) = both_modes(&cpu, &placement("cpu", &[], None));
    assert_eq!(secondary, extender);
    assert_eq!(
        serde_json::to_value(&secondary).expect("JSON"),
        json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": "cpu", "namespace": "ml", "uid": "uid-cpu"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "dgx1-b"}
        })
    );
}

#[test]
fn a_whole_gpu_pod_is_bound_with_its_gpus_in_both_modes() {
    let train = pod("train", json!({}));
    let p = placement("train", &[0, 1, 2, 3], Some(LinkClass::Nv(1)));
    let (secondary, extender) = both_modes(&train, &p);
    assert_eq!(secondary, extender);
    assert_eq!(
        serde_json::to_value(&secondary).expect("JSON")["metadata"]["annotations"],
        json!({
            "gputopo.dev/assigned-gpus": "0,1,2,3",
            "gputopo.dev/assigned-gpu-uuids": "GPU-0,GPU-1,GPU-2,GPU-3",
            "scheduler.gputopo.dev/bottleneck": "NV1",
        })
    );
}

#[test]
fn a_gang_member_is_bound_as_any_pod_in_both_modes() {
    let member = pod("worker-1", json!({"scheduling.x-k8s.io/pod-group": "ring"}));
    let p = placement("worker-1", &[4, 5], Some(LinkClass::Nv(2)));
    let (secondary, extender) = both_modes(&member, &p);
    assert_eq!(secondary, extender);
    assert_eq!(secondary.target.name.as_deref(), Some("dgx1-b"));
    assert_eq!(secondary.metadata.uid.as_deref(), Some("uid-worker-1"));
}

#[test]
fn a_pod_given_gpus_by_count_is_bound_without_indices_in_both_modes() {
    let train = pod("train", json!({}));
    let p = Placement {
        by_count: true,
        ..placement("train", &[0, 1, 2, 3], None)
    };
    let (secondary, extender) = both_modes(&train, &p);
    assert_eq!(secondary, extender);
    assert_eq!(secondary.metadata.annotations, None);
    assert_eq!(secondary.target.name.as_deref(), Some("dgx1-b"));
}
