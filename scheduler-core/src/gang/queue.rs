//! Gangs placed whole, one after another, on a working copy of the free GPUs.
//!
//! Kubernetes schedules pods one at a time; two gangs whose pods arrive
//! interleaved can each grab part of the cluster and then wait for each other
//! forever (scheduler-plugins#114, #117). Here a gang is placed whole or not at
//! all: a gang that does not fit takes nothing, so the next one sees every GPU
//! the earlier placements left.

use super::reservation::Reservations;
use super::{GangCluster, GangNoFit, GangPlacement, GangSpec, place_gang_on};
use std::cmp::Reverse;
use std::collections::HashMap;

/// A gang waiting to be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedGang {
    /// The gang's name (PodGroup or `gputopo.dev/gang`).
    pub id: String,
    pub priority: i32,
    pub spec: GangSpec,
}

/// Gangs in scheduling order: higher priority first, then first come first served.
#[derive(Clone, Debug, Default)]
pub struct GangQueue {
    gangs: Vec<QueuedGang>,
}

/// What one pass over the queue decided.
#[derive(Clone, Debug, Default)]
pub struct QueueRound {
    /// Gangs placed whole, in the order they were placed.
    pub placed: Vec<(String, GangPlacement)>,
    /// Gangs that did not fit; they hold nothing.
    pub waiting: Vec<(String, GangNoFit)>,
    /// Free masks after the placements, one per node in `cluster.nodes` order.
    pub free: Vec<u32>,
}

impl GangQueue {
    pub fn new() -> GangQueue {
        GangQueue::default()
    }

    pub fn push(&mut self, gang: QueuedGang) {
        self.gangs.push(gang);
    }

    /// Drops a gang (bound, deleted); returns it if it was queued.
    pub fn remove(&mut self, id: &str) -> Option<QueuedGang> {
        let at = self.gangs.iter().position(|g| g.id == id)?;
        Some(self.gangs.remove(at))
    }

    pub fn len(&self) -> usize {
        self.gangs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gangs.is_empty()
    }

    /// The gangs in the order [`GangQueue::schedule`] tries them.
    pub fn ordered(&self) -> Vec<&QueuedGang> {
        let mut order: Vec<&QueuedGang> = self.gangs.iter().collect();
        // Stable: equal priorities keep their arrival order.
        order.sort_by_key(|g| Reverse(g.priority));
        order
    }

    /// Tries every gang in order. A gang that fits is placed whole and its GPUs
    /// leave the working free masks; one that does not is left waiting holding
    /// nothing, and later (smaller) gangs may still fit around it. With
    /// `reservations`, a gang never uses GPUs reserved for another gang.
    pub fn schedule(
        &self,
        cluster: &GangCluster,
        reservations: Option<&Reservations>,
    ) -> QueueRound {
        let mut free: Vec<u32> = cluster.nodes.iter().map(|n| n.free).collect();
        let position: HashMap<usize, usize> = cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id, i))
            .collect();
        let mut round = QueueRound::default();
        for gang in self.ordered() {
            let view: Vec<u32> = match reservations {
                None => free.clone(),
                Some(r) => cluster
                    .nodes
                    .iter()
                    .zip(&free)
                    .map(|(node, &f)| f & !r.reserved_for_others(node.id, &gang.id))
                    .collect(),
            };
            match place_gang_on(&gang.spec, cluster, &view) {
                Ok(placement) => {
                    for member in &placement.members {
                        if let Some(&p) = position.get(&member.node) {
                            free[p] &= !member.gpus;
                        }
                    }
                    round.placed.push((gang.id.clone(), placement));
                }
                Err(reason) => round.waiting.push((gang.id.clone(), reason)),
            }
        }
        round.free = free;
        round
    }
}
