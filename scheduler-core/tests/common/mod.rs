//! Test topologies, nodes and pods shared by the filter, score and schedule tests.
#![allow(dead_code)]

use gputopo_api::{
    GpuInfo, GpuLink, GpuRequest, GpuTopologySpec, Interconnect, LinkClass, TopologySource,
    TopologySummary,
};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::snapshot::{
    BoundPodInput, GpuHolding, NodeInput, Snapshot, SnapshotBuilder,
};
use std::collections::BTreeMap;

/// Per-GPU facts.
#[derive(Clone, Copy)]
pub struct Gpu {
    pub numa: Option<i32>,
    pub memory_mib: Option<u64>,
    pub mig: bool,
}

pub fn spec_with(
    n: u32,
    class: impl Fn(u32, u32) -> LinkClass,
    gpu: impl Fn(u32) -> Gpu,
) -> GpuTopologySpec {
    let gpus = (0..n)
        .map(|i| {
            let g = gpu(i);
            GpuInfo {
                index: i,
                uuid: Some(format!("GPU-{i:08x}-test")),
                product: Some("test".into()),
                memory_mib: g.memory_mib,
                pci_bus_id: None,
                numa_node: g.numa,
                cpu_affinity: None,
                mig_enabled: Some(g.mig),
                fabric: None,
            }
        })
        .collect();
    let mut links = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            let c = class(a, b);
            links.push(GpuLink {
                a,
                b,
                link_type: c.link_type(),
                nvlinks: c.nvlinks(),
                hops: None,
                weight: None,
                bandwidth: None,
            });
        }
    }
    GpuTopologySpec {
        node_name: "test".into(),
        source: TopologySource::Fixture,
        vendor: None,
        driver_version: None,
        cuda_version: None,
        gpus,
        links,
        nics: vec![],
        islands: vec![],
        summary: TopologySummary {
            gpu_count: n,
            product: None,
            p2p_level: None,
            p2p_bottleneck: None,
            all_to_all_nvlink: false,
            largest_island: 0,
            numa_nodes: None,
            interconnect: Interconnect::NvlinkMesh,
        },
    }
}

/// 8 GPUs, NUMA 0 for 0–3 and 1 for 4–7, 80 GiB each.
pub fn spec(class: impl Fn(u32, u32) -> LinkClass) -> GpuTopologySpec {
    spec_with(8, class, |i| Gpu {
        numa: Some((i / 4) as i32),
        memory_mib: Some(81_920),
        mig: false,
    })
}

/// DGX-1 V100 NVLinks per pair (docs/references.md, go-gpuallocator's tests); SYS otherwise.
pub fn dgx1_class(a: u32, b: u32) -> LinkClass {
    const NV: [(u32, u32, u32); 16] = [
        (0, 1, 1),
        (0, 2, 1),
        (0, 3, 2),
        (0, 4, 2),
        (1, 2, 2),
        (1, 3, 1),
        (1, 5, 2),
        (2, 3, 2),
        (2, 6, 1),
        (3, 7, 1),
        (4, 5, 1),
        (4, 6, 1),
        (4, 7, 2),
        (5, 6, 2),
        (5, 7, 1),
        (6, 7, 2),
    ];
    let (a, b) = (a.min(b), a.max(b));
    NV.iter()
        .find(|&&(x, y, _)| (x, y) == (a, b))
        .map_or(LinkClass::Sys, |&(_, _, k)| LinkClass::Nv(k))
}

pub fn dgx1() -> GpuTopologySpec {
    spec(dgx1_class)
}

/// 8 GPUs on NVSwitch (NV12 everywhere).
pub fn a100() -> GpuTopologySpec {
    spec(|_, _| LinkClass::Nv(12))
}

/// 8 PCIe GPUs: PIX pairs, NODE within a socket, SYS across.
pub fn pcie() -> GpuTopologySpec {
    spec(|a, b| {
        if a / 2 == b / 2 {
            LinkClass::Pix
        } else if a / 4 == b / 4 {
            LinkClass::Node
        } else {
            LinkClass::Sys
        }
    })
}

/// A GPU node: 128 cpu, 1 TiB, 110 pods, `nvidia.com/gpu` = the spec's GPU count.
pub fn gpu_node(name: &str, spec: GpuTopologySpec) -> NodeInput {
    let gpus = spec.gpus.len();
    NodeInput {
        name: name.to_string(),
        labels: labels(&[("kubernetes.io/hostname", name)]),
        allocatable: Resources::allocatable(
            [
                ("cpu", "128"),
                ("memory", "1Ti"),
                ("pods", "110"),
                ("nvidia.com/gpu", &gpus.to_string()),
            ],
            "test",
        )
        .expect("valid quantities"),
        topology: Some(spec.into()),
        ..NodeInput::default()
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A GPU request of `gpus` with these annotations.
pub fn request(gpus: u32, annotations: &[(&str, &str)]) -> GpuRequest {
    GpuRequest::parse(Some(gpus), &labels(annotations), &BTreeMap::new()).expect("valid request")
}

pub fn pod(gpus: u32, annotations: &[(&str, &str)]) -> PendingPod {
    PendingPod::new("default", "p", request(gpus, annotations))
}

/// A bound pod holding `gpus` whole on `node`, with a workload annotation if given.
pub fn holder(name: &str, node: &str, gpus: &[u32], workload: Option<&str>) -> BoundPodInput {
    let mut p = BoundPodInput::new("default", name, node);
    let annotations: Vec<(&str, &str)> = workload
        .map(|w| vec![("gputopo.dev/workload", w)])
        .unwrap_or_default();
    p.request = Ok(request(gpus.len() as u32, &annotations));
    p.requests.gpus = gpus.len() as i64;
    p.holding = GpuHolding::Whole(gpus.to_vec());
    p
}

pub fn snapshot(nodes: Vec<NodeInput>, pods: Vec<BoundPodInput>) -> Snapshot {
    snapshot_with(&SchedulerConfig::default(), nodes, pods)
}

pub fn snapshot_with(
    config: &SchedulerConfig,
    nodes: Vec<NodeInput>,
    pods: Vec<BoundPodInput>,
) -> Snapshot {
    let mut b = SnapshotBuilder::new(config);
    for n in nodes {
        b.node(n);
    }
    for p in pods {
        b.pod(p);
    }
    b.build().expect("snapshot builds")
}

/// A small deterministic generator (splitmix64): no dependency, same on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// 2 spines × 2 leaves × 4 nodes of 8 NV12 GPUs, named `s<spine>-l<leaf>-n<n>`,
/// labelled `gputopo.dev/spine` and `gputopo.dev/leaf`.
pub fn spine_leaf_fabric() -> Vec<NodeInput> {
    let mut nodes = Vec::new();
    for spine in 0..2 {
        for leaf in 0..2 {
            for n in 0..4 {
                let name = format!("s{spine}-l{leaf}-n{n}");
                let mut node = gpu_node(&name, a100());
                node.labels.extend(labels(&[
                    ("gputopo.dev/spine", &format!("spine-{spine}")),
                    ("gputopo.dev/leaf", &format!("s{spine}-leaf-{leaf}")),
                ]));
                nodes.push(node);
            }
        }
    }
    nodes
}
