//! One node as the snapshot stores it: its GPUs as masks, its resource
//! amounts with names interned, and the per-shape facts it points at.

use super::intern::{Interner, Sym};
use super::{DomainId, GpuUuids, PodId, SharedUse};
use crate::config::{MAX_TIERS, TopologyManagerPolicy};
use crate::gpuset::NodeShape;
use crate::pod_constraints::NodeFeatures;
use crate::resources::Resources;
use gputopo_api::WorkloadKind;
use std::sync::Arc;

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
    /// Part of `held`: GPUs charged for pods whose GPUs no record and no
    /// node report names (the highest free ones, as stand-ins). While any
    /// is, which GPUs are free is not known, only how many.
    pub(crate) stand_in: u32,
    /// In shared use by at least one pod.
    pub(crate) shared_mask: u32,
    /// Per GPU index; empty until a shared pod lands on the node.
    pub(crate) shared: Box<[SharedUse]>,
    pub(crate) uuids: GpuUuids,
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

    pub(super) fn to_resources(&self, strings: &Interner) -> Resources {
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

/// One node, compact. Read it through [`NodeRef`](super::NodeRef).
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
    /// What stands for the GPU model (see `build_node::gpu_model`); `None`
    /// without a `GpuTopology` or product label.
    pub(crate) model: Option<Sym>,
    /// The GPUs' generation: the `gputopo.dev/gpu-generation` label, else
    /// from the product (`gputopo_api::generation`).
    pub(crate) generation: Option<u8>,
    pub(crate) training_pods: u16,
    pub(crate) inference_pods: u16,
    /// Image names it holds with their sizes, sorted by symbol (`images.rs`).
    pub(crate) images: Box<[(Sym, i64)]>,
    /// `status.declaredFeatures`, as far as a pod can require them.
    pub(crate) features: NodeFeatures,
}

impl Node {
    pub(crate) fn innermost_domain(&self) -> Option<DomainId> {
        self.domains.iter().rev().flatten().next().copied()
    }

    /// The count of the node's running pods of `kind`; none is kept for a
    /// pod that does not say.
    pub(crate) fn workload_pods_mut(&mut self, kind: Option<WorkloadKind>) -> Option<&mut u16> {
        match kind? {
            WorkloadKind::Training => Some(&mut self.training_pods),
            WorkloadKind::Inference => Some(&mut self.inference_pods),
        }
    }
}

/// A shape with the per-GPU facts the score reads (per-GPU memory).
#[derive(Clone, Debug)]
pub(crate) struct ShapeEntry {
    pub(crate) shape: Arc<NodeShape>,
    pub(crate) memory_mib: Box<[Option<u64>]>,
}

/// The indices of a mask's set bits, lowest first.
pub(crate) fn bit_indices(mask: u32) -> Vec<u32> {
    (0..32).filter(|i| mask & (1 << i) != 0).collect()
}

/// GPUs of a node held whole or in shared use.
pub(crate) fn used_gpus(node: &Node) -> u32 {
    ((node.gpus.held | node.gpus.shared_mask) & node.gpus.present).count_ones()
}
