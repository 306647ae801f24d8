//! The claim writes around a binding, carried out step by step as
//! `steps/binds.rs` orders them: a pod's (or gang's) ResourceClaims
//! ([`ClaimBinds`]), and the special claim of a plain `nvidia.com/gpu` pod
//! placed through DRA ([`ExtendedBind`]).

use super::super::steps::{ClaimBindStep, ClaimBinds, ExtendedBind, ExtendedStep, MemberBinding};
use super::super::work::{Member, Work};
use super::super::{ClusterWrites, Cycle};
use gputopo_scheduler_core::dra::{BindingState, ExtendedClaim, binding_state, fresh_state};
use gputopo_scheduler_core::dra_schedule::DraPlacement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

impl Cycle {
    /// Writes the claims of every pod, then binds every pod.
    pub(super) async fn bind_with_claims<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        members: Vec<Member>,
        placed: Vec<DraPlacement>,
    ) {
        let states = placed.iter().map(|p| self.binding_of(work, p)).collect();
        let mut run = ClaimBinds::new(members, placed).with_states(states);
        loop {
            match run.step() {
                ClaimBindStep::Reserve(mut write) => {
                    // As kube-scheduler with binding conditions on (1.37):
                    // when the devices were allocated, the start of any wait.
                    if let Some(a) = write.allocation.as_mut() {
                        a.allocation_timestamp = Some(Time(work.clock.wall));
                    }
                    let answer = writes.reserve_claim(&write).await;
                    run.reserved(write, answer);
                }
                ClaimBindStep::Wait { message, .. } => run.waiting(&mut self.holds, work, message),
                ClaimBindStep::Release { write, allocated } => {
                    let answer = writes.release_claim(&write, allocated).await;
                    run.released(answer);
                }
                ClaimBindStep::Bind { member, placement } => {
                    let answer = writes.bind(&run.member(member).0, &placement).await;
                    run.bound(&mut self.holds, work, answer);
                }
                ClaimBindStep::Finish { member, outcome } => {
                    let (pod, pending) = run.member(member);
                    self.finish(writes, work, pod, Some(pending), outcome).await;
                }
                ClaimBindStep::Done => return,
            }
        }
    }

    /// Whether any of `placed` waits on binding conditions.
    pub(super) fn any_binding_conditions(&self, work: &Work<'_>, placed: &[DraPlacement]) -> bool {
        placed
            .iter()
            .any(|p| self.binding_of(work, p).state != BindingState::Ready)
    }

    /// Where `placed`'s claims stand with their devices' binding
    /// conditions: allocations made now wait for the driver; claims
    /// allocated before are read as they stand.
    fn binding_of(&self, work: &Work<'_>, placed: &DraPlacement) -> MemberBinding {
        let mut out = MemberBinding::default();
        for claim in &placed.fit.claims {
            let state = match &claim.allocation {
                Some(_) => fresh_state(claim.written_results()),
                None => {
                    let watched = work.claim_index.get(&claim.key).copied();
                    match self.holds.claims().get(&claim.key, watched) {
                        Some(c) => binding_state(c, work.clock.wall),
                        None => BindingState::Ready,
                    }
                }
            };
            if state != BindingState::Ready {
                out.conditional.insert(claim.key.clone());
            }
            out.state = std::mem::take(&mut out.state).and(state);
        }
        out
    }

    /// Creates (unless it exists), allocates and reserves the special
    /// claim, records it in the pod's status, then binds; undoes on failure.
    pub(super) async fn bind_extended<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        member: Member,
        ext: ExtendedClaim,
        placed: DraPlacement,
    ) {
        let pod = member.0.clone();
        let mut run = ExtendedBind::new(member, ext, placed);
        loop {
            let answer = match run.step() {
                ExtendedStep::Create(claim) => {
                    let created = writes.create_claim(&claim).await;
                    run.created(created);
                    continue;
                }
                ExtendedStep::Reserve(write) => writes.reserve_claim(&write).await,
                ExtendedStep::SetStatus(status) => {
                    writes.set_extended_claim_status(&pod, &status).await
                }
                ExtendedStep::Bind(placement) => writes.bind(&pod, &placement).await,
                ExtendedStep::Release(write) => writes.release_claim(&write, true).await,
                ExtendedStep::Delete(write) => writes.delete_claim(&write).await,
                ExtendedStep::Done(outcome) => {
                    let (pod, pending) = run.member();
                    self.finish(writes, work, pod, Some(pending), outcome).await;
                    return;
                }
            };
            run.answered(&mut self.holds, work, answer);
        }
    }
}
