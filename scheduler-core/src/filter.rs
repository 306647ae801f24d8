//! The filter: which nodes may take a pod, and a typed reason for each that may not.
//!
//! # Predicates, in order
//!
//! A node is rejected by the first that fails; the first five are what any
//! second scheduler must honour, in kube-scheduler's plugin order, with its
//! wording in the aggregated message:
//!
//! 1. `unschedulable` (cordoned), unless the pod tolerates
//!    `node.kubernetes.io/unschedulable:NoSchedule` — *node(s) were unschedulable*;
//! 2. `spec.nodeName` names another node — *node(s) didn't match the requested node name*;
//! 3. an untolerated `NoSchedule` or `NoExecute` taint (`PreferNoSchedule`
//!    only lowers the score) — *node(s) had untolerated taint {key: value}*;
//! 4. `nodeSelector` and required node affinity (terms ORed; expressions
//!    `In NotIn Exists DoesNotExist Gt Lt` and `matchFields metadata.name`
//!    ANDed) — *node(s) didn't match Pod's node affinity/selector*;
//! 5. resources: every requested resource (cpu, memory, ephemeral-storage,
//!    `nvidia.com/gpu`, extended) within allocatable minus what bound pods
//!    request, and room for one more pod — *Insufficient cpu*, *Too many
//!    pods*; like kube-scheduler, one node counts once per short resource.
//!
//! Then the GPU predicates, through the exact GPU-set choice ([`crate::gpuset`]):
//!
//! 6. whole GPUs: a free set of `k` GPUs meeting `min-nvlink-level`,
//!    `gpu-memory`, MIG (MIG-enabled GPUs only for pods requesting
//!    `nvidia.com/mig-*`) and, on a node whose Topology Manager policy is
//!    `single-numa-node`, one NUMA node — the reason is
//!    [`NoFitReason`], e.g. *no 4-GPU set with NV12*;
//! 7. shared (`gpu-share`): one GPU that no pod holds whole, whose shared use
//!    plus this pod stays within 1000 ‰ and within its memory — *no GPU with
//!    room for a 0.25 share*.
//!
//! Nodes without a `GpuTopology` are handled as the `snapshot` module says.
//!
//! # Cost
//!
//! `PodContext` compiles the pod against the snapshot once per decision:
//! label strings become interned symbols, each distinct taint set is judged
//! once, and a [`Picker`] is prepared per node shape. Per node the filter is
//! then integer compares and one cached GPU-set lookup, with no allocation;
//! reasons are `Rejection`s (`Copy`) until a message is wanted.

use crate::config::SchedulerConfig;
use crate::fragmentation;
use crate::gpuset::{NoFitReason, Picker, SetPick, SetRequest, ShapeError};
use crate::pod::PendingPod;
use crate::resources::{self, format_amount};
use crate::selector::{SelectorOperator, Taint, TaintEffect, Toleration};
use crate::snapshot::intern::Sym;
use crate::snapshot::{
    DomainId, GpuKind, Hot, Node, NodeId, Snapshot, resolve_amounts, share_amounts,
};
use gputopo_api::{GpuShare, GpuVendor, LinkClass};
use std::fmt;
use std::sync::Arc;

/// Why a node cannot take the pod. `Display` gives the node's detail;
/// [`FilterReason::summaries`] the phrases the aggregated message counts.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterReason {
    Unschedulable,
    NodeName {
        requested: String,
    },
    UntoleratedTaint(Taint),
    NodeAffinity,
    /// Resources short: each with what was asked and what is free.
    Insufficient(Vec<Shortfall>),
    /// The pod wants GPUs; the node has none.
    NoGpus,
    /// The pod asks one vendor's GPUs (`amd.com/gpu`), the node has the other's.
    GpuVendor {
        pod: GpuVendor,
        node: GpuVendor,
    },
    /// The node's `GpuTopology` could not be used.
    InvalidTopology(ShapeError),
    /// The pod asks something (`min-nvlink-level`, `gpu-memory`,
    /// single-numa-node) that only a `GpuTopology` could vouch for.
    UnknownTopology {
        needs: &'static str,
    },
    /// No whole-GPU set fits.
    GpuSet(NoFitReason),
    /// No GPU has room for the pod's share.
    NoSharedGpu {
        share: GpuShare,
        /// Per-GPU memory floor the pod asks (`gpu-memory`).
        min_memory_mib: Option<u64>,
        /// The most any eligible GPU could still give, in ‰ of a GPU.
        best_free_milli: u32,
        /// The most memory any eligible GPU has unshared, in MiB; `None`
        /// when no eligible GPU's memory is known.
        best_free_mib: Option<u64>,
    },
}

