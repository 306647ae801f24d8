//! Intra-node topologies synthesised for trace nodes, which record none.
//!
//! Assumptions (they do not change FGD's allocation metric, which ignores
//! wiring; they only steer the `gputopo` and `gpuallocator` policies' GPU
//! choice inside a node):
//!
//! * V100M16 / V100M32 with 8 GPUs: the DGX-1 V100 hybrid cube-mesh, from the
//!   recorded `nvidia-smi topo -m` in `fixtures/nvidia/` (embedded).
//! * Every other shape (G2, G3, T4, P100, A10, 4-GPU V100, …): PCIe only, GPUs
//!   in pairs behind one switch (`PIX`), pairs of one socket joined through
//!   the socket (`NODE`), the two halves on two sockets (`SYS`); a node of one
//!   GPU has no links. G2/G3 are undisclosed Alibaba parts: PCIe is the
//!   conservative guess.

use gputopo_api::{
    GpuInfo, GpuLink, GpuTopologySpec, Interconnect, LinkType, TopologySource, TopologySummary,
};
use std::path::Path;

const DGX1_TOPO: &str =
    include_str!("../../../fixtures/nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt");

/// Which synthetic topology a (model, GPU count) gets; the name goes in the docs and output.
pub fn kind(model: &str, gpus: u32) -> &'static str {
    if gpus == 8 && model.starts_with("V100") {
        "dgx1-cube-mesh"
    } else if gpus <= 1 {
        "single-gpu"
    } else {
        "pcie-pairs-2-sockets"
    }
}

/// The synthesised spec for a node of `gpus` GPUs of `model`.
pub fn synthesize(node: &str, model: &str, gpus: u32) -> GpuTopologySpec {
    if kind(model, gpus) == "dgx1-cube-mesh"
        && let Ok(mut spec) = crate::topology::parse(Path::new("dgx1-v100.txt"), DGX1_TOPO)
    {
        spec.node_name = node.to_string();
        for g in &mut spec.gpus {
            g.product = Some(model.to_string());
        }
        spec.summary.product = Some(model.to_string());
        return spec;
    }
    pcie(node, model, gpus)
}

fn pcie(node: &str, model: &str, gpus: u32) -> GpuTopologySpec {
    let half = gpus.div_ceil(2).max(1);
    let socket = |i: u32| i32::from(i >= half && gpus > 1);
    let mut links = Vec::new();
    for a in 0..gpus {
        for b in a + 1..gpus {
            let link_type = if a / 2 == b / 2 {
                LinkType::Pix
            } else if socket(a) == socket(b) {
                LinkType::Node
            } else {
                LinkType::Sys
            };
            links.push(GpuLink {
                a,
                b,
                link_type,
                nvlinks: 0,
                hops: None,
                weight: None,
                bandwidth: None,
            });
        }
    }
    let numa = if gpus > 1 { 2 } else { 1 };
    let p2p_bottleneck = links
        .iter()
        .map(GpuLink::class)
        .min()
        .map(|class| class.to_string());
    GpuTopologySpec {
        node_name: node.to_string(),
        source: TopologySource::Fixture,
        vendor: None,
        driver_version: None,
        cuda_version: None,
        gpus: (0..gpus)
            .map(|index| GpuInfo {
                index,
                uuid: None,
                product: Some(model.to_string()),
                memory_mib: None,
                pci_bus_id: None,
                numa_node: Some(socket(index)),
                cpu_affinity: None,
                mig_enabled: Some(false),
                fabric: None,
            })
            .collect(),
        links,
        nics: Vec::new(),
        islands: (0..gpus).map(|i| vec![i]).collect(),
        summary: TopologySummary {
            gpu_count: gpus,
            product: Some(model.to_string()),
            p2p_level: None,
            p2p_bottleneck,
            all_to_all_nvlink: false,
            largest_island: u32::from(gpus > 0),
            numa_nodes: Some(numa),
            interconnect: Interconnect::Pcie,
        },
    }
}

/// go-gpuallocator's pair score for a link: NVLinks count most, then the
/// nearer the PCIe path the better (its `calculateGPUPairScore` order).
/// go-gpuallocator knows no XGMI (it is NVIDIA's); XGMI scores between PIX
/// and one NVLink, where gputopo's own `LinkClass` order puts it.
pub fn pair_score(spec: &GpuTopologySpec, a: u32, b: u32) -> u32 {
    let Some(link) = spec.link(a, b) else {
        return 0;
    };
    match link.link_type {
        LinkType::Nv => 100 * link.nvlinks,
        LinkType::Xgmi if link.class() == gputopo_api::LinkClass::XgmiRouted => 55,
        LinkType::Xgmi => 60,
        LinkType::Pix => 50,
        LinkType::Pxb => 40,
        LinkType::Phb => 30,
        LinkType::Node => 20,
        LinkType::Sys => 10,
    }
}
