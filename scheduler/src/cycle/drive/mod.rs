//! The cycle's driver: the only `async` code of the cycle, and the only
//! place that awaits the API. It decides nothing itself: it asks the pure
//! steps (`steps/`) what to do, carries out each step through
//! [`ClusterWrites`], and hands what the API answered back to them.
//!
//! * `mod.rs`: the cycle's order (checks, due pods, gang statuses), one
//!   pod, one gang, preemption, and the writes every outcome ends with;
//! * `binds.rs`: the bind pipeline (bounded bindings in flight) and a
//!   gang's bindings one after another;
//! * `claims.rs`: the claim writes around a binding;
//! * `statuses.rs`: node conditions and gang statuses.

mod binds;
mod claims;
mod statuses;

pub use binds::DEFAULT_BINDS_IN_FLIGHT;

use super::domains::{domain_use, free_domains};
use super::preempt::PreemptResult;
use super::steps::{DueStep, Finish, GangStep, PodStep, PreemptStep, Preempting};
use super::work::{Member, Work};
use super::{Clock, ClusterWrites, Cycle, CycleReport, Outcome, Prepared};
use crate::cluster::{Objects, usage};
use crate::config::Preemption;
use binds::InFlight;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashSet;
use std::time::Instant;
use tracing::warn;

impl Cycle {
    /// One pass over the pods that are due, and (every
    /// [`super::accounting::CHECK_EVERY`]) over the pods running on other
    /// GPUs than chosen.
    pub async fn run<W: ClusterWrites>(
        &mut self,
        objects: &Objects<'_>,
        writes: &W,
        clock: Clock,
    ) -> CycleReport {
        self.observe(objects, clock);
        let findings = self.record_findings_due();
        for (pod, _, event) in &findings {
            writes.emit_event(pod, event.clone());
        }
        let mismatches = self.mismatches_due(clock);
        for (pod, _, event) in &mismatches {
            writes.emit_event(pod, event.clone());
        }
        self.write_node_conditions(writes, clock).await;
        let mut report = self.schedule_due(objects, writes, clock).await;
        report.assignment_mismatches = mismatches.into_iter().map(|(_, m, _)| m).collect();
        report.record_findings = findings.into_iter().map(|(_, f, _)| f).collect();
        self.write_gang_statuses(objects, writes, clock).await;
        report.held = self.held_state();
        report
    }

