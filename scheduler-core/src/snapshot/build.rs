//! Building a [`Snapshot`] from plain inputs, and changing it one pod at a time.

use super::chunked::Chunked;
use super::intern::{Interner, Sym};
use super::node_pods::{NodeReports, orphan_warnings};
use super::topology_spec::TopologySpec;
use super::{
    Amounts, BoundPod, Domain, DomainId, GpuKind, GpuUuids, Node, NodeGpus, NodeId, PodGroup,
    PodId, ShapeEntry, SharedHold, SharedUse, Signals, Snapshot, SnapshotError, SnapshotWarning,
};
use crate::config::{MAX_TIERS, NetworkTiers, SchedulerConfig, TopologyManagerPolicy};
use crate::gpuset::{MAX_GPUS, NodeShape, ShapeCatalog};
use crate::resources::Resources;
use crate::selector::{Taint, TaintEffect};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_api::keys::node as node_keys;
use gputopo_api::{
    GpuAllocation, GpuRequest, GpuShare, GpuTopologySpec, RequestError, WorkloadKind,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Labels that mark a node as spot (interruptible) capacity, with the value that means it.
const SPOT_LABELS: [(&str, &str); 5] = [
    ("karpenter.sh/capacity-type", "spot"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
];
const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";

/// A node as the snapshot is built from it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInput {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// In the node's order: the first untolerated one is the one reported.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `status.allocatable`; see [`Resources::allocatable`] for absent resources.
    pub allocatable: Resources,
    /// The node's `GpuTopology` spec, if the agent published one (shared
    /// with the watched object where it came from one).
    pub topology: Option<TopologySpec>,
    /// The `GpuTopology` status allocations: which pods (`namespace/name`) hold each GPU.
    pub gpu_allocations: Vec<GpuAllocation>,
    /// When the kubelet was read for `gpu_allocations`: a pod's reported
    /// GPUs count only if it had started by then (an older reading may name
    /// an earlier pod of the same name). `None`: the allocations are not used.
    pub allocations_observed_at: Option<Timestamp>,
}

impl Default for NodeInput {
    /// A node with no name, labels or taints, allocatable [`Resources::unlimited`].
    fn default() -> NodeInput {
        NodeInput {
            name: String::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            unschedulable: false,
            allocatable: Resources::unlimited(),
            topology: None,
            gpu_allocations: Vec::new(),
            allocations_observed_at: None,
        }
    }
}

/// What GPUs a bound pod holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum GpuHolding {
    /// No GPU (a CPU pod, or one using only MIG slices or other devices).
    #[default]
    None,
    /// These GPUs whole.
    Whole(Vec<u32>),
    /// This many GPUs whole, which ones not known (bound by another scheduler).
    Unknown(u32),
    /// Part of one GPU; `gpu` is `None` when not known.
    Shared { gpu: Option<u32>, share: GpuShare },
}

/// A pod bound to a node, as the snapshot is built from it.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundPodInput {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// Effective requests (see [`crate::resources::pod_requests`]).
    pub requests: Resources,
    pub holding: GpuHolding,
    /// The pod's parsed GPU request; an error is kept as a warning.
    pub request: Result<GpuRequest, RequestError>,
    pub priority: i32,
    pub start_time: Option<Timestamp>,
    /// A `gputopo.dev/assigned-gpus` value that is not an index list: the
    /// pod is counted with GPUs of unknown indices and this is a warning.
    pub unreadable_assignment: Option<String>,
}

impl BoundPodInput {
    /// A pod on `node` requesting `requests` and holding `holding`, default request.
    pub fn new(namespace: &str, name: &str, node: &str) -> BoundPodInput {
        BoundPodInput {
            namespace: namespace.to_string(),
            name: name.to_string(),
            node: node.to_string(),
            requests: Resources {
                pods: 1,
                ..Resources::default()
            },
            holding: GpuHolding::None,
            request: Ok(GpuRequest::default()),
            priority: 0,
            start_time: None,
            unreadable_assignment: None,
        }
    }
}

/// Collects inputs, then builds a [`Snapshot`].
#[derive(Clone, Debug)]
pub struct SnapshotBuilder {
    tiers: NetworkTiers,
    spot_instance_types: Vec<String>,
    nodes: Vec<NodeInput>,
    pods: Vec<BoundPodInput>,
    groups: Vec<PodGroup>,
}

