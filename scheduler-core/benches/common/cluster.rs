//! The bench cluster: 5,000 GPU nodes as a real cluster labels them, shared
//! by the `schedule` bench and the `snapshot_memory` example.
#![allow(dead_code)]

use gputopo_api::{GpuRequest, GpuTopologySpec, LinkClass};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::selector::{Taint, TaintEffect, Toleration};
use gputopo_scheduler_core::snapshot::{
    BoundPodInput, GpuHolding, NodeInput, Snapshot, SnapshotBuilder,
};
use std::collections::BTreeMap;

/// The topology builders the tests use, so benches and tests measure the same shapes.
#[path = "../../tests/common/mod.rs"]
mod shared;

pub use shared::dgx1_class;

/// An 8-GPU H100 board: `class` per pair, NUMA 0 for GPUs 0–3 and 1 for 4–7.
pub fn spec(class: impl Fn(u32, u32) -> LinkClass) -> GpuTopologySpec {
    let mut spec = shared::spec_with(8, class, |i| shared::Gpu {
        numa: Some((i / 4) as i32),
        memory_mib: Some(81_559),
        mig: false,
    });
    for g in &mut spec.gpus {
        g.product = Some("NVIDIA H100 80GB HBM3".into());
        // Real UUID shape: the snapshot packs these, which the memory figure counts.
        g.uuid = Some(format!("GPU-{:08x}-0000-4000-8000-000000000000", g.index));
    }
    spec
}

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// 5,000 GPU nodes as a real cluster labels them: 4,000 H100 NVSwitch boards
/// and 1,000 DGX-1s, 50 leaves under 5 spines, the usual GPU taint, and
/// bound pods on most nodes (about a fifth are empty).
pub fn cluster(nodes: usize) -> Snapshot {
    cluster_with(nodes, true)
}

/// As [`cluster`], optionally without bound pods.
pub fn cluster_with(nodes: usize, with_pods: bool) -> Snapshot {
    let (nodes, pods) = cluster_inputs(nodes, with_pods);
    let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
    for n in nodes {
        b.node(n);
    }
    for p in pods {
        b.pod(p);
    }
    b.build().expect("valid cluster")
}

/// The inputs [`cluster_with`] builds from.
pub fn cluster_inputs(nodes: usize, with_pods: bool) -> (Vec<NodeInput>, Vec<BoundPodInput>) {
    let h100 = spec(|_, _| LinkClass::Nv(18));
    let dgx1 = spec(dgx1_class);
    let mut rng = Rng(7);
    let mut node_inputs = Vec::with_capacity(nodes);
    let mut pod_inputs = Vec::new();
    let allocatable = Resources::allocatable(
        [
            ("cpu", "192"),
            ("memory", "2Ti"),
            ("ephemeral-storage", "3Ti"),
            ("pods", "110"),
            ("nvidia.com/gpu", "8"),
            ("hugepages-1Gi", "0"),
            ("rdma/ib", "8"),
        ],
        "bench",
    )
    .expect("valid");
    for i in 0..nodes {
        let name = format!("gpu-{i:05}");
        let model = if i % 5 == 4 { &dgx1 } else { &h100 };
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname", name.as_str()),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("node.kubernetes.io/instance-type", "p5.48xlarge"),
            (
                "topology.kubernetes.io/zone",
                if i % 2 == 0 {
                    "us-east-1a"
                } else {
                    "us-east-1b"
                },
            ),
            ("nvidia.com/gpu.count", "8"),
            ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
            ("nvidia.com/gpu.memory", "81559"),
            ("gputopo.dev/interconnect", "nvswitch"),
            ("gputopo.dev/spine", &format!("spine-{}", i / 1000)),
            ("gputopo.dev/leaf", &format!("leaf-{}", i / 100)),
            (
                "gputopo.dev/cost-per-hour",
                if i % 3 == 0 { "98.32" } else { "55.04" },
            ),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut model = model.clone();
        model.node_name.clone_from(&name);
        node_inputs.push(NodeInput {
            name: name.clone(),
            labels,
            taints: vec![Taint::new(
                "nvidia.com/gpu",
                "present",
                TaintEffect::NoSchedule,
            )],
            unschedulable: false,
            allocatable: allocatable.clone(),
            topology: Some(model.into()),
            gpu_allocations: Vec::new(),
            allocations_observed_at: None,
            images: Vec::new(),
            declared_features: Default::default(),
        });
        // Busy GPUs: none on a fifth of the nodes, else 1–4 pods.
        if rng.next().is_multiple_of(5) || !with_pods {
            continue;
        }
        let mut free: Vec<u32> = (0..8).collect();
        for p in 0..(1 + rng.next() % 4) {
            if free.is_empty() {
                break;
            }
            let k = (1 + rng.next() % 3).min(free.len() as u64) as usize;
            let start = (rng.next() as usize) % (free.len() - k + 1);
            let gpus: Vec<u32> = free.drain(start..start + k).collect();
            let mut pod = BoundPodInput::new("jobs", &format!("{name}-p{p}"), &name);
            pod.requests =
                Resources::from_list([("cpu", "16"), ("memory", "128Gi")], "bench").expect("valid");
            pod.requests.gpus = gpus.len() as i64;
            pod.requests.pods = 1;
            pod.holding = GpuHolding::Whole(gpus);
            pod_inputs.push(pod);
        }
    }
    (node_inputs, pod_inputs)
}

pub fn pod(gpus: u32) -> PendingPod {
    pod_with(gpus, &[("gputopo.dev/workload", "training")])
}

/// An inference pod sharing a quarter of one GPU.
pub fn shared_pod() -> PendingPod {
    let mut p = pod_with(
        1,
        &[
            ("gputopo.dev/workload", "inference"),
            ("gputopo.dev/gpu-share", "0.25"),
        ],
    );
    p.requests = Resources::from_list([("cpu", "4"), ("memory", "32Gi")], "bench").expect("valid");
    p.requests.gpus = 1;
    p.requests.pods = 1;
    p
}

fn pod_with(gpus: u32, annotations: &[(&str, &str)]) -> PendingPod {
    let annotations: BTreeMap<String, String> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut p = PendingPod::new(
        "ml",
        "train",
        GpuRequest::parse(Some(gpus), &annotations, &BTreeMap::new()).expect("valid"),
    );
    p.requests =
        Resources::from_list([("cpu", "32"), ("memory", "256Gi")], "bench").expect("valid");
    p.requests.gpus = i64::from(gpus);
    p.requests.pods = 1;
    p.tolerations = vec![Toleration::exists("nvidia.com/gpu", None)];
    p
}
