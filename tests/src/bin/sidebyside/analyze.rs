//! From a trial's final state to the figures: throughput, where the gangs
//! landed, GPU-set quality, stranded GPUs, what was left pending.

use super::cluster::NodePlan;
use super::run::{PodResult, Trial};
use super::topo::{DeviceModel, Model, indices, mask_of};
use super::which::Which;
use super::workload::Kind;
use gputopo_api::LinkClass;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Bound pods per second.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Throughput {
    pub pods: usize,
    pub bound: usize,
    /// First create request (with --backlog: the scheduler ready) to the
    /// last bind, seconds.
    pub span_s: f64,
    /// bound / span_s.
    pub pods_per_s: f64,
    /// Binds between the 10th and the 90th percentile bind over the time
    /// between them: the rate with the start-up and the tail cut off.
    pub steady_pods_per_s: f64,
    /// The best one-second window.
    pub peak_pods_per_s: f64,
    /// Pods created per second (first create request to the last response).
    pub created_per_s: f64,
    /// Last create response to the last bind, seconds (negative: binding
    /// was done before creation ended).
    pub drain_after_create_s: f64,
    /// Create response to bind, per pod, seconds: p50, p90, p99, max. With
    /// a burst of creates this is mostly queueing: pods / throughput.
    pub create_to_bind_s: [f64; 4],
    /// Binds per whole second since the first create request.
    pub binds_per_second: Vec<u32>,
}

pub fn throughput(trial: &Trial) -> Throughput {
    let mut binds: Vec<f64> = trial.pods.iter().filter_map(|p| p.bound_s).collect();
    binds.sort_by(f64::total_cmp);
    let bound = binds.len();
    let mut waits: Vec<f64> = trial
        .pods
        .iter()
        .filter_map(|p| Some(p.bound_s? - p.created_s))
        .filter(|w| w.is_finite())
        .collect();
    waits.sort_by(f64::total_cmp);
    let q = |x: f64| {
        waits
            .get(((waits.len() as f64 * x) as usize).min(waits.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let create_to_bind_s = [
        q(0.5),
        q(0.9),
        q(0.99),
        waits.last().copied().unwrap_or(0.0),
    ];
    let mut t = Throughput {
        create_to_bind_s,
        pods: trial.pods.len(),
        bound,
        ..Throughput::default()
    };
    if bound == 0 {
        return t;
    }
    let last = binds[bound - 1];
    let origin = trial.timings.scheduler_ready_s.max(0.0);
    t.span_s = last - origin;
    t.pods_per_s = bound as f64 / t.span_s.max(1e-9);
    let (i10, i90) = (
        (bound as f64 * 0.1) as usize,
        ((bound as f64 * 0.9) as usize).min(bound - 1),
    );
    if i90 > i10 && binds[i90] > binds[i10] {
        t.steady_pods_per_s = (i90 - i10) as f64 / (binds[i90] - binds[i10]);
    }
    let seconds = last.ceil() as usize + 1;
    let mut per = vec![0u32; seconds];
    for b in &binds {
        per[(*b as usize).min(seconds - 1)] += 1;
    }
    // Sliding one-second window over the sorted binds.
    let mut j = 0;
    let mut peak = 0;
    for i in 0..bound {
        while binds[i] - binds[j] > 1.0 {
            j += 1;
        }
        peak = peak.max(i - j + 1);
    }
    t.peak_pods_per_s = peak as f64;
    t.binds_per_second = per;
    if trial.timings.create_s > 0.0 {
        t.created_per_s = trial.pods.len() as f64 / trial.timings.create_s;
        t.drain_after_create_s = last - trial.timings.create_s;
    }
    t
}

/// Where the gangs landed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Gangs {
    pub gangs: usize,
    pub fully_bound: usize,
    /// Some members bound, some not: their GPUs wait for the rest.
    pub partially_bound: usize,
    pub none_bound: usize,
    /// GPUs held by members of partially bound gangs.
    pub gpus_held_by_partial_gangs: u32,
    /// Over fully bound gangs: leaves spanned, mean and max.
    pub leaves_mean: f64,
    pub leaves_max: usize,
    /// Share of fully bound gangs on the fewest leaves that can hold them
    /// (⌈members / nodes per leaf⌉).
    pub on_fewest_leaves: f64,
    /// Leaves spanned beyond that fewest number, mean.
    pub extra_leaves_mean: f64,
    /// Share under one spine (adjacent leaves).
    pub under_one_spine: f64,
    /// Share on one machine model (a mixed gang runs at its slowest node's pace).
    pub one_model: f64,
    /// Per members count: [gangs fully bound, mean leaves, max leaves, fewest leaves].
    pub by_size: BTreeMap<u32, (usize, f64, usize, usize)>,
}

/// GPU-set quality of multi-GPU pods of one size.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SetQuality {
    pub pods: usize,
    /// The set's best ring is as good as the best set of that size on an
    /// empty node of the same model.
    pub optimal: f64,
    /// On NVLink machines: every hop of the set's best ring is NVLink.
    pub nvlink_pods: usize,
    pub nvlink_ring: f64,
    /// On NVLink machines: every pair of the set is joined by NVLink.
    pub nvlink_all_pairs: f64,
    /// Per machine model: bottleneck class -> pods.
    pub bottlenecks: BTreeMap<String, BTreeMap<String, usize>>,
}

/// Free GPUs at the end.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stranding {
    pub gpus: u32,
    pub free_gpus: u32,
    pub nodes_empty: usize,
    pub nodes_full: usize,
    /// 1 to 7 of 8 GPUs free: no room for an 8-GPU gang member.
    pub nodes_partial: usize,
    pub free_gpus_on_partial_nodes: u32,
    /// Nodes whose free GPUs hold no full-quality set of any multi-GPU
    /// shape of the workload (2, 4, 8): see [`DEFINITION`].
    pub stranded_nodes: usize,
    pub stranded_gpus: u32,
    /// Partial nodes with fewer than 4 free GPUs (no room for a DDP pod).
    pub nodes_below_4_free: usize,
    /// Nodes with free GPUs, fewer than the smallest pending pod asks: see
    /// [`DEFINITION_PENDING`].
    pub pending_stranded_nodes: usize,
    pub pending_stranded_gpus: u32,
}

