//! Checking the GPUs gputopo chose against what nodes report pods hold
//! (pure). Where a device plugin gave a pod other GPUs than its
//! `gputopo.dev/assigned-gpus`, the pod gets one `GPUAssignmentMismatch`
//! event per distinct difference and the node's counter goes up once;
//! the snapshot already accounts the pod by what the node reports.

use super::Clock;
use crate::cluster::pod_key;
use gputopo_api::GpuTopology;
use gputopo_scheduler_core::reported::{AssignmentMismatch, ReadingTrust, assignment_mismatches};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the pods are compared with the nodes' reports: every pod with
/// a record is looked at, so not every cycle. Agents report every few
/// minutes at most, so this adds no delay that matters.
pub const CHECK_EVERY: Duration = Duration::from_secs(10);

/// What has been reported, so that each difference is reported once.
#[derive(Debug, Default)]
pub struct AssignmentChecks {
    last: Option<Instant>,
    /// Per pod (`namespace/name`): its uid and the GPUs last reported as
    /// differing from its record.
    reported: HashMap<String, (Option<String>, Vec<u32>)>,
}

impl AssignmentChecks {
    /// The differences not reported before, when a check is due. A pod
    /// whose difference went away (deleted, or reported as chosen since)
    /// is forgotten, so a later difference is reported again.
    /// Whether [`Self::due`] would check now.
    pub fn is_due(&self, clock: Clock) -> bool {
        self.last
            .is_none_or(|t| clock.now.saturating_duration_since(t) >= CHECK_EVERY)
    }

    pub fn due(
        &mut self,
        pods: &[Arc<Pod>],
        topologies: &[Arc<GpuTopology>],
        clock: Clock,
        max_age: Duration,
    ) -> Vec<(Arc<Pod>, AssignmentMismatch)> {
        if !self.is_due(clock) {
            return Vec::new();
        }
        self.last = Some(clock.now);
        let by_node: HashMap<&str, &GpuTopology> = topologies
            .iter()
            .filter_map(|t| Some((t.metadata.name.as_deref()?, t.as_ref())))
            .collect();
        let trust = ReadingTrust {
            now: clock.wall,
            max_age,
        };
        let found = assignment_mismatches(pods.iter().map(AsRef::as_ref), &by_node, trust);
        if found.is_empty() {
            self.reported.clear();
            return Vec::new();
        }
        let by_key: HashMap<String, &Arc<Pod>> = pods.iter().map(|p| (pod_key(p), p)).collect();
        let mut still: HashMap<String, (Option<String>, Vec<u32>)> = HashMap::new();
        let mut new = Vec::new();
        for m in found {
            let Some(pod) = by_key.get(&m.pod) else {
                continue;
            };
            let seen = (pod.metadata.uid.clone(), m.got.clone());
            if self.reported.get(&m.pod) != Some(&seen) {
                new.push(((*pod).clone(), m.clone()));
            }
            still.insert(m.pod, seen);
        }
        self.reported = still;
        new
    }
}
