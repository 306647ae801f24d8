//! The resource predicate: cpu, memory, ephemeral-storage, pods, the device
//! plugin's GPU count and extended resources against what the node has free.

use super::PodContext;
use crate::snapshot::Hot;
use crate::snapshot::intern::Sym;

impl PodContext<'_> {
    /// A bit per short resource (see [`Rejection::Resources`](super::Rejection::Resources)).
    pub(super) fn short_resources(&self, index: usize, hot: &Hot) -> u64 {
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
    pub(super) fn gpu_count_short(&self, hot: &Hot) -> bool {
        let want = self.pod.requests.gpus;
        want > 0 && want > hot.free_gpu_count
    }
}
