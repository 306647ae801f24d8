//! Preemption's rounds as a pure state machine, one write at a time: for
//! `members` (one pod, or every member of a gang) that fit nowhere, each
//! round's plan is evicted first as a dry run; a PodDisruptionBudget that
//! refuses one spares it (and its gang) for the next round's proposal, so
//! a refusal never leaves half a plan evicted. Then the victims are
//! evicted for real (each told by an event), the preemptors hold
//! nominations, and their nominated nodes are written. The driver carries
//! out each [`PreemptStep`] and hands back what the API answered.

use crate::cluster::pod_key;
use crate::config::Preemption;
use crate::cycle::EvictionResult;
use crate::cycle::holds::Holds;
use crate::cycle::preempt::{self, MAX_ROUNDS, PreemptResult};
use crate::cycle::work::{Member, Work};
use crate::cycle::writes::{EventSpec, WriteError};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::preempt_schedule::PreemptionPlan;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeSet;
use std::sync::Arc;
use tracing::{info, warn};

/// The next write of a preemption, or its end.
#[derive(Clone, Debug, PartialEq)]
pub enum PreemptStep {
    /// Evict `victim` (`namespace/name`); answer with
    /// [`Preempting::evicted`].
    Evict { victim: String, dry_run: bool },
    /// Record this event (a victim's `Preempted`).
    Event { pod: Arc<Pod>, event: EventSpec },
    /// Write `node` as the preemptor's nominated node; answer with
    /// [`Preempting::nominated`].
    Nominate { pod: Arc<Pod>, node: String },
    /// Preemption is over.
    Done(PreemptResult),
}

#[derive(Debug)]
enum Phase {
    /// Before a round's proposal.
    Propose,
    /// Dry-running `plan`'s evictions; `next` is the victim to try.
    DryRun {
        plan: PreemptionPlan,
        next: usize,
        refused: Vec<String>,
    },
    Evict {
        plan: PreemptionPlan,
        next: usize,
    },
    Nominate {
        plan: PreemptionPlan,
        next: usize,
    },
    Done(PreemptResult),
}

/// One preemption under way. See the module documentation.
#[derive(Debug)]
pub struct Preempting<'p> {
    pods: Vec<Arc<Pod>>,
    pendings: Vec<PendingPod>,
    preemptors: Vec<String>,
    core: &'p SchedulerConfig,
    preemption: &'p Preemption,
    spared: BTreeSet<String>,
    rounds: usize,
    phase: Phase,
    /// The event due after the last eviction answered.
    event: Option<(Arc<Pod>, EventSpec)>,
    /// A pod whose claims did not fit: a plan that evicts nothing is no
    /// plan (the GPU count it is judged by fits already; what is short are
    /// devices or constraints no eviction changes), so nothing is nominated.
    needs_victims: bool,
}

