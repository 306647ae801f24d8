//! A gang whose members' GPUs come through ResourceClaims, decided as one:
//! the gang rule (`gang_schedule`: network domains, fewest leaves, one GPU
//! model, all or nothing) chooses each member's node among the nodes whose
//! GPUs are published through DRA, with each member seen as asking for its
//! claims' GPU count; then each member's claims are fitted on its node, in
//! member order, each member's devices held for the next. Where members
//! packed on one node do not all fit (a node has one IMEX channel), the
//! gang is placed again with one member per node. Every member fits, or
//! none is placed.

use super::schedule::DraPlacement;
use crate::config::{SchedulerConfig, TopologyManagerPolicy};
use crate::dra::DraInventory;
use crate::dra::DraPod;
use crate::dra::NodeReason;
use crate::dra::hold_snapshot;
use crate::gang_schedule::{GangDecision, schedule_gang, schedule_gang_apart};
use crate::gpuset::SetRequest;
use crate::pod::PendingPod;
use crate::schedule::Placement;
use crate::snapshot::Snapshot;
use std::collections::BTreeMap;

/// What a claim gang's decision came to.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimGangDecision {
    /// One per member, in the members' order.
    Placed(Vec<DraPlacement>),
    Waiting {
        message: String,
    },
}

/// Decides the gang `members`, `claims[i]` being member `i`'s claims read.
pub fn schedule_claim_gang(
    snapshot: &Snapshot,
    inventory: &DraInventory,
    members: &[PendingPod],
    claims: &[DraPod],
    config: &SchedulerConfig,
) -> ClaimGangDecision {
    // Only DRA nodes may take a member: every other node's free GPUs are
    // held in a copy of the snapshot.
    let mut dra_only = snapshot.clone();
    for node in snapshot.nodes() {
        let has_devices = inventory
            .node(node.name())
            .is_some_and(|n| n.devices.iter().any(|d| d.gpu.is_some()));
        let free = node.free_gpus();
        if has_devices || free == 0 {
            continue;
        }
        let name = format!("not-a-dra-node:{}", node.name());
        if let Err(e) = dra_only.hold_free_gpus("", &name, node.name(), free) {
            return ClaimGangDecision::Waiting {
                message: e.to_string(),
            };
        }
    }
    let judged: Vec<PendingPod> = members
        .iter()
        .zip(claims)
        .map(|(p, d)| d.judged(p, inventory))
        .collect();
    let placements = match schedule_gang(&dra_only, &judged, config) {
        GangDecision::Placed(p) => p,
        GangDecision::Waiting { message } => return ClaimGangDecision::Waiting { message },
    };
    let shares_a_node = {
        let mut nodes: Vec<&str> = placements.iter().map(|p| p.node.as_str()).collect();
        nodes.sort_unstable();
        nodes.windows(2).any(|w| w[0] == w[1])
    };
    match fit_members(snapshot, inventory, members, claims, placements, config)
        .map_err(|e| e.to_string())
    {
        Ok(placed) => ClaimGangDecision::Placed(placed),
        // Members packed on one node may want devices the node has one of
        // (an IMEX channel): try again with one member per node.
        Err(message) if shares_a_node => match schedule_gang_apart(&dra_only, &judged, config) {
            GangDecision::Placed(apart) => {
                match fit_members(snapshot, inventory, members, claims, apart, config) {
                    Ok(placed) => ClaimGangDecision::Placed(placed),
                    Err(_) => ClaimGangDecision::Waiting { message },
                }
            }
            GangDecision::Waiting { .. } => ClaimGangDecision::Waiting { message },
        },
        Err(message) => ClaimGangDecision::Waiting { message },
    }
}

/// Why a member the gang rule placed cannot have its claims there.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
enum MemberMisfit {
    #[error("node {node} is gone")]
    NodeGone { node: String },
    #[error("gang member {member} fits node {node} by the gang rule, but not its claims: {reason}")]
    Claims {
        member: String,
        node: String,
        reason: Box<NodeReason>,
    },
}

/// Each member's claims fitted on the node the gang rule chose for it, in
/// member order, each member's devices (GPUs and other drivers') held for
/// the next; or the message for the first member that does not fit.
fn fit_members(
    snapshot: &Snapshot,
    inventory: &DraInventory,
    members: &[PendingPod],
    claims: &[DraPod],
    placements: Vec<Placement>,
    config: &SchedulerConfig,
) -> Result<Vec<DraPlacement>, MemberMisfit> {
    let mut inventory = inventory.clone();
    hold_snapshot(&mut inventory, snapshot);
    // GPUs fitted for earlier members, per node.
    let mut taken: BTreeMap<String, u32> = BTreeMap::new();
    let mut out = Vec::with_capacity(members.len());
    for ((pending, dra), mut placement) in members.iter().zip(claims).zip(placements) {
        let Some(id) = snapshot.node_id(&placement.node) else {
            return Err(MemberMisfit::NodeGone {
                node: placement.node.clone(),
            });
        };
        let node = snapshot.node(id);
        let extra = taken.get(&placement.node).copied().unwrap_or(0);
        inventory.hold(&placement.node, (node.gpus() & !node.free_gpus()) | extra);
        let request = SetRequest {
            single_numa_node: node.topology_manager_policy(config.default_topology_manager_policy)
                == TopologyManagerPolicy::SingleNumaNode,
            ..SetRequest::from_gpu_request(&pending.request)
        };
        let fit = dra
            .fit(
                &inventory,
                &placement.node,
                node.shape().map(|s| s.as_ref()),
                &request,
            )
            .map_err(|reason| MemberMisfit::Claims {
                member: pending.key(),
                node: placement.node.clone(),
                reason: Box::new(reason),
            })?;
        *taken.entry(placement.node.clone()).or_default() |= fit.pick.gpus;
        for claim in fit.to_write() {
            inventory.assume_allocated(&claim.key, claim.written_results());
        }
        let gpus = fit.gpus();
        placement.gpu_uuids = node.gpu_uuids(&gpus);
        placement.gpus = gpus;
        placement.bottleneck = fit.pick.bottleneck;
        placement
            .explanation
            .push_str(&format!("; devices {}", fit.devices_text()));
        out.push(DraPlacement { placement, fit });
    }
    Ok(out)
}
