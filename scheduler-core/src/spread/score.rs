//! The PodTopologySpread score over `ScheduleAnyway` constraints.
//!
//! Domains are those of the feasible nodes (nodes lacking a key are left
//! out and score 0, except under the system defaults); a domain's count
//! sums the matching pods of every node its inclusion policies admit, but
//! `kubernetes.io/hostname` counts the node's own pods. A node's raw score
//! is `Σ count × ln(domains + 2) + (maxSkew − 1)` over the constraints
//! whose key it has, rounded; fewer pods is better, so the normalised
//! score is `100 × (max + min − raw) / max` (100 for all when max is 0).

use super::NodeEligibility;
use super::constraints::{Applied, HOSTNAME, eligibility_of, includes};
use super::domains::Domains;
use crate::config::SpreadDefaults;
use crate::pod::PendingPod;
use crate::pod_constraints::WhenUnsatisfiable;
use crate::snapshot::Snapshot;

/// Per node of `feasible`, its score 0–100 after upstream's normalisation;
/// `None` when no `ScheduleAnyway` constraint applies to the pod.
pub(crate) fn normalized_scores(
    snapshot: &Snapshot,
    pod: &PendingPod,
    defaults: &SpreadDefaults,
    feasible: &[usize],
    eligible: &dyn Fn(usize) -> NodeEligibility,
) -> Option<Vec<i64>> {
    let applied = Applied::of_pod(snapshot, pod, defaults, WhenUnsatisfiable::ScheduleAnyway);
    if applied.is_empty() {
        return None;
    }
    let list = &applied.list;
    let per_node_key: Vec<bool> = list.iter().map(|c| c.topology_key == HOSTNAME).collect();
    let mut domains: Vec<Domains> = applied
        .keys(snapshot)
        .into_iter()
        .map(|k| Domains::new(snapshot, k))
        .collect();
    let has_all_keys = |domains: &[Domains], index: usize| {
        domains.iter().all(|d| d.value(snapshot, index).is_some())
    };
    let ignored: Vec<bool> = feasible
        .iter()
        .map(|&i| applied.require_all_keys && !has_all_keys(&domains, i))
        .collect();
    for (&index, _) in feasible.iter().zip(&ignored).filter(|(_, ig)| !**ig) {
        for (d, _) in domains.iter_mut().zip(&per_node_key).filter(|(_, h)| !**h) {
            let slot = d.slot(snapshot, index);
            d.touch(slot);
        }
    }
    let scored = ignored.iter().filter(|i| !**i).count();
    let weights: Vec<f64> = domains
        .iter()
        .zip(&per_node_key)
        .map(|(d, &hostname)| {
            let size = if hostname { scored } else { d.len() };
            ((size + 2) as f64).ln()
        })
        .collect();

    let per_node = applied.pods_per_node(snapshot, pod);
    if per_node_key.contains(&false) {
        let reads_eligibility = applied.reads_eligibility();
        for index in 0..snapshot.len() {
            if applied.require_all_keys && !has_all_keys(&domains, index) {
                continue;
            }
            let eligibility = eligibility_of(reads_eligibility, eligible, index);
            for (i, c) in list.iter().enumerate() {
                if per_node_key[i] || !includes(c, eligibility) {
                    continue;
                }
                let slot = domains[i].slot(snapshot, index);
                if domains[i].is_present(slot) {
                    domains[i].add(slot, per_node.get(index, i));
                }
            }
        }
    }

    let raw: Vec<Option<i64>> = feasible
        .iter()
        .zip(&ignored)
        .map(|(&index, &ignored)| {
            if ignored {
                return None;
            }
            let mut score = 0.0;
            for (i, c) in list.iter().enumerate() {
                let Some(slot) = domains[i].value(snapshot, index) else {
                    continue;
                };
                let count = if per_node_key[i] {
                    per_node.get(index, i)
                } else {
                    domains[i].count(slot)
                };
                score += f64::from(count) * weights[i] + f64::from(c.max_skew - 1);
            }
            Some(score.round() as i64)
        })
        .collect();
    Some(normalize(&raw))
}

/// Upstream's NormalizeScore: fewer pods score higher; ignored nodes 0.
fn normalize(raw: &[Option<i64>]) -> Vec<i64> {
    let scored = raw.iter().flatten();
    let min = scored.clone().copied().min().unwrap_or(0);
    let max = scored.copied().max().unwrap_or(0).max(0);
    raw.iter()
        .map(|s| match *s {
            None => 0,
            Some(_) if max == 0 => 100,
            Some(s) => 100 * (max + min - s) / max,
        })
        .collect()
}
