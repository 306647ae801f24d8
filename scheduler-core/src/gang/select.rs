//! Domain selection: which leaves, which nodes, which GPU sets, in one decision.

use super::domain::Tree;
use super::fill::{Filled, fill_all, fill_round_robin};
use super::{
    DomainCapacity, EXACT_LEAF_SETS, GangCluster, GangNoFit, GangNode, GangPlacement, MemberSlot,
    Members, QUALITY_CANDIDATES, Shortage, TierSpan, Within, describe_request,
};
use crate::gpuset::{NoFitReason, Picker, SetRequest};
use gputopo_api::PlacementStrategy;
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

/// Leaf counts tried past the fewest for a mixed gang before trying the whole scope.
const MIXED_EXTRA_LEAVES: usize = 8;

/// Members sharing one request.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub(crate) request: SetRequest,
    pub(crate) members: Vec<u32>,
}

/// The problem read once: free masks, request groups, a picker per shape and group.
pub(crate) struct Prepared<'a> {
    pub(crate) nodes: &'a [GangNode],
    pub(crate) free: Vec<u32>,
    /// Largest request first.
    pub(crate) groups: Vec<Group>,
    pub(crate) strategy: PlacementStrategy,
    shape_of: Vec<u32>,
    /// `[shape][group]`.
    pickers: Vec<Vec<Picker<'a>>>,
}

impl<'a> Prepared<'a> {
    pub(crate) fn new(
        nodes: &'a [GangNode],
        members: &Members,
        strategy: PlacementStrategy,
    ) -> Prepared<'a> {
        let groups = groups(members);
        let mut shape_index: HashMap<*const crate::gpuset::NodeShape, u32> = HashMap::new();
        let mut pickers: Vec<Vec<Picker<'a>>> = Vec::new();
        let shape_of = nodes
            .iter()
            .map(|node| {
                *shape_index
                    .entry(std::sync::Arc::as_ptr(&node.shape))
                    .or_insert_with(|| {
                        pickers.push(
                            groups
                                .iter()
                                .map(|g| node.shape.picker(&g.request))
                                .collect(),
                        );
                        pickers.len() as u32 - 1
                    })
            })
            .collect();
        let free = nodes.iter().map(|n| n.free).collect();
        Prepared {
            nodes,
            free,
            groups,
            strategy,
            shape_of,
            pickers,
        }
    }

    pub(crate) fn picker(&self, position: u32, group: usize) -> &Picker<'a> {
        &self.pickers[self.shape_of[position as usize] as usize][group]
    }

    pub(crate) fn uniform(&self) -> bool {
        self.groups.len() == 1
    }

    /// Members a node hosts (uniform gangs: by repeated picks until none fits;
    /// `members` when the request is for no GPU), or its free whole GPUs if it
    /// can host the smallest request (mixed gangs), with the reason it hosts none.
    fn capacity(&self, position: u32, members: u32) -> (u32, Option<NoFitReason>) {
        let free = self.free[position as usize];
        if self.uniform() {
            if self.groups[0].request.gpus == 0 {
                return (members, None);
            }
            let picker = self.picker(position, 0);
            let mut left = free;
            let mut hosted = 0u32;
            loop {
                match picker.pick(left) {
                    Ok(pick) if pick.gpus != 0 => {
                        left &= !pick.gpus;
                        hosted += 1;
                    }
                    Ok(_) => return (hosted, None),
                    Err(reason) => return (hosted, (hosted == 0).then_some(reason)),
                }
            }
        } else {
            let smallest = self.groups.len() - 1;
            match self.picker(position, smallest).pick(free) {
                Ok(_) => {
                    let shape = &self.nodes[position as usize].shape;
                    let whole = free & shape.gpus_mask() & !shape.mig_mask();
                    (whole.count_ones().max(1), None)
                }
                Err(reason) => (0, Some(reason)),
            }
        }
    }
}

