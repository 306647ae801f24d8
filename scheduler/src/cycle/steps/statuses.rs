//! The writes a cycle makes besides its pods' outcomes: events on pods
//! found on other GPUs than chosen or whose GPU record was edited, the `GpuTopologyTrusted` node
//! conditions, and the gang objects' statuses. Pure: what is due, and
//! what the answers change ([`Written`](crate::cycle::written::Written)
//! keeps what was said).

use crate::assignment_record::RecordFinding;
use crate::cluster::Objects;
use crate::cycle::node_trust::{CONDITIONS_PER_CHECK, NodeConditionWrite};
use crate::cycle::writes::{EventSpec, WriteError};
use crate::cycle::written::GangStatusDue;
use crate::cycle::{Clock, Cycle};
use gputopo_scheduler_core::reported::AssignmentMismatch;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;
use tracing::warn;

impl Cycle {
    /// The pods found on other GPUs than chosen, not reported before (when
    /// a check is due), each with the event that says so.
    pub(in crate::cycle) fn mismatches_due(
        &mut self,
        clock: Clock,
    ) -> Vec<(Arc<Pod>, AssignmentMismatch, EventSpec)> {
        let max_age = self.settings.accounting.reported_allocations_max_age;
        self.written
            .assignment_mismatches(&self.live, clock, max_age)
            .into_iter()
            .map(|(pod, m)| {
                let message = m.message();
                warn!(pod = %m.pod, node = %m.node, %message, "GPU assignment mismatch");
                let event = EventSpec::warning("GPUAssignmentMismatch", "Verifying", message);
                (pod, m, event)
            })
            .collect()
    }

    /// What reading the pods' GPU records found since the last cycle (an
    /// edited record, a status record the annotations contradict), each
    /// with the event that says so; each is logged once.
    pub(in crate::cycle) fn record_findings_due(
        &mut self,
    ) -> Vec<(Arc<Pod>, RecordFinding, EventSpec)> {
        self.live
            .take_record_findings()
            .into_iter()
            .map(|(pod, f)| {
                let message = f.message();
                warn!(pod = %f.pod(), finding = f.metric_label(), %message, "GPU record not believed");
                let event = EventSpec::warning(f.event_reason(), "Verifying", message);
                (pod, f, event)
            })
            .collect()
    }

    /// The node conditions to write now: at most
    /// [`CONDITIONS_PER_CHECK`], the rest at the next checks.
    pub(in crate::cycle) fn node_conditions_due(
        &mut self,
        clock: Clock,
    ) -> Vec<NodeConditionWrite> {
        let mut due = self.written.node_trust_due(&self.live, clock);
        due.truncate(CONDITIONS_PER_CHECK);
        due
    }

    /// A node condition write answered.
    pub(in crate::cycle) fn node_condition_answered(
        &mut self,
        w: &NodeConditionWrite,
        result: Result<(), WriteError>,
    ) {
        self.written.node_condition_answered(&self.live, w, result);
    }

    /// The gang status writes due: every gang object this scheduler serves
    /// brought up to what its pods show, less what was sent already.
    pub(in crate::cycle) fn gang_statuses_due(
        &mut self,
        objects: &Objects<'_>,
        clock: Clock,
    ) -> Vec<GangStatusDue> {
        let names = self.settings.all_scheduler_names();
        self.written
            .gang_statuses_due(objects.gangs, &self.live, &names, clock)
    }

    /// A gang status write answered; a failed one is tried next cycle.
    pub(in crate::cycle) fn gang_status_answered(
        &mut self,
        due: GangStatusDue,
        result: Result<(), WriteError>,
    ) {
        self.written.gang_status_answered(due, result);
    }

    /// Every gang status write answered: what the objects now show is
    /// forgotten.
    pub(in crate::cycle) fn gang_statuses_settled(&mut self, objects: &Objects<'_>) {
        self.written.gang_statuses_settled(objects.gangs);
    }
}