impl SnapshotBuilder {
    /// Reads `config.tiers` and `config.spot_instance_types`.
    pub fn new(config: &SchedulerConfig) -> SnapshotBuilder {
        SnapshotBuilder {
            tiers: config.tiers.clone(),
            spot_instance_types: config.spot_instance_types.clone(),
            nodes: Vec::new(),
            pods: Vec::new(),
            groups: Vec::new(),
        }
    }

    pub fn node(&mut self, node: NodeInput) -> &mut SnapshotBuilder {
        self.nodes.push(node);
        self
    }

    pub fn pod(&mut self, pod: BoundPodInput) -> &mut SnapshotBuilder {
        self.pods.push(pod);
        self
    }

    pub fn pod_group(&mut self, group: PodGroup) -> &mut SnapshotBuilder {
        self.groups.push(group);
        self
    }

    /// The snapshot. Fails only on duplicate node or PodGroup names; anything
    /// else odd becomes a [`SnapshotWarning`].
    pub fn build(self) -> Result<Snapshot, SnapshotError> {
        let SnapshotBuilder {
            tiers,
            spot_instance_types,
            mut nodes,
            pods,
            mut groups,
        } = self;
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = nodes.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(SnapshotError::DuplicateNode {
                name: w[0].name.clone(),
            });
        }
        groups.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        if let Some(w) = groups
            .windows(2)
            .find(|w| (&w[0].namespace, &w[0].name) == (&w[1].namespace, &w[1].name))
        {
            return Err(SnapshotError::DuplicatePodGroup {
                namespace: w[0].namespace.clone(),
                name: w[0].name.clone(),
            });
        }

        let mut snapshot = Snapshot {
            hot: Vec::with_capacity(nodes.len()),
            free_counts: Vec::with_capacity(nodes.len()),
            nodes: Chunked::default(),
            pods: Chunked::default(),
            pod_index: imbl::HashMap::new(),
            shapes: Vec::new(),
            shape_errors: Vec::new(),
            strings: Interner::default(),
            taint_sets: vec![Box::default()],
            domains: Vec::new(),
            tiers,
            pod_groups: groups,
            warnings: Vec::new(),
            warning_parts: Default::default(),
            reusable_pod_ids: Vec::new(),
            signals: Signals::default(),
        };
        let mut state = BuildState::default();
        let mut reports: Vec<NodeReports> = Vec::with_capacity(nodes.len());
        for (i, input) in nodes.into_iter().enumerate() {
            reports.push(NodeReports::new(
                &input.gpu_allocations,
                input.allocations_observed_at,
            ));
            let node =
                snapshot.make_node(NodeId(i as u32), input, &spot_instance_types, &mut state);
            snapshot.nodes.push(node);
            snapshot.refresh(i);
        }
        snapshot.update_signals();
        snapshot.warning_parts.nodes = std::mem::take(&mut snapshot.warnings);

        // Node by node, each node's pods in the canonical order
        // (`node_pods.rs`), so the same pods give the same snapshot in any
        // order; pods on nodes the snapshot lacks are named, by name.
        let mut by_node: Vec<Vec<BoundPodInput>> = vec![Vec::new(); snapshot.nodes.len()];
        let mut orphans: Vec<BoundPodInput> = Vec::new();
        for pod in pods {
            match snapshot.node_id(&pod.node) {
                Some(id) => by_node[id.0 as usize].push(pod),
                None => orphans.push(pod),
            }
        }
        for (i, pods) in by_node.into_iter().enumerate() {
            let id = NodeId(i as u32);
            let warnings = snapshot.insert_node_pods(id, pods, &reports[i])?;
            snapshot.set_pod_warnings(id, warnings);
        }
        snapshot.warning_parts.orphans = orphan_warnings(&orphans);
        snapshot.rejoin_warnings();
        Ok(snapshot)
    }
}

/// What the node loop shares between nodes.
#[derive(Default)]
struct BuildState {
    catalog: ShapeCatalog,
    shape_index: HashMap<*const NodeShape, u32>,
    taint_index: HashMap<Vec<Taint>, u32>,
    domain_index: HashMap<(u8, Option<DomainId>, Sym), DomainId>,
}

/// The indices of a mask's set bits, lowest first.
pub(crate) fn bit_indices(mask: u32) -> Vec<u32> {
    (0..32).filter(|i| mask & (1 << i) != 0).collect()
}

