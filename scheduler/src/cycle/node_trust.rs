//! Says on each GPU node whether the scheduler believes its `GpuTopology`
//! (pure): the node condition `GpuTopologyTrusted`, `False` with the reason
//! where scheduler-core's plausibility check refuses it (a GPU count the
//! node's allocatable contradicts, more NVLinks than the product has), so
//! that `kubectl describe node` shows why the node is placed as if it had
//! no topology. Checked every [`super::accounting::CHECK_EVERY`], written
//! only when the node shows something else.
//!
//! A node never doubted carries no condition: silence means believed. A
//! `True` on every node would be one `nodes/status` write per GPU node on
//! a fresh install (5,000 at 5,000 nodes, each an event to every node
//! watcher in the cluster) for nothing an operator needs; `True` is
//! written only to clear a `False` the node shows, so its history stays
//! readable.

use super::Clock;
use super::accounting::CHECK_EVERY;
use gputopo_api::GpuTopology;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::snapshot::implausible_topology;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// The node condition gputopo-scheduler owns.
pub const TOPOLOGY_TRUSTED: &str = "GpuTopologyTrusted";

/// The most conditions one check writes; the rest wait for the next
/// checks. A fleet of doubted nodes (a bad agent rollout) then costs a
/// cycle a few round trips, never one per node before any pod is placed.
pub const CONDITIONS_PER_CHECK: usize = 64;

/// Condition writes outstanding at once within a check.
pub const CONDITION_WRITES_IN_FLIGHT: usize = 8;

/// A condition to write on a node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeConditionWrite {
    pub node: String,
    pub condition: NodeCondition,
}

/// What the node's `GpuTopologyTrusted` should say now, for every node
/// with a `GpuTopology`, where the node shows something else (a believed
/// node without the condition shows nothing to correct).
pub fn node_trust_writes(
    nodes: &[Arc<Node>],
    topologies: &[Arc<GpuTopology>],
    clock: Clock,
) -> Vec<NodeConditionWrite> {
    let by_name: HashMap<&str, &GpuTopology> = topologies
        .iter()
        .filter_map(|t| Some((t.metadata.name.as_deref()?, t.as_ref())))
        .collect();
    let mut out = Vec::new();
    for node in nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let Some(topology) = by_name.get(name) else {
            continue;
        };
        let status = node.status.as_ref();
        let Some(allocatable) = status.and_then(|s| s.allocatable.as_ref()).and_then(|a| {
            Resources::allocatable(
                a.iter().map(|(k, v)| (k.as_str(), v.0.as_str())),
                "status.allocatable",
            )
            .ok()
        }) else {
            // Unreadable quantities: the snapshot leaves the node out and says so.
            continue;
        };
        let (state, reason, message) = match implausible_topology(&topology.spec, &allocatable) {
            Some(why) => (
                "False",
                "Implausible",
                format!(
                    "gputopo-scheduler does not believe this node's GpuTopology: {why}; GPU pods are placed here as if it had none"
                ),
            ),
            None => (
                "True",
                "Plausible",
                "the GpuTopology agrees with the node's allocatable GPUs and its GPUs' NVLinks"
                    .to_string(),
            ),
        };
        let current = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == TOPOLOGY_TRUSTED));
        if current.is_none() && state == "True" {
            continue;
        }
        if current.is_some_and(|c| {
            c.status == state
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message.as_str())
        }) {
            continue;
        }
        let since = match current {
            Some(c) if c.status == state => c.last_transition_time.clone(),
            _ => Some(Time(clock.wall)),
        };
        out.push(NodeConditionWrite {
            node: name.to_string(),
            condition: NodeCondition {
                type_: TOPOLOGY_TRUSTED.into(),
                status: state.into(),
                reason: Some(reason.into()),
                message: Some(message),
                last_transition_time: since,
                last_heartbeat_time: Some(Time(clock.wall)),
            },
        });
    }
    out
}

/// When the check is due, and the writes made (with the node's
/// resourceVersion then), not repeated until the node changes.
#[derive(Debug, Default)]
pub struct NodeTrustChecks {
    last: Option<Instant>,
    sent: HashMap<String, Option<String>>,
}

impl NodeTrustChecks {
    /// The writes due now (none between checks, none the node is still
    /// catching up with).
    /// Whether [`Self::due`] would check now.
    pub fn is_due(&self, clock: Clock) -> bool {
        self.last
            .is_none_or(|t| clock.now.saturating_duration_since(t) >= CHECK_EVERY)
    }

    pub fn due(
        &mut self,
        nodes: &[Arc<Node>],
        topologies: &[Arc<GpuTopology>],
        clock: Clock,
    ) -> Vec<NodeConditionWrite> {
        if !self.is_due(clock) {
            return Vec::new();
        }
        self.last = Some(clock.now);
        let versions: HashMap<&str, Option<&String>> = nodes
            .iter()
            .filter_map(|n| {
                Some((
                    n.metadata.name.as_deref()?,
                    n.metadata.resource_version.as_ref(),
                ))
            })
            .collect();
        self.sent.retain(|node, version| {
            versions
                .get(node.as_str())
                .copied()
                .flatten()
                .is_some_and(|v| Some(v) == version.as_ref())
        });
        node_trust_writes(nodes, topologies, clock)
            .into_iter()
            .filter(|w| !self.sent.contains_key(&w.node))
            .collect()
    }

    /// `node` was written while at `version`.
    pub fn sent(&mut self, node: &str, version: Option<String>) {
        self.sent.insert(node.to_string(), version);
    }
}