    async fn schedule_due<'a, W: ClusterWrites>(
        &mut self,
        objects: &Objects<'a>,
        writes: &'a W,
        clock: Clock,
    ) -> CycleReport {
        let started = Instant::now();
        let mut prepared: Prepared = match self.prepare_observed(objects, clock) {
            Ok(Some(p)) => p,
            Ok(None) => return CycleReport::default(),
            Err(e) => {
                warn!(error = %e, "retrying later");
                return CycleReport {
                    snapshot_error: Some(e),
                    ..CycleReport::default()
                };
            }
        };
        let ready = std::mem::take(&mut prepared.ready);
        let mut work = Work::new(prepared, objects, clock, started.elapsed());
        let mut binds = InFlight::default();
        let mut handled: HashSet<String> = HashSet::new();
        for q in ready {
            match self.due_step(&work, &q.key, &mut handled) {
                DueStep::Skip => {}
                DueStep::Finish(pod, outcome) => {
                    self.finish(writes, &mut work, &pod, None, outcome).await;
                }
                DueStep::Pod(member) => {
                    self.one_pod(writes, &mut work, &mut binds, *member).await;
                }
                DueStep::Gang { unit, first } => {
                    let settings = self.settings.clone();
                    let (core, preemption) = settings.profile_for(scheduler_name(&first));
                    self.gang(writes, &mut work, unit, core, preemption).await;
                }
            }
        }
        self.await_binds(writes, &mut work, &mut binds).await;
        work.report.usage = Some(usage(&work.snapshot));
        work.report.domains = domain_use(&work.snapshot);
        work.report.free_domains = free_domains(&work.snapshot);
        work.report
    }

    async fn one_pod<'a, W: ClusterWrites>(
        &mut self,
        writes: &'a W,
        work: &mut Work<'a>,
        binds: &mut InFlight<'a>,
        member: Member,
    ) {
        let settings = self.settings.clone();
        let (core, preemption) = settings.profile_for(scheduler_name(&member.0));
        match self.pod_step(work, &member, core) {
            PodStep::Finish(outcome) => {
                let (pod, pending) = member;
                self.finish(writes, work, &pod, Some(&pending), outcome)
                    .await;
            }
            PodStep::Bind(p) => self.bind_later(writes, work, binds, member, *p).await,
            PodStep::BindClaims(placed) => {
                self.bind_with_claims(writes, work, vec![member], vec![*placed])
                    .await;
            }
            PodStep::BindExtended(ext, placed) => {
                self.bind_extended(writes, work, member, *ext, *placed)
                    .await;
            }
            PodStep::Preempt {
                judged,
                message,
                claims,
            } => {
                let (pod, pending) = member;
                let members = [(pod, *judged)];
                let outcome = self
                    .preempt(writes, work, &members, core, preemption, claims)
                    .await
                    .outcome(message);
                let [(pod, _)] = members;
                self.finish(writes, work, &pod, Some(&pending), outcome)
                    .await;
            }
        }
    }

    async fn gang<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        unit: super::gang::GangUnit,
        core: &SchedulerConfig,
        preemption: &Preemption,
    ) {
        let attempt = self.gang_attempt(work, unit);
        let attempt = self.gang_minimum_first(work, attempt, core);
        let outcome = match self.gang_step(work, &attempt, core) {
            GangStep::Bind(placements) => {
                let all = super::steps::gang::members_placed(&attempt.unit, &placements);
                self.bind_all(writes, work, all).await;
                for (pod, event) in self.gang_bound(work, &attempt, &placements) {
                    writes.emit_event(&pod, event);
                }
                return;
            }
            GangStep::BindClaims(placed) if self.any_binding_conditions(work, &placed) => {
                // Not yet: a gang bound member by member while some wait.
                Outcome::Unschedulable {
                    message: "the gang's claims would take devices with binding conditions (KEP-5007); gputopo places such devices for single pods only, not yet for gangs".to_string(),
                }
            }
            GangStep::BindClaims(placed) => {
                let placements: Vec<_> = placed.iter().map(|d| d.placement.clone()).collect();
                let members = attempt.unit.members.clone();
                self.bind_with_claims(writes, work, members, placed).await;
                for (pod, event) in self.gang_bound(work, &attempt, &placements) {
                    writes.emit_event(&pod, event);
                }
                return;
            }
            GangStep::UndoPartial { bound } => {
                let mut answers = Vec::with_capacity(bound.len());
                for member in &bound {
                    answers.push(writes.evict(member, false).await);
                }
                self.gang_undone(work, &attempt, answers)
            }
            GangStep::Preempt { message } => {
                let result = self
                    .preempt(writes, work, &attempt.unit.members, core, preemption, false)
                    .await;
                self.gang_unplaced(work, &attempt, result.outcome(message), core)
            }
            GangStep::Finish(outcome) => outcome,
            GangStep::RetryLater => return,
        };
        for (pod, pending) in &attempt.unit.members {
            self.finish(writes, work, pod, Some(pending), outcome.clone())
                .await;
        }
    }

    /// The writes every outcome ends with (see [`Cycle::finish_step`]).
    pub(super) async fn finish<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        pod: &Pod,
        pending: Option<&PendingPod>,
        outcome: Outcome,
    ) {
        let Finish { event, condition } = self.finish_step(work, pod, pending, outcome);
        if let Some(event) = event {
            writes.emit_event(pod, event);
        }
        if let Some(message) = condition
            && let Err(e) = writes.set_unschedulable(pod, &message).await
        {
            warn!(error = %e, "pod condition not written");
        }
    }

    /// Carries out preemption for `members` (one pod, or every member of a
    /// gang), step by step (`steps/preempt.rs`).
    async fn preempt<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        members: &[Member],
        core: &SchedulerConfig,
        preemption: &Preemption,
        claims: bool,
    ) -> PreemptResult {
        let mut run = Preempting::new(work, members, core, preemption);
        if claims {
            run = run.for_claims();
        }
        loop {
            match run.step(&mut self.holds, work) {
                PreemptStep::Evict { victim, dry_run } => {
                    let answer = writes.evict(&victim, dry_run).await;
                    run.evicted(work, answer);
                }
                PreemptStep::Event { pod, event } => writes.emit_event(&pod, event),
                PreemptStep::Nominate { pod, node } => {
                    let answer = writes.nominate(&pod, &node).await;
                    run.nominated(answer);
                }
                PreemptStep::Done(result) => return result,
            }
        }
    }
}

/// The scheduler name `pod` asks for, which picks the profile.
fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or_default()
}