/// Interns `r`'s extended resource names: what a node's amounts are stored as.
fn amounts(r: &Resources, strings: &mut Interner) -> Amounts {
    let mut extended: Vec<(Sym, i64)> = r
        .extended
        .iter()
        .filter(|(_, a)| *a != 0)
        .map(|(n, a)| (strings.intern(n), *a))
        .collect();
    extended.sort_unstable_by_key(|(s, _)| *s);
    Amounts {
        cpu_milli: r.cpu_milli,
        memory: r.memory,
        ephemeral_storage: r.ephemeral_storage,
        pods: r.pods,
        gpus: r.gpus,
        extended: extended.into_boxed_slice(),
    }
}

/// A pending pod's extended requests against the snapshot's names: `None`
/// for a name no node has (so no node can fit a non-zero request of it).
pub(crate) fn resolve_amounts(r: &Resources, strings: &Interner) -> Vec<(Option<u32>, i64, usize)> {
    r.extended
        .iter()
        .enumerate()
        .filter(|(_, (_, a))| *a > 0)
        .map(|(i, (n, a))| (strings.get(n).map(|s| s.0), *a, i))
        .collect()
}

/// A share's amounts on a GPU of `memory_mib`: `None` for a memory share on a
/// GPU whose memory is unknown (nothing can say it fits).
pub fn share_amounts(share: GpuShare, memory_mib: Option<u64>) -> Option<(u32, u64)> {
    match share {
        GpuShare::Milli(milli) => Some((
            milli,
            memory_mib.map_or(0, |m| m.saturating_mul(u64::from(milli)).div_ceil(1000)),
        )),
        GpuShare::MemoryMiB(mib) => {
            let total = memory_mib?;
            let milli = (mib.saturating_mul(1000)).div_ceil(total.max(1));
            Some((u32::try_from(milli).unwrap_or(u32::MAX), mib))
        }
    }
}

impl Snapshot {
    fn make_node(
        &mut self,
        id: NodeId,
        input: NodeInput,
        spot_types: &[String],
        state: &mut BuildState,
    ) -> Node {
        let NodeInput {
            name,
            labels,
            taints,
            unschedulable,
            allocatable,
            topology,
            gpu_allocations: _,
            allocations_observed_at: _,
        } = input;
        let mut interned: Vec<(Sym, Sym)> = labels
            .iter()
            .map(|(k, v)| (self.strings.intern(k), self.strings.intern(v)))
            .collect();
        let model = gpu_model(topology.as_deref(), &labels).map(|m| self.strings.intern(&m));
        let generation = self.generation(&name, topology.as_deref(), &labels);
        interned.sort_unstable_by_key(|(k, _)| *k);

        let taints = if taints.is_empty() {
            0
        } else {
            let next = self.taint_sets.len() as u32;
            let id = *state.taint_index.entry(taints.clone()).or_insert(next);
            if id == next {
                self.taint_sets.push(taints.into_boxed_slice());
            }
            id
        };

        let topology = topology.and_then(|spec| {
            match super::plausible::implausible_topology(&spec, &allocatable) {
                Some(reason) => {
                    self.warnings.push(SnapshotWarning::ImplausibleTopology {
                        node: name.clone(),
                        reason,
                    });
                    None
                }
                None => Some(spec),
            }
        });
        let allocatable = amounts(&allocatable, &mut self.strings);
        let gpus = self.node_gpus(&name, topology.as_deref(), allocatable.gpus, state);

        let mut domains = [None; MAX_TIERS];
        let mut parent = None;
        let tier_keys: Vec<String> = self.tiers.keys().to_vec();
        for (t, key) in tier_keys.iter().enumerate() {
            let Some(value) = labels.get(key) else {
                continue;
            };
            let value = self.strings.intern(value);
            let key = (t as u8, parent, value);
            let domain = match state.domain_index.get(&key) {
                Some(&d) => d,
                None => {
                    let d = DomainId::from_index(self.domains.len());
                    self.domains.push(Domain {
                        tier: t as u8,
                        name: self.strings.shared(value),
                        parent,
                        nodes: Arc::default(),
                        gpus: 0,
                        gpus_used: 0,
                    });
                    state.domain_index.insert(key, d);
                    d
                }
            };
            let d = &mut self.domains[domain.index()];
            Arc::make_mut(&mut d.nodes).push(id);
            d.gpus += gpus.present.count_ones();
            domains[t] = Some(domain);
            parent = Some(domain);
        }

        let policy = labels
            .get(node_keys::TOPOLOGY_MANAGER_POLICY)
            .and_then(|v| match v.parse::<TopologyManagerPolicy>() {
                Ok(p) => Some(p),
                Err(e) => {
                    self.warnings.push(SnapshotWarning::BadLabel {
                        node: name.clone(),
                        key: node_keys::TOPOLOGY_MANAGER_POLICY.into(),
                        value: v.clone(),
                        detail: format!("{e}; the configured default applies"),
                    });
                    None
                }
            });
        let cost_per_hour =
            labels
                .get(node_keys::COST_PER_HOUR)
                .and_then(|v| match v.trim().parse::<f32>() {
                    Ok(c) if c.is_finite() && c >= 0.0 => Some(c),
                    _ => {
                        self.warnings.push(SnapshotWarning::BadLabel {
                            node: name.clone(),
                            key: node_keys::COST_PER_HOUR.into(),
                            value: v.clone(),
                            detail: "accepted: a non-negative number such as 32.77".into(),
                        });
                        None
                    }
                });
        let spot = SPOT_LABELS
            .iter()
            .any(|(k, v)| labels.get(*k).is_some_and(|x| x == v))
            || labels
                .get(INSTANCE_TYPE_LABEL)
                .is_some_and(|t| spot_types.iter().any(|s| s == t));

        Node {
            name: name.into_boxed_str(),
            labels: interned.into_boxed_slice(),
            taints,
            unschedulable,
            allocatable,
            requested: Amounts::default(),
            gpus,
            domains,
            pods: Vec::new(),
            policy,
            cost_per_hour,
            spot,
            model,
            generation,
            training_pods: 0,
            inference_pods: 0,
        }
    }

