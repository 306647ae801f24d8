//! What a binding's answer does, and the order of the claim writes around
//! a binding, as pure state machines the driver steps through one write at
//! a time:
//!
//! * a bound pod is assumed (the snapshot and the assume cache hold its
//!   GPUs); a binding that fails takes its assumption back, and the pod
//!   backs off (a 404 ends it: the pod is gone);
//! * [`ClaimBinds`] writes as kube-scheduler's DRA plugin does: each
//!   claim's allocation and reservation, then the binding. A write that
//!   fails undoes the claims written before it, so nothing is left
//!   allocated for a pod that was not bound; a crash in between leaves the
//!   claims reserved for the pod, and the next leader finds them allocated
//!   and binds the pod to their node;
//! * [`ExtendedBind`] (a plain `nvidia.com/gpu` pod placed through DRA):
//!   create the special claim, allocate and reserve it, record
//!   `status.extendedResourceClaimStatus`, then bind; a failure releases
//!   (and, when created here, deletes) the claim.

use crate::claims::ClaimWrite;
use crate::cycle::holds::Holds;
use crate::cycle::work::{Member, Work};
use crate::cycle::writes::WriteError;
use crate::cycle::{Cycle, Outcome};
use gputopo_scheduler_core::dra::{BindingState, DraFit, ExtendedClaim};
use gputopo_scheduler_core::dra_schedule::DraPlacement;
use gputopo_scheduler_core::schedule::Placement;
use k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus;
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::collections::VecDeque;
use tracing::{info, warn};

impl Cycle {
    /// A placed pod, before its binding is sent: its GPUs are held.
    pub(in crate::cycle) fn bind_sent(
        &mut self,
        work: &mut Work<'_>,
        member: &Member,
        p: &Placement,
    ) {
        let (pod, pending) = member;
        self.holds
            .assume(&mut work.snapshot, pod, pending, p, work.clock.now);
        work.snapshot
            .assume_volumes(&pending.namespace, &p.volumes, &p.node);
    }

    /// A pipelined binding's answer: the pod is scheduled, or its
    /// assumption is taken back and it backs off.
    pub(in crate::cycle) fn bind_answered(
        &mut self,
        work: &mut Work<'_>,
        member: &Member,
        p: Placement,
        result: Result<(), WriteError>,
    ) -> Outcome {
        match result {
            Ok(()) => scheduled(p),
            Err(e) => {
                warn!(error = %e, "binding failed: its GPUs are free again");
                self.holds
                    .unassume(&mut work.snapshot, &crate::cluster::pod_key(&member.0));
                Outcome::BindFailed(e)
            }
        }
    }

    /// A gang member's binding (sent and awaited, one after another): the
    /// pod is assumed once bound. A member whose binding fails after others
    /// succeeded cannot undo theirs: it is retried alone.
    pub(in crate::cycle) fn member_bound(
        &mut self,
        work: &mut Work<'_>,
        (pod, pending): &Member,
        p: Placement,
        result: Result<(), WriteError>,
    ) -> Outcome {
        match result {
            Ok(()) => {
                self.holds
                    .assume(&mut work.snapshot, pod, pending, &p, work.clock.now);
                scheduled(p)
            }
            Err(e) => {
                warn!(error = %e, "binding failed");
                Outcome::BindFailed(e)
            }
        }
    }
}

/// A bound pod's outcome, logged.
fn scheduled(p: Placement) -> Outcome {
    info!(pod = %p.pod, node = %p.node, gpus = %p.assigned_gpus(), score = p.score, "scheduled");
    Outcome::Scheduled(Box::new(p))
}

/// The next write of [`ClaimBinds`], or its end.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimBindStep {
    /// Allocate and reserve a claim; answer with [`ClaimBinds::reserved`].
    Reserve(ClaimWrite),
    /// Release a claim written (deallocating it when `allocated`); answer
    /// with [`ClaimBinds::released`].
    Release { write: ClaimWrite, allocated: bool },
    /// Bind the member; answer with [`ClaimBinds::bound`].
    Bind {
        member: usize,
        placement: Box<Placement>,
    },
    /// The member's claims are written and wait for their devices'
    /// binding conditions: hold them, do not bind; answer with
    /// [`ClaimBinds::waiting`].
    Wait { member: usize, message: String },
    /// The member's attempt ends with this outcome.
    Finish { member: usize, outcome: Outcome },
    /// Every write made.
    Done,
}

/// Where one member's claims stand with their devices' binding conditions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberBinding {
    pub state: BindingState,
    /// `namespace/name` of its claims whose devices have binding
    /// conditions: deallocated when the conditions fail.
    pub conditional: std::collections::BTreeSet<String>,
}