/// One resource a node is short of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// `cpu`, `memory`, `nvidia.com/gpu`, …; `pods` for the pod count.
    pub resource: String,
    pub requested: i64,
    pub free: i64,
}

impl FilterReason {
    /// The node-independent phrases for a `FailedScheduling` message: one per
    /// short resource, else one. Equal phrases count together.
    pub fn summaries(&self) -> Vec<String> {
        match self {
            FilterReason::Insufficient(short) => short
                .iter()
                .map(|s| {
                    if s.resource == resources::PODS {
                        "Too many pods".to_string()
                    } else {
                        format!("Insufficient {}", s.resource)
                    }
                })
                .collect(),
            other => vec![other.summary()],
        }
    }

    fn summary(&self) -> String {
        match self {
            FilterReason::Unschedulable => "node(s) were unschedulable".into(),
            FilterReason::NodeName { .. } => "node(s) didn't match the requested node name".into(),
            FilterReason::UntoleratedTaint(t) => format!("node(s) had untolerated taint {t}"),
            FilterReason::NodeAffinity => {
                "node(s) didn't match Pod's node affinity/selector".into()
            }
            FilterReason::Insufficient(_) => "Insufficient resources".into(),
            FilterReason::NoGpus => "node(s) had no GPUs".into(),
            FilterReason::GpuVendor { pod, .. } => {
                format!("node(s) had no {} GPUs", pod.resource())
            }
            FilterReason::InvalidTopology(_) => "node(s) had an unusable GpuTopology".into(),
            FilterReason::UnknownTopology { needs } => {
                format!("node(s) had no GpuTopology to check {needs}")
            }
            FilterReason::GpuSet(r) => r.summary(),
            FilterReason::NoSharedGpu {
                share,
                min_memory_mib,
                ..
            } => {
                let what = match share {
                    GpuShare::Milli(m) => format!("room for a {} share", milli_text(*m)),
                    GpuShare::MemoryMiB(mib) => format!("{mib} MiB free to share"),
                };
                match min_memory_mib {
                    Some(min) => format!("no GPU of {min} MiB with {what}"),
                    None => format!("no GPU with {what}"),
                }
            }
        }
    }
}

/// `0.25` for 250 ‰.
fn milli_text(milli: u32) -> String {
    let text = format!("{}.{:03}", milli / 1000, milli % 1000);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl fmt::Display for FilterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterReason::Unschedulable => {
                f.write_str("node is cordoned (spec.unschedulable) and the pod does not tolerate node.kubernetes.io/unschedulable:NoSchedule")
            }
            FilterReason::NodeName { requested } => {
                write!(f, "the pod's spec.nodeName is {requested}")
            }
            FilterReason::UntoleratedTaint(t) => write!(
                f,
                "taint {}={}:{} is not tolerated",
                t.key,
                t.value,
                t.effect.as_str()
            ),
            FilterReason::NodeAffinity => {
                f.write_str("the node's labels do not match the pod's nodeSelector or required node affinity")
            }
            FilterReason::Insufficient(short) => {
                f.write_str("insufficient ")?;
                for (i, s) in short.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if s.resource == resources::PODS {
                        write!(f, "pods (no room for one more)")?;
                    } else {
                        write!(
                            f,
                            "{}: requested {}, free {}",
                            s.resource,
                            format_amount(&s.resource, s.requested),
                            format_amount(&s.resource, s.free.max(0))
                        )?;
                    }
                }
                Ok(())
            }
            FilterReason::NoGpus => f.write_str("the pod requests GPUs and the node has none"),
            FilterReason::GpuVendor { pod, node } => write!(
                f,
                "the pod asks {} but the node's GPUs are {} ({})",
                pod.resource(),
                node.as_str(),
                node.resource()
            ),
            FilterReason::InvalidTopology(e) => write!(f, "the node's GpuTopology cannot be used: {e}"),
            FilterReason::UnknownTopology { needs } => write!(
                f,
                "the node has GPUs but no GpuTopology, so nothing can check the pod's {needs}"
            ),
            FilterReason::GpuSet(r) => write!(f, "{r}"),
            FilterReason::NoSharedGpu {
                share,
                best_free_milli,
                best_free_mib,
                ..
            } => {
                write!(f, "{}; ", self.summary())?;
                match (share, best_free_mib) {
                    (GpuShare::MemoryMiB(_), None) => f.write_str(
                        "no eligible GPU's memory is known (the node's GpuTopology gives none), so a memory share cannot be checked",
                    ),
                    (GpuShare::MemoryMiB(_), Some(mib)) => write!(
                        f,
                        "the most any GPU not held whole has unshared is {mib} MiB"
                    ),
                    (GpuShare::Milli(_), _) => write!(
                        f,
                        "the most any GPU not held whole has unshared is {}",
                        milli_text(*best_free_milli)
                    ),
                }
            }
        }
    }
}

