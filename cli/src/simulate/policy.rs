//! Placement policies: the full `gputopo` decision, and baselines written
//! from their published descriptions (FGD paper §6.1; kube-scheduler's
//! defaults; NVIDIA go-gpuallocator).
//!
//! Every baseline uses the same feasibility rules ([`World::feasible`]):
//! CPU and memory requests, the allowed GPU models, one GPU with enough free
//! milli for a share, `num_gpu` GPUs with all 1000 milli free for whole GPUs.
//! Each scores the feasible nodes in one pass (O(nodes), a few float
//! operations per node; FGD evaluates its measure once per distinct GPU
//! choice on the node), and equal best scores are broken uniformly at random
//! (seeded), as kube-scheduler's `selectHost` does.
//!
//! | policy | node | GPUs inside the node |
//! | --- | --- | --- |
//! | `random` | uniform over feasible nodes | a uniform fitting GPU |
//! | `dot-prod` | smallest dot product of the request and the node's free (CPU, GPU), each over the node's capacity | best fit |
//! | `gpu-clustering` | nodes already running pods of the same GPU request, then nodes with no GPU pod, then the rest | best fit |
//! | `gpu-packing` | nodes with a partly used GPU that fits a share, then nodes with any GPU in use, then idle nodes | best fit, partly used first |
//! | `best-fit` | least free (CPU, memory, GPU) left after placement, summed over the node's capacity | best fit |
//! | `fgd` | smallest increase of the node's FGD fragmentation measure | the choice with that increase |
//! | `k8s-default` | most free (CPU, memory) after placement (`LeastAllocated`) | lowest indices that fit |
//! | `gpuallocator` | as `k8s-default` | go-gpuallocator best effort: the set with the largest sum of pair link scores |
//! | `gputopo` | `scheduler_core::schedule::schedule` on a snapshot kept current with `Snapshot::add_pod` | the scheduler's choice |
//!
//! "Best fit" for a share is the fitting GPU with the least free milli.

use super::topo;
use super::{SimCluster, SimError, SimNode, SimPod, World, below};
use gputopo_api::{GpuRequest, GpuShare};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::selector::{
    LabelRequirement, NodeAffinity, SelectorOperator, SelectorTerm,
};
use gputopo_scheduler_core::snapshot::{NodeInput, PodId, Snapshot, SnapshotBuilder};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The label the snapshot's nodes carry their model in.
pub const MODEL_LABEL: &str = "nvidia.com/gpu.product";

/// A policy by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    Random,
    DotProd,
    GpuClustering,
    GpuPacking,
    BestFit,
    Fgd,
    K8sDefault,
    GpuAllocator,
    Gputopo,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 9] = [
        PolicyKind::Random,
        PolicyKind::DotProd,
        PolicyKind::GpuClustering,
        PolicyKind::GpuPacking,
        PolicyKind::BestFit,
        PolicyKind::Fgd,
        PolicyKind::K8sDefault,
        PolicyKind::GpuAllocator,
        PolicyKind::Gputopo,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Random => "random",
            PolicyKind::DotProd => "dot-prod",
            PolicyKind::GpuClustering => "gpu-clustering",
            PolicyKind::GpuPacking => "gpu-packing",
            PolicyKind::BestFit => "best-fit",
            PolicyKind::Fgd => "fgd",
            PolicyKind::K8sDefault => "k8s-default",
            PolicyKind::GpuAllocator => "gpuallocator",
            PolicyKind::Gputopo => "gputopo",
        }
    }

    /// Reads a name; the error lists the accepted ones.
    pub fn parse(name: &str) -> Result<PolicyKind, String> {
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                format!(
                    "--policy {name:?}: accepted: {}",
                    PolicyKind::ALL.map(PolicyKind::name).join(", ")
                )
            })
    }
}

/// Where a pod went: the node (index into the cluster's nodes), the GPUs it
/// uses (its share's GPU, or the whole ones), and for `gputopo` its id in
/// the policy's snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub node: usize,
    pub gpus: Vec<u32>,
    pub handle: Option<PodId>,
}

/// The `gputopo` policy's own view.
struct Gputopo {
    snapshot: Snapshot,
    config: SchedulerConfig,
    /// Snapshot node id → cluster node index.
    to_index: Vec<usize>,
}

