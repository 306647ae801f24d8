//! The heuristic for nodes of more than 16 GPUs (a 32-GPU NVLink domain
//! modelled as one node), where tabulating every subset is out of reach.
//!
//! For each threshold level `t`, best first, grow a set from every eligible
//! seed GPU, one GPU at a time, keeping every hop (ring: the new GPU goes
//! between two ring neighbours it reaches at ≥ `t`) or every pair (all-to-all)
//! at ≥ `t`; prefer GPUs on the seed's NUMA node, then those with more links at
//! ≥ `t` into the set, then lower indices. Where greed gets stuck (on a DGX-1
//! cube-mesh, 5-GPU rings must leave the socket a greedy quad filled), a
//! depth-first search for a cycle (or clique) through the seed, bounded to
//! 4,096 expansions per seed, takes over. The first threshold at which some
//! seed succeeds gives the candidates. They are ranked on the design's order,
//! by their exact bottleneck where that is cheap (all-to-all, rings of up to 10
//! GPUs) and by `t` otherwise; the best is then improved by first-improvement
//! swaps (one member for one outsider, every hop or pair still at ≥ `t`, the
//! bottleneck not lower), at most `2k` moves.
//!
//! Cost: `O(L · m · k² · m)` for growth (`L` levels, `m` eligible GPUs) plus
//! `O(k · m)` swap trials per move, each pricing a leftover. The leftover
//! measure here is exact for pairs; for 4 and 8 GPUs it is the first level at
//! which greedy growth succeeds in the leftover, with a count of one.
//!
//! The reported ring bottleneck is exact for sets of up to 10 GPUs (a small
//! max–min DP) and otherwise the best level at which a ring was built, a lower
//! bound. [`heuristic_gap`] measures the heuristic against the exact search.

use super::exact::{Podium, candidate_key};
use super::mask::{bit, bits, low_bits};
use super::query::Winner;
use super::request::{Method, NoFitReason, SetPick, SetRequest};
use super::shape::NodeShape;
use super::tables::{
    LEFTOVER_SIZES, LeftoverKey, LinkTables, NO_HOP, NONE, pack_leftover, pack_slot,
};
use gputopo_api::{Collective, LinkClass};

/// Sets up to this size get an exact ring bottleneck by a `2^k · k²` DP.
const SMALL_EXACT_RING: u32 = 10;

/// A grown set and its ring order (insertion order for all-to-all).
#[derive(Clone, Debug)]
struct Grown {
    set: u32,
    order: Vec<u32>,
    /// The eligible pool it was grown in (its NUMA group under single-numa-node).
    pool: u32,
}

/// What growth must keep: every hop (ring) or pair (all-to-all) at ≥ `level`,
/// and every pair at ≥ `clique_floor` (the NVLink constraint; 0 for none).
#[derive(Clone, Copy)]
struct Rule {
    level: u8,
    clique_floor: u8,
    collective: Collective,
}

impl Rule {
    /// Of `candidates`, those joined to `u` at the clique floor (all of
    /// them when the rule has none).
    fn within_floor(self, tables: &LinkTables, candidates: u32, u: u32) -> u32 {
        if self.clique_floor == NONE {
            return candidates;
        }
        candidates & tables.neighbours_at_least(self.clique_floor, u)
    }
}

/// The ring bottleneck level of `set`: table, small DP, or greedy lower bound.
pub(crate) fn ring_level(tables: &LinkTables, set: u32) -> u8 {
    if let Some(level) = tables.ring_table(set) {
        return level;
    }
    let k = set.count_ones();
    if k <= 1 {
        return NO_HOP;
    }
    if k <= SMALL_EXACT_RING {
        return small_ring_level(tables, set);
    }
    for t in (1..=tables.top_level()).rev() {
        let rule = Rule {
            level: t,
            clique_floor: NONE,
            collective: Collective::Ring,
        };
        if bits(set).any(|seed| grow(tables, &[], set, seed, k, rule).is_some()) {
            return t;
        }
    }
    1
}

