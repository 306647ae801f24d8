//! The writes a cycle makes besides its pods': the `GpuTopologyTrusted`
//! node conditions and the gang objects' statuses, as `steps/statuses.rs`
//! says they are due; each answer goes back to it.

use super::super::node_trust::CONDITION_WRITES_IN_FLIGHT;
use super::super::{Clock, ClusterWrites, Cycle};
use crate::cluster::Objects;
use futures::stream::{self, StreamExt};

impl Cycle {
    /// Writes the node conditions due, a few at once.
    pub(super) async fn write_node_conditions<W: ClusterWrites>(
        &mut self,
        writes: &W,
        clock: Clock,
    ) {
        let due = self.node_conditions_due(clock);
        let answered: Vec<_> = stream::iter(due)
            .map(|w| async move {
                let r = writes.set_node_condition(&w).await;
                (w, r)
            })
            .buffer_unordered(CONDITION_WRITES_IN_FLIGHT)
            .collect()
            .await;
        for (w, r) in answered {
            self.node_condition_answered(&w, r);
        }
    }

    /// Brings the status of every gang object this scheduler serves up to
    /// what its pods show; a write that fails is tried again next cycle.
    pub(super) async fn write_gang_statuses<W: ClusterWrites>(
        &mut self,
        objects: &Objects<'_>,
        writes: &W,
        clock: Clock,
    ) {
        for due in self.gang_statuses_due(objects, clock) {
            let answer = writes.set_gang_status(&due.write).await;
            self.gang_status_answered(due, answer);
        }
        self.gang_statuses_settled(objects);
    }
}