    /// A node's GPU generation: its `gputopo.dev/gpu-generation` label
    /// (a bad value is a warning, and the product decides), else its
    /// product's.
    fn generation(
        &mut self,
        name: &str,
        topology: Option<&GpuTopologySpec>,
        labels: &BTreeMap<String, String>,
    ) -> Option<u8> {
        if let Some(v) = labels.get(node_keys::GPU_GENERATION) {
            match gputopo_api::generation::parse_generation_label(v) {
                Some(g) => return Some(g),
                None => self.warnings.push(SnapshotWarning::BadLabel {
                    node: name.to_string(),
                    key: node_keys::GPU_GENERATION.into(),
                    value: v.clone(),
                    detail: "accepted: a whole number 1..=99; the GPU product decides instead"
                        .into(),
                }),
            }
        }
        topology
            .and_then(|t| t.summary.product.as_deref())
            .or_else(|| labels.get(node_keys::GPU_PRODUCT).map(String::as_str))
            .and_then(gputopo_api::generation::generation_of)
    }

    fn node_gpus(
        &mut self,
        name: &str,
        topology: Option<&GpuTopologySpec>,
        allocatable_gpus: i64,
        state: &mut BuildState,
    ) -> NodeGpus {
        let mut gpus = NodeGpus {
            kind: GpuKind::None,
            vendor: topology
                .map(GpuTopologySpec::vendor_or_default)
                .unwrap_or_default(),
            present: 0,
            held: 0,
            shared_mask: 0,
            shared: Box::default(),
            uuids: GpuUuids::None,
        };
        match topology {
            Some(spec) => match state.catalog.shape(spec) {
                Ok(shape) => {
                    let ptr = Arc::as_ptr(&shape);
                    let index = match state.shape_index.get(&ptr) {
                        Some(&i) => i,
                        None => {
                            let i = self.shapes.len() as u32;
                            let mut memory = vec![None; shape.gpu_count() as usize];
                            for g in &spec.gpus {
                                if let Some(slot) = memory.get_mut(g.index as usize) {
                                    *slot = g.memory_mib;
                                }
                            }
                            self.shapes.push(ShapeEntry {
                                shape: Arc::clone(&shape),
                                memory_mib: memory.into_boxed_slice(),
                            });
                            state.shape_index.insert(ptr, i);
                            i
                        }
                    };
                    gpus.kind = GpuKind::Shape(index);
                    gpus.present = shape.gpus_mask();
                    let mut uuids: Vec<Option<&str>> = vec![None; shape.gpu_count() as usize];
                    for g in &spec.gpus {
                        if let Some(slot) = uuids.get_mut(g.index as usize) {
                            *slot = g.uuid.as_deref();
                        }
                    }
                    gpus.uuids = GpuUuids::new(&uuids);
                }
                Err(error) => {
                    self.warnings.push(SnapshotWarning::InvalidTopology {
                        node: name.to_string(),
                        error: error.clone(),
                    });
                    gpus.kind = GpuKind::Invalid(self.shape_errors.len() as u32);
                    self.shape_errors.push(error);
                }
            },
            None if allocatable_gpus > 0 => {
                let n = allocatable_gpus.min(i64::from(MAX_GPUS)) as u32;
                gpus.kind = GpuKind::Untopologized;
                gpus.present = if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
            }
            None => {}
        }
        gpus
    }

