//! The victim search: units, per-node menus, the knapsack over a scope.
//!
//! This file builds the units (a pod, or a whole gang) and runs the passes;
//! `menu` prices each node's member counts, `knapsack` spreads the members
//! over a scope's menus, and `outcome` writes the proposal or the shortfall.

use super::cost::{Cost, PreemptionPolicy};
use super::{Pass, PreemptCluster, PreemptNoFit, Preemptor, Proposal};
use crate::gang::domain::Tree;
use crate::gang::select::scopes;
use crate::gang::{GangNoFit, Within};
use crate::gpuset::{NodeShape, Picker};
use gputopo_api::WorkloadKind;
use menu::Menu;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

mod knapsack;
mod menu;
mod outcome;

/// How a unit may be evicted: the pass that first allows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Inference,
    Training,
    Protected,
}

impl Class {
    fn pass(self) -> Pass {
        match self {
            Class::Inference => Pass::Inference,
            Class::Training => Pass::Training,
            Class::Protected => Pass::Protected,
        }
    }
}

/// A pod, or a whole gang: evicted together.
#[derive(Clone, Debug)]
struct Unit {
    /// (node position, victim index).
    pods: Vec<(u32, u32)>,
    /// (node position, GPUs there), one entry per node.
    masks: Vec<(u32, u32)>,
    max_priority: i32,
    class: Class,
    cost: Cost,
}

impl Unit {
    fn mask_on(&self, position: u32) -> u32 {
        self.masks
            .iter()
            .find(|(p, _)| *p == position)
            .map_or(0, |(_, m)| *m)
    }
}

/// A victim's class and the GPU-seconds its `held` GPUs lose.
fn priced(
    victim: &super::Victim,
    held: u32,
    policy: &PreemptionPolicy,
    now: SystemTime,
) -> (Class, u64) {
    let class = match victim.workload {
        Some(WorkloadKind::Inference) => Class::Inference,
        Some(WorkloadKind::Training) | None => {
            let protected = policy.protected(
                now,
                victim.checkpoint,
                victim.expected_completion,
                victim.start,
            );
            if protected {
                Class::Protected
            } else {
                Class::Training
            }
        }
    };
    (class, policy.loss(victim, held, now))
}

/// A scope's answer: members placed, units kept, what it costs.
#[derive(Clone, Debug)]
struct Solution {
    /// (node position, GPUs, score).
    members: Vec<(u32, u32, u8)>,
    units: Vec<u32>,
    cost: Cost,
    leaves: Vec<u32>,
    /// Domains per outer tier, outermost first.
    spans: Vec<usize>,
}

impl Solution {
    fn key(&self) -> ((u32, u64, u32, u32), usize, &[usize]) {
        (self.cost.key(), self.leaves.len(), &self.spans)
    }
}

struct Search<'a> {
    preemptor: &'a Preemptor,
    cluster: &'a PreemptCluster,
    policy: &'a PreemptionPolicy,
    tree: Tree,
    units: Vec<Unit>,
    /// Per node position: eligible units holding GPUs there.
    node_units: Vec<Vec<u32>>,
    /// Per node position: units that go whenever a member goes there (its
    /// rule victims, [`super::PreemptNode::required`]).
    required_units: Vec<Vec<u32>>,
    /// Per node position: a required unit may not be evicted (a member of
    /// equal or higher priority): no member goes there.
    blocked: Vec<bool>,
    shape_of: Vec<u32>,
    pickers: Vec<Picker<'a>>,
    members: u32,
    not_lower: u32,
}

pub(super) fn propose(
    preemptor: &Preemptor,
    cluster: &PreemptCluster,
    policy: &PreemptionPolicy,
    now: SystemTime,
) -> Result<Proposal, PreemptNoFit> {
    if preemptor.members == 0 {
        return Err(PreemptNoFit::NoMembers);
    }
    let tree = Tree::of_nodes(&cluster.tier_names, cluster.nodes.iter().map(|n| &n.node));
    let mut scope_list = scopes(&tree, &preemptor.within).map_err(|e| match e {
        GangNoFit::NoSuchTier { tier, tiers } => PreemptNoFit::NoSuchTier { tier, tiers },
        GangNoFit::NoSuchDomain { tier, name } => PreemptNoFit::NoSuchDomain { tier, name },
        // `scopes` says only which tier or domain is unknown.
        _ => PreemptNoFit::NoMembers,
    })?;
    if preemptor.members > 1 && preemptor.within == Within::Anywhere {
        scope_list.extend((0..tree.domains.len() as u32).map(Some));
    }
    let search = Search::new(preemptor, cluster, policy, tree, now);
    let mut most = (0u32, None);
    for class in [Class::Inference, Class::Training, Class::Protected] {
        let menus: Vec<Menu> = (0..cluster.nodes.len() as u32)
            .map(|p| search.menu(p, class))
            .collect();
        let mut best: Option<Solution> = None;
        for &scope in &scope_list {
            let nodes = search.scope_nodes(scope);
            let (picks, reach) = search.knapsack(&nodes, &menus);
            if reach > most.0 || (reach == most.0 && most.1.is_none() && scope.is_some()) {
                most = (reach, scope);
            }
            let Some(picks) = picks else { continue };
            let Some(solution) = search.realise(&picks, &menus) else {
                continue;
            };
            if best.as_ref().is_none_or(|b| solution.key() < b.key()) {
                best = Some(solution);
            }
        }
        if let Some(solution) = best {
            return Ok(search.proposal(&solution, class));
        }
    }
    Err(PreemptNoFit::Short(search.shortfall(most)))
}

