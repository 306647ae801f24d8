//! The PodTopologySpread filter.

use super::{NodeEligibility, SpreadRefusal};
use crate::pod::PendingPod;
use crate::snapshot::Snapshot;

/// The pod's `DoNotSchedule` constraints with matching pods counted per
/// domain, once per decision.
pub(crate) struct SpreadFilter {}

impl SpreadFilter {
    /// `None` when the pod has no `DoNotSchedule` constraint.
    /// `eligible(index)` is what the pod's own node rules say of each node.
    pub(crate) fn new(
        _snapshot: &Snapshot,
        _pod: &PendingPod,
        _eligible: &dyn Fn(usize) -> NodeEligibility,
    ) -> Option<SpreadFilter> {
        None
    }

    /// Whether the node at `index` may take the pod.
    pub(crate) fn check(&self, _snapshot: &Snapshot, _index: usize) -> Result<(), SpreadRefusal> {
        Ok(())
    }
}