/// Writes the claims of every pod (one, or a gang's members), then binds
/// every pod: a claim write that fails undoes all claims written (nothing
/// is bound); a binding that fails releases that pod's claims (the members
/// bound before it stay, as for any gang).
#[derive(Debug)]
pub struct ClaimBinds {
    members: Vec<Member>,
    placed: Vec<DraPlacement>,
    /// Per member, the claims written and whether each was allocated.
    written: Vec<Vec<(ClaimWrite, bool)>>,
    /// Steps that need no answer, taken before the next.
    queued: VecDeque<ClaimBindStep>,
    /// Per member, where its claims stand with their binding conditions.
    states: Vec<MemberBinding>,
    /// The member and claim being written, or the member being bound.
    member: usize,
    claim: usize,
    binding: bool,
    over: bool,
}

impl ClaimBinds {
    pub fn new(members: Vec<Member>, placed: Vec<DraPlacement>) -> ClaimBinds {
        ClaimBinds {
            written: vec![Vec::new(); members.len()],
            states: vec![MemberBinding::default(); members.len()],
            members,
            placed,
            queued: VecDeque::new(),
            member: 0,
            claim: 0,
            binding: false,
            over: false,
        }
    }

    /// Where each member's claims stand with their binding conditions
    /// (all `Ready` unless said).
    pub fn with_states(mut self, states: Vec<MemberBinding>) -> ClaimBinds {
        self.states = states;
        self
    }

    /// The member a step names.
    pub fn member(&self, i: usize) -> &Member {
        &self.members[i]
    }

    /// The next write, or the end.
    pub fn step(&mut self) -> ClaimBindStep {
        if let Some(s) = self.queued.pop_front() {
            return s;
        }
        if self.over {
            return ClaimBindStep::Done;
        }
        let n = self.members.len().min(self.placed.len());
        if !self.binding {
            while self.member < n {
                let claims = &self.placed[self.member].fit.claims;
                if let Some(claim) = claims.get(self.claim) {
                    return ClaimBindStep::Reserve(ClaimWrite::new(
                        claim,
                        &self.members[self.member].0,
                    ));
                }
                self.member += 1;
                self.claim = 0;
            }
            self.binding = true;
            self.member = 0;
        }
        if self.member < n {
            let i = self.member;
            let state = self.states.get(i).map(|s| s.state.clone());
            match state.unwrap_or(BindingState::Ready) {
                BindingState::Ready => {
                    return ClaimBindStep::Bind {
                        member: i,
                        placement: Box::new(self.placed[i].placement.clone()),
                    };
                }
                BindingState::Waiting(message) => {
                    return ClaimBindStep::Wait { member: i, message };
                }
                BindingState::Failed(message) => {
                    // Give the devices up: the claims carrying binding
                    // conditions were allocated for this pod and are
                    // deallocated, as upstream's PreBind failure does.
                    warn!(pod = %self.placed[i].placement.pod, %message, "binding conditions failed; releasing the pod's claims");
                    let releases: Vec<ClaimBindStep> = self.written[i]
                        .iter()
                        .rev()
                        .map(|(write, allocated)| ClaimBindStep::Release {
                            write: write.clone(),
                            allocated: *allocated || self.waits_on(i, write),
                        })
                        .collect();
                    self.queued.extend(releases);
                    self.queued.push_back(ClaimBindStep::Finish {
                        member: i,
                        outcome: Outcome::Unschedulable {
                            message: format!("binding conditions failed: {message}; the claims are deallocated and the pod tried again"),
                        },
                    });
                    self.member += 1;
                    return self.step();
                }
            }
        }
        self.over = true;
        ClaimBindStep::Done
    }

    /// Whether member `i`'s claim `write` holds devices with binding conditions.
    fn waits_on(&self, i: usize, write: &ClaimWrite) -> bool {
        self.states
            .get(i)
            .is_some_and(|s| s.conditional.contains(&write.target()))
    }

    /// The answer to [`ClaimBindStep::Wait`]: the claims are held (their
    /// devices busy for every later decision) and the pod waits, unbound.
    pub fn waiting(&mut self, holds: &mut Holds, work: &mut Work<'_>, message: String) {
        let i = self.member;
        assume_claims(holds, work, &self.placed[i].fit, &self.written[i]);
        info!(pod = %self.placed[i].placement.pod, %message, "claims written; waiting for binding conditions");
        self.queued.push_back(ClaimBindStep::Finish {
            member: i,
            outcome: Outcome::WaitingForDevices { message },
        });
        self.member += 1;
    }

