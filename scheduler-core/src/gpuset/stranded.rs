//! How fragmented a node's free GPUs are, for metrics and for the simulator.
//!
//! Both measures look at free *whole* GPUs (listed, MIG disabled).

use super::mask::{bit, bits, for_each_k_subset};
use super::shape::NodeShape;
use super::tables::NONE;
use gputopo_api::{Collective, LinkClass};
use std::collections::HashMap;

/// Search steps after which [`full_nvlink_slots`] returns the best packing found so far.
const PACKING_BUDGET: u32 = 1 << 20;

/// Free GPUs that no `size`-GPU request could use at this node's full quality:
/// those in no free `size`-set whose ring bottleneck equals the best ring any
/// `size` GPUs of the *empty* node reach.
///
/// Relative to the node's own best, so it reads the same on an NVSwitch board
/// (only a shortage of free GPUs strands them), a DGX-1 (a GPU whose NV2 partners
/// are busy is stranded for pairs) and a PCIe box (a GPU whose PIX partner is
/// busy is stranded for pairs). Sizes 0 and 1 strand nothing; a size larger
/// than the free GPUs strands them all. Exact for nodes of up to 16 GPUs
/// (`C(m, size)` table lookups); above that, greedy growth from each free GPU
/// decides coverage, so the count may be too high.
pub fn stranded_free_gpus(shape: &NodeShape, free_mask: u32, size: u32) -> u32 {
    let usable = free_mask & shape.whole_gpus;
    let free = usable.count_ones();
    if size <= 1 {
        return 0;
    }
    if size > free {
        return free;
    }
    let target = shape.best_empty_level(size, Collective::Ring);
    if target == NONE {
        return free;
    }
    let covered = if shape.is_exact() {
        let mut covered = 0u32;
        for_each_k_subset(usable, size, |set| {
            if covered | set != covered && shape.tables.ring_table(set) >= Some(target) {
                covered |= set;
            }
        });
        covered
    } else {
        super::heuristic::ring_cover(shape, usable, size, target)
    };
    (usable & !covered).count_ones()
}

/// Complete, fully NVLink-connected `size`-GPU slots left: the largest number
/// of disjoint sets of `size` free GPUs in which every pair is joined by
/// NVLink (any `NV<k>`). Size 1: every free GPU; size 0: none.
///
/// An exact maximum packing by branch and bound over the lowest free GPU
/// (it joins one clique containing it, or none), memoised by remaining mask
/// and cut at the bound `remaining / size`. Past 2^20 steps (adversarial
/// shapes, mostly above 16 GPUs) it returns the best packing found, a lower bound.
pub fn full_nvlink_slots(shape: &NodeShape, free_mask: u32, size: u32) -> u32 {
    let usable = free_mask & shape.whole_gpus;
    match size {
        0 => return 0,
        1 => return usable.count_ones(),
        _ => {}
    }
    let Some(nvlink) = shape.tables.level_at_least(LinkClass::Nv(1)) else {
        return 0;
    };
    let adjacency: Vec<u32> = (0..shape.gpu_count())
        .map(|i| shape.tables.neighbours_at_least(nvlink, i) & usable)
        .collect();
    let mut packer = Packer {
        adjacency: &adjacency,
        size,
        memo: HashMap::new(),
        steps: 0,
    };
    packer.best(usable)
}

struct Packer<'a> {
    adjacency: &'a [u32],
    size: u32,
    memo: HashMap<u32, u32>,
    steps: u32,
}

impl Packer<'_> {
    /// The most disjoint NVLink cliques of `size` inside `remaining`.
    fn best(&mut self, remaining: u32) -> u32 {
        let bound = remaining.count_ones() / self.size;
        if bound == 0 {
            return 0;
        }
        if let Some(&known) = self.memo.get(&remaining) {
            return known;
        }
        let lowest = remaining.trailing_zeros();
        let rest = remaining & !bit(lowest);
        let mut best = 0u32;
        let partners = rest & self.adjacency[lowest as usize];
        self.cliques_with(rest, partners, self.size - 1, bit(lowest), bound, &mut best);
        if best < bound && self.steps < PACKING_BUDGET {
            best = best.max(self.best(rest));
        }
        self.memo.insert(remaining, best);
        best
    }

    /// Extends `chosen` by `need` more GPUs of `candidates` (each joined to all
    /// chosen) and scores the rest of `rest` after taking the clique.
    fn cliques_with(
        &mut self,
        rest: u32,
        candidates: u32,
        need: u32,
        chosen: u32,
        bound: u32,
        best: &mut u32,
    ) {
        self.steps = self.steps.saturating_add(1);
        if need == 0 {
            let value = 1 + self.best(rest & !chosen);
            *best = (*best).max(value);
            return;
        }
        let mut left = candidates;
        for u in bits(candidates) {
            if *best >= bound || self.steps >= PACKING_BUDGET || left.count_ones() < need {
                return;
            }
            left &= !bit(u);
            let next = left & self.adjacency[u as usize];
            self.cliques_with(rest, next, need - 1, chosen | bit(u), bound, best);
        }
    }
}
