//! Building one node of a snapshot from its [`NodeInput`]: labels and
//! taints interned, its GPUs read from its topology, its network domains,
//! and what its labels say about policy, price and spot capacity.

use super::amounts::amounts;
use super::intern::Sym;
use super::{
    Amounts, Domain, DomainId, GpuKind, GpuUuids, Node, NodeGpus, NodeId, NodeInput, ShapeEntry,
    Snapshot, SnapshotWarning,
};
use crate::config::{MAX_TIERS, TopologyManagerPolicy};
use crate::gpuset::{MAX_GPUS, NodeShape, ShapeCatalog};
use crate::selector::Taint;
use gputopo_api::GpuTopologySpec;
use gputopo_api::keys::node as node_keys;
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

/// What the node loop shares between nodes.
#[derive(Default)]
pub(super) struct BuildState {
    pub(super) catalog: ShapeCatalog,
    pub(super) shape_index: HashMap<*const NodeShape, u32>,
    pub(super) taint_index: HashMap<Vec<Taint>, u32>,
    pub(super) domain_index: HashMap<(u8, Option<DomainId>, Sym), DomainId>,
}

impl Snapshot {
    pub(super) fn make_node(
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
            images,
            declared_features,
        } = input;
        let mut interned: Vec<(Sym, Sym)> = labels
            .iter()
            .map(|(k, v)| (self.strings.intern(k), self.strings.intern(v)))
            .collect();
        let model = gpu_model(topology.as_deref(), &labels).map(|m| self.strings.intern(&m));
        let generation = self.generation(&name, topology.as_deref(), &labels);
        interned.sort_unstable_by_key(|(k, _)| *k);

        let taints = self.intern_taints(taints, state);

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

        let domains = self.node_domains(id, &labels, gpus.present, state);
        let policy = self.label_policy(&name, &labels);
        let cost_per_hour = self.label_cost(&name, &labels);

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
            images: self.intern_images(&images),
            features: declared_features,
        }
    }

    /// The node's taint set, interned: nodes with the same taints share one
    /// entry (0: no taints).
    fn intern_taints(&mut self, taints: Vec<Taint>, state: &mut BuildState) -> u32 {
        if taints.is_empty() {
            0
        } else {
            let next = self.taint_sets.len() as u32;
            let id = *state.taint_index.entry(taints.clone()).or_insert(next);
            if id == next {
                self.taint_sets.push(taints.into_boxed_slice());
            }
            id
        }
    }

    /// The node's network domain at each configured tier (outermost first),
    /// each domain created on first sight and told of the node and its GPUs.
    fn node_domains(
        &mut self,
        id: NodeId,
        labels: &BTreeMap<String, String>,
        present: u32,
        state: &mut BuildState,
    ) -> [Option<DomainId>; MAX_TIERS] {
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
            d.gpus += present.count_ones();
            domains[t] = Some(domain);
            parent = Some(domain);
        }
        domains
    }

    /// The node's `gputopo.dev/topology-manager-policy` label; a bad value is
    /// a warning and the configured default applies.
    fn label_policy(
        &mut self,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<TopologyManagerPolicy> {
        labels
            .get(node_keys::TOPOLOGY_MANAGER_POLICY)
            .and_then(|v| match v.parse::<TopologyManagerPolicy>() {
                Ok(p) => Some(p),
                Err(e) => {
                    self.warnings.push(SnapshotWarning::BadLabel {
                        node: name.to_string(),
                        key: node_keys::TOPOLOGY_MANAGER_POLICY.into(),
                        value: v.clone(),
                        detail: format!("{e}; the configured default applies"),
                    });
                    None
                }
            })
    }

    /// The node's `gputopo.dev/cost-per-hour` label; a bad value is a warning.
    fn label_cost(&mut self, name: &str, labels: &BTreeMap<String, String>) -> Option<f32> {
        labels
            .get(node_keys::COST_PER_HOUR)
            .and_then(|v| match v.trim().parse::<f32>() {
                Ok(c) if c.is_finite() && c >= 0.0 => Some(c),
                _ => {
                    self.warnings.push(SnapshotWarning::BadLabel {
                        node: name.to_string(),
                        key: node_keys::COST_PER_HOUR.into(),
                        value: v.clone(),
                        detail: "accepted: a non-negative number such as 32.77".into(),
                    });
                    None
                }
            })
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
            stand_in: 0,
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
