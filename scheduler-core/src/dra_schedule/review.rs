//! Extender mode: kube-scheduler's DRA plugin allocates a pod's claims
//! itself (the first devices that match), so the extender can steer the
//! node but not the devices. At the bind it compares what kube-scheduler
//! allocated with the set gputopo would have chosen on the same node, and
//! says so when the allocation is worse: the one moment an operator can
//! see what the extender cannot guarantee.

use super::judge::DraJudge;
use crate::config::SchedulerConfig;
use crate::dra::DeviceId;
use crate::dra::DraInventory;
use crate::dra::DraPod;
use crate::gpuset::{SetPick, SetRequest};
use crate::pod::PendingPod;
use crate::snapshot::Snapshot;
use gputopo_api::k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim};

/// An allocation worse than gputopo's choice on the same node.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocationReview {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
    /// The GPUs of the allocated devices, and their `driver/pool/device`.
    pub allocated: SetPick,
    pub devices: Vec<String>,
    /// gputopo's set on that node with those devices free.
    pub best: SetPick,
}

impl AllocationReview {
    /// The event's note.
    pub fn message(&self) -> String {
        format!(
            "kube-scheduler allocated GPUs {} ({}; devices {}) on node {} where gputopo would have chosen GPUs {} ({}): in extender mode kube-scheduler's DRA plugin chooses a claim's devices (the first that match); pods placed by gputopo-scheduler get its exact set",
            list(&self.allocated),
            quality(&self.allocated),
            self.devices.join(", "),
            self.node,
            list(&self.best),
            quality(&self.best),
        )
    }
}

fn list(pick: &SetPick) -> String {
    pick.gpu_indices()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn quality(pick: &SetPick) -> String {
    let numa = match pick.numa_nodes {
        1 => "1 NUMA node".to_string(),
        n => format!("{n} NUMA nodes"),
    };
    match pick.bottleneck {
        Some(b) => format!("bottleneck {b}, {numa}"),
        None => numa,
    }
}

/// Greater is better: one GPU, else the widest bottleneck; then the fewest NUMA nodes.
fn rank(pick: &SetPick) -> impl Ord + use<> {
    (
        pick.bottleneck.is_none(),
        pick.bottleneck,
        std::cmp::Reverse(pick.numa_nodes),
    )
}

/// Compares `claims` (the pod's claims as kube-scheduler allocated them,
/// in the pod's order) with gputopo's choice on the node they are pinned
/// to. `inventory` must not count the pod's own claims as busy (build it
/// from the other claims) and mirror `snapshot`'s held GPUs. `None` when
/// the allocation is as good as gputopo's, holds fewer than two GPUs of the
/// configured drivers, or cannot be judged (a claim gputopo cannot read,
/// devices not on the node's topology): nothing can be said then.
pub fn review_allocation<'c>(
    snapshot: &Snapshot,
    inventory: &DraInventory,
    claims: &[&ResourceClaim],
    classes: impl IntoIterator<Item = &'c DeviceClass> + Clone,
    pod: &PendingPod,
    config: &SchedulerConfig,
) -> Option<AllocationReview> {
    let key = pod.key();
    let allocated = DraPod::new(&key, claims, classes.clone()).ok()?;
    // The same claims before the allocation: what gputopo would have chosen.
    let unallocated: Vec<ResourceClaim> = claims
        .iter()
        .map(|c| ResourceClaim {
            status: None,
            ..(*c).clone()
        })
        .collect();
    let unallocated: Vec<&ResourceClaim> = unallocated.iter().collect();
    let judged = DraPod::new(&key, &unallocated, classes).ok()?;
    let node = allocated
        .claims
        .iter()
        .find_map(|c| c.allocated.as_ref()?.pinned_node())?;
    let devices = inventory.node(node)?;
    let mut mask = 0u32;
    let mut names = Vec::new();
    for claim in &allocated.claims {
        for r in claim.allocated.iter().flat_map(|a| &a.results) {
            if !inventory.config.handles(&r.driver) {
                continue;
            }
            let id = DeviceId {
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
            };
            mask |= 1 << devices.device(&id)?.gpu?;
            names.push(format!("{}: {id}", claim.name));
        }
    }
    if mask.count_ones() < 2 {
        return None;
    }
    let id = snapshot.node_id(node)?;
    let shape = snapshot.node(id).shape()?;
    let as_pod = judged.judged(pod, inventory);
    let judge = DraJudge::new(snapshot, inventory, &judged, &as_pod, config);
    let (best, _) = judge.judge(id).ok()?;
    let request = SetRequest::new(mask.count_ones(), as_pod.request.collective);
    let allocated_pick = shape
        .pick_constrained(mask, mask, &request, &mut |_| true)
        .ok()??;
    (rank(&allocated_pick) < rank(&best.pick)).then(|| AllocationReview {
        pod: key,
        node: node.to_string(),
        allocated: allocated_pick,
        devices: names,
        best: best.pick,
    })
}
