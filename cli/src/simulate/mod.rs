//! `gputopo simulate`: a deterministic replay of a workload on a cluster.
//!
//! # Why a module of the `gputopo` crate
//!
//! The engine reads files (openb CSVs, the cluster YAML that
//! [`crate::cluster`] already loads, workload YAML) and draws plots; it drives
//! `scheduler-core` only through its public API (`schedule`, `Snapshot::add_pod`,
//! `remove_pod`), so scheduler-core stays free of I/O. A crate of its own
//! would have had to depend on this one for the cluster loader; a module
//! keeps one place for the file formats and the tests call it as a library.
//!
//! # The protocol (FGD, Weng et al. ATC'23)
//!
//! Arrival units (a pod, or a gang's members together) arrive one at a time.
//! With `--inflate X`, pods are resampled with replacement (seeded) and
//! appended until the arrived GPU demand reaches X × the cluster's GPUs.
//! Order: `Order::Shuffle` (the default for CSV traces) puts the trace's own
//! pods in seeded random order and the copies after them, in the order they
//! were drawn, as the FGD simulator does (it shuffles the pod list, then
//! appends its "tuned" copies); `Order::Arrival` (the default for workload
//! YAML) keeps arrival times, and pods with a duration end and free their
//! resources. Under `Shuffle` a unit the policy cannot place fails for
//! good; under `Arrival` it waits in a queue and is tried again, oldest
//! first, each time pods end (as a pending pod is), and fails only if it
//! still does not fit when nothing is left to end. Nothing is evicted.
//! After each arrival the arrived demand (sum of GPU requests in milli-GPU,
//! placed or not) is compared with 10 %, 20 %, … 130 % of capacity and a
//! point is recorded at each threshold crossed: GPU allocation and FGD
//! fragmentation, both as % of the cluster's GPU milli (and, on clusters
//! with wiring, the complete 8-GPU NVLink slots left).
//!
//! The FGD simulator also names every node with a seeded random prefix
//! (`0042-openb-node-0007`) before creating it; its baselines' equal scores
//! go to the node that comes first in that order (see [`policy`]). Trace
//! nodes get the same: a third seeded stream orders them ([`World::node_order`]),
//! and the `gputopo` policy sees them named with that prefix.
//!
//! # Topology metrics
//!
//! On clusters whose nodes have a wiring (a `GpuTopology`, or the one
//! synthesised for trace nodes) the result carries [`TopologyMetrics`]:
//! multi-GPU pods on an optimal set (ring bottleneck as good as the best any
//! set of that many of the node's free GPUs offered at the time), the mean
//! and distribution of their bottleneck links, gangs spread over more than
//! one leaf (the innermost network tier), and complete 8-GPU NVLink slots
//! left; under `Arrival`, queue time p50/p99 and makespan.
//!
//! # Determinism
//!
//! Three ChaCha8 streams seeded from `--seed`: one for the workload
//! (resampling, shuffle), identical for every policy, one for the policy's
//! random choices (`random`, kube-scheduler's ties), one for the node order.
//! No hash-map order reaches a result.

pub mod frag;
pub mod generate;
pub mod input;
pub mod plot;
pub mod policy;
pub mod topo;

use frag::{FragModel, NodeFree};
use gputopo_api::{Collective, LinkClass};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::gpuset::{self, NodeShape, SetRequest};
use gputopo_scheduler_core::snapshot::Snapshot;
use input::InputError;
use policy::{Assignment, PolicyKind};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BinaryHeap};
use std::path::Path;
use std::sync::Arc;

/// GPU models by name, as bit positions in a pod's allowed-model mask.
#[derive(Clone, Debug, Default)]
pub struct Models {
    names: Vec<String>,
    ids: BTreeMap<String, u8>,
}

impl Models {
    /// The model's id, assigned on first sight; `None` past 64 models.
    pub fn id(&mut self, name: &str) -> Option<u8> {
        if let Some(&id) = self.ids.get(name) {
            return Some(id);
        }
        if self.names.len() >= 64 {
            return None;
        }
        let id = self.names.len() as u8;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        Some(id)
    }

