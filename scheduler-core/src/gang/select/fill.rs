//! Placing members on a fixed set of nodes, one at a time, each on the node
//! that is best for the strategy right now.

use super::prepared::Prepared;
use gputopo_api::PlacementStrategy;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One member placed: member index, node position, GPUs, GPU-set score.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placed {
    pub(crate) member: u32,
    pub(crate) position: u32,
    pub(crate) gpus: u32,
    pub(crate) score: u8,
}

/// Every member placed, and the quality they add up to.
#[derive(Clone, Debug, Default)]
pub(crate) struct Filled {
    pub(crate) placed: Vec<Placed>,
    pub(crate) quality: i64,
}

/// A node's next pick in the heap: the strategy's key, then the lower node id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    primary: i64,
    secondary: i64,
    id: Reverse<usize>,
    local: u32,
    gpus: u32,
    score: u8,
}

/// Members placed one at a time on a set of nodes, keeping each node's state.
pub(crate) struct Filler<'p, 'a> {
    prep: &'p Prepared<'a>,
    /// Node positions, in input order.
    nodes: Vec<u32>,
    free: Vec<u32>,
    /// Gang members hosted so far, per node.
    hosted: Vec<u32>,
    heap: BinaryHeap<Entry>,
    group: usize,
}

impl<'p, 'a> Filler<'p, 'a> {
    pub(crate) fn new(prep: &'p Prepared<'a>, nodes: Vec<u32>) -> Self {
        let free = nodes.iter().map(|&p| prep.free[p as usize]).collect();
        let hosted = vec![0; nodes.len()];
        Filler {
            prep,
            nodes,
            free,
            hosted,
            heap: BinaryHeap::new(),
            group: 0,
        }
    }

    /// Starts placing members of request group `group`.
    pub(crate) fn start_group(&mut self, group: usize) {
        self.group = group;
        self.heap.clear();
        for local in 0..self.nodes.len() as u32 {
            self.push(local);
        }
    }

    /// Places one member of the current group on the best node, if any can host it.
    pub(crate) fn take(&mut self) -> Option<(u32, u32, u8)> {
        let best = self.heap.pop()?;
        let local = best.local as usize;
        self.free[local] &= !best.gpus;
        self.hosted[local] += 1;
        self.push(best.local);
        Some((self.nodes[local], best.gpus, best.score))
    }

    fn push(&mut self, local: u32) {
        let l = local as usize;
        if self
            .prep
            .max_per_node
            .is_some_and(|max| self.hosted[l] >= max)
        {
            return;
        }
        let position = self.nodes[l];
        let free = self.free[l];
        let Ok(pick) = self.prep.picker(position, self.group).pick(free) else {
            return;
        };
        let node = &self.prep.nodes[position as usize];
        let quality = i64::from(pick.score) + i64::from(node.node_score);
        let (primary, secondary) = match self.prep.strategy {
            PlacementStrategy::Balanced => (quality, 0),
            PlacementStrategy::Consolidated => (-i64::from(free.count_ones()), quality),
            PlacementStrategy::Distributed => (-i64::from(self.hosted[l]), quality),
        };
        self.heap.push(Entry {
            primary,
            secondary,
            id: Reverse(node.id),
            local,
            gpus: pick.gpus,
            score: pick.score,
        });
    }
}

/// Places every member on `nodes`, largest requests first. `Err` carries how
/// many members were placed before one found no node.
pub(crate) fn fill_all(prep: &Prepared<'_>, nodes: Vec<u32>) -> Result<Filled, u32> {
    let mut filler = Filler::new(prep, nodes);
    let mut filled = Filled::default();
    for (g, group) in prep.groups.iter().enumerate() {
        filler.start_group(g);
        for &member in &group.members {
            let Some((position, gpus, score)) = filler.take() else {
                return Err(filled.placed.len() as u32);
            };
            filled.record(prep, member, position, gpus, score);
        }
    }
    Ok(filled)
}

/// Places `count` members of the first request group on `nodes`, numbering
/// them from `next` (a sliced gang's members are alike). `false` when one
/// found no node.
pub(crate) fn fill_count(
    prep: &Prepared<'_>,
    nodes: Vec<u32>,
    count: u64,
    filled: &mut Filled,
    next: &mut u32,
) -> bool {
    let mut filler = Filler::new(prep, nodes);
    filler.start_group(0);
    for _ in 0..count {
        let Some((position, gpus, score)) = filler.take() else {
            return false;
        };
        filled.record(prep, *next, position, gpus, score);
        *next += 1;
    }
    true
}

/// Places members round-robin over `leaves` (each a list of node positions),
/// one per leaf per round, skipping leaves that cannot host the next member.
pub(crate) fn fill_round_robin(prep: &Prepared<'_>, leaves: Vec<Vec<u32>>) -> Result<Filled, u32> {
    let mut fillers: Vec<Filler<'_, '_>> = leaves
        .into_iter()
        .map(|nodes| Filler::new(prep, nodes))
        .collect();
    let mut filled = Filled::default();
    let mut cursor = 0usize;
    for (g, group) in prep.groups.iter().enumerate() {
        for filler in &mut fillers {
            filler.start_group(g);
        }
        for &member in &group.members {
            let count = fillers.len();
            let hit = (0..count).find_map(|step| {
                let at = (cursor + step) % count;
                fillers[at].take().map(|taken| (at, taken))
            });
            let Some((at, (position, gpus, score))) = hit else {
                return Err(filled.placed.len() as u32);
            };
            cursor = at + 1;
            filled.record(prep, member, position, gpus, score);
        }
    }
    Ok(filled)
}

impl Filled {
    fn record(&mut self, prep: &Prepared<'_>, member: u32, position: u32, gpus: u32, score: u8) {
        let node = &prep.nodes[position as usize];
        self.quality += i64::from(score) + i64::from(node.node_score);
        self.placed.push(Placed {
            member,
            position,
            gpus,
            score,
        });
    }
}
