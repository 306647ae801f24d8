//! The GPU predicates: what the pod asks of GPUs, compiled once per decision,
//! and how a node's GPUs fit it (a whole-GPU set, or a share of one GPU).

use super::{PodContext, Rejection};
use crate::gpuset::{NoFitReason, Picker, SetPick, SetRequest};
use crate::pod::PendingPod;
use crate::snapshot::{Hot, Node, Snapshot, share_amounts};
use gputopo_api::{GpuShare, LinkClass};

/// How a node fits, for the score and the decision.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fit {
    /// The pod wants no GPU.
    NoGpu,
    /// A whole-GPU set chosen on a node of known topology: what the score
    /// reads of the [`SetPick`] (the full pick, for an explanation, is
    /// [`PodContext::full_pick`]; keeping this small keeps it cheap to pass).
    Whole(PickSummary),
    /// Whole GPUs counted rather than chosen: on a node without
    /// `GpuTopology` (the lowest free indices), or, `by_count`, on a node
    /// where which GPUs are free is not known (stand-ins for the count;
    /// the kubelet picks the GPUs).
    WholeUnknown { gpus: u32, by_count: bool },
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
pub(super) enum GpuAsk<'a> {
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

impl<'a> GpuAsk<'a> {
    /// The pod's GPU ask, and the best bottleneck rank any shape offers its
    /// whole-GPU request on an empty node (0 without one).
    pub(super) fn compile(snapshot: &'a Snapshot, pod: &PendingPod) -> (GpuAsk<'a>, u32) {
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
        (gpu, cluster_best_rank)
    }
}

impl PodContext<'_> {
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

    pub(super) fn fit_gpus(&self, index: usize, hot: &Hot) -> Result<Fit, Rejection> {
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
                        count_fit(request, hot, single_numa, Rejection::UnknownTopology)
                    }
                    _ if hot.uncertain => {
                        count_fit(request, hot, single_numa, Rejection::UncertainGpus)
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
}

/// A whole-GPU fit by count alone: the lowest free indices, on a node whose
/// GPUs cannot be told apart (no `GpuTopology`) or whose free ones are not
/// known (`by_count`). What only a known set could vouch for is refused
/// with `refuse`.
fn count_fit(
    request: &SetRequest,
    hot: &Hot,
    single_numa: bool,
    refuse: fn(&'static str) -> Rejection,
) -> Result<Fit, Rejection> {
    if request.min_nvlink_level.is_some_and(|l| l > 0) {
        return Err(refuse("min-nvlink-level"));
    }
    if request.min_memory_mib.is_some() {
        return Err(refuse("gpu-memory"));
    }
    if single_numa {
        return Err(refuse("single-numa-node placement"));
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
    Ok(Fit::WholeUnknown {
        gpus,
        by_count: hot.uncertain,
    })
}
