//! A rejection as the hot path recorded it ([`Rejection`], `Copy`) resolved
//! into the typed [`FilterReason`] a message or an explanation shows: only
//! for the nodes whose reason is wanted, reading the snapshot and the
//! compiled pod again.

use super::gpu::GpuAsk;
use super::{FilterReason, PodContext, Rejection, Shortfall};
use crate::resources;
use crate::selector::{Taint, TaintEffect};
use crate::snapshot::intern::Sym;
use crate::snapshot::{GpuKind, NodeId};

impl PodContext<'_> {
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
            Rejection::NodeFeatures(missing) => FilterReason::NodeFeatures(missing),
            Rejection::HostPorts => FilterReason::HostPorts(self.taken_ports(node_id.0 as usize)),
            Rejection::Spread(r) => FilterReason::TopologySpread(r),
            Rejection::InterPod(r) => FilterReason::InterPodAffinity(r),
            Rejection::Volume(refusal) => FilterReason::Volume {
                refusal,
                claim: self.refused_claim().to_string(),
            },
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
            Rejection::UncertainGpus(needs) => FilterReason::UncertainGpus {
                needs,
                holders: self.snapshot.stand_in_holders(node_id),
            },
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