impl<'p> Preempting<'p> {
    /// Preemption for `members`, or its result at once when it may not be
    /// tried (off, `preemptionPolicy: Never`, victims still terminating).
    pub fn new(
        work: &Work<'_>,
        members: &[Member],
        core: &'p SchedulerConfig,
        preemption: &'p Preemption,
    ) -> Preempting<'p> {
        let phase = match preempt::precheck(members, &work.by_key, preemption) {
            Some(r) => Phase::Done(r),
            None => Phase::Propose,
        };
        Preempting {
            pods: members.iter().map(|(p, _)| p.clone()).collect(),
            pendings: members.iter().map(|(_, p)| p.clone()).collect(),
            preemptors: members.iter().map(|(p, _)| pod_key(p)).collect(),
            core,
            preemption,
            spared: BTreeSet::new(),
            rounds: 0,
            phase,
            event: None,
            needs_victims: false,
        }
    }

    /// For a pod with claims: see `needs_victims`.
    pub fn for_claims(mut self) -> Self {
        self.needs_victims = true;
        self
    }

    /// The next write, or the end.
    pub fn step(&mut self, holds: &mut Holds, work: &mut Work<'_>) -> PreemptStep {
        if let Some((pod, event)) = self.event.take() {
            return PreemptStep::Event { pod, event };
        }
        loop {
            match &mut self.phase {
                Phase::Done(r) => return PreemptStep::Done(r.clone()),
                Phase::Propose if self.rounds >= MAX_ROUNDS => {
                    self.phase = Phase::Done(preempt::every_plan_protected(&self.spared));
                }
                Phase::Propose => {
                    self.rounds += 1;
                    self.phase = match preempt::propose(
                        &work.snapshot,
                        &self.pendings,
                        self.core,
                        self.preemption,
                        work.clock.wall,
                        &self.spared,
                    ) {
                        Ok(plan) if self.needs_victims && plan.victims.is_empty() => {
                            Phase::Done(PreemptResult::NoPlan(
                                "evicting pods frees nothing the claims lack".to_string(),
                            ))
                        }
                        Ok(plan) => Phase::DryRun {
                            plan,
                            next: 0,
                            refused: Vec::new(),
                        },
                        Err(no) => Phase::Done(no),
                    };
                }
                Phase::DryRun { plan, next, .. } if *next < plan.victims.len() => {
                    return PreemptStep::Evict {
                        victim: plan.victims[*next].clone(),
                        dry_run: true,
                    };
                }
                Phase::DryRun { refused, .. } if !refused.is_empty() => {
                    work.report
                        .evictions
                        .extend(refused.iter().map(|_| EvictionResult::Refused));
                    self.spared.extend(refused.drain(..));
                    self.phase = Phase::Propose;
                }
                Phase::DryRun { .. } => {
                    if let Some(plan) = self.take_plan() {
                        self.phase = Phase::Evict { plan, next: 0 };
                    }
                }
                Phase::Evict { plan, next } if *next < plan.victims.len() => {
                    return PreemptStep::Evict {
                        victim: plan.victims[*next].clone(),
                        dry_run: false,
                    };
                }
                Phase::Evict { plan, .. } => {
                    holds.nominate(&self.pendings, &plan.members, work.clock.now);
                    if let Some(plan) = self.take_plan() {
                        self.phase = Phase::Nominate { plan, next: 0 };
                    }
                }
                Phase::Nominate { plan, next }
                    if *next < self.pods.len().min(plan.members.len()) =>
                {
                    let step = PreemptStep::Nominate {
                        pod: self.pods[*next].clone(),
                        node: plan.members[*next].0.clone(),
                    };
                    *next += 1;
                    return step;
                }
                Phase::Nominate { plan, .. } => {
                    info!(preemptors = ?self.preemptors, victims = ?plan.victims, gpu_hours_lost = plan.gpu_hours_lost, "preempting");
                    self.phase = Phase::Done(preempt::preempting(plan));
                }
            }
        }
    }

    /// The plan of the phase under way (the phase left at `Propose`).
    fn take_plan(&mut self) -> Option<PreemptionPlan> {
        match std::mem::replace(&mut self.phase, Phase::Propose) {
            Phase::DryRun { plan, .. }
            | Phase::Evict { plan, .. }
            | Phase::Nominate { plan, .. } => Some(plan),
            other => {
                self.phase = other;
                None
            }
        }
    }

    /// What the API server answered to the last [`PreemptStep::Evict`].
    pub fn evicted(&mut self, work: &mut Work<'_>, result: Result<(), WriteError>) {
        match (&mut self.phase, result) {
            (Phase::DryRun { next, .. }, Ok(())) => *next += 1,
            (
                Phase::DryRun {
                    plan,
                    next,
                    refused,
                },
                Err(e),
            ) if e.budget_refused() => {
                refused.push(plan.victims[*next].clone());
                *next += 1;
            }
            (Phase::DryRun { .. }, Err(e)) => {
                work.report.evictions.push(EvictionResult::Error);
                self.phase = Phase::Done(PreemptResult::Failed(format!("preemption: {e}")));
            }
            (Phase::Evict { plan, next }, Ok(())) => {
                work.report.evictions.push(EvictionResult::Evicted);
                let victim = &plan.victims[*next];
                if let Some(v) = work.by_key.get(victim) {
                    let note = preempt::victim_note(v, &self.preemptors, plan);
                    self.event = Some((
                        v.clone(),
                        EventSpec::normal("Preempted", "Preempting", note),
                    ));
                }
                *next += 1;
            }
            (Phase::Evict { .. }, Err(e)) => {
                // A budget changed between the dry run and now.
                work.report.evictions.push(EvictionResult::failed(&e));
                self.phase = Phase::Done(PreemptResult::Failed(format!("preemption: {e}")));
            }
            (_, _) => {}
        }
    }

    /// What the API server answered to the last [`PreemptStep::Nominate`]:
    /// the nomination holds either way (this process keeps it).
    pub fn nominated(&mut self, result: Result<(), WriteError>) {
        if let Err(e) = result {
            warn!(error = %e, "nominated node not written");
        }
    }
}
