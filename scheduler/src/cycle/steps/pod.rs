//! One pod's decision: through the device plugin, through its
//! ResourceClaims, or (where a DeviceClass serves `nvidia.com/gpu`,
//! KEP-5004) both ways with the better GPU set winning. Pure: the pod's
//! own holds are lifted for its decision and put back when it is left
//! pending.

use super::claims::read_claims;
use crate::cluster::pod_key;
use crate::cycle::work::{Member, Work};
use crate::cycle::{Cycle, Outcome};
use gputopo_api::keys::RESOURCE_GPU;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{
    ExtendedClaim, extended_claim, extended_resource_class, hold_snapshot,
};
use gputopo_scheduler_core::dra_schedule::{
    DraDecision, DraPlacement, schedule_claims, schedule_extended,
};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::{Decision, Placement, schedule};
use std::cmp::Ordering;
use std::time::Instant;

/// What to do with one pod.
#[derive(Debug)]
pub enum PodStep {
    /// Left with this outcome, nothing written but its event.
    Finish(Outcome),
    /// Placed: assumed, and bound through the bind pipeline.
    Bind(Box<Placement>),
    /// Placed with its claims: write them, then bind.
    BindClaims(Box<DraPlacement>),
    /// Placed through DRA for `nvidia.com/gpu`: create (unless it
    /// exists), allocate and reserve its special claim, then bind.
    BindExtended(Box<ExtendedClaim>, Box<DraPlacement>),
    /// No node takes it now: preemption is tried for it as the filter saw
    /// it (`judged`: a pod with claims asks their GPU count).
    Preempt {
        judged: Box<PendingPod>,
        message: String,
        /// The pod's claims did not fit (not only its GPU count).
        claims: bool,
    },
}

impl Cycle {
    /// Decides `member`.
    pub(in crate::cycle) fn pod_step(
        &mut self,
        work: &mut Work<'_>,
        member: &Member,
        core: &SchedulerConfig,
    ) -> PodStep {
        if crate::claims::uses_claims(&member.0) {
            return self.claim_pod_step(work, member, core);
        }
        if let Some(step) = self.extended_pod_step(work, member, core) {
            return step;
        }
        let (pod, pending) = member;
        let own = [pod_key(pod)];
        self.holds.lift(&mut work.snapshot, None, &own);
        let t = Instant::now();
        let decision = schedule(&work.snapshot, pending, core);
        work.decided(t);
        match decision {
            Decision::Placed(p) => PodStep::Bind(Box::new(p)),
            Decision::Unschedulable(u) => {
                self.holds.restore(&mut work.snapshot, None, &own);
                PodStep::Preempt {
                    judged: Box::new(pending.clone()),
                    message: u.message,
                    claims: false,
                }
            }
        }
    }

    /// A pod whose GPUs come through ResourceClaims: its claims read, node
    /// and devices decided by scheduler-core's `schedule_claims`.
    fn claim_pod_step(
        &mut self,
        work: &mut Work<'_>,
        (pod, pending): &Member,
        core: &SchedulerConfig,
    ) -> PodStep {
        let dra = match read_claims(work, self.holds.claims(), pod) {
            Ok(dra) => dra,
            Err(outcome) => return PodStep::Finish(outcome),
        };
        if pending.request.gpus > 0 {
            let message = format!(
                "pod {}: asks for GPUs both as the extended resource nvidia.com/gpu ({}) and through ResourceClaims; accepted: one or the other (gputopo chooses one GPU set per pod)",
                pod_key(pod),
                pending.request.gpus
            );
            return PodStep::Finish(Outcome::Invalid { message });
        }
        let own = [pod_key(pod)];
        self.holds.lift(&mut work.snapshot, None, &own);
        let inventory = work.inventory.get_or_insert_with(Default::default);
        hold_snapshot(inventory, &work.snapshot);
        let t = Instant::now();
        let decision = schedule_claims(&work.snapshot, inventory, &dra, pending, core);
        let judged = match &decision {
            DraDecision::Unschedulable { preemptible, .. } => {
                Some(dra.judged_for_preemption(pending, inventory, preemptible.clone()))
            }
            DraDecision::Placed(_) => None,
        };
        work.decided(t);
        match decision {
            DraDecision::Placed(placed) => PodStep::BindClaims(placed),
            DraDecision::Unschedulable { message, .. } => {
                self.holds.restore(&mut work.snapshot, None, &own);
                // Preemption frees GPUs as for a device-plugin pod of the
                // claims' size; the claims of the victims are released by
                // the resourceclaim controller when they stop, and the pod
                // fits once the watch shows it.
                PodStep::Preempt {
                    judged: Box::new(judged.unwrap_or_else(|| pending.clone())),
                    message,
                    claims: true,
                }
            }
        }
    }

    /// A plain `nvidia.com/gpu` pod where a DeviceClass serves that
    /// resource and DRA objects exist (`scheduler-core`'s
    /// `dra/extended.rs`): decided both ways, node by node; `None` (not
    /// handled) otherwise.
    fn extended_pod_step(
        &mut self,
        work: &mut Work<'_>,
        (pod, pending): &Member,
        core: &SchedulerConfig,
    ) -> Option<PodStep> {
        if pending.request.gpus == 0
            || pending.request.gpu_share.is_some()
            || work.inventory.is_none()
        {
            return None;
        }
        let classes = || work.dra.classes.iter().map(AsRef::as_ref);
        let class = extended_resource_class(classes(), RESOURCE_GPU)?;
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let existing = work.special_claims.get(uid).copied();
        let ext = match extended_claim(pod, RESOURCE_GPU, class, classes(), existing)? {
            Ok(ext) => ext,
            Err(e) => {
                let message = format!("invalid {}: {e}", e.field);
                return Some(PodStep::Finish(Outcome::Invalid { message }));
            }
        };
        let class_name = class.metadata.name.clone().unwrap_or_default();
        let own = [pod_key(pod)];
        self.holds.lift(&mut work.snapshot, None, &own);
        let inventory = work.inventory.get_or_insert_with(Default::default);
        hold_snapshot(inventory, &work.snapshot);
        let t = Instant::now();
        let through_dra = schedule_extended(&work.snapshot, inventory, &ext.dra, pending, core);
        // A claim allocated by an earlier attempt fixes the pod's devices.
        let allocated_before = ext.exists
            && ext
                .claim
                .status
                .as_ref()
                .is_some_and(|s| s.allocation.is_some());
        let by_plugin = (!allocated_before).then(|| schedule(&work.snapshot, pending, core));
        work.decided(t);
        Some(match (by_plugin, through_dra) {
            (Some(Decision::Placed(p)), DraDecision::Placed(d)) if !dra_wins(&d.placement, &p) => {
                PodStep::Bind(Box::new(p))
            }
            (_, DraDecision::Placed(d)) => PodStep::BindExtended(Box::new(ext), d),
            (Some(Decision::Placed(p)), DraDecision::Unschedulable { .. }) => {
                PodStep::Bind(Box::new(p))
            }
            (plugin, DraDecision::Unschedulable { message, .. }) => {
                self.holds.restore(&mut work.snapshot, None, &own);
                let message = match plugin {
                    Some(Decision::Unschedulable(u)) => format!(
                        "{}; through DRA (DeviceClass {class_name}): {message}",
                        u.message,
                    ),
                    _ => message,
                };
                PodStep::Preempt {
                    judged: Box::new(pending.clone()),
                    message,
                    claims: false,
                }
            }
        })
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
