//! A gang's GPU members placed one at a time, when the members' own rules
//! among each other (spread over zones, anti-affinity or affinity over a
//! zone key) break the gang search's placement: the search knows network
//! domains and GPU sets, not the pods' rules, so it may pack members a
//! spread constraint keeps apart.
//!
//! Each member is judged, as a single pod, on the cluster with the members
//! before it already placed (every rule holds by construction, as it does
//! when kube-scheduler places such pods one after another), and goes to the
//! feasible node closest to those members: the same node, then the same
//! domain at the innermost tier, then outward; the pod's own score (GPU set
//! quality, its preferences) decides among nodes equally close. Largest
//! requests go first, as in the gang search. Greedy: a gang it cannot place
//! waits, though a search over every order might have found room.

use super::{Gang, GangDecision, waiting};
use crate::filter::{Fit, PodContext};
use crate::schedule::{Candidate, Placement, feasible, placement, unschedulable};
use crate::score::Scorer;
use crate::snapshot::{DomainId, NodeId, Snapshot};
use std::cmp::Ordering;
use std::collections::BTreeSet;

impl Gang<'_> {
    /// Places the GPU members of `order` (largest request first) one at a
    /// time on `work` (which holds none of them yet); `broken` says how the
    /// gang search's placement broke their rules, for the explanation and
    /// the message.
    pub(super) fn place_one_by_one(
        &self,
        work: &mut Snapshot,
        order: &[usize],
        broken: &str,
        placements: &mut [Option<Placement>],
    ) -> Result<(), GangDecision> {
        let (name, n) = (&self.name, self.members.len());
        let mut near = Placed::default();
        for &m in order {
            let member = &self.members[m];
            let ctx = PodContext::new(work, member, self.config);
            let Some(chosen) = closest_best(&ctx, work, &near) else {
                return Err(waiting(format!(
                    "gang {name} ({n} members) waits, nothing bound: the gang search's placement breaks the members' rules ({broken}), and placed one at a time, member {} finds no node: {}",
                    member.key(),
                    unschedulable(&ctx).message
                )));
            };
            let mut placed = placement(&ctx, chosen.best, None, chosen.feasible);
            placed.explanation = format!(
                "gang {name}, {n} members placed one at a time, each judged against the members before it, as their rules among each other ask (the gang search's placement broke them: {broken}); this member on {}",
                placed.explanation
            );
            near.add(work, placed.node_id);
            self.record(work, member, &placed)?;
            placements[m] = Some(placed);
        }
        Ok(())
    }
}

/// Where the members placed so far are: their nodes, and their domains at
/// each tier.
#[derive(Default)]
struct Placed {
    nodes: BTreeSet<NodeId>,
    /// Per tier, outermost first.
    domains: Vec<BTreeSet<DomainId>>,
}

impl Placed {
    fn add(&mut self, work: &Snapshot, node: NodeId) {
        self.nodes.insert(node);
        let path = work.node(node).domain_path();
        self.domains.resize_with(path.len(), BTreeSet::new);
        for (tier, domain) in path.iter().enumerate() {
            if let Some(d) = domain {
                self.domains[tier].insert(*d);
            }
        }
    }

    /// How close node `id` is to the placed members, as bits from the most
    /// significant: a member on the node itself, then one sharing its
    /// domain at each tier from the innermost outward. More is closer.
    fn closeness(&self, work: &Snapshot, id: NodeId) -> u32 {
        let mut near = u32::from(self.nodes.contains(&id));
        for (tier, domain) in work.node(id).domain_path().iter().enumerate().rev() {
            let shared =
                domain.is_some_and(|d| self.domains.get(tier).is_some_and(|s| s.contains(&d)));
            near = (near << 1) | u32::from(shared);
        }
        near
    }
}

/// The chosen node and how many were feasible.
struct Chosen {
    best: Candidate,
    feasible: usize,
}

/// The feasible node closest to the members placed so far, best scored
/// among equally close ones (ties to the lower node index, as single pods
/// break them); `None` when no node is feasible.
fn closest_best(ctx: &PodContext<'_>, work: &Snapshot, near: &Placed) -> Option<Chosen> {
    let fits: Vec<(usize, Fit)> = feasible(ctx).collect();
    let scorer = Scorer::over(ctx, &fits);
    let mut best: Option<(u32, Candidate)> = None;
    for &(i, fit) in &fits {
        let node = NodeId(i as u32);
        let closeness = near.closeness(work, node);
        let parts = scorer.score(ctx, i, &fit);
        let better = match &best {
            None => true,
            Some((b_near, b)) => match closeness.cmp(b_near) {
                Ordering::Greater => true,
                Ordering::Less => false,
                Ordering::Equal => parts.total > b.parts.total,
            },
        };
        if better {
            best = Some((closeness, Candidate { node, fit, parts }));
        }
    }
    best.map(|(_, best)| Chosen {
        best,
        feasible: fits.len(),
    })
}
