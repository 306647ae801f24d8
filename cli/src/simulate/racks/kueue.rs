//! `kueue-tas`: Kueue's Topology-Aware Scheduling as its
//! `findTopologyAssignment` computes it (`pkg/cache/scheduler/
//! tas_flavor_snapshot.go`, kubernetes-sigs/kueue at `ff69552`, 2026-08-22),
//! re-implemented from what the code does; the rules are listed in the
//! module docs of [`super`].

use super::engine::{Members, Policy, View};
use super::fabric::{Fabric, RACK, lowest};
use super::workload::{Unit, UnitKind};

/// Levels: spine 0, leaf 1, rack 2, host 3.
const HOST: usize = 3;

pub struct KueueTas;

/// One domain's state for one podset (`domainState`).
#[derive(Clone, Copy, Debug)]
struct Dom {
    level: usize,
    index: usize,
    pods: u32,
    slices: u32,
}

/// Per level, per domain: pods and whole slices it holds.
struct Counts {
    levels: [Vec<Dom>; 4],
}

impl Counts {
    /// Phase 1 (`fillInCounts`): pods per host from its free GPUs, summed
    /// up the tree; slices counted at the slice level (`pods / size`) and
    /// summed above it; below it no slice count.
    fn of(fabric: &Fabric, free: &[u32], gpus: u32, slice: Option<(u32, usize)>) -> Counts {
        let host: Vec<Dom> = (0..fabric.nodes())
            .map(|n| Dom {
                level: HOST,
                index: n,
                pods: free[n].count_ones() / gpus,
                slices: 0,
            })
            .collect();
        let (size, slice_level) = slice.unwrap_or((1, HOST));
        let mut levels: [Vec<Dom>; 4] = [Vec::new(), Vec::new(), Vec::new(), host];
        if slice_level == HOST {
            for d in &mut levels[HOST] {
                d.slices = d.pods / size;
            }
        }
        for level in (0..HOST).rev() {
            let mut doms: Vec<Dom> = (0..fabric.domains(level))
                .map(|index| Dom {
                    level,
                    index,
                    pods: 0,
                    slices: 0,
                })
                .collect();
            for child in &levels[level + 1] {
                let parent = parent_of(fabric, child);
                doms[parent].pods += child.pods;
                doms[parent].slices += child.slices;
            }
            if level == slice_level {
                for d in &mut doms {
                    d.slices = d.pods / size;
                }
            }
            levels[level] = doms;
        }
        Counts { levels }
    }
}

fn parent_of(fabric: &Fabric, d: &Dom) -> usize {
    match d.level {
        HOST => fabric.node_rack[d.index],
        RACK => fabric.rack_leaf[d.index],
        _ => fabric.leaf_spine[d.index],
    }
}

/// `levelValues` of a domain: its labels down to its level, compared in
/// order (zero-padded, so as numbers).
fn path(fabric: &Fabric, d: &Dom) -> [u32; 4] {
    match d.level {
        HOST => fabric.path(d.index),
        RACK => {
            let n = fabric.rack_nodes(d.index).start;
            let p = fabric.path(n);
            [p[0], p[1], p[2], 0]
        }
        1 => [fabric.leaf_spine[d.index] as u32, d.index as u32, 0, 0],
        _ => [d.index as u32, 0, 0, 0],
    }
}

fn children(fabric: &Fabric, counts: &Counts, d: &Dom) -> Vec<Dom> {
    counts.levels[d.level + 1]
        .iter()
        .filter(|c| parent_of(fabric, c) == d.index)
        .copied()
        .collect()
}

/// `sortedDomains`: BestFit by slices descending, LeastFreeCapacity
/// ascending; then pods ascending, then `levelValues`.
fn sorted(fabric: &Fabric, mut doms: Vec<Dom>, least_free: bool) -> Vec<Dom> {
    doms.sort_by(|a, b| {
        let slices = if least_free {
            a.slices.cmp(&b.slices)
        } else {
            b.slices.cmp(&a.slices)
        };
        slices
            .then(a.pods.cmp(&b.pods))
            .then_with(|| path(fabric, a).cmp(&path(fabric, b)))
    });
    doms
}

/// `findBestFitDomainBy`: the first domain with the smallest count at
/// least `needed`; the first domain when none has.
fn best_fit(doms: &[Dom], needed: u32, count: impl Fn(&Dom) -> u32) -> usize {
    let mut best = (0, u32::MAX);
    let mut found = false;
    for (i, d) in doms.iter().enumerate() {
        let c = count(d);
        if c >= needed && c < best.1 {
            best = (i, c);
            found = true;
        }
    }
    if found { best.0 } else { 0 }
}

