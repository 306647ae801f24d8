//! Room held in a snapshot by a placeholder pod: a gang's reservation, the
//! devices of a ResourceClaim, the GPUs of nodes a decision must not use, a
//! preemptor's nominated node. The placeholder has the highest priority, so
//! no preemption takes it.

use super::{BoundPodInput, GpuHolding, Snapshot, SnapshotError};
use crate::pod::PendingPod;
use crate::pod_constraints::{HostPort, PodConstraints};
use crate::resources::Resources;
use std::sync::Arc;

/// GPUs that could not be held.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    #[error("node {node} is gone from the cluster")]
    NodeGone { node: String },
    #[error("holding GPUs on {node}: {source}")]
    Placeholder { node: String, source: SnapshotError },
}

/// What a placeholder holds on its node: the GPUs of a mask that are free
/// there, and, for a preemptor waiting for its victims, its other requests
/// and host ports, as kube-scheduler counts a nominated pod on its node for
/// the pods after it. The nominee's labels and inter-pod rules are not
/// held: they could admit a pod (an affinity the nominee satisfies) as well
/// as refuse one, and a hold only ever refuses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Bit i = GPU i.
    pub gpus: u32,
    /// Requests besides whole GPUs (cpu, memory, extended resources).
    pub requests: Resources,
    pub host_ports: Vec<HostPort>,
}

impl Held {
    /// Whole GPUs only.
    pub fn gpus(mask: u32) -> Held {
        Held {
            gpus: mask,
            ..Held::default()
        }
    }

    /// What `pod`, nominated to a node where it gets the GPUs of `mask`,
    /// holds there.
    pub fn for_nominee(pod: &PendingPod, mask: u32) -> Held {
        Held {
            gpus: mask,
            requests: Resources {
                gpus: 0,
                pods: 0,
                ..pod.requests.clone()
            },
            host_ports: pod.constraints.host_ports.clone(),
        }
    }

    fn holds_beside_gpus(&self) -> bool {
        self.requests != Resources::default() || !self.host_ports.is_empty()
    }
}

impl Snapshot {
    /// Adds a placeholder pod `namespace/name` on `node` holding the GPUs of
    /// `mask` that are free there (nothing when none is).
    pub fn hold_free_gpus(
        &mut self,
        namespace: &str,
        name: &str,
        node: &str,
        mask: u32,
    ) -> Result<(), HoldError> {
        self.hold(namespace, name, node, &Held::gpus(mask))
    }

    /// Adds a placeholder pod `namespace/name` on `node` holding `held`: the
    /// GPUs of its mask that are free there, and its requests and host
    /// ports; nothing when there is nothing to hold.
    pub fn hold(
        &mut self,
        namespace: &str,
        name: &str,
        node: &str,
        held: &Held,
    ) -> Result<(), HoldError> {
        let Some(id) = self.node_id(node) else {
            return Err(HoldError::NodeGone {
                node: node.to_string(),
            });
        };
        let free = self.node(id).free_gpus() & held.gpus;
        if free == 0 && !held.holds_beside_gpus() {
            return Ok(());
        }
        let mut input = BoundPodInput::new(namespace, name, node);
        input.requests = Resources {
            gpus: i64::from(free.count_ones()),
            ..held.requests.clone()
        };
        if free != 0 {
            input.holding = GpuHolding::Whole(super::bit_indices(free));
        }
        if !held.host_ports.is_empty() {
            input.constraints = Arc::new(PodConstraints {
                host_ports: held.host_ports.clone(),
                ..PodConstraints::default()
            });
        }
        input.priority = i32::MAX;
        self.add_pod(input)
            .map(|_| ())
            .map_err(|source| HoldError::Placeholder {
                node: node.to_string(),
                source,
            })
    }
}
