//! The `distributed` strategy: members spread round-robin over leaves,
//! consecutive leaves under different parents.

use super::fill::fill_round_robin;
use super::{Choice, Problem};
use std::collections::HashMap;

impl Problem<'_> {
    /// Round-robin over the scope's leaves, interleaved across parents.
    pub(super) fn distributed(&self, scope: Option<u32>) -> Option<Choice> {
        let mut leaves: Vec<u32> = self.useful_leaves(scope);
        let total: u64 = leaves.iter().map(|&l| self.leaf_cap[l as usize]).sum();
        if total < self.need {
            return None;
        }
        leaves.sort_unstable();
        let depth = self.tree.depth;
        let parent = |l: u32| (depth >= 2).then(|| self.tree.domain(l).ancestors[depth - 2]);
        let mut seen: HashMap<Option<u32>, usize> = HashMap::new();
        let mut keyed: Vec<(usize, Option<u32>, u32)> = leaves
            .iter()
            .map(|&l| {
                let p = parent(l);
                let slot = seen.entry(p).or_default();
                *slot += 1;
                (*slot, p, l)
            })
            .collect();
        keyed.sort_unstable();
        let order: Vec<u32> = keyed.into_iter().map(|(_, _, l)| l).collect();
        let lists = order.iter().map(|&l| self.nodes_of(&[l])).collect();
        let filled = fill_round_robin(&self.prep, lists).ok()?;
        let mut used: Vec<u32> = filled
            .placed
            .iter()
            .map(|p| self.tree.node_leaf[p.position as usize])
            .collect();
        used.sort_unstable();
        used.dedup();
        Some(Choice {
            rank: self.rank(&used),
            quality: filled.quality,
            leaves: used,
            filled,
            compared: order.len(),
            decided_by: "spreading one member per leaf per round",
        })
    }
}
