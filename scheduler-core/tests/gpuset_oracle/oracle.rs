//! The brute-force oracle (it shares no code with the crate) and the checks
//! that hold the crate's exact and heuristic answers against it.

use crate::topo::{Topo, all};
use gputopo_api::{Collective, LinkClass};
use gputopo_scheduler_core::gpuset::{Method, NoFitReason, NodeShape, SetRequest};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

/// A set's quality: a link class, or no hop at all (a single GPU), which beats every link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Quality {
    Link(LinkClass),
    NoHop,
}

impl Quality {
    fn class(self) -> Option<LinkClass> {
        match self {
            Quality::Link(c) => Some(c),
            Quality::NoHop => None,
        }
    }
}

/// Why the oracle found nothing, in the documented order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    TooFew,
    Mig,
    Memory,
    SingleNuma,
    Nvlink,
}

fn reason_of(r: &NoFitReason) -> Reason {
    match r {
        NoFitReason::TooFewFreeGpus { .. } => Reason::TooFew,
        NoFitReason::MigEnabled { .. } => Reason::Mig,
        NoFitReason::InsufficientMemory { .. } => Reason::Memory,
        NoFitReason::SingleNumaNode { .. } => Reason::SingleNuma,
        NoFitReason::NoNvlinkSet { .. } => Reason::Nvlink,
    }
}

/// (best ring of that size, subsets reaching it) for sizes 8, 4, 2.
type LeftoverVec = [(Option<Quality>, u32); 3];

pub(crate) struct Oracle<'a> {
    topo: &'a Topo,
    rings: HashMap<Vec<usize>, Quality>,
}