/// The max–min Hamiltonian-cycle DP of `tables` restricted to the members of one set.
fn small_ring_level(tables: &LinkTables, set: u32) -> u8 {
    let members: Vec<u32> = bits(set).collect();
    let k = members.len();
    let full = 1usize << k;
    let mut path = vec![NONE; full * k];
    path[k] = NO_HOP; // subset {member 0}, ending at member 0
    for s in 1..full {
        if s & 1 == 0 {
            continue;
        }
        for v in bits(s as u32) {
            let b = path[s * k + v as usize];
            if b == NONE {
                continue;
            }
            for u in bits(!(s as u32) & low_bits(k as u32)) {
                let w = b.min(tables.level(members[v as usize], members[u as usize]));
                let slot = &mut path[(s | bit(u) as usize) * k + u as usize];
                *slot = (*slot).max(w);
            }
        }
    }
    (1..k)
        .map(|v| path[(full - 1) * k + v].min(tables.level(members[v], members[0])))
        .max()
        .unwrap_or(NO_HOP)
}

/// Expansions one bounded backtracking search may make from one seed.
const SEARCH_BUDGET: u32 = 4096;

/// Grows a `k`-set from `seed` inside `pool` under `rule`: greedy first, then a
/// bounded backtracking search when greed gets stuck. `numa_bit` (may be
/// empty) makes GPUs on the seed's NUMA node preferred.
fn grow(
    tables: &LinkTables,
    numa_bit: &[u64],
    pool: u32,
    seed: u32,
    k: u32,
    rule: Rule,
) -> Option<Grown> {
    if k == 0 || pool & bit(seed) == 0 {
        return None;
    }
    greedy(tables, numa_bit, pool, seed, k, rule).or_else(|| {
        let mut search = Backtrack {
            tables,
            numa_bit,
            home: numa_bit.get(seed as usize).copied(),
            k: k as usize,
            rule,
            seed,
            budget: SEARCH_BUDGET,
            path: vec![seed],
        };
        let allowed = rule.within_floor(tables, pool & !bit(seed), seed);
        let found = match rule.collective {
            Collective::Ring => search.ring(allowed),
            Collective::AllToAll => {
                search.clique(allowed & tables.neighbours_at_least(rule.level, seed))
            }
        };
        found.then(|| Grown {
            set: search.path.iter().fold(0, |m, &g| m | bit(g)),
            order: search.path,
            pool,
        })
    })
}

/// Greedy growth: repeatedly add the most preferred GPU that keeps the rule
/// (ring: inserted between two ring neighbours it reaches at ≥ the level).
fn greedy(
    tables: &LinkTables,
    numa_bit: &[u64],
    pool: u32,
    seed: u32,
    k: u32,
    rule: Rule,
) -> Option<Grown> {
    let mut order = Vec::with_capacity(k as usize);
    order.push(seed);
    let mut set = bit(seed);
    let mut allowed = rule.within_floor(tables, pool & !set, seed);
    if rule.collective == Collective::AllToAll {
        allowed &= tables.neighbours_at_least(rule.level, seed);
    }
    let home = numa_bit.get(seed as usize).copied();
    while (order.len() as u32) < k {
        let mut best: Option<((bool, u32), u32, usize)> = None;
        for u in bits(allowed) {
            let position = match rule.collective {
                Collective::AllToAll => Some(order.len()),
                Collective::Ring => insertion_position(tables, &order, u, rule.level),
            };
            let Some(position) = position else {
                continue;
            };
            let links_in = (tables.neighbours_at_least(rule.level, u) & set).count_ones();
            let same_numa = home.is_some() && numa_bit.get(u as usize).copied() == home;
            // Larger is better; the lower index wins ties (bits come lowest first).
            let preference = (same_numa, links_in);
            if best.is_none_or(|(p, _, _)| preference > p) {
                best = Some((preference, u, position));
            }
        }
        let (_, u, position) = best?;
        order.insert(position, u);
        set |= bit(u);
        allowed = rule.within_floor(tables, allowed & !bit(u), u);
        if rule.collective == Collective::AllToAll {
            allowed &= tables.neighbours_at_least(rule.level, u);
        }
    }
    Some(Grown { set, order, pool })
}

