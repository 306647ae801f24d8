//! What the agent reads from the kubelet: a saved PodResources answer (the
//! JSON `grpcurl` prints, replayed with `--pod-resources-answer`) and the
//! device IDs in any answer, mapped onto the node's GPUs as the agent
//! publishes them in `GpuTopology.status`.

use crate::mutate::texts;
use crate::run::Verdict;
use crate::seeds::SPECS;
use crate::value::Documents;
use gputopo_agent::podres::map::{NodeGpus, map_answer};
use gputopo_agent::podres::saved;
use gputopo_api::GpuTopologySpec;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

/// A recorded node whose GPUs all have a UUID and a PCI bus id.
static SPEC: LazyLock<&'static GpuTopologySpec> = LazyLock::new(|| {
    SPECS
        .iter()
        .find(|s| {
            s.gpus.len() >= 4
                && s.gpus
                    .iter()
                    .all(|g| g.uuid.is_some() && g.pci_bus_id.is_some())
        })
        .expect("a recording with UUIDs and PCI bus ids")
});

const MIG: &str = "MIG-4f5e6d7c-0000-4000-8000-000000000001";

static GPUS: LazyLock<NodeGpus> = LazyLock::new(|| {
    let mig = BTreeMap::from([(0, vec![MIG.to_string()])]);
    NodeGpus::new(&SPEC, &mig)
});

/// Device IDs of every form the kubelet reports, for this node.
static IDS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let g = &SPEC.gpus;
    let uuid = |i: usize| g[i].uuid.clone().expect("a UUID");
    vec![
        uuid(0),
        uuid(1),
        format!("{}::3", uuid(2)),
        MIG.to_string(),
        format!("MIG-{}/1/0", uuid(3)),
        g[3].pci_bus_id.clone().expect("a bus id"),
        "0000:c1:00.0".to_string(),
        "GPU-ffffffff-0000-4000-8000-000000000000".to_string(),
    ]
});

static ANSWERS: LazyLock<Arc<[String]>> = LazyLock::new(|| {
    let ids = &*IDS;
    let container = |name: &str, resource: &str, devices: &[String]| {
        json!({"name": name, "devices": [{"resourceName": resource, "deviceIds": devices}],
               "cpuIds": [1, 2], "memory": [{"memoryType": "memory", "size": 1024}]})
    };
    let full = json!({
        "list": {"podResources": [
            {"name": "trainer", "namespace": "ml", "containers": [
                container("c", "nvidia.com/gpu", &ids[0..2]),
                container("d", "nvidia.com/gpu", &ids[0..1])]},
            {"name": "chat", "namespace": "serve", "containers": [
                container("s", "nvidia.com/gpu", &ids[2..3])]},
            {"name": "mig", "namespace": "x", "containers": [
                container("m", "nvidia.com/mig-1g.10gb", &ids[3..5])]},
            {"name": "other", "namespace": "y", "containers": [
                container("p", "example.com/fpga", &ids[5..8])]}
        ]},
        "allocatable": {"devices": [
            {"resourceName": "nvidia.com/gpu", "deviceIds": ids, "topology": {"nodes": [{"ID": 0}]}}
        ]}
    });
    let snake = json!({
        "list": {"pod_resources": [{"name": "a", "namespace": "b", "containers": [
            {"name": "c", "devices": [{"resource_name": "amd.com/gpu", "device_ids": [ids[5]]}]}]}]}
    });
    vec![
        full.to_string(),
        snake.to_string(),
        r#"{"list": {}}"#.to_string(),
    ]
    .into()
});

static DOCUMENTS: LazyLock<Documents> = LazyLock::new(|| Documents::new(&ANSWERS));

pub mod saved_answer {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        prop_oneof![
            2 => DOCUMENTS.json(),
            1 => texts(ANSWERS.clone(), &["\"deviceIds\":", "::", "MIG-", "GPU-", "null"]),
        ]
        .boxed()
    }

    pub fn check(text: &str) -> Verdict {
        let answer = saved::parse(text, "answer.json");
        if let Ok(a) = &answer {
            let mapped = map_answer(a, &GPUS);
            mapped.unknown_ids();
        }
        Verdict::from(&answer)
    }
}

pub mod device_ids {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        texts(
            IDS.iter().cloned().collect(),
            &["::", "MIG-", "GPU-", "mig-", "/", "0000:", "-"],
        )
    }

    pub fn check(id: &str) -> Verdict {
        Verdict::from(&GPUS.resolve(id))
    }
}
