//! Test topologies: a full link matrix and per-GPU facts, read from literal
//! `nvidia-smi topo -m` rows or built from a rule, and the mask helpers.

use gputopo_api::{
    Collective, GpuInfo, GpuLink, GpuTopologySpec, Interconnect, LinkClass, TopologySource,
    TopologySummary,
};
use gputopo_scheduler_core::gpuset::{GpuSetChoice, NodeShape, SetRequest};

/// Per-GPU facts of a test topology.
#[derive(Clone, Debug)]
pub(crate) struct Facts {
    pub(crate) numa: Option<i32>,
    pub(crate) memory_mib: Option<u64>,
    pub(crate) mig: bool,
}

impl Facts {
    pub(crate) fn numa(numa: i32) -> Facts {
        Facts {
            numa: Some(numa),
            memory_mib: Some(81_920),
            mig: false,
        }
    }
}

/// A node as the oracle sees it: a full link matrix and per-GPU facts.
#[derive(Clone, Debug)]
pub(crate) struct Topo {
    pub(crate) link: Vec<Vec<LinkClass>>,
    pub(crate) facts: Vec<Facts>,
}

impl Topo {
    pub(crate) fn n(&self) -> usize {
        self.facts.len()
    }

    pub(crate) fn spec(&self) -> GpuTopologySpec {
        let n = self.n();
        let gpus = self
            .facts
            .iter()
            .enumerate()
            .map(|(i, f)| GpuInfo {
                index: i as u32,
                uuid: None,
                product: Some("test".into()),
                memory_mib: f.memory_mib,
                pci_bus_id: None,
                numa_node: f.numa,
                cpu_affinity: None,
                mig_enabled: Some(f.mig),
                fabric: None,
            })
            .collect();
        let mut links = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                let c = self.link[a][b];
                links.push(GpuLink {
                    a: a as u32,
                    b: b as u32,
                    link_type: c.link_type(),
                    nvlinks: c.nvlinks(),
                    // XGMI's class is its hop count: direct (1) or routed (2+).
                    hops: match c {
                        LinkClass::Xgmi => Some(1),
                        LinkClass::XgmiRouted => Some(2),
                        _ => None,
                    },
                    weight: None,
                    bandwidth: None,
                });
            }
        }
        GpuTopologySpec {
            node_name: "test-node".into(),
            source: TopologySource::Fixture,
            vendor: None,
            driver_version: None,
            cuda_version: None,
            gpus,
            links,
            nics: vec![],
            islands: vec![],
            summary: TopologySummary {
                gpu_count: n as u32,
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

    pub(crate) fn shape(&self) -> NodeShape {
        NodeShape::from_spec(&self.spec()).expect("test topologies are well formed")
    }
}

/// Reads the GPU block of an `nvidia-smi topo -m` matrix written as literal rows
/// (`X` on the diagonal), with one NUMA node per GPU.
pub(crate) fn topo_from_rows(rows: &[&str], numa: &[Option<i32>]) -> Topo {
    let link: Vec<Vec<LinkClass>> = rows
        .iter()
        .map(|row| {
            row.split_whitespace()
                .map(|cell| match cell {
                    "X" => LinkClass::Sys, // never read: the diagonal
                    other => other.parse().expect("a link class"),
                })
                .collect()
        })
        .collect();
    let n = link.len();
    for (i, row) in link.iter().enumerate() {
        assert_eq!(row.len(), n, "row {i} has {} cells", row.len());
        for j in 0..n {
            assert_eq!(row[j], link[j][i], "matrix not symmetric at {i},{j}");
        }
    }
    let facts = numa
        .iter()
        .map(|&numa| Facts {
            numa,
            memory_mib: Some(32_768),
            mig: false,
        })
        .collect();
    Topo { link, facts }
}

/// A symmetric link matrix of `n` GPUs whose pair `a < b` is `class(a, b)`.
pub(crate) fn symmetric(
    n: usize,
    mut class: impl FnMut(usize, usize) -> LinkClass,
) -> Vec<Vec<LinkClass>> {
    let upper: Vec<Vec<LinkClass>> = (0..n)
        .map(|a| {
            (0..n)
                .map(|b| if a < b { class(a, b) } else { LinkClass::Sys })
                .collect()
        })
        .collect();
    (0..n)
        .map(|a| (0..n).map(|b| upper[a.min(b)][a.max(b)]).collect())
        .collect()
}

pub(crate) fn mask(gpus: &[u32]) -> u32 {
    gpus.iter().fold(0, |m, &g| m | (1 << g))
}

pub(crate) fn all(n: usize) -> u32 {
    if n >= 32 { u32::MAX } else { (1u32 << n) - 1 }
}

/// The exact choice of `k` GPUs, which the caller knows fits.
pub(crate) fn choose(topo: &Topo, free: u32, k: u32, collective: Collective) -> GpuSetChoice {
    topo.shape()
        .choose(free, &SetRequest::new(k, collective))
        .unwrap_or_else(|e| panic!("{k} GPUs should fit: {e}"))
}
