//! The keep-GPUs-free part: a pod that asks no GPU (a Ray head, an MPI
//! launcher, a JobSet driver) goes to a node without GPUs when one fits,
//! so that GPU nodes keep their cpu, memory and pod slots for the pods
//! that need their GPUs.
//!
//! A node scores
//!
//! * 1 without GPUs;
//! * `0.5·(1 − f / F)` with GPUs, `f` its GPUs free (neither held whole,
//!   shared nor reserved), `F` the most GPUs any node of the cluster has:
//!   0 for the largest GPU node with every GPU free, 0.5 for a GPU node
//!   whose GPUs are all in use. Such a node's GPUs are not kept free by
//!   avoiding it, so it comes before GPU nodes with free GPUs; but not as
//!   high as a node without GPUs, since its GPUs come free when their pods
//!   end and this pod (a head lives as long as its cluster) may still hold
//!   the room they need. Free GPUs are counted, not a share of the node's,
//!   so that a small GPU node comes before a large one as free.
//!
//! It applies to pods asking no whole GPU, no share, no MIG slice and no
//! ResourceClaim, that name no `preferred-domain` (the pod has said where
//! it wants to be), on clusters with nodes both with and without GPUs (on
//! a cluster of GPU nodes alone, every node is a GPU node and the other
//! parts decide as before).

use crate::filter::PodContext;
use crate::snapshot::Hot;

/// The part for one pod: one multiplication per node.
pub(super) struct KeepGpusFree {
    /// `1 / F`, the most GPUs a node of the cluster has.
    per_gpu: f64,
}

impl KeepGpusFree {
    /// `None` where the part does not apply (see the module docs) or its
    /// weight is 0.
    pub(super) fn of(ctx: &PodContext<'_>, weight: u32) -> Option<KeepGpusFree> {
        let pod = ctx.pod;
        let asks_gpus = ctx.wants_whole_gpus()
            || ctx.wants_shared_gpu()
            || pod.requests.wants_mig()
            || pod.resource_claims;
        let signals = ctx.snapshot.signals;
        if weight == 0
            || asks_gpus
            || pod.request.preferred_domain.is_some()
            || !(signals.gpu_nodes && signals.gpuless_nodes)
        {
            return None;
        }
        Some(KeepGpusFree {
            per_gpu: 1.0 / f64::from(signals.most_gpus.max(1)),
        })
    }

    /// The node's value, 0–1.
    #[inline]
    pub(super) fn value(&self, hot: &Hot) -> f64 {
        if hot.kind == Hot::NONE {
            return 1.0;
        }
        let free = if hot.present != 0 {
            (hot.present & !hot.held & !hot.shared_mask).count_ones()
        } else {
            // A `GpuTopology` that cannot be read lists no GPU: its count.
            hot.free_gpu_count.clamp(0, i64::from(u32::MAX)) as u32
        };
        gpu_node_value(free, self.per_gpu)
    }
}

/// A GPU node's value with `free` GPUs free: `0.5·(1 − free / F)`.
fn gpu_node_value(free: u32, per_gpu: f64) -> f64 {
    0.5 * (1.0 - (f64::from(free) * per_gpu).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::gpu_node_value;

    #[test]
    fn a_gpu_node_scores_below_one_the_fewer_gpus_free_the_higher() {
        let per_gpu = 1.0 / 8.0;
        assert_eq!(gpu_node_value(8, per_gpu), 0.0, "the largest, all free");
        assert_eq!(gpu_node_value(0, per_gpu), 0.5, "all in use");
        let four = gpu_node_value(4, per_gpu);
        assert!(0.0 < four && four < 0.5, "{four}");
        assert!(gpu_node_value(2, per_gpu) > four);
        // More free than the largest node lists (a count): never below 0.
        assert_eq!(gpu_node_value(9, per_gpu), 0.0);
    }
}