pub const DEFINITION: &str = "A node is stranded when it has free GPUs but none of the multi-GPU pod shapes of the workload (2, 4 and 8 GPUs) fits on them at full quality: for each k, either fewer than k GPUs are free, or the best ring through any k of its free GPUs has a weaker bottleneck link than the best k-GPU set of an empty node of the same model (NV18 on HGX H100, NV12 on DGX A100, NV2 pairs and NV1 quads on DGX-1, PHB pairs and NODE quads on the PCIe box). Its free GPUs (stranded GPUs) then serve only 1-GPU pods, or multi-GPU pods on degraded links.";

pub const DEFINITION_PENDING: &str = "Stranded for the pending pods: a node with free GPUs, but fewer than the smallest GPU count among the pods left pending at the end (0 when nothing is pending). Those GPUs are idle while pods wait for GPUs.";

/// What was left unbound.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Pending {
    pub pods: usize,
    pub gpus: u32,
    /// Per kind: pods unbound.
    pub by_kind: BTreeMap<String, usize>,
}

/// The figures for one trial and one way of giving GPUs to pods.
#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub scheduler: Which,
    /// Whose choice the GPU sets are: `scheduler` (gputopo's annotation) or
    /// the device model replayed for kube-scheduler.
    pub gpu_choice: &'static str,
    pub gangs: Gangs,
    pub two_gpu: SetQuality,
    pub four_gpu: SetQuality,
    pub stranding: Stranding,
    pub pending: Pending,
    /// Broken invariants: a GPU given twice, a wrong GPU count, a node over
    /// capacity, a gang bound in part by gputopo-scheduler.
    pub violations: Vec<String>,
}

fn parse_gpus(s: &str) -> Option<Vec<u32>> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| x.trim().parse().ok())
        .collect()
}

/// Each bound pod's GPU mask, by node; with the violations found.
fn assignments(
    trial: &Trial,
    nodes: &HashMap<&str, &NodePlan>,
    models: &[Model],
    device: Option<DeviceModel>,
    violations: &mut Vec<String>,
) -> HashMap<String, Vec<(usize, u32)>> {
    let mut on_node: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, p) in trial.pods.iter().enumerate() {
        if let Some(n) = &p.node {
            on_node.entry(n.clone()).or_default().push(i);
        }
    }
    let mut out = HashMap::new();
    for (node, mut pods) in on_node {
        let Some(plan) = nodes.get(node.as_str()) else {
            violations.push(format!("pods bound to unknown node {node}"));
            continue;
        };
        let model = &models[plan.model];
        let full: u32 = (1u32 << model.gpus) - 1;
        // The kubelet admits pods in the order they arrive: bind order.
        pods.sort_by(|a, b| {
            let (pa, pb) = (&trial.pods[*a], &trial.pods[*b]);
            pa.bound_s
                .unwrap_or(f64::MAX)
                .total_cmp(&pb.bound_s.unwrap_or(f64::MAX))
                .then_with(|| pa.name.cmp(&pb.name))
        });
        let mut used = 0u32;
        let mut list = Vec::new();
        for i in pods {
            let p: &PodResult = &trial.pods[i];
            let mask = match device {
                None => {
                    let Some(gpus) = p.assigned_gpus.as_deref().and_then(parse_gpus) else {
                        violations.push(format!(
                            "{} bound to {node} without a readable gputopo.dev/assigned-gpus ({:?})",
                            p.name, p.assigned_gpus
                        ));
                        continue;
                    };
                    if gpus.len() != p.gpus as usize
                        || gpus.iter().any(|g| *g as usize >= model.gpus)
                        || mask_of(&gpus).count_ones() as usize != gpus.len()
                    {
                        violations.push(format!(
                            "{} asks {} GPUs, got {gpus:?} on {node} ({} GPUs)",
                            p.name, p.gpus, model.gpus
                        ));
                    }
                    let mask = mask_of(&gpus) & full;
                    if mask & used != 0 {
                        violations.push(format!(
                            "{} got GPUs {:?} on {node}, already given to another pod",
                            p.name,
                            indices(mask & used)
                        ));
                    }
                    mask
                }
                Some(d) => match d.allocate(model, full & !used, p.gpus as usize) {
                    Some(m) => m,
                    None => {
                        violations.push(format!(
                            "{} ({} GPUs) bound to {node}, which has only {} free",
                            p.name,
                            p.gpus,
                            (full & !used).count_ones()
                        ));
                        continue;
                    }
                },
            };
            used |= mask;
            list.push((i, mask));
        }
        out.insert(node, list);
    }
    out
}