/// Depth-first search for a `k`-cycle (or `k`-clique) through the seed, at
/// most [`SEARCH_BUDGET`] expansions, the seed's NUMA node tried first.
struct Backtrack<'a> {
    tables: &'a LinkTables,
    numa_bit: &'a [u64],
    home: Option<u64>,
    k: usize,
    rule: Rule,
    seed: u32,
    budget: u32,
    path: Vec<u32>,
}

impl Backtrack<'_> {
    /// `candidates` in preference order: the seed's NUMA node first, then the rest.
    fn ordered(&self, candidates: u32) -> impl Iterator<Item = u32> + use<> {
        let home = self.home;
        let local = bits(candidates)
            .filter(|&u| home.is_some() && self.numa_bit.get(u as usize).copied() == home)
            .fold(0u32, |m, u| m | bit(u));
        bits(local).chain(bits(candidates & !local))
    }

    fn spend(&mut self) -> bool {
        if self.budget == 0 {
            return false;
        }
        self.budget -= 1;
        true
    }

    /// Extends the path (the ring order) from its last GPU; closes at length k.
    fn ring(&mut self, allowed: u32) -> bool {
        let t = self.rule.level;
        let last = self.path[self.path.len() - 1];
        if self.path.len() == self.k {
            return self.tables.level(last, self.seed) >= t;
        }
        let missing = (self.k - self.path.len()) as u32;
        if allowed.count_ones() < missing || !self.spend() {
            return false;
        }
        let mut next = allowed & self.tables.neighbours_at_least(t, last);
        if missing == 1 {
            next &= self.tables.neighbours_at_least(t, self.seed);
        }
        for u in self.ordered(next) {
            let rest = self.rule.within_floor(self.tables, allowed & !bit(u), u);
            self.path.push(u);
            if self.ring(rest) {
                return true;
            }
            self.path.pop();
        }
        false
    }

    /// Extends the clique; `allowed` holds only GPUs joined to all members.
    fn clique(&mut self, mut allowed: u32) -> bool {
        if self.path.len() == self.k {
            return true;
        }
        let missing = (self.k - self.path.len()) as u32;
        if allowed.count_ones() < missing || !self.spend() {
            return false;
        }
        for u in self.ordered(allowed) {
            allowed &= !bit(u);
            let rest = self.rule.within_floor(
                self.tables,
                allowed & self.tables.neighbours_at_least(self.rule.level, u),
                u,
            );
            self.path.push(u);
            if self.clique(rest) {
                return true;
            }
            self.path.pop();
        }
        false
    }
}

/// Where `u` can join the ring `order` with both new hops at ≥ `level`.
fn insertion_position(tables: &LinkTables, order: &[u32], u: u32, level: u8) -> Option<usize> {
    let m = order.len();
    if m == 1 {
        return (tables.level(order[0], u) >= level).then_some(1);
    }
    (0..m).find_map(|i| {
        let (a, b) = (order[i], order[(i + 1) % m]);
        (tables.level(a, u) >= level && tables.level(u, b) >= level).then_some(i + 1)
    })
}

/// Whether the member at `position` of `grown` may be replaced by `outsider` under `rule`.
fn can_swap(
    tables: &LinkTables,
    grown: &Grown,
    position: usize,
    outsider: u32,
    rule: Rule,
) -> bool {
    let out = grown.order[position];
    let rest = grown.set & !bit(out);
    if rule.within_floor(tables, rest, outsider) != rest {
        return false;
    }
    match rule.collective {
        Collective::AllToAll => rest & !tables.neighbours_at_least(rule.level, outsider) == 0,
        Collective::Ring => {
            let m = grown.order.len();
            let prev = grown.order[(position + m - 1) % m];
            let next = grown.order[(position + 1) % m];
            m == 1
                || (tables.level(prev, outsider) >= rule.level
                    && tables.level(outsider, next) >= rule.level)
        }
    }
}

