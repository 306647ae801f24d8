//! Checking the GPUs gputopo chose against what nodes report pods hold
//! (pure). Where a device plugin gave a pod other GPUs than its
//! `gputopo.dev/assigned-gpus`, the pod gets one `GPUAssignmentMismatch`
//! event per distinct difference and the node's counter goes up once;
//! the snapshot already accounts the pod by what the node reports.

use super::Clock;
use crate::cluster::pod_key;
use gputopo_api::GpuTopology;
use gputopo_scheduler_core::accounting::{AssignmentMismatch, assignment_mismatches};
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
    pub fn due(
        &mut self,
        pods: &[Arc<Pod>],
        topologies: &[Arc<GpuTopology>],
        clock: Clock,
        max_age: Duration,
    ) -> Vec<(Arc<Pod>, AssignmentMismatch)> {
        if self
            .last
            .is_some_and(|t| clock.now.saturating_duration_since(t) < CHECK_EVERY)
        {
            return Vec::new();
        }
        self.last = Some(clock.now);
        let by_node: HashMap<&str, &GpuTopology> = topologies
            .iter()
            .filter_map(|t| Some((t.metadata.name.as_deref()?, t.as_ref())))
            .collect();
        let found = assignment_mismatches(
            pods.iter().map(AsRef::as_ref),
            &by_node,
            clock.wall,
            max_age,
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use gputopo_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use gputopo_api::{
        DeviceForm, GpuAllocation, GpuHolder, GpuTopologyStatus, PodResourcesReading,
    };
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    const NOW: &str = "2026-03-01T10:02:00Z";

    fn pod(uid: &str, assigned: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ml", "uid": uid,
                    "annotations": {"gputopo.dev/assigned-gpus": assigned}},
                "spec": {"nodeName": "n", "containers": [{"name": "c"}]},
                "status": {"phase": "Running", "startTime": "2026-03-01T10:00:00Z"}
            }))
            .unwrap(),
        )
    }

    /// Node `n` with two PCIe GPUs; `ml/p` reported on `gpus`.
    fn node_reporting(gpus: &[u32]) -> Arc<GpuTopology> {
        let spec = serde_json::from_value(json!({
            "nodeName": "n", "source": "nvml",
            "gpus": [{"index": 0}, {"index": 1}],
            "links": [{"a": 0, "b": 1, "type": "SYS", "nvlinks": 0}], "nics": [], "islands": [[0], [1]],
            "summary": {"gpuCount": 2, "p2pLevel": null, "allToAllNvlink": false,
                "largestIsland": 1, "numaNodes": null, "interconnect": "pcie"}
        }))
        .unwrap();
        let mut t = GpuTopology::new("n", spec);
        t.status = Some(GpuTopologyStatus {
            conditions: vec![],
            allocations: gpus
                .iter()
                .map(|&gpu| GpuAllocation {
                    gpu,
                    pods: vec!["ml/p".into()],
                    holders: vec![GpuHolder {
                        pod: "ml/p".into(),
                        container: "c".into(),
                        resource: "nvidia.com/gpu".into(),
                        device: format!("GPU-{gpu}"),
                        form: DeviceForm::Whole,
                    }],
                })
                .collect(),
            pod_resources: Some(PodResourcesReading {
                observed_at: Time("2026-03-01T10:01:00Z".parse().unwrap()),
                last_error: None,
                unknown_devices: vec![],
            }),
        });
        Arc::new(t)
    }

    fn clock(start: Instant, after: Duration) -> Clock {
        Clock {
            now: start + after,
            wall: NOW.parse::<Timestamp>().unwrap(),
        }
    }

    #[test]
    fn each_difference_is_reported_once_and_again_after_it_changes() {
        let mut checks = AssignmentChecks::default();
        let start = Instant::now();
        let max_age = Duration::from_secs(900);
        let p = [pod("u1", "0")];
        let moved = [node_reporting(&[1])];
        let first = checks.due(&p, &moved, clock(start, Duration::ZERO), max_age);
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].1.chosen.clone(), first[0].1.got.clone()),
            (vec![0], vec![1])
        );
        // not due yet, then due but already reported
        assert!(
            checks
                .due(&p, &moved, clock(start, Duration::from_secs(1)), max_age)
                .is_empty()
        );
        assert!(
            checks
                .due(&p, &moved, clock(start, CHECK_EVERY), max_age)
                .is_empty()
        );
        // the node now reports the chosen GPU: nothing; then it moves again: reported again
        let back = [node_reporting(&[0])];
        assert!(
            checks
                .due(&p, &back, clock(start, 2 * CHECK_EVERY), max_age)
                .is_empty()
        );
        assert_eq!(
            checks
                .due(&p, &moved, clock(start, 3 * CHECK_EVERY), max_age)
                .len(),
            1
        );
        // a new pod of the same name (another uid) is another difference
        let again = [pod("u2", "0")];
        assert_eq!(
            checks
                .due(&again, &moved, clock(start, 4 * CHECK_EVERY), max_age)
                .len(),
            1
        );
    }
}
