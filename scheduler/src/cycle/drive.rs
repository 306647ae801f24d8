//! The cycle's driver: pure stages in between, every write through
//! [`ClusterWrites`]. The only `async` code of the cycle, and the only
//! place that awaits the API; it decides nothing itself.

use super::gang::{GangReadiness, GangUnit, recovery_event, since_created};
use super::node_trust::{CONDITION_WRITES_IN_FLIGHT, CONDITIONS_PER_CHECK};
use super::outcome::workload_label;
use super::preempt::{self, MAX_ROUNDS, PreemptResult};
use super::stages::{Prepared, domain_selectors, domain_use};
use super::{
    Clock, ClusterWrites, Cycle, CycleReport, EventSpec, EvictionResult, Outcome, PodOutcome,
};
use crate::cluster::{Objects, pod_key, usage};
use crate::config::Preemption;
use futures::stream::{self, StreamExt};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::DraInventory;
use gputopo_scheduler_core::dra_schedule::{ClaimGangDecision, schedule_claim_gang};
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::{Decision, Placement, schedule};
use gputopo_scheduler_core::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// A pod with its readable request.
pub(super) type Member = (Arc<Pod>, PendingPod);

/// What one decision works with.
pub(super) struct Work<'a> {
    pub(super) snapshot: Snapshot,
    by_key: crate::live_cluster::PodsByKey,
    gangs: &'a crate::gangs::GangObjects,
    pub(super) dra: &'a crate::claims::DraObjects,
    /// The watched claims by `namespace/name`, and the special claims by
    /// their pod's uid: read once per cycle.
    pub(super) claim_index: HashMap<String, &'a ResourceClaim>,
    pub(super) special_claims: HashMap<&'a str, &'a ResourceClaim>,
    /// The DRA devices and the busy ones; `None` while no DRA object exists.
    pub(super) inventory: Option<DraInventory>,
    pub(super) clock: Clock,
    report: CycleReport,
    /// The snapshot's build time, charged to the cycle's first decision.
    build_time: Duration,
    /// Bindings sent and not yet answered (`binds.rs`).
    pub(super) binds: super::binds::InFlight<'a>,
}

