//! A gang whose members' GPUs come through ResourceClaims, decided as one:
//! the gang rule (`gang_schedule`: network domains, fewest leaves, one GPU
//! model, all or nothing) chooses each member's node among the nodes whose
//! GPUs are published through DRA, with each member seen as asking for its
//! claims' GPU count; then each member's claims are fitted on its node, in
//! member order, each member's devices held for the next. Every member
//! fits, or none is placed.

use super::schedule::DraPlacement;
use crate::config::{SchedulerConfig, TopologyManagerPolicy};
use crate::dra::DraInventory;
use crate::dra::DraPod;
use crate::dra::hold_snapshot;
use crate::gang_schedule::{GangDecision, schedule_gang};
use crate::gpuset::SetRequest;
use crate::pod::PendingPod;
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
    let mut inventory = inventory.clone();
    hold_snapshot(&mut inventory, snapshot);
    // GPUs fitted for earlier members, per node.
    let mut taken: BTreeMap<String, u32> = BTreeMap::new();
    let mut out = Vec::with_capacity(members.len());
    for ((pending, dra), mut placement) in members.iter().zip(claims).zip(placements) {
        let Some(id) = snapshot.node_id(&placement.node) else {
            return ClaimGangDecision::Waiting {
                message: format!("node {} is gone", placement.node),
            };
        };
        let node = snapshot.node(id);
        let extra = taken.get(&placement.node).copied().unwrap_or(0);
        inventory.hold(&placement.node, (node.gpus() & !node.free_gpus()) | extra);
        let request = SetRequest {
            single_numa_node: node.topology_manager_policy(config.default_topology_manager_policy)
                == TopologyManagerPolicy::SingleNumaNode,
            ..SetRequest::from_gpu_request(&pending.request)
        };
        let fit = match dra.fit(
            &inventory,
            &placement.node,
            node.shape().map(|s| s.as_ref()),
            &request,
        ) {
            Ok(fit) => fit,
            Err(reason) => {
                return ClaimGangDecision::Waiting {
                    message: format!(
                        "gang member {} fits node {} by the gang rule, but not its claims: {reason}",
                        pending.key(),
                        placement.node
                    ),
                };
            }
        };
        *taken.entry(placement.node.clone()).or_default() |= fit.pick.gpus;
        let gpus = fit.gpus();
        placement.gpu_uuids = node.gpu_uuids(&gpus);
        placement.gpus = gpus;
        placement.bottleneck = fit.pick.bottleneck;
        placement
            .explanation
            .push_str(&format!("; devices {}", fit.devices_text()));
        out.push(DraPlacement { placement, fit });
    }
    ClaimGangDecision::Placed(out)
}
