//! Version skew (docs/upgrades.md): the scheduler beside an agent one minor
//! older, whose `GpuTopology` objects lack the fields added since, or beside
//! an agent newer than the CRD, whose newer fields the API server refused
//! (agent/src/publish/skew.rs). Either way the object the scheduler reads
//! lacks those fields, and it must decide exactly as from the whole object.

mod common;

use common::pod;
use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::api::core::v1::Node;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::SnapshotBuilder;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::backend::recording::{Recording, replay_nvml};
use gputopo_topology::normalize::normalize;
use serde_json::json;
use std::path::Path;

/// The spec fields the current agent writes and the previous minor's did
/// not (0.2: `summary.p2pBottleneck`, commit 8d5cf76). Every field added to
/// the CRD is optional, and joins this list.
const ADDED_SINCE_PREVIOUS_MINOR: [&str; 1] = ["/spec/summary/p2pBottleneck"];

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Recorded machines as the current agent publishes them: NVSwitch,
/// hybrid cube-mesh, NVSwitch with one GPU's links down, PCIe only.
fn machines() -> Vec<GpuTopology> {
    let from_topo = |node: &str, rel: &str| {
        let facts = facts_from_topo(&read(rel)).expect("the fixture parses");
        GpuTopology::new(node, normalize(node, &facts).expect("it normalizes"))
    };
    let from_recording = |node: &str, rel: &str| {
        let rec = Recording::from_yaml_str(&read(rel), rel).expect("the recording reads");
        let facts = replay_nvml(&rec).expect("it replays");
        GpuTopology::new(node, normalize(node, &facts).expect("it normalizes"))
    };
    vec![
        from_topo(
            "dgx-a100",
            "fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt",
        ),
        from_recording("dgx1-v100", "fixtures/recorded/dgx1-v100-nvml.yaml"),
        from_recording(
            "hgx-h100-degraded",
            "fixtures/recorded/hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml",
        ),
        from_topo(
            "rtx4090-pcie",
            "fixtures/nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt",
        ),
    ]
}

/// `object` as the previous minor's agent wrote it, read by the current types.
fn as_the_older_agent_wrote(object: &GpuTopology) -> GpuTopology {
    let mut value = serde_json::to_value(object).expect("serializes");
    for pointer in ADDED_SINCE_PREVIOUS_MINOR {
        let (parent, field) = pointer.rsplit_once('/').expect("a pointer");
        let removed = value
            .pointer_mut(parent)
            .and_then(serde_json::Value::as_object_mut)
            .and_then(|m| m.remove(field));
        // Else the list is stale: the field was renamed or is not written.
        assert!(
            removed.is_some_and(|v| !v.is_null()),
            "{pointer} not set by the current agent on {:?}",
            object.metadata.name
        );
    }
    serde_json::from_value(value).expect("the current types read the older agent's object")
}

fn decide(topology: &GpuTopology, gpus: u32) -> Decision {
    let name = topology.metadata.name.as_deref().expect("a name");
    let count = topology.spec.gpus.len().to_string();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": count}}
    }))
    .expect("a node");
    let config = SchedulerConfig::default();
    let trust = ReadingTrust::at("2026-01-01T00:00:00Z".parse().expect("a time"));
    let mut builder = SnapshotBuilder::new(&config);
    builder.node(node_input(&node, Some(topology), trust).expect("a node input"));
    let snapshot = builder.build().expect("a snapshot");
    schedule(&snapshot, &pod(gpus, &[]), &config)
}

#[test]
fn an_older_agents_object_schedules_as_the_whole_object() {
    for whole in machines() {
        let older = as_the_older_agent_wrote(&whole);
        assert_eq!(older.spec.summary.p2p_bottleneck, None);
        assert_eq!(
            (&older.spec.gpus, &older.spec.links, &older.spec.islands),
            (&whole.spec.gpus, &whole.spec.links, &whole.spec.islands)
        );
        for gpus in [1, 2, 3, 4, 8] {
            let from_whole = decide(&whole, gpus);
            assert_eq!(
                decide(&older, gpus),
                from_whole,
                "{:?}, {gpus} GPUs",
                whole.metadata.name
            );
            assert!(from_whole.placement().is_some(), "{gpus} GPUs fit");
        }
    }
}

#[test]
fn a_newer_agents_field_this_scheduler_does_not_know_is_ignored() {
    // During an upgrade's rollouts, new agents may run beside the previous
    // scheduler: the types refuse no unknown field, so the object reads.
    for whole in machines() {
        let mut value = serde_json::to_value(&whole).expect("serializes");
        value["spec"]["summary"]["fromANewerAgent"] = json!("NV99");
        value["spec"]["gpus"][0]["fromANewerAgent"] = json!({"x": 1});
        let read: GpuTopology = serde_json::from_value(value).expect("read, the field ignored");
        assert_eq!(read, whole);
        assert_eq!(decide(&read, 4), decide(&whole, 4));
    }
}
