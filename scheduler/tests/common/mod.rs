//! Helpers shared by the scheduler's end-to-end tests (`e2e/`, the
//! secondary scheduler; `extender.rs`, the extender mode): kwok nodes built
//! from recorded machines with their `GpuTopology`, GPU pods, polling, and
//! reading back what the schedulers wrote.

#![allow(dead_code)] // each test binary uses its own subset

pub mod dra;
pub mod ecosystem;
pub mod extender;
pub mod scheduler_process;
#[allow(unused_imports)] // the extender tests start no scheduler process
pub use scheduler_process::*;

use gputopo_api::{GpuTopology, GpuTopologySpec};
use gputopo_testenv::TestEnv;
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::normalize::normalize;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub const DGX1: &str = "nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt";
pub const DGX_A100: &str = "nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt";
pub const HGX_H100: &str =
    "nvidia/h100-8gpu-nv18-no-nic-nccl-topo-tutorial-space-expanded-topo-m.txt";
/// Eight PCIe GPUs on two sockets: PHB pairs, NODE within a socket, SYS
/// across; no NVLink at all.
pub const PCIE_2SOCKET: &str = "nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt";

pub fn fixture(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// The `GpuTopology` the agent would publish for node `name` built from
/// the recorded machine `topo`.
pub fn topology(name: &str, topo: &str) -> GpuTopology {
    let facts = facts_from_topo(&fixture(topo)).expect("the fixture parses");
    GpuTopology::new(
        name,
        normalize(name, &facts).expect("the fixture normalizes"),
    )
}

/// A kwok node built from a recorded machine, labelled, with the
/// `GpuTopology` the agent would publish for it (owned by the node).
pub async fn fixture_node(
    env: &TestEnv,
    name: &str,
    topo: &str,
    labels: &[(&str, &str)],
) -> (Node, GpuTopology) {
    fixture_node_with(env, name, topo, labels, true).await
}

/// [`fixture_node`]; `device_plugin: false` gives the node no
/// `nvidia.com/gpu` resource (its GPUs published through DRA only).
pub async fn fixture_node_with(
    env: &TestEnv,
    name: &str,
    topo: &str,
    labels: &[(&str, &str)],
    device_plugin: bool,
) -> (Node, GpuTopology) {
    spec_node(env, name, topology(name, topo).spec, labels, device_plugin).await
}

/// [`fixture_node_with`] for a topology the test has built or changed.
pub async fn spec_node(
    env: &TestEnv,
    name: &str,
    spec: GpuTopologySpec,
    labels: &[(&str, &str)],
    device_plugin: bool,
) -> (Node, GpuTopology) {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let node = env
        .create_fake_gpu_node(
            name,
            if device_plugin {
                spec.gpus.len() as u32
            } else {
                0
            },
            &labels,
        )
        .await;
    let mut topology = GpuTopology::new(name, spec);
    topology.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.into(),
        uid: node.metadata.uid.clone().expect("a created node has a uid"),
        ..OwnerReference::default()
    }]);
    let created = Api::<GpuTopology>::all(env.client().await)
        .create(&PostParams::default(), &topology)
        .await
        .unwrap_or_else(|e| panic!("creating GpuTopology {name}: {e}"));
    // A new node carries node.kubernetes.io/not-ready until the node
    // lifecycle controller sees it Ready: wait, so that each test's first
    // decision meets the node as a running cluster has it.
    let nodes = Api::<Node>::all(env.client().await);
    let node = wait_for(
        &format!("node {name} without the not-ready taint"),
        Duration::from_secs(60),
        || async {
            nodes.get(name).await.ok().filter(|n| {
                !n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"))
            })
        },
        String::new,
    )
    .await;
    (node, created)
}

pub fn gpu_pod(
    name: &str,
    scheduler: &str,
    group: &str,
    gpus: u32,
    annotations: &[(&str, &str)],
) -> Pod {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {"e2e-group": group},
            "containers": [{
                "name": "main",
                "image": "registry.invalid/train:1",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
            }]
        }
    }))
    .expect("a pod")
}

/// The names of the pods named `prefix…` that have a node now.
pub async fn bound_named(pods: &Api<Pod>, prefix: &str) -> Vec<String> {
    pods.list(&ListParams::default())
        .await
        .expect("listing the pods")
        .items
        .iter()
        .filter(|p| node_of(p).is_some())
        .filter_map(|p| p.metadata.name.clone())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

pub async fn create(pods: &Api<Pod>, pod: &Pod) {
    pods.create(&PostParams::default(), pod)
        .await
        .unwrap_or_else(|e| panic!("creating pod {:?}: {e}", pod.metadata.name));
}

/// Polls until `check` returns `Some`, at most `timeout`.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
    log: impl Fn() -> String,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {timeout:?}; scheduler log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub fn node_of(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
}

pub fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata.annotations.as_ref()?.get(key).cloned()
}

pub fn gpus_of(pod: &Pod) -> Vec<u32> {
    annotation(pod, "gputopo.dev/assigned-gpus")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("an index"))
        .collect()
}

/// The events regarding `pod` with `reason`.
pub async fn events(client: &Client, ns: &str, pod: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("listing events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod)
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

pub fn note(e: &Event) -> String {
    e.note.clone().unwrap_or_default()
}

/// `patch` merged into `base`, objects key by key.
pub fn merge_json(base: &mut serde_json::Value, patch: &serde_json::Value) {
    use serde_json::Value;
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge_json(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

/// Two fresh DGX A100 nodes of a new group, labelled `e2e-slot` `a` and
/// `b`: the group, and each node's slot by name.
pub async fn slot_nodes(env: &TestEnv, prefix: &str) -> (String, BTreeMap<String, String>) {
    let group = env.unique_name(prefix);
    let mut slot_of = BTreeMap::new();
    for slot in ["a", "b"] {
        let name = env.unique_name(&format!("{prefix}-{slot}"));
        fixture_node(
            env,
            &name,
            DGX_A100,
            &[("e2e-group", &group), ("e2e-slot", slot)],
        )
        .await;
        slot_of.insert(name, slot.to_string());
    }
    (group, slot_of)
}