    /// The names in a mask, in id order.
    /// The bit mask of these model names (unknown names set no bit).
    pub fn mask(&self, names: &[String]) -> u64 {
        names
            .iter()
            .filter_map(|n| self.ids.get(n))
            .fold(0, |m, &id| m | (1u64 << id))
    }

    pub fn names(&self, mask: u64) -> Vec<String> {
        (0..self.names.len())
            .filter(|&i| mask & (1u64 << i) != 0)
            .map(|i| self.names[i].clone())
            .collect()
    }
}

/// A node as the simulation sees it.
#[derive(Clone, Debug)]
pub struct SimNode {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpus: u32,
    pub model: Option<u8>,
    pub model_name: String,
}

/// A pod of the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct SimPod {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// GPUs: whole ones, or 1 with `gpu_milli < 1000` for a share.
    pub num_gpu: u32,
    /// Milli per GPU (1000 whole; 0 for a CPU-only pod).
    pub gpu_milli: u32,
    /// Allowed GPU models as a [`Models`] mask; 0: any.
    pub models: u64,
    /// Seconds from the start.
    pub arrival: f64,
    /// Seconds it runs once placed; `None`: until the end.
    pub duration: Option<f64>,
    /// Index into [`Workload::gangs`].
    pub gang: Option<u32>,
}

impl SimPod {
    /// GPU demand in milli-GPU.
    pub fn demand(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }

    pub fn is_share(&self) -> bool {
        self.num_gpu == 1 && self.gpu_milli < 1000
    }
}

/// Pods and the names of their gangs.
#[derive(Clone, Debug, Default)]
pub struct Workload {
    pub pods: Vec<SimPod>,
    pub gangs: Vec<String>,
}

/// The cluster to simulate on.
pub struct SimCluster {
    pub nodes: Vec<SimNode>,
    pub models: Models,
    /// For the `gputopo` policy: a snapshot of the same nodes (built from the
    /// CSV with synthesised topologies, or the cluster YAML's own).
    pub snapshot: Snapshot,
    pub config: SchedulerConfig,
    /// Resources already in use (cluster YAML with bound pods), per node.
    pub initial: Vec<NodeUse>,
    /// Nodes read from a trace's node list: each run names them with a
    /// seeded random prefix, as the FGD simulator does (see [`node_order`]).
    pub trace: bool,
}

/// What is in use on a node at the start.
#[derive(Clone, Debug, Default)]
pub struct NodeUse {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpu_milli: Vec<u32>,
}

/// How arrival units are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    Shuffle,
    Arrival,
}

/// Run settings.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub policy: PolicyKind,
    pub seed: u64,
    /// Resample until arrived demand reaches this × capacity; `None`: the workload as is.
    pub inflate: Option<f64>,
    pub order: Order,
    /// FGD's `podPopularityThreshold`.
    pub popularity_pct: f64,
    pub progress: bool,
    /// Leave `runtimeMs` out of the result so that runs compare byte for byte.
    pub omit_runtime: bool,
}

/// Something went wrong while simulating.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("cluster: {0}")]
    Cluster(String),
    #[error("--inflate {0}: accepted: a finite number >= 1 (1.3 in the FGD protocol)")]
    Inflate(f64),
    #[error("the cluster has no GPUs: arrived demand cannot be measured")]
    NoGpus,
    #[error("the workload has no pod")]
    EmptyWorkload,
    #[error("policy {policy}: placed pod {pod} on node {node} beyond its capacity ({what})")]
    Overallocated {
        policy: String,
        pod: String,
        node: String,
        what: String,
    },
    #[error("policy {policy}: {message}")]
    Policy { policy: String, message: String },
}

/// One point of the curves.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Point {
    pub arrived_pct: u32,
    pub gpu_allocation_pct: f64,
    pub fragmented_gpu_pct: f64,
    /// Complete 8-GPU NVLink slots left over the cluster (clusters with
    /// known or synthesised wiring): disjoint sets of 8 free GPUs joined
    /// pairwise by NVLink (`gpuset::full_nvlink_slots`).
    #[serde(rename = "fullNvlinkSlots8", skip_serializing_if = "Option::is_none")]
    pub full_nvlink_slots8: Option<u64>,
}

