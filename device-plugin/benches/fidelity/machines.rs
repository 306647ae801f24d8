//! The recorded machines the replay runs on (`fixtures/`): the node as the
//! plugin and scheduler-core read it, and as go-gpuallocator scores it.

use super::nvidia::PairScores;
use gputopo_api::{GpuTopologySpec, LinkType};
use gputopo_device_plugin::choose::Inventory;
use gputopo_scheduler_core::gpuset::NodeShape;
use gputopo_topology::backend::nvml::TopologyLevel;
use gputopo_topology::backend::recording::Recording;
use gputopo_topology::discover::{Source, build, gather};
use std::path::PathBuf;

pub struct Machine {
    pub name: &'static str,
    pub gpus: u32,
    pub inventory: Inventory,
    pub shape: NodeShape,
    pub nvidia: PairScores,
}

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(rel)
}

/// The machines: NVML recordings (NVLink ends and PCIe ancestors known) and
/// `nvidia-smi topo -m` captures (PCIe boxes; NVLink bridges between pairs).
pub fn all() -> Vec<Machine> {
    let nvml = [
        (
            "HGX H100 NVSwitch",
            "recorded/hgx-h100-8gpu-nvswitch-nvml.yaml",
        ),
        (
            "HGX H100, GPU3 degraded",
            "recorded/hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml",
        ),
        ("DGX-1 V100 cube mesh", "recorded/dgx1-v100-nvml.yaml"),
    ];
    let topo = [
        (
            "8x RTX 4090 PCIe, 2 sockets",
            "nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt",
        ),
        (
            "8x V100 NVLink in a VM",
            "nvidia/v100-8gpu-nvlink-vm-all-phb-numa-0-1-topo-m.txt",
        ),
        (
            "4x A100 PCIe, NV12 pairs",
            "nvidia/a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt",
        ),
        (
            "4x A100 PCIe, 2 sockets",
            "nvidia/a100-pcie-4gpu-adroit-no-nvlink-interleaved-cpu-affinity-leading-spaces-topo-m.txt",
        ),
        (
            "8x PCIe all SYS, 2 NUMA",
            "nvidia/pcie-8gpu-all-SYS-2numa-nccl-topo-tutorial-topo-m.txt",
        ),
        (
            "HGX A100 4-GPU, NV12 all-to-all",
            "nvidia/hgx-a100-4gpu-sxm4-80gb-epyc7532-driver580-roce-nic-rocep49s0-topo-m.txt",
        ),
        (
            "4x V100 POWER9, NV3 pairs",
            "nvidia/v100-power9-traverse-4gpu-nv3-pairs-numa-node-8-leading-spaces-topo-m.txt",
        ),
        (
            "2x RTX 3090, NV4 bridge",
            "nvidia/rtx3090-2gpu-nvlink-bridge-nv4-5900x-topo-m.txt",
        ),
    ];
    let mut machines: Vec<Machine> = nvml
        .iter()
        .map(|(name, rel)| {
            let path = fixture(rel);
            let spec = spec_of(&Source::Fixture(path.clone()));
            let recording = Recording::load(&path).expect("a recording");
            machine(name, spec, nvml_scores(&recording))
        })
        .collect();
    machines.extend(topo.iter().map(|(name, rel)| {
        let spec = spec_of(&Source::NvidiaSmi {
            topo: fixture(rel),
            nvlink_status: None,
            query: None,
        });
        let scores = matrix_scores(&spec);
        machine(name, spec, scores)
    }));
    machines
}

/// The normalized topology; sources without UUIDs get `GPU-bench-<index>`.
fn spec_of(source: &Source) -> GpuTopologySpec {
    let (facts, node) = gather(source).expect("fixture reads");
    let mut spec = build(node.as_deref().unwrap_or("node"), facts)
        .expect("fixture normalizes")
        .spec;
    for g in &mut spec.gpus {
        g.uuid
            .get_or_insert_with(|| format!("GPU-bench-{}", g.index));
    }
    spec
}

fn machine(name: &'static str, spec: GpuTopologySpec, nvidia: PairScores) -> Machine {
    Machine {
        name,
        gpus: spec.gpus.len() as u32,
        inventory: Inventory::from_spec(&spec).expect("an inventory"),
        shape: NodeShape::from_spec(&spec).expect("a shape"),
        nvidia,
    }
}

fn pcie_score(level: TopologyLevel) -> u32 {
    match level {
        TopologyLevel::Internal => 60,
        TopologyLevel::Single => 50,
        TopologyLevel::Multiple => 40,
        TopologyLevel::HostBridge => 30,
        TopologyLevel::Node => 20,
        TopologyLevel::System => 10,
    }
}

/// From NVML's answers: the common ancestor of each pair, plus 100 per
/// active NVLink whose remote PCI address is the other GPU's.
fn nvml_scores(recording: &Recording) -> PairScores {
    let nvml = recording.nvml.as_ref().expect("NVML answers");
    let n = nvml.devices.len();
    let mut score = vec![vec![0; n]; n];
    for pair in &nvml.pairs {
        let s = pair.common_ancestor.map_or(0, pcie_score);
        score[pair.a as usize][pair.b as usize] += s;
        score[pair.b as usize][pair.a as usize] += s;
    }
    for a in &nvml.devices {
        for b in &nvml.devices {
            let Some(bus) = b.pci_bus_id.as_deref() else {
                continue;
            };
            let direct = a
                .nvlinks
                .iter()
                .flatten()
                .filter(|l| l.active && l.remote_pci_bus_id.as_deref() == Some(bus))
                .count() as u32;
            score[a.index as usize][b.index as usize] += 100 * direct;
        }
    }
    PairScores { score }
}

/// From a `topo -m` matrix: the PCIe class of each pair, or 100 per NVLink
/// of an `NV#` pair (bridged pairs are direct links). Such a pair's PCIe
/// path is not in the matrix; it counts 0, which only moves ties between
/// sets with the same NVLinks.
fn matrix_scores(spec: &GpuTopologySpec) -> PairScores {
    let n = spec.gpus.len();
    let mut score = vec![vec![0; n]; n];
    for link in &spec.links {
        let s = match link.link_type {
            LinkType::Nv => 100 * link.nvlinks,
            LinkType::Pix => 50,
            LinkType::Pxb => 40,
            LinkType::Phb => 30,
            LinkType::Node => 20,
            LinkType::Sys => 10,
            LinkType::Xgmi => 0,
        };
        score[link.a as usize][link.b as usize] = s;
        score[link.b as usize][link.a as usize] = s;
    }
    PairScores { score }
}