    /// The answer to [`ClaimBindStep::Reserve`] of `write`.
    pub fn reserved(&mut self, write: ClaimWrite, result: Result<(), WriteError>) {
        match result {
            Ok(()) => {
                let allocated = self.placed[self.member].fit.claims[self.claim]
                    .allocation
                    .is_some();
                self.written[self.member].push((write, allocated));
                self.claim += 1;
            }
            Err(e) => {
                warn!(error = %e, "claim write failed; releasing every claim written");
                for mine in self.written.iter().rev() {
                    self.queued.extend(release(mine));
                }
                for member in 0..self.members.len() {
                    self.queued.push_back(ClaimBindStep::Finish {
                        member,
                        outcome: Outcome::BindFailed(e.clone()),
                    });
                }
                self.over = true;
            }
        }
    }

    /// The answer to a [`ClaimBindStep::Release`]: logged when it failed
    /// (the resourceclaim controller releases a claim reserved for a pod
    /// that is gone, and the next decision for this pod finds its own
    /// reservation and keeps it).
    pub fn released(&mut self, result: Result<(), WriteError>) {
        if let Err(e) = result {
            warn!(error = %e, "releasing a claim after a failed binding");
        }
    }

    /// The answer to [`ClaimBindStep::Bind`]: the bound pod and its claims
    /// are assumed; a pod not bound has its claims released.
    pub fn bound(
        &mut self,
        holds: &mut Holds,
        work: &mut Work<'_>,
        result: Result<(), WriteError>,
    ) {
        let i = self.member;
        let DraPlacement { placement, fit } = &self.placed[i];
        let outcome = match result {
            Ok(()) => {
                assume_claims(holds, work, fit, &self.written[i]);
                let (pod, pending) = &self.members[i];
                holds.assume(&mut work.snapshot, pod, pending, placement, work.clock.now);
                info!(pod = %placement.pod, node = %placement.node, gpus = %placement.assigned_gpus(), "scheduled with claims");
                Outcome::Scheduled(Box::new(placement.clone()))
            }
            Err(e) => {
                warn!(error = %e, "binding failed; releasing the pod's claims");
                self.queued.extend(release(&self.written[i]));
                Outcome::BindFailed(e)
            }
        };
        self.queued
            .push_back(ClaimBindStep::Finish { member: i, outcome });
        self.member += 1;
    }
}

/// Releases of `written`, newest first.
fn release(written: &[(ClaimWrite, bool)]) -> impl Iterator<Item = ClaimBindStep> + '_ {
    written
        .iter()
        .rev()
        .map(|(write, allocated)| ClaimBindStep::Release {
            write: write.clone(),
            allocated: *allocated,
        })
}

/// The claims just written for a bound pod: assumed until the watch shows
/// them, their devices busy in this cycle's inventory.
fn assume_claims(
    holds: &mut Holds,
    work: &mut Work<'_>,
    fit: &DraFit,
    done: &[(ClaimWrite, bool)],
) {
    let written: Vec<ResourceClaim> = done
        .iter()
        .filter_map(|(w, _)| {
            let key = w.target();
            let watched = work.claim_index.get(&key).copied();
            holds.claims().get(&key, watched).cloned()
        })
        .collect();
    for (claim, (write, _)) in written.iter().zip(done) {
        holds.claims_mut().assume(claim, write);
    }
    if let Some(inventory) = work.inventory.as_mut() {
        for claim in &fit.claims {
            inventory.assume_allocated(&claim.key, claim.written_results());
        }
    }
}

/// The next write of [`ExtendedBind`], or its end.
#[derive(Clone, Debug, PartialEq)]
pub enum ExtendedStep {
    /// Create the special claim; answer with [`ExtendedBind::created`].
    Create(Box<ResourceClaim>),
    /// Allocate and reserve it; answer with [`ExtendedBind::answered`].
    Reserve(ClaimWrite),
    /// Record it in the pod's status; answer with [`ExtendedBind::answered`].
    SetStatus(PodExtendedResourceClaimStatus),
    /// Bind the pod; answer with [`ExtendedBind::answered`].
    Bind(Box<Placement>),
    /// After a failure: release the claim (deallocating it), then delete
    /// it when created here; answer each with [`ExtendedBind::answered`].
    Release(ClaimWrite),
    Delete(ClaimWrite),
    /// The pod's outcome.
    Done(Outcome),
}

#[derive(Debug)]
enum ExtPhase {
    Create,
    Reserve,
    SetStatus,
    Bind,
    Release(WriteError),
    Delete(WriteError),
    Done(Outcome),
}

/// See the module documentation.
#[derive(Debug)]
pub struct ExtendedBind {
    member: Member,
    ext: ExtendedClaim,
    placed: DraPlacement,
    /// The claim's write, once it exists.
    write: Option<ClaimWrite>,
    status: Option<PodExtendedResourceClaimStatus>,
    phase: ExtPhase,
}

