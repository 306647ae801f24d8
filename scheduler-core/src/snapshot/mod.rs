//! The cluster as one scheduling decision sees it: nodes (labels, taints,
//! allocatable, GPU topology, network domains), the pods bound to them (with
//! the GPUs each holds whole or shares), and PodGroups.
//!
//! # Built once, read by every plugin
//!
//! [`SnapshotBuilder`] takes plain inputs ([`NodeInput`], [`BoundPodInput`],
//! [`PodGroup`]); [`from_k8s`] makes those from `k8s-openapi` objects. The
//! snapshot is compact so that 5,000 nodes stay cheap to hold and to scan:
//!
//! * nodes of one topology share one [`NodeShape`] (via [`crate::gpuset::ShapeCatalog`]), so
//!   the GPU-set tables and the cache of answers are paid for once per model;
//! * label keys and values, resource names and taint sets are interned: a node
//!   holds integers, and a pod's selector is compiled once per decision;
//! * per node, the GPUs are bit masks: listed, held whole, in shared use.
//!
//! # What other algorithms read
//!
//! Gang placement and preemption work on [`NodeRef`]: the node's shape, its
//! free whole-GPU mask ([`NodeRef::free_gpus`]), its domain path outermost
//! first ([`NodeRef::domain_path`]), and its bound pods with their GPU masks
//! ([`NodeRef::pods`], [`BoundPod::gpus`]). [`Snapshot::add_pod`] and
//! [`Snapshot::remove_pod`] let them try a placement or an eviction on a copy.
//!
//! # Nodes without a `GpuTopology`
//!
//! A node that reports `nvidia.com/gpu` but has no `GpuTopology` object
//! (the agent not yet running, or not deployed there) is still usable for
//! whole-GPU pods that ask nothing of the wiring: it is treated as GPUs
//! `0..n` (n its allocatable `nvidia.com/gpu`, at most 32) whose links are
//! unknown. The lowest free indices are assigned, the bottleneck is reported
//! as unknown, and its GPU-set score is 0, so any node with a known topology
//! is preferred. A pod asking for `min-nvlink-level`, `gpu-memory` or a
//! `single-numa-node` node is refused there: nothing can vouch for it. A
//! `GpuTopology` that cannot be read (see [`ShapeError`]) refuses GPU pods and
//! says why, rather than silently guessing.
//!
//! # GPUs held by pods
//!
//! Which GPUs a bound pod holds comes from, in order: the node's
//! `GpuTopology` status allocations (the kubelet's pod-resources view), the
//! pod's `gputopo.dev/assigned-gpus` annotation (written by this scheduler),
//! or, for a pod bound by another scheduler and not yet reported, nothing:
//! its count is then charged to the highest-numbered free GPUs, so the count
//! is never lost, and a warning says so.
//!
//! # Where things are
//!
//! Types: [`Snapshot`] and its queries here; `node.rs` (a node as stored),
//! `hot.rs` (what the filter scans per node), `node_ref.rs` (a node as read),
//! `bound_pod.rs`, `domain.rs`, `gpu_uuids.rs`, `signals.rs`, `warning.rs`.
//! Indexes the pod rules read: `label_index.rs` (bound pods by label) and
//! `label_columns.rs` (nodes' hostname, zone and region as columns).
//! Inputs: `input.rs`, made from Kubernetes objects by `from_k8s.rs`; `amounts.rs`
//! (resource amounts as stored and compared).
//! Changes: `build.rs` and `build_node.rs` (building), `pod_changes.rs`
//! (one pod at a time), `node_pods.rs` (one node's pods again), `images.rs`
//! (the images nodes hold), `live.rs` (kept up to date from watch events).

mod amounts;
mod bound_pod;
mod build;
mod build_node;
mod chunked;
mod describe;
mod domain;
pub mod from_k8s;
mod gpu_uuids;
mod hold;
pub use hold::{Held, HoldError};
mod hot;
mod images;
mod input;
pub(crate) mod intern;
mod label_columns;
mod label_index;
mod live;
mod node;
mod node_pods;
mod node_ref;
mod plausible;
mod pod_changes;
mod signals;
mod storage;
mod topology_spec;
mod warning;
mod workload_selectors;
pub use plausible::implausible_topology;
pub use storage::{
    AccessMode, CapacityEntry, Claim, NO_PROVISIONER, SELECTED_NODE, Storage, StorageCapacity,
    StorageClass, StorageError, Volume, VolumePlan, storage,
};
pub use workload_selectors::WorkloadSelectors;

pub use amounts::share_amounts;
pub use bound_pod::{BoundPod, SharedHold, SharedUse};
pub use build::SnapshotBuilder;
pub use domain::{Domain, DomainId};
pub use input::{BoundPodInput, GpuHolding, NodeImage, NodeInput};
pub use live::{LiveCounts, LiveSnapshot};
pub use node_ref::{NodeRef, NodeTopology};
pub use topology_spec::TopologySpec;
pub use warning::{SnapshotError, SnapshotWarning};

