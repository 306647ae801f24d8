//! A scheduling cycle over hostile objects: nodes, `GpuTopology` objects and
//! bound pods (edited fixtures), decoded as the scheduler's watches decode
//! them, built into a snapshot by the scheduler's own `build_snapshot`, then
//! one pending pod decided by `schedule_pod` (and, when it names a gang,
//! its gang by `schedule_gang`). A panic anywhere in that decision counts.

use crate::run::Verdict;
use crate::seeds::{TOPOLOGY_OBJECTS, fixture_texts, list_items};
use crate::value::Documents;
use gputopo_api::GpuTopology;
use gputopo_scheduler::checked::Checked;
use gputopo_scheduler::cluster::{AssumeCache, Objects, build_snapshot, usage};
use gputopo_scheduler::gangs::GangObjects;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::gang_schedule::schedule_gang;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::schedule::schedule_pod;
use k8s_openapi::api::core::v1::{Node, Pod};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::{Arc, LazyLock};

/// One cycle's objects, as JSON texts.
#[derive(Clone, Debug)]
pub struct Cycle {
    pub nodes: Vec<String>,
    pub topologies: Vec<String>,
    pub pods: Vec<String>,
    pub pending: String,
}

static NODES: LazyLock<Documents> = LazyLock::new(|| {
    let mut seeds = list_items("Node");
    seeds.push(
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-c", "labels": {
                "gputopo.dev/spine": "s1", "gputopo.dev/leaf": "l1",
                "gputopo.dev/cost-per-hour": "12.5", "gputopo.dev/gpu-generation": "9",
                "gputopo.dev/topology-manager-policy": "restricted",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "192", "memory": "2Ti", "pods": "110",
                "nvidia.com/gpu": "8", "ephemeral-storage": "1Ti"}}
        })
        .to_string(),
    );
    Documents::new(&seeds)
});

static TOPOLOGIES: LazyLock<Documents> = LazyLock::new(|| Documents::new(&TOPOLOGY_OBJECTS));

/// Pods: the bound ones of the cluster fixture, the pending ones of
/// `fixtures/clusters/pods`, and a gang member with affinity.
static PODS: LazyLock<Documents> = LazyLock::new(|| {
    let mut seeds = list_items("Pod");
    seeds.extend(fixture_texts("clusters/pods", &["yaml"]).iter().cloned());
    seeds.push(
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w-0", "namespace": "ml", "uid": "u-0",
                "labels": {"scheduling.x-k8s.io/pod-group": "ddp"},
                "annotations": {"gputopo.dev/min-nvlink-level": "NV2",
                    "gputopo.dev/collective": "all-to-all",
                    "gputopo.dev/preferred-domain": "l1",
                    "gputopo.dev/gpu-memory": "16Gi"}},
            "spec": {"schedulerName": "gputopo-scheduler", "priority": 100,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "gputopo.dev/gpu-generation", "operator": "Gt", "values": ["7"]}]}]}}},
                "nodeSelector": {"gputopo.dev/spine": "s1"},
                "containers": [{"name": "c", "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi"},
                    "limits": {"nvidia.com/gpu": "2"}}}]}
        })
        .to_string(),
    );
    Documents::new(&seeds)
});

pub fn strategy() -> BoxedStrategy<Cycle> {
    let json = |d: &'static LazyLock<Documents>, n: std::ops::Range<usize>| {
        prop::collection::vec(d.json(), n)
    };
    (
        json(&NODES, 1..4),
        json(&TOPOLOGIES, 0..4),
        json(&PODS, 0..5),
        PODS.json(),
    )
        .prop_map(|(nodes, topologies, pods, pending)| Cycle {
            nodes,
            topologies,
            pods,
            pending,
        })
        .boxed()
}

fn name(v: &Value) -> Option<&str> {
    v.pointer("/metadata/name").and_then(Value::as_str)
}