impl ExtendedBind {
    pub fn new(member: Member, ext: ExtendedClaim, placed: DraPlacement) -> ExtendedBind {
        let mut bind = ExtendedBind {
            member,
            phase: ExtPhase::Create,
            write: None,
            status: None,
            placed,
            ext,
        };
        if bind.ext.exists {
            let claim = bind.ext.claim.clone();
            bind.claim_exists(claim);
        }
        bind
    }

    pub fn member(&self) -> &Member {
        &self.member
    }

    /// The next write, or the pod's outcome.
    pub fn step(&self) -> ExtendedStep {
        match (&self.phase, &self.write, &self.status) {
            (ExtPhase::Done(outcome), _, _) => ExtendedStep::Done(outcome.clone()),
            (ExtPhase::Reserve, Some(w), _) => ExtendedStep::Reserve(w.clone()),
            (ExtPhase::SetStatus, _, Some(status)) => ExtendedStep::SetStatus(status.clone()),
            (ExtPhase::Bind, _, _) => ExtendedStep::Bind(Box::new(self.placed.placement.clone())),
            (ExtPhase::Release(_), Some(w), _) => ExtendedStep::Release(w.clone()),
            (ExtPhase::Delete(_), Some(w), _) => ExtendedStep::Delete(w.clone()),
            // No claim yet.
            _ => ExtendedStep::Create(Box::new(self.ext.claim.clone())),
        }
    }

    fn claim_exists(&mut self, claim: ResourceClaim) {
        let pod = &self.member.0;
        let name = claim.metadata.name.clone().unwrap_or_default();
        self.write = Some(ClaimWrite {
            namespace: claim.metadata.namespace.clone().unwrap_or_default(),
            name: name.clone(),
            uid: claim.metadata.uid.clone(),
            allocation: self
                .placed
                .fit
                .claims
                .first()
                .and_then(|c| c.allocation.clone()),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        });
        self.status = Some(PodExtendedResourceClaimStatus {
            request_mappings: self.ext.mappings.clone(),
            resource_claim_name: name,
        });
        self.phase = ExtPhase::Reserve;
    }

    /// The answer to [`ExtendedStep::Create`].
    pub fn created(&mut self, result: Result<ResourceClaim, WriteError>) {
        match result {
            Ok(claim) => self.claim_exists(claim),
            Err(e) => self.failed(e),
        }
    }

    /// The answer to any other write.
    pub fn answered(
        &mut self,
        holds: &mut Holds,
        work: &mut Work<'_>,
        result: Result<(), WriteError>,
    ) {
        let phase = std::mem::replace(&mut self.phase, ExtPhase::Create);
        self.phase = match (phase, result) {
            (ExtPhase::Reserve, Ok(())) => ExtPhase::SetStatus,
            (ExtPhase::SetStatus, Ok(())) => ExtPhase::Bind,
            (ExtPhase::Bind, Ok(())) => ExtPhase::Done(self.scheduled(holds, work)),
            // Released first: the finalizer would hold a deletion.
            (ExtPhase::Reserve | ExtPhase::SetStatus | ExtPhase::Bind, Err(e)) => {
                ExtPhase::Release(e)
            }
            (ExtPhase::Release(e), r) => {
                if let Err(r) = r {
                    warn!(error = %r, "releasing the special claim after a failed binding");
                }
                if self.ext.exists {
                    return self.failed(e);
                }
                ExtPhase::Delete(e)
            }
            (ExtPhase::Delete(e), r) => {
                if let Err(r) = r {
                    warn!(error = %r, "deleting the special claim after a failed binding");
                }
                return self.failed(e);
            }
            (other, _) => other,
        };
    }

    fn failed(&mut self, e: WriteError) {
        warn!(error = %e, "placing through DRA failed");
        self.phase = ExtPhase::Done(Outcome::BindFailed(e));
    }

    fn scheduled(&self, holds: &mut Holds, work: &mut Work<'_>) -> Outcome {
        let DraPlacement { placement, fit } = &self.placed;
        let target = self
            .write
            .as_ref()
            .map(ClaimWrite::target)
            .unwrap_or_default();
        if let Some(inventory) = work.inventory.as_mut() {
            for claim in &fit.claims {
                inventory.assume_allocated(&target, claim.written_results());
            }
        }
        let (pod, pending) = &self.member;
        holds.assume(&mut work.snapshot, pod, pending, placement, work.clock.now);
        info!(pod = %placement.pod, node = %placement.node, gpus = %placement.assigned_gpus(), claim = %target, "scheduled through DRA for nvidia.com/gpu");
        Outcome::Scheduled(Box::new(placement.clone()))
    }
}