use crate::config::NetworkTiers;
use crate::gpuset::{NodeShape, ShapeError};
use crate::selector::Taint;
use chunked::Chunked;
use intern::{Interner, Sym};
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) use amounts::resolve_amounts;
pub(crate) use gpu_uuids::GpuUuids;
pub(crate) use hot::Hot;
pub(crate) use node::{Amounts, GpuKind, Node, NodeGpus, ShapeEntry, bit_indices};
pub(crate) use signals::Signals;
pub(crate) use warning::WarningParts;

/// A node's position in [`Snapshot::nodes`]: nodes are sorted by name, so
/// comparing ids compares names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// A bound pod's id; stable while the snapshot lives (removal leaves a hole).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodId(pub u32);

/// A scheduler-plugins `PodGroup` (`scheduling.x-k8s.io/v1alpha1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodGroup {
    pub namespace: String,
    pub name: String,
    /// `spec.minMember`: the gang's size.
    pub min_member: u32,
    /// `spec.scheduleTimeoutSeconds`.
    pub schedule_timeout_seconds: Option<u32>,
}

/// The cluster for one decision; see the module docs.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Chunks shared between copies and copied on write (`chunked.rs`),
    /// as are `pods` and `pod_index`: a cycle's copy of the kept snapshot
    /// costs what it changes, not the cluster's size.
    pub(crate) nodes: Chunked<Node>,
    /// Per node, in the same order: what the hot path reads.
    pub(crate) hot: Vec<Hot>,
    /// Per node, its free whole GPUs counted: 5 KB for 5,000 nodes, scanned
    /// first so that a big request skips nodes that cannot hold it without
    /// touching anything else.
    pub(crate) free_counts: Vec<u8>,
    pub(crate) pods: Chunked<Option<BoundPod>>,
    pub(crate) pod_index: imbl::HashMap<(String, String), PodId>,
    /// Bound pods with inter-pod affinity or anti-affinity terms: the only
    /// ones whose own rules can judge an incoming pod (symmetry).
    pub(crate) affinity_pods: imbl::OrdSet<PodId>,
    /// Per topology key pods' rules name most (hostname, zone, region), each
    /// node's value in node order: the per-node lookups of inter-pod
    /// affinity and spread read a dense column instead of each node's
    /// record (a cache miss per node). Node labels change only by a whole
    /// build, which makes the columns again.
    pub(crate) label_columns: Arc<Vec<label_columns::Column>>,
    /// Bound pods by label, for selectors' candidates (`label_index.rs`).
    pub(crate) pods_by_label: label_index::LabelIndex,
    /// Namespaces' labels, for `namespaceSelector`s.
    pub(crate) namespaces: Arc<BTreeMap<String, BTreeMap<String, String>>>,
    /// Services' and controllers' selectors, for spread's defaults.
    pub(crate) workload_selectors: Arc<WorkloadSelectors>,
    /// Claims, volumes and classes, for the volume plugins.
    pub(crate) storage: Arc<Storage>,
    /// Per image name, on how many nodes (`images.rs`).
    pub(crate) image_counts: images::ImageCounts,
    pub(crate) shapes: Vec<ShapeEntry>,
    pub(crate) shape_errors: Vec<ShapeError>,
    pub(crate) strings: Interner,
    pub(crate) taint_sets: Vec<Box<[Taint]>>,
    pub(crate) domains: Vec<Domain>,
    pub(crate) tiers: NetworkTiers,
    pub(crate) pod_groups: Vec<PodGroup>,
    pub(crate) warnings: Vec<SnapshotWarning>,
    /// Where `warnings` came from, so that one node's pods can be inserted
    /// again ([`LiveSnapshot`]) without repeating or losing theirs.
    pub(crate) warning_parts: WarningParts,
    /// Ids of pods taken off by `clear_node_pods` (a node's pods about to
    /// be inserted again), which the next inserts reuse. Pods removed one
    /// by one (a cycle's what-ifs) leave holes instead: a cycle may still
    /// hold their ids.
    pub(crate) reusable_pod_ids: Vec<PodId>,
    pub(crate) signals: Signals,
}

impl Snapshot {
    /// How many pods are bound (and assumed, and held for).
    pub fn pod_count(&self) -> usize {
        self.pod_index.len()
    }

