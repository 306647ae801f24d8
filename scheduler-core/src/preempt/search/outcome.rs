//! What the search reports: the proposal (victims, members, cost, the pass and
//! its explanation), or the shortfall when no pass frees a usable set.

use super::{Class, Search, Solution};
use crate::gang::{MemberSlot, TierSpan, Within, describe_request};
use crate::preempt::cost::Cost;
use crate::preempt::{Pass, Proposal, Shortfall, VictimRef};

impl Search<'_> {
    pub(super) fn proposal(&self, solution: &Solution, class: Class) -> Proposal {
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

    pub(super) fn shortfall(&self, most: (u32, Option<u32>)) -> Shortfall {
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
