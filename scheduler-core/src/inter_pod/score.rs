//! The InterPodAffinity score.

use crate::pod::PendingPod;
use crate::snapshot::Snapshot;

/// Per node of `feasible` (indices into the snapshot's nodes), its score
/// 0–100 after upstream's normalisation; `None` when the plugin has
/// nothing to score (no preferred terms on the pod, no bound pod with
/// terms that reach it). `hard_weight` is `hardPodAffinityWeight`.
pub(crate) fn normalized_scores(
    _snapshot: &Snapshot,
    _pod: &PendingPod,
    _feasible: &[usize],
    _hard_weight: i32,
) -> Option<Vec<i64>> {
    None
}