    /// Ids left unused by pods taken off and not yet reused: a removal
    /// leaves a hole so that ids stay stable while the snapshot lives.
    pub fn pod_holes(&self) -> usize {
        self.pods.len() - self.pod_index.len().min(self.pods.len())
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node, sorted by name.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = NodeRef<'_>> + '_ {
        (0..self.nodes.len()).map(|i| NodeRef {
            snapshot: self,
            id: NodeId(i as u32),
        })
    }

    /// One node. Panics on an id that is not from this snapshot.
    pub fn node(&self, id: NodeId) -> NodeRef<'_> {
        assert!((id.0 as usize) < self.nodes.len(), "no node {id:?}");
        NodeRef { snapshot: self, id }
    }

    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .binary_search_by(|n| (*n.name).cmp(name))
            .ok()
            .map(|i| NodeId(i as u32))
    }

    /// A bound pod, if it is still there.
    pub fn pod(&self, id: PodId) -> Option<&BoundPod> {
        self.pods.get(id.0 as usize).and_then(Option::as_ref)
    }

    /// The pods on `node` charged GPUs by count (`namespace/name`, sorted):
    /// while there are any, which of its GPUs are free is not known.
    pub fn stand_in_holders(&self, node: NodeId) -> Vec<String> {
        let mut holders: Vec<String> = self.nodes[node.0 as usize]
            .pods
            .iter()
            .filter_map(|&p| self.pod(p))
            .filter(|p| p.stand_in != 0)
            .map(BoundPod::key)
            .collect();
        holders.sort();
        holders
    }

    pub fn pod_id(&self, namespace: &str, name: &str) -> Option<PodId> {
        self.pod_index
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }

    /// Every bound pod with its id.
    pub fn pods(&self) -> impl Iterator<Item = (PodId, &BoundPod)> + '_ {
        self.pods
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (PodId(i as u32), p)))
    }

    /// The bound pods with inter-pod affinity or anti-affinity terms.
    pub fn affinity_pods(&self) -> impl Iterator<Item = (PodId, &BoundPod)> + '_ {
        self.affinity_pods
            .iter()
            .filter_map(|&id| self.pod(id).map(|p| (id, p)))
    }

    /// A namespace's labels; `None` for a namespace the snapshot was not given.
    pub fn namespace_labels(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.namespaces.get(name)
    }

    /// The Services' and controllers' selectors.
    pub fn workload_selectors(&self) -> &WorkloadSelectors {
        &self.workload_selectors
    }

    /// Claims, volumes and classes.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    pub fn pod_groups(&self) -> &[PodGroup] {
        &self.pod_groups
    }

    pub fn pod_group(&self, namespace: &str, name: &str) -> Option<&PodGroup> {
        self.pod_groups
            .iter()
            .find(|g| g.namespace == namespace && g.name == name)
    }

    /// The tiers domains were read from.
    pub fn tiers(&self) -> &NetworkTiers {
        &self.tiers
    }

    pub fn domain(&self, id: DomainId) -> &Domain {
        &self.domains[id.index()]
    }

    /// Every domain with its id, outer tiers' domains before their children.
    pub fn domains(&self) -> impl Iterator<Item = (DomainId, &Domain)> + '_ {
        self.domains
            .iter()
            .enumerate()
            .map(|(i, d)| (DomainId::from_index(i), d))
    }

    /// The distinct GPU topologies in use.
    pub fn shapes(&self) -> impl Iterator<Item = &Arc<NodeShape>> + '_ {
        self.shapes.iter().map(|s| &s.shape)
    }

    /// Re-derives what the hot path reads for node `index` after a change.
    pub(crate) fn refresh(&mut self, index: usize) {
        let hot = Hot::of(&self.nodes[index]);
        let count = hot.free().count_ones() as u8;
        match (self.hot.get_mut(index), self.free_counts.get_mut(index)) {
            (Some(h), Some(c)) => {
                *h = hot;
                *c = count;
            }
            _ => {
                self.hot.push(hot);
                self.free_counts.push(count);
            }
        }
    }

    /// What was odd in the inputs.
    pub fn warnings(&self) -> &[SnapshotWarning] {
        &self.warnings
    }

    /// Distinct interned strings (label keys and values, resource names).
    pub fn interned_strings(&self) -> usize {
        self.strings.len()
    }

    pub(crate) fn taints_of(&self, node: &Node) -> &[Taint] {
        self.taint_sets.get(node.taints as usize).map_or(&[], |t| t)
    }

    pub(crate) fn shape_entry(&self, node: &Node) -> Option<&ShapeEntry> {
        match node.gpus.kind {
            GpuKind::Shape(i) => self.shapes.get(i as usize),
            _ => None,
        }
    }

    /// The value of label `key` on the node at `index`, as symbols.
    pub(crate) fn label_sym(&self, index: usize, key: Sym) -> Option<Sym> {
        if let Some((_, column)) = self.label_columns.iter().find(|(k, _)| *k == key) {
            return column.get(index).copied().flatten();
        }
        let labels = &self.nodes.get(index)?.labels;
        labels
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| labels[i].1)
    }

    pub(crate) fn label_of(&self, node: &Node, key: &str) -> Option<&str> {
        let key = self.strings.get(key)?;
        node.labels
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| self.strings.resolve(node.labels[i].1))
    }
}
