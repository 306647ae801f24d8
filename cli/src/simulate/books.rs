//! One step of a run: placing an arrival unit whole or not at all, pods ending
//! and waiting units starting, and the counts ([`Books`]) they move.

use super::domains::DomainBooks;
use super::policy;
use super::world::Assignment;
use super::{SimError, SimPod, SimResult, TopologyMetrics, World};
use gputopo_api::{Collective, LinkClass};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use rand_chacha::ChaCha8Rng;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// A pod running until `end` (seconds), for the event queue.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ending {
    /// Bits of a non-negative f64 order as the number; reversed for a min-heap.
    end: std::cmp::Reverse<u64>,
    seq: std::cmp::Reverse<u64>,
    pod: usize,
}

/// What the placement helpers read.
pub(super) struct Ctx<'a> {
    pub(super) pods: &'a [SimPod],
    pub(super) gangs: &'a [String],
    pub(super) shapes: &'a [Option<Arc<NodeShape>>],
    pub(super) leaves: &'a [Option<String>],
    pub(super) policy_name: &'a str,
}

/// A pod placed, with what the node's GPUs looked like just before.
pub(super) struct Placed {
    pod: usize,
    assignment: Assignment,
    free_before: u32,
}

/// Counters that placements and endings move.
pub(super) struct Books {
    pub(super) allocated: u64,
    pub(super) running: Vec<Option<Assignment>>,
    pub(super) endings: BinaryHeap<Ending>,
    pub(super) seq: u64,
    pub(super) queue_times: Vec<f64>,
    pub(super) makespan: Option<f64>,
    pub(super) topo: TopologyMetrics,
    /// Whole free network domains, sampled after each arrival.
    pub(super) domains: DomainBooks,
    /// Units that do not fit wait (arrival order) instead of failing.
    pub(super) queue: bool,
}

impl Books {
    /// Counts a unit placed at `start`.
    pub(super) fn commit(
        &mut self,
        ctx: &Ctx<'_>,
        unit: &[usize],
        placed: Vec<Placed>,
        start: f64,
        result: &mut SimResult,
    ) {
        let pods = ctx.pods;
        let gang = unit.len() > 1 || pods[unit[0]].gang.is_some();
        if gang {
            result.gangs_placed += 1;
            let mut leaves: Vec<&str> = placed
                .iter()
                .filter_map(|p| ctx.leaves.get(p.assignment.node)?.as_deref())
                .collect();
            leaves.sort_unstable();
            leaves.dedup();
            self.topo.gangs_placed += 1;
            if leaves.len() > 1 {
                self.topo.gangs_spanning_leaves += 1;
            }
        }
        for p in placed {
            let pod = &pods[p.pod];
            result.pods_placed += 1;
            self.allocated += pod.demand();
            if self.queue {
                self.queue_times.push(start - pod.arrival);
                if let Some(d) = pod.duration {
                    let end = start + d;
                    self.makespan = Some(self.makespan.map_or(end, |m: f64| m.max(end)));
                    self.seq += 1;
                    self.endings.push(Ending {
                        end: std::cmp::Reverse(end.to_bits()),
                        seq: std::cmp::Reverse(self.seq),
                        pod: p.pod,
                    });
                }
            }
            if !pod.is_share()
                && pod.num_gpu >= 2
                && let Some(shape) = ctx.shapes.get(p.assignment.node).and_then(Option::as_ref)
            {
                let set = p.assignment.gpus.iter().fold(0u32, |m, &g| m | 1 << g);
                let chosen = shape.ring_bottleneck(set);
                let best = shape
                    .pick(
                        p.free_before,
                        &SetRequest::new(pod.num_gpu, Collective::Ring),
                    )
                    .ok()
                    .and_then(|b| b.bottleneck);
                let rank = chosen.map_or(0, LinkClass::rank);
                self.topo.multi_gpu_pods += 1;
                self.topo.rank_sum += u64::from(rank);
                if rank >= best.map_or(0, LinkClass::rank) {
                    self.topo.optimal += 1;
                }
                let name = chosen.map_or_else(|| "none".to_string(), |b| b.to_string());
                *self.topo.bottlenecks.entry(name).or_default() += 1;
            }
            self.running[p.pod] = Some(p.assignment);
        }
    }
}

