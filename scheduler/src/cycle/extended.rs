//! The cycle's path for a plain `nvidia.com/gpu` pod where a DeviceClass
//! serves that resource through DRA (KEP-5004; `scheduler-core`'s
//! `dra/extended.rs`): the pod is decided both ways, node by node: on
//! device-plugin nodes as today, on DRA nodes through its special claim;
//! the better GPU set wins (then the node score). Placed on a DRA node, the
//! writes are kube-scheduler's: create the special claim, allocate and
//! reserve it, record `status.extendedResourceClaimStatus`, then bind;
//! a failure deletes the claim created.

use super::drive::{Member, Work};
use super::{ClusterWrites, Cycle, Outcome};
use crate::claims::ClaimWrite;
use crate::cluster::pod_key;
use crate::config::Preemption;
use gputopo_api::keys::RESOURCE_GPU;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{
    ExtendedClaim, extended_claim, extended_resource_class, hold_snapshot,
};
use gputopo_scheduler_core::dra_schedule::{DraDecision, DraPlacement, schedule_extended};
use gputopo_scheduler_core::schedule::{Decision, Placement, schedule};
use k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus;
use std::cmp::Ordering;
use tracing::{info, warn};

impl Cycle {
    /// Decides `member` when a DeviceClass serves `nvidia.com/gpu` and DRA
    /// objects exist; returns the member back (not handled) otherwise.
    pub(super) async fn one_extended_pod<'a, W: ClusterWrites>(
        &mut self,
        writes: &'a W,
        work: &mut Work<'a>,
        member: Member,
        core: &SchedulerConfig,
        preemption: &Preemption,
    ) -> Option<Member> {
        let (pod, pending) = member;
        if pending.request.gpus == 0
            || pending.request.gpu_share.is_some()
            || work.inventory.is_none()
        {
            return Some((pod, pending));
        }
        let classes = || work.dra.classes.iter().map(AsRef::as_ref);
        let Some(class) = extended_resource_class(classes(), RESOURCE_GPU) else {
            return Some((pod, pending));
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let existing = work.special_claims.get(uid).copied();
        let ext = match extended_claim(&pod, RESOURCE_GPU, class, classes(), existing) {
            None => return Some((pod, pending)),
            Some(Ok(ext)) => ext,
            Some(Err(e)) => {
                let message = format!("invalid {}: {e}", e.field);
                self.finish(
                    writes,
                    work,
                    &pod,
                    Some(&pending),
                    Outcome::Invalid { message },
                )
                .await;
                return None;
            }
        };
        let own = [pod_key(&pod)];
        self.lift_holds(&mut work.snapshot, None, &own);
        let inventory = work.inventory.get_or_insert_with(Default::default);
        hold_snapshot(inventory, &work.snapshot);
        let t = std::time::Instant::now();
        let through_dra = schedule_extended(&work.snapshot, inventory, &ext.dra, &pending, core);
        // A claim allocated by an earlier attempt fixes the pod's devices.
        let allocated_before = ext.exists
            && ext
                .claim
                .status
                .as_ref()
                .is_some_and(|s| s.allocation.is_some());
        let by_plugin = (!allocated_before).then(|| schedule(&work.snapshot, &pending, core));
        work.decided(t);
        match (by_plugin, through_dra) {
            (Some(Decision::Placed(p)), DraDecision::Placed(d)) if !dra_wins(&d.placement, &p) => {
                self.bind_later(writes, work, (pod, pending), p).await;
            }
            (_, DraDecision::Placed(d)) => {
                self.bind_extended(writes, work, (pod, pending), &ext, *d)
                    .await;
            }
            (Some(Decision::Placed(p)), DraDecision::Unschedulable { .. }) => {
                self.bind_later(writes, work, (pod, pending), p).await;
            }
            (plugin, DraDecision::Unschedulable { message }) => {
                self.restore_holds(&mut work.snapshot, None, &own);
                let message = match plugin {
                    Some(Decision::Unschedulable(u)) => format!(
                        "{}; through DRA (DeviceClass {}): {message}",
                        u.message,
                        class.metadata.name.as_deref().unwrap_or_default()
                    ),
                    _ => message,
                };
                let judged = pending.clone();
                self.unplaced(
                    writes,
                    work,
                    (pod, pending),
                    judged,
                    (core, preemption),
                    message,
                )
                .await;
            }
        }
        None
    }

    /// Creates (unless it exists), allocates and reserves the special
    /// claim, records it in the pod's status, then binds; undoes on failure.
    async fn bind_extended<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        (pod, pending): Member,
        ext: &ExtendedClaim,
        placed: DraPlacement,
    ) {
        let DraPlacement { placement, fit } = placed;
        let created = if ext.exists {
            Ok(ext.claim.clone())
        } else {
            writes.create_claim(&ext.claim).await
        };
        let result = match created {
            Err(e) => Err(e),
            Ok(claim) => {
                let name = claim.metadata.name.clone().unwrap_or_default();
                let write = ClaimWrite {
                    namespace: claim.metadata.namespace.clone().unwrap_or_default(),
                    name: name.clone(),
                    uid: claim.metadata.uid.clone(),
                    allocation: fit.claims.first().and_then(|c| c.allocation.clone()),
                    pod_name: pod.metadata.name.clone().unwrap_or_default(),
                    pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
                };
                let status = PodExtendedResourceClaimStatus {
                    request_mappings: ext.mappings.clone(),
                    resource_claim_name: name,
                };
                let written = async {
                    writes.reserve_claim(&write).await?;
                    writes.set_extended_claim_status(&pod, &status).await?;
                    writes.bind(&pod, &placement).await
                }
                .await;
                if written.is_err() {
                    // Released first: the finalizer would hold a deletion.
                    if let Err(e) = writes.release_claim(&write, true).await {
                        warn!(error = %e, "releasing the special claim after a failed binding");
                    }
                    if !ext.exists
                        && let Err(e) = writes.delete_claim(&write).await
                    {
                        warn!(error = %e, "deleting the special claim after a failed binding");
                    }
                }
                written.map(|()| write)
            }
        };
        let outcome = match result {
            Ok(write) => {
                if let Some(inventory) = work.inventory.as_mut() {
                    let ids: Vec<_> = fit
                        .claims
                        .iter()
                        .flat_map(|c| c.devices.iter().map(|d| d.device.clone()))
                        .collect();
                    inventory.assume_allocated(&write.target(), &ids);
                }
                self.assume(
                    &mut work.snapshot,
                    &pod,
                    &pending,
                    &placement,
                    work.clock.now,
                );
                info!(pod = %placement.pod, node = %placement.node, gpus = %placement.assigned_gpus(), claim = %write.target(), "scheduled through DRA for nvidia.com/gpu");
                Outcome::Scheduled(Box::new(placement))
            }
            Err(e) => {
                warn!(error = %e, "placing through DRA failed");
                Outcome::BindFailed(e)
            }
        };
        self.finish(writes, work, &pod, Some(&pending), outcome)
            .await;
    }
}

/// Whether the DRA node's placement beats the device-plugin node's: the
/// node with a topology, the better bottleneck (one GPU has none: the
/// best), then the node score;
/// a tie stays with the device plugin.
fn dra_wins(dra: &Placement, plugin: &Placement) -> bool {
    let quality = |p: &Placement| (p.topology_known, p.bottleneck.is_none(), p.bottleneck);
    quality(dra)
        .cmp(&quality(plugin))
        .then(dra.score.cmp(&plugin.score))
        == Ordering::Greater
}
