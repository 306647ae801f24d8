//! Pods whose GPUs come through Dynamic Resource Allocation, as the
//! extender judges them. kube-scheduler's own DRA plugin allocates their
//! claims (the first devices that match), so the extender can steer the
//! node, never the devices: a node passes its filter when the claims fit
//! its free devices with every `gputopo.dev/*` constraint (say,
//! `min-nvlink-level`), and scores as a device-plugin pod of the same
//! count would. A plain `nvidia.com/gpu` pod that a DeviceClass also serves
//! through DRA (KEP-5004) is judged node by node: by the device plugin's
//! rule where the node has the plugin's GPUs, through its special claim
//! where it has none.

use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{DraInventory, DraPod};
use gputopo_scheduler_core::dra_schedule::DraJudge;
use gputopo_scheduler_core::node_fit::{NodeJudge, NodeVerdict};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::snapshot::Snapshot;
use std::sync::Arc;

/// What the extender judges a pod's GPUs by.
#[derive(Clone, Debug, Default)]
pub enum PodClaims {
    /// The device plugin's resource alone (or claims the extender cannot
    /// read: kube-scheduler then decides them unaided).
    #[default]
    Unjudged,
    /// The pod's ResourceClaims, and every node's devices (GPUs held in
    /// the snapshot already taken out).
    Claims {
        dra: DraPod,
        inventory: Arc<DraInventory>,
    },
    /// A plain GPU pod whose resource a DeviceClass serves (KEP-5004): its
    /// special claim as kube-scheduler would create it.
    Extended {
        dra: DraPod,
        inventory: Arc<DraInventory>,
    },
}

/// One node's answer to a filter or prioritize.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Passes, with the 0–100 node score.
    Fits(u8),
    /// Fails: the node-independent phrases, and whether evictions could help.
    Fails { text: String, resolvable: bool },
    /// Not in the extender's node cache.
    Unknown,
}

/// A pod compiled against one snapshot, judged node by node.
pub struct Judge<'a> {
    snapshot: &'a Snapshot,
    plain: NodeJudge<'a>,
    dra: Option<DraJudge<'a>>,
    /// Device-plugin nodes go to `plain`, the others to `dra`.
    by_node: bool,
}

impl<'a> Judge<'a> {
    /// `judged` is `pending` as the DRA judge sees it: keep it alive beside
    /// the judge ([`judged_pod`]).
    pub fn new(
        snapshot: &'a Snapshot,
        config: &'a SchedulerConfig,
        pending: &'a PendingPod,
        judged: &'a PendingPod,
        claims: &'a PodClaims,
    ) -> Judge<'a> {
        let plain = NodeJudge::new(snapshot, pending, config);
        let (dra, by_node) = match claims {
            PodClaims::Unjudged => (None, false),
            PodClaims::Claims { dra, inventory } => (
                Some(DraJudge::new(snapshot, inventory, dra, judged, config)),
                false,
            ),
            PodClaims::Extended { dra, inventory } => (
                Some(DraJudge::new(snapshot, inventory, dra, judged, config)),
                true,
            ),
        };
        Judge {
            snapshot,
            plain,
            dra,
            by_node,
        }
    }

    pub fn judge(&self, node: &str) -> Verdict {
        let Some(id) = self.snapshot.node_id(node) else {
            return Verdict::Unknown;
        };
        let dra = match &self.dra {
            Some(dra) if !self.by_node || self.snapshot.node(id).allocatable().gpus == 0 => dra,
            _ => {
                return match self.plain.judge(node) {
                    NodeVerdict::Fits { score, .. } => Verdict::Fits(score),
                    NodeVerdict::Rejected(r) => Verdict::Fails {
                        text: r.reason.summaries().join(", "),
                        resolvable: r.resolvable,
                    },
                    NodeVerdict::Unknown => Verdict::Unknown,
                };
            }
        };
        match dra.judge(id) {
            Ok((_, parts)) => Verdict::Fits(parts.score()),
            Err(r) => Verdict::Fails {
                text: r.summaries().join(", "),
                resolvable: r.resolvable(),
            },
        }
    }
}

/// The pod as the DRA judge sees it (its claims' GPU count, no device
/// plugin resource); `pending` itself when its claims are not judged.
pub fn judged_pod(pending: &PendingPod, claims: &PodClaims) -> PendingPod {
    match claims {
        PodClaims::Unjudged => pending.clone(),
        PodClaims::Claims { dra, inventory } | PodClaims::Extended { dra, inventory } => {
            dra.judged(pending, inventory)
        }
    }
}

/// `pending` without GPUs: what the bind checks when kube-scheduler's DRA
/// plugin has already allocated the devices (the node's other predicates
/// still hold; the GPUs are the claims').
pub fn without_gpus(pending: &PendingPod) -> PendingPod {
    let mut p = pending.clone();
    p.request.gpus = 0;
    p.request.gpu_share = None;
    p.requests.gpus = 0;
    p
}
