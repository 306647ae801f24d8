//! GPU fragmentation against a target workload: the measure of FGD
//! (Weng et al., "Beware of Fragmentation", USENIX ATC'23, §3), for the
//! score's fragmentation part.
//!
//! # The target workload
//!
//! The operator describes the pods the cluster is expected to run as pod
//! types with weights ([`TargetWorkload::new`]), or lets them be drawn from a
//! list of pods the way FGD draws its *typical pods*
//! ([`TargetWorkload::typical`]: identical requests counted together, the most
//! frequent kept until they cover 95 % of the pods, weights renormalised).
//!
//! # The measure
//!
//! For a node with free CPU `c`, GPU model `M` and free milli-GPU `g_1..g_n`
//! (total `G`), and a pod type `t` asking for `c_t` CPU and `k_t` GPUs of
//! `m_t` milli each, allowing models `S_t` (empty: any):
//!
//! ```text
//! frag_t = Σ_{i : g_i < m_t} g_i   if k_t ≥ 1, M ∈ S_t (or S_t empty), c ≥ c_t
//!                                    and |{i : g_i ≥ m_t}| ≥ k_t
//!        = G                       otherwise (the type cannot run there, or
//!                                    needs no GPU: no free GPU is of use to it)
//! frag   = Σ_t w_t · frag_t        (milli-GPU, 0 ≤ frag ≤ G)
//! ```
//!
//! the free GPU a pod drawn from the workload could not use, in expectation.
//! FGD places a pod where the measure grows least (or falls most); the
//! score's fragmentation part is `1 / (1 + e^{Δ/1000})` with `Δ` the change
//! in milli-GPU, so 0.5 when placement leaves the measure as it was, above
//! for a decrease, with one GPU's worth of change moving it by about 0.23.
//!
//! # Cost
//!
//! Types that ask the same GPUs differ only in CPU, so they are grouped and
//! each group keeps its CPU thresholds sorted with cumulative weights: a
//! node's measure costs one pass over the GPUs and one binary search per
//! group (tens of groups for the Alibaba openb traces).

use crate::config::ConfigError;
use crate::snapshot::intern::Sym;
use crate::snapshot::{Hot, Node, Snapshot};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The node label naming a node's GPU model (GPU Feature Discovery's).
pub const DEFAULT_MODEL_LABEL: &str = "nvidia.com/gpu.product";

/// The popularity cut of FGD's typical pods (`podPopularityThreshold`).
pub const DEFAULT_POPULARITY_PCT: f64 = 95.0;

/// One kind of pod in the target workload.
#[derive(Clone, Debug, PartialEq)]
pub struct PodType {
    pub cpu_milli: u64,
    /// GPUs: 0 for a pod without GPUs, 1 for a share.
    pub gpus: u32,
    /// Milli-GPU per GPU: 1000 for whole GPUs, 1–999 for a share of one
    /// GPU; read as 0 when `gpus` is 0.
    pub milli: u32,
    /// GPU models the type may use (values of the model label); empty: any.
    pub models: Vec<String>,
    /// How often the type occurs, relative to the others (> 0).
    pub weight: f64,
}

impl PodType {
    /// A type of weight 1.
    pub fn new(cpu_milli: u64, gpus: u32, milli: u32) -> PodType {
        PodType {
            cpu_milli,
            gpus,
            milli: if gpus == 0 { 0 } else { milli },
            models: Vec::new(),
            weight: 1.0,
        }
    }

    fn check(&self, i: usize) -> Result<(), ConfigError> {
        let bad = |detail: String| Err(ConfigError::TargetWorkload { detail });
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return bad(format!(
                "type {i}: weight {}; accepted: a finite number > 0",
                self.weight
            ));
        }
        if self.gpus > 32 {
            return bad(format!("type {i}: {} GPUs; accepted: 0..=32", self.gpus));
        }
        if self.gpus > 0 && !(1..=1000).contains(&self.milli) {
            return bad(format!(
                "type {i}: {} milli-GPU per GPU; accepted: 1..=1000",
                self.milli
            ));
        }
        if self.gpus > 1 && self.milli != 1000 {
            return bad(format!(
                "type {i}: {} GPUs of {} milli; accepted: a share (< 1000) of one GPU only",
                self.gpus, self.milli
            ));
        }
        Ok(())
    }
}

