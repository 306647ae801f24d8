//! Gangs on the cluster snapshot: every member of a gang placed in one
//! decision — nodes, network domains and each node's GPU set together — or
//! none (docs/contract.md, "Network domains"; the scheduler-plugins convention that
//! a gang binds all together or not at all).
//!
//! The snapshot supplies what each member may use (the same predicates a
//! single pod passes: resources, selectors, taints, GPUs); [`crate::gang`]
//! chooses the domains and GPU sets; then the placement is replayed member by
//! member on a copy of the snapshot, so that members sharing a node are
//! counted against its CPU, memory and GPUs together, and each member gets the
//! same [`Placement`] (explanation, UUIDs, score) a single pod would.
//!
//! Limits, stated rather than guessed around: members that ask for whole GPUs
//! are placed by the gang search, which needs each candidate node's
//! `GpuTopology`; members that ask for no GPU are placed afterwards like
//! single pods, on the cluster as the GPU members leave it; members that share
//! a GPU (`gpu-share`) are refused in a gang. A node is a candidate for the
//! gang when some GPU member could use it on its own (members asking
//! different GPU counts fit different nodes).
//!
//! Rules among the members: the search keeps members whose required
//! anti-affinity over hostnames repels every two of them one per node; the
//! replay judges every other rule (spread, affinity over zones) with the
//! members before counted, and where the search's placement breaks one, the
//! members are placed one at a time instead (`one_by_one.rs`).

use crate::config::SchedulerConfig;
use crate::filter::{Fit, PickSummary, PodContext};
use crate::gang::{
    GangCluster, GangNoFit, GangNode, GangPlacement, GangSpec, MemberSlot, place_gang,
};
use crate::pod::PendingPod;
use crate::schedule::{Candidate, Decision, Placement, placement, schedule};
use crate::score::Scorer;
use crate::snapshot::{NodeId, Snapshot};
use gputopo_api::Collective;
use std::collections::BTreeMap;

mod one_by_one;
pub mod structure;

/// What happened to a gang.
#[derive(Clone, Debug, PartialEq)]
pub enum GangDecision {
    /// One placement per member, in the members' order.
    Placed(Vec<Placement>),
    /// Nothing placed; why, in one message for a `FailedScheduling` event.
    Waiting { message: String },
}

/// Places every member of a gang, or none; see the module docs.
pub fn schedule_gang(
    snapshot: &Snapshot,
    members: &[PendingPod],
    config: &SchedulerConfig,
) -> GangDecision {
    decide(snapshot, members, config, false)
}

/// [`schedule_gang`] with at most one GPU member per node: for members
/// whose other devices a node holds one of (an IMEX channel).
pub fn schedule_gang_apart(
    snapshot: &Snapshot,
    members: &[PendingPod],
    config: &SchedulerConfig,
) -> GangDecision {
    decide(snapshot, members, config, true)
}

fn decide(
    snapshot: &Snapshot,
    members: &[PendingPod],
    config: &SchedulerConfig,
    apart: bool,
) -> GangDecision {
    let Some(first) = members.first() else {
        return waiting("a gang with no members cannot be placed".to_string());
    };
    let gang = Gang {
        name: first
            .request
            .gang
            .as_ref()
            .map(|g| g.name().to_string())
            .unwrap_or_else(|| first.key()),
        members,
        config,
        apart,
    };
    let contexts: Vec<PodContext<'_>> = members
        .iter()
        .map(|m| PodContext::new(snapshot, m, config))
        .collect();
    if let Some(m) = contexts.iter().find(|c| c.wants_shared_gpu()) {
        return waiting(format!(
            "gang {}: member {} shares a GPU (gputopo.dev/gpu-share), which gangs do not support; give gang members whole GPUs",
            gang.name,
            m.pod.key()
        ));
    }
    let mut gpu_members: Vec<usize> = (0..members.len())
        .filter(|&i| contexts[i].wants_whole_gpus())
        .collect();
    structure::in_rank_order(members, &mut gpu_members);
    let mut placements: Vec<Option<Placement>> = vec![None; members.len()];
    let mut work = snapshot.clone();
    let placed = gang
        .place_gpu_members(
            snapshot,
            &mut work,
            &contexts,
            &gpu_members,
            &mut placements,
        )
        .and_then(|()| gang.place_other_members(&mut work, &mut placements));
    match placed {
        Ok(()) => GangDecision::Placed(placements.into_iter().flatten().collect()),
        Err(waiting) => waiting,
    }
}