impl<'a> Oracle<'a> {
    pub(crate) fn new(topo: &'a Topo) -> Oracle<'a> {
        Oracle {
            topo,
            rings: HashMap::new(),
        }
    }

    /// The best ring's weakest hop, by DFS over orders of the set (first GPU fixed).
    fn ring(&mut self, set: &[usize]) -> Quality {
        match set.len() {
            0 | 1 => return Quality::NoHop,
            2 => return Quality::Link(self.topo.link[set[0]][set[1]]),
            _ => {}
        }
        if let Some(&q) = self.rings.get(set) {
            return q;
        }
        let link = &self.topo.link;
        let ceiling = set
            .iter()
            .flat_map(|&a| {
                set.iter()
                    .filter(move |&&b| b != a)
                    .map(move |&b| link[a][b])
            })
            .max()
            .expect("at least one pair");
        let mut best: Option<LinkClass> = None;
        let mut used = vec![false; set.len()];
        used[0] = true;
        let mut order = vec![set[0]];
        fn dfs(
            link: &[Vec<LinkClass>],
            set: &[usize],
            used: &mut [bool],
            order: &mut Vec<usize>,
            weakest: Option<LinkClass>,
            best: &mut Option<LinkClass>,
            ceiling: LinkClass,
        ) {
            if best.is_some_and(|b| b >= ceiling || weakest.is_some_and(|w| w <= b)) {
                return;
            }
            let last = *order.last().expect("non-empty");
            if order.len() == set.len() {
                let closing = link[last][set[0]];
                let cycle = weakest.map_or(closing, |w| w.min(closing));
                if best.is_none_or(|b| cycle > b) {
                    *best = Some(cycle);
                }
                return;
            }
            for i in 1..set.len() {
                if used[i] {
                    continue;
                }
                used[i] = true;
                order.push(set[i]);
                let hop = link[last][set[i]];
                let w = weakest.map_or(hop, |w| w.min(hop));
                dfs(link, set, used, order, Some(w), best, ceiling);
                order.pop();
                used[i] = false;
            }
        }
        dfs(link, set, &mut used, &mut order, None, &mut best, ceiling);
        let q = Quality::Link(best.expect("a cycle exists in a complete graph"));
        self.rings.insert(set.to_vec(), q);
        q
    }

    fn all_to_all(&self, set: &[usize]) -> Quality {
        let mut worst = Quality::NoHop;
        for (i, &a) in set.iter().enumerate() {
            for &b in &set[i + 1..] {
                worst = worst.min(Quality::Link(self.topo.link[a][b]));
            }
        }
        worst
    }

    fn quality(&mut self, set: &[usize], collective: Collective) -> Quality {
        match collective {
            Collective::Ring => self.ring(set),
            Collective::AllToAll => self.all_to_all(set),
        }
    }

    fn numa_nodes(&self, set: &[usize]) -> usize {
        set.iter()
            .map(|&g| self.topo.facts[g].numa)
            .collect::<HashSet<_>>()
            .len()
    }

    fn leftover(&mut self, left: &[usize]) -> LeftoverVec {
        let mut out = [(None, 0); 3];
        for (slot, size) in out.iter_mut().zip([8usize, 4, 2]) {
            if left.len() < size {
                continue;
            }
            let mut best = None;
            let mut count = 0u32;
            for subset in subsets(left, size) {
                let q = Some(self.ring(&subset));
                if q > best {
                    best = q;
                    count = 1;
                } else if q == best {
                    count += 1;
                }
            }
            *slot = (best, count.min(8191));
        }
        out
    }

    /// The best set for the request, or why none fits.
    fn choose(&mut self, free: u32, req: &SetRequest) -> Result<Vec<usize>, Reason> {
        let n = self.topo.n();
        let k = req.gpus as usize;
        let facts = &self.topo.facts;
        if k == 0 {
            return Ok(Vec::new());
        }
        let free: Vec<usize> = (0..n).filter(|&g| free & (1 << g) != 0).collect();
        if free.len() < k {
            return Err(Reason::TooFew);
        }
        let mut pool = free.clone();
        if !req.allow_mig {
            pool.retain(|&g| !facts[g].mig);
            if pool.len() < k {
                return Err(Reason::Mig);
            }
        }
        if let Some(min) = req.min_memory_mib {
            pool.retain(|&g| facts[g].memory_mib.is_some_and(|m| m >= min));
            if pool.len() < k {
                return Err(Reason::Memory);
            }
        }
        if req.single_numa_node {
            let mut per_node: HashMap<i32, usize> = HashMap::new();
            for &g in &pool {
                if let Some(numa) = facts[g].numa {
                    *per_node.entry(numa).or_default() += 1;
                }
            }
            if per_node.values().all(|&c| c < k) {
                return Err(Reason::SingleNuma);
            }
        }
        let mut candidates: Vec<Vec<usize>> = subsets(&pool, k)
            .into_iter()
            .filter(|s| {
                !req.single_numa_node
                    || (s.iter().all(|&g| facts[g].numa.is_some())
                        && s.iter().all(|&g| facts[g].numa == facts[s[0]].numa))
            })
            .filter(|s| match req.min_nvlink_level {
                None | Some(0) => true,
                Some(level) => s.iter().enumerate().all(|(i, &a)| {
                    s[i + 1..]
                        .iter()
                        .all(|&b| self.topo.link[a][b] >= LinkClass::Nv(level))
                }),
            })
            .collect();
        if candidates.is_empty() {
            return Err(Reason::Nvlink);
        }
        // Bottleneck, then NUMA nodes: only the top tier needs a leftover.
        let scored: Vec<(Quality, usize)> = candidates
            .iter()
            .map(|s| (self.quality(s, req.collective), self.numa_nodes(s)))
            .collect();
        let top = scored
            .iter()
            .map(|&(q, numa)| (q, std::cmp::Reverse(numa)))
            .max()
            .expect("candidates");
        let mut tier: Vec<Vec<usize>> = candidates
            .drain(..)
            .zip(scored)
            .filter(|(_, (q, numa))| (*q, std::cmp::Reverse(*numa)) == top)
            .map(|(s, _)| s)
            .collect();
        let whole_free: Vec<usize> = free.iter().copied().filter(|&g| !facts[g].mig).collect();
        let mut best: Option<(LeftoverVec, Vec<usize>)> = None;
        for s in tier.drain(..) {
            let left: Vec<usize> = whole_free
                .iter()
                .copied()
                .filter(|g| !s.contains(g))
                .collect();
            let measure = self.leftover(&left);
            let better = match &best {
                None => true,
                Some((m, b)) => measure > *m || (measure == *m && s < *b),
            };
            if better {
                best = Some((measure, s));
            }
        }
        Ok(best.expect("a non-empty tier").1)
    }
}

/// Every `k`-subset of `items`, each sorted as `items` is.
fn subsets(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    fn go(
        items: &[usize],
        k: usize,
        start: usize,
        cur: &mut Vec<usize>,
        out: &mut Vec<Vec<usize>>,
    ) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..items.len() {
            if items.len() - i < k - cur.len() {
                break;
            }
            cur.push(items[i]);
            go(items, k, i + 1, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    go(items, k, 0, &mut Vec::new(), &mut out);
    out
}

fn to_indices(m: u32) -> Vec<usize> {
    (0..32).filter(|&g| m & (1 << g) != 0).collect()
}

/// Checks the crate's exact answer against the oracle on one case.
pub(crate) fn check_case(
    topo: &Topo,
    shape: &NodeShape,
    oracle: &mut Oracle<'_>,
    free: u32,
    req: &SetRequest,
) -> Result<(), TestCaseError> {
    let expected = oracle.choose(free & all(topo.n()), req);
    let got = shape.pick(free, req);
    match (&expected, &got) {
        (Err(reason), Err(no_fit)) => {
            prop_assert_eq!(*reason, reason_of(no_fit), "reason for {:?}", req);
        }
        (Ok(set), Ok(pick)) => {
            let got_set = to_indices(pick.gpus);
            let q_expected = oracle.quality(set, req.collective);
            let q_got = oracle.quality(&got_set, req.collective);
            prop_assert_eq!(
                q_got,
                q_expected,
                "quality: got {:?}, oracle {:?}",
                got_set,
                set
            );
            prop_assert_eq!(pick.bottleneck, q_expected.class(), "reported bottleneck");
            // No set of the optimal quality spans fewer NUMA nodes.
            prop_assert_eq!(
                oracle.numa_nodes(&got_set),
                oracle.numa_nodes(set),
                "NUMA tie-break: got {:?}, oracle {:?}",
                got_set,
                set
            );
            prop_assert_eq!(pick.numa_nodes as usize, oracle.numa_nodes(set));
            // The full order, leftover and indices included.
            prop_assert_eq!(&got_set, set, "full order");
            let whole: Vec<usize> = to_indices(free & all(topo.n()))
                .into_iter()
                .filter(|&g| !topo.facts[g].mig && !set.contains(&g))
                .collect();
            let measure = oracle.leftover(&whole);
            for (slot, (best, count)) in pick.leftover.slots.iter().zip(measure) {
                prop_assert_eq!(slot.best_ring, best.and_then(Quality::class));
                prop_assert_eq!(slot.sets, count);
            }
            prop_assert!(pick.score <= 100);
        }
        _ => prop_assert!(
            false,
            "oracle {:?} but crate {:?} for {:?}",
            expected,
            got,
            req
        ),
    }
    Ok(())
}

/// Checks the heuristic's answer is valid and no better than the optimum.
pub(crate) fn check_heuristic(
    topo: &Topo,
    shape: &NodeShape,
    oracle: &mut Oracle<'_>,
    free: u32,
    req: &SetRequest,
) -> Result<(), TestCaseError> {
    let exact = oracle.choose(free & all(topo.n()), req);
    let heuristic = shape.pick_with(free, req, Method::Heuristic);
    match (exact, heuristic) {
        (Err(reason), Err(no_fit)) => prop_assert_eq!(reason, reason_of(&no_fit)),
        (Err(reason), Ok(pick)) => prop_assert!(false, "oracle {:?}, heuristic {:?}", reason, pick),
        // Only an NVLink floor may make the greedy miss a feasible set.
        (Ok(_), Err(no_fit)) => prop_assert_eq!(reason_of(&no_fit), Reason::Nvlink),
        (Ok(best), Ok(pick)) => {
            let set = to_indices(pick.gpus);
            prop_assert_eq!(set.len(), req.gpus as usize);
            prop_assert_eq!(pick.gpus & !free, 0, "only free GPUs");
            for &g in &set {
                let f = &topo.facts[g];
                prop_assert!(req.allow_mig || !f.mig);
                if let Some(min) = req.min_memory_mib {
                    prop_assert!(f.memory_mib.is_some_and(|m| m >= min));
                }
            }
            if req.single_numa_node && !set.is_empty() {
                prop_assert!(set.iter().all(|&g| topo.facts[g].numa.is_some()));
                prop_assert_eq!(oracle.numa_nodes(&set), 1);
            }
            if let Some(level) = req.min_nvlink_level.filter(|&l| l > 0) {
                prop_assert!(oracle.all_to_all(&set) >= Quality::Link(LinkClass::Nv(level)));
            }
            let q = oracle.quality(&set, req.collective);
            prop_assert!(q <= oracle.quality(&best, req.collective));
            prop_assert_eq!(
                pick.bottleneck,
                q.class(),
                "n ≤ 16: the exact quality of its set"
            );
        }
    }
    Ok(())
}
