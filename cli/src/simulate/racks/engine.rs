//! The event loop: arrivals and ends in time order, one scheduling pass
//! after each instant, every GPU accounted for; gputopo's gang
//! reservations; the time-weighted measures.

use super::fabric::{Fabric, RACK};
use super::workload::{Unit, UnitKind, Workload};
use crate::simulate::SimError;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Member `i`'s node and GPUs, in rank order.
pub type Members = Vec<(usize, u32)>;

/// What a policy sees for one unit: the fabric and, per node, the GPUs it
/// may take (free, and not reserved for another gang).
pub struct View<'a> {
    pub fabric: &'a Fabric,
    pub free: &'a [u32],
    /// Per node, GPUs held by single pods (not gang members): what the
    /// snapshot knows of each pod.
    pub singles: &'a [u32],
}

/// A placement policy: where a whole unit goes, or `None` (it waits).
pub trait Policy {
    fn name(&self) -> &'static str;
    fn place(&mut self, unit: &Unit, view: &View<'_>) -> Option<Members>;
}

/// gputopo-scheduler's gang reservations (`gangs.reservations` and
/// `gangs.scheduleTimeout` in its configuration; `scheduler/src/cycle/
/// reservations.rs`): a gang that fits nowhere, within its schedule
/// timeout, holds the GPUs it would use once every running pod of no
/// higher priority ended, for `ttl`, renewed on its next failed try.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reservations {
    pub max_fraction: f64,
    pub max_reservations: usize,
    pub ttl: u64,
    /// A gang that has waited longer makes no new reservation.
    pub schedule_timeout: u64,
}

impl Reservations {
    /// The scheduler's defaults: a quarter of the GPUs, four gangs, 15
    /// minutes each, no new one after a gang has waited 10 minutes.
    pub fn defaults() -> Reservations {
        Reservations {
            max_fraction: 0.25,
            max_reservations: 4,
            ttl: 15 * 60,
            schedule_timeout: 10 * 60,
        }
    }
}

struct Held {
    gang: usize,
    nodes: Members,
    gpus: u32,
    expires: u64,
}

/// What happened to each unit, and the measures over the window.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Per unit: when it started and where, `None` if never placed.
    pub started: Vec<Option<(u64, Members)>>,
    /// Time-weighted means over the window.
    pub gpu_allocation_mean: f64,
    pub whole_racks_free_mean: f64,
    /// Racks with at least 16 whole trays available (a 16-tray slice fits).
    pub slice16_racks_mean: f64,
    pub window: (u64, u64),
    /// When the last unit ended.
    pub makespan: u64,
    pub reservations_made: u64,
}

struct Engine<'a> {
    fabric: &'a Fabric,
    full: u32,
    free: Vec<u32>,
    reserved: Vec<u32>,
    /// free & !reserved.
    avail: Vec<u32>,
    /// GPUs allocated or reserved, per rack.
    rack_taken: Vec<u32>,
    /// Nodes whose every GPU is available, per rack.
    rack_whole: Vec<u32>,
    /// Nodes by available GPU count.
    hist: Vec<u32>,
    allocated: u32,
    singles: Vec<u32>,
    held: Vec<Held>,
    /// Bumped whenever GPUs become available to someone: a unit that
    /// failed at the current epoch still fails.
    epoch: u64,
}