/// One gang's decision in progress: its name (for messages), members and
/// configuration.
struct Gang<'a> {
    name: String,
    members: &'a [PendingPod],
    config: &'a SchedulerConfig,
    /// At most one GPU member per node, whatever the members' rules say.
    apart: bool,
}

impl Gang<'_> {
    /// The members that ask for whole GPUs, placed together by the gang
    /// search, then replayed one by one on `work`; or why the gang waits.
    fn place_gpu_members(
        &self,
        snapshot: &Snapshot,
        work: &mut Snapshot,
        contexts: &[PodContext<'_>],
        gpu_members: &[usize],
        placements: &mut [Option<Placement>],
    ) -> Result<(), GangDecision> {
        let (name, n, members) = (&self.name, self.members.len(), self.members);
        if gpu_members.is_empty() {
            return Ok(());
        }
        let requests: Vec<_> = gpu_members
            .iter()
            .filter_map(|&i| contexts[i].set_request().copied())
            .collect();
        if requests.len() != gpu_members.len() {
            return Err(waiting(format!(
                "gang {name}: a member's GPU request could not be read"
            )));
        }
        let lead = &contexts[gpu_members[0]];
        let stated: Vec<&PendingPod> = gpu_members.iter().map(|&i| &members[i]).collect();
        let structure = structure::read(snapshot, &stated).map_err(|e| {
            waiting(format!(
                "gang {name} ({n} members) waits, nothing bound: {e}"
            ))
        })?;
        let mut nodes = candidate_nodes(snapshot, contexts, gpu_members);
        let mut tier_names: Vec<String> = snapshot.tiers().keys().to_vec();
        if structure.hostname {
            structure::add_hostname_tier(snapshot, &mut tier_names, &mut nodes);
        }
        let uniform = requests.windows(2).all(|w| w[0] == w[1]);
        let spec = if uniform {
            GangSpec::uniform(requests.len() as u32, requests[0])
        } else {
            GangSpec::each(requests.clone())
        }
        .with_strategy(lead.pod.request.placement_strategy)
        .within(structure.within)
        .sliced(structure.slices);
        let spec = match structure.preferred {
            Some(tier) => spec.preferring(tier),
            None => spec,
        };
        let spec =
            if self.apart || apart_per_node(snapshot, gpu_members.iter().map(|&i| &members[i])) {
                spec.at_most_per_node(1)
            } else {
                spec
            };
        let candidates = nodes.len();
        let mixed = lead
            .pod
            .request
            .gang_mixed_models
            .unwrap_or(self.config.gang_mixed_models);
        let chosen = place_on_one_model(snapshot, &spec, tier_names, nodes, mixed).map_err(|no_fit| {
            waiting(format!(
                "gang {name} ({n} members) waits, nothing bound: {no_fit} ({candidates} of {} nodes could host a member)",
                snapshot.len()
            ))
        })?;
        if let Some(broken) = self.replay(work, &chosen, gpu_members, candidates, placements)? {
            // The search packed members their own rules keep apart: start
            // again from the cluster as it was, one member at a time.
            *work = snapshot.clone();
            placements.iter_mut().for_each(|p| *p = None);
            let mut order = gpu_members.to_vec();
            order.sort_by_key(|&m| std::cmp::Reverse(contexts[m].whole_gpus()));
            return self.place_one_by_one(work, &order, &broken.to_string(), placements);
        }
        Ok(())
    }

    /// Replays the gang search's placement member by member on `work`, each
    /// judged as a single pod with the members before it placed: `Some`
    /// member that does not fit where the search put it, and why; `Err`
    /// when a placed member cannot be recorded.
    fn replay(
        &self,
        work: &mut Snapshot,
        chosen: &GangPlacement,
        gpu_members: &[usize],
        candidates: usize,
        placements: &mut [Option<Placement>],
    ) -> Result<Option<RuleBreak>, GangDecision> {
        let (name, n, members) = (&self.name, self.members.len(), self.members);
        for (slot, &m) in chosen.members.iter().zip(gpu_members) {
            let ctx = PodContext::new(work, &members[m], self.config);
            let node = work.node(NodeId(slot.node as u32));
            let why = match ctx.filter(slot.node) {
                _ if node.free_gpus() & slot.gpus != slot.gpus => {
                    Some("its GPUs are taken".to_string())
                }
                Ok(_) => None,
                Err(r) => Some(ctx.reason(node.id(), r).to_string()),
            };
            if let Some(why) = why {
                return Ok(Some(RuleBreak {
                    member: members[m].key(),
                    node: node.name().to_string(),
                    why,
                }));
            }
            let placed = member_placement(&ctx, slot, candidates);
            self.record(work, &members[m], &placed)?;
            placements[m] = Some(placed);
        }
        // The gang's mean is of the same number each member's line shows
        // (its node score's `GPU set` part), so the two never disagree.
        let sets: Vec<f64> = gpu_members
            .iter()
            .filter_map(|&m| placements[m].as_ref()?.parts.gpu_set)
            .collect();
        let mean = if sets.is_empty() {
            String::new()
        } else {
            let m = sets.iter().sum::<f64>() / sets.len() as f64;
            format!("; mean GPU set {}", (m * 100.0).round() as i64)
        };
        for &m in gpu_members {
            if let Some(p) = placements[m].as_mut() {
                p.explanation = format!(
                    "gang {name}, {n} members: {}{mean}; this member on {}",
                    chosen.explanation, p.explanation
                );
            }
        }
        Ok(None)
    }

    /// Members without GPUs go where a single pod would, beside the others.
    fn place_other_members(
        &self,
        work: &mut Snapshot,
        placements: &mut [Option<Placement>],
    ) -> Result<(), GangDecision> {
        for (i, member) in self.members.iter().enumerate() {
            if placements[i].is_some() {
                continue;
            }
            match schedule(work, member, self.config) {
                Decision::Placed(p) => {
                    self.record(work, member, &p)?;
                    placements[i] = Some(p);
                }
                Decision::Unschedulable(u) => {
                    return Err(waiting(format!(
                        "gang {} ({} members) waits, nothing bound: member {}: {}",
                        self.name,
                        self.members.len(),
                        member.key(),
                        u.message
                    )));
                }
            }
        }
        Ok(())
    }

    /// Adds a placed member to `work`, so the next member sees it.
    fn record(
        &self,
        work: &mut Snapshot,
        member: &PendingPod,
        placed: &Placement,
    ) -> Result<(), GangDecision> {
        work.add_pod(placed.bound_pod(member))
            .map(|_| ())
            .map_err(|e| {
                waiting(format!(
                    "gang {}: member {} could not be recorded: {e}",
                    self.name,
                    member.key()
                ))
            })
    }
}