pub fn check(c: &Cycle) -> Verdict {
    // Built-in kinds reach the scheduler typed (the API server validated
    // them); a text that does not decode is one the watch never delivers.
    let nodes: Vec<Arc<Node>> = c
        .nodes
        .iter()
        .filter_map(|t| serde_json::from_str(t).ok().map(Arc::new))
        .collect();
    let node_names: Vec<String> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    // Each topology is given a node's name, so that most attach to one.
    let topologies: Vec<Arc<GpuTopology>> = c
        .topologies
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let mut v: Value = serde_json::from_str(t).ok()?;
            if !node_names.is_empty() && name(&v).is_some() {
                v["metadata"]["name"] = Value::from(node_names[i % node_names.len()].clone());
            }
            let checked: Checked<GpuTopology> = serde_json::from_value(v).ok()?;
            checked.value.ok()
        })
        .collect();
    let pods: Vec<Arc<Pod>> = c
        .pods
        .iter()
        .filter_map(|t| serde_json::from_str(t).ok().map(Arc::new))
        .collect();
    let config = SchedulerConfig::default();
    let gangs = GangObjects::default();
    let objects = Objects {
        nodes: &nodes,
        topologies: &topologies,
        pods: &pods,
        namespaces: &[],
        workloads: &gputopo_scheduler::workload_objects::NO_WORKLOADS,
        storage: &gputopo_scheduler::storage_objects::NO_STORAGE,
        gangs: &gangs,
        dra: &gputopo_scheduler::claims::DraObjects::default(),
        changed: None,
    };
    let trust = ReadingTrust::at("2026-03-01T10:05:00Z".parse().expect("a timestamp"));
    let Ok((snapshot, _warnings)) =
        build_snapshot(&objects, &AssumeCache::default(), &config, trust)
    else {
        return Verdict::Rejected;
    };
    usage(&snapshot);
    let Ok(pending) = serde_json::from_str::<Pod>(&c.pending) else {
        return Verdict::Rejected;
    };
    let decision = schedule_pod(&snapshot, &pending, &config);
    if let Ok(member) = PendingPod::from_k8s(&pending)
        && member.request.gang.is_some()
    {
        let members: Vec<PendingPod> = (0..3)
            .map(|i| {
                let mut m = member.clone();
                m.name = format!("{}-{i}", m.name);
                m
            })
            .collect();
        schedule_gang(&snapshot, &members, &config);
    }
    if decision.placement().is_some() {
        Verdict::Accepted
    } else {
        Verdict::Rejected
    }
}

/// The `kind: List` cluster fixture's objects, typed.
struct Fixture {
    nodes: Vec<Arc<Node>>,
    topologies: Vec<Arc<GpuTopology>>,
    pods: Vec<Arc<Pod>>,
    pending: Vec<Pod>,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let typed = |kind| -> Vec<serde_json::Value> {
        list_items(kind)
            .iter()
            .map(|t| serde_json::from_str(t).expect("JSON"))
            .collect()
    };
    let pending = fixture_texts("clusters/pods", &["yaml"])
        .iter()
        .map(|t| serde_yaml::from_str(t).expect("a pod"))
        .collect();
    Fixture {
        nodes: typed("Node")
            .into_iter()
            .map(|v| Arc::new(serde_json::from_value(v).expect("a node")))
            .collect(),
        topologies: typed("GpuTopology")
            .into_iter()
            .map(|v| Arc::new(serde_json::from_value(v).expect("a GpuTopology")))
            .collect(),
        pods: typed("Pod")
            .into_iter()
            .map(|v| Arc::new(serde_json::from_value(v).expect("a pod")))
            .collect(),
        pending,
    }
});

/// A cycle over the cluster fixture with `config`: the snapshot built
/// with it and each fixture pod decided with it.
pub(super) fn decide_on_fixture(config: &SchedulerConfig) {
    let f = &*FIXTURE;
    let gangs = GangObjects::default();
    let objects = Objects {
        nodes: &f.nodes,
        topologies: &f.topologies,
        pods: &f.pods,
        namespaces: &[],
        workloads: &gputopo_scheduler::workload_objects::NO_WORKLOADS,
        storage: &gputopo_scheduler::storage_objects::NO_STORAGE,
        gangs: &gangs,
        dra: &gputopo_scheduler::claims::DraObjects::default(),
        changed: None,
    };
    let trust = ReadingTrust::at("2026-03-01T10:05:00Z".parse().expect("a timestamp"));
    if let Ok((snapshot, _)) = build_snapshot(&objects, &AssumeCache::default(), config, trust) {
        for pod in &f.pending {
            schedule_pod(&snapshot, pod, config);
        }
    }
}