/// A rejection as the hot path records it: `Copy`, resolved to a
/// [`FilterReason`] only when a message is wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Rejection {
    Unschedulable,
    NodeName,
    Taint {
        set: u32,
        index: u32,
    },
    NodeAffinity,
    /// Bits 0–4: cpu, memory, ephemeral-storage, pods, nvidia.com/gpu; bit
    /// 5 + i: the pod's i-th extended resource.
    Resources(u64),
    NoGpus,
    GpuVendor(GpuVendor),
    InvalidTopology,
    UnknownTopology(&'static str),
    GpuSet(NoFitReason),
    NoSharedGpu {
        best_free_milli: u32,
        best_free_mib: Option<u64>,
    },
}

/// How a node fits, for the score and the decision.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fit {
    /// The pod wants no GPU.
    NoGpu,
    /// A whole-GPU set chosen on a node of known topology: what the score
    /// reads of the [`SetPick`] (the full pick, for an explanation, is
    /// [`PodContext::full_pick`]; keeping this small keeps it cheap to pass).
    Whole(PickSummary),
    /// Whole GPUs on a node without `GpuTopology`: the lowest free indices.
    WholeUnknown { gpus: u32 },
    /// Part of one GPU.
    Shared {
        gpu: u32,
        milli: u32,
        memory_mib: u64,
        /// Memory use of the GPU after placement, 0–1 (‰ when memory is unknown).
        fill: f64,
    },
}

/// The part of a [`SetPick`] the score reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PickSummary {
    pub(crate) gpus: u32,
    pub(crate) bottleneck: Option<LinkClass>,
    pub(crate) score: u8,
}

/// What the pod asks of GPUs, compiled.
enum GpuAsk<'a> {
    None,
    Whole {
        request: SetRequest,
        /// Per shape: without and with the single-numa-node constraint.
        pickers: Vec<[Picker<'a>; 2]>,
    },
    Shared {
        share: GpuShare,
        min_memory_mib: Option<u64>,
        allow_mig: bool,
    },
}

/// A required-affinity requirement against interned labels.
enum Requirement {
    In(Option<Sym>, Vec<Sym>),
    NotIn(Option<Sym>, Vec<Sym>),
    Exists(Option<Sym>),
    DoesNotExist(Option<Sym>),
    Gt(Option<Sym>, i64),
    Lt(Option<Sym>, i64),
}

struct Term<'a> {
    labels: Vec<Requirement>,
    names: Vec<(bool, &'a [String])>,
    empty: bool,
}

/// A pod compiled against one snapshot for one decision.
pub(crate) struct PodContext<'a> {
    pub(crate) snapshot: &'a Snapshot,
    pub(crate) pod: &'a PendingPod,
    pub(crate) config: &'a SchedulerConfig,
    node_name: Option<&'a str>,
    /// `nodeSelector` pairs; `None` when some pair is on no node at all.
    selector: Option<Vec<(Sym, Sym)>>,
    /// The pod has a `nodeSelector` or required affinity to check.
    checks_labels: bool,
    affinity: Option<Vec<Term<'a>>>,
    tolerates_unschedulable: bool,
    /// Per taint set: the first untolerated blocking taint, if any.
    taint_block: Vec<Option<u32>>,
    /// Per taint set: untolerated `PreferNoSchedule` taints.
    pub(crate) taint_prefer: Vec<u32>,
    /// The pod's extended requests: (symbol or none, amount, index in `requests.extended`).
    extended: Vec<(Option<u32>, i64, usize)>,
    gpu: GpuAsk<'a>,
    /// Domains named like `preferred-domain`, at any tier.
    pub(crate) preferred: Vec<DomainId>,
    /// The best bottleneck rank any shape offers `k` GPUs on an empty node.
    pub(crate) cluster_best_rank: u32,
    /// The configured target workload, compiled (see [`crate::fragmentation`]).
    pub(crate) fragmentation: Option<fragmentation::Compiled>,
}

