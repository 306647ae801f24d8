//! One pod judged on nodes somebody else names, for a caller that does not
//! pick the node itself: kube-scheduler's extender protocol asks "which of
//! these nodes may take the pod", "how good is each", then "bind it to this
//! one".
//!
//! The filter and the score are [`crate::schedule::schedule`]'s, over the
//! whole snapshot (so the parts that compare a node with the cluster, such as
//! the best bottleneck any node offers, mean the same thing), but only the
//! named nodes are looked at. A rejection also says whether evicting pods
//! from the node could ever help, which kube-scheduler's preemption wants to
//! know (`FailedAndUnresolvableNodes`).

use crate::config::SchedulerConfig;
use crate::filter::{FilterReason, Fit, PodContext, Rejection};
use crate::gpuset::SetRequest;
use crate::pod::PendingPod;
use crate::schedule::{Placement, describe_fit};
use crate::score::{ScoreParts, Scorer};
use crate::snapshot::{Hot, NodeId, Snapshot};

/// How one node judges the pod.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeVerdict {
    /// The node may take the pod; its score (0–100) and the parts.
    Fits { score: u8, parts: ScoreParts },
    /// The node may not.
    Rejected(NodeRejection),
    /// The snapshot has no node of that name.
    Unknown,
}

/// Why a node may not take the pod, and whether preemption could change that.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRejection {
    pub reason: FilterReason,
    /// Whether evicting pods from the node could make room. False when the
    /// node fails a predicate evictions cannot change (cordoned,
    /// `spec.nodeName`, untolerated taint, selector or required affinity),
    /// has no GPUs or no usable `GpuTopology` for what the pod asks, asks more
    /// of a resource than the node has in all, or would not hold the pod's GPU
    /// set even with every GPU free.
    pub resolvable: bool,
}

/// Why [`NodeJudge::place_on`] gives no placement.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlaceError {
    #[error("node {node} is not in the cluster snapshot")]
    UnknownNode { node: String },
    #[error("node {node} cannot take pod {pod}: {}", rejection.reason)]
    Rejected {
        pod: String,
        node: String,
        rejection: NodeRejection,
    },
}

/// A pod compiled against one snapshot, judged node by node. Building it
/// costs what one [`crate::schedule::schedule`] call costs before its loop;
/// each [`NodeJudge::judge`] is then one node's filter and score.
pub struct NodeJudge<'a> {
    ctx: PodContext<'a>,
    scorer: Scorer,
}

