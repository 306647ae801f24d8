//! The victim search: units, per-node menus, the knapsack over a scope.

use super::cost::{Cost, PreemptionPolicy};
use super::{Pass, PreemptCluster, PreemptNoFit, Preemptor, Proposal, Shortfall, VictimRef};
use crate::gang::domain::Tree;
use crate::gang::select::scopes;
use crate::gang::{GangNoFit, MemberSlot, TierSpan, Within, describe_request};
use crate::gpuset::{NodeShape, Picker};
use gputopo_api::WorkloadKind;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

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

/// For each member count `j`, the cheapest units whose eviction lets the node host `j`.
type Menu = Vec<Option<(Cost, Vec<u32>)>>;

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
    let tree = Tree::build(
        &cluster.tier_names,
        cluster
            .nodes
            .iter()
            .map(|n| (n.node.id, n.node.tiers.as_slice())),
    );
    let mut scope_list = scopes(&tree, &preemptor.within).map_err(|e| match e {
        GangNoFit::NoSuchTier { tier, tiers } => PreemptNoFit::NoSuchTier { tier, tiers },
        GangNoFit::NoSuchDomain { tier, name } => PreemptNoFit::NoSuchDomain { tier, name },
        GangNoFit::NoMembers | GangNoFit::Short(_) => PreemptNoFit::NoMembers,
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
                let unit = &mut units[u];
                unit.pods.push((position as u32, index as u32));
                unit.max_priority = unit.max_priority.max(victim.priority);
                let gpus = victim.gpus & node.node.shape.gpus_mask();
                match unit.masks.iter_mut().find(|(p, _)| *p == position as u32) {
                    Some((_, m)) => *m |= gpus,
                    None => unit.masks.push((position as u32, gpus)),
                }
                let held = gpus.count_ones();
                let (class, seconds) = match victim.workload {
                    Some(WorkloadKind::Inference) => {
                        (Class::Inference, policy.inference_loss(held))
                    }
                    Some(WorkloadKind::Training) | None => {
                        let protected = policy.protected(
                            now,
                            victim.checkpoint,
                            victim.expected_completion,
                            victim.start,
                        );
                        let class = if protected {
                            Class::Protected
                        } else {
                            Class::Training
                        };
                        (
                            class,
                            policy.training_loss(now, held, victim.checkpoint, victim.start),
                        )
                    }
                };
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
        Search {
            preemptor,
            cluster,
            policy,
            tree,
            units,
            node_units,
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

    /// The node's menu when units up to `class` may be evicted.
    fn menu(&self, position: u32, class: Class) -> Menu {
        let allowed: Vec<u32> = self.node_units[position as usize]
            .iter()
            .copied()
            .filter(|&u| self.units[u as usize].class <= class)
            .collect();
        let free = self.free(position);
        let limit = self.members;
        let mut menu: Menu = vec![Some((Cost::default(), Vec::new()))];
        let offer = |menu: &mut Menu, j: u32, cost: Cost, units: &dyn Fn() -> Vec<u32>| {
            let j = j as usize;
            if menu.len() <= j {
                menu.resize(j + 1, None);
            }
            if menu[j]
                .as_ref()
                .is_none_or(|(best, _)| cost.key() < best.key())
            {
                menu[j] = Some((cost, units()));
            }
        };
        if allowed.len() <= self.policy.exact_units_per_node.min(20) {
            let count = 1usize << allowed.len();
            let mut freed = vec![0u32; count];
            let mut cost = vec![Cost::default(); count];
            for s in 0..count {
                if s > 0 {
                    let low = s.trailing_zeros() as usize;
                    let prev = s & (s - 1);
                    let unit = &self.units[allowed[low] as usize];
                    freed[s] = freed[prev] | unit.mask_on(position);
                    cost[s] = cost[prev] + unit.cost;
                }
                let cap = self.capacity(position, free | freed[s], limit);
                for j in 1..=cap {
                    offer(&mut menu, j, cost[s], &|| {
                        (0..allowed.len())
                            .filter(|&i| s & (1 << i) != 0)
                            .map(|i| allowed[i])
                            .collect()
                    });
                }
            }
        } else {
            let mut order = allowed.clone();
            order.sort_by(|&a, &b| {
                let (ua, ub) = (&self.units[a as usize], &self.units[b as usize]);
                let fa = u128::from(ua.mask_on(position).count_ones().max(1));
                let fb = u128::from(ub.mask_on(position).count_ones().max(1));
                ua.class
                    .cmp(&ub.class)
                    .then(
                        (u128::from(ua.cost.gpu_seconds) * fb)
                            .cmp(&(u128::from(ub.cost.gpu_seconds) * fa)),
                    )
                    .then(a.cmp(&b))
            });
            let mut reached = self.capacity(position, free, limit);
            let mut chosen: Vec<u32> = Vec::new();
            for u in order {
                if reached >= limit {
                    break;
                }
                chosen.push(u);
                let mask = self.mask_of(&chosen, position);
                let cap = self.capacity(position, free | mask, limit);
                while reached < cap {
                    reached += 1;
                    let mut keep = chosen.clone();
                    for i in (0..keep.len()).rev() {
                        let mut without = keep.clone();
                        without.remove(i);
                        let m = self.mask_of(&without, position);
                        if self.capacity(position, free | m, reached) >= reached {
                            keep = without;
                        }
                    }
                    let cost = keep
                        .iter()
                        .fold(Cost::default(), |c, &u| c + self.units[u as usize].cost);
                    offer(&mut menu, reached, cost, &|| keep.clone());
                }
            }
        }
        menu
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

    /// The cheapest way to host every member on `nodes` (one menu entry per
    /// node), and how many members the scope could host at most.
    fn knapsack(&self, nodes: &[u32], menus: &[Menu]) -> (Option<Vec<(u32, u32)>>, u32) {
        let n = self.members as usize;
        let mut dp: Vec<Option<Cost>> = vec![None; n + 1];
        dp[0] = Some(Cost::default());
        // Per node that offers anything: (position, per target count: (j, previous count)).
        let mut choices: Vec<(u32, Vec<(u32, u32)>)> = Vec::new();
        for &position in nodes {
            let menu = &menus[position as usize];
            if menu.len() <= 1 {
                continue;
            }
            let mut next = dp.clone();
            let mut choice: Vec<(u32, u32)> = (0..=n as u32).map(|m| (0, m)).collect();
            for (m, base) in dp.iter().enumerate() {
                let Some(base) = *base else { continue };
                for (j, entry) in menu.iter().enumerate().skip(1) {
                    let Some((cost, _)) = entry else { continue };
                    let t = (m + j).min(n);
                    let candidate = base + *cost;
                    if next[t].is_none_or(|c| candidate.key() < c.key()) {
                        next[t] = Some(candidate);
                        choice[t] = (j as u32, m as u32);
                    }
                }
            }
            dp = next;
            choices.push((position, choice));
        }
        let reach = dp.iter().rposition(Option::is_some).unwrap_or(0) as u32;
        if dp[n].is_none() {
            return (None, reach);
        }
        let mut picks = Vec::new();
        let mut m = n as u32;
        for (position, choice) in choices.iter().rev() {
            let (j, previous) = choice[m as usize];
            if j > 0 {
                picks.push((*position, j));
            }
            m = previous;
        }
        picks.reverse();
        (Some(picks), reach)
    }

    /// Places the members as the menus say, charges each unit once, and drops
    /// units whose GPUs no member uses.
    fn realise(&self, picks: &[(u32, u32)], menus: &[Menu]) -> Option<Solution> {
        let picker_of = |p: u32| &self.pickers[self.shape_of[p as usize] as usize];
        let mut members: Vec<(u32, u32, u8)> = Vec::new();
        let mut chosen: BTreeSet<u32> = BTreeSet::new();
        let mut left = self.members;
        for &(position, j) in picks {
            let (_, units) = menus[position as usize].get(j as usize)?.as_ref()?;
            chosen.extend(units.iter().copied());
            let mut free = self.free(position) | self.mask_of(units, position);
            for _ in 0..j.min(left) {
                let pick = picker_of(position).pick(free).ok()?;
                free &= !pick.gpus;
                members.push((position, pick.gpus, pick.score));
                left -= 1;
            }
        }
        if left > 0 {
            return None;
        }
        let used = |position: u32| -> u32 {
            members
                .iter()
                .filter(|(p, _, _)| *p == position)
                .fold(0, |m, (_, g, _)| m | g)
        };
        let units: Vec<u32> = chosen
            .into_iter()
            .filter(|&u| {
                self.units[u as usize]
                    .masks
                    .iter()
                    .any(|&(p, m)| m & used(p) != 0)
            })
            .collect();
        let cost = units
            .iter()
            .fold(Cost::default(), |c, &u| c + self.units[u as usize].cost);
        let mut leaves: Vec<u32> = members
            .iter()
            .map(|(p, _, _)| self.tree.node_leaf[*p as usize])
            .collect();
        leaves.sort_unstable();
        leaves.dedup();
        let spans = (0..self.tree.depth - 1)
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
        Some(Solution {
            members,
            units,
            cost,
            leaves,
            spans,
        })
    }

    fn proposal(&self, solution: &Solution, class: Class) -> Proposal {
        let nodes = &self.cluster.nodes;
        let mut victims: Vec<VictimRef> = solution
            .units
            .iter()
            .flat_map(|&u| {
                let unit = &self.units[u as usize];
                unit.pods.iter().map(move |&(p, v)| {
                    let node = &nodes[p as usize];
                    let victim = &node.victims[v as usize];
                    VictimRef {
                        id: victim.id,
                        name: victim.name.clone(),
                        node: node.node.id,
                        gang: victim.gang.clone(),
                        gpus: victim.gpus,
                        protected: unit.class == Class::Protected,
                    }
                })
            })
            .collect();
        victims.sort_by_key(|v| (v.node, v.id));
        let members: Vec<MemberSlot> = solution
            .members
            .iter()
            .map(|&(p, gpus, score)| MemberSlot {
                node: nodes[p as usize].node.id,
                gpus,
                score,
            })
            .collect();
        let spans: Vec<TierSpan> = self.tree.tier_spans(&solution.leaves);
        let pass = if solution.cost.is_zero() {
            Pass::Inference
        } else {
            class.pass()
        };
        let explanation = self.explain(&victims, &members, &solution.cost, pass);
        Proposal {
            victims,
            members,
            spans,
            cost: solution.cost,
            pass,
            explanation,
        }
    }

    fn explain(
        &self,
        victims: &[VictimRef],
        members: &[MemberSlot],
        cost: &Cost,
        pass: Pass,
    ) -> String {
        let need = describe_request(&self.preemptor.request);
        let m = members.len();
        let places: Vec<String> = members
            .iter()
            .take(8)
            .map(|s| format!("node {} GPUs {}", s.node, index_list(s.gpus)))
            .collect();
        let more = if m > 8 {
            format!(" and {} more", m - 8)
        } else {
            String::new()
        };
        if victims.is_empty() {
            return format!(
                "fits without eviction: {m} member(s) of {need} on {}{more}",
                places.join(", ")
            );
        }
        let names: Vec<String> = victims.iter().take(6).map(|v| v.name.clone()).collect();
        let others = if victims.len() > 6 {
            format!(" and {} more", victims.len() - 6)
        } else {
            String::new()
        };
        let why = match pass {
            Pass::Inference => "inference pods only".to_string(),
            Pass::Training => {
                "no eviction of inference pods alone frees a usable set, so training pods too"
                    .to_string()
            }
            Pass::Protected => format!(
                "only evicting protected training pods ({} unit(s): an old checkpoint or near completion) frees a usable set",
                cost.protected
            ),
        };
        format!(
            "evict {} pod(s) in {} unit(s) ({}{others}), losing {:.2} GPU-hours; {why}; frees {m} member(s) of {need}: {}{more}; {} lower-priority unit(s) considered",
            cost.pods,
            cost.units(),
            names.join(", "),
            cost.gpu_hours(),
            places.join(", "),
            self.eligible_units()
        )
    }

    fn shortfall(&self, most: (u32, Option<u32>)) -> Shortfall {
        let within = match &self.preemptor.within {
            Within::Anywhere => None,
            Within::OneDomainAt { tier } => Some(format!("one {}", self.tree.tier_name(*tier))),
            Within::Domain { tier, name } => Some(format!("{} {name}", self.tree.tier_name(*tier))),
        };
        Shortfall {
            members: self.members,
            need: describe_request(&self.preemptor.request),
            within,
            most: most.0,
            most_in: most.1.map(|d| self.tree.domain(d).path.clone()),
            units: self.eligible_units(),
            not_lower: self.not_lower,
        }
    }
}

/// `0,1,2,3`.
fn index_list(mask: u32) -> String {
    (0..32)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i: u32| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}