/// Counts a unit that failed for good.
pub(super) fn fail(ctx: &Ctx<'_>, unit: &[usize], result: &mut SimResult) {
    for &p in unit {
        result.pods_failed += 1;
        if ctx.pods[p].num_gpu > 0 {
            result.gpu_pods_failed += 1;
        }
    }
    if unit.len() > 1 || ctx.pods[unit[0]].gang.is_some() {
        result.gangs_failed += 1;
    }
}

/// Places a unit whole or not at all (a gang that does not fit whole gives
/// back what it took).
pub(super) fn place_unit(
    ctx: &Ctx<'_>,
    unit: &[usize],
    world: &mut World<'_>,
    policy: &mut policy::Policy,
    rng: &mut ChaCha8Rng,
) -> Result<Option<Vec<Placed>>, SimError> {
    let gang = ctx.pods[unit[0]].gang;
    if let Some(g) = gang {
        let members: Vec<&SimPod> = unit.iter().map(|&p| &ctx.pods[p]).collect();
        let name = ctx.gangs.get(g as usize).map_or("gang", String::as_str);
        if let Some(decided) = policy.place_gang(world, &members, name)? {
            let Some(assignments) = decided else {
                return Ok(None);
            };
            let mut placed = Vec::with_capacity(unit.len());
            for (&p, a) in unit.iter().zip(assignments) {
                let free_before = free_mask(&world.state.gpu_left[a.node]);
                world.apply(&a, &ctx.pods[p], ctx.policy_name)?;
                placed.push(Placed {
                    pod: p,
                    assignment: a,
                    free_before,
                });
            }
            return Ok(Some(placed));
        }
    }
    let mut placed: Vec<Placed> = Vec::with_capacity(unit.len());
    for &p in unit {
        let pod = &ctx.pods[p];
        match policy.place(world, pod, rng)? {
            Some(a) => {
                let free_before = free_mask(&world.state.gpu_left[a.node]);
                world.apply(&a, pod, ctx.policy_name)?;
                placed.push(Placed {
                    pod: p,
                    assignment: a,
                    free_before,
                });
            }
            None => {
                for q in placed.drain(..).rev() {
                    world.release(&q.assignment, &ctx.pods[q.pod]);
                    policy.release(&q.assignment, &ctx.pods[q.pod]);
                }
                return Ok(None);
            }
        }
    }
    Ok(Some(placed))
}

/// Ends every pod due by `until`, one instant at a time, and after each
/// instant starts the waiting units that now fit, oldest first.
#[allow(clippy::too_many_arguments)]
pub(super) fn advance(
    ctx: &Ctx<'_>,
    units: &[Vec<usize>],
    until: f64,
    world: &mut World<'_>,
    policy: &mut policy::Policy,
    rng: &mut ChaCha8Rng,
    books: &mut Books,
    waiting: &mut Vec<usize>,
    result: &mut SimResult,
) -> Result<(), SimError> {
    while let Some(first) = books.endings.peek() {
        let at = f64::from_bits(first.end.0);
        if at > until {
            break;
        }
        while books
            .endings
            .peek()
            .is_some_and(|e| f64::from_bits(e.end.0) <= at)
        {
            let Some(e) = books.endings.pop() else { break };
            if let Some(a) = books.running[e.pod].take() {
                world.release(&a, &ctx.pods[e.pod]);
                policy.release(&a, &ctx.pods[e.pod]);
                books.allocated -= ctx.pods[e.pod].demand();
                result.pods_ended += 1;
            }
        }
        let mut still = Vec::with_capacity(waiting.len());
        for u in waiting.drain(..) {
            match place_unit(ctx, &units[u], world, policy, rng)? {
                Some(placed) => books.commit(ctx, &units[u], placed, at, result),
                None => still.push(u),
            }
        }
        *waiting = still;
    }
    Ok(())
}

/// Whole free GPUs as a mask (GPU i free: bit i).
pub(super) fn free_mask(left: &[u32]) -> u32 {
    left.iter()
        .enumerate()
        .filter(|&(g, &l)| l == 1000 && g < 32)
        .fold(0, |m, (g, _)| m | 1 << g)
}
