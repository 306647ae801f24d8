//! `kai`: KAI-Scheduler's topology plugin (`pkg/scheduler/plugins/
//! topology/job_filtering.go`, `node_scoring.go`) with its allocate action
//! (`pkg/scheduler/actions/common/allocate.go`) and node placement
//! (`plugins/nodeplacement/pack.go`), NVIDIA/KAI-Scheduler at `72de64f`
//! (2026-03-07), re-implemented from what the code does; the rules are
//! listed in the module docs of [`super`].

use super::engine::{Members, Policy, View};
use super::fabric::{Fabric, LEAF, RACK, SPINE, lowest};
use super::workload::{Unit, UnitKind};
use std::cmp::Ordering;

pub struct Kai;

/// A domain of the topology tree; `Root` above the spines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dom {
    Root,
    At(usize, usize),
}

impl Dom {
    /// The domain's ID, as KAI orders ties (label values joined; ours are
    /// numbered so that text order is number order).
    fn id(self, fabric: &Fabric) -> [usize; 3] {
        match self {
            Dom::Root => [0; 3],
            Dom::At(SPINE, s) => [s, 0, 0],
            Dom::At(LEAF, l) => [fabric.leaf_spine[l], l, 0],
            Dom::At(_, r) => {
                let l = fabric.rack_leaf[r];
                [fabric.leaf_spine[l], l, r]
            }
        }
    }

    fn level(self) -> Option<usize> {
        match self {
            Dom::Root => None,
            Dom::At(level, _) => Some(level),
        }
    }

    fn contains(self, fabric: &Fabric, node: usize) -> bool {
        match self {
            Dom::Root => true,
            Dom::At(level, i) => fabric.domain(node, level) == i,
        }
    }

    fn children(self, fabric: &Fabric) -> Vec<Dom> {
        match self {
            Dom::Root => (0..fabric.spines).map(|s| Dom::At(SPINE, s)).collect(),
            Dom::At(SPINE, s) => (0..fabric.leaves)
                .filter(|&l| fabric.leaf_spine[l] == s)
                .map(|l| Dom::At(LEAF, l))
                .collect(),
            Dom::At(LEAF, l) => (0..fabric.size.racks)
                .filter(|&r| fabric.rack_leaf[r] == l)
                .map(|r| Dom::At(RACK, r))
                .collect(),
            Dom::At(..) => Vec::new(),
        }
    }
}

/// The free GPUs as the session's statement sees them.
struct Session<'a> {
    fabric: &'a Fabric,
    idle: Vec<u32>,
}

