//! The choice with GPUs already fixed and a caller's test on the whole set:
//! what Dynamic Resource Allocation needs when a pod's GPUs come from several
//! requests with different candidates (`crate::dra`).
//!
//! Same order as [`NodeShape::pick`] (bottleneck, NUMA nodes, leftover, lower
//! indices), judged on the whole set `fixed ∪ chosen`; same hard constraints,
//! applied to the chosen GPUs (MIG, memory) and to the whole set (NVLink
//! level, one NUMA node). Uncached: every `k`-subset of the eligible free GPUs
//! is visited, so it is meant for nodes of up to [`MAX_EXACT_GPUS`] GPUs; on
//! larger nodes the per-set measures are the heuristic's (see `heuristic`).

use super::exact::{Podium, candidate_key};
use super::mask::for_each_k_subset;
use super::request::{NoFitReason, SetPick, SetRequest};
use super::shape::NodeShape;
use super::tables::{MAX_EXACT_GPUS, NONE};
use gputopo_api::LinkClass;

/// The most subsets [`NodeShape::pick_constrained`] visits; beyond it the
/// search is refused (`None` from [`constrained_subsets`]).
pub const MAX_CONSTRAINED_SUBSETS: u64 = 1 << 20;

/// How many subsets a constrained pick of `k` among `m` eligible GPUs visits,
/// `None` above [`MAX_CONSTRAINED_SUBSETS`].
pub fn constrained_subsets(m: u32, k: u32) -> Option<u64> {
    if k > m {
        return Some(0);
    }
    let k = k.min(m - k);
    let mut c: u64 = 1;
    for i in 0..k {
        c = c * u64::from(m - i) / u64::from(i + 1);
        if c > MAX_CONSTRAINED_SUBSETS {
            return None;
        }
    }
    Some(c)
}

impl NodeShape {
    /// The best set of `request.gpus` GPUs that contains every GPU of `fixed`,
    /// takes the rest from `free`, and that `accept` allows. `Err` names the
    /// first hard constraint that leaves too few GPUs (counted over the GPUs to
    /// choose); `Ok(None)` when sets remain but none is accepted, or the search
    /// would visit more than [`MAX_CONSTRAINED_SUBSETS`] subsets.
    ///
    /// With `fixed == 0` and an `accept` that allows everything, the answer is
    /// [`NodeShape::pick`]'s on nodes of up to 16 GPUs.
    pub fn pick_constrained(
        &self,
        free: u32,
        fixed: u32,
        request: &SetRequest,
        accept: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Option<SetPick>, NoFitReason> {
        let fixed = fixed & self.present;
        let free = free & self.present & !fixed;
        let k = request.gpus.saturating_sub(fixed.count_ones());
        let method = self.default_method();
        let query = self.canonical(free, request);
        if free.count_ones() < k {
            return Err(NoFitReason::TooFewFreeGpus {
                requested: k,
                free: free.count_ones(),
            });
        }
        let pool = self.eligible(free, k, request.allow_mig, request.min_memory_mib)?;
        let groups: Vec<u32> = if request.single_numa_node && !self.one_numa_node {
            let in_pool = self
                .numa_groups
                .iter()
                .filter(|g| fixed & !g.gpus == 0)
                .map(|g| g.gpus & pool);
            let largest = in_pool.clone().map(u32::count_ones).max().unwrap_or(0);
            if largest < k {
                return Err(NoFitReason::SingleNumaNode {
                    requested: request.gpus,
                    largest_group: largest + fixed.count_ones(),
                });
            }
            in_pool.filter(|g| g.count_ones() >= k).collect()
        } else {
            vec![pool]
        };
        let visits: Option<u64> = groups
            .iter()
            .map(|g| constrained_subsets(g.count_ones(), k))
            .try_fold(0u64, |sum, c| c.map(|c| sum + c));
        if visits.is_none_or(|v| v > MAX_CONSTRAINED_SUBSETS) {
            return Ok(None);
        }
        let nvlink_floor = match request.min_nvlink_level {
            None | Some(0) => NONE,
            Some(level) => self
                .tables
                .level_at_least(LinkClass::Nv(level))
                .unwrap_or(self.tables.top_level().saturating_add(1)),
        };
        let base = free & self.whole_gpus;
        let mut podium = Podium::default();
        for &group in &groups {
            for_each_k_subset(group, k, |chosen| {
                let set = chosen | fixed;
                if set.count_ones() > 1 && self.tables.all_to_all_level(set) < nvlink_floor {
                    return;
                }
                if !accept(set) {
                    return;
                }
                let numa = u8::try_from(self.numa_nodes(set)).unwrap_or(u8::MAX);
                let left = self.leftover_key(base & !set, method);
                podium.offer(candidate_key(
                    self.quality_level(set, request.collective),
                    numa,
                    left,
                    set,
                ));
            });
        }
        let Some(winner) = podium.winner() else {
            return Ok(None);
        };
        let before = self.leftover_key(base, method);
        let scored = super::query::Query {
            k: request.gpus,
            ..query
        };
        let score = self.score(&scored, &winner, before, base & !winner.gpus);
        let method = if self.gpu_count() <= MAX_EXACT_GPUS {
            super::request::Method::Exact
        } else {
            super::request::Method::Heuristic
        };
        Ok(Some(self.set_pick(&winner, base, score, method)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_counts_are_binomials_and_capped() {
        assert_eq!(constrained_subsets(8, 4), Some(70));
        assert_eq!(constrained_subsets(16, 8), Some(12_870));
        assert_eq!(constrained_subsets(3, 5), Some(0));
        assert_eq!(constrained_subsets(32, 16), None);
    }
}
