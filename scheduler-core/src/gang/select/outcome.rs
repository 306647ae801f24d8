//! What a search's result becomes: the placement with its explanation, or,
//! when no scope holds the gang, the shortage that says how close it came.

use super::fill::fill_all;
use super::slices::path_to;
use super::{Choice, Problem};
use crate::gang::domain::{natural_cmp, short_tier_name};
use crate::gang::{
    DomainCapacity, GangPlacement, GangSpec, MemberSlot, Members, Shortage, SliceShortage,
    TierSpan, Within, describe_request,
};
use gputopo_api::PlacementStrategy;
use std::collections::{BTreeMap, HashMap};

impl Problem<'_> {
    pub(super) fn placement(&self, spec: &GangSpec, choice: &Choice) -> GangPlacement {
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
        self.in_rank_order(&mut members);
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

    /// Lays the members out in order over their slots: among members
    /// asking alike, consecutive members get consecutive slots by domain
    /// path, node and lowest GPU, so neighbouring ranks share a node and a
    /// domain where the placement allows (and every slice its domain).
    fn in_rank_order(&self, members: &mut [MemberSlot]) {
        let position: HashMap<usize, usize> = self
            .prep
            .nodes
            .iter()
            .enumerate()
            .map(|(p, n)| (n.id, p))
            .collect();
        let path = |slot: &MemberSlot| {
            let node = &self.prep.nodes[position[&slot.node]];
            path_to(&node.tiers, node.tiers.len())
        };
        for group in &self.prep.groups {
            let mut slots: Vec<(String, MemberSlot)> = group
                .members
                .iter()
                .map(|&m| (path(&members[m as usize]), members[m as usize]))
                .collect();
            slots.sort_by(|(pa, a), (pb, b)| {
                natural_cmp(pa, pb)
                    .then(a.node.cmp(&b.node))
                    .then(a.gpus.trailing_zeros().cmp(&b.gpus.trailing_zeros()))
            });
            let mut ordered = group.members.clone();
            ordered.sort_unstable();
            for (m, (_, slot)) in ordered.into_iter().zip(slots) {
                members[m as usize] = slot;
            }
        }
    }

    fn explain(
        &self,
        spec: &GangSpec,
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
        let mut out = format!("{what} on {} node(s)", nodes.len());
        if !spans.is_empty() {
            let parts: Vec<String> = spans
                .iter()
                .rev()
                .enumerate()
                .map(|(i, span)| {
                    let tier = short_tier_name(&span.tier);
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
        if let Within::OneDomainAt { tier } | Within::Domain { tier, .. } = &spec.within {
            out.push_str(&format!("; required: one {}", self.tree.tier_name(*tier)));
        }
        out
    }

    pub(super) fn shortage(&self, spec: &GangSpec, scopes: &[Option<u32>]) -> Shortage {
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
        let slices = self.slice_shortage(scopes);
        Shortage {
            slices,
            members: clamp_u32(spec.members.len() as u64),
            need,
            fit: clamp_u32(fit),
            hosts,
            within,
            best,
            node_reasons,
        }
    }

    /// Where slices are required: how many whole slices fit in the scopes,
    /// and the domain holding the most.
    fn slice_shortage(&self, scopes: &[Option<u32>]) -> Option<Box<SliceShortage>> {
        self.layers.first().map(|slice| {
            let size = u64::from(slice.size);
            let in_scopes = |leaf: u32| {
                scopes.iter().any(|s| match s {
                    None => true,
                    Some(d) => self.tree.domain(leaf).ancestors.contains(d),
                })
            };
            let leaves: Vec<u32> = self
                .tree
                .leaves()
                .iter()
                .copied()
                .filter(|&l| in_scopes(l))
                .collect();
            let fit: u64 = scopes
                .iter()
                .map(|&scope| {
                    self.scope_leaves(scope)
                        .iter()
                        .map(|&l| self.leaf_cap[l as usize] / size)
                        .sum::<u64>()
                })
                .max()
                .unwrap_or(0);
            let best = leaves
                .iter()
                .map(|&l| (l, self.leaf_cap[l as usize] / size))
                .filter(|&(_, n)| n > 0)
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                .map(|(l, n)| (self.tree.domain(l).path.clone(), clamp_u32(n)));
            Box::new(SliceShortage {
                size: slice.size,
                tier: self.tree.tier_name(slice.tier).to_string(),
                needed: clamp_u32(self.need / size),
                fit: clamp_u32(fit),
                best,
            })
        })
    }
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
