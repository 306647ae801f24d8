//! The cluster as the simulation sees it: nodes, GPU models and what is in
//! use at the start (`load.rs` reads it from a file).

use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::snapshot::Snapshot;
use std::collections::BTreeMap;

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
