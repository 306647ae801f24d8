//! What each due pod is, and how every outcome ends. Pure.

use crate::assignment_record::AssignmentRecord;
use crate::cluster::pod_key;
use crate::cycle::gang::{GangContext, GangReadiness, GangUnit};
use crate::cycle::outcome::workload_label;
use crate::cycle::work::{Member, Work};
use crate::cycle::writes::EventSpec;
use crate::cycle::{Cycle, Outcome, PodOutcome};
use gputopo_scheduler_core::pod::PendingPod;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashSet;
use std::sync::Arc;
use tracing::debug;

/// What to do with one pod the queue says is due.
pub enum DueStep {
    /// Handled already (a member of a gang decided this cycle), or gone
    /// from the store.
    Skip,
    /// Unreadable: this outcome, with no request to label it by.
    Finish(Arc<Pod>, Outcome),
    /// Decided alone.
    Pod(Box<Member>),
    /// Decided with its gang; `first` (the pod due) picks the profile.
    Gang { unit: GangUnit, first: Arc<Pod> },
}

/// The writes an outcome ends with.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    /// The event to record on the pod; `None` for a pod that is gone.
    pub event: Option<EventSpec>,
    /// The `PodScheduled=False` message of a pod left pending.
    pub condition: Option<String>,
}

impl Cycle {
    /// What `key` (due now) is; `handled` holds the pods decided this cycle.
    pub(in crate::cycle) fn due_step(
        &mut self,
        work: &Work<'_>,
        key: &str,
        handled: &mut HashSet<String>,
    ) -> DueStep {
        if !handled.insert(key.to_string()) {
            return DueStep::Skip;
        }
        let Some(pod) = work.by_key.get(key).cloned() else {
            self.queue.done(key);
            return DueStep::Skip;
        };
        let pending = match PendingPod::from_k8s(&pod) {
            Ok(p) => p,
            Err(e) => {
                let message = format!("invalid {}: {e}", e.key());
                return DueStep::Finish(pod, Outcome::Invalid { message });
            }
        };
        let Some(gang) = pending.request.gang.clone() else {
            return DueStep::Pod(Box::new((pod, pending)));
        };
        let names = self.settings.all_scheduler_names();
        let unit = crate::cycle::gang::assemble(
            &pending,
            &gang,
            &GangContext {
                by_key: &work.by_key,
                gangs: work.gangs,
                names: &names,
                assumed: self.holds.assumed(),
                default_timeout: self.settings.gangs.schedule_timeout,
            },
        );
        if let GangReadiness::Independent(why) = &unit.readiness {
            debug!(pod = %key, %why, "not a gang: placed alone");
            return DueStep::Pod(Box::new((pod, pending)));
        }
        handled.extend(unit.members.iter().map(|(p, _)| pod_key(p)));
        DueStep::Gang { unit, first: pod }
    }

    /// The bookkeeping every outcome ends with (the queue, the report),
    /// and the writes: the event, and for a pod left pending its
    /// PodScheduled condition.
    pub(in crate::cycle) fn finish_step(
        &mut self,
        work: &mut Work<'_>,
        pod: &Pod,
        pending: Option<&PendingPod>,
        outcome: Outcome,
    ) -> Finish {
        let key = pod_key(pod);
        self.queue.record(&key, &outcome, work.clock.now);
        debug!(pod = %key, result = outcome.metric_label(), message = ?outcome.message(), "attempt");
        if let Outcome::Scheduled(p) = &outcome {
            let written = crate::binding::binding_annotations(p).unwrap_or_default();
            self.live
                .record_written(pod, AssignmentRecord::from_binding(&written));
        }
        let gone = matches!(&outcome, Outcome::BindFailed(e) if e.pod_gone());
        let finish = Finish {
            event: (!gone).then(|| outcome.event()),
            condition: outcome
                .waits_for_a_change()
                .then(|| outcome.message())
                .flatten(),
        };
        work.report.outcomes.push(PodOutcome {
            pod: key,
            workload: workload_label(pending),
            outcome,
        });
        finish
    }
}