/// Members grouped by request, largest first (then by first member).
fn groups(members: &Members) -> Vec<Group> {
    match members {
        Members::Uniform { count, request } => vec![Group {
            request: *request,
            members: (0..*count).collect(),
        }],
        Members::Each(each) => {
            let mut groups: Vec<Group> = Vec::new();
            for (i, request) in each.iter().enumerate() {
                match groups.iter_mut().find(|g| g.request == *request) {
                    Some(g) => g.members.push(i as u32),
                    None => groups.push(Group {
                        request: *request,
                        members: vec![i as u32],
                    }),
                }
            }
            groups.sort_by_key(|g| (Reverse(g.request.gpus), g.members[0]));
            groups
        }
    }
}

/// Rules 1–3 of the module docs; lower is better.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    leaves: usize,
    /// Domains spanned per outer tier, outermost first.
    spans: Vec<usize>,
    /// Capacity left in the chosen leaves (members, or GPUs for mixed gangs).
    leftover: u64,
}

/// A scope's best leaf set, filled.
struct Choice {
    rank: Rank,
    quality: i64,
    leaves: Vec<u32>,
    filled: Filled,
    /// Leaf sets compared, and what separated the winner from the next best.
    compared: usize,
    decided_by: &'static str,
}

/// The whole problem: tree, prepared requests, capacities.
struct Problem<'a> {
    prep: Prepared<'a>,
    tree: Tree,
    need: u64,
    node_cap: Vec<u32>,
    node_reason: Vec<Option<NoFitReason>>,
    leaf_cap: Vec<u64>,
}

pub(crate) fn place(
    spec: &super::GangSpec,
    cluster: &GangCluster,
) -> Result<GangPlacement, GangNoFit> {
    let n = spec.members.len();
    if n == 0 {
        return Err(GangNoFit::NoMembers);
    }
    let tree = Tree::build(
        &cluster.tier_names,
        cluster
            .nodes
            .iter()
            .map(|node| (node.id, node.tiers.as_slice())),
    );
    let scopes = scopes(&tree, &spec.within)?;
    let prep = Prepared::new(&cluster.nodes, &spec.members, spec.strategy);
    let members = u32::try_from(n).unwrap_or(u32::MAX);
    let need: u64 = if prep.uniform() {
        n as u64
    } else {
        prep.groups
            .iter()
            .map(|g| u64::from(g.request.gpus) * g.members.len() as u64)
            .sum()
    };
    let (node_cap, node_reason): (Vec<u32>, Vec<Option<NoFitReason>>) = (0..cluster.nodes.len()
        as u32)
        .map(|p| prep.capacity(p, members))
        .unzip();
    let mut leaf_cap = vec![0u64; tree.domains.len()];
    for (position, &cap) in node_cap.iter().enumerate() {
        leaf_cap[tree.node_leaf[position] as usize] += u64::from(cap);
    }
    let problem = Problem {
        prep,
        tree,
        need,
        node_cap,
        node_reason,
        leaf_cap,
    };

    let best = match spec.strategy {
        PlacementStrategy::Distributed => scopes
            .iter()
            .filter_map(|&scope| problem.distributed(scope))
            .min_by(|a, b| {
                b.leaves
                    .len()
                    .cmp(&a.leaves.len())
                    .then(b.quality.cmp(&a.quality))
            }),
        PlacementStrategy::Consolidated | PlacementStrategy::Balanced => scopes
            .iter()
            .filter_map(|&scope| problem.consolidated(scope))
            .min_by(|a, b| {
                a.rank
                    .cmp(&b.rank)
                    .then(b.quality.cmp(&a.quality))
                    .then_with(|| a.leaves.cmp(&b.leaves))
            }),
    };
    match best {
        Some(choice) => Ok(problem.placement(spec, &choice)),
        None => Err(GangNoFit::Short(problem.shortage(spec, &scopes))),
    }
}

