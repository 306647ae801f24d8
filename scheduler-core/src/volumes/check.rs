//! One decision's volume check: the pod's claims read once, then judged
//! per node in upstream's order (VolumeRestrictions before any node,
//! VolumeBinding, VolumeZone).

use super::VolumeRefusal;
use super::limits::within_limits;
use super::matching::{Candidates, class_admits};
use crate::pod::PendingPod;
use crate::snapshot::{
    AccessMode, CapacityEntry, Claim, NodeId, NodeRef, Snapshot, Volume, VolumePlan,
};

/// The zone and region labels VolumeZone compares, with the GA key a beta
/// key is also read as on the node.
const ZONE_KEYS: [(&str, &str); 4] = [
    ("topology.kubernetes.io/zone", "topology.kubernetes.io/zone"),
    (
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
];

/// The pod's claims, sorted out.
pub(crate) struct VolumeCheck<'a> {
    /// Bound claims' volumes.
    bound: Vec<&'a Volume>,
    /// Unbound `WaitForFirstConsumer` claims, smallest request first (as
    /// upstream matches them), with their names and volumes.
    waiting: Vec<Waiting<'a>>,
    pod: &'a PendingPod,
}

/// One unbound `WaitForFirstConsumer` claim.
struct Waiting<'a> {
    name: String,
    claim: &'a Claim,
    candidates: Candidates<'a>,
    /// The published capacities that could hold it if provisioned, node
    /// aside; `None` when its driver publishes none (or it has no size).
    rooms: Option<Vec<&'a CapacityEntry>>,
}

impl<'a> VolumeCheck<'a> {
    /// `Ok(None)` when the pod mounts no claim (or the snapshot's storage is
    /// not watched); `Err` with the refusal and the claim's name when no
    /// node can take it.
    pub(crate) fn new(
        snapshot: &'a Snapshot,
        pod: &'a PendingPod,
    ) -> Result<Option<VolumeCheck<'a>>, (VolumeRefusal, String)> {
        let claims = &pod.constraints.claims;
        let storage = snapshot.storage();
        // Inline in-tree volumes only count against attach limits.
        if (claims.is_empty() && pod.constraints.migrated.is_empty()) || !storage.watched {
            return Ok(None);
        }
        let mut check = VolumeCheck {
            bound: Vec::new(),
            waiting: Vec::new(),
            pod,
        };
        let mut immediate = None;
        for c in claims {
            let name = c.claim_name(&pod.name).into_owned();
            let Some(claim) = storage.claim(&pod.namespace, &name) else {
                let refusal = match c {
                    crate::pod_constraints::PodClaim::Named(_) => VolumeRefusal::ClaimNotFound,
                    crate::pod_constraints::PodClaim::Ephemeral(_) => {
                        VolumeRefusal::EphemeralClaimPending
                    }
                };
                return Err((refusal, name));
            };
            if claim.deleting {
                return Err((VolumeRefusal::ClaimDeleting, name));
            }
            if claim.access_modes.contains(&AccessMode::ReadWriteOncePod)
                && used_by_another(snapshot, pod, &name)
            {
                return Err((VolumeRefusal::ReadWriteOncePod, name));
            }
            if let Some(volume) = &claim.volume_name {
                match storage.volumes.get(volume) {
                    Some(v) => check.bound.push(v),
                    // Every node refuses: upstream's per-node reason.
                    None => return Err((VolumeRefusal::VolumeNotFound, name)),
                }
                continue;
            }
            let delayed = storage
                .classes
                .get(&claim.class)
                .is_some_and(|class| class.wait_for_first_consumer);
            if delayed {
                let candidates = Candidates::of(storage, (&pod.namespace, &name), claim);
                let rooms = storage.classes.get(&claim.class).and_then(|class| {
                    storage
                        .capacity
                        .rooms(&class.provisioner, &claim.class, claim.request_bytes)
                });
                check.waiting.push(Waiting {
                    name,
                    claim,
                    candidates,
                    rooms,
                });
            } else {
                immediate.get_or_insert(name);
            }
        }
        if let Some(name) = immediate {
            return Err((VolumeRefusal::UnboundImmediate, name));
        }
        check.waiting.sort_by_key(|w| w.claim.request_bytes);
        Ok(Some(check))
    }

    /// Whether the node at `index` may take the pod's volumes.
    pub(crate) fn check(&self, snapshot: &Snapshot, index: usize) -> Result<(), VolumeRefusal> {
        self.plan(snapshot, index).map(|_| ())
    }

    /// What binding the pod to the node at `index` needs written.
    pub(crate) fn plan(
        &self,
        snapshot: &Snapshot,
        index: usize,
    ) -> Result<VolumePlan, VolumeRefusal> {
        let node = snapshot.node(NodeId(index as u32));
        if self.bound.iter().any(|v| {
            v.node_affinity
                .as_ref()
                .is_some_and(|a| !node.matches_affinity(a))
        }) {
            return Err(VolumeRefusal::NodeConflict);
        }
        let storage = snapshot.storage();
        let mut plan = VolumePlan::default();
        for Waiting {
            name,
            claim,
            candidates,
            rooms,
        } in &self.waiting
        {
            if let Some(selected) = &claim.selected_node {
                // A provisioner is already making the volume for that node.
                if selected != node.name() {
                    return Err(VolumeRefusal::BindConflict);
                }
                continue;
            }
            let taken: Vec<&str> = plan.binds.iter().map(|(_, v)| v.as_str()).collect();
            if let Some(volume) = candidates.on(&node, &taken) {
                plan.binds.push((name.clone(), volume.to_string()));
                continue;
            }
            let Some(class) = storage.classes.get(&claim.class) else {
                return Err(VolumeRefusal::ClassNotFound);
            };
            if !class_admits(class, &node) {
                return Err(VolumeRefusal::BindConflict);
            }
            if rooms
                .as_ref()
                .is_some_and(|rooms| !rooms.iter().any(|r| r.reaches(|k| node.label(k))))
            {
                return Err(VolumeRefusal::NotEnoughSpace);
            }
            plan.provisions.push(name.clone());
        }
        if !zones_admit(&self.bound, &node) {
            return Err(VolumeRefusal::ZoneConflict);
        }
        if !within_limits(snapshot, self.pod, index) {
            return Err(VolumeRefusal::TooManyVolumes);
        }
        Ok(plan)
    }
}

