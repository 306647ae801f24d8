//! The exact search for nodes of up to 16 GPUs: every feasible `k`-subset is
//! ranked on the design's full order with three table lookups.
//!
//! Cost per query: `C(m, k)` subsets of the `m` eligible free GPUs (70 for
//! 4 of 8, 12,870 for 8 of 16), each `O(k)` to enumerate plus `O(1)` to rank.

use super::mask::for_each_k_subset;
use super::query::Winner;
use super::request::DecidedBy;
use super::shape::NodeShape;
use super::tables::LeftoverKey;
use gputopo_api::Collective;

const QUALITY_SHIFT: u32 = 103;
const NUMA_SHIFT: u32 = 95;
const LEFTOVER_SHIFT: u32 = 32;

/// One integer whose order is the design's order: bottleneck (higher better),
/// then NUMA nodes (fewer better), then the leftover measure (higher better),
/// then the lexicographically lower index set. The last field is the mask's bit
/// reversal: of two equal-size sets, the one holding the lowest GPU where they
/// differ is the lexicographically lower list, and its reversal is larger.
pub(crate) fn candidate_key(quality: u8, numa_nodes: u8, leftover: LeftoverKey, set: u32) -> u128 {
    (u128::from(quality) << QUALITY_SHIFT)
        | (u128::from(u8::MAX - numa_nodes) << NUMA_SHIFT)
        | (u128::from(leftover) << LEFTOVER_SHIFT)
        | u128::from(set.reverse_bits())
}

fn key_set(key: u128) -> u32 {
    (key as u32).reverse_bits()
}

fn key_quality(key: u128) -> u8 {
    (key >> QUALITY_SHIFT) as u8
}

fn key_numa(key: u128) -> u8 {
    u8::MAX - (key >> NUMA_SHIFT) as u8
}

fn key_leftover(key: u128) -> LeftoverKey {
    ((key >> LEFTOVER_SHIFT) as u64) & ((1u64 << 63) - 1)
}

/// The best and second-best candidate keys seen, and how many were offered.
#[derive(Default)]
pub(crate) struct Podium {
    best: u128,
    second: u128,
    offered: u32,
}

impl Podium {
    pub(crate) fn offer(&mut self, key: u128) {
        self.offered += 1;
        if key > self.best {
            self.second = self.best;
            self.best = key;
        } else if key > self.second && key != self.best {
            self.second = key;
        }
    }

    pub(crate) fn best_key(&self) -> Option<u128> {
        (self.offered > 0).then_some(self.best)
    }

    pub(crate) fn winner(&self) -> Option<Winner> {
        let best = self.best_key()?;
        let decided_by = if self.second == 0 {
            DecidedBy::OnlyCandidate
        } else {
            let top_differing_bit = 127 - (best ^ self.second).leading_zeros();
            match top_differing_bit {
                b if b >= QUALITY_SHIFT => DecidedBy::Bottleneck,
                b if b >= NUMA_SHIFT => DecidedBy::NumaNodes,
                b if b >= LEFTOVER_SHIFT => DecidedBy::Leftover,
                _ => DecidedBy::LowestIndices,
            }
        };
        Some(Winner {
            gpus: key_set(best),
            quality: key_quality(best),
            numa_nodes: key_numa(best),
            leftover: key_leftover(best),
            decided_by,
            runner_up: if self.second == 0 {
                0
            } else {
                key_set(self.second)
            },
            candidates: self.offered,
        })
    }
}

/// The best `k`-subset of one of `groups` whose every pair reaches
/// `nvlink_floor` (0: no floor), leaving `base` minus the set as leftover.
pub(crate) fn search(
    shape: &NodeShape,
    groups: &[u32],
    k: u32,
    collective: Collective,
    nvlink_floor: u8,
    base: u32,
) -> Option<Winner> {
    let (ring, all_to_all, leftover) = shape.tables.exact_slices()?;
    let numa = shape.numa_count.as_deref()?;
    let quality = match collective {
        Collective::Ring => ring,
        Collective::AllToAll => all_to_all,
    };
    let mut podium = Podium::default();
    for &group in groups {
        for_each_k_subset(group, k, |set| {
            let s = set as usize;
            if all_to_all[s] < nvlink_floor {
                return;
            }
            let left = (base & !set) as usize;
            podium.offer(candidate_key(quality[s], numa[s], leftover[left], set));
        });
    }
    podium.winner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_follows_the_design_order() {
        let base = candidate_key(5, 1, 10, 0b0011);
        assert!(candidate_key(6, 4, 0, 0b1100) > base, "bottleneck first");
        assert!(
            candidate_key(5, 0, 0, 0b1100) > base,
            "then fewer NUMA nodes"
        );
        assert!(candidate_key(5, 1, 11, 0b1100) > base, "then leftover");
        assert!(base > candidate_key(5, 1, 10, 0b0101), "then lower indices");
        assert!(candidate_key(5, 1, 10, 0b1_0000_0011) > candidate_key(5, 1, 10, 0b0_0000_0101));
    }

    #[test]
    fn podium_reports_the_deciding_rule() {
        let mut p = Podium::default();
        p.offer(candidate_key(5, 1, 10, 0b0011));
        assert_eq!(
            p.winner().map(|w| w.decided_by),
            Some(DecidedBy::OnlyCandidate)
        );
        p.offer(candidate_key(5, 2, 10, 0b0101));
        let w = p.winner().expect("two candidates");
        assert_eq!((w.gpus, w.numa_nodes, w.leftover), (0b0011, 1, 10));
        assert_eq!(
            (w.decided_by, w.runner_up, w.candidates),
            (DecidedBy::NumaNodes, 0b0101, 2)
        );
        p.offer(candidate_key(5, 1, 10, 0b1001));
        assert_eq!(
            p.winner().map(|w| w.decided_by),
            Some(DecidedBy::LowestIndices)
        );
    }
}
