//! The NVL72 fabric: racks (GPU cliques) of 4-GPU compute trays, racks under
//! leaves, leaves under spines; which GPUs are free, and the views every
//! policy reads.

use gputopo_api::{
    GpuInfo, GpuLink, GpuTopologySpec, Interconnect, LinkClass, TopologySource, TopologySummary,
};
use gputopo_scheduler_core::gpuset::NodeShape;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use std::sync::Arc;

/// The tiers, outermost first, as the policies number them.
pub const SPINE: usize = 0;
pub const LEAF: usize = 1;
pub const RACK: usize = 2;

/// How big the fabric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FabricSize {
    pub racks: usize,
    pub nodes_per_rack: usize,
    pub racks_per_leaf: usize,
    pub leaves_per_spine: usize,
    pub gpus_per_node: u32,
}

impl FabricSize {
    /// GB200/GB300 NVL72: 18 compute trays of 4 GPUs per rack; 4 racks per
    /// leaf, 3 leaves per spine.
    pub fn nvl72(racks: usize) -> FabricSize {
        FabricSize {
            racks,
            nodes_per_rack: 18,
            racks_per_leaf: 4,
            leaves_per_spine: 3,
            gpus_per_node: 4,
        }
    }
}

/// The fixed part of the cluster: who is under whom, and each node's
/// host name order.
#[derive(Clone, Debug)]
pub struct Fabric {
    pub size: FabricSize,
    pub leaves: usize,
    pub spines: usize,
    /// Per node, its rack; per rack its leaf; per leaf its spine.
    pub node_rack: Vec<usize>,
    pub rack_leaf: Vec<usize>,
    pub leaf_spine: Vec<usize>,
    /// Per node, its place in host name order (a seeded shuffle: host
    /// names say nothing about racks).
    pub host_rank: Vec<u32>,
    pub shape: Arc<NodeShape>,
}

impl Fabric {
    pub fn new(size: FabricSize, seed: u64) -> Fabric {
        let nodes = size.racks * size.nodes_per_rack;
        let leaves = size.racks.div_ceil(size.racks_per_leaf);
        let spines = leaves.div_ceil(size.leaves_per_spine);
        let node_rack = (0..nodes).map(|n| n / size.nodes_per_rack).collect();
        let rack_leaf = (0..size.racks).map(|r| r / size.racks_per_leaf).collect();
        let leaf_spine = (0..leaves).map(|l| l / size.leaves_per_spine).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005E_ED0F_4057_0A3E);
        let mut order: Vec<u32> = (0..nodes as u32).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, crate::simulate::below(&mut rng, i + 1));
        }
        let mut host_rank = vec![0u32; nodes];
        for (rank, &node) in order.iter().enumerate() {
            host_rank[node as usize] = rank as u32;
        }
        Fabric {
            size,
            leaves,
            spines,
            node_rack,
            rack_leaf,
            leaf_spine,
            host_rank,
            shape: Arc::new(
                NodeShape::from_spec(&tray(size.gpus_per_node)).expect("a tray's shape is valid"),
            ),
        }
    }

    pub fn nodes(&self) -> usize {
        self.node_rack.len()
    }

    pub fn gpus(&self) -> u32 {
        self.nodes() as u32 * self.size.gpus_per_node
    }

    /// All GPUs of a node.
    pub fn full(&self) -> u32 {
        (1u32 << self.size.gpus_per_node) - 1
    }

    pub fn leaf_of(&self, node: usize) -> usize {
        self.rack_leaf[self.node_rack[node]]
    }

    pub fn spine_of(&self, node: usize) -> usize {
        self.leaf_spine[self.leaf_of(node)]
    }

    /// The node's domain at `tier`.
    pub fn domain(&self, node: usize, tier: usize) -> usize {
        match tier {
            SPINE => self.spine_of(node),
            LEAF => self.leaf_of(node),
            _ => self.node_rack[node],
        }
    }

    /// Domains at `tier`.
    pub fn domains(&self, tier: usize) -> usize {
        match tier {
            SPINE => self.spines,
            LEAF => self.leaves,
            _ => self.size.racks,
        }
    }

    /// The nodes of rack `rack`.
    pub fn rack_nodes(&self, rack: usize) -> std::ops::Range<usize> {
        let n = self.size.nodes_per_rack;
        rack * n..(rack + 1) * n
    }

    /// Label values, outermost first, zero-padded so that text order is
    /// number order: what Kueue compares as `levelValues`.
    pub fn path(&self, node: usize) -> [u32; 4] {
        [
            self.spine_of(node) as u32,
            self.leaf_of(node) as u32,
            self.node_rack[node] as u32,
            self.host_rank[node],
        ]
    }

    /// Per domain of `tier`, the sum of `per_node` over its nodes.
    pub fn sum_by(&self, tier: usize, per_node: impl Fn(usize) -> u32) -> Vec<u32> {
        let mut out = vec![0u32; self.domains(tier)];
        for node in 0..self.nodes() {
            out[self.domain(node, tier)] += per_node(node);
        }
        out
    }
}

/// A GB200/GB300 compute tray's `GpuTopology` spec: `gpus` GPUs, NV18
/// between all (NVLink 5 through the rack's NVLink switch trays), one NUMA
/// node.
pub fn tray(gpus: u32) -> GpuTopologySpec {
    let gpu_list = (0..gpus)
        .map(|i| GpuInfo {
            index: i,
            uuid: None,
            product: Some("NVIDIA GB200".into()),
            memory_mib: Some(189_471),
            pci_bus_id: None,
            numa_node: Some(0),
            cpu_affinity: None,
            mig_enabled: Some(false),
            fabric: None,
        })
        .collect();
    let mut links = Vec::new();
    for a in 0..gpus {
        for b in a + 1..gpus {
            links.push(GpuLink {
                a,
                b,
                link_type: LinkClass::Nv(18).link_type(),
                nvlinks: 18,
                hops: None,
                weight: None,
                bandwidth: None,
            });
        }
    }
    GpuTopologySpec {
        node_name: "tray".into(),
        source: TopologySource::Fixture,
        vendor: None,
        driver_version: None,
        cuda_version: None,
        gpus: gpu_list,
        links,
        nics: vec![],
        islands: vec![],
        summary: TopologySummary {
            gpu_count: gpus,
            product: None,
            p2p_level: None,
            p2p_bottleneck: None,
            all_to_all_nvlink: true,
            largest_island: gpus,
            numa_nodes: None,
            interconnect: Interconnect::Nvswitch,
        },
    }
}

/// Lowest `k` set bits of `free`.
pub fn lowest(free: u32, k: u32) -> u32 {
    let mut out = 0;
    let mut left = free;
    for _ in 0..k {
        if left == 0 {
            break;
        }
        let bit = left & left.wrapping_neg();
        out |= bit;
        left &= !bit;
    }
    out
}