impl<'a> PodContext<'a> {
    pub(crate) fn new(
        snapshot: &'a Snapshot,
        pod: &'a PendingPod,
        config: &'a SchedulerConfig,
    ) -> PodContext<'a> {
        let strings = &snapshot.strings;
        let selector = pod
            .node_selector
            .iter()
            .map(|(k, v)| Some((strings.get(k)?, strings.get(v)?)))
            .collect::<Option<Vec<_>>>();
        let affinity = pod.affinity.as_ref().map(|a| {
            a.terms
                .iter()
                .map(|t| Term {
                    labels: t
                        .labels
                        .iter()
                        .map(|r| {
                            let key = strings.get(&r.key);
                            let syms = |values: &[String]| -> Vec<Sym> {
                                values.iter().filter_map(|v| strings.get(v)).collect()
                            };
                            match &r.operator {
                                SelectorOperator::In(v) => Requirement::In(key, syms(v)),
                                SelectorOperator::NotIn(v) => Requirement::NotIn(key, syms(v)),
                                SelectorOperator::Exists => Requirement::Exists(key),
                                SelectorOperator::DoesNotExist => Requirement::DoesNotExist(key),
                                SelectorOperator::Gt(n) => Requirement::Gt(key, *n),
                                SelectorOperator::Lt(n) => Requirement::Lt(key, *n),
                            }
                        })
                        .collect(),
                    names: t
                        .fields
                        .iter()
                        .map(|f| (f.within, f.names.as_slice()))
                        .collect(),
                    empty: t.labels.is_empty() && t.fields.is_empty(),
                })
                .collect()
        });
        let unschedulable_taint = Taint::unschedulable();
        let tolerates = |t: &Taint| {
            pod.tolerations
                .iter()
                .any(|tol: &Toleration| tol.tolerates(t))
        };
        let tolerates_unschedulable = tolerates(&unschedulable_taint);
        let taint_block = snapshot
            .taint_sets
            .iter()
            .map(|set| {
                set.iter()
                    .position(|t| t.effect.blocks_scheduling() && !tolerates(t))
                    .map(|i| i as u32)
            })
            .collect();
        let taint_prefer = snapshot
            .taint_sets
            .iter()
            .map(|set| {
                set.iter()
                    .filter(|t| t.effect == TaintEffect::PreferNoSchedule && !tolerates(t))
                    .count() as u32
            })
            .collect();

        let allow_mig = pod.requests.wants_mig();
        let request = &pod.request;
        let mut cluster_best_rank = 0;
        let gpu = if let Some(share) = request.gpu_share {
            GpuAsk::Shared {
                share,
                min_memory_mib: request.gpu_memory_mib,
                allow_mig,
            }
        } else if request.gpus > 0 {
            let set_request = SetRequest {
                allow_mig,
                ..SetRequest::from_gpu_request(request)
            };
            let numa = SetRequest {
                single_numa_node: true,
                ..set_request
            };
            let pickers = snapshot
                .shapes
                .iter()
                .map(|s| [s.shape.picker(&set_request), s.shape.picker(&numa)])
                .collect();
            for s in &snapshot.shapes {
                if let Ok(best) = s.shape.pick(s.shape.gpus_mask(), &set_request) {
                    let rank = best.bottleneck.map_or(u32::MAX, LinkClass::rank);
                    cluster_best_rank = cluster_best_rank.max(rank);
                }
            }
            GpuAsk::Whole {
                request: set_request,
                pickers,
            }
        } else {
            GpuAsk::None
        };
        let preferred = match &request.preferred_domain {
            Some(name) => snapshot
                .domains()
                .filter(|(_, d)| d.name() == name)
                .map(|(id, _)| id)
                .collect(),
            None => Vec::new(),
        };

