//! What the cycle has told the cluster and its log, so that nothing is
//! said twice: snapshot warnings logged, GPU assignment mismatches
//! reported, node trust conditions and gang statuses written, and why each
//! gang could not be placed (for its PodGroup's status). Pure: the driver
//! feeds back which writes went through.

use super::Clock;
use super::accounting::AssignmentChecks;
use super::gang::GangKey;
use super::gang_status::{GangStatusWrite, gang_status_writes, kind_of, resource_version};
use super::node_trust::{NodeConditionWrite, NodeTrustChecks};
use crate::gangs::GangObjects;
use crate::live_cluster::LiveCluster;
use gputopo_scheduler_core::reported::AssignmentMismatch;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

/// A gang status write due, keyed by what it is for and the object's
/// resourceVersion now.
#[derive(Clone, Debug, PartialEq)]
pub struct GangStatusDue {
    key: String,
    version: Option<String>,
    pub write: GangStatusWrite,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Written {
    /// The snapshot warnings of the last cycle: a new one is logged at
    /// `warn` once (an edited GPU record, a topology not trusted), not
    /// every cycle.
    warned: HashSet<String>,
    /// The assignment mismatches already reported.
    assignment_checks: AssignmentChecks,
    /// Which nodes' `GpuTopologyTrusted` condition was written when.
    node_trust: NodeTrustChecks,
    /// Why each gang's last decision could not place it (for its
    /// PodGroup's status); cleared when it is placed.
    gang_unschedulable: HashMap<GangKey, String>,
    /// The gang status writes made, with the object's resourceVersion
    /// then: not repeated until the object changes.
    gang_status_sent: HashMap<String, (Option<String>, GangStatusWrite)>,
}

impl Written {
    /// This cycle's snapshot warnings; returns those not logged last cycle.
    pub fn warnings(&mut self, warnings: HashSet<String>) -> Vec<String> {
        let new = warnings.difference(&self.warned).cloned().collect();
        self.warned = warnings;
        new
    }

    /// The pods found on other GPUs than chosen and not reported yet, when
    /// a check is due. The check reads every pod and node (every few
    /// seconds), from what the cycle observed: the daemon hands over only
    /// what changed.
    pub fn assignment_mismatches(
        &mut self,
        live: &LiveCluster,
        clock: Clock,
        max_age: Duration,
    ) -> Vec<(Arc<Pod>, AssignmentMismatch)> {
        if !self.assignment_checks.is_due(clock) {
            return Vec::new();
        }
        let pods: Vec<Arc<Pod>> = live.pods().values().cloned().collect();
        let topologies: Vec<_> = live.topologies().cloned().collect();
        self.assignment_checks
            .due(&pods, &topologies, clock, max_age)
    }

    /// The `GpuTopologyTrusted` conditions to write, when a check is due.
    pub fn node_trust_due(&mut self, live: &LiveCluster, clock: Clock) -> Vec<NodeConditionWrite> {
        if !self.node_trust.is_due(clock) {
            return Vec::new();
        }
        let nodes: Vec<_> = live.nodes().cloned().collect();
        let topologies: Vec<_> = live.topologies().cloned().collect();
        self.node_trust.due(&nodes, &topologies, clock)
    }

    /// A condition write answered: remembered with the node's version when
    /// it went through, tried again at the next check when not.
    pub fn node_condition_answered<E: std::fmt::Display>(
        &mut self,
        live: &LiveCluster,
        w: &NodeConditionWrite,
        result: Result<(), E>,
    ) {
        match result {
            Ok(()) => {
                if w.condition.status == "False" {
                    warn!(node = %w.node, message = ?w.condition.message, "GpuTopology not believed");
                }
                let version = live
                    .node(&w.node)
                    .and_then(|n| n.metadata.resource_version.clone());
                self.node_trust.sent(&w.node, version);
            }
            Err(e) => warn!(error = %e, "retrying next check"),
        }
    }

    /// Why `gang`'s last decision left it unplaced.
    pub fn gang_unplaced(&mut self, gang: &GangKey, message: &str) {
        self.gang_unschedulable
            .insert(gang.clone(), message.to_string());
    }

    /// `gang` was placed: nothing to report against it.
    pub fn gang_placed(&mut self, gang: &GangKey) {
        self.gang_unschedulable.remove(gang);
    }

    /// The gang status writes that would make every gang object this
    /// scheduler serves say what its pods show, less those already sent
    /// for the object as it is.
    pub fn gang_statuses_due(
        &mut self,
        gangs: &GangObjects,
        live: &LiveCluster,
        names: &[String],
        clock: Clock,
    ) -> Vec<GangStatusDue> {
        let wanted = if gangs.pod_groups.is_empty() && gangs.upstream_groups.is_empty() {
            // No status to write: the pods are not counted (every cycle,
            // the cluster's pods); only the reasons of gangs no longer
            // waiting are forgotten.
            let waiting: HashSet<GangKey> = live
                .pending()
                .filter_map(|(_, p)| GangKey::of_pod(p))
                .collect();
            self.gang_unschedulable.retain(|k, _| waiting.contains(k));
            Vec::new()
        } else {
            gang_status_writes(
                gangs,
                live.pods().values(),
                names,
                &mut self.gang_unschedulable,
                clock.wall,
            )
        };
        wanted
            .into_iter()
            .filter_map(|write| {
                let key = format!("{}:{}", kind_of(&write), write.target());
                let version = resource_version(gangs, &write);
                let sent = self.gang_status_sent.get(&key);
                (sent != Some(&(version.clone(), write.clone()))).then_some(GangStatusDue {
                    key,
                    version,
                    write,
                })
            })
            .collect()
    }

    /// A gang status write answered: remembered when it went through, so
    /// not repeated; tried again next cycle when not.
    pub fn gang_status_answered<E: std::fmt::Display>(
        &mut self,
        due: GangStatusDue,
        result: Result<(), E>,
    ) {
        match result {
            Ok(()) => {
                debug!(group = %due.write.target(), "gang status written");
                self.gang_status_sent
                    .insert(due.key, (due.version, due.write));
            }
            Err(e) => warn!(error = %e, "writing a gang status; retrying next cycle"),
        }
    }

    /// Forgets the writes that are settled: the object now shows them, or
    /// is gone.
    pub fn gang_statuses_settled(&mut self, gangs: &GangObjects) {
        self.gang_status_sent
            .retain(|_, (version, w)| version.is_some() && resource_version(gangs, w) == *version);
    }
}
