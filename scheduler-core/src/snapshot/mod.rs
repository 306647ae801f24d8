//! The cluster as one scheduling decision sees it: nodes (labels, taints,
//! allocatable, GPU topology, network domains), the pods bound to them (with
//! the GPUs each holds whole or shares), and PodGroups.
//!
//! # Built once, read by every plugin
//!
//! [`SnapshotBuilder`] takes plain inputs ([`NodeInput`], [`BoundPodInput`],
//! [`PodGroup`]); [`kube`] makes those from `k8s-openapi` objects. The
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

mod build;
mod chunked;
mod describe;
mod hold;
pub(crate) mod intern;
pub mod kube;
mod live;
mod node_pods;
mod plausible;
mod topology_spec;
pub use plausible::implausible_topology;

pub use build::{BoundPodInput, GpuHolding, NodeInput, SnapshotBuilder, share_amounts};
pub use live::{LiveCounts, LiveSnapshot};
pub use topology_spec::TopologySpec;

use crate::config::{MAX_TIERS, NetworkTiers, TopologyManagerPolicy};
use crate::gpuset::{NodeShape, ShapeError};
use crate::resources::Resources;
use crate::selector::Taint;
use chunked::Chunked;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_api::{GpuRequest, RequestError, WorkloadKind};
use intern::{Interner, Sym};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

pub(crate) use build::{bit_indices, resolve_amounts};

/// A node's position in [`Snapshot::nodes`]: nodes are sorted by name, so
/// comparing ids compares names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// A bound pod's id; stable while the snapshot lives (removal leaves a hole).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodId(pub u32);

/// A network domain: one value of one tier's label, under its parent's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainId(NonZeroU32);

impl DomainId {
    fn index(self) -> usize {
        self.0.get() as usize - 1
    }

    fn from_index(i: usize) -> DomainId {
        DomainId(NonZeroU32::new(i as u32 + 1).unwrap_or(NonZeroU32::MIN))
    }
}

/// A network domain and the nodes in it.
#[derive(Clone, Debug)]
pub struct Domain {
    tier: u8,
    name: Arc<str>,
    parent: Option<DomainId>,
    /// Shared between copies of the snapshot: set when it is built.
    nodes: Arc<Vec<NodeId>>,
    /// Listed GPUs of its nodes, and how many are held whole or shared.
    gpus: u32,
    gpus_used: u32,
}

impl Domain {
    /// Tier index, 0 the outermost.
    pub fn tier(&self) -> usize {
        usize::from(self.tier)
    }

    /// The label value naming it (`leaf-3`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The enclosing domain one tier out, if the nodes name one.
    pub fn parent(&self) -> Option<DomainId> {
        self.parent
    }

    /// Its nodes, sorted by name.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// GPUs listed by its nodes' topologies.
    pub fn gpu_count(&self) -> u32 {
        self.gpus
    }

    /// Of those, GPUs held whole or in shared use.
    pub fn gpus_used(&self) -> u32 {
        self.gpus_used
    }
}

/// A pod bound to a node, as far as the decision needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundPod {
    pub namespace: String,
    pub name: String,
    pub node: NodeId,
    /// Effective requests, counted against the node's allocatable.
    pub requests: Resources,
    /// GPUs held whole (bit i = GPU i).
    pub gpus: u32,
    /// Part of one GPU held under `gpu-share`.
    pub shared: Option<SharedHold>,
    /// The pod's GPU request; `None` when its annotations could not be read
    /// (the snapshot's warnings say why).
    pub request: Option<GpuRequest>,
    /// `spec.priority`; 0 when unset.
    pub priority: i32,
    /// `status.startTime`, for preemption's cost of lost work.
    pub start_time: Option<Timestamp>,
}

impl BoundPod {
    pub fn workload(&self) -> Option<WorkloadKind> {
        self.request.as_ref().and_then(|r| r.workload)
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A shared pod's part of one GPU, in both measures the scheduler tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SharedHold {
    pub gpu: u32,
    /// Thousandths of the GPU.
    pub milli: u32,
    /// MiB of the GPU's memory (0 when the GPU's memory is unknown and the
    /// share was a fraction).
    pub memory_mib: u64,
}

/// One GPU's shared use: the sum of the shares of the pods on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedUse {
    pub milli: u32,
    pub memory_mib: u64,
    pub pods: u32,
}

