//! The cycle's path for a pod whose GPUs come through ResourceClaims:
//! read its claims (a claim gputopo cannot honour exactly is refused,
//! naming the field), decide node and devices (scheduler-core's
//! `schedule_claims`), then write as kube-scheduler's DRA plugin does:
//! each claim's allocation and reservation, then the binding. A write that
//! fails undoes the claims written before it, so nothing is left
//! allocated for a pod that was not bound; a crash in between leaves the
//! claims reserved for the pod, and the next leader finds them allocated
//! and binds the pod to their node (the claims' devices are fixed then).

use super::drive::{Member, Work};
use super::{ClusterWrites, Cycle, Outcome};
use crate::claims::{AssumedClaims, ClaimWrite};
use crate::cluster::pod_key;
use crate::config::Preemption;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{ClaimErrorKind, DraFit, DraPod, hold_snapshot};
use gputopo_scheduler_core::dra_schedule::{DraDecision, DraPlacement, schedule_claims};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use tracing::{info, warn};

impl Cycle {
    pub(super) async fn one_claim_pod<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        member: Member,
        core: &SchedulerConfig,
        preemption: &Preemption,
    ) {
        let (pod, pending) = member;
        let dra = match read_claims(work, &self.claims_assumed, &pod) {
            Ok(dra) => dra,
            Err(outcome) => {
                self.finish(writes, work, &pod, Some(&pending), outcome)
                    .await;
                return;
            }
        };
        if pending.request.gpus > 0 {
            let message = format!(
                "pod {}: asks for GPUs both as the extended resource nvidia.com/gpu ({}) and through ResourceClaims; accepted: one or the other (gputopo chooses one GPU set per pod)",
                pod_key(&pod),
                pending.request.gpus
            );
            self.finish(
                writes,
                work,
                &pod,
                Some(&pending),
                Outcome::Invalid { message },
            )
            .await;
            return;
        }
        let own = [pod_key(&pod)];
        self.lift_holds(&mut work.snapshot, None, &own);
        let inventory = work.inventory.get_or_insert_with(Default::default);
        hold_snapshot(inventory, &work.snapshot);
        let t = std::time::Instant::now();
        let decision = schedule_claims(&work.snapshot, inventory, &dra, &pending, core);
        work.decided(t);
        match decision {
            DraDecision::Placed(placed) => {
                self.bind_with_claims(writes, work, vec![(pod, pending)], vec![*placed])
                    .await;
            }
            DraDecision::Unschedulable { message } => {
                self.restore_holds(&mut work.snapshot, None, &own);
                // Preemption frees GPUs as for a device-plugin pod of the
                // claims' size; the claims of the victims are released by
                // the resourceclaim controller when they stop, and the pod
                // fits once the watch shows it.
                let judged = dra.judged(&pending);
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
    }

    /// The claims of a gang's members, when any member uses claims: `None`
    /// for a device-plugin gang; an outcome for every member when one
    /// member's claims cannot be read (the gang waits, or is invalid, as one).
    pub(super) fn gang_claims(
        &self,
        work: &Work<'_>,
        members: &[Member],
    ) -> Result<Option<Vec<DraPod>>, Outcome> {
        if !members.iter().any(|(p, _)| crate::claims::uses_claims(p)) {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(members.len());
        for (pod, pending) in members {
            if pending.request.gpus > 0 {
                return Err(Outcome::Invalid {
                    message: format!(
                        "gang member {}: asks for GPUs as nvidia.com/gpu while its gang uses ResourceClaims; accepted: every member through claims, or none",
                        pod_key(pod)
                    ),
                });
            }
            out.push(read_claims(work, &self.claims_assumed, pod)?);
        }
        Ok(Some(out))
    }

    /// Writes the claims of every pod (one, or a gang's members), then
    /// binds every pod: a claim write that fails undoes all claims written
    /// (nothing is bound); a binding that fails releases that pod's claims
    /// (the members bound before it stay, as for any gang). Returns whether
    /// all were bound.
    pub(super) async fn bind_with_claims<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        members: Vec<Member>,
        placed: Vec<DraPlacement>,
    ) -> bool {
        let mut done: Vec<Vec<(ClaimWrite, bool)>> = Vec::with_capacity(members.len());
        let mut failed = None;
        'members: for ((pod, _), p) in members.iter().zip(&placed) {
            let mut mine = Vec::new();
            for claim in &p.fit.claims {
                let write = ClaimWrite::new(claim, pod);
                match writes.reserve_claim(&write).await {
                    Ok(()) => mine.push((write, claim.allocation.is_some())),
                    Err(e) => {
                        done.push(mine);
                        failed = Some(e);
                        break 'members;
                    }
                }
            }
            done.push(mine);
        }
        if let Some(e) = failed {
            warn!(error = %e, "claim write failed; releasing every claim written");
            for mine in done.iter().rev() {
                undo(writes, mine).await;
            }
            for (pod, pending) in &members {
                self.finish(
                    writes,
                    work,
                    pod,
                    Some(pending),
                    Outcome::BindFailed(e.clone()),
                )
                .await;
            }
            return false;
        }
        let mut all_bound = true;
        for (((pod, pending), p), mine) in members.into_iter().zip(placed).zip(done) {
            let DraPlacement { placement, fit } = p;
            let outcome = match writes.bind(&pod, &placement).await {
                Ok(()) => {
                    self.assume_claims(work, &fit, &mine);
                    self.assume(
                        &mut work.snapshot,
                        &pod,
                        &pending,
                        &placement,
                        work.clock.now,
                    );
                    info!(pod = %placement.pod, node = %placement.node, gpus = %placement.assigned_gpus(), "scheduled with claims");
                    Outcome::Scheduled(Box::new(placement))
                }
                Err(e) => {
                    warn!(error = %e, "binding failed; releasing the pod's claims");
                    undo(writes, &mine).await;
                    all_bound = false;
                    Outcome::BindFailed(e)
                }
            };
            self.finish(writes, work, &pod, Some(&pending), outcome)
                .await;
        }
        all_bound
    }

    /// The claims just written for a bound pod: assumed until the watch
    /// shows them, their devices busy in this cycle's inventory.
    fn assume_claims(&mut self, work: &mut Work<'_>, fit: &DraFit, done: &[(ClaimWrite, bool)]) {
        let written: Vec<ResourceClaim> = done
            .iter()
            .filter_map(|(w, _)| {
                let key = w.target();
                let watched = work.claim_index.get(&key).copied();
                self.claims_assumed.get(&key, watched).cloned()
            })
            .collect();
        for (claim, (write, _)) in written.iter().zip(done) {
            self.claims_assumed.assume(claim, write);
        }
        if let Some(inventory) = work.inventory.as_mut() {
            for claim in &fit.claims {
                let ids: Vec<_> = claim.devices.iter().map(|d| d.device.clone()).collect();
                inventory.assume_allocated(&claim.key, &ids);
            }
        }
    }
}

