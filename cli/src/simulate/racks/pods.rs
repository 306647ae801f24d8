//! Single pods under the gputopo policies: scheduler-core's own per-pod
//! decision (`schedule::schedule`) on a snapshot of the NVL72 fabric,
//! kept equal to what the policy is shown.

use super::engine::Members;
use super::fabric::{Fabric, tray};
use super::workload::Unit;
use crate::simulate::SimError;
use gputopo_api::GpuRequest;
use gputopo_scheduler_core::config::{NetworkTiers, SchedulerConfig};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::{
    BoundPodInput, GpuHolding, NodeInput, PodId, Snapshot, SnapshotBuilder,
};
use std::collections::BTreeMap;

/// The tier label keys, outermost first.
pub const TIERS: [&str; 3] = [
    "gputopo.dev/spine",
    "gputopo.dev/leaf",
    "nvidia.com/gpu.clique",
];

/// A node's host name: its place in host name order, so that the
/// snapshot's name order is the fabric's `host_rank`.
fn host_name(fabric: &Fabric, node: usize) -> String {
    format!("node-{:04}", fabric.host_rank[node])
}

/// scheduler-core's decision for single pods.
pub struct PodScheduler {
    snapshot: Snapshot,
    config: SchedulerConfig,
    /// Host name → node.
    by_name: BTreeMap<String, usize>,
    /// Per node, the stand-in pod holding its taken GPUs, and their mask.
    held: Vec<(Option<PodId>, u32)>,
    next: u64,
}

impl PodScheduler {
    /// Default weights (the domain-fit part at 15), or with the domain-fit
    /// part off (`domain_fit` false).
    pub fn new(fabric: &Fabric, domain_fit: bool) -> Result<PodScheduler, SimError> {
        let cluster = |e: String| SimError::Cluster(e);
        let mut config = SchedulerConfig {
            tiers: NetworkTiers::new(TIERS).map_err(|e| cluster(e.to_string()))?,
            ..SchedulerConfig::default()
        };
        if !domain_fit {
            config.weights.domain_fit = 0;
        }
        let spec = tray(fabric.size.gpus_per_node);
        let mut builder = SnapshotBuilder::new(&config);
        let mut by_name = BTreeMap::new();
        for n in 0..fabric.nodes() {
            let name = host_name(fabric, n);
            let labels = [
                (TIERS[0], format!("spine-{:02}", fabric.spine_of(n))),
                (TIERS[1], format!("leaf-{:02}", fabric.leaf_of(n))),
                (TIERS[2], format!("rack-{:02}", fabric.node_rack[n])),
                ("kubernetes.io/hostname", name.clone()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let mut allocatable = Resources::unlimited();
            allocatable.gpus = i64::from(fabric.size.gpus_per_node);
            let mut topology = spec.clone();
            topology.node_name.clone_from(&name);
            builder.node(NodeInput {
                name: name.clone(),
                labels,
                allocatable,
                topology: Some(topology.into()),
                ..NodeInput::default()
            });
            by_name.insert(name, n);
        }
        let snapshot = builder.build().map_err(|e| cluster(e.to_string()))?;
        Ok(PodScheduler {
            snapshot,
            config,
            by_name,
            held: vec![(None, 0); fabric.nodes()],
            next: 0,
        })
    }

    /// Makes the snapshot hold exactly the GPUs `free` says are taken: one
    /// stand-in pod per node (running pods and other gangs' reservations
    /// alike), replaced where that changed.
    fn sync(&mut self, fabric: &Fabric, free: &[u32]) -> Result<(), SimError> {
        let full = fabric.full();
        for (n, &f) in free.iter().enumerate() {
            let taken = full & !f;
            if self.held[n].1 == taken {
                continue;
            }
            if let Some(id) = self.held[n].0.take() {
                self.snapshot.remove_pod(id);
            }
            self.held[n] = (None, taken);
            if taken == 0 {
                continue;
            }
            self.next += 1;
            let gpus: Vec<u32> = (0..32).filter(|g| taken & (1 << g) != 0).collect();
            let request = GpuRequest {
                gpus: gpus.len() as u32,
                ..GpuRequest::default()
            };
            let mut pod = BoundPodInput::new("sim", &format!("held-{}", self.next), "");
            pod.node = host_name(fabric, n);
            pod.requests = PendingPod::new("sim", "held", request.clone()).requests;
            pod.request = Ok(request);
            pod.holding = GpuHolding::Whole(gpus);
            let id = self.snapshot.add_pod(pod).map_err(|e| SimError::Policy {
                policy: "gputopo".into(),
                message: e.to_string(),
            })?;
            self.held[n].0 = Some(id);
        }
        Ok(())
    }

    /// Where scheduler-core puts `unit` (one pod) on the GPUs `free` shows.
    pub fn place(&mut self, fabric: &Fabric, unit: &Unit, free: &[u32]) -> Option<Members> {
        self.sync(fabric, free).ok()?;
        let request = GpuRequest {
            gpus: unit.gpus,
            ..GpuRequest::default()
        };
        let pending = PendingPod::new("sim", &format!("pod-{}", unit.id), request);
        let Decision::Placed(placement) = schedule(&self.snapshot, &pending, &self.config) else {
            return None;
        };
        let node = *self.by_name.get(&placement.node)?;
        let mask = placement.gpus.iter().fold(0u32, |m, g| m | (1 << g));
        Some(vec![(node, mask)])
    }
}
