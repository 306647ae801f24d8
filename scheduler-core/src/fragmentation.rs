//! GPU fragmentation against a target workload: the measure of FGD
//! (Weng et al., "Beware of Fragmentation", USENIX ATC'23, §3), for the
//! score's fragmentation part.
//!
//! # The target workload
//!
//! The operator describes the pods the cluster is expected to run
//! ([`TargetWorkload`], configuration: `crate::config::target_workload`);
//! this module measures nodes against it.
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

use crate::config::TargetWorkload;
use crate::snapshot::intern::Sym;
use crate::snapshot::{Hot, Node, Snapshot};
use std::sync::Arc;

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
    use crate::config::PodType;

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
}