impl Work<'_> {
    pub(super) fn decided(&mut self, started: Instant) {
        let took = std::mem::take(&mut self.build_time) + started.elapsed();
        self.report.decisions.push(took);
    }
}

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
        // The checks read every pod and node when due (every few seconds),
        // from what the cycle observed: the daemon hands over only what
        // changed.
        let max_age = self.settings.accounting.reported_allocations_max_age;
        let mismatches = if self.assignment_checks.is_due(clock) {
            let pods: Vec<Arc<Pod>> = self.live.pods().values().cloned().collect();
            let topologies: Vec<_> = self.live.topologies().cloned().collect();
            self.assignment_checks
                .due(&pods, &topologies, clock, max_age)
        } else {
            Vec::new()
        };
        for (pod, m) in &mismatches {
            let message = m.message();
            warn!(pod = %m.pod, node = %m.node, %message, "GPU assignment mismatch");
            writes.emit_event(
                pod,
                EventSpec::warning("GPUAssignmentMismatch", "Verifying", message),
            );
        }
        let trust_writes = if self.node_trust.is_due(clock) {
            let nodes: Vec<_> = self.live.nodes().cloned().collect();
            let topologies: Vec<_> = self.live.topologies().cloned().collect();
            self.node_trust.due(&nodes, &topologies, clock)
        } else {
            Vec::new()
        };
        let answered: Vec<_> = stream::iter(trust_writes.into_iter().take(CONDITIONS_PER_CHECK))
            .map(|w| async move {
                let r = writes.set_node_condition(&w).await;
                (w, r)
            })
            .buffer_unordered(CONDITION_WRITES_IN_FLIGHT)
            .collect()
            .await;
        for (w, r) in answered {
            match r {
                Ok(()) => {
                    if w.condition.status == "False" {
                        warn!(node = %w.node, message = ?w.condition.message, "GpuTopology not believed");
                    }
                    let version = self
                        .live
                        .node(&w.node)
                        .and_then(|n| n.metadata.resource_version.clone());
                    self.node_trust.sent(&w.node, version);
                }
                Err(e) => warn!(error = %e, "retrying next check"),
            }
        }
        let mut report = self.schedule_due(objects, writes, clock).await;
        report.assignment_mismatches = mismatches.into_iter().map(|(_, m)| m).collect();
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
        let Prepared {
            by_key,
            ready,
            snapshot,
            inventory,
        } = match self.prepare_observed(objects, clock) {
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
        let mut work = Work {
            snapshot,
            by_key,
            gangs: objects.gangs,
            dra: objects.dra,
            claim_index: objects.dra.claims_by_key(),
            special_claims: objects.dra.special_claims_by_owner(),
            inventory,
            clock,
            report: CycleReport::default(),
            build_time: started.elapsed(),
            binds: Default::default(),
        };
        let mut handled: HashSet<String> = HashSet::new();
        for q in ready {
            if !handled.insert(q.key.clone()) {
                continue;
            }
            let Some(pod) = work.by_key.get(&q.key).cloned() else {
                self.forget(&q.key);
                continue;
            };
            let pending = match PendingPod::from_k8s(&pod) {
                Ok(p) => p,
                Err(e) => {
                    let message = format!("invalid {}: {e}", e.key());
                    self.finish(writes, &mut work, &pod, None, Outcome::Invalid { message })
                        .await;
                    continue;
                }
            };
            let settings = self.settings.clone();
            let name = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
            let (core, preemption) = settings.profile_for(name.unwrap_or_default());
            match pending.request.gang.clone() {
                None => {
                    self.one_pod(writes, &mut work, (pod, pending), core, preemption)
                        .await;
                }
                Some(gang) => {
                    let unit = self.assemble_gang(&pending, &gang, &work.by_key, work.gangs);
                    if let GangReadiness::Independent(why) = &unit.readiness {
                        debug!(pod = %q.key, %why, "not a gang: placed alone");
                        self.one_pod(writes, &mut work, (pod, pending), core, preemption)
                            .await;
                        continue;
                    }
                    handled.extend(unit.members.iter().map(|(p, _)| pod_key(p)));
                    self.gang(writes, &mut work, unit, core, preemption).await;
                }
            }
        }
        self.await_binds(writes, &mut work).await;
        work.report.usage = Some(usage(&work.snapshot));
        work.report.domains = domain_use(&work.snapshot);
        work.report
    }

    async fn one_pod<'a, W: ClusterWrites>(
        &mut self,
        writes: &'a W,
        work: &mut Work<'a>,
        member: Member,
        core: &SchedulerConfig,
        preemption: &Preemption,
    ) {
        if crate::claims::uses_claims(&member.0) {
            self.one_claim_pod(writes, work, member, core, preemption)
                .await;
            return;
        }
        let Some(member) = self
            .one_extended_pod(writes, work, member, core, preemption)
            .await
        else {
            return;
        };
        let key = pod_key(&member.0);
        let own = [key];
        self.lift_holds(&mut work.snapshot, None, &own);
        let t = Instant::now();
        let decision = schedule(&work.snapshot, &member.1, core);
        work.decided(t);
        match decision {
            Decision::Placed(p) => self.bind_later(writes, work, member, p).await,
            Decision::Unschedulable(u) => {
                self.restore_holds(&mut work.snapshot, None, &own);
                let (pod, pending) = member;
                let judged = pending.clone();
                self.unplaced(
                    writes,
                    work,
                    (pod, pending),
                    judged,
                    (core, preemption),
                    u.message,
                )
                .await;
            }
        }
    }

    /// A pod no node takes now: preemption tried for it as the filter saw
    /// it (`judged`: a pod with claims asks their GPU count), then its
    /// outcome recorded.
    pub(super) async fn unplaced<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        (pod, pending): Member,
        judged: PendingPod,
        (core, preemption): (&SchedulerConfig, &Preemption),
        message: String,
    ) {
        let members = [(pod, judged)];
        let outcome = self
            .preempt(writes, work, &members, core, preemption)
            .await
            .outcome(message);
        let [(pod, _)] = members;
        self.finish(writes, work, &pod, Some(&pending), outcome)
            .await;
    }

    async fn gang<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        unit: GangUnit,
        core: &SchedulerConfig,
        preemption: &Preemption,
    ) {
        let member_keys: Vec<String> = unit.members.iter().map(|(p, _)| pod_key(p)).collect();
        let partial = self.partly_bound_for(&unit, work.clock.now);
        // The gang's own reservation and nominations are free for it.
        self.lift_holds(&mut work.snapshot, Some(&unit.key), &member_keys);
        let waited = self.gang_waited(&unit.key, work.clock.now);
        let claims = match self.gang_claims(work, &unit.members) {
            Ok(c) => c,
            Err(outcome) => {
                self.restore_holds(&mut work.snapshot, Some(&unit.key), &member_keys);
                for (pod, pending) in &unit.members {
                    self.finish(writes, work, pod, Some(pending), outcome.clone())
                        .await;
                }
                return;
            }
        };
        // For a gang whose members use claims: each member's devices.
        let mut claim_fits = None;
        let t = Instant::now();
        let decision = (unit.readiness == GangReadiness::Complete).then(|| {
            // The rest of a partly bound gang goes as close to its bound
            // members as fits: their leaf, else their spine, else anywhere.
            let nodes: Vec<String> = unit.bound_members.iter().map(|(_, n)| n.clone()).collect();
            let mut last = None;
            for selector in domain_selectors(&work.snapshot, &nodes) {
                let list: Vec<PendingPod> = unit
                    .members
                    .iter()
                    .map(|(_, p)| {
                        let mut p = p.clone();
                        p.node_selector.extend(selector.clone());
                        p
                    })
                    .collect();
                let d = match &claims {
                    None => schedule_gang(&work.snapshot, &list, core),
                    Some(dras) => {
                        let empty = DraInventory::default();
                        let inventory = work.inventory.as_ref().unwrap_or(&empty);
                        match schedule_claim_gang(&work.snapshot, inventory, &list, dras, core) {
                            ClaimGangDecision::Placed(placed) => {
                                let p = placed.iter().map(|d| d.placement.clone()).collect();
                                claim_fits = Some(placed);
                                GangDecision::Placed(p)
                            }
                            ClaimGangDecision::Waiting { message } => {
                                GangDecision::Waiting { message }
                            }
                        }
                    }
                };
                if matches!(d, GangDecision::Placed(_)) {
                    return d;
                }
                last = Some(d);
            }
            last.unwrap_or(GangDecision::Waiting {
                message: format!("{}: nothing to place", unit.key),
            })
        });
        work.decided(t);
        let outcome = match decision {
            Some(GangDecision::Placed(placements)) if placements.len() == unit.members.len() => {
                let recovery = (!unit.bound_members.is_empty())
                    .then(|| recovery_event(&work.snapshot, &unit, &placements));
                let all: Vec<(Member, Placement)> =
                    unit.members.into_iter().zip(placements).collect();
                let replaced: Vec<Arc<Pod>> = all.iter().map(|((p, _), _)| p.clone()).collect();
                let bound = match claim_fits {
                    Some(fits) => {
                        let members = all.into_iter().map(|(m, _)| m).collect();
                        self.bind_with_claims(writes, work, members, fits).await
                    }
                    None => self.bind_all(writes, work, all).await,
                };
                if bound {
                    // Members that joined running ones: a lost member's
                    // replacement, placed by the first placement's rule.
                    if let Some(event) = recovery {
                        for pod in &replaced {
                            work.report
                                .gang_recoveries
                                .push(since_created(pod, work.clock));
                            writes.emit_event(pod, event.clone());
                        }
                    }
                    self.gang_unschedulable.remove(&unit.key);
                    if let Some(w) = self.gang_placed(&unit.key, work.clock.now) {
                        work.report.gang_waits.push(w);
                    }
                } else {
                    self.restore_holds(&mut work.snapshot, Some(&unit.key), &member_keys);
                }
                return;
            }
            // Not placeable now, and partly bound for too long: undone, so
            // that no bound member holds GPUs for members that cannot come.
            _ if partial.is_some_and(|p| p > self.settings.gangs.partial_bind_timeout) => {
                self.restore_holds(&mut work.snapshot, Some(&unit.key), &member_keys);
                let partial = partial.unwrap_or_default();
                self.undo_partial_gang(writes, work, &unit, partial).await;
                return;
            }
            Some(GangDecision::Placed(placements)) => {
                warn!(gang = %unit.key, members = unit.members.len(), placements = placements.len(), "the gang decision does not place every member; retrying later");
                for k in &member_keys {
                    self.retry_later(k, work.clock.now);
                }
                self.restore_holds(&mut work.snapshot, Some(&unit.key), &member_keys);
                return;
            }
            Some(GangDecision::Waiting { message }) => self
                .preempt(writes, work, &unit.members, core, preemption)
                .await
                .outcome(message),
            None => Outcome::WaitingForGang {
                message: unit.waiting_message().unwrap_or_default(),
            },
        };
        let outcome = if waited > unit.timeout {
            let message = outcome.message().unwrap_or_default();
            self.gang_timed_out(&unit, waited, &message)
        } else if let Outcome::Unschedulable { message } = &outcome {
            let pendings: Vec<PendingPod> = unit.members.iter().map(|(_, p)| p.clone()).collect();
            match self.reserve(&work.snapshot, &unit.key, &pendings, core, work.clock.now) {
                Some(note) => Outcome::Unschedulable {
                    message: format!("{message}; {note}"),
                },
                None => outcome,
            }
        } else {
            outcome
        };
        if let Outcome::Unschedulable { message } | Outcome::GangTimedOut { message } = &outcome {
            self.gang_unschedulable
                .insert(unit.key.clone(), message.clone());
        }
        self.restore_holds(&mut work.snapshot, Some(&unit.key), &member_keys);
        for (pod, pending) in &unit.members {
            self.finish(writes, work, pod, Some(pending), outcome.clone())
                .await;
        }
    }

    /// A gang partly bound for longer than `gangs.partialBindTimeout`: its
    /// bound members are evicted (their controllers recreate them, and the
    /// whole gang is placed again as one), so none holds GPUs idle waiting
    /// for members that cannot come. Its pending members are told why.
    async fn undo_partial_gang<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        unit: &GangUnit,
        partial: Duration,
    ) {
        let mut evicted = Vec::new();
        let mut failed = Vec::new();
        for (member, _) in &unit.bound_members {
            match writes.evict(member, false).await {
                Ok(()) => {
                    work.report.evictions.push(EvictionResult::Evicted);
                    evicted.push(member.clone());
                }
                Err(e) => {
                    work.report.evictions.push(EvictionResult::failed(&e));
                    failed.push(e.to_string());
                }
            }
        }
        if failed.is_empty() {
            self.gang_undone(&unit.key);
        }
        warn!(gang = %unit.key, ?evicted, ?failed, "undoing a partly bound gang");
        let message = format!(
            "{} stayed partly bound ({} bound, {} pending) for {}s, longer than gangs.partialBindTimeout ({}s): evicted {} so that the gang is placed again as one{}",
            unit.key,
            unit.bound_members.len(),
            unit.members.len(),
            partial.as_secs(),
            self.settings.gangs.partial_bind_timeout.as_secs(),
            if evicted.is_empty() {
                "none of its bound members".to_string()
            } else {
                evicted.join(", ")
            },
            if failed.is_empty() {
                String::new()
            } else {
                format!("; not evicted: {}", failed.join("; "))
            }
        );
        for (pod, pending) in &unit.members {
            let outcome = Outcome::GangTimedOut {
                message: message.clone(),
            };
            self.finish(writes, work, pod, Some(pending), outcome).await;
        }
    }

    /// The writes and bookkeeping every outcome ends with: the queue, the
    /// event, and for a pod left pending its PodScheduled condition.
    pub(super) async fn finish<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        pod: &Pod,
        pending: Option<&PendingPod>,
        outcome: Outcome,
    ) {
        let key = pod_key(pod);
        self.record(&key, &outcome, work.clock.now);
        debug!(pod = %key, result = outcome.metric_label(), message = ?outcome.message(), "attempt");
        let gone = matches!(&outcome, Outcome::BindFailed(e) if e.pod_gone());
        if !gone {
            writes.emit_event(pod, outcome.event());
        }
        if outcome.waits_for_a_change()
            && let Some(message) = outcome.message()
            && let Err(e) = writes.set_unschedulable(pod, &message).await
        {
            warn!(error = %e, "pod condition not written");
        }
        work.report.outcomes.push(PodOutcome {
            pod: key,
            workload: workload_label(pending),
            outcome,
        });
    }

    /// For `members` (one pod, or every member of a gang) that fit nowhere:
    /// evicts the pods scheduler-core proposes, dry runs first (see
    /// `preempt.rs`), and nominates the nodes.
    pub(super) async fn preempt<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        members: &[Member],
        core: &SchedulerConfig,
        preemption: &Preemption,
    ) -> PreemptResult {
        if let Some(r) = preempt::precheck(members, &work.by_key, preemption) {
            return r;
        }
        let pendings: Vec<PendingPod> = members.iter().map(|(_, p)| p.clone()).collect();
        let mut spared: BTreeSet<String> = BTreeSet::new();
        for _ in 0..MAX_ROUNDS {
            let plan = match preempt::propose(
                &work.snapshot,
                &pendings,
                core,
                preemption,
                work.clock.wall,
                &spared,
            ) {
                Ok(plan) => plan,
                Err(no) => return no,
            };
            let mut refused = Vec::new();
            for victim in &plan.victims {
                match writes.evict(victim, true).await {
                    Ok(()) => {}
                    Err(e) if e.budget_refused() => refused.push(victim.clone()),
                    Err(e) => {
                        work.report.evictions.push(EvictionResult::Error);
                        return PreemptResult::Failed(format!("preemption: {e}"));
                    }
                }
            }
            if !refused.is_empty() {
                work.report
                    .evictions
                    .extend(refused.iter().map(|_| EvictionResult::Refused));
                spared.extend(refused);
                continue;
            }
            let preemptors: Vec<String> = members.iter().map(|(p, _)| pod_key(p)).collect();
            for victim in &plan.victims {
                if let Err(e) = writes.evict(victim, false).await {
                    // A budget changed between the dry run and now.
                    work.report.evictions.push(EvictionResult::failed(&e));
                    return PreemptResult::Failed(format!("preemption: {e}"));
                }
                work.report.evictions.push(EvictionResult::Evicted);
                if let Some(v) = work.by_key.get(victim) {
                    let note = preempt::victim_note(v, &preemptors, &plan);
                    writes.emit_event(v, EventSpec::normal("Preempted", "Preempting", note));
                }
            }
            self.nominate(&preemptors, &plan.members, work.clock.now);
            for ((pod, _), (node, _)) in members.iter().zip(&plan.members) {
                if let Err(e) = writes.nominate(pod, node).await {
                    warn!(error = %e, "nominated node not written");
                }
            }
            info!(preemptors = ?preemptors, victims = ?plan.victims, gpu_hours_lost = plan.gpu_hours_lost, "preempting");
            return preempt::preempting(&plan);
        }
        preempt::every_plan_protected(&spared)
    }
}
