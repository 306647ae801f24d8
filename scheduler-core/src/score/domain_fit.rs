//! The domain-fit part: best fit at the level of network domains, so that
//! whole domains (racks, leaves, spines, GPU cliques) stay free for the
//! gangs that need one whole.
//!
//! Kueue's topology-aware scheduling fills the domain with the least free
//! capacity that still holds a workload (its `BestFit` ends on the tightest
//! domain, `LeastFreeCapacity` starts from it), and KAI-Scheduler sorts a
//! tier's domains by the job's share of their free GPUs, fullest first.
//! Both count free capacity, not a share of the domain; this part does the
//! same, and adds the step that matters to a gang: a domain nobody uses yet
//! is worth keeping whole, so any domain in use comes before it.
//!
//! Per tier, the node's domain there scores
//!
//! * 0 when none of its GPUs is in use;
//! * `0.5 + 0.5·(1 − f / F)` when some are, `f` its GPUs left free after
//!   this pod's, `F` the most GPUs any domain of that tier has (so the
//!   fullest domain, in GPUs left, scores highest whatever its size).
//!
//! A node's value is the mean over its tiers weighted `2^t` (`t` 0 for the
//! outermost): the innermost counts more than all the outer ones together,
//! so a node in a partly used leaf (at least 0.5) always beats one in an
//! untouched leaf (below 0.5) and the outer tiers order nodes within that.
//! Tiers where the node has no domain, or whose domain has no GPUs, do not
//! count; a node outside every domain scores 0.5 (no whole domain to keep).
//!
//! Per decision the part reads each domain once (its GPU counts are kept by
//! the snapshot as pods come and go) into a value per domain as a node's
//! innermost; per node it is one lookup.

use crate::config::MAX_TIERS;
use crate::filter::PodContext;
use crate::snapshot::Hot;
use gputopo_api::PlacementStrategy;

/// What a node outside every network domain scores.
const OUTSIDE: f64 = 0.5;

/// The part's value per domain, for the nodes whose innermost domain it is.
pub(super) struct DomainFit {
    by_innermost: Vec<f64>,
}

impl DomainFit {
    /// `None` where the part does not apply: its weight is 0, the pod asks
    /// for no GPU or is `distributed` (it spreads on purpose), or no tier
    /// of the cluster has two domains with GPUs (nothing to choose between).
    pub(super) fn of(ctx: &PodContext<'_>, weight: u32) -> Option<DomainFit> {
        let gpu_pod = ctx.wants_whole_gpus() || ctx.wants_shared_gpu();
        if weight == 0
            || !gpu_pod
            || ctx.pod.request.placement_strategy == PlacementStrategy::Distributed
        {
            return None;
        }
        let domains = &ctx.snapshot.domains;
        let mut largest = [0u32; MAX_TIERS];
        let mut with_gpus = [0u32; MAX_TIERS];
        for d in domains {
            if let (Some(l), Some(n)) = (largest.get_mut(d.tier()), with_gpus.get_mut(d.tier()))
                && d.gpu_count() > 0
            {
                *l = (*l).max(d.gpu_count());
                *n += 1;
            }
        }
        if with_gpus.iter().all(|&n| n < 2) {
            return None;
        }
        let taking = ctx.set_request().map_or(0, |r| r.gpus);
        let own: Vec<Option<f64>> = domains
            .iter()
            .map(|d| {
                let tier_largest = largest.get(d.tier()).copied().unwrap_or(0);
                domain_value(d.gpu_count(), d.gpus_used(), taking, tier_largest)
            })
            .collect();
        let by_innermost = (0..domains.len())
            .map(|i| {
                let (mut sum, mut weights) = (0.0, 0.0);
                let mut at = Some(i);
                // A path is at most MAX_TIERS long; the bound guards a cycle.
                for _ in 0..MAX_TIERS {
                    let Some(d) = at else { break };
                    if let Some(v) = own[d] {
                        let w = f64::from(1u32 << domains[d].tier().min(MAX_TIERS - 1));
                        sum += w * v;
                        weights += w;
                    }
                    at = domains[d].parent().map(|p| p.index());
                }
                if weights > 0.0 {
                    sum / weights
                } else {
                    OUTSIDE
                }
            })
            .collect();
        Some(DomainFit { by_innermost })
    }

    /// The node's value, 0–1.
    #[inline]
    pub(super) fn value(&self, hot: &Hot) -> f64 {
        hot.domain
            .checked_sub(1)
            .and_then(|d| self.by_innermost.get(d as usize))
            .copied()
            .unwrap_or(OUTSIDE)
    }
}

/// One domain's value for a pod taking `taking` whole GPUs there: 0
/// untouched, else `0.5 + 0.5·(1 − free after / largest)`; `None` for a
/// domain without GPUs (its tier does not count).
pub fn domain_value(gpus: u32, used: u32, taking: u32, largest: u32) -> Option<f64> {
    if gpus == 0 {
        return None;
    }
    if used == 0 {
        return Some(0.0);
    }
    let free_after = gpus.saturating_sub(used.saturating_add(taking));
    let largest = largest.max(gpus);
    Some(0.5 + 0.5 * (1.0 - f64::from(free_after) / f64::from(largest)))
}

/// Per domain, the share of its GPUs in use (`NaN` for a domain without
/// GPUs): what the allocation part reads of a node's innermost domain.
pub(super) fn domain_busy(ctx: &PodContext<'_>) -> Vec<f64> {
    ctx.snapshot
        .domains
        .iter()
        .map(|d| {
            if d.gpu_count() == 0 {
                // No GPUs to be busy: the node's own share decides alone.
                f64::NAN
            } else {
                (f64::from(d.gpus_used()) / f64::from(d.gpu_count())).min(1.0)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::domain_value;

    #[test]
    fn untouched_domains_score_lowest_and_the_fullest_highest() {
        // An untouched leaf, whatever its size.
        assert_eq!(domain_value(16, 0, 1, 16), Some(0.0));
        assert_eq!(domain_value(8, 0, 8, 16), Some(0.0));
        // Partly used: at least 0.5, more the fewer GPUs it leaves free.
        let light = domain_value(16, 1, 1, 16).unwrap();
        let heavy = domain_value(16, 12, 1, 16).unwrap();
        assert!(
            0.5 <= light && light < heavy && heavy < 1.0,
            "{light} {heavy}"
        );
        // Filled by this pod: 1.
        assert_eq!(domain_value(16, 15, 1, 16), Some(1.0));
        // Free GPUs count, not the share: 4 left of 8 and 4 left of 16 alike.
        assert_eq!(domain_value(8, 4, 0, 16), domain_value(16, 12, 0, 16));
        // No GPUs: the tier does not count.
        assert_eq!(domain_value(0, 0, 1, 16), None);
    }
}
