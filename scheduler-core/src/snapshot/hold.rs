//! GPUs held in a snapshot by a placeholder pod: a gang's reservation, the
//! devices of a ResourceClaim, the GPUs of nodes a decision must not use.
//! The placeholder has the highest priority, so no preemption takes it.

use super::{BoundPodInput, GpuHolding, Snapshot, SnapshotError};
use crate::resources::Resources;

/// GPUs that could not be held.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    #[error("node {node} is gone from the cluster")]
    NodeGone { node: String },
    #[error("holding GPUs on {node}: {source}")]
    Placeholder { node: String, source: SnapshotError },
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
        let Some(id) = self.node_id(node) else {
            return Err(HoldError::NodeGone {
                node: node.to_string(),
            });
        };
        let free = self.node(id).free_gpus() & mask;
        if free == 0 {
            return Ok(());
        }
        let mut input = BoundPodInput::new(namespace, name, node);
        input.requests = Resources {
            gpus: i64::from(free.count_ones()),
            ..Resources::default()
        };
        input.holding = GpuHolding::Whole(super::bit_indices(free));
        input.priority = i32::MAX;
        self.add_pod(input)
            .map(|_| ())
            .map_err(|source| HoldError::Placeholder {
                node: node.to_string(),
                source,
            })
    }
}
