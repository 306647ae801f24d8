//! The claim writes around a binding, carried out step by step as
//! `steps/binds.rs` orders them: a pod's (or gang's) ResourceClaims
//! ([`ClaimBinds`]), and the special claim of a plain `nvidia.com/gpu` pod
//! placed through DRA ([`ExtendedBind`]).

use super::super::steps::{ClaimBindStep, ClaimBinds, ExtendedBind, ExtendedStep};
use super::super::work::{Member, Work};
use super::super::{ClusterWrites, Cycle};
use gputopo_scheduler_core::dra::ExtendedClaim;
use gputopo_scheduler_core::dra_schedule::DraPlacement;

impl Cycle {
    /// Writes the claims of every pod, then binds every pod.
    pub(super) async fn bind_with_claims<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        members: Vec<Member>,
        placed: Vec<DraPlacement>,
    ) {
        let mut run = ClaimBinds::new(members, placed);
        loop {
            match run.step() {
                ClaimBindStep::Reserve(write) => {
                    let answer = writes.reserve_claim(&write).await;
                    run.reserved(write, answer);
                }
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