/// What topology-aware placement achieved (clusters whose nodes have a
/// known or synthesised wiring).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopologyMetrics {
    /// Pods placed on two or more whole GPUs of a node with known wiring.
    pub multi_gpu_pods: u64,
    /// Share of those on an optimal set: a ring bottleneck as good as the
    /// best any set of that many of the node's free GPUs offered then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_optimal_set_pct: Option<f64>,
    /// Mean `LinkClass::rank` of their ring bottleneck (SYS 1 … PIX 5, XGMI-ROUTED 6, XGMI 7, NV1 8 … NV18 25).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_bottleneck_rank: Option<f64>,
    /// Their ring bottlenecks by class (`NV12`, `PIX`, …).
    pub bottlenecks: BTreeMap<String, u64>,
    pub gangs_placed: u64,
    /// Gangs whose members landed under more than one leaf (the innermost
    /// network tier).
    pub gangs_spanning_leaves: u64,
    #[serde(rename = "fullNvlinkSlots8AtStart")]
    pub full_nvlink_slots8_at_start: u64,
    /// At the last arrival.
    #[serde(rename = "fullNvlinkSlots8AtEnd")]
    pub full_nvlink_slots8_at_end: u64,
    /// Arrival order: the mean and the least over the instants just after
    /// each arrival (the trace's time axis).
    #[serde(
        rename = "fullNvlinkSlots8Mean",
        skip_serializing_if = "Option::is_none"
    )]
    pub full_nvlink_slots8_mean: Option<f64>,
    #[serde(
        rename = "fullNvlinkSlots8Min",
        skip_serializing_if = "Option::is_none"
    )]
    pub full_nvlink_slots8_min: Option<u64>,
    #[serde(skip)]
    slots_sum: u64,
    #[serde(skip)]
    slots_samples: u64,
    #[serde(skip)]
    optimal: u64,
    #[serde(skip)]
    rank_sum: u64,
}

/// The result of one run, as printed with `-o json`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimResult {
    pub policy: String,
    pub seed: u64,
    pub cluster: String,
    pub workload: String,
    pub inflate: Option<f64>,
    pub order: Order,
    pub nodes: usize,
    pub total_gpus: u32,
    pub typical_pod_types: usize,
    pub points: Vec<Point>,
    pub pods_arrived: u64,
    pub pods_placed: u64,
    pub pods_failed: u64,
    pub gpu_pods_failed: u64,
    pub pods_ended: u64,
    pub gangs_placed: u64,
    pub gangs_failed: u64,
    pub arrived_gpu_pct: f64,
    pub final_gpu_allocation_pct: f64,
    pub final_fragmented_gpu_pct: f64,
    /// Arrival order only (units that do not fit wait): the time from a
    /// pod's arrival to its start, seconds, over the pods that started.
    #[serde(rename = "queueTimeP50S", skip_serializing_if = "Option::is_none")]
    pub queue_time_p50_s: Option<f64>,
    #[serde(rename = "queueTimeP99S", skip_serializing_if = "Option::is_none")]
    pub queue_time_p99_s: Option<f64>,
    /// Arrival order only: when the last pod with a duration ended, seconds.
    #[serde(rename = "makespanS", skip_serializing_if = "Option::is_none")]
    pub makespan_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_ms: Option<u64>,
}

/// Free resources per node, kept by the engine for every policy.
pub struct State {
    pub cpu_left: Vec<u64>,
    pub mem_left: Vec<u64>,
    /// Free milli per GPU, per node.
    pub gpu_left: Vec<Vec<u32>>,
    /// GPU pods per node by (GPU count, milli): GPU clustering reads it.
    pub classes: Vec<Vec<(u32, u32, u32)>>,
    /// FGD measure per node, kept current.
    pub frag: Vec<f64>,
}

impl State {
    pub fn free(&self, node: usize, model: Option<u8>) -> NodeFree<'_> {
        NodeFree {
            cpu_left: self.cpu_left[node],
            model,
            gpu_left: &self.gpu_left[node],
        }
    }
}

/// The cluster, the workload's fragmentation model and the state: what a policy reads.
pub struct World<'a> {
    pub nodes: &'a [SimNode],
    pub models: &'a Models,
    pub frag: &'a FragModel,
    pub state: State,
    /// Per node, its place in a seeded random order of the nodes (0 first):
    /// the FGD simulator's baselines give a tie to the node that comes first
    /// (see [`policy`]).
    pub node_order: Vec<u32>,
}