/// The domains the gang may fill: `None` is the whole cluster.
pub(crate) fn scopes(tree: &Tree, within: &Within) -> Result<Vec<Option<u32>>, GangNoFit> {
    let check = |tier: usize| {
        if tree.has_tier(tier) {
            Ok(())
        } else {
            Err(GangNoFit::NoSuchTier {
                tier,
                tiers: tree.tier_names.len(),
            })
        }
    };
    match within {
        Within::Anywhere => Ok(vec![None]),
        Within::OneDomainAt { tier } => {
            check(*tier)?;
            Ok(tree.by_tier[*tier].iter().map(|&d| Some(d)).collect())
        }
        Within::Domain { tier, name } => {
            check(*tier)?;
            let found: Vec<Option<u32>> = tree.by_tier[*tier]
                .iter()
                .filter(|&&d| tree.domain(d).label.as_deref() == Some(name.as_str()))
                .map(|&d| Some(d))
                .collect();
            if found.is_empty() {
                return Err(GangNoFit::NoSuchDomain {
                    tier: tree.tier_name(*tier).to_string(),
                    name: name.clone(),
                });
            }
            Ok(found)
        }
    }
}

impl Problem<'_> {
    fn scope_leaves(&self, scope: Option<u32>) -> &[u32] {
        match scope {
            None => self.tree.leaves(),
            Some(d) => &self.tree.domain(d).leaves,
        }
    }

    /// The scope's leaves that host anything, most capacity first.
    fn useful_leaves(&self, scope: Option<u32>) -> Vec<u32> {
        let mut leaves: Vec<u32> = self
            .scope_leaves(scope)
            .iter()
            .copied()
            .filter(|&l| self.leaf_cap[l as usize] > 0)
            .collect();
        leaves.sort_by_key(|&l| (Reverse(self.leaf_cap[l as usize]), l));
        leaves
    }

    /// Node positions in `leaves` that host anything, in input order.
    fn nodes_of(&self, leaves: &[u32]) -> Vec<u32> {
        let mut nodes: Vec<u32> = leaves
            .iter()
            .flat_map(|&l| self.tree.domain(l).nodes.iter().copied())
            .filter(|&p| self.node_cap[p as usize] > 0)
            .collect();
        nodes.sort_unstable();
        nodes
    }

    fn rank(&self, leaves: &[u32]) -> Rank {
        let outer = self.tree.depth - 1;
        let spans = (0..outer)
            .map(|tier| {
                let mut at: Vec<u32> = leaves
                    .iter()
                    .map(|&l| self.tree.domain(l).ancestors[tier])
                    .collect();
                at.sort_unstable();
                at.dedup();
                at.len()
            })
            .collect();
        let held: u64 = leaves.iter().map(|&l| self.leaf_cap[l as usize]).sum();
        Rank {
            leaves: leaves.len(),
            spans,
            leftover: held.saturating_sub(self.need),
        }
    }

    /// Rules 1–5 inside one scope.
    fn consolidated(&self, scope: Option<u32>) -> Option<Choice> {
        let leaves = self.useful_leaves(scope);
        let caps: Vec<u64> = leaves.iter().map(|&l| self.leaf_cap[l as usize]).collect();
        let mut prefix = vec![0u64; caps.len() + 1];
        for (i, c) in caps.iter().enumerate() {
            prefix[i + 1] = prefix[i] + c;
        }
        let fewest = (1..=caps.len()).find(|&k| prefix[k] >= self.need)?;
        // Mixed gangs may fail to pack where the GPU count suffices: a few more
        // leaves are tried, then every leaf of the scope as the last resort.
        let mut counts: Vec<usize> = (fewest..=caps.len()).take(MIXED_EXTRA_LEAVES).collect();
        counts.push(caps.len());
        counts.dedup();
        for k in counts {
            let mut sets: Vec<Vec<u32>> =
                if binomial(caps.len() as u64, k as u64) <= EXACT_LEAF_SETS {
                    exact_sets(&caps, &prefix, k, self.need)
                        .into_iter()
                        .map(|set| set.into_iter().map(|i| leaves[i]).collect())
                        .collect()
                } else {
                    self.heuristic_sets(scope, k)
                };
            for set in &mut sets {
                set.sort_unstable();
            }
            sets.sort_unstable();
            sets.dedup();
            let mut ranked: Vec<(Rank, Vec<u32>)> =
                sets.into_iter().map(|s| (self.rank(&s), s)).collect();
            ranked.sort();
            if let Some(choice) = self.best_filled(&ranked) {
                return Some(choice);
            }
            if self.prep.uniform() {
                // Every candidate of a uniform gang fills; nothing larger can be better.
                return None;
            }
        }
        None
    }

    /// The first rank group with a set that fills, and its best-quality set.
    fn best_filled(&self, ranked: &[(Rank, Vec<u32>)]) -> Option<Choice> {
        let mut budget = QUALITY_CANDIDATES;
        let mut start = 0;
        while start < ranked.len() && budget > 0 {
            let rank = &ranked[start].0;
            let end = start + ranked[start..].partition_point(|(r, _)| r == rank);
            let mut best: Option<(i64, usize, Filled)> = None;
            let mut qualities: Vec<i64> = Vec::new();
            for (i, (_, set)) in ranked[start..end].iter().enumerate() {
                if budget == 0 {
                    break;
                }
                budget -= 1;
                let Ok(filled) = fill_all(&self.prep, self.nodes_of(set)) else {
                    continue;
                };
                qualities.push(filled.quality);
                if best.as_ref().is_none_or(|(q, _, _)| filled.quality > *q) {
                    best = Some((filled.quality, start + i, filled));
                }
            }
            if let Some((quality, at, filled)) = best {
                let decided_by = if qualities.iter().filter(|&&q| q == quality).count() > 1 {
                    "name order"
                } else if qualities.len() > 1 {
                    "better GPU sets"
                } else {
                    match ranked.get(end) {
                        None => "the only option",
                        Some((next, _)) if next.spans != rank.spans => "fewer parent domains",
                        Some(_) => "fills its leaves more completely",
                    }
                };
                return Some(Choice {
                    rank: rank.clone(),
                    quality,
                    leaves: ranked[at].1.clone(),
                    filled,
                    compared: ranked.len(),
                    decided_by,
                });
            }
            start = end;
        }
        None
    }

    /// Candidate `k`-sets when there are too many to enumerate: per domain of the
    /// scope, its largest leaves with the last swapped for the smallest that still
    /// completes the gang, and its top `k` leaves.
    fn heuristic_sets(&self, scope: Option<u32>, k: usize) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        let scope_leaves = self.scope_leaves(scope);
        let inside = |d: u32| match scope {
            None => true,
            Some(s) => self.tree.domain(d).ancestors.contains(&s),
        };
        let mut domains: Vec<Option<u32>> = vec![scope];
        domains.extend(
            (0..self.tree.domains.len() as u32)
                .filter(|&d| inside(d) && Some(d) != scope)
                .map(Some),
        );
        for domain in domains {
            let pool = match domain {
                None => scope_leaves,
                Some(d) => &self.tree.domain(d).leaves,
            };
            let mut leaves: Vec<u32> = pool
                .iter()
                .copied()
                .filter(|&l| self.leaf_cap[l as usize] > 0)
                .collect();
            if leaves.len() < k {
                continue;
            }
            leaves.sort_by_key(|&l| (Reverse(self.leaf_cap[l as usize]), l));
            let cap = |l: u32| self.leaf_cap[l as usize];
            let top: u64 = leaves[..k].iter().map(|&l| cap(l)).sum();
            if top < self.need {
                continue;
            }
            out.push(leaves[..k].to_vec());
            let before_last: u64 = leaves[..k - 1].iter().map(|&l| cap(l)).sum();
            if before_last < self.need
                && let Some(&smallest) = leaves[k - 1..]
                    .iter()
                    .rev()
                    .find(|&&l| before_last + cap(l) >= self.need)
            {
                let mut set = leaves[..k - 1].to_vec();
                set.push(smallest);
                out.push(set);
            }
        }
        out
    }

    /// Round-robin over the scope's leaves, interleaved across parents.
    fn distributed(&self, scope: Option<u32>) -> Option<Choice> {
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

    fn placement(&self, spec: &super::GangSpec, choice: &Choice) -> GangPlacement {
        let nodes = self.prep.nodes;
        let mut members = vec![
            MemberSlot {
                node: 0,
                gpus: 0,
                score: 0,
            };
            spec.members.len()
        ];
        for p in &choice.filled.placed {
            members[p.member as usize] = MemberSlot {
                node: nodes[p.position as usize].id,
                gpus: p.gpus,
                score: p.score,
            };
        }
        let spans: Vec<TierSpan> = self.tree.tier_spans(&choice.leaves);
        let explanation = self.explain(spec, choice, &members, &spans);
        GangPlacement {
            members,
            spans,
            strategy: spec.strategy,
            quality: choice.quality,
            explanation,
        }
    }

    fn explain(
        &self,
        spec: &super::GangSpec,
        choice: &Choice,
        members: &[MemberSlot],
        spans: &[TierSpan],
    ) -> String {
        let n = members.len();
        let what = match &spec.members {
            Members::Uniform { request, .. } => {
                format!("{n} members of {}", describe_request(request))
            }
            Members::Each(_) => format!("{n} members"),
        };
        let mut nodes: Vec<usize> = members.iter().map(|m| m.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let mean = choice
            .filled
            .placed
            .iter()
            .map(|p| u64::from(p.score))
            .sum::<u64>()
            / n.max(1) as u64;
        let mut out = format!("{what} on {} node(s)", nodes.len());
        if !spans.is_empty() {
            let parts: Vec<String> = spans
                .iter()
                .rev()
                .enumerate()
                .map(|(i, span)| {
                    let tier = super::domain::short_tier_name(&span.tier);
                    let count = span.domains.len();
                    if i == 0 && count <= 4 {
                        format!("{count} {tier}(s) ({})", span.domains.join(", "))
                    } else {
                        format!("{count} {tier}(s)")
                    }
                })
                .collect();
            out.push_str(&format!(" in {}", parts.join(" under ")));
        }
        let leaf = self.tree.tier_name(self.tree.depth - 1).to_string();
        match spec.strategy {
            PlacementStrategy::Distributed => out.push_str(&format!(
                "; distributed: members spread round-robin over {} {leaf}(s) that can host them",
                choice.compared
            )),
            PlacementStrategy::Consolidated | PlacementStrategy::Balanced => {
                out.push_str(&format!(
                    "; fewest {leaf} domains that hold the gang: {}; chosen among {} such set(s) by {}",
                    choice.rank.leaves, choice.compared, choice.decided_by
                ));
                let left = choice.rank.leftover;
                if left == 0 {
                    out.push_str(", filling them completely");
                } else {
                    let unit = if self.prep.uniform() {
                        "member slot"
                    } else {
                        "GPU"
                    };
                    out.push_str(&format!(", leaving {left} {unit}(s) free there"));
                }
            }
        }
        out.push_str(&format!("; mean GPU-set score {mean}"));
        if let Within::OneDomainAt { tier } | Within::Domain { tier, .. } = &spec.within {
            out.push_str(&format!("; required: one {}", self.tree.tier_name(*tier)));
        }
        out
    }

    fn shortage(&self, spec: &super::GangSpec, scopes: &[Option<u32>]) -> Shortage {
        let in_scope = |position: usize| {
            let leaf = self.tree.node_leaf[position];
            scopes.iter().any(|s| match s {
                None => true,
                Some(d) => self.tree.domain(leaf).ancestors.contains(d),
            })
        };
        let positions: Vec<usize> = (0..self.node_cap.len()).filter(|&p| in_scope(p)).collect();
        let hosts = positions.iter().filter(|&&p| self.node_cap[p] > 0).count() as u32;
        let mut reasons: BTreeMap<String, u32> = BTreeMap::new();
        for &p in &positions {
            if let Some(reason) = &self.node_reason[p] {
                *reasons.entry(reason.summary()).or_default() += 1;
            }
        }
        let mut node_reasons: Vec<(String, u32)> = reasons.into_iter().collect();
        node_reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));

        let scope_cap = |scope: &Option<u32>| -> u64 {
            self.scope_leaves(*scope)
                .iter()
                .map(|&l| self.leaf_cap[l as usize])
                .sum()
        };
        let (fit, best) = if self.prep.uniform() {
            let fit = scopes.iter().map(scope_cap).max().unwrap_or(0);
            let best = (0..self.tree.tier_names.len())
                .filter_map(|tier| {
                    let (domain, cap) = self.tree.by_tier[tier]
                        .iter()
                        .filter(|&&d| {
                            scopes.iter().any(|s| match s {
                                None => true,
                                Some(sd) => self.tree.domain(d).ancestors.contains(sd),
                            })
                        })
                        .map(|&d| (d, scope_cap(&Some(d))))
                        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
                    Some(DomainCapacity {
                        tier: self.tree.tier_name(tier).to_string(),
                        domain: self.tree.domain(domain).path.clone(),
                        members: clamp_u32(cap),
                    })
                })
                .collect();
            (fit, best)
        } else {
            let fit = scopes
                .iter()
                .map(|&scope| {
                    let nodes = self.nodes_of(self.scope_leaves(scope));
                    match fill_all(&self.prep, nodes) {
                        Ok(filled) => filled.placed.len() as u64,
                        Err(placed) => u64::from(placed),
                    }
                })
                .max()
                .unwrap_or(0);
            (fit, Vec::new())
        };
        let need = match &spec.members {
            Members::Uniform { request, .. } => format!("{} each", describe_request(request)),
            Members::Each(each) => {
                let sizes: Vec<String> = each.iter().map(|r| r.gpus.to_string()).collect();
                format!("their own sets of {} free GPUs", sizes.join("+"))
            }
        };
        let within = match &spec.within {
            Within::Anywhere => None,
            Within::OneDomainAt { tier } => Some(format!("one {}", self.tree.tier_name(*tier))),
            Within::Domain { tier, name } => Some(format!("{} {name}", self.tree.tier_name(*tier))),
        };
        Shortage {
            members: clamp_u32(spec.members.len() as u64),
            need,
            fit: clamp_u32(fit),
            hosts,
            within,
            best,
            node_reasons,
        }
    }
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// `C(n, k)`, saturating.
fn binomial(n: u64, k: u64) -> u64 {
    if k > n {
        return 0;
    }
    let k = k.min(n - k);
    let mut acc: u64 = 1;
    for i in 0..k {
        acc = match acc.checked_mul(n - i) {
            Some(v) => v / (i + 1),
            None => return u64::MAX,
        };
    }
    acc
}