fn class_name(c: Option<LinkClass>) -> String {
    c.map_or_else(|| "-".to_string(), |c| c.to_string())
}

pub fn analyze(
    trial: &Trial,
    plans: &[NodePlan],
    models: &[Model],
    nodes_per_leaf: usize,
    device: Option<DeviceModel>,
) -> Analysis {
    let nodes: HashMap<&str, &NodePlan> = plans.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut violations = Vec::new();
    let assigned = assignments(trial, &nodes, models, device, &mut violations);

    let gangs = gang_placement(trial, &nodes, nodes_per_leaf, &mut violations);
    let pending = pending(trial, &mut violations);
    violations.extend(trial.rule_violations.iter().map(|v| format!("rule: {v}")));
    let (two, four, stranding) = quality_and_stranding(trial, plans, models, &assigned);

    Analysis {
        scheduler: trial.scheduler,
        gpu_choice: device.map_or("scheduler", DeviceModel::key),
        gangs,
        two_gpu: two,
        four_gpu: four,
        stranding,
        pending,
        violations,
    }
}

/// Where the gangs landed: bound fully, partly or not at all, and how many
/// leaves, spines and machine models each fully bound one spans.
fn gang_placement(
    trial: &Trial,
    nodes: &HashMap<&str, &NodePlan>,
    nodes_per_leaf: usize,
    violations: &mut Vec<String>,
) -> Gangs {
    let mut gang_members: BTreeMap<&str, Vec<&PodResult>> = BTreeMap::new();
    for p in &trial.pods {
        if let Some(g) = &p.gang {
            gang_members.entry(g).or_default().push(p);
        }
    }
    let mut gangs = Gangs {
        gangs: gang_members.len(),
        ..Gangs::default()
    };
    let (mut leaves_sum, mut extra_sum, mut fewest, mut one_spine, mut one_model) =
        (0usize, 0usize, 0usize, 0usize, 0usize);
    let mut by_size: BTreeMap<u32, Vec<(usize, usize)>> = BTreeMap::new();
    for (g, members) in &gang_members {
        let bound: Vec<&NodePlan> = members
            .iter()
            .filter_map(|p| p.node.as_deref().and_then(|n| nodes.get(n).copied()))
            .collect();
        if bound.is_empty() {
            gangs.none_bound += 1;
            continue;
        }
        if bound.len() < members.len() {
            gangs.partially_bound += 1;
            gangs.gpus_held_by_partial_gangs += bound.len() as u32 * 8;
            if trial.scheduler == Which::Gputopo {
                violations.push(format!(
                    "gang {g}: {} of {} members bound (a gang binds all or none)",
                    bound.len(),
                    members.len()
                ));
            }
            continue;
        }
        gangs.fully_bound += 1;
        let leaves: BTreeSet<usize> = bound.iter().map(|n| n.leaf).collect();
        let spines: BTreeSet<usize> = bound.iter().map(|n| n.spine).collect();
        let kinds: BTreeSet<usize> = bound.iter().map(|n| n.model).collect();
        let min = members.len().div_ceil(nodes_per_leaf);
        leaves_sum += leaves.len();
        extra_sum += leaves.len().saturating_sub(min);
        fewest += usize::from(leaves.len() <= min);
        one_spine += usize::from(spines.len() == 1);
        one_model += usize::from(kinds.len() == 1);
        gangs.leaves_max = gangs.leaves_max.max(leaves.len());
        by_size
            .entry(members.len() as u32)
            .or_default()
            .push((leaves.len(), min));
    }
    if gangs.fully_bound > 0 {
        let n = gangs.fully_bound as f64;
        gangs.leaves_mean = leaves_sum as f64 / n;
        gangs.extra_leaves_mean = extra_sum as f64 / n;
        gangs.on_fewest_leaves = fewest as f64 / n;
        gangs.under_one_spine = one_spine as f64 / n;
        gangs.one_model = one_model as f64 / n;
    }
    gangs.by_size = by_size
        .into_iter()
        .map(|(size, v)| {
            let count = v.len();
            let mean = v.iter().map(|(l, _)| *l).sum::<usize>() as f64 / count as f64;
            let max = v.iter().map(|(l, _)| *l).max().unwrap_or(0);
            (size, (count, mean, max, v[0].1))
        })
        .collect();
    gangs
}