impl World<'_> {
    /// Whether the node can take the pod at all (CPU, memory, models, GPUs).
    pub fn feasible(&self, node: usize, pod: &SimPod) -> bool {
        let n = &self.nodes[node];
        let s = &self.state;
        if s.cpu_left[node] < pod.cpu_milli || s.mem_left[node] < pod.memory_mib {
            return false;
        }
        if pod.num_gpu == 0 {
            return true;
        }
        if !allows(pod.models, n.model) {
            return false;
        }
        let fit = s.gpu_left[node]
            .iter()
            .filter(|&&l| l >= pod.gpu_milli)
            .count();
        fit >= pod.num_gpu as usize
    }

    fn apply(&mut self, a: &Assignment, pod: &SimPod, policy: &str) -> Result<(), SimError> {
        let node = a.node;
        let over = |what: String| SimError::Overallocated {
            policy: policy.to_string(),
            pod: pod.name.clone(),
            node: self.nodes[node].name.clone(),
            what,
        };
        let s = &mut self.state;
        if s.cpu_left[node] < pod.cpu_milli || s.mem_left[node] < pod.memory_mib {
            return Err(over("CPU or memory".into()));
        }
        if a.gpus.len() != pod.num_gpu as usize {
            return Err(over(format!(
                "{} GPUs given for {} asked",
                a.gpus.len(),
                pod.num_gpu
            )));
        }
        if pod.num_gpu > 0 && !allows(pod.models, self.nodes[node].model) {
            return Err(over("a GPU model the pod does not allow".into()));
        }
        let mut seen = 0u64;
        for &g in &a.gpus {
            let left = s.gpu_left[node].get(g as usize).copied();
            if left.is_none_or(|l| l < pod.gpu_milli) || seen & (1 << g) != 0 {
                return Err(over(format!("GPU {g}")));
            }
            seen |= 1 << g;
        }
        s.cpu_left[node] -= pod.cpu_milli;
        s.mem_left[node] -= pod.memory_mib;
        for &g in &a.gpus {
            s.gpu_left[node][g as usize] -= pod.gpu_milli;
        }
        if pod.num_gpu > 0 {
            let classes = &mut s.classes[node];
            match classes
                .iter_mut()
                .find(|c| c.0 == pod.num_gpu && c.1 == pod.gpu_milli)
            {
                Some(c) => c.2 += 1,
                None => classes.push((pod.num_gpu, pod.gpu_milli, 1)),
            }
        }
        s.frag[node] = self.frag.node(&s.free(node, self.nodes[node].model));
        Ok(())
    }

    fn release(&mut self, a: &Assignment, pod: &SimPod) {
        let node = a.node;
        let s = &mut self.state;
        s.cpu_left[node] += pod.cpu_milli;
        s.mem_left[node] += pod.memory_mib;
        for &g in &a.gpus {
            if let Some(l) = s.gpu_left[node].get_mut(g as usize) {
                *l += pod.gpu_milli;
            }
        }
        if let Some(c) = s.classes[node]
            .iter_mut()
            .find(|c| c.0 == pod.num_gpu && c.1 == pod.gpu_milli)
        {
            c.2 = c.2.saturating_sub(1);
        }
        s.frag[node] = self.frag.node(&s.free(node, self.nodes[node].model));
    }
}

/// Whether a pod allowing `models` (0: any) may use a node of `model`.
fn allows(models: u64, model: Option<u8>) -> bool {
    models == 0 || model.is_some_and(|m| models & (1u64 << m) != 0)
}

/// A uniform index below `n` (rejection sampling: no modulo bias).
pub fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let n = n as u64;
    let zone = u64::MAX - (u64::MAX % n);
    loop {
        let x = rng.next_u64();
        if x < zone {
            return (x % n) as usize;
        }
    }
}

/// Fisher–Yates.
fn shuffle<T>(rng: &mut ChaCha8Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = below(rng, i + 1);
        items.swap(i, j);
    }
}

