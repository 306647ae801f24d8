//! Slices: members in order cut into slices of `size`, each slice inside one
//! domain of its tier; several layers nest (slices of 16 per rack, each cut
//! into slices of 4 per node).
//!
//! The search runs on the tree cut at the outermost layer's tier, so its
//! "leaves" are the domains slices stay in; a domain offers the member slots
//! of the whole slices it holds (`slots`). Layers below count whole slices
//! per inner domain, innermost first: an inner domain with room for 7
//! members offers one slice of 4, not 7 slots. Filling (`take`) gives each
//! domain a whole number of slices, in domain name order, and the ranks are
//! then laid out in the same order (`outcome.rs`), so every run of `size`
//! consecutive members shares a domain.

use super::Problem;
use super::fill::{Filled, fill_count};
use crate::gang::domain::natural_cmp;
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// A node's group at one tier: its labels down to that tier, or the node
/// alone where it lacks the tier's label (no locality assumed).
#[derive(Clone, Debug, PartialEq, Eq)]
struct GroupKey {
    path: String,
    alone: Option<u32>,
}

impl Ord for GroupKey {
    fn cmp(&self, other: &Self) -> Ordering {
        natural_cmp(&self.path, &other.path).then(self.alone.cmp(&other.alone))
    }
}

impl PartialOrd for GroupKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Problem<'_> {
    /// Member slots usable by whole slices of layer `layer` and those inside
    /// it, on `nodes` (positions); `layer == layers.len()` counts every slot.
    pub(super) fn slots(&self, nodes: &[u32], layer: usize) -> u64 {
        let Some(slice) = self.layers.get(layer) else {
            return nodes
                .iter()
                .map(|&p| u64::from(self.node_cap[p as usize]))
                .sum();
        };
        let size = u64::from(slice.size);
        self.groups(nodes, slice.tier)
            .values()
            .map(|group| self.slots(group, layer + 1) / size * size)
            .sum()
    }

    /// Hands `count` members (whole slices of `layer`) to `nodes`: per
    /// innermost group, its nodes and how many members it takes.
    fn take(&self, nodes: &[u32], layer: usize, count: u64, out: &mut Vec<(Vec<u32>, u64)>) {
        let Some(slice) = self.layers.get(layer) else {
            out.push((nodes.to_vec(), count));
            return;
        };
        let size = u64::from(slice.size);
        let mut left = count;
        for group in self.groups(nodes, slice.tier).values() {
            if left == 0 {
                break;
            }
            let here = (self.slots(group, layer + 1) / size * size).min(left);
            if here > 0 {
                self.take(group, layer + 1, here, out);
                left -= here;
            }
        }
    }

    /// Fills the chosen slice domains (search leaves, in id order): each
    /// takes as many whole slices as it holds until every member has a
    /// place. `Err` carries how many members were placed.
    pub(super) fn fill_sliced(&self, leaves: &[u32]) -> Result<Filled, u32> {
        let mut sorted = leaves.to_vec();
        sorted.sort_unstable();
        let mut left = self.need;
        let mut filled = Filled::default();
        let mut member = 0u32;
        for leaf in sorted {
            if left == 0 {
                break;
            }
            let here = self.leaf_cap[leaf as usize].min(left);
            if here == 0 {
                continue;
            }
            let nodes = self.nodes_of(&[leaf]);
            let mut parts = Vec::new();
            self.take(&nodes, 0, here, &mut parts);
            for (group, count) in parts {
                if !fill_count(&self.prep, group, count, &mut filled, &mut member) {
                    return Err(filled.placed.len() as u32);
                }
            }
            left -= here;
        }
        if left == 0 {
            Ok(filled)
        } else {
            Err(filled.placed.len() as u32)
        }
    }

    /// `nodes` grouped by their domain at `tier`, in name order.
    fn groups(&self, nodes: &[u32], tier: usize) -> BTreeMap<GroupKey, Vec<u32>> {
        let mut groups: BTreeMap<GroupKey, Vec<u32>> = BTreeMap::new();
        for &p in nodes {
            groups.entry(self.group_key(p, tier)).or_default().push(p);
        }
        groups
    }

    fn group_key(&self, position: u32, tier: usize) -> GroupKey {
        let tiers = &self.prep.nodes[position as usize].tiers;
        match tiers.get(tier) {
            Some(Some(_)) => GroupKey {
                path: path_to(tiers, tier + 1),
                alone: None,
            },
            _ => GroupKey {
                path: path_to(tiers, tier),
                alone: Some(position),
            },
        }
    }
}

/// The node's labels at tiers `0..end`, joined with `/` (a missing label
/// is empty).
pub(super) fn path_to(tiers: &[Option<String>], end: usize) -> String {
    tiers
        .iter()
        .take(end)
        .map(|t| t.as_deref().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("/")
}