/// The heuristic's leftover measure of the free GPUs `free`.
pub(crate) fn leftover_key(shape: &NodeShape, free: u32) -> LeftoverKey {
    let tables = &shape.tables;
    let count = free.count_ones();
    let mut slots = [0u32; 3];
    for (slot, &size) in slots.iter_mut().zip(&LEFTOVER_SIZES) {
        if count < size {
            continue;
        }
        if size == 2 {
            let mut best = NONE;
            let mut sets = 0u32;
            for i in bits(free) {
                for j in bits(free & !low_bits(i + 1)) {
                    let l = tables.level(i, j);
                    if l > best {
                        (best, sets) = (l, 1);
                    } else if l == best {
                        sets += 1;
                    }
                }
            }
            *slot = pack_slot(best, sets);
            continue;
        }
        *slot = (1..=tables.top_level())
            .rev()
            .find(|&t| {
                let rule = Rule {
                    level: t,
                    clique_floor: NONE,
                    collective: Collective::Ring,
                };
                bits(free)
                    .any(|seed| grow(tables, &shape.numa_bit, free, seed, size, rule).is_some())
            })
            .map_or(0, |t| pack_slot(t, 1));
    }
    pack_leftover(slots)
}

/// The GPUs of `pool` that greedy growth places in some `size`-set whose ring
/// reaches `level` (a lower bound on the exact cover).
pub(crate) fn ring_cover(shape: &NodeShape, pool: u32, size: u32, level: u8) -> u32 {
    let rule = Rule {
        level,
        clique_floor: NONE,
        collective: Collective::Ring,
    };
    let mut covered = 0u32;
    for seed in bits(pool) {
        if covered & bit(seed) != 0 {
            continue;
        }
        if let Some(g) = grow(&shape.tables, &shape.numa_bit, pool, seed, size, rule) {
            covered |= g.set;
        }
    }
    covered
}

/// The best level the heuristic reaches for `k` GPUs of `pool` (empty-node reference).
pub(crate) fn best_level(shape: &NodeShape, pool: u32, k: u32, collective: Collective) -> u8 {
    if k <= 1 {
        return NO_HOP;
    }
    let tables = &shape.tables;
    for t in (1..=tables.top_level()).rev() {
        let rule = Rule {
            level: t,
            clique_floor: NONE,
            collective,
        };
        if let Some(g) =
            bits(pool).find_map(|seed| grow(tables, &shape.numa_bit, pool, seed, k, rule))
        {
            return t.max(shape.quality_level(g.set, collective));
        }
    }
    NONE
}