/// The arrival units: pod indices, a gang's members together.
fn units(pods: &[SimPod]) -> Vec<Vec<usize>> {
    let mut units: Vec<Vec<usize>> = Vec::new();
    let mut gang_unit: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, p) in pods.iter().enumerate() {
        match p.gang {
            Some(g) => match gang_unit.get(&g) {
                Some(&u) => units[u].push(i),
                None => {
                    gang_unit.insert(g, units.len());
                    units.push(vec![i]);
                }
            },
            None => units.push(vec![i]),
        }
    }
    units
}

/// A seeded random order of `n` nodes, as each node's place in it. The FGD
/// simulator names every node with a seeded random prefix before creating
/// it, so the order in which equal scores are met is random per run but
/// fixed for the run; a third stream keeps the other two unchanged.
fn node_order(seed: u64, n: usize) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xD1B5_4A32_D192_ED03);
    let mut order: Vec<u32> = (0..n as u32).collect();
    shuffle(&mut rng, &mut order);
    let mut place = vec![0u32; n];
    for (i, &node) in order.iter().enumerate() {
        place[node as usize] = i as u32;
    }
    place
}

/// Seeds of the two streams: the workload's and the policy's.
fn streams(seed: u64) -> (ChaCha8Rng, ChaCha8Rng) {
    let workload = ChaCha8Rng::seed_from_u64(seed);
    let policy = ChaCha8Rng::seed_from_u64(seed ^ 0x9E37_79B9_7F4A_7C15);
    (workload, policy)
}

/// The workload as it will arrive: resampled to `inflate` × capacity and
/// ordered. The same for every policy at one seed.
pub fn arrival_plan(
    workload: &Workload,
    total_milli: u64,
    options: &SimOptions,
) -> Result<(Vec<SimPod>, Vec<Vec<usize>>), SimError> {
    let (mut rng, _) = streams(options.seed);
    let mut pods = workload.pods.clone();
    if pods.is_empty() {
        return Err(SimError::EmptyWorkload);
    }
    if let Some(x) = options.inflate {
        if !(x.is_finite() && x >= 1.0) {
            return Err(SimError::Inflate(x));
        }
        let target = (x * total_milli as f64).round() as u64;
        let mut demand: u64 = pods.iter().map(SimPod::demand).sum();
        let originals = workload.pods.len();
        let gpu_pods = workload.pods.iter().any(|p| p.demand() > 0);
        let mut k = 0u64;
        // Only solo pods are resampled: a gang is copied whole or not at all
        // would need renumbering; openb traces have no gangs.
        while gpu_pods && demand < target {
            let p = &workload.pods[below(&mut rng, originals)];
            if p.gang.is_some() {
                continue;
            }
            k += 1;
            let mut copy = p.clone();
            copy.name = format!("{}-clone-{k}", p.name);
            demand += copy.demand();
            pods.push(copy);
        }
    }
    let mut units = units(&pods);
    match options.order {
        Order::Shuffle => {
            // The trace's own pods in random order, then the copies in the
            // order they were drawn (already random): as the FGD simulator
            // does (it shuffles the pod list, then appends the copies).
            let originals = workload.pods.len();
            let copies = units.iter().position(|u| u[0] >= originals);
            let end = copies.unwrap_or(units.len());
            shuffle(&mut rng, &mut units[..end]);
        }
        Order::Arrival => units.sort_by(|a, b| pods[a[0]].arrival.total_cmp(&pods[b[0]].arrival)),
    }
    Ok((pods, units))
}

/// A pod running until `end` (seconds), for the event queue.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Ending {
    /// Bits of a non-negative f64 order as the number; reversed for a min-heap.
    end: std::cmp::Reverse<u64>,
    seq: std::cmp::Reverse<u64>,
    pod: usize,
}