/// A policy with the state it keeps between pods.
pub struct Policy {
    kind: PolicyKind,
    gputopo: Option<Box<Gputopo>>,
    /// gpuallocator: per node, the pair-score matrix (row-major, n × n), shared per shape.
    pair_scores: Vec<Arc<Vec<u32>>>,
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
            topology,
            ..NodeInput::default()
        });
    }
    builder
        .build()
        .map_err(|e| SimError::Cluster(e.to_string()))
}

impl Policy {
    pub fn new(kind: PolicyKind, cluster: &SimCluster) -> Result<Policy, SimError> {
        let gputopo = if kind == PolicyKind::Gputopo {
            let index: BTreeMap<&str, usize> = cluster
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.as_str(), i))
                .collect();
            let to_index = cluster
                .snapshot
                .nodes()
                .map(|n| {
                    index
                        .get(n.name())
                        .copied()
                        .ok_or_else(|| SimError::Policy {
                            policy: kind.name().into(),
                            message: format!("snapshot node {} is not in the cluster", n.name()),
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Some(Box::new(Gputopo {
                snapshot: cluster.snapshot.clone(),
                config: cluster.config.clone(),
                to_index,
            }))
        } else {
            None
        };
        let mut pair_scores = Vec::new();
        if kind == PolicyKind::GpuAllocator {
            let mut shapes: BTreeMap<(String, u32), Arc<Vec<u32>>> = BTreeMap::new();
            for node in &cluster.nodes {
                let key = (node.model_name.clone(), node.gpus);
                let scores = shapes
                    .entry(key)
                    .or_insert_with(|| {
                        let spec = topo::synthesize(&node.name, &node.model_name, node.gpus);
                        let n = node.gpus;
                        Arc::new(
                            (0..n * n)
                                .map(|i| topo::pair_score(&spec, i / n, i % n))
                                .collect(),
                        )
                    })
                    .clone();
                pair_scores.push(scores);
            }
        }
        Ok(Policy {
            kind,
            gputopo,
            pair_scores,
        })
    }

    /// The node and GPUs for `pod`, or `None` when no node can take it.
    pub fn place(
        &mut self,
        world: &World<'_>,
        pod: &SimPod,
        rng: &mut ChaCha8Rng,
    ) -> Result<Option<Assignment>, SimError> {
        if let Some(g) = &mut self.gputopo {
            return g.place(world, pod);
        }
        let s = &world.state;
        let chosen = match self.kind {
            PolicyKind::Random => {
                let mut count = 0usize;
                let mut pick = None;
                for node in 0..world.nodes.len() {
                    if world.feasible(node, pod) {
                        count += 1;
                        if below(rng, count) == 0 {
                            pick = Some(node);
                        }
                    }
                }
                pick.map(|node| {
                    let fits: Vec<u32> = fitting(&s.gpu_left[node], pod.gpu_milli).collect();
                    let gpu = fits.get(below(rng, fits.len())).copied().unwrap_or(0);
                    (node, gpu)
                })
            }
            PolicyKind::DotProd => best(world, pod, rng, |node| {
                let n = &world.nodes[node];
                let cpu = ratio(pod.cpu_milli, n.cpu_milli) * ratio(s.cpu_left[node], n.cpu_milli);
                let cap = u64::from(n.gpus) * 1000;
                let free: u64 = s.gpu_left[node].iter().map(|&l| u64::from(l)).sum();
                let gpu = ratio(pod.demand(), cap) * ratio(free, cap);
                (-(cpu + gpu), best_fit_gpu(&s.gpu_left[node], pod.gpu_milli))
            }),
            PolicyKind::GpuClustering => best(world, pod, rng, |node| {
                let same = s.classes[node]
                    .iter()
                    .any(|c| c.0 == pod.num_gpu && c.1 == pod.gpu_milli && c.2 > 0);
                let idle = s.gpu_left[node].iter().all(|&l| l == 1000);
                let tier = if pod.num_gpu == 0 {
                    0.0
                } else if same {
                    2.0
                } else if idle {
                    1.0
                } else {
                    0.0
                };
                (tier, best_fit_gpu(&s.gpu_left[node], pod.gpu_milli))
            }),
            PolicyKind::GpuPacking => best(world, pod, rng, |node| {
                let left = &s.gpu_left[node];
                let partly = fitting(left, pod.gpu_milli).find(|&g| left[g as usize] < 1000);
                let any_used = left.iter().any(|&l| l < 1000);
                if pod.num_gpu == 0 {
                    return (0.0, 0);
                }
                match (pod.is_share(), partly) {
                    (true, Some(_)) => {
                        // Best fit among the partly used GPUs.
                        let gpu = fitting(left, pod.gpu_milli)
                            .filter(|&g| left[g as usize] < 1000)
                            .min_by_key(|&g| left[g as usize])
                            .unwrap_or(0);
                        (3.0, gpu)
                    }
                    _ if any_used => (2.0, best_fit_gpu(left, pod.gpu_milli)),
                    _ => (1.0, best_fit_gpu(left, pod.gpu_milli)),
                }
            }),
            PolicyKind::BestFit => best(world, pod, rng, |node| {
                let n = &world.nodes[node];
                let cap = u64::from(n.gpus) * 1000;
                let free: u64 = s.gpu_left[node].iter().map(|&l| u64::from(l)).sum();
                let left = ratio(s.cpu_left[node] - pod.cpu_milli, n.cpu_milli)
                    + ratio(s.mem_left[node] - pod.memory_mib, n.memory_mib)
                    + ratio(free - pod.demand(), cap);
                (-left, best_fit_gpu(&s.gpu_left[node], pod.gpu_milli))
            }),
            PolicyKind::Fgd => best(world, pod, rng, |node| fgd_score(world, node, pod)),
            PolicyKind::K8sDefault | PolicyKind::GpuAllocator => best(world, pod, rng, |node| {
                let n = &world.nodes[node];
                let free = (ratio(s.cpu_left[node] - pod.cpu_milli, n.cpu_milli)
                    + ratio(s.mem_left[node] - pod.memory_mib, n.memory_mib))
                    / 2.0;
                let gpu = fitting(&s.gpu_left[node], pod.gpu_milli)
                    .next()
                    .unwrap_or(0);
                (free, gpu)
            }),
            PolicyKind::Gputopo => None,
        };
        let Some((node, share_gpu)) = chosen else {
            return Ok(None);
        };
        let gpus = if pod.num_gpu == 0 {
            Vec::new()
        } else if pod.is_share() {
            vec![share_gpu]
        } else if self.kind == PolicyKind::GpuAllocator && pod.num_gpu > 1 {
            self.allocator_set(&s.gpu_left[node], node, pod.num_gpu)
        } else {
            fitting(&s.gpu_left[node], 1000)
                .take(pod.num_gpu as usize)
                .collect()
        };
        Ok(Some(Assignment {
            node,
            gpus,
            handle: None,
        }))
    }

    /// Undoes a placement (the pod ended, or its gang did not fit whole).
    pub fn release(&mut self, a: &Assignment, _pod: &SimPod) {
        if let (Some(g), Some(id)) = (&mut self.gputopo, a.handle) {
            g.snapshot.remove_pod(id);
        }
    }

    /// go-gpuallocator's best effort: of the free GPUs, the `k`-set with the
    /// largest sum of pair scores (exhaustive: at most C(8,4) = 70 sets on openb).
    fn allocator_set(&self, left: &[u32], node: usize, k: u32) -> Vec<u32> {
        let free: Vec<u32> = fitting(left, 1000).collect();
        let n = left.len() as u32;
        let scores = &self.pair_scores[node];
        let mut best: Option<(u32, Vec<u32>)> = None;
        let mut set = Vec::with_capacity(k as usize);
        fn walk(
            free: &[u32],
            start: usize,
            k: usize,
            set: &mut Vec<u32>,
            score: &dyn Fn(&[u32]) -> u32,
            best: &mut Option<(u32, Vec<u32>)>,
        ) {
            if set.len() == k {
                let s = score(set);
                if best.as_ref().is_none_or(|b| s > b.0) {
                    *best = Some((s, set.clone()));
                }
                return;
            }
            for i in start..free.len() {
                set.push(free[i]);
                walk(free, i + 1, k, set, score, best);
                set.pop();
            }
        }
        let score = |set: &[u32]| {
            let mut total = 0;
            for (i, &a) in set.iter().enumerate() {
                for &b in &set[i + 1..] {
                    total += scores.get((a * n + b) as usize).copied().unwrap_or(0);
                }
            }
            total
        };
        walk(&free, 0, k as usize, &mut set, &score, &mut best);
        best.map(|b| b.1)
            .unwrap_or_else(|| free.into_iter().take(k as usize).collect())
    }
}

impl Gputopo {
    fn place(&mut self, world: &World<'_>, pod: &SimPod) -> Result<Option<Assignment>, SimError> {
        let mut request = GpuRequest::default();
        if pod.is_share() {
            request.gpu_share = Some(GpuShare::Milli(pod.gpu_milli));
        } else {
            request.gpus = pod.num_gpu;
        }
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
        let Decision::Placed(placement) = schedule(&self.snapshot, &pending, &self.config) else {
            return Ok(None);
        };
        let node = self
            .to_index
            .get(placement.node_id.0 as usize)
            .copied()
            .ok_or_else(|| SimError::Policy {
                policy: "gputopo".into(),
                message: format!("placed on unknown node {}", placement.node),
            })?;
        let gpus = match (pod.is_share(), placement.shared) {
            (true, Some(hold)) => vec![hold.gpu],
            _ => placement.gpus.clone(),
        };
        let handle = self
            .snapshot
            .add_pod(placement.bound_pod(&pending))
            .map_err(|e| SimError::Policy {
                policy: "gputopo".into(),
                message: e.to_string(),
            })?;
        Ok(Some(Assignment {
            node,
            gpus,
            handle: Some(handle),
        }))
    }
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// GPUs with at least `milli` free, ascending.
fn fitting(left: &[u32], milli: u32) -> impl Iterator<Item = u32> + '_ {
    left.iter()
        .enumerate()
        .filter(move |&(_, &l)| l >= milli)
        .map(|(g, _)| g as u32)
}

/// The fitting GPU with the least free milli (lowest index on ties).
fn best_fit_gpu(left: &[u32], milli: u32) -> u32 {
    fitting(left, milli)
        .min_by_key(|&g| left[g as usize])
        .unwrap_or(0)
}

/// FGD: minus the increase of the node's measure, over the node's distinct
/// choices (for a share, each distinct free amount among fitting GPUs; whole
/// GPUs all leave the same multiset).
fn fgd_score(world: &World<'_>, node: usize, pod: &SimPod) -> (f64, u32) {
    let s = &world.state;
    let before = s.frag[node];
    let left = &s.gpu_left[node];
    let mut buf = [0u32; 32];
    let n = left.len().min(32);
    buf[..n].copy_from_slice(&left[..n]);
    let model = world.nodes[node].model;
    let cpu_left = s.cpu_left[node] - pod.cpu_milli;
    let eval = |buf: &[u32]| {
        world.frag.node(&super::frag::NodeFree {
            cpu_left,
            model,
            gpu_left: buf,
        })
    };
    if pod.num_gpu == 0 {
        return (-(eval(&buf[..n]) - before), 0);
    }
    if !pod.is_share() {
        let mut taken = 0;
        for l in buf[..n].iter_mut() {
            if taken < pod.num_gpu && *l == 1000 {
                *l = 0;
                taken += 1;
            }
        }
        return (-(eval(&buf[..n]) - before), 0);
    }
    let mut best: Option<(f64, u32)> = None;
    for g in fitting(left, pod.gpu_milli) {
        let l = left[g as usize];
        // Free amounts are multiples of 1 milli ≤ 1000: a 1024-bit set would do;
        // a linear scan of the few tried values is cheaper here.
        if (0..g).any(|h| left[h as usize] == l && l >= pod.gpu_milli) {
            continue;
        }
        buf[g as usize] = l - pod.gpu_milli;
        let delta = eval(&buf[..n]) - before;
        buf[g as usize] = l;
        if best.is_none_or(|b| delta < b.0) {
            best = Some((delta, g));
        }
    }
    best.map_or((f64::NEG_INFINITY, 0), |(d, g)| (-d, g))
}

/// The feasible node with the highest score (and its share GPU); equal best
/// scores broken uniformly at random.
fn best(
    world: &World<'_>,
    pod: &SimPod,
    rng: &mut ChaCha8Rng,
    mut score: impl FnMut(usize) -> (f64, u32),
) -> Option<(usize, u32)> {
    let mut top: Option<(f64, usize, u32)> = None;
    let mut ties = 0usize;
    for node in 0..world.nodes.len() {
        if !world.feasible(node, pod) {
            continue;
        }
        let (s, gpu) = score(node);
        match top {
            Some((t, ..)) if s < t => {}
            Some((t, ..)) if s == t => {
                ties += 1;
                if below(rng, ties) == 0 {
                    top = Some((s, node, gpu));
                }
            }
            _ => {
                top = Some((s, node, gpu));
                ties = 1;
            }
        }
    }
    top.map(|(_, node, gpu)| (node, gpu))
}