/// The pod's claims, read against the watched claims and classes; or the
/// outcome that says why not. A claim not created yet (its template's) is
/// a wait, anything gputopo cannot honour an invalid pod naming the field.
fn read_claims(work: &Work<'_>, assumed: &AssumedClaims, pod: &Pod) -> Result<DraPod, Outcome> {
    let read = DraPod::from_pod(
        pod,
        |namespace, name| {
            let key = format!("{namespace}/{name}");
            assumed.get(&key, work.claim_index.get(&key).copied())
        },
        work.dra.classes.iter().map(AsRef::as_ref),
    );
    read.map_err(|e| match e.kind {
        ClaimErrorKind::TemplateClaimPending | ClaimErrorKind::ClaimNotFound(_) => {
            Outcome::Unschedulable {
                message: format!("waiting for its ResourceClaim: {e}"),
            }
        }
        _ => Outcome::Invalid {
            message: format!("invalid {}: {e}", e.field),
        },
    })
}

/// Releases what [`Cycle::bind_with_claims`] wrote, newest first; a release
/// that fails is logged (the resourceclaim controller releases a claim
/// reserved for a pod that is gone, and the next decision for this pod
/// finds its own reservation and keeps it).
async fn undo<W: ClusterWrites>(writes: &W, done: &[(ClaimWrite, bool)]) {
    for (write, allocated) in done.iter().rev() {
        if let Err(e) = writes.release_claim(write, *allocated).await {
            warn!(error = %e, "releasing a claim after a failed binding");
        }
    }
}