/// The pods a cluster is expected to run, as weighted types (weights sum to 1).
#[derive(Clone, Debug, PartialEq)]
pub struct TargetWorkload {
    types: Vec<PodType>,
    model_label: String,
    /// Types grouped by their GPU ask (see the module docs).
    groups: Vec<Group>,
    /// Total weight of the types without GPUs.
    cpu_only: f64,
}

#[derive(Clone, Debug, PartialEq)]
struct Group {
    gpus: u32,
    milli: u32,
    /// Allowed models, sorted; empty: any.
    models: Vec<String>,
    /// CPU asks, ascending, and the weight of the types asking at most each.
    cpu: Vec<u64>,
    cum_weight: Vec<f64>,
    total: f64,
}

/// What the measure reads of a node.
#[derive(Clone, Copy, Debug)]
pub struct NodeFree<'a> {
    /// Free CPU in millicores (may be negative on an overcommitted node).
    pub cpu_milli: i64,
    /// The node's GPU model (its model label), if any.
    pub model: Option<&'a str>,
    /// Free milli-GPU of each GPU (1000: idle, 0: held whole or full).
    pub gpu_milli: &'a [u32],
}

impl TargetWorkload {
    /// A workload of these types; weights are renormalised to sum to 1.
    /// Types that ask the same are merged.
    pub fn new(types: impl IntoIterator<Item = PodType>) -> Result<TargetWorkload, ConfigError> {
        let mut merged: BTreeMap<(u64, u32, u32, Vec<String>), f64> = BTreeMap::new();
        for (i, mut t) in types.into_iter().enumerate() {
            t.check(i)?;
            if t.gpus == 0 {
                t.milli = 0;
                t.models.clear();
            }
            t.models.sort();
            t.models.dedup();
            *merged
                .entry((t.cpu_milli, t.gpus, t.milli, t.models))
                .or_default() += t.weight;
        }
        let total: f64 = merged.values().sum();
        if merged.is_empty() || total <= 0.0 {
            return Err(ConfigError::TargetWorkload {
                detail: "no pod type given; name at least one".into(),
            });
        }
        let types: Vec<PodType> = merged
            .into_iter()
            .map(|((cpu_milli, gpus, milli, models), w)| PodType {
                cpu_milli,
                gpus,
                milli,
                models,
                weight: w / total,
            })
            .collect();
        // (GPUs, milli, models) -> (CPU, weight) of each type asking that.
        type Asks = BTreeMap<(u32, u32, Vec<String>), Vec<(u64, f64)>>;
        let mut by_ask: Asks = BTreeMap::new();
        let mut cpu_only = 0.0;
        for t in &types {
            if t.gpus == 0 {
                cpu_only += t.weight;
            } else {
                by_ask
                    .entry((t.gpus, t.milli, t.models.clone()))
                    .or_default()
                    .push((t.cpu_milli, t.weight));
            }
        }
        let groups = by_ask
            .into_iter()
            .map(|((gpus, milli, models), mut list)| {
                list.sort_by_key(|a| a.0);
                let mut cum = 0.0;
                let mut cpu = Vec::with_capacity(list.len());
                let mut cum_weight = Vec::with_capacity(list.len());
                for (c, w) in list {
                    cum += w;
                    cpu.push(c);
                    cum_weight.push(cum);
                }
                Group {
                    gpus,
                    milli,
                    models,
                    cpu,
                    cum_weight,
                    total: cum,
                }
            })
            .collect();
        Ok(TargetWorkload {
            types,
            model_label: DEFAULT_MODEL_LABEL.to_string(),
            groups,
            cpu_only,
        })
    }

