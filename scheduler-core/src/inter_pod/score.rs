//! The InterPodAffinity score, as kube-scheduler's: per topology pair, the
//! weights of the terms that connect the pod with the bound pods there (its
//! preferred affinity +, preferred anti-affinity −; bound pods' required
//! affinity × `hardPodAffinityWeight`, their preferred affinity +,
//! preferred anti-affinity −, when they select the pod); a node scores the
//! sum over its pairs, normalised min–max to 0–100 over the feasible nodes.

use super::terms::{PairTable, pair, selects};
use crate::pod::PendingPod;
use crate::pod_constraints::{AffinityTerm, WeightedTerm, selector_matches};
use crate::snapshot::{BoundPod, Snapshot};

/// Per node of `feasible`, its score 0–100; `None` when no term connects
/// the pod with any bound pod on a labelled node (upstream skips scoring).
pub(crate) fn normalized_scores(
    snapshot: &Snapshot,
    pod: &PendingPod,
    feasible: &[usize],
    hard_weight: i32,
) -> Option<Vec<i64>> {
    let own = &pod.constraints.affinity;
    let prefers = !own.preferred.is_empty() || !own.preferred_anti.is_empty();
    let mut scores = TopologyScores {
        snapshot,
        pod,
        by_pair: PairTable::new(snapshot),
    };
    if prefers {
        // A bound pod without labels or terms counts only for the pod's
        // terms whose selectors match no labels; most bound pods are such.
        let unlabelled_match = own
            .preferred
            .iter()
            .chain(&own.preferred_anti)
            .any(|w| selector_matches(w.term.selector.as_ref(), &Default::default()));
        // The pods the pod's terms may select, and those with terms of
        // their own: no other pod counts.
        let candidates = snapshot
            .selector_candidates(
                own.preferred
                    .iter()
                    .chain(&own.preferred_anti)
                    .map(|w| w.term.selector.as_ref()),
            )
            .map(|mut ids| {
                ids.extend(snapshot.affinity_pods.iter().copied());
                ids.sort_unstable();
                ids.dedup();
                ids
            });
        for (_, bound) in snapshot.pods_or_all(candidates.as_deref()) {
            let plain =
                bound.constraints.labels.is_empty() && bound.constraints.affinity.is_empty();
            if unlabelled_match || !plain {
                scores.existing_pod(bound, hard_weight);
            }
        }
    } else {
        for (_, bound) in snapshot.affinity_pods() {
            scores.existing_pod(bound, hard_weight);
        }
    }
    if scores.by_pair.is_empty() {
        return None;
    }
    let raw: Vec<i64> = feasible
        .iter()
        .map(|&i| scores.by_pair.node_sum(snapshot, i))
        .collect();
    Some(normalize(&raw))
}

/// `100 · (s − min) / (max − min)`, truncated; all 0 when every node
/// scores alike.
fn normalize(raw: &[i64]) -> Vec<i64> {
    let (Some(&min), Some(&max)) = (raw.iter().min(), raw.iter().max()) else {
        return Vec::new();
    };
    let spread = max - min;
    raw.iter()
        .map(|&s| {
            if spread > 0 {
                (100.0 * ((s - min) as f64 / spread as f64)) as i64
            } else {
                0
            }
        })
        .collect()
}

struct TopologyScores<'a> {
    snapshot: &'a Snapshot,
    pod: &'a PendingPod,
    by_pair: PairTable<i64>,
}

impl TopologyScores<'_> {
    /// What one bound pod adds, at its node's pairs.
    fn existing_pod(&mut self, bound: &BoundPod, hard_weight: i32) {
        let node = bound.node.0 as usize;
        if self
            .snapshot
            .nodes
            .get(node)
            .is_none_or(|n| n.labels.is_empty())
        {
            return;
        }
        let (snapshot, pod) = (self.snapshot, self.pod);
        let own = &pod.constraints.affinity;
        let theirs = &bound.constraints.affinity;
        // The pod's preferred terms, against the bound pod.
        let sees_bound =
            |t: &AffinityTerm| selects(t, snapshot, &bound.namespace, &bound.constraints.labels);
        // The bound pod's terms, against the pod.
        let sees_pod =
            |t: &AffinityTerm| selects(t, snapshot, &pod.namespace, &pod.constraints.labels);
        self.weighted(&own.preferred, node, 1, sees_bound);
        self.weighted(&own.preferred_anti, node, -1, sees_bound);
        if hard_weight > 0 {
            for t in &theirs.required {
                if sees_pod(t) {
                    self.add(t, node, i64::from(hard_weight));
                }
            }
        }
        self.weighted(&theirs.preferred, node, 1, sees_pod);
        self.weighted(&theirs.preferred_anti, node, -1, sees_pod);
    }

    fn weighted(
        &mut self,
        terms: &[WeightedTerm],
        node: usize,
        sign: i64,
        matches: impl Fn(&AffinityTerm) -> bool,
    ) {
        for w in terms {
            if matches(&w.term) {
                self.add(&w.term, node, sign * i64::from(w.weight));
            }
        }
    }

    fn add(&mut self, term: &AffinityTerm, node: usize, weight: i64) {
        let key = self.snapshot.strings.get(&term.topology_key);
        if let Some(p) = pair(self.snapshot, node, key) {
            self.by_pair.add(p, weight);
        }
    }
}