impl SharedUse {
    /// Counts one more pod's hold. Saturating: a bound pod's annotation may
    /// claim more than any GPU has (`gpu-share: 1e18`), and the GPU must
    /// then read as full, not wrap around to nearly free.
    pub(crate) fn add(&mut self, hold: &SharedHold) {
        self.milli = self.milli.saturating_add(hold.milli);
        self.memory_mib = self.memory_mib.saturating_add(hold.memory_mib);
        self.pods = self.pods.saturating_add(1);
    }
}

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

/// Something in the inputs that was odd but did not stop the snapshot; each
/// names the object and what was assumed instead.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SnapshotWarning {
    #[error("node {node}: GpuTopology cannot be used ({error}); GPU pods will not be placed there")]
    InvalidTopology { node: String, error: ShapeError },
    #[error(
        "node {node}: its GpuTopology is not believed ({reason}); its GPUs are placed as if it had none"
    )]
    ImplausibleTopology { node: String, reason: String },
    #[error("node {node}: label {key}={value:?} ignored: {detail}")]
    BadLabel {
        node: String,
        key: String,
        value: String,
        detail: String,
    },
    #[error("pod {pod}: bound to node {node}, which the snapshot does not have; ignored")]
    UnknownNode { pod: String, node: String },
    #[error("pod {pod} is listed twice; the second is ignored")]
    DuplicatePod { pod: String },
    #[error(
        "pod {pod}: gputopo.dev/assigned-gpus {value:?} is not a GPU index list; its GPUs are counted as of unknown indices"
    )]
    UnreadableAssignment { pod: String, value: String },
    #[error(
        "pod {pod}: gputopo.dev/assigned-gpus names {listed} usable GPU(s) on node {node} but the pod holds {requested}; the rest charged to GPUs {charged}"
    )]
    ShortAssignment {
        pod: String,
        node: String,
        listed: u32,
        requested: u32,
        charged: String,
    },
    #[error("pod {pod}: GPU {gpu} is not on node {node}; ignored")]
    GpuNotOnNode { pod: String, node: String, gpu: u32 },
    #[error("pod {pod}: GPU {gpu} on node {node} is already held by another pod; counted for both")]
    GpuHeldTwice { pod: String, node: String, gpu: u32 },
    #[error(
        "pod {pod}: holds {count} GPUs on node {node} but neither the node's GpuTopology status nor the pod's gputopo.dev/assigned-gpus says which; charged to GPUs {charged}"
    )]
    UnknownGpus {
        pod: String,
        node: String,
        count: u32,
        charged: String,
    },
    #[error(
        "pod {pod}: holds {count} more GPUs than node {node} has free; the excess is not placed"
    )]
    TooFewGpus {
        pod: String,
        node: String,
        count: u32,
    },
    #[error(
        "pod {pod}: GPU request not read ({error}); its GPUs are counted, its annotations ignored"
    )]
    BadRequest { pod: String, error: RequestError },
}

/// Why a snapshot could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("node {name} is listed twice")]
    DuplicateNode { name: String },
    #[error("PodGroup {namespace}/{name} is listed twice")]
    DuplicatePodGroup { namespace: String, name: String },
    #[error("pod {pod}: node {node} does not exist")]
    UnknownNode { pod: String, node: String },
    #[error("pod {pod} is already in the snapshot")]
    DuplicatePod { pod: String },
}

/// What a node knows about its GPUs.
#[derive(Clone, Debug)]
pub(crate) enum GpuKind {
    /// No GPUs.
    None,
    /// `nvidia.com/gpu` but no `GpuTopology`: indices `0..n`, links unknown.
    Untopologized,
    /// A `GpuTopology` that could not be read: index into `Snapshot::shape_errors`.
    Invalid(u32),
    /// Index into `Snapshot::shapes`.
    Shape(u32),
}

/// A node's GPUs as masks.
#[derive(Clone, Debug)]
pub(crate) struct NodeGpus {
    pub(crate) kind: GpuKind,
    /// Whose GPUs (the `GpuTopology`'s vendor; NVIDIA where it says none or
    /// the node has no `GpuTopology`): only pods asking that vendor's
    /// resource (`nvidia.com/gpu`, `amd.com/gpu`) get them.
    pub(crate) vendor: gputopo_api::GpuVendor,
    /// Listed GPUs (`0..n` for an untopologized node).
    pub(crate) present: u32,
    /// Held whole by a bound pod.
    pub(crate) held: u32,
    /// In shared use by at least one pod.
    pub(crate) shared_mask: u32,
    /// Per GPU index; empty until a shared pod lands on the node.
    pub(crate) shared: Box<[SharedUse]>,
    pub(crate) uuids: GpuUuids,
}