    /// FGD's typical pods of `pods` (each pod's `weight` counts; 1 for a
    /// plain count): identical asks counted together, the most frequent kept
    /// until they cover `popularity_pct` % of the total (ties: larger CPU,
    /// then milli, GPUs first, as FGD orders them), weights renormalised.
    pub fn typical(
        pods: impl IntoIterator<Item = PodType>,
        popularity_pct: f64,
    ) -> Result<TargetWorkload, ConfigError> {
        if !(popularity_pct > 0.0 && popularity_pct <= 100.0) {
            return Err(ConfigError::TargetWorkload {
                detail: format!("popularity {popularity_pct} %; accepted: (0, 100]"),
            });
        }
        let mut counts: BTreeMap<(u64, u32, u32, Vec<String>), f64> = BTreeMap::new();
        for (i, mut p) in pods.into_iter().enumerate() {
            p.check(i)?;
            if p.gpus == 0 {
                p.milli = 0;
                p.models.clear();
            }
            p.models.sort();
            p.models.dedup();
            *counts
                .entry((p.cpu_milli, p.gpus, p.milli, p.models))
                .or_default() += p.weight;
        }
        let total: f64 = counts.values().sum();
        let mut list: Vec<_> = counts.into_iter().collect();
        list.sort_by(|a, b| {
            let key = |k: &(u64, u32, u32, Vec<String>)| (k.0, k.2, k.1, k.3.clone());
            b.1.total_cmp(&a.1).then_with(|| key(&b.0).cmp(&key(&a.0)))
        });
        let mut covered = 0.0;
        let mut kept = Vec::new();
        for ((cpu_milli, gpus, milli, models), weight) in list {
            if covered * 100.0 >= popularity_pct * total {
                break;
            }
            covered += weight;
            kept.push(PodType {
                cpu_milli,
                gpus,
                milli,
                models,
                weight,
            });
        }
        TargetWorkload::new(kept)
    }

    /// The same workload, reading the GPU model from `key` instead of
    /// [`DEFAULT_MODEL_LABEL`].
    pub fn with_model_label(mut self, key: impl Into<String>) -> TargetWorkload {
        self.model_label = key.into();
        self
    }

    /// The types, merged, with weights summing to 1, in (CPU, GPUs, milli,
    /// models) order.
    pub fn types(&self) -> &[PodType] {
        &self.types
    }

    /// The label key a node's GPU model is read from.
    pub fn model_label(&self) -> &str {
        &self.model_label
    }

    /// The node's fragmentation in milli-GPU (see the module docs).
    pub fn fragmentation(&self, node: &NodeFree<'_>) -> f64 {
        self.measure(node.cpu_milli, node.gpu_milli, |i| {
            let models = &self.groups[i].models;
            models.is_empty() || node.model.is_some_and(|m| models.iter().any(|x| x == m))
        })
    }

    /// The GPU models each group of types allows (empty: any), in the
    /// group order [`TargetWorkload::measure`]'s `allowed` is asked in. A
    /// caller that keys models its own way (the simulator's bit masks)
    /// translates these once.
    pub fn group_models(&self) -> impl ExactSizeIterator<Item = &[String]> + '_ {
        self.groups.iter().map(|g| g.models.as_slice())
    }

    /// The measure for a node with `cpu_milli` free CPU and `gpu_milli`
    /// free per GPU, `allowed(i)` saying whether the node's model is one
    /// group `i` may use ([`TargetWorkload::group_models`]).
    pub fn measure(
        &self,
        cpu_milli: i64,
        gpu_milli: &[u32],
        allowed: impl Fn(usize) -> bool,
    ) -> f64 {
        let total_free: u32 = gpu_milli.iter().map(|&g| g.min(1000)).sum();
        if total_free == 0 {
            return 0.0;
        }
        let g = f64::from(total_free);
        let mut frag = self.cpu_only * g;
        for (i, group) in self.groups.iter().enumerate() {
            if !allowed(i) {
                frag += group.total * g;
                continue;
            }
            let mut fit = 0u32;
            let mut stranded = 0u32;
            for &left in gpu_milli {
                let left = left.min(1000);
                if left >= group.milli {
                    fit += 1;
                } else {
                    stranded += left;
                }
            }
            if fit < group.gpus {
                frag += group.total * g;
                continue;
            }
            let n = if cpu_milli < 0 {
                0
            } else {
                group.cpu.partition_point(|&c| c <= cpu_milli as u64)
            };
            let fits = if n == 0 { 0.0 } else { group.cum_weight[n - 1] };
            frag += fits * f64::from(stranded) + (group.total - fits) * g;
        }
        frag
    }
}

/// A target workload compiled against one snapshot's interned labels, for
/// one decision: what the filter (a share's GPU) and the score read.
pub(crate) struct Compiled {
    workload: Arc<TargetWorkload>,
    /// The model label key, if any node has it.
    key: Option<Sym>,
    /// Per group of types: `None` any model, else the allowed values that
    /// some node carries (a value no node carries matches none).
    groups: Vec<Option<Vec<Sym>>>,
}

