//! The `gputopo` policy: scheduler-core's own decision (`schedule`, gangs
//! `schedule_gang`) on a snapshot of the cluster kept current with
//! `Snapshot::add_pod` and `remove_pod`.

use super::MODEL_LABEL;
use crate::simulate::world::Assignment;
use crate::simulate::{SimError, SimNode, SimPod, World, topo};
use gputopo_api::{GangRef, GpuRequest, GpuShare};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::{Decision, Placement, schedule};
use gputopo_scheduler_core::selector::{
    LabelRequirement, NodeAffinity, SelectorOperator, SelectorTerm,
};
use gputopo_scheduler_core::snapshot::{NodeInput, Snapshot, SnapshotBuilder};
use std::collections::BTreeMap;

/// The `gputopo` policy's own view.
pub(super) struct Gputopo {
    pub(super) snapshot: Snapshot,
    pub(super) config: SchedulerConfig,
    /// Snapshot node id → cluster node index.
    pub(super) to_index: Vec<usize>,
}

/// The snapshot of CSV nodes with synthesised topologies (see [`topo`]).
pub fn snapshot_for(nodes: &[SimNode], config: &SchedulerConfig) -> Result<Snapshot, SimError> {
    let mut builder = SnapshotBuilder::new(config);
    for node in nodes {
        let mut labels = BTreeMap::new();
        let mut topology = None;
        if node.gpus > 0 {
            labels.insert(MODEL_LABEL.to_string(), node.model_name.clone());
            topology = Some(topo::synthesize(&node.name, &node.model_name, node.gpus));
        }
        let mut allocatable = Resources::unlimited();
        allocatable.cpu_milli = node.cpu_milli as i64;
        allocatable.memory = (node.memory_mib as i64).saturating_mul(1024 * 1024);
        allocatable.gpus = i64::from(node.gpus);
        builder.node(NodeInput {
            name: node.name.clone(),
            labels,
            allocatable,
            topology: topology.map(Into::into),
            ..NodeInput::default()
        });
    }
    builder
        .build()
        .map_err(|e| SimError::Cluster(e.to_string()))
}

impl Gputopo {
    fn pending(world: &World<'_>, pod: &SimPod, gang: Option<GangRef>) -> PendingPod {
        let mut request = GpuRequest::default();
        if pod.is_share() {
            request.gpu_share = Some(GpuShare::Milli(pod.gpu_milli));
        } else {
            request.gpus = pod.num_gpu;
        }
        request.gang = gang;
        let mut pending = PendingPod::new("sim", &pod.name, request);
        pending.requests.cpu_milli = pod.cpu_milli as i64;
        pending.requests.memory = (pod.memory_mib as i64).saturating_mul(1024 * 1024);
        if pod.models != 0 && pod.num_gpu > 0 {
            pending.affinity = Some(NodeAffinity {
                terms: vec![SelectorTerm {
                    labels: vec![LabelRequirement {
                        key: MODEL_LABEL.to_string(),
                        operator: SelectorOperator::In(world.models.names(pod.models)),
                    }],
                    fields: Vec::new(),
                }],
            });
        }
        pending
    }

    pub(super) fn place(
        &mut self,
        world: &World<'_>,
        pod: &SimPod,
    ) -> Result<Option<Assignment>, SimError> {
        let pending = Gputopo::pending(world, pod, None);
        let Decision::Placed(placement) = schedule(&self.snapshot, &pending, &self.config) else {
            return Ok(None);
        };
        self.bind(pod, &pending, &placement).map(Some)
    }

    /// A gang in one decision (`schedule_gang`: domains and GPU sets
    /// together), all members or none.
    pub(super) fn place_gang(
        &mut self,
        world: &World<'_>,
        members: &[&SimPod],
        name: &str,
    ) -> Result<Option<Vec<Assignment>>, SimError> {
        let gang = GangRef::Annotation {
            name: name.to_string(),
            size: members.len() as u32,
        };
        let pending: Vec<PendingPod> = members
            .iter()
            .map(|p| Gputopo::pending(world, p, Some(gang.clone())))
            .collect();
        let GangDecision::Placed(placements) =
            schedule_gang(&self.snapshot, &pending, &self.config)
        else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(members.len());
        for ((pod, pending), placement) in members.iter().zip(&pending).zip(&placements) {
            out.push(self.bind(pod, pending, placement)?);
        }
        Ok(Some(out))
    }

    /// Adds the placed pod to the policy's snapshot.
    fn bind(
        &mut self,
        pod: &SimPod,
        pending: &PendingPod,
        placement: &Placement,
    ) -> Result<Assignment, SimError> {
        let node = self
            .to_index
            .get(placement.node_id.0 as usize)
            .copied()
            .ok_or_else(|| SimError::Policy {
                policy: "gputopo".into(),
                message: format!("placed on unknown node {}", placement.node),
            })?;
        let handle = self
            .snapshot
            .add_pod(placement.bound_pod(pending))
            .map_err(|e| SimError::Policy {
                policy: "gputopo".into(),
                message: e.to_string(),
            })?;
        let gpus = match (pod.is_share(), placement.shared) {
            (true, Some(hold)) => vec![hold.gpu],
            // Counted, not chosen (a node where pods hold GPUs nobody
            // named): the kubelet picks; here, the GPUs the snapshot
            // charged for the count, so the two accounts stay one.
            _ if placement.by_count => self
                .snapshot
                .pod(handle)
                .map(|p| (0..32).filter(|g| p.gpus & (1 << g) != 0).collect())
                .unwrap_or_default(),
            _ => placement.gpus.clone(),
        };
        Ok(Assignment {
            node,
            gpus,
            handle: Some(handle),
        })
    }
}