/// Every `k`-subset (indices into `caps`, sorted descending) whose sum reaches
/// `need`, pruned where even the largest remaining leaves fall short.
fn exact_sets(caps: &[u64], prefix: &[u64], k: usize, need: u64) -> Vec<Vec<usize>> {
    struct Walk<'c> {
        caps: &'c [u64],
        prefix: &'c [u64],
        k: usize,
        need: u64,
        chosen: Vec<usize>,
        out: Vec<Vec<usize>>,
    }
    impl Walk<'_> {
        fn walk(&mut self, start: usize, sum: u64) {
            let r = self.k - self.chosen.len();
            if r == 0 {
                if sum >= self.need {
                    self.out.push(self.chosen.clone());
                }
                return;
            }
            for i in start..self.caps.len() {
                // Sorted descending: the next `r` from `i` are the most reachable.
                if i + r > self.caps.len()
                    || sum + (self.prefix[i + r] - self.prefix[i]) < self.need
                {
                    break;
                }
                self.chosen.push(i);
                self.walk(i + 1, sum + self.caps[i]);
                self.chosen.pop();
            }
        }
    }
    let mut w = Walk {
        caps,
        prefix,
        k,
        need,
        chosen: Vec::new(),
        out: Vec::new(),
    };
    w.walk(0, 0);
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_saturates() {
        assert_eq!(binomial(40, 1), 40);
        assert_eq!(binomial(40, 3), 9880);
        assert_eq!(binomial(3, 5), 0);
        assert_eq!(binomial(200, 100), u64::MAX);
    }

    #[test]
    fn exact_sets_reach_need() {
        let caps = [5, 4, 3, 1];
        let mut prefix = vec![0];
        for c in caps {
            prefix.push(prefix.last().copied().unwrap_or(0) + c);
        }
        let sets = exact_sets(&caps, &prefix, 2, 7);
        assert_eq!(sets, vec![vec![0, 1], vec![0, 2], vec![1, 2]]);
        assert!(exact_sets(&caps, &prefix, 1, 6).is_empty());
    }
}
