//! One pod with claims judged on one node: the node's predicates and score
//! for the claims' GPU count, then the claims' fit on its devices. The
//! whole-cluster decision (`schedule.rs`), `gputopo explain` and the
//! extender's filter and prioritize all read a node through [`DraJudge`],
//! so they cannot disagree about a node.

use crate::config::{SchedulerConfig, TopologyManagerPolicy};
use crate::dra::DraFit;
use crate::dra::DraInventory;
use crate::dra::DraPod;
use crate::dra::NodeReason;
use crate::gpuset::SetRequest;
use crate::node_fit::{NodeJudge, NodeRejection};
use crate::pod::PendingPod;
use crate::schedule::Placement;
use crate::score::ScoreParts;
use crate::snapshot::{NodeId, Snapshot};
use std::cmp::Ordering;
use std::fmt;

/// Why a node cannot take a pod with claims.
#[derive(Clone, Debug, PartialEq)]
pub enum DraRejection {
    /// A node predicate, the pod asking for its claims' GPU count.
    Node(NodeRejection),
    /// The claims do not fit the node's devices.
    Devices(NodeReason),
    /// The node's GPUs are a device plugin's: a plain `nvidia.com/gpu` pod's
    /// special claim is served only where no device plugin serves the
    /// resource (KEP-5004).
    DevicePluginNode,
}

impl DraRejection {
    /// The node-independent phrases a `FailedScheduling` message counts.
    pub fn summaries(&self) -> Vec<String> {
        match self {
            DraRejection::Node(r) => r.reason.summaries(),
            DraRejection::Devices(reason) => vec![reason.summary()],
            DraRejection::DevicePluginNode => vec!["GPUs served by a device plugin".to_string()],
        }
    }

    /// Whether evicting pods could make room: not for a node's standing
    /// (taints, selectors, no devices or topology, another node's claim).
    pub fn resolvable(&self) -> bool {
        match self {
            DraRejection::Node(r) => r.resolvable,
            // Evictions free allocated devices, never missing ones.
            DraRejection::Devices(NodeReason::TooFewDevices {
                wanted,
                matching,
                tainted,
                unplaced,
                ..
            }) => matching.saturating_sub(tainted + unplaced) >= *wanted,
            DraRejection::Devices(reason) => matches!(
                reason,
                NodeReason::AllDeviceUnavailable { .. }
                    | NodeReason::NoGpuSet(_)
                    | NodeReason::NoSplit { .. }
                    | NodeReason::NotDistinct
            ),
            DraRejection::DevicePluginNode => false,
        }
    }
}

impl fmt::Display for DraRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DraRejection::Node(r) => r.reason.fmt(f),
            DraRejection::Devices(reason) => reason.fmt(f),
            DraRejection::DevicePluginNode => f.write_str(
                "the node's GPUs are served by a device plugin; a plain GPU request is served through DRA only on nodes without one",
            ),
        }
    }
}

/// A pod's claims compiled against one snapshot and inventory, judged node
/// by node. `judged` is [`DraPod::judged`] of the pod.
pub struct DraJudge<'a> {
    node: NodeJudge<'a>,
    base: SetRequest,
    inventory: &'a DraInventory,
    dra: &'a DraPod,
    dra_nodes_only: bool,
}

impl<'a> DraJudge<'a> {
    pub fn new(
        snapshot: &'a Snapshot,
        inventory: &'a DraInventory,
        dra: &'a DraPod,
        judged: &'a PendingPod,
        config: &'a SchedulerConfig,
    ) -> DraJudge<'a> {
        DraJudge {
            node: NodeJudge::new(snapshot, judged, config),
            base: SetRequest::from_gpu_request(&judged.request),
            inventory,
            dra,
            dra_nodes_only: false,
        }
    }

    /// A decision gputopo takes alone (the secondary scheduler): see
    /// [`NodeJudge::deciding_alone`].
    pub fn deciding_alone(mut self) -> Self {
        self.node = self.node.deciding_alone();
        self
    }

    /// For a special claim (KEP-5004): nodes whose GPUs a device plugin
    /// serves are rejected.
    pub fn extended_only(mut self) -> Self {
        self.dra_nodes_only = true;
        self
    }

    pub fn snapshot(&self) -> &'a Snapshot {
        self.node.snapshot()
    }

    /// The node's verdict: the claims' fit and the node score, or why not.
    pub fn judge(&self, id: NodeId) -> Result<(DraFit, ScoreParts), DraRejection> {
        let node = self.snapshot().node(id);
        if self.dra_nodes_only && node.allocatable().gpus > 0 {
            return Err(DraRejection::DevicePluginNode);
        }
        let fit = self.node.fit(id).map_err(DraRejection::Node)?;
        let config = self.node.config();
        let request = SetRequest {
            single_numa_node: node.topology_manager_policy(config.default_topology_manager_policy)
                == TopologyManagerPolicy::SingleNumaNode,
            ..self.base
        };
        let shape = node.shape().map(|s| s.as_ref());
        let dra_fit = self
            .dra
            .fit(self.inventory, node.name(), shape, &request)
            .map_err(DraRejection::Devices)?;
        Ok((dra_fit, self.node.score(id, &fit)))
    }

    /// `<the set and why>; devices <claim: device, ...>; node score N (parts)`.
    pub fn describe(&self, id: NodeId, fit: &DraFit, parts: &ScoreParts) -> String {
        let node = self.snapshot().node(id);
        let set_text = match node.shape() {
            Some(shape) => {
                let request = SetRequest {
                    gpus: fit.pick.gpu_count(),
                    ..self.base
                };
                shape.describe(&request, &fit.pick).explanation
            }
            None => format!("GPUs {:?}", fit.gpus()),
        };
        format!(
            "{set_text}; devices {}; node score {} ({parts})",
            fit.devices_text(),
            parts.score()
        )
    }

    /// The placement on node `id`, its explanation ending in `context`.
    pub fn placement(
        &self,
        id: NodeId,
        fit: &DraFit,
        parts: ScoreParts,
        feasible_nodes: usize,
        context: &str,
    ) -> Placement {
        let node = self.snapshot().node(id);
        let gpus = fit.gpus();
        Placement {
            pod: self.node.pod().key(),
            node: node.name().to_string(),
            node_id: id,
            gpu_uuids: node.gpu_uuids(&gpus),
            gpus,
            shared: None,
            bottleneck: fit.pick.bottleneck,
            topology_known: node.shape().is_some(),
            by_count: false,
            score: parts.score(),
            explanation: format!(
                "node {}: {}; {context}",
                node.name(),
                self.describe(id, fit, &parts)
            ),
            parts,
            feasible_nodes,
            volumes: self.node.volume_plan(id),
        }
    }
}

/// `a` (with node score `ap`) against `b`: the preferred `firstAvailable`
/// subrequests first, then the GPU set's quality (bottleneck, then NUMA
/// span), then the node score. `Equal` for a tie: callers keep the node
/// whose name sorts first.
pub fn rank(a: &DraFit, ap: &ScoreParts, b: &DraFit, bp: &ScoreParts) -> Ordering {
    a.preference
        .cmp(&b.preference)
        .then(set_quality(a).cmp(&set_quality(b)))
        .then(ap.total.total_cmp(&bp.total))
}

/// Greater is better: one GPU (no link at all), else the widest
/// bottleneck; then the fewest NUMA nodes.
fn set_quality(f: &DraFit) -> impl Ord + use<> {
    (
        f.pick.bottleneck.is_none(),
        f.pick.bottleneck,
        std::cmp::Reverse(f.pick.numa_nodes),
    )
}
