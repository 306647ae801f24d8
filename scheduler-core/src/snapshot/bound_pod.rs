//! The pods bound to a snapshot's nodes, and the share of a GPU a
//! `gpu-share` pod holds.

use super::NodeId;
use crate::pod_constraints::PodConstraints;
use crate::resources::Resources;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_api::{GpuRequest, WorkloadKind};
use std::sync::Arc;

/// A pod bound to a node, as far as the decision needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundPod {
    pub namespace: String,
    pub name: String,
    pub node: NodeId,
    /// Effective requests, counted against the node's allocatable.
    pub requests: Resources,
    /// GPUs held whole (bit i = GPU i).
    pub gpus: u32,
    /// Part of `gpus` charged as stand-ins: the pod holds that many GPUs
    /// more, but neither its record nor its node says which.
    pub stand_in: u32,
    /// Part of one GPU held under `gpu-share`.
    pub shared: Option<SharedHold>,
    /// The pod's GPU request; `None` when its annotations could not be read
    /// (the snapshot's warnings say why).
    pub request: Option<GpuRequest>,
    /// `spec.priority`; 0 when unset.
    pub priority: i32,
    /// `status.startTime`, for preemption's cost of lost work.
    pub start_time: Option<Timestamp>,
    /// Labels, host ports, inter-pod affinity and spread.
    pub constraints: Arc<PodConstraints>,
    /// `metadata.deletionTimestamp` is set: topology spread does not count
    /// it (kube-scheduler's PodTopologySpread skips terminating pods);
    /// everything else still does, as it still runs.
    pub terminating: bool,
}

impl BoundPod {
    pub fn workload(&self) -> Option<WorkloadKind> {
        self.request.as_ref().and_then(|r| r.workload)
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A shared pod's part of one GPU, in both measures the scheduler tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SharedHold {
    pub gpu: u32,
    /// Thousandths of the GPU.
    pub milli: u32,
    /// MiB of the GPU's memory (0 when the GPU's memory is unknown and the
    /// share was a fraction).
    pub memory_mib: u64,
}

/// One GPU's shared use: the sum of the shares of the pods on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedUse {
    pub milli: u32,
    pub memory_mib: u64,
    pub pods: u32,
}

impl SharedUse {
    /// Counts one more pod's hold. Saturating: a bound pod's annotation may
    /// claim more than any GPU has (`gpu-share: 1e18`), and the GPU must
    /// then read as full, not wrap around to nearly free.
    pub(crate) fn add(&mut self, hold: &SharedHold) {
        self.milli = self.milli.saturating_add(hold.milli);
        self.memory_mib = self.memory_mib.saturating_add(hold.memory_mib);
        self.pods = self.pods.saturating_add(1);
    }
}