impl<'a> NodeJudge<'a> {
    pub fn new(
        snapshot: &'a Snapshot,
        pod: &'a PendingPod,
        config: &'a SchedulerConfig,
    ) -> NodeJudge<'a> {
        let ctx = PodContext::new(snapshot, pod, config);
        let scorer = Scorer::new(&ctx);
        NodeJudge { ctx, scorer }
    }

    /// The judge of a decision gputopo takes alone (the secondary
    /// scheduler), not beside kube-scheduler: kube-scheduler's node scores
    /// (balanced allocation, image locality) count too.
    pub fn deciding_alone(mut self) -> NodeJudge<'a> {
        self.scorer = Scorer::alone(&self.ctx);
        self
    }

    pub fn snapshot(&self) -> &'a Snapshot {
        self.ctx.snapshot
    }

    pub fn pod(&self) -> &'a PendingPod {
        self.ctx.pod
    }

    pub fn config(&self) -> &'a SchedulerConfig {
        self.ctx.config
    }

    /// The filter on node `id`: the node's fit, or why not and whether
    /// evictions could change that.
    pub(crate) fn fit(&self, id: NodeId) -> Result<Fit, NodeRejection> {
        self.ctx
            .filter(id.0 as usize)
            .map_err(|r| self.rejection(id, r))
    }

    /// The node score of a fit [`NodeJudge::fit`] gave.
    pub(crate) fn score(&self, id: NodeId, fit: &Fit) -> ScoreParts {
        self.scorer.score(&self.ctx, id.0 as usize, fit)
    }

    /// The verdict of the node named `node`.
    pub fn judge(&self, node: &str) -> NodeVerdict {
        let Some(id) = self.ctx.snapshot.node_id(node) else {
            return NodeVerdict::Unknown;
        };
        let index = id.0 as usize;
        match self.ctx.filter(index) {
            Ok(fit) => {
                let parts = self.scorer.score(&self.ctx, index, &fit);
                NodeVerdict::Fits {
                    score: parts.score(),
                    parts,
                }
            }
            Err(rejection) => NodeVerdict::Rejected(self.rejection(id, rejection)),
        }
    }

    /// The placement on exactly the node named `node`: the GPU set
    /// [`crate::schedule::schedule`] would give the pod there, with its score
    /// and explanation.
    pub fn place_on(&self, node: &str) -> Result<Placement, PlaceError> {
        let Some(id) = self.ctx.snapshot.node_id(node) else {
            return Err(PlaceError::UnknownNode {
                node: node.to_string(),
            });
        };
        let index = id.0 as usize;
        let fit = self.ctx.filter(index).map_err(|r| PlaceError::Rejected {
            pod: self.ctx.pod.key(),
            node: node.to_string(),
            rejection: self.rejection(id, r),
        })?;
        let parts = self.scorer.score(&self.ctx, index, &fit);
        Ok(self.placement(id, &fit, parts))
    }

    /// What to write for the pod's waiting claims on `id`.
    pub fn volume_plan(&self, id: NodeId) -> crate::volumes::VolumePlan {
        self.ctx.volume_plan(id.0 as usize)
    }

    fn placement(&self, id: NodeId, fit: &Fit, parts: ScoreParts) -> Placement {
        let node = self.ctx.snapshot.node(id);
        let (gpus, bottleneck, shared, set_text) = describe_fit(&self.ctx, id, fit);
        let gpu_uuids = node.gpu_uuids(&gpus);
        let score = parts.score();
        Placement {
            pod: self.ctx.pod.key(),
            node: node.name().to_string(),
            node_id: id,
            gpus,
            gpu_uuids,
            shared,
            bottleneck,
            topology_known: node.shape().is_some(),
            by_count: matches!(fit, Fit::WholeUnknown { by_count: true, .. }),
            score,
            parts,
            explanation: format!(
                "node {}: {set_text}; node score {score} ({parts}); the node was chosen by the caller",
                node.name()
            ),
            feasible_nodes: 1,
            volumes: self.ctx.volume_plan(id.0 as usize),
        }
    }

    fn rejection(&self, id: NodeId, rejection: Rejection) -> NodeRejection {
        let index = id.0 as usize;
        let reason = self.ctx.reason(id, rejection);
        let resolvable = self.ctx.admits(index)
            && match (&rejection, &reason) {
                (
                    Rejection::NoGpus
                    | Rejection::InvalidTopology
                    | Rejection::UnknownTopology(_)
                    | Rejection::UncertainGpus(_),
                    _,
                ) => false,
                (Rejection::GpuSet(_), _) => self.fits_when_empty(index),
                // As kube-scheduler's NodeResourcesFit: asking more than the
                // node has in all is beyond any eviction.
                (_, FilterReason::Insufficient(short)) => {
                    let allocatable = self.ctx.snapshot.node(id).allocatable();
                    short
                        .iter()
                        .all(|s| s.requested <= allocatable.get(&s.resource))
                }
                _ => true,
            };
        NodeRejection { reason, resolvable }
    }

    /// Whether the pod's whole-GPU set fits the node with every GPU free.
    fn fits_when_empty(&self, index: usize) -> bool {
        let Some(request) = self.ctx.set_request() else {
            return true;
        };
        let snapshot = self.ctx.snapshot;
        let hot = &snapshot.hot[index];
        match hot.kind {
            Hot::SHAPE => {
                let Some(entry) = snapshot.shapes.get(hot.shape as usize) else {
                    return false;
                };
                let request = SetRequest {
                    single_numa_node: hot
                        .single_numa(self.ctx.config.default_topology_manager_policy),
                    ..*request
                };
                entry.shape.pick(entry.shape.gpus_mask(), &request).is_ok()
            }
            Hot::UNTOPOLOGIZED => hot.present.count_ones() >= request.gpus,
            _ => false,
        }
    }
}
