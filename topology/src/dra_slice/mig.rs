//! NVIDIA's GPU driver with dynamic MIG (`cmd/gpu-kubelet-plugin`,
//! `partitions.go`, `mig.go`), as it publishes on Kubernetes 1.35 and
//! later: G+1 slices in one pool named after the node, the first holding
//! only the shared counters (one set per GPU, `gpu-<i>-counter-set`), then
//! one slice per GPU with the whole GPU and its MIG partitions. The whole
//! GPU consumes every counter of its set; a partition its compute and
//! memory and the memory slices of its placement
//! (`memory-slice-<start>`…), so a partition in use keeps the whole GPU
//! out and the reverse. A partition is named
//! `gpu-<i>-mig-<profile without dots>-<profile id>-<placement start>` and
//! carries `type: mig`, `profile`, `parentUUID` and its parent's product
//! and PCIe attributes. Counters here are the compute (`multiprocessors`),
//! `memory` and memory slices; the driver's engine counters are left out.

use super::{DriverFacts, NVIDIA_DRA_DRIVER, common_attributes, gpu_device};
use gputopo_api::GpuTopologySpec;
use serde_json::{Map, Value, json};

/// One MIG profile of a GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigProfile {
    /// `1g.5gb`.
    pub name: &'static str,
    /// The GPU instance profile id.
    pub id: u32,
    pub multiprocessors: u32,
    /// A quantity (`5Gi`).
    pub memory: &'static str,
    /// Memory slices it spans.
    pub size: u32,
    /// Placement starts (in memory slices).
    pub starts: &'static [u32],
}

/// An A100 40GB: 98 multiprocessors and 8 memory slices in MIG mode, with
/// NVIDIA's published profiles and placements.
pub const A100_40GB_MIG: (u32, &str, u32, &[MigProfile]) = (
    98,
    "40Gi",
    8,
    &[
        MigProfile {
            name: "1g.5gb",
            id: 19,
            multiprocessors: 14,
            memory: "5Gi",
            size: 1,
            starts: &[0, 1, 2, 3, 4, 5, 6],
        },
        MigProfile {
            name: "2g.10gb",
            id: 14,
            multiprocessors: 28,
            memory: "10Gi",
            size: 2,
            starts: &[0, 2, 4],
        },
        MigProfile {
            name: "3g.20gb",
            id: 9,
            multiprocessors: 42,
            memory: "20Gi",
            size: 4,
            starts: &[0, 4],
        },
        MigProfile {
            name: "7g.40gb",
            id: 0,
            multiprocessors: 98,
            memory: "40Gi",
            size: 8,
            starts: &[0],
        },
    ],
);

fn slices(start: u32, size: u32) -> Map<String, Value> {
    (start..start + size)
        .map(|i| (format!("memory-slice-{i}"), json!({"value": "1"})))
        .collect()
}

/// The slices for `node` with every GPU of `spec` MIG-capable with `mig`
/// (multiprocessors, memory, memory slices, profiles).
pub fn nvidia_mig_resource_slices(
    node: &str,
    spec: &GpuTopologySpec,
    facts: &DriverFacts,
    mig: (u32, &str, u32, &[MigProfile]),
) -> Vec<Value> {
    let (multiprocessors, memory, memory_slices, profiles) = mig;
    let everything = {
        let mut c = slices(0, memory_slices);
        c.insert(
            "multiprocessors".into(),
            json!({"value": multiprocessors.to_string()}),
        );
        c.insert("memory".into(), json!({"value": memory}));
        c
    };
    let set = |i: u32| format!("gpu-{i}-counter-set");
    let count = spec.gpus.len() + 1;
    let slice = |n: usize, body: Value| {
        let mut spec = json!({
            "driver": NVIDIA_DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
        });
        for (k, v) in body.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": format!("{node}-{NVIDIA_DRA_DRIVER}-{n}")},
            "spec": spec,
        })
    };
    let counters: Vec<Value> = spec
        .gpus
        .iter()
        .map(|g| json!({"name": set(g.index), "counters": everything}))
        .collect();
    let mut out = vec![slice(0, json!({"sharedCounters": counters}))];
    for (n, g) in spec.gpus.iter().enumerate() {
        let mut whole = gpu_device(g, facts);
        whole["consumesCounters"] = json!([{"counterSet": set(g.index), "counters": everything}]);
        let mut devices = vec![whole];
        for p in profiles {
            for &start in p.starts {
                let mut attributes = common_attributes(g, facts);
                attributes["type"] = json!({"string": "mig"});
                attributes["profile"] = json!({"string": p.name});
                if let Some(uuid) = &g.uuid {
                    attributes["parentUUID"] = json!({"string": uuid});
                }
                let mut consumed = slices(start, p.size);
                consumed.insert(
                    "multiprocessors".into(),
                    json!({"value": p.multiprocessors.to_string()}),
                );
                consumed.insert("memory".into(), json!({"value": p.memory}));
                devices.push(json!({
                    "name": format!("gpu-{}-mig-{}-{}-{start}", g.index, p.name.replace('.', ""), p.id),
                    "attributes": attributes,
                    "capacity": {
                        "multiprocessors": {"value": p.multiprocessors.to_string()},
                        "memory": {"value": p.memory},
                    },
                    "consumesCounters": [{"counterSet": set(g.index), "counters": consumed}],
                }));
            }
        }
        devices.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        out.push(slice(n + 1, json!({"devices": devices})));
    }
    out
}