        PodContext {
            snapshot,
            pod,
            config,
            node_name: pod.node_name.as_deref(),
            checks_labels: !pod.node_selector.is_empty() || affinity.is_some(),
            selector,
            affinity,
            tolerates_unschedulable,
            taint_block,
            taint_prefer,
            extended: resolve_amounts(&pod.requests, strings),
            gpu,
            preferred,
            cluster_best_rank,
            fragmentation: config
                .target_workload
                .as_ref()
                .map(|t| fragmentation::Compiled::new(snapshot, Arc::clone(t))),
        }
    }

    /// The whole-GPU request, when the pod makes one.
    pub(crate) fn set_request(&self) -> Option<&SetRequest> {
        match &self.gpu {
            GpuAsk::Whole { request, .. } => Some(request),
            _ => None,
        }
    }

    /// The full GPU-set choice on the node at `index` (a cached lookup), for
    /// the explanation of a node already known to fit.
    pub(crate) fn full_pick(&self, index: usize) -> Option<SetPick> {
        let GpuAsk::Whole { pickers, .. } = &self.gpu else {
            return None;
        };
        let hot = self.snapshot.hot.get(index)?;
        if hot.kind != Hot::SHAPE {
            return None;
        }
        let single_numa = hot.single_numa(self.config.default_topology_manager_policy);
        pickers.get(hot.shape as usize)?[usize::from(single_numa)]
            .pick(hot.free())
            .ok()
    }

    /// Whole GPUs the pod asks for (0 when none): a node with fewer free
    /// ones cannot take it, whatever else is true.
    pub(crate) fn whole_gpus(&self) -> u32 {
        match &self.gpu {
            GpuAsk::Whole { request, .. } => request.gpus,
            _ => 0,
        }
    }

    pub(crate) fn wants_whole_gpus(&self) -> bool {
        matches!(self.gpu, GpuAsk::Whole { .. })
    }

    pub(crate) fn wants_shared_gpu(&self) -> bool {
        matches!(self.gpu, GpuAsk::Shared { .. })
    }

    /// Whether the node at `index` may take the pod, and how. Reads the
    /// node's [`Hot`] record; the full node only for what the pod asks
    /// (a node name, labels, extended resources, a shared GPU).
    /// The predicates that evicting pods cannot change: unschedulable,
    /// `spec.nodeName`, taints, node selector and required affinity.
    pub(crate) fn admits(&self, index: usize) -> bool {
        let hot = &self.snapshot.hot[index];
        (!hot.unschedulable || self.tolerates_unschedulable)
            && self
                .node_name
                .is_none_or(|name| *self.snapshot.nodes[index].name == *name)
            && !matches!(self.taint_block.get(hot.taints as usize), Some(Some(_)))
            && (!self.checks_labels || self.matches_labels(&self.snapshot.nodes[index]))
    }

    pub(crate) fn filter(&self, index: usize) -> Result<Fit, Rejection> {
        let hot = &self.snapshot.hot[index];
        if hot.unschedulable && !self.tolerates_unschedulable {
            return Err(Rejection::Unschedulable);
        }
        if let Some(name) = self.node_name
            && *self.snapshot.nodes[index].name != *name
        {
            return Err(Rejection::NodeName);
        }
        if let Some(Some(taint)) = self.taint_block.get(hot.taints as usize) {
            return Err(Rejection::Taint {
                set: hot.taints,
                index: *taint,
            });
        }
        if self.checks_labels && !self.matches_labels(&self.snapshot.nodes[index]) {
            return Err(Rejection::NodeAffinity);
        }
        let short = self.short_resources(index, hot);
        if short != 0 {
            return Err(Rejection::Resources(short));
        }
        let fit = self.fit_gpus(index, hot)?;
        if self.wants_whole_gpus() && hot.tracks_gpus() && self.gpu_count_short(hot) {
            return Err(Rejection::Resources(1 << 4));
        }
        Ok(fit)
    }

    fn label(&self, node: &Node, key: Option<Sym>) -> Option<Sym> {
        let key = key?;
        node.labels
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| node.labels[i].1)
    }

    fn matches_labels(&self, node: &Node) -> bool {
        match &self.selector {
            None => return false,
            Some(pairs) => {
                if !pairs
                    .iter()
                    .all(|&(k, v)| self.label(node, Some(k)) == Some(v))
                {
                    return false;
                }
            }
        }
        let Some(terms) = &self.affinity else {
            return true;
        };
        terms.iter().any(|term| {
            !term.empty
                && term
                    .names
                    .iter()
                    .all(|&(within, names)| names.iter().any(|n| **n == *node.name) == within)
                && term.labels.iter().all(|r| self.requirement(node, r))
        })
    }

    fn requirement(&self, node: &Node, r: &Requirement) -> bool {
        let integer = |key: &Option<Sym>| -> Option<i64> {
            let v = self.label(node, *key)?;
            self.snapshot.strings.resolve(v).parse::<i64>().ok()
        };
        match r {
            Requirement::In(k, values) => self.label(node, *k).is_some_and(|v| values.contains(&v)),
            Requirement::NotIn(k, values) => {
                self.label(node, *k).is_none_or(|v| !values.contains(&v))
            }
            Requirement::Exists(k) => self.label(node, *k).is_some(),
            Requirement::DoesNotExist(k) => self.label(node, *k).is_none(),
            Requirement::Gt(k, n) => integer(k).is_some_and(|x| x > *n),
            Requirement::Lt(k, n) => integer(k).is_some_and(|x| x < *n),
        }
    }

    /// A bit per short resource (see [`Rejection::Resources`]).
    fn short_resources(&self, index: usize, hot: &Hot) -> u64 {
        let want = &self.pod.requests;
        let mut short = 0u64;
        if want.cpu_milli > 0 && want.cpu_milli > hot.free_cpu_milli {
            short |= 1;
        }
        if want.memory > 0 && want.memory > hot.free_memory {
            short |= 1 << 1;
        }
        if want.ephemeral_storage > 0 && want.ephemeral_storage > hot.free_ephemeral_storage {
            short |= 1 << 2;
        }
        if hot.pods_room < 1 {
            short |= 1 << 3;
        }
        // For whole GPUs on a node whose GPUs are tracked one by one, the GPU
        // predicate runs first and says "too few free GPUs" with the count;
        // `filter` still checks the device plugin's count after it.
        if !(self.wants_whole_gpus() && hot.tracks_gpus()) && self.gpu_count_short(hot) {
            short |= 1 << 4;
        }
        if !self.extended.is_empty() {
            let node = &self.snapshot.nodes[index];
            let (a, r) = (&node.allocatable, &node.requested);
            for &(sym, amount, i) in &self.extended {
                let free = match sym {
                    Some(s) => a.extended(Sym(s)).saturating_sub(r.extended(Sym(s))),
                    None => 0,
                };
                if amount > free && i < 59 {
                    short |= 1 << (5 + i);
                }
            }
        }
        short
    }

    /// The pod's `nvidia.com/gpu` request exceeds what the device plugin
    /// has left: fewer healthy devices than the topology lists, or
    /// time-slicing replicas used up.
    fn gpu_count_short(&self, hot: &Hot) -> bool {
        let want = self.pod.requests.gpus;
        want > 0 && want > hot.free_gpu_count
    }

    fn fit_gpus(&self, index: usize, hot: &Hot) -> Result<Fit, Rejection> {
        let node_vendor = hot.vendor;
        if !matches!(self.gpu, GpuAsk::None)
            && hot.kind != Hot::NONE
            && node_vendor != self.pod.request.vendor
        {
            return Err(Rejection::GpuVendor(node_vendor));
        }
        match &self.gpu {
            GpuAsk::None => Ok(Fit::NoGpu),
            GpuAsk::Whole { request, pickers } => {
                let single_numa = hot.single_numa(self.config.default_topology_manager_policy);
                match hot.kind {
                    Hot::NONE => Err(Rejection::NoGpus),
                    Hot::INVALID => Err(Rejection::InvalidTopology),
                    Hot::UNTOPOLOGIZED => {
                        if request.min_nvlink_level.is_some_and(|l| l > 0) {
                            return Err(Rejection::UnknownTopology("min-nvlink-level"));
                        }
                        if request.min_memory_mib.is_some() {
                            return Err(Rejection::UnknownTopology("gpu-memory"));
                        }
                        if single_numa {
                            return Err(Rejection::UnknownTopology("single-numa-node placement"));
                        }
                        let mut free = hot.free();
                        if free.count_ones() < request.gpus {
                            return Err(Rejection::GpuSet(NoFitReason::TooFewFreeGpus {
                                requested: request.gpus,
                                free: free.count_ones(),
                            }));
                        }
                        let mut gpus = 0;
                        for _ in 0..request.gpus {
                            let low = free & free.wrapping_neg();
                            gpus |= low;
                            free &= !low;
                        }
                        Ok(Fit::WholeUnknown { gpus })
                    }
                    _ => {
                        let free = hot.free();
                        // The GPU-set choice's first rule, without a table lookup:
                        // most nodes of a busy cluster fail here for big requests.
                        if free.count_ones() < request.gpus {
                            return Err(Rejection::GpuSet(NoFitReason::TooFewFreeGpus {
                                requested: request.gpus,
                                free: free.count_ones(),
                            }));
                        }
                        let Some(pair) = pickers.get(hot.shape as usize) else {
                            return Err(Rejection::InvalidTopology);
                        };
                        pair[usize::from(single_numa)]
                            .pick(free)
                            .map(|p| {
                                Fit::Whole(PickSummary {
                                    gpus: p.gpus,
                                    bottleneck: p.bottleneck,
                                    score: p.score,
                                })
                            })
                            .map_err(Rejection::GpuSet)
                    }
                }
            }
            GpuAsk::Shared {
                share,
                min_memory_mib,
                allow_mig,
            } => self.fit_share(
                &self.snapshot.nodes[index],
                hot,
                *share,
                *min_memory_mib,
                *allow_mig,
            ),
        }
    }

    /// The GPU for a shared pod: among GPUs no pod holds whole (and not MIG
    /// unless the pod asks for MIG), with room in ‰ and in memory, the one
    /// whose memory use after placement is nearest the target band (packing
    /// toward 70–80 %); ties to the fuller GPU, then the lower index. With a
    /// target workload configured, the GPU that leaves the node's
    /// fragmentation lowest comes first, and the above decides among equals.
    fn fit_share(
        &self,
        node: &Node,
        hot: &Hot,
        share: GpuShare,
        min_memory_mib: Option<u64>,
        allow_mig: bool,
    ) -> Result<Fit, Rejection> {
        let shape = match hot.kind {
            Hot::NONE => return Err(Rejection::NoGpus),
            Hot::INVALID => return Err(Rejection::InvalidTopology),
            Hot::UNTOPOLOGIZED if min_memory_mib.is_some() => {
                return Err(Rejection::UnknownTopology("gpu-memory"));
            }
            Hot::UNTOPOLOGIZED => None,
            _ => self.snapshot.shapes.get(hot.shape as usize),
        };
        let mut pool = hot.present & !hot.held;
        if let Some(s) = shape
            && !allow_mig
        {
            pool &= !s.shape.mig_mask();
        }
        let target = self.config.memory_target;
        let frag = self.fragmentation.as_ref().map(|c| {
            let state = c.state(node, hot);
            let cpu = state
                .cpu_milli
                .saturating_sub(self.pod.requests.cpu_milli.max(0));
            (c, state, cpu)
        });
        // Lower is better: the node's fragmentation after placement on the GPU.
        let frag_after = |gpu: u32, milli: u32| match &frag {
            Some((c, state, cpu)) => {
                let mut free = state.free;
                if let Some(slot) = free.get_mut(gpu as usize) {
                    *slot = slot.saturating_sub(milli);
                }
                c.measure(state, *cpu, &free[..state.len])
            }
            None => 0.0,
        };
        let mut best: Option<(f64, f64, u32, u32, u64)> = None;
        let mut best_frag = f64::INFINITY;
        let mut best_free_milli = 0u32;
        let mut best_free_mib: Option<u64> = None;
        let mut rest = pool;
        while rest != 0 {
            let gpu = rest.trailing_zeros();
            rest &= rest - 1;
            let memory = shape.and_then(|s| s.memory_mib.get(gpu as usize).copied().flatten());
            if let Some(min) = min_memory_mib
                && memory.is_none_or(|m| m < min)
            {
                continue;
            }
            let used = node.gpus.shared_use(gpu);
            best_free_milli = best_free_milli.max(1000u32.saturating_sub(used.milli));
            if let Some(total) = memory {
                let free = total.saturating_sub(used.memory_mib);
                best_free_mib = Some(best_free_mib.map_or(free, |b| b.max(free)));
            }
            let Some((milli, mib)) = share_amounts(share, memory) else {
                continue;
            };
            // Saturating: a bound pod's hold may claim more than the GPU has.
            if used.milli.saturating_add(milli) > 1000 {
                continue;
            }
            let fill = match memory {
                Some(total) if total > 0 => {
                    if used.memory_mib.saturating_add(mib) > total {
                        continue;
                    }
                    (used.memory_mib + mib) as f64 / total as f64
                }
                _ => f64::from(used.milli + milli) / 1000.0,
            };
            let closeness = target.fit(fill);
            let after = frag_after(gpu, milli);
            let better = match best {
                None => true,
                Some((c, f, ..)) => {
                    after < best_frag
                        || (after == best_frag && (closeness > c || (closeness == c && fill > f)))
                }
            };
            if better {
                best = Some((closeness, fill, gpu, milli, mib));
                best_frag = after;
            }
        }
        match best {
            Some((_, fill, gpu, milli, memory_mib)) => Ok(Fit::Shared {
                gpu,
                milli,
                memory_mib,
                fill,
            }),
            None => Err(Rejection::NoSharedGpu {
                best_free_milli,
                best_free_mib,
            }),
        }
    }

    /// The typed reason for a rejection on `node`.
    pub(crate) fn reason(&self, node_id: NodeId, rejection: Rejection) -> FilterReason {
        let node = &self.snapshot.nodes[node_id.0 as usize];
        match rejection {
            Rejection::Unschedulable => FilterReason::Unschedulable,
            Rejection::NodeName => FilterReason::NodeName {
                requested: self.node_name.unwrap_or_default().to_string(),
            },
            Rejection::Taint { set, index } => FilterReason::UntoleratedTaint(
                self.snapshot
                    .taint_sets
                    .get(set as usize)
                    .and_then(|s| s.get(index as usize))
                    .cloned()
                    .unwrap_or_else(|| Taint::new("", "", TaintEffect::NoSchedule)),
            ),
            Rejection::NodeAffinity => FilterReason::NodeAffinity,
            Rejection::Resources(bits) => {
                let want = &self.pod.requests;
                let (a, r) = (&node.allocatable, &node.requested);
                let mut short = Vec::new();
                let mut push = |bit: u32, resource: &str, requested: i64, free: i64| {
                    if bits & (1 << bit) != 0 {
                        short.push(Shortfall {
                            resource: resource.to_string(),
                            requested,
                            free,
                        });
                    }
                };
                push(
                    0,
                    resources::CPU,
                    want.cpu_milli,
                    a.cpu_milli.saturating_sub(r.cpu_milli),
                );
                push(
                    1,
                    resources::MEMORY,
                    want.memory,
                    a.memory.saturating_sub(r.memory),
                );
                push(
                    2,
                    resources::EPHEMERAL_STORAGE,
                    want.ephemeral_storage,
                    a.ephemeral_storage.saturating_sub(r.ephemeral_storage),
                );
                push(
                    3,
                    resources::PODS,
                    1,
                    a.pods.saturating_sub(node.pods.len() as i64),
                );
                push(
                    4,
                    gputopo_api::keys::RESOURCE_GPU,
                    want.gpus,
                    a.gpus.saturating_sub(r.gpus),
                );
                for &(sym, amount, i) in &self.extended {
                    let free =
                        sym.map_or(0, |s| a.extended(Sym(s)).saturating_sub(r.extended(Sym(s))));
                    if let Some((name, _)) = want.extended.get(i) {
                        push(5 + i as u32, name, amount, free);
                    }
                }
                FilterReason::Insufficient(short)
            }
            Rejection::NoGpus => FilterReason::NoGpus,
            Rejection::GpuVendor(node_vendor) => FilterReason::GpuVendor {
                pod: self.pod.request.vendor,
                node: node_vendor,
            },
            Rejection::InvalidTopology => match node.gpus.kind {
                GpuKind::Invalid(i) => self
                    .snapshot
                    .shape_errors
                    .get(i as usize)
                    .cloned()
                    .map_or(FilterReason::NoGpus, FilterReason::InvalidTopology),
                _ => FilterReason::NoGpus,
            },
            Rejection::UnknownTopology(needs) => FilterReason::UnknownTopology { needs },
            Rejection::GpuSet(r) => FilterReason::GpuSet(r),
            Rejection::NoSharedGpu {
                best_free_milli,
                best_free_mib,
            } => match &self.gpu {
                GpuAsk::Shared {
                    share,
                    min_memory_mib,
                    ..
                } => FilterReason::NoSharedGpu {
                    share: *share,
                    min_memory_mib: *min_memory_mib,
                    best_free_milli,
                    best_free_mib,
                },
                _ => FilterReason::NoGpus,
            },
        }
    }
}