/// Candidates: nodes with a topology that some GPU member passes alone,
/// each with the lead member's single-pod score (0–100, strategy and
/// preferences included, over the first passing member's GPU set), which
/// breaks ties between equally good domain choices.
fn candidate_nodes(
    snapshot: &Snapshot,
    contexts: &[PodContext<'_>],
    gpu_members: &[usize],
) -> Vec<GangNode> {
    let lead = &contexts[gpu_members[0]];
    let scorer = Scorer::with_preferences(lead);
    let mut nodes = Vec::new();
    for i in 0..snapshot.len() {
        let node = snapshot.node(NodeId(i as u32));
        let Some(shape) = node.shape() else { continue };
        // A node some GPU member can use: members asking different GPU
        // counts use different nodes (the search's pickers keep each member
        // to nodes with room for its own request; the replay judges each).
        let Some(fit) = gpu_members.iter().find_map(|&m| contexts[m].filter(i).ok()) else {
            continue;
        };
        let mut gang_node = GangNode::of(&node, shape);
        // The single-pod score (0–100, strategy and preferences included)
        // breaks ties between equally good domain choices.
        gang_node.node_score = (scorer.score(lead, i, &fit).total * 100.0).round() as i32;
        nodes.push(gang_node);
    }
    nodes
}

/// Whether every two members repel each other per node (required
/// anti-affinity over hostnames, either way): then no node hosts two, and
/// the gang search places them so. Pairwise up to 512 members; beyond,
/// members alike to the first (same rules and labels) that repel it.
fn apart_per_node<'a>(snapshot: &Snapshot, members: impl Iterator<Item = &'a PendingPod>) -> bool {
    let members: Vec<&PendingPod> = members.collect();
    let repel = |a: &PendingPod, b: &PendingPod| {
        crate::inter_pod::repels_per_node(snapshot, a, b)
            || crate::inter_pod::repels_per_node(snapshot, b, a)
    };
    let Some(first) = members.first() else {
        return false;
    };
    if members.len() > 512 {
        return members
            .iter()
            .all(|m| m.constraints == first.constraints && m.namespace == first.namespace)
            && repel(first, first);
    }
    members
        .iter()
        .enumerate()
        .all(|(i, a)| members[i + 1..].iter().all(|b| repel(a, b)))
        && members.len() > 1
}