    fn update_signals(&mut self) {
        let mut s = Signals {
            cost_min: f32::INFINITY,
            cost_max: f32::NEG_INFINITY,
            ..Signals::default()
        };
        for n in self.nodes.iter() {
            if let Some(c) = n.cost_per_hour {
                s.priced = true;
                s.cost_min = s.cost_min.min(c);
                s.cost_max = s.cost_max.max(c);
            }
            s.spot |= n.spot;
            if let Some(g) = n.generation {
                s.generation_min = if s.generation_min == 0 {
                    g
                } else {
                    s.generation_min.min(g)
                };
                s.generation_max = s.generation_max.max(g);
            }
        }
        s.prefer_no_schedule = self
            .taint_sets
            .iter()
            .flatten()
            .any(|t| t.effect == TaintEffect::PreferNoSchedule);
        if !s.priced {
            s.cost_min = 0.0;
            s.cost_max = 0.0;
        }
        self.signals = s;
    }

    /// Adds a bound pod (a placement being tried, a pod the watch just saw).
    /// Oddities (a GPU already held, GPUs of unknown index) are recorded in
    /// [`Snapshot::warnings`]; a pod on a node the snapshot lacks is an error.
    pub fn add_pod(&mut self, pod: BoundPodInput) -> Result<PodId, SnapshotError> {
        self.insert_pod(pod)
    }

    /// Removes a bound pod (an eviction being tried, a pod that finished) and
    /// gives it back. The node's GPU masks are recomputed from the pods left.
    pub fn remove_pod(&mut self, id: PodId) -> Option<BoundPod> {
        let pod = self.pods.get_mut(id.0 as usize)?.take()?;
        self.pod_index
            .remove(&(pod.namespace.clone(), pod.name.clone()));
        let node_index = pod.node.0 as usize;
        let requested = amounts(&pod.requests, &mut self.strings);
        let before = used_gpus(&self.nodes[node_index]);
        let remaining: Vec<PodId> = self.nodes[node_index]
            .pods
            .iter()
            .copied()
            .filter(|&p| p != id)
            .collect();
        let mut held = 0u32;
        let mut shared = vec![SharedUse::default(); self.nodes[node_index].gpus.shared.len()];
        for p in &remaining {
            if let Some(other) = self.pod(*p) {
                held |= other.gpus;
                if let Some(h) = other.shared
                    && let Some(slot) = shared.get_mut(h.gpu as usize)
                {
                    slot.add(&h);
                }
            }
        }
        let node = &mut self.nodes[node_index];
        node.pods = remaining;
        node.gpus.held = held;
        node.gpus.shared_mask = shared
            .iter()
            .enumerate()
            .filter(|(_, s)| s.pods > 0)
            .fold(0, |m, (i, _)| m | (1 << i));
        node.gpus.shared = shared.into_boxed_slice();
        node.requested.subtract(&requested);
        match pod.workload() {
            Some(WorkloadKind::Training) => {
                node.training_pods = node.training_pods.saturating_sub(1)
            }
            Some(WorkloadKind::Inference) => {
                node.inference_pods = node.inference_pods.saturating_sub(1)
            }
            None => {}
        }
        let after = used_gpus(node);
        self.refresh(node_index);
        self.shift_domain_usage(node_index, before, after);
        Some(pod)
    }

    pub(crate) fn shift_domain_usage(&mut self, node_index: usize, before: u32, after: u32) {
        let path = self.nodes[node_index].domains;
        for d in path.iter().flatten() {
            let domain = &mut self.domains[d.index()];
            domain.gpus_used = (domain.gpus_used + after).saturating_sub(before);
        }
    }

