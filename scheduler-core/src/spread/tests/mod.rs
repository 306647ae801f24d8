//! kube-scheduler's PodTopologySpread unit scenarios (the same clusters,
//! pods and verdicts, written again here): the filter's per-node verdicts
//! and the normalised scores, read straight off `SpreadFilter` and
//! `normalized_scores` so no other plugin is in the way.

mod filter_cases;
mod score_cases;

use super::{SpreadFilter, SpreadRefusal, normalized_scores};
use crate::config::{SchedulerConfig, SpreadDefaults};
use crate::filter::PodContext;
use crate::pod::PendingPod;
use crate::snapshot::from_k8s::bound_pod_input;
use crate::snapshot::{NodeInput, Snapshot, SnapshotBuilder, WorkloadSelectors};
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

const HOST: &str = "kubernetes.io/hostname";

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

/// A node labelled `zone` and `node` (upstream's filter clusters).
fn zoned(name: &str, zone: &str) -> NodeInput {
    node(name, &[("zone", zone), ("node", name)])
}

/// A node labelled with its hostname only (upstream's score clusters).
fn host(name: &str) -> NodeInput {
    node(name, &[(HOST, name)])
}

fn k8s_pod(name: &str, metadata: Value, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c"}]);
    let mut metadata = metadata;
    metadata["name"] = json!(name);
    if metadata.get("namespace").is_none() {
        metadata["namespace"] = json!("default");
    }
    serde_json::from_value(json!({"metadata": metadata, "spec": spec})).expect("a pod")
}

/// `n` pods labelled `foo: ""` on `node`.
fn foo_pods(node: &str, n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| bound(&format!("{node}-{i}"), node, json!({"labels": {"foo": ""}})))
        .collect()
}

fn bound(name: &str, node: &str, metadata: Value) -> Pod {
    k8s_pod(name, metadata, json!({"nodeName": node}))
}

/// `labelSelector: foo Exists`.
fn exists(key: &str) -> Value {
    json!({"matchExpressions": [{"key": key, "operator": "Exists"}]})
}

fn constraint(max_skew: i32, key: &str, when: &str, selector: Value) -> Value {
    let mut c = json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when});
    if !selector.is_null() {
        c["labelSelector"] = selector;
    }
    c
}

/// The incoming pod: labelled `foo: ""` unless `labels` says otherwise.
fn incoming(labels: Value, spec: Value) -> PendingPod {
    PendingPod::from_k8s(&k8s_pod("p", json!({"labels": labels}), spec)).expect("readable")
}

fn spread(constraints: Vec<Value>) -> Value {
    json!({"topologySpreadConstraints": constraints})
}

fn snapshot_with(nodes: Vec<NodeInput>, pods: &[Pod], selectors: WorkloadSelectors) -> Snapshot {
    let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
    for n in nodes {
        b.node(n);
    }
    for p in pods {
        b.pod(bound_pod_input(p).expect("readable").expect("bound"));
    }
    b.workload_selectors(selectors);
    b.build().expect("a snapshot")
}

fn snapshot(nodes: Vec<NodeInput>, pods: &[Pod]) -> Snapshot {
    snapshot_with(nodes, pods, WorkloadSelectors::default())
}

fn index(snapshot: &Snapshot, name: &str) -> usize {
    snapshot.node_id(name).expect("a node").0 as usize
}

/// The filter's verdict per named node; every node passes where no
/// `DoNotSchedule` constraint applies.
fn verdicts(snap: &Snapshot, pod: &PendingPod, nodes: &[&str]) -> Vec<Option<SpreadRefusal>> {
    let config = SchedulerConfig::default();
    let ctx = PodContext::new(snap, pod, &config);
    let filter = SpreadFilter::new(snap, pod, &config.spread_defaults, &|i| ctx.eligibility(i));
    nodes
        .iter()
        .map(|n| {
            filter
                .as_ref()
                .and_then(|f| f.check(snap, index(snap, n)).err())
        })
        .collect()
}

/// The normalised score of each of `feasible`.
fn scores_with(
    snap: &Snapshot,
    pod: &PendingPod,
    feasible: &[&str],
    defaults: &SpreadDefaults,
) -> Option<Vec<i64>> {
    let config = SchedulerConfig::default();
    let ctx = PodContext::new(snap, pod, &config);
    let feasible: Vec<usize> = feasible.iter().map(|n| index(snap, n)).collect();
    normalized_scores(snap, pod, defaults, &feasible, &|i| ctx.eligibility(i))
}

fn scores(snap: &Snapshot, pod: &PendingPod, feasible: &[&str]) -> Vec<i64> {
    scores_with(snap, pod, feasible, &SpreadDefaults::System).expect("a spread score")
}
