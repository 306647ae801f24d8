//! What discovery backends saw, before normalization.
//!
//! Every backend (NVML, `nvidia-smi` text, recorded fixture) fills a
//! [`NodeFacts`]; [`crate::normalize`] turns it into `GpuTopology.spec`. A field a
//! source cannot know stays `None`: the normalizer never invents it.

use gputopo_api::{GpuFabric, GpuVendor, LinkBandwidth, LinkClass, LinkType, TopologySource};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeFacts {
    pub source: TopologySource,
    /// Who made the GPUs, where the source says (every backend does).
    #[serde(default)]
    pub vendor: Option<GpuVendor>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    /// GPUs in index order; indices are those the node enumerates (0..n once cgroups hide some).
    pub gpus: Vec<GpuFacts>,
    /// The path between GPU pairs as the source reported it. Normalization checks
    /// that every unordered pair is present exactly once and agrees in both directions.
    pub gpu_pairs: Vec<PairFact>,
    pub nics: Vec<NicFacts>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuFacts {
    pub index: u32,
    pub uuid: Option<String>,
    pub product: Option<String>,
    pub memory_mib: Option<u64>,
    /// Canonical form `00000000:17:00.0` (domain:bus:device.function, lower-case hex).
    pub pci_bus_id: Option<String>,
    pub numa_node: Option<i32>,
    /// A cpulist, `0-31,64-95`.
    pub cpu_affinity: Option<String>,
    pub mig_enabled: Option<bool>,
    pub fabric: Option<GpuFabric>,
    /// Per-NVLink state where the source reports it (NVML, `nvidia-smi nvlink -s`);
    /// `None` when the source says nothing about individual links.
    pub nvlinks: Option<Vec<NvLinkFact>>,
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvLinkFact {
    pub link: u32,
    pub active: bool,
    /// Line rate in GB/s where reported (`nvidia-smi nvlink -s`: 25.781, 26.562, …).
    pub speed_gbps: Option<f64>,
    pub remote: Option<RemoteEnd>,
}

/// What is at the far end of an NVLink (NVML's remote PCI info and device type).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum RemoteEnd {
    Gpu {
        pci_bus_id: String,
    },
    Nvswitch {
        pci_bus_id: Option<String>,
    },
    /// An IBM NPU or other CPU-side endpoint (POWER9 NVLink to the CPU).
    Cpu {
        pci_bus_id: Option<String>,
    },
}

/// The path between GPUs `a` and `b` (`a != b`; order as the source gave it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairFact {
    pub a: u32,
    pub b: u32,
    pub link_type: LinkType,
    /// Bonded NVLinks, 0 unless `link_type` is `NV`.
    pub nvlinks: u32,
    /// AMD: hops between the two GPUs (1 is a direct XGMI link).
    #[serde(default)]
    pub hops: Option<u32>,
    /// AMD: the driver's relative link weight.
    #[serde(default)]
    pub weight: Option<u64>,
    /// AMD SMI: the theoretical bandwidth range of a direct XGMI link.
    #[serde(default)]
    pub bandwidth: Option<LinkBandwidth>,
}

impl PairFact {
    pub fn new(a: u32, b: u32, class: LinkClass) -> PairFact {
        PairFact {
            a,
            b,
            link_type: class.link_type(),
            nvlinks: class.nvlinks(),
            hops: match class {
                LinkClass::Xgmi => Some(1),
                _ => None,
            },
            weight: None,
            bandwidth: None,
        }
    }

    pub fn class(&self) -> LinkClass {
        LinkClass::of(self.link_type, self.nvlinks, self.hops)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicFacts {
    /// RDMA device name (`mlx5_0`, `mlx5_bond_0`, `rocep49s0`), or the topo
    /// matrix label (`NIC3`) when no legend maps it.
    pub name: String,
    pub numa_node: Option<i32>,
    /// How the NIC reaches each GPU.
    pub gpu_links: Vec<(u32, LinkType)>,
}