impl<'a> Search<'a> {
    fn new(
        preemptor: &'a Preemptor,
        cluster: &'a PreemptCluster,
        policy: &'a PreemptionPolicy,
        tree: Tree,
        now: SystemTime,
    ) -> Search<'a> {
        let mut shape_index: HashMap<*const NodeShape, u32> = HashMap::new();
        let mut pickers = Vec::new();
        let shape_of = cluster
            .nodes
            .iter()
            .map(|n| {
                *shape_index
                    .entry(Arc::as_ptr(&n.node.shape))
                    .or_insert_with(|| {
                        pickers.push(n.node.shape.picker(&preemptor.request));
                        pickers.len() as u32 - 1
                    })
            })
            .collect();

        let mut units: Vec<Unit> = Vec::new();
        let mut by_gang: HashMap<&str, usize> = HashMap::new();
        let mut required_units: Vec<Vec<u32>> = vec![Vec::new(); cluster.nodes.len()];
        for (position, node) in cluster.nodes.iter().enumerate() {
            for (index, victim) in node.victims.iter().enumerate() {
                let new_unit = || Unit {
                    pods: Vec::new(),
                    masks: Vec::new(),
                    max_priority: i32::MIN,
                    class: Class::Inference,
                    cost: Cost::default(),
                };
                let u = match &victim.gang {
                    Some(gang) => *by_gang.entry(gang.as_str()).or_insert_with(|| {
                        units.push(new_unit());
                        units.len() - 1
                    }),
                    None => {
                        units.push(new_unit());
                        units.len() - 1
                    }
                };
                if node.required.contains(&index) && !required_units[position].contains(&(u as u32))
                {
                    required_units[position].push(u as u32);
                }
                let unit = &mut units[u];
                unit.pods.push((position as u32, index as u32));
                unit.max_priority = unit.max_priority.max(victim.priority);
                let gpus = victim.gpus & node.node.shape.gpus_mask();
                match unit.masks.iter_mut().find(|(p, _)| *p == position as u32) {
                    Some((_, m)) => *m |= gpus,
                    None => unit.masks.push((position as u32, gpus)),
                }
                let held = gpus.count_ones();
                let (class, seconds) = priced(victim, held, policy, now);
                unit.class = unit.class.max(class);
                unit.cost.gpu_seconds = unit.cost.gpu_seconds.saturating_add(seconds);
                unit.cost.pods += 1;
                unit.cost.gpus += held;
            }
        }
        let mut not_lower = 0u32;
        let mut node_units = vec![Vec::new(); cluster.nodes.len()];
        for (u, unit) in units.iter_mut().enumerate() {
            unit.cost.protected = u32::from(unit.class == Class::Protected);
            if unit.class == Class::Inference {
                unit.cost.inference = 1;
            } else {
                unit.cost.training = 1;
            }
            if unit.max_priority >= preemptor.priority {
                not_lower += unit.pods.len() as u32;
                continue;
            }
            for &(position, mask) in &unit.masks {
                if mask != 0 {
                    node_units[position as usize].push(u as u32);
                }
            }
        }
        let blocked = required_units
            .iter()
            .map(|r| {
                r.iter()
                    .any(|&u| units[u as usize].max_priority >= preemptor.priority)
            })
            .collect();
        for (position, required) in required_units.iter().enumerate() {
            node_units[position].retain(|u| !required.contains(u));
        }
        Search {
            preemptor,
            cluster,
            policy,
            tree,
            units,
            node_units,
            required_units,
            blocked,
            shape_of,
            pickers,
            members: preemptor.members,
            not_lower,
        }
    }

    fn eligible_units(&self) -> u32 {
        self.units
            .iter()
            .filter(|u| u.max_priority < self.preemptor.priority)
            .count() as u32
    }

    /// Members of the preemptor a node hosts on `free`, by repeated picks, up to `limit`.
    fn capacity(&self, position: u32, free: u32, limit: u32) -> u32 {
        let picker = &self.pickers[self.shape_of[position as usize] as usize];
        let mut left = free;
        for hosted in 0..limit {
            match picker.pick(left) {
                Ok(pick) if pick.gpus != 0 => left &= !pick.gpus,
                Ok(_) => return limit,
                Err(_) => return hosted,
            }
        }
        limit
    }

    fn free(&self, position: u32) -> u32 {
        self.cluster.nodes[position as usize].node.free
    }

    fn mask_of(&self, units: &[u32], position: u32) -> u32 {
        units
            .iter()
            .fold(0, |m, &u| m | self.units[u as usize].mask_on(position))
    }

    fn scope_nodes(&self, scope: Option<u32>) -> Vec<u32> {
        match scope {
            None => (0..self.cluster.nodes.len() as u32).collect(),
            Some(d) => self.tree.domain(d).nodes.clone(),
        }
    }
}
