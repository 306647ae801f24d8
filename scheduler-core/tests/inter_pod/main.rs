//! Inter-pod affinity and anti-affinity through the public decision, on
//! clusters of plain labelled nodes: the scenarios of kube-scheduler's
//! InterPodAffinity plugin tests (the same clusters, pods and verdicts,
//! written again here), then the score.
//!
//! Pods are written as Kubernetes JSON and read by `PendingPod::from_k8s`
//! and `bound_pod_input`, as the scheduler reads them.

mod filter_cases;
mod score_cases;

use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::explain::explain;
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::inter_pod::AffinityRefusal;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::snapshot::from_k8s::bound_pod_input;
use gputopo_scheduler_core::snapshot::{NodeInput, Snapshot, SnapshotBuilder};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// A node with these labels.
fn node(name: &str, labels: &[(&str, &str)]) -> NodeInput {
    NodeInput {
        name: name.to_string(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        ..NodeInput::default()
    }
}

/// A pod from `metadata` and `spec` fragments (a container is added).
fn k8s_pod(name: &str, namespace: &str, labels: Value, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c"}]);
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }))
    .expect("a pod")
}

/// A bound pod on `node`.
fn bound(name: &str, namespace: &str, node: &str, labels: Value, spec: Value) -> Pod {
    let mut spec = spec;
    spec["nodeName"] = json!(node);
    k8s_pod(name, namespace, labels, spec)
}

fn pending(namespace: &str, labels: Value, spec: Value) -> PendingPod {
    PendingPod::from_k8s(&k8s_pod("incoming", namespace, labels, spec)).expect("readable")
}

/// `key In values` over `topology_key`, as one required or preferred term.
fn term(key: &str, op: &str, values: &[&str], topology_key: &str) -> Value {
    let mut e = json!({"key": key, "operator": op});
    if !values.is_empty() {
        e["values"] = json!(values);
    }
    json!({"labelSelector": {"matchExpressions": [e]}, "topologyKey": topology_key})
}

fn required(kind: &str, terms: Vec<Value>) -> Value {
    json!({"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": terms}}})
}

fn snapshot(
    nodes: Vec<NodeInput>,
    pods: &[Pod],
    namespaces: &[(&str, &[(&str, &str)])],
) -> Snapshot {
    let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
    for n in nodes {
        b.node(n);
    }
    for p in pods {
        b.pod(bound_pod_input(p).expect("readable").expect("bound"));
    }
    for (name, labels) in namespaces {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        b.namespace(name, labels);
    }
    b.build().expect("a snapshot")
}

/// Per node, in name order: `None` when it may take the pod, else the
/// inter-pod refusal (any other reason fails the test).
fn verdicts(snapshot: &Snapshot, pod: &PendingPod) -> Vec<Option<AffinityRefusal>> {
    let mut rows = explain(snapshot, pod, &SchedulerConfig::default()).rows;
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    rows.into_iter()
        .map(|r| match r.filter_reason {
            None => None,
            Some(FilterReason::InterPodAffinity(a)) => Some(a),
            Some(other) => panic!("node {} refused for another reason: {other}", r.node),
        })
        .collect()
}