/// A node as the measure reads it: free milli per GPU index, free CPU, model.
pub(crate) struct NodeState {
    pub(crate) free: [u32; 32],
    pub(crate) len: usize,
    pub(crate) cpu_milli: i64,
    model: Option<Sym>,
}

impl Compiled {
    pub(crate) fn new(snapshot: &Snapshot, workload: Arc<TargetWorkload>) -> Compiled {
        let strings = &snapshot.strings;
        let key = strings.get(workload.model_label());
        let groups = workload
            .groups
            .iter()
            .map(|g| {
                (!g.models.is_empty())
                    .then(|| g.models.iter().filter_map(|m| strings.get(m)).collect())
            })
            .collect();
        Compiled {
            workload,
            key,
            groups,
        }
    }

    /// The node's free GPU milli (held GPUs 0, shared ones what is left),
    /// free CPU and model.
    pub(crate) fn state(&self, node: &Node, hot: &Hot) -> NodeState {
        let model = self.key.and_then(|key| {
            node.labels
                .binary_search_by_key(&key, |(k, _)| *k)
                .ok()
                .map(|i| node.labels[i].1)
        });
        let mut free = [0u32; 32];
        let len = (32 - hot.present.leading_zeros()) as usize;
        for (g, slot) in free.iter_mut().enumerate().take(len) {
            let bit = 1u32 << g;
            if hot.present & bit != 0 && hot.held & bit == 0 {
                *slot = 1000u32.saturating_sub(node.gpus.shared_use(g as u32).milli);
            }
        }
        NodeState {
            free,
            len,
            cpu_milli: hot.free_cpu_milli,
            model,
        }
    }

    /// The measure of `state`'s node with `free` GPU milli and `cpu_milli` CPU.
    pub(crate) fn measure(&self, state: &NodeState, cpu_milli: i64, free: &[u32]) -> f64 {
        self.workload
            .measure(cpu_milli, free, |i| match &self.groups[i] {
                None => true,
                Some(values) => state.model.is_some_and(|m| values.contains(&m)),
            })
    }
}

/// The score's fragmentation part for a change of `delta` milli-GPU in a
/// node's measure: `1 / (1 + e^{delta/1000})`, 0.5 for no change.
pub fn part(delta: f64) -> f64 {
    1.0 / (1.0 + (delta / 1000.0).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free<'a>(cpu: i64, gpus: &'a [u32]) -> NodeFree<'a> {
        NodeFree {
            cpu_milli: cpu,
            model: None,
            gpu_milli: gpus,
        }
    }

    #[test]
    fn a_half_gpu_workload_strands_small_remainders() {
        let w = TargetWorkload::new([PodType::new(1000, 1, 500)]).unwrap();
        assert_eq!(w.fragmentation(&free(10_000, &[300, 600])), 300.0);
        assert_eq!(w.fragmentation(&free(0, &[300, 600])), 900.0);
        assert_eq!(w.fragmentation(&free(10_000, &[0, 0])), 0.0);
    }

    #[test]
    fn typical_keeps_the_popular_types_and_renormalises() {
        let mut pods = vec![PodType::new(1000, 1, 1000); 90];
        pods.extend(vec![PodType::new(2000, 8, 1000); 6]);
        pods.extend(vec![PodType::new(3000, 0, 0); 4]);
        let w = TargetWorkload::typical(pods.clone(), 95.0).unwrap();
        // 90 % then 96 %: the 8-GPU type is kept, the CPU-only one is not.
        assert_eq!(w.types().len(), 2);
        let sum: f64 = w.types().iter().map(|t| t.weight).sum();
        assert!((sum - 1.0).abs() < 1e-12);
        let w = TargetWorkload::typical(pods, 90.0).unwrap();
        assert_eq!(w.types().len(), 1);
    }

    #[test]
    fn bad_types_are_rejected_with_what_is_accepted() {
        let mut t = PodType::new(1000, 2, 500);
        let e = TargetWorkload::new([t.clone()]).unwrap_err();
        assert!(e.to_string().contains("share"), "{e}");
        t.gpus = 1;
        t.weight = 0.0;
        let e = TargetWorkload::new([t]).unwrap_err();
        assert!(e.to_string().contains("> 0"), "{e}");
        assert!(TargetWorkload::new([]).is_err());
    }
}