/// `updateCountsToMinimumGeneric`: `count` units (slices, or pods when
/// `slices` is false) handed to `doms` in order, the last one swapped for
/// the best fit among the rest (BestFit only); each returned domain with
/// what it takes (as pods).
fn to_minimum(
    doms: &[Dom],
    count: u32,
    size: u32,
    slices: bool,
    least_free: bool,
) -> Option<Vec<(Dom, u32)>> {
    let unit_count = |d: &Dom| if slices { d.slices } else { d.pods };
    let mut left = count;
    let mut out = Vec::new();
    for i in 0..doms.len() {
        let mut d = doms[i];
        if !least_free && unit_count(&d) >= left {
            d = doms[i + best_fit(&doms[i..], left, unit_count)];
        }
        if unit_count(&d) >= left {
            out.push((d, left * size));
            return Some(out);
        }
        left -= unit_count(&d);
        out.push((d, unit_count(&d) * size));
    }
    None
}

/// `findLevelWithFitDomains` for a podset that is not required: the
/// requested level's domains sorted; BestFit's best domain if the top one
/// holds every slice; else the level above (unless unconstrained); at the
/// top level, domains taken greedily, largest first, the last by best fit.
fn fit_level(
    fabric: &Fabric,
    counts: &Counts,
    level: usize,
    need: u32,
    unconstrained: bool,
) -> Option<(usize, Vec<Dom>)> {
    let doms = sorted(fabric, counts.levels[level].clone(), unconstrained);
    if unconstrained {
        if let Some(d) = doms.iter().find(|d| d.slices >= need) {
            return Some((level, vec![*d]));
        }
    } else if doms[0].slices >= need {
        return Some((level, vec![doms[best_fit(&doms, need, |d| d.slices)]]));
    }
    if level > 0 && !unconstrained {
        return fit_level(fabric, counts, level - 1, need, unconstrained);
    }
    let mut left = need;
    let mut out = Vec::new();
    let mut i = 0;
    while left > 0 && i < doms.len() {
        let mut d = doms[i];
        if !unconstrained && d.slices >= left {
            d = doms[i + best_fit(&doms[i..], left, |d| d.slices)];
        }
        out.push(d);
        left = left.saturating_sub(d.slices);
        i += 1;
    }
    (left == 0).then_some((level, out))
}

/// A podset of `count` pods of `gpus` GPUs: sliced in `size` at
/// `slice_level` and preferring `level` (a training gang), or
/// unconstrained (`level` = host, LeastFreeCapacity).
fn assign(
    fabric: &Fabric,
    free: &[u32],
    count: u32,
    gpus: u32,
    slice: Option<(u32, usize)>,
    level: usize,
) -> Option<Members> {
    let unconstrained = slice.is_none() && level == HOST;
    let counts = Counts::of(fabric, free, gpus, slice);
    let (size, slice_level) = slice.unwrap_or((1, HOST));
    let need = count / size;
    let (mut at, fit) = fit_level(fabric, &counts, level, need, unconstrained)?;
    // Phase 2b: above the slice level, the children of every chosen domain
    // together take the slices greedily; at and below it, each domain
    // hands its pods to its own children.
    let mut chosen = to_minimum(&fit, need, size, true, unconstrained)?;
    while at < slice_level.min(HOST) {
        let lower: Vec<Dom> = chosen
            .iter()
            .flat_map(|(d, _)| children(fabric, &counts, d))
            .collect();
        let lower = sorted(fabric, lower, unconstrained);
        chosen = to_minimum(&lower, need, size, true, unconstrained)?;
        at += 1;
    }
    while at < HOST {
        let mut next = Vec::new();
        for (d, pods) in &chosen {
            if *pods == 0 {
                continue;
            }
            let kids = sorted(fabric, children(fabric, &counts, d), unconstrained);
            next.extend(to_minimum(&kids, *pods, 1, false, unconstrained)?);
        }
        chosen = next;
        at += 1;
    }
    // The assignment lists hosts by `levelValues`; ranks follow it.
    chosen.retain(|(_, pods)| *pods > 0);
    chosen.sort_by_key(|a| fabric.path(a.0.index));
    let mut members = Vec::with_capacity(count as usize);
    for (host, pods) in chosen {
        let mut left = free[host.index];
        for _ in 0..pods {
            let mask = lowest(left, gpus);
            left &= !mask;
            members.push((host.index, mask));
        }
    }
    Some(members)
}

impl Policy for KueueTas {
    fn name(&self) -> &'static str {
        "kueue-tas"
    }

    fn place(&mut self, unit: &Unit, view: &View<'_>) -> Option<Members> {
        let (slice, level) = match unit.kind {
            UnitKind::Structured { slice, preferred } => (Some((slice, RACK)), preferred),
            // No topology request under a TAS flavor: implied, lowest level,
            // unconstrained (LeastFreeCapacity, TASProfileMixed on by default).
            UnitKind::Multi | UnitKind::Pod => (None, HOST),
        };
        let members = assign(
            view.fabric,
            view.free,
            unit.members,
            unit.gpus,
            slice,
            level,
        )?;
        (members.len() == unit.members as usize).then_some(members)
    }
}
