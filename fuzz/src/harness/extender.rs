//! The extender's request bodies, as kube-scheduler (or anyone who can
//! reach the port) posts them: `ExtenderArgs` for filter and prioritize,
//! `ExtenderBindingArgs` for bind. Each body read goes on to its verb,
//! against the mixed cluster fixture, and the answer is written as JSON as
//! the server writes it.

use crate::mutate::bytes;
use crate::run::Verdict;
use crate::seeds::fixtures_dir;
use crate::value::Documents;
use gputopo::cluster::{Cluster, Overrides, load};
use gputopo_scheduler::extender::protocol::{
    PodClaims, binding, decode_args, decode_binding, filter, plan_binding, prioritize,
};
use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::{Arc, LazyLock};

/// The cluster the verbs run against, read once per thread (a snapshot
/// is built for one decision at a time).
fn with_cluster<R>(f: impl FnOnce(&Cluster) -> R) -> R {
    thread_local! {
        static CLUSTER: Cluster = load(
            &fixtures_dir().join("clusters/mixed-12.yaml"),
            &Overrides::default(),
        )
        .expect("fixtures/clusters/mixed-12.yaml loads");
    }
    CLUSTER.with(f)
}

fn pending_pod() -> Value {
    let text = std::fs::read_to_string(fixtures_dir().join("clusters/pods/train-4gpu.yaml"))
        .expect("fixtures/clusters/pods/train-4gpu.yaml");
    let mut pod: Value = serde_yaml::from_str(&text).expect("YAML");
    pod["metadata"]["uid"] = json!("uid-1");
    pod
}

static SEEDS: LazyLock<Arc<[String]>> = LazyLock::new(|| {
    let nodes = [
        "dgx1-1",
        "h100-2",
        "a100-1",
        "pcie-1",
        "bare-1",
        "cordoned-1",
        "nowhere",
    ];
    let items: Vec<Value> = nodes
        .iter()
        .map(|n| json!({"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}}}))
        .collect();
    [
        json!({"Pod": pending_pod(), "NodeNames": nodes}),
        json!({"pod": pending_pod(), "nodes": {"items": items}}),
        json!({"PodName": "train-4gpu", "PodNamespace": "ml", "PodUID": "uid-1", "Node": "h100-2"}),
        json!({"podName": "train-4gpu", "podNamespace": "ml", "podUID": "uid-1", "node": "a100-1"}),
    ]
    .iter()
    .map(Value::to_string)
    .collect()
});

static DOCUMENTS: LazyLock<Documents> = LazyLock::new(|| Documents::new(&SEEDS));

const WORDS: &[&str] = &[
    "\"Pod\":",
    "\"NodeNames\":",
    "\"Nodes\":",
    "null",
    "[]",
    "{}",
];

pub fn strategy() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        2 => DOCUMENTS.json().prop_map(String::into_bytes),
        1 => bytes(SEEDS.clone(), WORDS),
    ]
    .boxed()
}

pub fn check(body: &[u8]) -> Verdict {
    with_cluster(|cluster| {
        // The cluster files hold no DRA objects: claims are not judged.
        let unjudged = PodClaims::Unjudged;
        let mut verdict = Verdict::Rejected;
        if let Ok(request) = decode_args(body) {
            verdict = Verdict::Accepted;
            let _ = request.pod_key();
            let filtered = filter(&cluster.snapshot, &cluster.config, &request, &unjudged);
            let scores = prioritize(&cluster.snapshot, &cluster.config, &request, &unjudged);
            serde_json::to_string(&filtered).expect("a filter result serializes");
            serde_json::to_string(&scores).expect("scores serialize");
        }
        if let Ok(request) = decode_binding(body) {
            verdict = Verdict::Accepted;
            // The pod the extender's cache holds under the request's name.
            let mut pod = pending_pod();
            pod["metadata"]["name"] = json!(request.name);
            pod["metadata"]["namespace"] = json!(request.namespace);
            pod["metadata"]["uid"] = json!(request.uid);
            let pod: Pod = serde_json::from_value(pod).expect("a pod");
            let names = ["gputopo-scheduler".to_string()];
            if let Ok(placement) = plan_binding(
                &cluster.snapshot,
                &cluster.config,
                &names,
                &pod,
                &request,
                &unjudged,
            ) {
                serde_json::to_string(&binding(&request, &placement)).expect("JSON");
            }
        }
        verdict
    })
}