    pub(crate) fn insert_pod(&mut self, input: BoundPodInput) -> Result<PodId, SnapshotError> {
        let key = format!("{}/{}", input.namespace, input.name);
        let Some(node_id) = self.node_id(&input.node) else {
            return Err(SnapshotError::UnknownNode {
                pod: key,
                node: input.node,
            });
        };
        let index_key = (input.namespace.clone(), input.name.clone());
        if self.pod_index.contains_key(&index_key) {
            return Err(SnapshotError::DuplicatePod { pod: key });
        }
        if let Some(value) = input.unreadable_assignment {
            self.warnings.push(SnapshotWarning::UnreadableAssignment {
                pod: key.clone(),
                value,
            });
        }
        let request = match input.request {
            Ok(r) => Some(r),
            Err(error) => {
                self.warnings.push(SnapshotWarning::BadRequest {
                    pod: key.clone(),
                    error,
                });
                None
            }
        };
        let node_index = node_id.0 as usize;
        let node_name = input.node;
        let present = self.nodes[node_index].gpus.present;
        let mut gpus = 0u32;
        let mut shared = None;
        match input.holding {
            GpuHolding::None => {}
            GpuHolding::Whole(indices) => {
                let taken = {
                    let g = &self.nodes[node_index].gpus;
                    g.held | g.shared_mask
                };
                for gpu in indices {
                    if gpu >= MAX_GPUS || present & (1 << gpu) == 0 {
                        self.warnings.push(SnapshotWarning::GpuNotOnNode {
                            pod: key.clone(),
                            node: node_name.clone(),
                            gpu,
                        });
                        continue;
                    }
                    if taken & (1 << gpu) != 0 {
                        self.warnings.push(SnapshotWarning::GpuHeldTwice {
                            pod: key.clone(),
                            node: node_name.clone(),
                            gpu,
                        });
                    }
                    gpus |= 1 << gpu;
                }
                // A record naming fewer GPUs than the pod holds (edited, or
                // naming GPUs the node lacks) never lowers the count.
                let requested = u32::try_from(input.requests.gpus).unwrap_or(0);
                let short = requested.saturating_sub(gpus.count_ones());
                if short > 0 {
                    let extra = self.charge_highest_free(node_index, gpus, short, &key, &node_name);
                    self.warnings.push(SnapshotWarning::ShortAssignment {
                        pod: key.clone(),
                        node: node_name.clone(),
                        listed: gpus.count_ones(),
                        requested,
                        charged: list(extra),
                    });
                    gpus |= extra;
                }
            }
            GpuHolding::Unknown(count) => {
                gpus = self.charge_highest_free(node_index, 0, count, &key, &node_name);
                if count > 0 {
                    self.warnings.push(SnapshotWarning::UnknownGpus {
                        pod: key.clone(),
                        node: node_name.clone(),
                        count,
                        charged: list(gpus),
                    });
                }
            }
            GpuHolding::Shared { gpu, share } => {
                let mut warnings = Vec::new();
                let node = &self.nodes[node_index];
                let memory = |g: u32| self.gpu_memory(node, g);
                let chosen = match gpu {
                    Some(g) if g < MAX_GPUS && present & (1 << g) != 0 => {
                        if node.gpus.held & (1 << g) != 0 {
                            warnings.push(SnapshotWarning::GpuHeldTwice {
                                pod: key.clone(),
                                node: node_name.clone(),
                                gpu: g,
                            });
                        }
                        Some(g)
                    }
                    Some(g) => {
                        warnings.push(SnapshotWarning::GpuNotOnNode {
                            pod: key.clone(),
                            node: node_name.clone(),
                            gpu: g,
                        });
                        None
                    }
                    // Not told which: the lowest GPU not held whole with room for it.
                    None => (0..MAX_GPUS)
                        .filter(|&g| (present & !node.gpus.held) & (1 << g) != 0)
                        .find(|&g| {
                            let used = node.gpus.shared_use(g);
                            share_amounts(share, memory(g))
                                .is_some_and(|(m, _)| used.milli.saturating_add(m) <= 1000)
                        }),
                };
                if let Some(g) = chosen {
                    let (milli, memory_mib) = share_amounts(share, memory(g)).unwrap_or((0, 0));
                    shared = Some(SharedHold {
                        gpu: g,
                        milli,
                        memory_mib,
                    });
                }
                self.warnings.extend(warnings);
            }
        }

        let requested = amounts(&input.requests, &mut self.strings);
        let workload = request.as_ref().and_then(|r| r.workload);
        // An id a node's re-inserted pods left (`clear_node_pods`) first:
        // no one holds it, and the kept snapshot does not grow with churn.
        let reused = self.reusable_pod_ids.pop();
        let pod_id = reused.unwrap_or(PodId(self.pods.len() as u32));
        let before = used_gpus(&self.nodes[node_index]);
        let node = &mut self.nodes[node_index];
        node.gpus.held |= gpus;
        if let Some(h) = shared {
            let n = node
                .gpus
                .present
                .checked_ilog2()
                .map_or(0, |top| top as usize + 1);
            if node.gpus.shared.len() < n {
                let mut grown = node.gpus.shared.to_vec();
                grown.resize(n, SharedUse::default());
                node.gpus.shared = grown.into_boxed_slice();
            }
            if let Some(slot) = node.gpus.shared.get_mut(h.gpu as usize) {
                slot.add(&h);
                node.gpus.shared_mask |= 1 << h.gpu;
            }
        }
        node.requested.add(&requested);
        node.pods.push(pod_id);
        match workload {
            Some(WorkloadKind::Training) => {
                node.training_pods = node.training_pods.saturating_add(1)
            }
            Some(WorkloadKind::Inference) => {
                node.inference_pods = node.inference_pods.saturating_add(1)
            }
            None => {}
        }
        let after = used_gpus(node);
        self.refresh(node_index);
        self.shift_domain_usage(node_index, before, after);
        let pod = Some(BoundPod {
            namespace: input.namespace,
            name: input.name,
            node: node_id,
            requests: input.requests,
            gpus,
            shared,
            request,
            priority: input.priority,
            start_time: input.start_time,
        });
        match reused.and_then(|id| self.pods.get_mut(id.0 as usize)) {
            Some(slot) => *slot = pod,
            None => self.pods.push(pod),
        }
        self.pod_index.insert(index_key, pod_id);
        Ok(pod_id)
    }

