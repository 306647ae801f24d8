//! The PodTopologySpread score.

use super::NodeEligibility;
use crate::pod::PendingPod;
use crate::snapshot::Snapshot;

/// Per node of `feasible`, its score 0–100 after upstream's normalisation;
/// `None` when the pod has no `ScheduleAnyway` constraint.
pub(crate) fn normalized_scores(
    _snapshot: &Snapshot,
    _pod: &PendingPod,
    _feasible: &[usize],
    _eligible: &dyn Fn(usize) -> NodeEligibility,
) -> Option<Vec<i64>> {
    None
}