/// Runs one simulation.
pub fn simulate(
    cluster: &SimCluster,
    workload: &Workload,
    options: &SimOptions,
) -> Result<SimResult, SimError> {
    let started = std::time::Instant::now();
    let total_gpus: u32 = cluster.nodes.iter().map(|n| n.gpus).sum();
    if total_gpus == 0 {
        return Err(SimError::NoGpus);
    }
    let total_milli = u64::from(total_gpus) * 1000;
    let (pods, units) = arrival_plan(workload, total_milli, options)?;
    // The target workload is the trace as given, before inflation (the
    // copies are drawn from it; the FGD simulator computes it first).
    let typical = Arc::new(policy::target_workload(
        &workload.pods,
        &cluster.models,
        options.popularity_pct,
    )?);
    let frag = FragModel::new(typical.clone(), &cluster.models);
    let n = cluster.nodes.len();
    let mut state = State {
        cpu_left: Vec::with_capacity(n),
        mem_left: Vec::with_capacity(n),
        gpu_left: Vec::with_capacity(n),
        classes: vec![Vec::new(); n],
        frag: vec![0.0; n],
    };
    for (i, node) in cluster.nodes.iter().enumerate() {
        let used = cluster.initial.get(i).cloned().unwrap_or_default();
        state
            .cpu_left
            .push(node.cpu_milli.saturating_sub(used.cpu_milli));
        state
            .mem_left
            .push(node.memory_mib.saturating_sub(used.memory_mib));
        state.gpu_left.push(
            (0..node.gpus as usize)
                .map(|g| 1000u32.saturating_sub(used.gpu_milli.get(g).copied().unwrap_or(0)))
                .collect(),
        );
    }
    let mut world = World {
        nodes: &cluster.nodes,
        models: &cluster.models,
        frag: &frag,
        state,
        node_order: node_order(options.seed, n),
    };
    for i in 0..n {
        world.state.frag[i] = frag.node(&world.state.free(i, cluster.nodes[i].model));
    }
    let allocated: u64 = world
        .state
        .gpu_left
        .iter()
        .flatten()
        .map(|&l| u64::from(1000 - l))
        .sum();
    let (_, mut rng) = streams(options.seed);
    // `gputopo` is told the workload's distribution through its
    // configuration, as an operator would set it.
    let target = match options.policy {
        PolicyKind::Gputopo if cluster.config.target_workload.is_none() => Some(typical.clone()),
        _ => None,
    };
    let mut policy = policy::Policy::new(options.policy, cluster, target, &world.node_order)?;
    let policy_name = options.policy.name();

    let progress = options.progress.then(|| {
        let bar = indicatif::ProgressBar::new(units.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} [{bar:40}] {pos}/{len} units {elapsed}<{eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_prefix(format!("{policy_name} seed {}", options.seed));
        bar
    });

    let mut result = SimResult {
        policy: policy_name.to_string(),
        seed: options.seed,
        cluster: String::new(),
        workload: String::new(),
        inflate: options.inflate,
        order: options.order,
        nodes: n,
        total_gpus,
        typical_pod_types: frag.types,
        points: Vec::new(),
        pods_arrived: 0,
        pods_placed: 0,
        pods_failed: 0,
        gpu_pods_failed: 0,
        pods_ended: 0,
        gangs_placed: 0,
        gangs_failed: 0,
        arrived_gpu_pct: 0.0,
        final_gpu_allocation_pct: 0.0,
        final_fragmented_gpu_pct: 0.0,
        queue_time_p50_s: None,
        queue_time_p99_s: None,
        makespan_s: None,
        topology: None,
        runtime_ms: None,
    };
    let shapes: Vec<Option<Arc<NodeShape>>> = if cluster.snapshot.len() == n {
        cluster
            .snapshot
            .nodes()
            .map(|v| v.shape().cloned())
            .collect()
    } else {
        vec![None; n]
    };
    let leaf_key = cluster.snapshot.tiers().keys().last().cloned();
    let leaves: Vec<Option<String>> = cluster
        .snapshot
        .nodes()
        .map(|v| {
            leaf_key
                .as_deref()
                .and_then(|k| v.label(k))
                .map(str::to_string)
        })
        .collect();
    let topology = shapes.iter().any(Option::is_some);
    let slots8 = |world: &World<'_>| -> u64 {
        (0..n)
            .filter_map(|i| {
                let shape = shapes[i].as_ref()?;
                Some(u64::from(gpuset::full_nvlink_slots(
                    shape,
                    free_mask(&world.state.gpu_left[i]),
                    8,
                )))
            })
            .sum()
    };
    let mut books = Books {
        allocated,
        running: vec![None; pods.len()],
        endings: BinaryHeap::new(),
        seq: 0,
        queue_times: Vec::new(),
        makespan: None,
        topo: TopologyMetrics {
            full_nvlink_slots8_at_start: if topology { slots8(&world) } else { 0 },
            ..TopologyMetrics::default()
        },
        queue: options.order == Order::Arrival,
    };
    let ctx = Ctx {
        pods: &pods,
        gangs: &workload.gangs,
        shapes: &shapes,
        leaves: &leaves,
        policy_name,
    };
    let mut arrived: u64 = 0;
    let mut next_point = 10u32;
    let mut waiting: Vec<usize> = Vec::new();
    let pct = |milli: u64| milli as f64 * 100.0 / total_milli as f64;
    let frag_total = |world: &World<'_>| world.state.frag.iter().sum::<f64>();

    for (u, unit) in units.iter().enumerate() {
        if let Some(bar) = &progress
            && u % 256 == 0
        {
            bar.set_position(u as u64);
        }
        let now = pods[unit[0]].arrival;
        if books.queue {
            advance(
                &ctx,
                &units,
                now,
                &mut world,
                &mut policy,
                &mut rng,
                &mut books,
                &mut waiting,
                &mut result,
            )?;
        }
        for &p in unit {
            result.pods_arrived += 1;
            arrived += pods[p].demand();
        }
        match place_unit(&ctx, unit, &mut world, &mut policy, &mut rng)? {
            Some(placed) => books.commit(&ctx, unit, placed, now, &mut result),
            None if books.queue => waiting.push(u),
            None => fail(&ctx, unit, &mut result),
        }
        if topology && books.queue {
            let slots = slots8(&world);
            books.topo.slots_sum += slots;
            books.topo.slots_samples += 1;
            books.topo.full_nvlink_slots8_min = Some(
                books
                    .topo
                    .full_nvlink_slots8_min
                    .map_or(slots, |m| m.min(slots)),
            );
        }
        while next_point <= 130 && arrived * 100 >= u64::from(next_point) * total_milli {
            result.points.push(Point {
                arrived_pct: next_point,
                gpu_allocation_pct: round4(pct(books.allocated)),
                fragmented_gpu_pct: round4(frag_total(&world) * 100.0 / total_milli as f64),
                full_nvlink_slots8: topology.then(|| slots8(&world)),
            });
            next_point += 10;
        }
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    result.arrived_gpu_pct = round4(pct(arrived));
    result.final_gpu_allocation_pct = round4(pct(books.allocated));
    result.final_fragmented_gpu_pct = round4(frag_total(&world) * 100.0 / total_milli as f64);
    if topology {
        books.topo.full_nvlink_slots8_at_end = slots8(&world);
    }
    if books.queue {
        // Past the last arrival: pods end, and queued units start as room
        // appears; what still waits when nothing is left to end fails.
        advance(
            &ctx,
            &units,
            f64::INFINITY,
            &mut world,
            &mut policy,
            &mut rng,
            &mut books,
            &mut waiting,
            &mut result,
        )?;
        for u in waiting.drain(..) {
            fail(&ctx, &units[u], &mut result);
        }
        let mut q = std::mem::take(&mut books.queue_times);
        q.sort_by(f64::total_cmp);
        result.queue_time_p50_s = percentile(&q, 50.0).map(round4);
        result.queue_time_p99_s = percentile(&q, 99.0).map(round4);
        result.makespan_s = books.makespan.map(round4);
    }
    if topology {
        let t = &mut books.topo;
        if t.multi_gpu_pods > 0 {
            t.on_optimal_set_pct = Some(round4(t.optimal as f64 * 100.0 / t.multi_gpu_pods as f64));
            t.mean_bottleneck_rank = Some(round4(t.rank_sum as f64 / t.multi_gpu_pods as f64));
        }
        if t.slots_samples > 0 {
            t.full_nvlink_slots8_mean = Some(round4(t.slots_sum as f64 / t.slots_samples as f64));
        }
        result.topology = Some(std::mem::take(t));
    }
    if !options.omit_runtime {
        result.runtime_ms = Some(started.elapsed().as_millis() as u64);
    }
    Ok(result)
}

/// What the placement helpers read.
struct Ctx<'a> {
    pods: &'a [SimPod],
    gangs: &'a [String],
    shapes: &'a [Option<Arc<NodeShape>>],
    leaves: &'a [Option<String>],
    policy_name: &'a str,
}

