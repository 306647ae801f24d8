//! The per-node digest the filter and score scan ([`Hot`]).

use super::{GpuKind, Node};
use crate::config::TopologyManagerPolicy;

/// What the filter and score read for every node, packed together (about 96
/// bytes; the full [`Node`] is several times that): one decision over 5,000
/// nodes streams 400 KB instead of megabytes. Derived from the node and
/// refreshed whenever its pods change.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Hot {
    pub(crate) free_cpu_milli: i64,
    pub(crate) free_memory: i64,
    /// Allocatable cpu and memory, for the balanced-allocation score.
    pub(crate) cpu_milli: i64,
    pub(crate) memory: i64,
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
    /// Some of its GPUs are held by pods nobody said which GPUs they hold
    /// ([`super::NodeGpus::stand_in`]): GPUs are counted there, not chosen.
    pub(crate) uncertain: bool,
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
            cpu_milli: a.cpu_milli,
            memory: a.memory,
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
            uncertain: node.gpus.stand_in != 0,
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