/// What to write for `pod` on `node`; `Ok` with an empty plan when it
/// mounts no claim waiting for a node.
pub fn volume_plan(
    snapshot: &Snapshot,
    pod: &PendingPod,
    node: NodeId,
) -> Result<VolumePlan, (VolumeRefusal, String)> {
    match VolumeCheck::new(snapshot, pod)? {
        None => Ok(VolumePlan::default()),
        Some(check) => check
            .plan(snapshot, node.0 as usize)
            .map_err(|r| (r, String::new())),
    }
}

/// Whether a bound pod other than `pod` mounts the claim `name`.
fn used_by_another(snapshot: &Snapshot, pod: &PendingPod, name: &str) -> bool {
    snapshot.pods().any(|(_, bound)| {
        bound.namespace == pod.namespace
            && bound.name != pod.name
            && bound
                .constraints
                .claims
                .iter()
                .any(|c| c.claim_name(&bound.name) == name)
    })
}

/// VolumeZone: a node with any zone or region label must carry each zonal
/// volume's key with one of its values (`a__b` lists several).
fn zones_admit(bound: &[&Volume], node: &NodeRef<'_>) -> bool {
    if !ZONE_KEYS.iter().any(|(k, _)| node.label(k).is_some()) {
        return true;
    }
    bound.iter().all(|v| {
        ZONE_KEYS.iter().all(|(key, ga)| match v.labels.get(*key) {
            None => true,
            Some(values) => node
                .label(key)
                .or_else(|| node.label(ga))
                .is_some_and(|n| values.split("__").any(|z| z == n)),
        })
    })
}
