//! The cluster as the simulation sees it: nodes, GPU models, what is in use at
//! the start, and [`load_cluster`] for an openb node CSV or a cluster YAML.

use super::{SimError, input, policy};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::snapshot::Snapshot;
use std::collections::BTreeMap;
use std::path::Path;

/// GPU models by name, as bit positions in a pod's allowed-model mask.
#[derive(Clone, Debug, Default)]
pub struct Models {
    names: Vec<String>,
    ids: BTreeMap<String, u8>,
}

impl Models {
    /// The model's id, assigned on first sight; `None` past 64 models.
    pub fn id(&mut self, name: &str) -> Option<u8> {
        if let Some(&id) = self.ids.get(name) {
            return Some(id);
        }
        if self.names.len() >= 64 {
            return None;
        }
        let id = self.names.len() as u8;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        Some(id)
    }

    /// The names in a mask, in id order.
    /// The bit mask of these model names (unknown names set no bit).
    pub fn mask(&self, names: &[String]) -> u64 {
        names
            .iter()
            .filter_map(|n| self.ids.get(n))
            .fold(0, |m, &id| m | (1u64 << id))
    }

    pub fn names(&self, mask: u64) -> Vec<String> {
        (0..self.names.len())
            .filter(|&i| mask & (1u64 << i) != 0)
            .map(|i| self.names[i].clone())
            .collect()
    }
}

/// A node as the simulation sees it.
#[derive(Clone, Debug)]
pub struct SimNode {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpus: u32,
    pub model: Option<u8>,
    pub model_name: String,
}

/// The cluster to simulate on.
pub struct SimCluster {
    pub nodes: Vec<SimNode>,
    pub models: Models,
    /// For the `gputopo` policy: a snapshot of the same nodes (built from the
    /// CSV with synthesised topologies, or the cluster YAML's own).
    pub snapshot: Snapshot,
    pub config: SchedulerConfig,
    /// Resources already in use (cluster YAML with bound pods), per node.
    pub initial: Vec<NodeUse>,
    /// Nodes read from a trace's node list: each run names them with a
    /// seeded random prefix, as the FGD simulator does (see [`node_order`](super::rng::node_order)).
    pub trace: bool,
}

/// What is in use on a node at the start.
#[derive(Clone, Debug, Default)]
pub struct NodeUse {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpu_milli: Vec<u32>,
}

/// Loads the cluster: an openb node CSV (topologies synthesised) or a cluster YAML.
pub fn load_cluster(path: &Path) -> Result<SimCluster, SimError> {
    if input::is_csv(path) {
        let mut models = Models::default();
        let nodes = input::read_node_csv(path, &mut models)?;
        let config = SchedulerConfig::default();
        let snapshot = policy::snapshot_for(&nodes, &config)?;
        let initial = vec![NodeUse::default(); nodes.len()];
        return Ok(SimCluster {
            nodes,
            models,
            snapshot,
            config,
            initial,
            trace: true,
        });
    }
    let loaded = crate::cluster::load(path, &crate::cluster::Overrides::default())
        .map_err(|e| SimError::Cluster(e.to_string()))?;
    let mut models = Models::default();
    let mut nodes = Vec::new();
    let mut initial = Vec::new();
    let mib = 1024 * 1024;
    for node in loaded.snapshot.nodes() {
        let alloc = node.allocatable();
        let used = node.requested();
        let present = node.gpus();
        let gpus = 32 - present.leading_zeros();
        let model_name = node
            .label("nvidia.com/gpu.product")
            .unwrap_or(if gpus > 0 { "unknown" } else { "" })
            .to_string();
        let model = if model_name.is_empty() {
            None
        } else {
            Some(models.id(&model_name).ok_or_else(|| {
                SimError::Cluster(format!("more than 64 GPU models ({model_name})"))
            })?)
        };
        let held = node.held_gpus();
        let gpu_milli = (0..gpus)
            .map(|g| {
                if held & (1 << g) != 0 || present & (1 << g) == 0 {
                    1000
                } else {
                    node.shared_use(g).milli.min(1000)
                }
            })
            .collect();
        initial.push(NodeUse {
            cpu_milli: used.cpu_milli.max(0) as u64,
            memory_mib: (used.memory.max(0) as u64).div_ceil(mib),
            gpu_milli,
        });
        nodes.push(SimNode {
            name: node.name().to_string(),
            cpu_milli: alloc.cpu_milli.max(0) as u64,
            memory_mib: alloc.memory.max(0) as u64 / mib,
            gpus,
            model,
            model_name,
        });
    }
    Ok(SimCluster {
        nodes,
        models,
        snapshot: loaded.snapshot,
        config: loaded.config,
        initial,
        trace: false,
    })
}
