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
//!    [`NoFitReason`](crate::gpuset::NoFitReason), e.g. *no 4-GPU set with NV12*;
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
//! once, and a [`Picker`](crate::gpuset::Picker) is prepared per node shape. Per node the filter is
//! then integer compares and one cached GPU-set lookup, with no allocation;
//! reasons are `Rejection`s (`Copy`) until a message is wanted.

use crate::config::SchedulerConfig;
use crate::fragmentation;
use crate::inter_pod::{AffinityFilter, AffinityRefusal};
use crate::pod::PendingPod;
use crate::pod_constraints::NodeFeatures;
use crate::selector::{Taint, TaintEffect, Toleration};
use crate::snapshot::intern::Sym;
use crate::snapshot::{DomainId, Snapshot, resolve_amounts};
use crate::spread::{NodeEligibility, SpreadFilter, SpreadRefusal};
use crate::volumes::{VolumeCheck, VolumePlan, VolumeRefusal};
use std::sync::Arc;

mod gpu;
mod labels;
mod ports;
mod reason;
mod resolve;
mod resources;

use gpu::GpuAsk;
pub(crate) use gpu::{Fit, PickSummary};
use labels::Term;
pub(crate) use reason::Rejection;
pub use reason::{FilterReason, Shortfall};

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
    /// `DoNotSchedule` spread constraints, counted; `None` without any.
    spread: Option<SpreadFilter>,
    /// Required inter-pod terms, the pod's and the bound pods', counted;
    /// `None` when none can refuse a node.
    inter_pod: Option<AffinityFilter>,
    /// The pod's claims; `Err` when no node can take them (and why).
    volumes: Result<Option<VolumeCheck<'a>>, (VolumeRefusal, String)>,
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
        let affinity = pod
            .affinity
            .as_ref()
            .map(|a| a.terms.iter().map(|t| Term::compile(t, strings)).collect());
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

        let request = &pod.request;
        let (gpu, cluster_best_rank) = GpuAsk::compile(snapshot, pod);
        let preferred = match &request.preferred_domain {
            Some(name) => snapshot
                .domains()
                .filter(|(_, d)| d.name() == name)
                .map(|(id, _)| id)
                .collect(),
            None => Vec::new(),
        };

        let mut ctx = PodContext {
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
            spread: None,
            inter_pod: AffinityFilter::new(snapshot, pod),
            volumes: VolumeCheck::new(snapshot, pod),
        };
        ctx.spread = SpreadFilter::new(snapshot, pod, &config.spread_defaults, &|i| {
            ctx.eligibility(i)
        });
        ctx
    }

    /// What the pod's node rules say of the node at `index`, for spread's
    /// inclusion policies.
    pub(crate) fn eligibility(&self, index: usize) -> NodeEligibility {
        let hot = &self.snapshot.hot[index];
        NodeEligibility {
            affinity: !self.checks_labels || self.matches_labels(&self.snapshot.nodes[index]),
            taints: !matches!(self.taint_block.get(hot.taints as usize), Some(Some(_))),
        }
    }

    /// Whether the pod's host ports, spread and inter-pod affinity admit the
    /// node as it is. Preemption proposes evictions only on such nodes:
    /// evicting GPU holders must never be undone by a rule that still
    /// refuses the node once they are gone.
    pub(crate) fn pod_rules_admit(&self, index: usize) -> bool {
        self.ports_free(index) && self.disks_free(index) && self.among_pods(index).is_ok()
    }

    /// The volume plugins (after resources, before the pod-among-pods
    /// predicates, as kube-scheduler orders them).
    fn volumes_admit(&self, index: usize) -> Result<(), VolumeRefusal> {
        match &self.volumes {
            Ok(None) => Ok(()),
            Ok(Some(check)) => check.check(self.snapshot, index),
            Err((refusal, _)) => Err(*refusal),
        }
    }

    /// What to write for the pod's waiting claims on the node at `index`;
    /// empty where nothing waits (or the node was refused: not placed).
    pub(crate) fn volume_plan(&self, index: usize) -> VolumePlan {
        match &self.volumes {
            Ok(Some(check)) => check.plan(self.snapshot, index).unwrap_or_default(),
            _ => VolumePlan::default(),
        }
    }

    /// The claim a pod-level volume refusal names.
    pub(crate) fn refused_claim(&self) -> &str {
        match &self.volumes {
            Err((_, claim)) => claim,
            _ => "",
        }
    }

    /// The node features the pod needs that the node at `index` does not
    /// declare (NodeDeclaredFeatures; no eviction changes them).
    fn features_missing(&self, index: usize) -> NodeFeatures {
        let needed = self.pod.constraints.node_features;
        // Most pods need none: the node's record is not read for them.
        if needed.is_empty() {
            return needed;
        }
        needed.missing_on(self.snapshot.nodes[index].features)
    }

    /// Spread and inter-pod affinity, the predicates that read other pods
    /// across the node's topology domains (after the node's own checks, as
    /// kube-scheduler orders its plugins).
    fn among_pods(&self, index: usize) -> Result<(), Rejection> {
        if let Some(spread) = &self.spread {
            spread
                .check(self.snapshot, index)
                .map_err(Rejection::Spread)?;
        }
        if let Some(inter_pod) = &self.inter_pod {
            inter_pod
                .check(self.snapshot, index)
                .map_err(Rejection::InterPod)?;
        }
        Ok(())
    }

    /// Whether the node at `index` may take the pod, and how. Reads the
    /// node's [`Hot`](crate::snapshot::Hot) record; the full node only for what the pod asks
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
            && self.features_missing(index).is_empty()
            && self
                .volumes_admit(index)
                .err()
                .is_none_or(VolumeRefusal::resolvable)
            && !matches!(
                self.among_pods(index),
                Err(Rejection::Spread(SpreadRefusal::MissingLabel)
                    | Rejection::InterPod(AffinityRefusal::AffinityRules))
            )
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
        let missing = self.features_missing(index);
        if !missing.is_empty() {
            return Err(Rejection::NodeFeatures(missing));
        }
        if !self.ports_free(index) {
            return Err(Rejection::HostPorts);
        }
        let short = self.short_resources(index, hot);
        if short != 0 {
            return Err(Rejection::Resources(short));
        }
        let fit = self.fit_gpus(index, hot)?;
        if self.wants_whole_gpus() && hot.tracks_gpus() && self.gpu_count_short(hot) {
            return Err(Rejection::Resources(1 << 4));
        }
        if !self.disks_free(index) {
            return Err(Rejection::Volume(VolumeRefusal::DiskConflict));
        }
        self.volumes_admit(index).map_err(Rejection::Volume)?;
        self.among_pods(index)?;
        Ok(fit)
    }
}