/// A member's placement on the node and GPUs the gang search gave it,
/// scored and explained as a single pod's would be.
fn member_placement(ctx: &PodContext<'_>, slot: &MemberSlot, candidates: usize) -> Placement {
    let node = ctx.snapshot.node(NodeId(slot.node as u32));
    let shape = node.shape().expect("gang candidates have a topology");
    let bottleneck = match ctx.set_request().map(|r| r.collective) {
        Some(Collective::AllToAll) => shape.all_to_all_bottleneck(slot.gpus),
        _ => shape.ring_bottleneck(slot.gpus),
    };
    let fit = Fit::Whole(PickSummary {
        gpus: slot.gpus,
        bottleneck,
        score: slot.score,
    });
    // The node is the gang search's; this score only explains it.
    let parts = Scorer::alone(ctx).score(ctx, slot.node, &fit);
    placement(
        ctx,
        Candidate {
            node: NodeId(slot.node as u32),
            fit,
            parts,
        },
        None,
        candidates,
    )
}

/// Places the gang within one GPU model's nodes (unless `mixed`): within
/// each model's nodes on its own, the best placement winning (fewest leaf
/// domains, then fewest domains per tier, then quality; ties to the model
/// named first). A node whose product is unknown is known by its wiring
/// (see `NodeRef::gpu_model`). Where no model has room, the reason names
/// each model's shortage and the annotation that allows mixing.
fn place_on_one_model(
    snapshot: &Snapshot,
    spec: &GangSpec,
    tier_names: Vec<String>,
    nodes: Vec<GangNode>,
    mixed: bool,
) -> Result<GangPlacement, GangNoRoom> {
    let model = |n: &GangNode| snapshot.node(NodeId(n.id as u32)).gpu_model();
    let mut models: BTreeMap<Option<&str>, Vec<GangNode>> = BTreeMap::new();
    for node in nodes {
        models.entry(model(&node)).or_default().push(node);
    }
    if mixed || models.len() <= 1 {
        let nodes = models.into_values().flatten().collect();
        let cluster = GangCluster { tier_names, nodes };
        return place_gang(spec, &cluster).map_err(GangNoRoom::Mixed);
    }
    let mut best: Option<(GangPlacement, &str)> = None;
    let mut shortages = Vec::new();
    for (product, nodes) in models {
        let label = product.unwrap_or("unknown model");
        let cluster = GangCluster {
            tier_names: tier_names.clone(),
            nodes,
        };
        match place_gang(spec, &cluster) {
            Ok(p) => {
                let better = best.as_ref().is_none_or(|(b, _)| rank(&p) < rank(b));
                if better {
                    best = Some((p, label));
                }
            }
            Err(e) => shortages.push((label.to_string(), e)),
        }
    }
    match best {
        Some((mut p, label)) => {
            p.explanation = format!(
                "{}; one GPU model ({label}; {} lets a gang mix models)",
                p.explanation,
                gputopo_api::keys::pod::GANG_MIXED_MODELS
            );
            Ok(p)
        }
        None => Err(GangNoRoom::PerModel(shortages)),
    }
}

/// A member that does not fit where the gang search put it, once the
/// members before it are placed: the members' own rules (or their cpu,
/// memory, pods) refuse it there.
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "member {member} does not fit on {node} once the members before it are placed there: {why}"
)]
struct RuleBreak {
    member: String,
    node: String,
    why: String,
}

/// Why no GPU model (or, mixing models, the nodes together) has room for
/// the gang.
#[derive(Clone, Debug, thiserror::Error)]
enum GangNoRoom {
    #[error(transparent)]
    Mixed(GangNoFit),
    /// Per model label, its shortage.
    #[error(
        "no single GPU model has room for the whole gang ({}); {}: \"true\" lets it mix models",
        shortages(.0),
        gputopo_api::keys::pod::GANG_MIXED_MODELS
    )]
    PerModel(Vec<(String, GangNoFit)>),
}

fn shortages(per_model: &[(String, GangNoFit)]) -> String {
    per_model
        .iter()
        .map(|(label, e)| format!("{label}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// How a placement ranks against another model's: fewer leaf domains, then
/// fewer domains per tier (outermost first), then higher quality.
fn rank(p: &GangPlacement) -> (usize, Vec<usize>, std::cmp::Reverse<i64>) {
    (
        p.leaf_domains(),
        p.spans.iter().map(|s| s.domains.len()).collect(),
        std::cmp::Reverse(p.quality),
    )
}

fn waiting(message: String) -> GangDecision {
    GangDecision::Waiting { message }
}