/// A node's GPU UUIDs. They are unique per GPU, so they cannot be shared
/// between nodes like the rest of a topology; the usual
/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` form is kept as 16 bytes.
#[derive(Clone, Debug, Default)]
pub(crate) enum GpuUuids {
    /// The topology names none.
    #[default]
    None,
    /// Every named UUID is canonical lowercase: bit i of `named` says GPU i has one.
    Packed { named: u32, ids: Box<[u128]> },
    /// Per GPU index, as written.
    Text(Box<[Option<Box<str>>]>),
}

impl GpuUuids {
    /// From per-index UUIDs (index = GPU index).
    pub(crate) fn new(uuids: &[Option<&str>]) -> GpuUuids {
        if uuids.iter().all(Option::is_none) {
            return GpuUuids::None;
        }
        let packed: Option<Vec<u128>> = uuids
            .iter()
            .map(|u| match u {
                None => Some(0),
                Some(text) => pack_uuid(text),
            })
            .collect();
        match packed {
            Some(ids) if uuids.len() <= 32 => GpuUuids::Packed {
                named: uuids
                    .iter()
                    .enumerate()
                    .filter(|(_, u)| u.is_some())
                    .fold(0, |m, (i, _)| m | (1 << i)),
                ids: ids.into_boxed_slice(),
            },
            _ => GpuUuids::Text(uuids.iter().map(|u| u.map(Box::from)).collect()),
        }
    }

    pub(crate) fn get(&self, gpu: u32) -> Option<String> {
        match self {
            GpuUuids::None => None,
            GpuUuids::Packed { named, ids } => (gpu < 32 && named & (1 << gpu) != 0)
                .then(|| ids.get(gpu as usize).map(|&id| unpack_uuid(id)))
                .flatten(),
            GpuUuids::Text(texts) => texts
                .get(gpu as usize)
                .and_then(|t| t.as_deref().map(str::to_string)),
        }
    }
}

/// `GPU-8-4-4-4-12` lowercase hex as 128 bits; `None` for any other form
/// (kept as text so it reads back exactly as written).
fn pack_uuid(text: &str) -> Option<u128> {
    let rest = text.strip_prefix("GPU-")?;
    let groups: Vec<&str> = rest.split('-').collect();
    let lengths = [8, 4, 4, 4, 12];
    if groups.len() != 5 || groups.iter().zip(lengths).any(|(g, n)| g.len() != n) {
        return None;
    }
    let hex: String = groups.concat();
    if !hex
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok()
}

fn unpack_uuid(id: u128) -> String {
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        (id >> 96) as u32,
        (id >> 80) as u16,
        (id >> 64) as u16,
        (id >> 48) as u16,
        id & 0xffff_ffff_ffff
    )
}

impl NodeGpus {
    pub(crate) fn free(&self) -> u32 {
        self.present & !self.held & !self.shared_mask
    }

    pub(crate) fn shared_use(&self, gpu: u32) -> SharedUse {
        self.shared.get(gpu as usize).copied().unwrap_or_default()
    }
}

/// Resource amounts with extended resources interned: what the filter compares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Amounts {
    pub(crate) cpu_milli: i64,
    pub(crate) memory: i64,
    pub(crate) ephemeral_storage: i64,
    pub(crate) pods: i64,
    pub(crate) gpus: i64,
    /// Sorted by symbol.
    pub(crate) extended: Box<[(Sym, i64)]>,
}

impl Amounts {
    pub(crate) fn extended(&self, sym: Sym) -> i64 {
        self.extended
            .binary_search_by_key(&sym, |(s, _)| *s)
            .map_or(0, |i| self.extended[i].1)
    }

    fn combine(&mut self, other: &Amounts, op: impl Fn(i64, i64) -> i64) {
        self.cpu_milli = op(self.cpu_milli, other.cpu_milli);
        self.memory = op(self.memory, other.memory);
        self.ephemeral_storage = op(self.ephemeral_storage, other.ephemeral_storage);
        self.pods = op(self.pods, other.pods);
        self.gpus = op(self.gpus, other.gpus);
        if other.extended.is_empty() {
            return;
        }
        let mut merged: Vec<(Sym, i64)> = self.extended.to_vec();
        for &(sym, amount) in other.extended.iter() {
            match merged.binary_search_by_key(&sym, |(s, _)| *s) {
                Ok(i) => merged[i].1 = op(merged[i].1, amount),
                Err(i) => merged.insert(i, (sym, op(0, amount))),
            }
        }
        merged.retain(|(_, a)| *a != 0);
        self.extended = merged.into_boxed_slice();
    }

    pub(crate) fn add(&mut self, other: &Amounts) {
        self.combine(other, i64::saturating_add);
    }

    pub(crate) fn subtract(&mut self, other: &Amounts) {
        self.combine(other, i64::saturating_sub);
    }

    fn to_resources(&self, strings: &Interner) -> Resources {
        let mut r = Resources {
            cpu_milli: self.cpu_milli,
            memory: self.memory,
            ephemeral_storage: self.ephemeral_storage,
            pods: self.pods,
            gpus: self.gpus,
            extended: Vec::new(),
        };
        for &(sym, amount) in self.extended.iter() {
            r.set(strings.resolve(sym), amount);
        }
        r
    }
}

/// One node, compact. Read it through [`NodeRef`].
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) name: Box<str>,
    /// Sorted by key symbol.
    pub(crate) labels: Box<[(Sym, Sym)]>,
    /// Index into `Snapshot::taint_sets`; 0 is the empty set.
    pub(crate) taints: u32,
    pub(crate) unschedulable: bool,
    pub(crate) allocatable: Amounts,
    pub(crate) requested: Amounts,
    pub(crate) gpus: NodeGpus,
    /// Outermost first; `None` where the node lacks the tier's label.
    pub(crate) domains: [Option<DomainId>; MAX_TIERS],
    pub(crate) pods: Vec<PodId>,
    /// From the node's label; `None`: the configured default.
    pub(crate) policy: Option<TopologyManagerPolicy>,
    pub(crate) cost_per_hour: Option<f32>,
    pub(crate) spot: bool,
    /// What stands for the GPU model (see `build::gpu_model`); `None`
    /// without a `GpuTopology` or product label.
    pub(crate) model: Option<Sym>,
    /// The GPUs' generation: the `gputopo.dev/gpu-generation` label, else
    /// from the product (`gputopo_api::generation`).
    pub(crate) generation: Option<u8>,
    pub(crate) training_pods: u16,
    pub(crate) inference_pods: u16,
}

impl Node {
    pub(crate) fn innermost_domain(&self) -> Option<DomainId> {
        self.domains.iter().rev().flatten().next().copied()
    }
}

/// What the filter and score read for every node, packed together (about 80
/// bytes; the full [`Node`] is several times that): one decision over 5,000
/// nodes streams 400 KB instead of megabytes. Derived from the node and
/// refreshed whenever its pods change.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Hot {
    pub(crate) free_cpu_milli: i64,
    pub(crate) free_memory: i64,
    pub(crate) free_ephemeral_storage: i64,
    /// `nvidia.com/gpu` allocatable minus requested.
    pub(crate) free_gpu_count: i64,
    /// Pods the kubelet still admits.
    pub(crate) pods_room: i64,
    pub(crate) present: u32,
    pub(crate) held: u32,
    pub(crate) shared_mask: u32,
    pub(crate) taints: u32,
    /// Shape index when `kind` is [`Hot::SHAPE`].
    pub(crate) shape: u32,
    /// Innermost domain index + 1; 0 for none.
    pub(crate) domain: u32,
    /// `NaN` when unpriced.
    pub(crate) cost: f32,
    pub(crate) training: u16,
    pub(crate) inference: u16,
    pub(crate) kind: u8,
    /// 0 none (the configured default), 1 + `TopologyManagerPolicy` as u8.
    pub(crate) policy: u8,
    pub(crate) unschedulable: bool,
    pub(crate) spot: bool,
    /// 0 when unknown.
    pub(crate) generation: u8,
    /// The node's GPU vendor, here so that the filter's vendor check does
    /// not read the node's full record (a cache miss per node).
    pub(crate) vendor: gputopo_api::GpuVendor,
}

impl Hot {
    pub(crate) const NONE: u8 = 0;
    pub(crate) const UNTOPOLOGIZED: u8 = 1;
    pub(crate) const INVALID: u8 = 2;
    pub(crate) const SHAPE: u8 = 3;

    pub(crate) fn of(node: &Node) -> Hot {
        let (a, r) = (&node.allocatable, &node.requested);
        let (kind, shape) = match node.gpus.kind {
            GpuKind::None => (Hot::NONE, 0),
            GpuKind::Untopologized => (Hot::UNTOPOLOGIZED, 0),
            GpuKind::Invalid(i) => (Hot::INVALID, i),
            GpuKind::Shape(i) => (Hot::SHAPE, i),
        };
        Hot {
            free_cpu_milli: a.cpu_milli.saturating_sub(r.cpu_milli),
            free_memory: a.memory.saturating_sub(r.memory),
            free_ephemeral_storage: a.ephemeral_storage.saturating_sub(r.ephemeral_storage),
            free_gpu_count: a.gpus.saturating_sub(r.gpus),
            pods_room: a.pods.saturating_sub(node.pods.len() as i64),
            present: node.gpus.present,
            held: node.gpus.held,
            shared_mask: node.gpus.shared_mask,
            taints: node.taints,
            shape,
            domain: node.innermost_domain().map_or(0, |d| d.0.get()),
            cost: node.cost_per_hour.unwrap_or(f32::NAN),
            training: node.training_pods,
            inference: node.inference_pods,
            kind,
            policy: node.policy.map_or(0, |p| 1 + p as u8),
            unschedulable: node.unschedulable,
            spot: node.spot,
            generation: node.generation.unwrap_or(0),
            vendor: node.gpus.vendor,
        }
    }

    /// Listed GPUs neither held whole nor shared.
    pub(crate) fn free(&self) -> u32 {
        self.present & !self.held & !self.shared_mask
    }

    /// Whether the node's GPUs are known one by one (a topology, or indices
    /// `0..n` without one), so the GPU predicate can count free ones.
    pub(crate) fn tracks_gpus(&self) -> bool {
        self.kind == Hot::SHAPE || self.kind == Hot::UNTOPOLOGIZED
    }

    pub(crate) fn single_numa(&self, default: TopologyManagerPolicy) -> bool {
        let policy = match self.policy {
            0 => default,
            1 => TopologyManagerPolicy::None,
            2 => TopologyManagerPolicy::BestEffort,
            3 => TopologyManagerPolicy::Restricted,
            _ => TopologyManagerPolicy::SingleNumaNode,
        };
        policy == TopologyManagerPolicy::SingleNumaNode
    }
}

/// A shape with the per-GPU facts the score reads (per-GPU memory).
#[derive(Clone, Debug)]
pub(crate) struct ShapeEntry {
    pub(crate) shape: Arc<NodeShape>,
    pub(crate) memory_mib: Box<[Option<u64>]>,
}

/// Cluster-wide facts that decide whether a score part applies at all.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Signals {
    /// Some node has a price.
    pub(crate) priced: bool,
    pub(crate) cost_min: f32,
    pub(crate) cost_max: f32,
    /// Some node is spot capacity.
    pub(crate) spot: bool,
    /// Some node has a `PreferNoSchedule` taint.
    pub(crate) prefer_no_schedule: bool,
    /// The oldest and newest known GPU generation (0 when none is known).
    pub(crate) generation_min: u8,
    pub(crate) generation_max: u8,
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

/// [`Snapshot::warnings`] by source, in the order they are listed: the
/// nodes', then each node's pods' (in node order), then pods on unknown
/// nodes. Pods added later ([`Snapshot::add_pod`]) add to the list only.
#[derive(Clone, Debug, Default)]
pub(crate) struct WarningParts {
    pub(crate) nodes: Vec<SnapshotWarning>,
    /// By node index, only nodes whose pods raised any: rejoining costs
    /// the warnings, not the cluster's size.
    pub(crate) pods: std::collections::BTreeMap<u32, Vec<SnapshotWarning>>,
    pub(crate) orphans: Vec<SnapshotWarning>,
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

    pub(crate) fn label_of(&self, node: &Node, key: &str) -> Option<&str> {
        let key = self.strings.get(key)?;
        node.labels
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| self.strings.resolve(node.labels[i].1))
    }
}

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
    snapshot: &'a Snapshot,
    id: NodeId,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_pack_only_when_they_read_back_exactly() {
        let canonical = "GPU-41000001-0000-4000-8000-00000000000a";
        let upper = "GPU-41000001-0000-4000-8000-00000000000A";
        let odd = "MIG-GPU-41000001";
        let packed = GpuUuids::new(&[Some(canonical), None]);
        assert!(matches!(packed, GpuUuids::Packed { .. }));
        assert_eq!(packed.get(0).as_deref(), Some(canonical));
        assert_eq!(packed.get(1), None);
        assert_eq!(packed.get(7), None);
        for text in [upper, odd] {
            let kept = GpuUuids::new(&[Some(canonical), Some(text)]);
            assert!(matches!(kept, GpuUuids::Text(_)));
            assert_eq!(kept.get(1).as_deref(), Some(text));
        }
        assert!(matches!(GpuUuids::new(&[None, None]), GpuUuids::None));
    }
}