/// The heuristic search: same contract as `exact::search`.
pub(crate) fn search(
    shape: &NodeShape,
    groups: &[u32],
    k: u32,
    collective: Collective,
    nvlink_floor: u8,
    base: u32,
) -> Option<Winner> {
    let tables = &shape.tables;
    let numa_of = |set: u32| shape.numa_nodes(set).min(u32::from(u8::MAX)) as u8;
    let mut podium = Podium::default();
    if k == 1 {
        for &group in groups {
            for g in bits(group) {
                let set = bit(g);
                podium.offer(candidate_key(
                    NO_HOP,
                    1,
                    leftover_key(shape, base & !set),
                    set,
                ));
            }
        }
        return podium.winner();
    }
    let floor = nvlink_floor.max(1);
    for t in (floor..=tables.top_level()).rev() {
        let rule = Rule {
            level: t,
            clique_floor: nvlink_floor,
            collective,
        };
        let mut found: Vec<Grown> = Vec::new();
        for &group in groups {
            for seed in bits(group) {
                if let Some(g) = grow(tables, &shape.numa_bit, group, seed, k, rule)
                    && !found.iter().any(|f| f.set == g.set)
                {
                    found.push(g);
                }
            }
        }
        // A candidate's quality is at least `t`; where its exact quality is
        // cheap (tables, all-to-all, or a small ring) the key uses that.
        let refined = |set: u32| {
            if collective == Collective::AllToAll
                || tables.is_exact()
                || set.count_ones() <= SMALL_EXACT_RING
            {
                t.max(shape.quality_level(set, collective))
            } else {
                t
            }
        };
        let rest_of_key = |quality: u8, set: u32| {
            candidate_key(quality, numa_of(set), leftover_key(shape, base & !set), set)
        };
        let mut best: Option<(u128, u8, Grown)> = None;
        for g in found {
            let quality = refined(g.set);
            let key = rest_of_key(quality, g.set);
            podium.offer(key);
            if best.as_ref().is_none_or(|(b, _, _)| key > *b) {
                best = Some((key, quality, g));
            }
        }
        let Some((mut current_key, current_quality, mut current)) = best else {
            continue;
        };
        // First-improvement swaps that keep the quality and better the rest of the order.
        for _ in 0..2 * k {
            let mut improved = None;
            'trials: for position in 0..current.order.len() {
                for outsider in bits(current.pool & !current.set) {
                    if !can_swap(tables, &current, position, outsider, rule) {
                        continue;
                    }
                    let set = current.set & !bit(current.order[position]) | bit(outsider);
                    if rest_of_key(current_quality, set) <= current_key {
                        continue;
                    }
                    let quality = refined(set);
                    if quality >= current_quality {
                        improved = Some((rest_of_key(quality, set), position, outsider, set));
                        break 'trials;
                    }
                }
            }
            let Some((key, position, outsider, set)) = improved else {
                break;
            };
            podium.offer(key);
            current.order[position] = outsider;
            current.set = set;
            current_key = key;
        }
        let mut winner = podium.winner()?;
        winner.quality = t.max(shape.quality_level(winner.gpus, collective));
        return Some(winner);
    }
    None
}

/// How far the heuristic falls short of the exact search, in `LinkClass::rank` units.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GapReport {
    /// Cases given.
    pub cases: u32,
    /// Cases where the exact search found a set (the others are skipped).
    pub feasible: u32,
    /// Feasible cases where the heuristic found nothing (only possible with an NVLink floor).
    pub missed: u32,
    /// Feasible cases where the heuristic's set has the optimal bottleneck.
    pub optimal_quality: u32,
    /// Feasible cases where it chose the very same set.
    pub same_set: u32,
    /// Mean of `rank(optimal) − rank(heuristic set)` over feasible, found cases.
    pub mean_gap: f64,
    pub worst_gap: u32,
}

/// Runs each `(free mask, request)` through both the exact search and the
/// heuristic on a node of up to 16 GPUs and reports the quality gap; `None`
/// when the node is too large for the exact search. The heuristic's set is
/// judged by its exact bottleneck.
pub fn heuristic_gap(
    shape: &NodeShape,
    cases: impl IntoIterator<Item = (u32, SetRequest)>,
) -> Option<GapReport> {
    if !shape.is_exact() {
        return None;
    }
    let rank = |b: Option<LinkClass>| b.map_or(u32::MAX, LinkClass::rank);
    let mut report = GapReport::default();
    let mut total_gap = 0u64;
    for (free, request) in cases {
        report.cases += 1;
        let exact: Result<SetPick, NoFitReason> = shape.pick_with(free, &request, Method::Exact);
        let Ok(exact) = exact else {
            continue;
        };
        report.feasible += 1;
        let Ok(heuristic) = shape.pick_with(free, &request, Method::Heuristic) else {
            report.missed += 1;
            continue;
        };
        let gap = rank(exact.bottleneck).saturating_sub(rank(heuristic.bottleneck));
        total_gap += u64::from(gap);
        report.worst_gap = report.worst_gap.max(gap);
        report.optimal_quality += u32::from(gap == 0);
        report.same_set += u32::from(exact.gpus == heuristic.gpus);
    }
    let found = report.feasible - report.missed;
    if found > 0 {
        report.mean_gap = total_gap as f64 / f64::from(found);
    }
    Some(report)
}