/// A pod placed, with what the node's GPUs looked like just before.
struct Placed {
    pod: usize,
    assignment: Assignment,
    free_before: u32,
}

/// Counters that placements and endings move.
struct Books {
    allocated: u64,
    running: Vec<Option<Assignment>>,
    endings: BinaryHeap<Ending>,
    seq: u64,
    queue_times: Vec<f64>,
    makespan: Option<f64>,
    topo: TopologyMetrics,
    /// Units that do not fit wait (arrival order) instead of failing.
    queue: bool,
}

impl Books {
    /// Counts a unit placed at `start`.
    fn commit(
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
fn fail(ctx: &Ctx<'_>, unit: &[usize], result: &mut SimResult) {
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
fn place_unit(
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
fn advance(
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
fn free_mask(left: &[u32]) -> u32 {
    left.iter()
        .enumerate()
        .filter(|&(g, &l)| l == 1000 && g < 32)
        .fold(0, |m, (g, _)| m | 1 << g)
}

/// The `pct` percentile of sorted values (nearest rank); `None` when empty.
fn percentile(sorted: &[f64], pct: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Four decimals: enough for the figures, and stable text across platforms.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Loads the cluster: an openb node CSV (topologies synthesised) or a cluster YAML.
pub fn load_cluster(path: &Path) -> Result<SimCluster, SimError> {
    if input::is_csv(path) {
        let mut models = Models::default();
        let nodes = input::read_node_csv(path, &mut models)?;
        let config = SchedulerConfig::default();
        let snapshot = policy::snapshot_for(&nodes, &config)?;
        let initial = vec![NodeUse::default(); nodes.len()];
        return Ok(SimCluster {
            nodes,
            models,
            snapshot,
            config,
            initial,
            trace: true,
        });
    }
    let loaded = crate::cluster::load(path, &crate::cluster::Overrides::default())
        .map_err(|e| SimError::Cluster(e.to_string()))?;
    let mut models = Models::default();
    let mut nodes = Vec::new();
    let mut initial = Vec::new();
    let mib = 1024 * 1024;
    for node in loaded.snapshot.nodes() {
        let alloc = node.allocatable();
        let used = node.requested();
        let present = node.gpus();
        let gpus = 32 - present.leading_zeros();
        let model_name = node
            .label("nvidia.com/gpu.product")
            .unwrap_or(if gpus > 0 { "unknown" } else { "" })
            .to_string();
        let model = if model_name.is_empty() {
            None
        } else {
            Some(models.id(&model_name).ok_or_else(|| {
                SimError::Cluster(format!("more than 64 GPU models ({model_name})"))
            })?)
        };
        let held = node.held_gpus();
        let gpu_milli = (0..gpus)
            .map(|g| {
                if held & (1 << g) != 0 || present & (1 << g) == 0 {
                    1000
                } else {
                    node.shared_use(g).milli.min(1000)
                }
            })
            .collect();
        initial.push(NodeUse {
            cpu_milli: used.cpu_milli.max(0) as u64,
            memory_mib: (used.memory.max(0) as u64).div_ceil(mib),
            gpu_milli,
        });
        nodes.push(SimNode {
            name: node.name().to_string(),
            cpu_milli: alloc.cpu_milli.max(0) as u64,
            memory_mib: alloc.memory.max(0) as u64 / mib,
            gpus,
            model,
            model_name,
        });
    }
    Ok(SimCluster {
        nodes,
        models,
        snapshot: loaded.snapshot,
        config: loaded.config,
        initial,
        trace: false,
    })
}

/// Loads the workload: an openb pod CSV or a workload YAML.
pub fn load_workload(path: &Path, cluster: &mut SimCluster) -> Result<Workload, SimError> {
    if input::is_csv(path) {
        let pods = input::read_pod_csv(path, &mut cluster.models)?;
        return Ok(Workload {
            pods,
            gangs: Vec::new(),
        });
    }
    Ok(input::read_workload_yaml(path, &mut cluster.models)?)
}