impl Session<'_> {
    fn nodes(&self, d: Dom) -> impl Iterator<Item = usize> + '_ {
        (0..self.fabric.nodes()).filter(move |&n| d.contains(self.fabric, n))
    }

    /// `IdleOrReleasingResources`' GPUs.
    fn idle_gpus(&self, d: Dom) -> u32 {
        self.nodes(d).map(|n| self.idle[n].count_ones()).sum()
    }

    /// `AllocatablePods`: how many pods of `gpus` GPUs its nodes take.
    fn allocatable(&self, d: Dom, gpus: u32) -> u32 {
        self.nodes(d)
            .map(|n| self.idle[n].count_ones() / gpus)
            .sum()
    }

    /// `getJobRatioToFreeResources`: the tasks' GPUs over the domain's
    /// idle GPUs (infinite when it has none).
    fn ratio(&self, d: Dom, task_gpus: u32) -> f64 {
        f64::from(task_gpus) / f64::from(self.idle_gpus(d))
    }

    /// `sortTree` then `reverseLevelOrder`: from `top` down to `depth`,
    /// each parent's children by ratio descending (the fullest first),
    /// then ID; per level, in breadth-first order.
    fn levels(&self, top: Dom, depth: usize, task_gpus: u32) -> Vec<Vec<Dom>> {
        let mut levels = vec![vec![top]];
        while levels
            .last()
            .and_then(|l| l.first())
            .is_some_and(|d| d.level().is_none_or(|l| l < depth))
        {
            let mut next = Vec::new();
            for &d in levels.last().into_iter().flatten() {
                let mut kids = d.children(self.fabric);
                let ratio: Vec<f64> = kids.iter().map(|&k| self.ratio(k, task_gpus)).collect();
                let mut order: Vec<usize> = (0..kids.len()).collect();
                order.sort_by(|&a, &b| {
                    ratio[b]
                        .partial_cmp(&ratio[a])
                        .unwrap_or(Ordering::Equal)
                        .then_with(|| kids[a].id(self.fabric).cmp(&kids[b].id(self.fabric)))
                });
                kids = order.into_iter().map(|i| kids[i]).collect();
                next.extend(kids);
            }
            if next.is_empty() {
                break;
            }
            levels.push(next);
        }
        levels
    }

    /// `lowestCommonDomainID` of a domain's nodes: down while one child
    /// holds them all (stopping at the preferred level when there is one).
    fn lowest_common(&self, mut d: Dom, preferred: Option<usize>) -> Dom {
        loop {
            if d.level().is_some() && d.level() == preferred {
                return d;
            }
            let kids = d.children(self.fabric);
            match kids.as_slice() {
                [only] => d = *only,
                _ => return d,
            }
        }
    }

    /// `allocateTask` for each task on `nodes`: nodes ordered by the
    /// binpack score (fewest idle GPUs first among those that fit), ties
    /// by host name (KAI leaves equal scores in goroutine order).
    fn allocate(&mut self, nodes: &[usize], tasks: u32, gpus: u32) -> Option<Members> {
        let mut out = Vec::with_capacity(tasks as usize);
        for _ in 0..tasks {
            let node = nodes
                .iter()
                .copied()
                .filter(|&n| self.idle[n].count_ones() >= gpus)
                .min_by_key(|&n| (self.idle[n].count_ones(), self.fabric.host_rank[n]))?;
            let mask = lowest(self.idle[node], gpus);
            self.idle[node] &= !mask;
            out.push((node, mask));
        }
        Some(out)
    }

    /// A training gang: the job's candidate domains (preferred level up to
    /// the top, each holding every member), tried in order; in each, every
    /// slice (a child subgroup, required in one rack) takes the first rack
    /// of the domain, fullest first, that holds it; a slice without a rack
    /// rolls the domain back.
    fn structured(&mut self, unit: &Unit, slice: u32, preferred: usize) -> Option<Members> {
        let gpus = unit.gpus;
        let top = self.lowest_common(Dom::Root, Some(preferred));
        if self.allocatable(top, gpus) < unit.members {
            return None;
        }
        let levels = self.levels(top, preferred, unit.members * gpus);
        let mut candidates = Vec::new();
        for level in levels.iter().rev() {
            candidates.extend(
                level
                    .iter()
                    .copied()
                    .filter(|&d| self.allocatable(d, gpus) >= unit.members),
            );
        }
        let start = self.idle.clone();
        'domains: for domain in candidates {
            self.idle.clone_from(&start);
            let mut members = Vec::with_capacity(unit.members as usize);
            for _ in 0..unit.members / slice {
                let lc = self.lowest_common(domain, None);
                if self.allocatable(lc, gpus) < slice {
                    continue 'domains;
                }
                let racks = self.levels(lc, RACK, slice * gpus);
                let racks = racks.last().cloned().unwrap_or_default();
                let Some(rack) = racks
                    .into_iter()
                    .filter(|&r| r.level() == Some(RACK))
                    .find(|&r| self.allocatable(r, gpus) >= slice)
                else {
                    continue 'domains;
                };
                let nodes: Vec<usize> = self.nodes(rack).collect();
                match self.allocate(&nodes, slice, gpus) {
                    Some(placed) => members.extend(placed),
                    None => continue 'domains,
                }
            }
            return Some(members);
        }
        None
    }
}

impl Policy for Kai {
    fn name(&self) -> &'static str {
        "kai"
    }

    fn place(&mut self, unit: &Unit, view: &View<'_>) -> Option<Members> {
        let mut session = Session {
            fabric: view.fabric,
            idle: view.free.to_vec(),
        };
        match unit.kind {
            UnitKind::Structured { slice, preferred } => session.structured(unit, slice, preferred),
            // No topology constraint: every node, task by task.
            UnitKind::Multi | UnitKind::Pod => {
                let nodes: Vec<usize> = (0..view.fabric.nodes()).collect();
                session.allocate(&nodes, unit.members, unit.gpus)
            }
        }
    }
}
