//! The InterPodAffinity filter.

use super::AffinityRefusal;
use crate::pod::PendingPod;
use crate::snapshot::Snapshot;

/// The pod's required terms and the bound pods' required anti-affinity,
/// counted per topology domain once per decision.
pub(crate) struct AffinityFilter {}

impl AffinityFilter {
    /// `None` when nothing can refuse a node: the pod has no required
    /// terms and no bound pod has required anti-affinity.
    pub(crate) fn new(_snapshot: &Snapshot, _pod: &PendingPod) -> Option<AffinityFilter> {
        None
    }

    /// Whether the node at `index` may take the pod.
    pub(crate) fn check(&self, _snapshot: &Snapshot, _index: usize) -> Result<(), AffinityRefusal> {
        Ok(())
    }
}
