//! The pod-preferences part: what kube-scheduler's NodeAffinity,
//! InterPodAffinity and PodTopologySpread scores say of each feasible node,
//! each normalised over the feasible nodes as upstream normalises it
//! (0–100), then blended by [`PreferenceWeights`] into 0–1.
//!
//! Those scores compare a node with the other feasible nodes, so they are
//! computed once per decision over the nodes the filter accepts, before any
//! node is scored: a decision with preferences filters the cluster twice.

use crate::config::PreferenceWeights;
use crate::filter::PodContext;
use crate::snapshot::NodeId;
use crate::{inter_pod, spread};

/// Whether the part can apply: the pod states a preference, or bound pods
/// have affinity terms that may reach it. Cheap; decides whether the
/// feasible nodes are collected at all.
pub(crate) fn may_apply(ctx: &PodContext<'_>) -> bool {
    let pod = ctx.pod;
    let c = &pod.constraints;
    !pod.preferred_node_affinity.is_empty()
        || !c.affinity.preferred.is_empty()
        || !c.affinity.preferred_anti.is_empty()
        || spread::score_may_apply(ctx.snapshot, pod, &ctx.config.spread_defaults)
        || ctx.snapshot.affinity_pods().next().is_some()
}

/// Per node of the snapshot, the part's value 0–1 (`NaN` for nodes not in
/// `feasible`); `None` when no score applies to the pod.
pub(crate) fn pod_preferences(ctx: &PodContext<'_>, feasible: &[usize]) -> Option<Vec<f64>> {
    let weights: PreferenceWeights = ctx.config.preferences;
    let eligible = |i: usize| ctx.eligibility(i);
    let parts = [
        (weights.node_affinity, node_affinity_scores(ctx, feasible)),
        (
            weights.inter_pod_affinity,
            inter_pod::normalized_scores(
                ctx.snapshot,
                ctx.pod,
                feasible,
                weights.hard_pod_affinity,
            ),
        ),
        (
            weights.topology_spread,
            spread::normalized_scores(
                ctx.snapshot,
                ctx.pod,
                &ctx.config.spread_defaults,
                feasible,
                &eligible,
            ),
        ),
    ];
    let total_weight: u32 = parts
        .iter()
        .filter(|(w, s)| *w > 0 && s.is_some())
        .map(|(w, _)| w)
        .sum();
    if total_weight == 0 {
        return None;
    }
    let mut out = vec![f64::NAN; ctx.snapshot.len()];
    for (k, &index) in feasible.iter().enumerate() {
        let sum: f64 = parts
            .iter()
            .filter_map(|(w, s)| Some(f64::from(*w) * s.as_ref()?.get(k).copied()? as f64))
            .sum();
        if let Some(slot) = out.get_mut(index) {
            *slot = (sum / (100.0 * f64::from(total_weight))).clamp(0.0, 1.0);
        }
    }
    Some(out)
}

/// NodeAffinity's score: the weights of the preferred terms a node matches,
/// scaled so the best feasible node has 100 (all 0 when none matches any);
/// `None` when the pod prefers nothing.
fn node_affinity_scores(ctx: &PodContext<'_>, feasible: &[usize]) -> Option<Vec<i64>> {
    let terms = &ctx.pod.preferred_node_affinity;
    if terms.is_empty() {
        return None;
    }
    let raw: Vec<i64> = feasible
        .iter()
        .map(|&i| {
            let node = ctx.snapshot.node(NodeId(i as u32));
            terms
                .iter()
                .filter(|t| node.matches_term(&t.term))
                .map(|t| i64::from(t.weight))
                .sum()
        })
        .collect();
    let max = raw.iter().copied().max().unwrap_or(0);
    Some(if max == 0 {
        raw
    } else {
        raw.iter().map(|s| s * 100 / max).collect()
    })
}