/// The pods left unbound, by kind; each should be reported unschedulable.
fn pending(trial: &Trial, violations: &mut Vec<String>) -> Pending {
    let mut pending = Pending::default();
    for p in trial.pods.iter().filter(|p| p.node.is_none()) {
        pending.pods += 1;
        pending.gpus += p.gpus;
        *pending
            .by_kind
            .entry(
                serde_json::to_value(p.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            )
            .or_default() += 1;
        if p.unschedulable.is_none() {
            violations.push(format!(
                "{} is neither bound nor reported unschedulable",
                p.name
            ));
        }
    }
    pending
}

/// The quality of the 2- and 4-GPU pods' sets, and the free GPUs each node
/// is left with that no pod can use well.
fn quality_and_stranding(
    trial: &Trial,
    plans: &[NodePlan],
    models: &[Model],
    assigned: &HashMap<String, Vec<(usize, u32)>>,
) -> (SetQuality, SetQuality, Stranding) {
    let smallest_pending = trial
        .pods
        .iter()
        .filter(|p| p.node.is_none())
        .map(|p| p.gpus)
        .min();

    // GPU-set quality and stranding.
    let mut two = SetQuality::default();
    let mut four = SetQuality::default();
    let mut counts: [(usize, usize, usize, usize); 2] = [(0, 0, 0, 0); 2];
    let mut stranding = Stranding::default();
    for plan in plans {
        let model = &models[plan.model];
        let full: u32 = (1u32 << model.gpus) - 1;
        let list = assigned.get(&plan.name).map(Vec::as_slice).unwrap_or(&[]);
        let mut used = 0u32;
        for (i, mask) in list {
            used |= mask;
            let p = &trial.pods[*i];
            let (q, c) = match p.kind {
                Kind::Two => (&mut two, &mut counts[0]),
                Kind::Ddp4 => (&mut four, &mut counts[1]),
                _ => continue,
            };
            let k = p.gpus as usize;
            let ring = model.ring(*mask);
            q.pods += 1;
            c.0 += usize::from(ring == model.best(k));
            if model.has_nvlink() {
                q.nvlink_pods += 1;
                c.1 += usize::from(matches!(ring, Some(LinkClass::Nv(_))));
                c.2 += usize::from(model.all_pairs_nvlink(*mask));
            }
            *q.bottlenecks
                .entry(model.key.to_string())
                .or_default()
                .entry(class_name(ring))
                .or_default() += 1;
        }
        let free = full & !used;
        let nfree = free.count_ones();
        stranding.gpus += model.gpus as u32;
        stranding.free_gpus += nfree;
        if free == full {
            stranding.nodes_empty += 1;
        } else if free == 0 {
            stranding.nodes_full += 1;
        } else {
            stranding.nodes_partial += 1;
            stranding.free_gpus_on_partial_nodes += nfree;
            stranding.nodes_below_4_free += usize::from(nfree < 4);
        }
        if free != 0 && smallest_pending.is_some_and(|k| nfree < k) {
            stranding.pending_stranded_nodes += 1;
            stranding.pending_stranded_gpus += nfree;
        }
        if free != 0 {
            let usable = [2usize, 4, 8]
                .iter()
                .filter(|&&k| k <= model.gpus)
                .any(|&k| {
                    let b = model.best_within(free, k);
                    b.is_some() && b == model.best(k)
                });
            if !usable {
                stranding.stranded_nodes += 1;
                stranding.stranded_gpus += nfree;
            }
        }
    }
    for (q, c) in [(&mut two, counts[0]), (&mut four, counts[1])] {
        if q.pods > 0 {
            q.optimal = c.0 as f64 / q.pods as f64;
        }
        if q.nvlink_pods > 0 {
            q.nvlink_ring = c.1 as f64 / q.nvlink_pods as f64;
            q.nvlink_all_pairs = c.2 as f64 / q.nvlink_pods as f64;
        }
    }
    (two, four, stranding)
}