    /// Charges `count` GPUs of a node to a pod whose indices are not known:
    /// the highest free ones outside `taken` (a warning where too few are
    /// free). Returns the GPUs charged.
    fn charge_highest_free(
        &mut self,
        node_index: usize,
        taken: u32,
        count: u32,
        pod: &str,
        node: &str,
    ) -> u32 {
        let mut free = self.nodes[node_index].gpus.free() & !taken;
        let mut charged = 0u32;
        let mut left = count;
        while left > 0 && free != 0 {
            let top = 31 - free.leading_zeros();
            charged |= 1 << top;
            free &= !(1 << top);
            left -= 1;
        }
        if left > 0 {
            self.warnings.push(SnapshotWarning::TooFewGpus {
                pod: pod.to_string(),
                node: node.to_string(),
                count: left,
            });
        }
        charged
    }

    /// A GPU's memory on a node, when its topology gives it.
    pub(crate) fn gpu_memory(&self, node: &Node, gpu: u32) -> Option<u64> {
        self.shape_entry(node)
            .and_then(|s| s.memory_mib.get(gpu as usize).copied().flatten())
    }
}

/// What stands for a node's GPU model: the `GpuTopology` summary's product,
/// else the node's `nvidia.com/gpu.product` label, else (a bare `topo -m`
/// names no product) the node's wiring: GPU count, interconnect and P2P
/// level, which boards of one model share and different models rarely do.
fn gpu_model(
    topology: Option<&GpuTopologySpec>,
    labels: &BTreeMap<String, String>,
) -> Option<String> {
    let summary = topology.map(|t| &t.summary);
    summary
        .and_then(|s| s.product.clone())
        .or_else(|| labels.get(gputopo_api::keys::node::GPU_PRODUCT).cloned())
        .or_else(|| {
            summary.map(|s| {
                format!(
                    "unknown model, {} GPUs, {}, {}",
                    s.gpu_count,
                    s.interconnect.as_str(),
                    s.p2p_level.as_deref().unwrap_or("no P2P level")
                )
            })
        })
}

/// GPUs of a node held whole or in shared use.
pub(crate) fn used_gpus(node: &Node) -> u32 {
    ((node.gpus.held | node.gpus.shared_mask) & node.gpus.present).count_ones()
}

/// `0,1,2`.
fn list(mask: u32) -> String {
    bit_indices(mask)
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
