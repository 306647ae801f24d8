//! Domain selection: which leaves, which nodes, which GPU sets, in one decision.
//!
//! This file holds the entry point ([`place`]), the scopes a gang may fill and
//! the ranking of leaf sets; `prepared` reads the requests and node capacities,
//! `consolidated` and `distributed` are the two searches (both place members on
//! a fixed node set with `fill`), `outcome` turns the winner (or the failure)
//! into a placement, an explanation or a shortage.

use super::domain::Tree;
use super::{GangCluster, GangNoFit, GangPlacement, Within};
use crate::gpuset::NoFitReason;
use fill::Filled;
use gputopo_api::PlacementStrategy;
use std::cmp::Reverse;

mod consolidated;
mod distributed;
mod fill;
mod outcome;
mod prepared;
mod slices;
mod structured;

pub(crate) use prepared::Prepared;

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
    /// Slice layers, outermost first; empty for an unsliced search.
    layers: Vec<crate::gang::Slice>,
}

pub(crate) fn place(
    spec: &super::GangSpec,
    cluster: &GangCluster,
) -> Result<GangPlacement, GangNoFit> {
    if spec.members.is_empty() {
        return Err(GangNoFit::NoMembers);
    }
    if spec.preferred.is_none() && spec.slices.is_empty() {
        return place_exact(spec, cluster, None);
    }
    structured::place(spec, cluster)
}

/// One search: `spec`'s required domain narrowed to one domain of
/// `gang_tier` where given, its slices (if any) required.
pub(super) fn place_exact(
    spec: &super::GangSpec,
    cluster: &GangCluster,
    gang_tier: Option<usize>,
) -> Result<GangPlacement, GangNoFit> {
    let n = spec.members.len();
    let layers = spec.slices.clone();
    // Sliced, the search's leaves are the outermost layer's domains.
    let depth = layers.first().map(|s| s.tier + 1);
    let tier_names = match depth {
        Some(d) => &cluster.tier_names[..d.min(cluster.tier_names.len())],
        None => &cluster.tier_names[..],
    };
    let tree = Tree::build(
        tier_names,
        cluster.nodes.iter().map(|node| {
            let path = match depth {
                Some(d) => &node.tiers[..d.min(node.tiers.len())],
                None => &node.tiers[..],
            };
            (node.id, path)
        }),
    );
    let mut scopes = scopes(&tree, &spec.within)?;
    if let Some(tier) = gang_tier {
        scopes = narrow(&tree, &scopes, tier)?;
    }
    let mut prep = Prepared::new(&cluster.nodes, &spec.members, spec.strategy);
    prep.max_per_node = spec.max_per_node;
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
        .map(|p| {
            let (cap, reason) = prep.capacity(p, members);
            match spec.max_per_node {
                // Uniform gangs count members per node; mixed ones GPUs,
                // which the fill caps instead.
                Some(max) if prep.uniform() => (cap.min(max), reason),
                _ => (cap, reason),
            }
        })
        .unzip();
    let mut problem = Problem {
        prep,
        tree,
        need,
        node_cap,
        node_reason,
        leaf_cap: Vec::new(),
        layers,
    };
    let mut leaf_cap = vec![0u64; problem.tree.domains.len()];
    if problem.layers.is_empty() {
        for (position, &cap) in problem.node_cap.iter().enumerate() {
            leaf_cap[problem.tree.node_leaf[position] as usize] += u64::from(cap);
        }
    } else {
        for &leaf in problem.tree.leaves() {
            leaf_cap[leaf as usize] = problem.slots(&problem.tree.domain(leaf).nodes, 0);
        }
    }
    problem.leaf_cap = leaf_cap;

    // Slices keep their members together: the spreading strategy does not
    // apply to a sliced gang.
    let best = match spec.strategy {
        PlacementStrategy::Distributed if problem.layers.is_empty() => scopes
            .iter()
            .filter_map(|&scope| problem.distributed(scope))
            .min_by(|a, b| {
                b.leaves
                    .len()
                    .cmp(&a.leaves.len())
                    .then(b.quality.cmp(&a.quality))
            }),
        _ => scopes
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

/// The domains of `tier` inside the required scopes.
fn narrow(
    tree: &Tree,
    required: &[Option<u32>],
    tier: usize,
) -> Result<Vec<Option<u32>>, GangNoFit> {
    let inside = scopes(tree, &Within::OneDomainAt { tier })?;
    Ok(inside
        .into_iter()
        .filter(|d| {
            required.iter().any(|s| match (s, d) {
                (None, _) => true,
                (Some(s), Some(d)) => tree.domain(*d).ancestors.contains(s),
                (Some(_), None) => false,
            })
        })
        .collect())
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
    /// Places the members on a set of leaves: slice by slice where sliced.
    fn fill(&self, leaves: &[u32]) -> Result<Filled, u32> {
        if self.layers.is_empty() {
            fill::fill_all(&self.prep, self.nodes_of(leaves))
        } else {
            self.fill_sliced(leaves)
        }
    }

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
        let spans = self.tree.span_counts(leaves);
        let held: u64 = leaves.iter().map(|&l| self.leaf_cap[l as usize]).sum();
        Rank {
            leaves: leaves.len(),
            spans,
            leftover: held.saturating_sub(self.need),
        }
    }
}