impl<'a> Engine<'a> {
    /// Every GPU free.
    fn new(fabric: &'a Fabric) -> Engine<'a> {
        let full = fabric.full();
        let n = fabric.nodes();
        let gpus_per_node = fabric.size.gpus_per_node as usize;
        let mut hist = vec![0u32; gpus_per_node + 1];
        hist[gpus_per_node] = n as u32;
        Engine {
            fabric,
            full,
            free: vec![full; n],
            reserved: vec![0; n],
            avail: vec![full; n],
            rack_taken: vec![0; fabric.size.racks],
            rack_whole: vec![fabric.size.nodes_per_rack as u32; fabric.size.racks],
            hist,
            allocated: 0,
            singles: vec![0; n],
            held: Vec::new(),
            epoch: 0,
        }
    }

    fn refresh(&mut self, node: usize) {
        let old = self.avail[node];
        let new = self.free[node] & !self.reserved[node];
        let rack = self.fabric.node_rack[node];
        let taken = |a: u32| (self.full & !a).count_ones();
        self.rack_taken[rack] = self.rack_taken[rack] + taken(new) - taken(old);
        self.rack_whole[rack] =
            self.rack_whole[rack] + u32::from(new == self.full) - u32::from(old == self.full);
        self.hist[old.count_ones() as usize] -= 1;
        self.hist[new.count_ones() as usize] += 1;
        self.avail[node] = new;
    }

    fn take(&mut self, members: &Members, single: bool) {
        for &(node, mask) in members {
            if single {
                self.singles[node] += mask.count_ones();
            }
            self.free[node] &= !mask;
            self.allocated += mask.count_ones();
            self.refresh(node);
        }
    }

    fn give_back(&mut self, members: &Members, single: bool) {
        for &(node, mask) in members {
            if single {
                self.singles[node] -= mask.count_ones();
            }
            self.free[node] |= mask;
            self.allocated -= mask.count_ones();
            self.refresh(node);
        }
        self.epoch += 1;
    }

    fn unreserve(&mut self, i: usize) {
        let held = self.held.swap_remove(i);
        for &(node, mask) in &held.nodes {
            self.reserved[node] &= !mask;
            self.refresh(node);
        }
        self.epoch += 1;
    }

    fn slice16_racks(&self) -> u32 {
        self.rack_whole.iter().filter(|&&n| n >= 16).count() as u32
    }

    fn whole_racks(&self) -> u32 {
        self.rack_taken.iter().filter(|&&t| t == 0).count() as u32
    }

    /// A necessary condition for `unit` on the available GPUs (every
    /// policy's placement implies it), so that hopeless tries are cheap.
    fn could_fit(&self, unit: &Unit) -> bool {
        let gpus = unit.gpus as usize;
        match unit.kind {
            UnitKind::Pod => self.hist[gpus.min(self.hist.len() - 1)..]
                .iter()
                .any(|&n| n > 0),
            _ if unit.gpus < self.full.count_ones() => {
                let hosts: u32 = self.hist[gpus..].iter().sum();
                hosts >= unit.members.div_ceil(self.full.count_ones() / unit.gpus)
            }
            UnitKind::Multi => self.rack_whole.iter().sum::<u32>() >= unit.members,
            UnitKind::Structured { .. } => self.rack_whole.iter().sum::<u32>() >= unit.members,
        }
    }

    /// The same, with whole slices per rack (for policies that keep them).
    fn slices_fit(&self, unit: &Unit) -> bool {
        match unit.kind {
            UnitKind::Structured { slice, .. } if unit.gpus == self.full.count_ones() => {
                let whole: u32 = self.rack_whole.iter().map(|&n| n / slice).sum();
                whole >= unit.members / slice
            }
            _ => true,
        }
    }

    /// The GPUs `unit` may take: available ones, plus its own reservation's
    /// free GPUs.
    fn view_for(&self, unit: usize) -> Option<Vec<u32>> {
        let held = self.held.iter().find(|h| h.gang == unit)?;
        let mut free = self.avail.clone();
        for &(node, mask) in &held.nodes {
            free[node] |= self.free[node] & mask;
        }
        Some(free)
    }
}

/// Checks a placement against what the policy was shown: every member
/// once, its GPU count, GPUs free and not given twice.
fn check(policy: &str, unit: &Unit, members: &Members, free: &[u32]) -> Result<(), SimError> {
    let fail = |message: String| SimError::Policy {
        policy: policy.to_string(),
        message: format!("unit {}: {message}", unit.id),
    };
    if members.len() != unit.members as usize {
        return Err(fail(format!(
            "placed {} of {} members: a gang is placed whole or not at all",
            members.len(),
            unit.members
        )));
    }
    let mut taken: Vec<(usize, u32)> = Vec::new();
    for &(node, mask) in members {
        if mask.count_ones() != unit.gpus || node >= free.len() {
            return Err(fail(format!("a member got GPUs {mask:#x} on node {node}")));
        }
        let before = taken.iter().filter(|t| t.0 == node).fold(0, |m, t| m | t.1);
        if free[node] & mask != mask || before & mask != 0 {
            return Err(fail(format!(
                "GPUs {mask:#x} of node {node} are not free (double-booked)"
            )));
        }
        taken.push((node, mask));
    }
    Ok(())
}

/// Replays `workload` under `policy`; `reservations` for the gputopo
/// scheduler's policies. The window of the means is the last 90 % of
/// the arrival period.
pub fn run(
    fabric: &Fabric,
    workload: &Workload,
    policy: &mut dyn Policy,
    reservations: Option<Reservations>,
    slices_required: bool,
) -> Result<Outcome, SimError> {
    let mut e = Engine::new(fabric);
    let units = &workload.units;
    let window = (workload.horizon / 10, workload.horizon);
    let mut out = Outcome {
        started: vec![None; units.len()],
        window,
        ..Outcome::default()
    };
    let mut ends: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut pending: Vec<usize> = Vec::new();
    let mut failed_at: Vec<Option<u64>> = vec![None; units.len()];
    let mut next_arrival = 0;
    let (mut last, mut acc_alloc, mut acc_racks, mut acc_slices) = (0u64, 0.0f64, 0.0f64, 0.0f64);
    let total_gpus = f64::from(fabric.gpus());
    loop {
        let t_end = ends.peek().map(|Reverse((t, _))| *t);
        let t_arr = units.get(next_arrival).map(|u| u.arrival);
        let now = match (t_end, t_arr) {
            (None, None) if pending.is_empty() => break,
            (None, None) => {
                // Nothing left to happen: lapse every reservation once, then stop.
                if e.held.is_empty() {
                    break;
                }
                while !e.held.is_empty() {
                    e.unreserve(0);
                }
                last
            }
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(last),
        };
        let (lo, hi) = (last.max(window.0), now.min(window.1));
        if hi > lo {
            acc_alloc += (hi - lo) as f64 * f64::from(e.allocated) / total_gpus;
            acc_racks += (hi - lo) as f64 * f64::from(e.whole_racks());
            acc_slices += (hi - lo) as f64 * f64::from(e.slice16_racks());
        }
        last = now;
        end_due(&mut e, &mut ends, &mut out, now);
        while next_arrival < units.len() && units[next_arrival].arrival <= now {
            pending.push(next_arrival);
            next_arrival += 1;
        }
        let mut still = Vec::with_capacity(pending.len());
        for &u in &pending {
            let unit = &units[u];
            if failed_at[u] == Some(e.epoch) {
                still.push(u);
                continue;
            }
            let own = e.view_for(u);
            let hopeless =
                own.is_none() && (!e.could_fit(unit) || (slices_required && !e.slices_fit(unit)));
            let placed = if hopeless {
                None
            } else {
                let free = own.as_deref().unwrap_or(&e.avail);
                let view = View {
                    fabric,
                    free,
                    singles: &e.singles,
                };
                match policy.place(unit, &view) {
                    Some(members) => {
                        check(policy.name(), unit, &members, free)?;
                        Some(members)
                    }
                    None => None,
                }
            };
            match placed {
                Some(members) => {
                    if let Some(i) = e.held.iter().position(|h| h.gang == u) {
                        e.unreserve(i);
                    }
                    e.take(&members, !unit.is_gang());
                    ends.push(Reverse((now + unit.duration, u)));
                    out.started[u] = Some((now, members));
                }
                None => {
                    failed_at[u] = Some(e.epoch);
                    if let Some(r) = reservations
                        && unit.is_gang()
                        && now - unit.arrival <= r.schedule_timeout
                        && !e.held.iter().any(|h| h.gang == u)
                        && reserve(&mut e, fabric, policy, unit, &r, now)
                    {
                        out.reservations_made += 1;
                    }
                    still.push(u);
                }
            }
        }
        pending = still;
    }
    let span = (window.1 - window.0).max(1) as f64;
    out.gpu_allocation_mean = acc_alloc / span * 100.0;
    out.whole_racks_free_mean = acc_racks / span;
    out.slice16_racks_mean = acc_slices / span;
    Ok(out)
}

/// Ends the units due by `now` (their GPUs given back), then lapses the
/// reservations past their time, before the pass over the pending units.
fn end_due(
    e: &mut Engine<'_>,
    ends: &mut BinaryHeap<Reverse<(u64, usize)>>,
    out: &mut Outcome,
    now: u64,
) {
    while let Some(&Reverse((t, u))) = ends.peek() {
        if t > now {
            break;
        }
        ends.pop();
        if let Some((_, members)) = &out.started[u] {
            let members = members.clone();
            // Only pods have one member (every gang has two or more).
            e.give_back(&members, members.len() == 1);
        }
        out.makespan = out.makespan.max(t);
    }
    let mut i = 0;
    while i < e.held.len() {
        if e.held[i].expires <= now {
            e.unreserve(i);
        } else {
            i += 1;
        }
    }
}

/// Proposes where `unit` would go once every running pod ended (other
/// reservations kept) and holds it, within the bounds.
fn reserve(
    e: &mut Engine<'_>,
    fabric: &Fabric,
    policy: &mut dyn Policy,
    unit: &Unit,
    r: &Reservations,
    now: u64,
) -> bool {
    if e.held.len() >= r.max_reservations {
        return false;
    }
    let what_if: Vec<u32> = e.reserved.iter().map(|&m| e.full & !m).collect();
    let none = vec![0; what_if.len()];
    let view = View {
        fabric,
        free: &what_if,
        singles: &none,
    };
    let Some(nodes) = policy.place(unit, &view) else {
        return false;
    };
    let gpus: u32 = nodes.iter().map(|(_, m)| m.count_ones()).sum();
    let limit = (f64::from(fabric.gpus()) * r.max_fraction) as u32;
    let reserved: u32 = e.held.iter().map(|h| h.gpus).sum();
    if gpus == 0 || reserved + gpus > limit {
        return false;
    }
    for &(node, mask) in &nodes {
        e.reserved[node] |= mask;
        e.refresh(node);
    }
    e.held.push(Held {
        gang: unit.id,
        nodes,
        gpus,
        expires: now + r.ttl,
    });
    true
}

/// Whether every run of `slice` consecutive members shares a rack.
pub fn slices_in_order(fabric: &Fabric, members: &Members, slice: u32) -> bool {
    members.chunks(slice as usize).all(|chunk| {
        chunk
            .iter()
            .all(|&(n, _)| fabric.node_rack[n] == fabric.node_rack[chunk[0].0])
    })
}

/// Whether the nodes allow some rank order with every slice in one rack:
/// each rack hosts a whole number of slices.
pub fn slices_possible(fabric: &Fabric, members: &Members, slice: u32) -> bool {
    let mut per_rack = vec![0u32; fabric.size.racks];
    for &(n, _) in members {
        per_rack[fabric.node_rack[n]] += 1;
    }
    per_rack.iter().all(|&c| c % slice == 0)
}

/// Whether every member sits in one domain of `tier`.
pub fn in_one(fabric: &Fabric, members: &Members, tier: usize) -> bool {
    members
        .iter()
        .all(|&(n, _)| fabric.domain(n, tier) == fabric.domain(members[0].0, tier))
}

/// Racks a placement spans.
pub fn racks_spanned(fabric: &Fabric, members: &Members) -> usize {
    let mut racks: Vec<usize> = members
        .iter()
        .map(|&(n, _)| fabric.domain(n, RACK))
        .collect();
    racks.sort_unstable();
    racks.dedup();
    racks.len()
}
