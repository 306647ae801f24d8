//! [`NodeRef`]: a node of a snapshot as the other algorithms read it.

use super::{BoundPod, DomainId, GpuKind, Node, NodeId, PodId, SharedUse, Snapshot};
use crate::config::TopologyManagerPolicy;
use crate::gpuset::{NodeShape, ShapeError};
use crate::resources::Resources;
use crate::selector::{NodeAffinity, SelectorTerm, Taint};
use std::fmt;
use std::sync::Arc;

/// What a node knows about its GPUs' wiring.
#[derive(Clone, Copy, Debug)]
pub enum NodeTopology<'a> {
    /// The node has no GPUs.
    None,
    /// GPUs (`nvidia.com/gpu`) but no `GpuTopology`: links unknown.
    Unknown {
        gpus: u32,
    },
    /// A `GpuTopology` that could not be used, and why.
    Invalid(&'a ShapeError),
    Known(&'a Arc<NodeShape>),
}

/// A node of a snapshot, with its accessors.
#[derive(Clone, Copy)]
pub struct NodeRef<'a> {
    pub(super) snapshot: &'a Snapshot,
    pub(super) id: NodeId,
}

impl fmt::Debug for NodeRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeRef")
            .field("name", &self.name())
            .field("free_gpus", &format_args!("{:#x}", self.free_gpus()))
            .finish_non_exhaustive()
    }
}

impl<'a> NodeRef<'a> {
    fn node(&self) -> &'a Node {
        &self.snapshot.nodes[self.id.0 as usize]
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    pub fn name(&self) -> &'a str {
        &self.node().name
    }

    /// The node's labels, in no particular order.
    pub fn labels(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let strings = &self.snapshot.strings;
        self.node()
            .labels
            .iter()
            .map(move |&(k, v)| (strings.resolve(k), strings.resolve(v)))
    }

    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.snapshot.label_of(self.node(), key)
    }

    /// Whether one node selector term matches the node: every requirement
    /// holds, and a term without any matches no node.
    pub fn matches_term(&self, term: &SelectorTerm) -> bool {
        (!term.labels.is_empty() || !term.fields.is_empty())
            && term.labels.iter().all(|r| r.matches(self.label(&r.key)))
            && term.fields.iter().all(|r| r.matches(self.name()))
    }

    /// Whether required node affinity (ORed terms) admits the node.
    pub fn matches_affinity(&self, affinity: &NodeAffinity) -> bool {
        affinity.terms.iter().any(|t| self.matches_term(t))
    }

    /// What stands for the node's GPU model: its product, or for a node
    /// whose product is unknown, its wiring (GPU count, interconnect, P2P
    /// level); `None` without a `GpuTopology` or product label.
    pub fn gpu_model(&self) -> Option<&'a str> {
        self.node().model.map(|p| self.snapshot.strings.resolve(p))
    }

    pub fn taints(&self) -> &'a [Taint] {
        self.snapshot.taints_of(self.node())
    }

    pub fn unschedulable(&self) -> bool {
        self.node().unschedulable
    }

    pub fn allocatable(&self) -> Resources {
        self.node().allocatable.to_resources(&self.snapshot.strings)
    }

    /// The sum of the bound pods' requests.
    pub fn requested(&self) -> Resources {
        self.node().requested.to_resources(&self.snapshot.strings)
    }

    pub fn topology(&self) -> NodeTopology<'a> {
        let node = self.node();
        match node.gpus.kind {
            GpuKind::None => NodeTopology::None,
            GpuKind::Untopologized => NodeTopology::Unknown {
                gpus: node.gpus.present.count_ones(),
            },
            GpuKind::Invalid(i) => match self.snapshot.shape_errors.get(i as usize) {
                Some(e) => NodeTopology::Invalid(e),
                None => NodeTopology::None,
            },
            GpuKind::Shape(i) => match self.snapshot.shapes.get(i as usize) {
                Some(s) => NodeTopology::Known(&s.shape),
                None => NodeTopology::None,
            },
        }
    }

    /// The node's shape when its topology is known.
    pub fn shape(&self) -> Option<&'a Arc<NodeShape>> {
        self.snapshot.shape_entry(self.node()).map(|s| &s.shape)
    }

    /// GPUs the node lists (bit i = GPU i).
    pub fn gpus(&self) -> u32 {
        self.node().gpus.present
    }

    /// GPUs held whole by bound pods.
    pub fn held_gpus(&self) -> u32 {
        self.node().gpus.held
    }

    /// GPUs in shared use (`gpu-share` pods).
    pub fn shared_gpus(&self) -> u32 {
        self.node().gpus.shared_mask
    }

    /// Listed GPUs neither held whole nor shared: what a whole-GPU request may
    /// take (MIG-enabled GPUs included; the GPU-set choice leaves them out).
    pub fn free_gpus(&self) -> u32 {
        self.node().gpus.free()
    }

    pub fn shared_use(&self, gpu: u32) -> SharedUse {
        self.node().gpus.shared_use(gpu)
    }

    /// Per-GPU memory in MiB, when the topology gives it.
    pub fn gpu_memory_mib(&self, gpu: u32) -> Option<u64> {
        self.snapshot
            .shape_entry(self.node())
            .and_then(|s| s.memory_mib.get(gpu as usize).copied().flatten())
    }

    pub fn gpu_uuid(&self, gpu: u32) -> Option<String> {
        self.node().gpus.uuids.get(gpu)
    }

    /// The UUIDs of `gpus`, in order, when the topology names every one;
    /// empty otherwise (a partial list would misname the set).
    pub fn gpu_uuids(&self, gpus: &[u32]) -> Vec<String> {
        let uuids: Vec<String> = gpus.iter().map_while(|&g| self.gpu_uuid(g)).collect();
        if uuids.len() == gpus.len() {
            uuids
        } else {
            Vec::new()
        }
    }

    /// The node's domain at each tier, outermost first (`tiers().len()` entries).
    pub fn domain_path(&self) -> &'a [Option<DomainId>] {
        &self.node().domains[..self.snapshot.tiers.len()]
    }

    /// The names of the node's domains, outermost first (`tiers().len()`
    /// entries): `None` where the node lacks that tier's label.
    pub fn domain_names(&self) -> impl Iterator<Item = Option<&'a str>> + 'a {
        let snapshot = self.snapshot;
        self.domain_path()
            .iter()
            .map(move |d| d.map(|id| snapshot.domain(id).name()))
    }

    /// The innermost tier's domain the node names.
    pub fn innermost_domain(&self) -> Option<DomainId> {
        self.node().innermost_domain()
    }

    /// Bound pods, in the order they were added.
    pub fn pods(&self) -> impl Iterator<Item = (PodId, &'a BoundPod)> + 'a {
        let snapshot = self.snapshot;
        self.node()
            .pods
            .iter()
            .filter_map(move |&id| snapshot.pod(id).map(|p| (id, p)))
    }

    /// The node's own policy label, or the configured default.
    pub fn topology_manager_policy(&self, default: TopologyManagerPolicy) -> TopologyManagerPolicy {
        self.node().policy.unwrap_or(default)
    }

    pub fn cost_per_hour(&self) -> Option<f32> {
        self.node().cost_per_hour
    }

    pub fn is_spot(&self) -> bool {
        self.node().spot
    }

    /// Bound pods by workload annotation.
    pub fn training_pods(&self) -> u32 {
        u32::from(self.node().training_pods)
    }

    pub fn inference_pods(&self) -> u32 {
        u32::from(self.node().inference_pods)
    }
}
