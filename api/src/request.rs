//! A pod's GPU request: the `nvidia.com/gpu` limit plus the `gputopo.dev/`
//! annotations (docs/contract/pod-requests.md, "What a pod asks for"), parsed
//! into one typed value.
//!
//! A bad value is a [`RequestError`] naming the key and the accepted forms; it is
//! never replaced by a default.

mod annotations;
pub mod gang;
pub mod structure;

use crate::keys::{RESOURCE_GPU, RESOURCE_GPU_AMD, pod as key};
use crate::quantity;
use annotations::{
    ACCEPT_BOOL, ACCEPT_COLLECTIVE, ACCEPT_COUNT, ACCEPT_DOMAIN, ACCEPT_NVLINK, ACCEPT_STRATEGY,
    ACCEPT_TIME, ACCEPT_WORKLOAD, Annotations, KNOWN_KEYS, bad, is_label_value, parse_bandwidth,
    parse_share, parse_u32,
};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::fmt;

/// What the chosen GPU set is optimised for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Collective {
    /// The weakest hop of the best ring through the set (NCCL all-reduce).
    #[default]
    Ring,
    /// The weakest pair of the set (all-to-all, expert parallelism).
    AllToAll,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// Wants isolation and contiguous sets.
    Training,
    /// Packs by memory.
    Inference,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PlacementStrategy {
    /// Pack a job's pods into the fewest domains.
    Consolidated,
    /// Spread them.
    Distributed,
    #[default]
    Balanced,
}

/// Part of one GPU, shared with other such pods (time-slicing or MPS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuShare {
    /// Thousandths of a GPU, 50..=1000.
    Milli(u32),
    /// An amount of the GPU's memory.
    MemoryMiB(u64),
}

pub use gang::GangRef;
pub use structure::{GangStructure, Rank, SliceLayer, TierKey};

/// Everything a pod asks of the GPU scheduler.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuRequest {
    /// Whole GPUs: the pod's effective `nvidia.com/gpu` (or `amd.com/gpu`)
    /// limit (0 for a shared or CPU-only pod).
    pub gpus: u32,
    /// Whose GPUs: AMD when the limit is on `amd.com/gpu`, else NVIDIA. Only
    /// nodes of that vendor can take the pod.
    pub vendor: crate::GpuVendor,
    /// Hard: every pair of the assigned GPUs joined by at least this many NVLinks.
    pub min_nvlink_level: Option<u32>,
    pub collective: Collective,
    pub workload: Option<WorkloadKind>,
    pub placement_strategy: PlacementStrategy,
    pub preferred_domain: Option<String>,
    /// Hard: per-GPU memory at least this.
    pub gpu_memory_mib: Option<u64>,
    pub latency_sensitive: bool,
    pub gpu_share: Option<GpuShare>,
    pub checkpoint_time: Option<Timestamp>,
    pub expected_completion: Option<Timestamp>,
    /// Soft: the network bandwidth the pod expects, in Mbit/s.
    pub network_bandwidth_mbps: Option<u64>,
    pub gang: Option<GangRef>,
    /// `gputopo.dev/gang-mixed-models`: whether the pod's gang may span GPU
    /// models; `None` leaves it to the scheduler's configuration.
    pub gang_mixed_models: Option<bool>,
    /// Where the pod's gang must or should be, and its slices
    /// (`gputopo.dev/gang-*-topology`, Kueue TAS's `podset-*` annotations).
    pub gang_structure: GangStructure,
    /// The pod's place in its gang, from its controller's indices.
    pub rank: Option<Rank>,
}

/// A pod's GPU request could not be read. Each variant names the key and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("{key}: {value:?} is not valid; accepted: {accepted}")]
    BadValue {
        key: String,
        value: String,
        accepted: &'static str,
    },
    #[error("{key}: {detail}")]
    Inconsistent { key: String, detail: String },
    #[error(
        "{key} is not a gputopo annotation; known keys: {known}",
        known = KNOWN_KEYS.join(", ")
    )]
    UnknownKey { key: String },
    #[error(
        "{alias} and {canonical} are both set, to {alias_value:?} and {canonical_value:?}; set one"
    )]
    ConflictingAlias {
        alias: String,
        canonical: String,
        alias_value: String,
        canonical_value: String,
    },
}

impl RequestError {
    /// The annotation or resource key the error is about.
    pub fn key(&self) -> &str {
        match self {
            RequestError::BadValue { key, .. }
            | RequestError::Inconsistent { key, .. }
            | RequestError::UnknownKey { key } => key,
            RequestError::ConflictingAlias { canonical, .. } => canonical,
        }
    }
}

impl GpuRequest {
    /// Reads the request of a pod.
    pub fn from_pod(pod: &Pod) -> Result<GpuRequest, RequestError> {
        let empty = BTreeMap::new();
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let group = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.as_deref());
        let (nvidia, amd) = match &pod.spec {
            Some(spec) => (
                effective_gpu_limit(&spec.containers, spec.init_containers.as_deref())?,
                effective_limit_of(
                    RESOURCE_GPU_AMD,
                    &spec.containers,
                    spec.init_containers.as_deref(),
                )?,
            ),
            None => (None, None),
        };
        match (nvidia, amd) {
            (Some(n), Some(a)) if n > 0 && a > 0 => Err(RequestError::Inconsistent {
                key: format!("resources.limits.{RESOURCE_GPU_AMD}"),
                detail: format!(
                    "the pod asks {n} {RESOURCE_GPU} and {a} {RESOURCE_GPU_AMD}; one pod's GPUs come from one vendor, so ask one of them"
                ),
            }),
            (nvidia, Some(a)) if a > 0 || nvidia.is_none() => {
                let mut req = GpuRequest::parse_with_group(Some(a), annotations, labels, group)?;
                req.vendor = crate::GpuVendor::Amd;
                Ok(req)
            }
            (nvidia, _) => GpuRequest::parse_with_group(nvidia, annotations, labels, group),
        }
    }

    /// Reads a request from its parts: the effective `nvidia.com/gpu` limit (None when
    /// the pod sets none), the pod's annotations and labels.
    pub fn parse(
        gpu_limit: Option<u32>,
        annotations: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
    ) -> Result<GpuRequest, RequestError> {
        GpuRequest::parse_with_group(gpu_limit, annotations, labels, None)
    }

    /// [`GpuRequest::parse`], with the pod's `spec.schedulingGroup.podGroupName`.
    pub fn parse_with_group(
        gpu_limit: Option<u32>,
        annotations: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
        scheduling_group: Option<&str>,
    ) -> Result<GpuRequest, RequestError> {
        let a = Annotations::new(annotations)?;
        check_gpu_count(&a, gpu_limit)?;
        let mut req = GpuRequest {
            gpus: gpu_limit.unwrap_or(0),
            ..GpuRequest::default()
        };
        req.read_choice(&a)?;
        req.read_share(&a)?;
        req.read_run(&a)?;
        req.read_gang(&a, labels, annotations, scheduling_group)?;
        Ok(req)
    }

    /// What decides the GPU set and the node: NVLink floor, collective,
    /// workload, placement strategy, preferred domain, per-GPU memory,
    /// latency sensitivity.
    fn read_choice(&mut self, a: &Annotations<'_>) -> Result<(), RequestError> {
        if let Some((k, v)) = a.get(key::MIN_NVLINK_LEVEL) {
            let digits = v.strip_prefix("NV").unwrap_or(v);
            self.min_nvlink_level = Some(
                parse_u32(k, digits, ACCEPT_NVLINK, 1..=64)
                    .map_err(|_| bad(k, v, ACCEPT_NVLINK))?,
            );
        }
        if let Some((k, v)) = a.get(key::COLLECTIVE) {
            self.collective = match v {
                "ring" => Collective::Ring,
                "all-to-all" => Collective::AllToAll,
                _ => return Err(bad(k, v, ACCEPT_COLLECTIVE)),
            };
        }
        if let Some((k, v)) = a.get(key::WORKLOAD) {
            self.workload = Some(match v {
                "training" => WorkloadKind::Training,
                "inference" => WorkloadKind::Inference,
                _ => return Err(bad(k, v, ACCEPT_WORKLOAD)),
            });
        }
        if let Some((k, v)) = a.get(key::PLACEMENT_STRATEGY) {
            self.placement_strategy = match v {
                "consolidated" => PlacementStrategy::Consolidated,
                "distributed" => PlacementStrategy::Distributed,
                "balanced" => PlacementStrategy::Balanced,
                _ => return Err(bad(k, v, ACCEPT_STRATEGY)),
            };
        }
        if let Some((k, v)) = a.get(key::PREFERRED_DOMAIN) {
            if !is_label_value(v) {
                return Err(bad(k, v, ACCEPT_DOMAIN));
            }
            self.preferred_domain = Some(v.to_string());
        }
        if let Some((k, v)) = a.get(key::GPU_MEMORY) {
            let mib = quantity::parse_mib(v).map_err(|_| bad(k, v, quantity::ACCEPTED_MEMORY))?;
            if mib == 0 {
                return Err(bad(k, v, quantity::ACCEPTED_MEMORY));
            }
            self.gpu_memory_mib = Some(mib);
        }
        if let Some((k, v)) = a.get(key::LATENCY_SENSITIVE) {
            self.latency_sensitive = match v {
                "true" => true,
                "false" => false,
                _ => return Err(bad(k, v, ACCEPT_BOOL)),
            };
        }
        Ok(())
    }

    /// A share of one GPU instead of whole GPUs.
    fn read_share(&mut self, a: &Annotations<'_>) -> Result<(), RequestError> {
        if let Some((k, v)) = a.get(key::GPU_SHARE) {
            self.gpu_share = Some(parse_share(k, v)?);
            if self.gpus > 1 {
                return Err(RequestError::Inconsistent {
                    key: k.to_string(),
                    detail: format!(
                        "a shared pod takes part of one GPU, but the pod's {RESOURCE_GPU} limit is {}; use a limit of 0 or 1 with {k}",
                        self.gpus
                    ),
                });
            }
            // A shared pod holds no GPU whole, whatever its time-slicing replica limit says.
            self.gpus = 0;
        }
        Ok(())
    }

    /// What the pod says about its run, for preemption's cost and the
    /// network score: checkpoint time, expected completion, bandwidth.
    fn read_run(&mut self, a: &Annotations<'_>) -> Result<(), RequestError> {
        if let Some((k, v)) = a.get(key::CHECKPOINT_TIME) {
            self.checkpoint_time = Some(v.parse().map_err(|_| bad(k, v, ACCEPT_TIME))?);
        }
        if let Some((k, v)) = a.get(key::EXPECTED_COMPLETION) {
            self.expected_completion = Some(v.parse().map_err(|_| bad(k, v, ACCEPT_TIME))?);
        }
        if let Some((k, v)) = a.get(key::NETWORK_BANDWIDTH) {
            self.network_bandwidth_mbps = Some(parse_bandwidth(k, v)?);
        }
        Ok(())
    }

    /// The gang the pod belongs to (declared or derived), and whether it may
    /// span GPU models.
    fn read_gang(
        &mut self,
        a: &Annotations<'_>,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        scheduling_group: Option<&str>,
    ) -> Result<(), RequestError> {
        self.gang = gang::parse(&gang::GangFields {
            scheduling_group,
            gang: a.get(key::GANG),
            size: a.get(key::GANG_SIZE),
            derive: a.get(key::DERIVE_GANG),
            labels,
            annotations,
        })?;
        if let Some((k, v)) = a.get(key::GANG_MIXED_MODELS) {
            self.gang_mixed_models = Some(match v {
                "true" => true,
                "false" => false,
                _ => return Err(bad(k, v, ACCEPT_BOOL)),
            });
        }
        self.gang_structure = structure::parse(annotations)?;
        self.rank = structure::rank(labels, annotations)?;
        Ok(())
    }

    /// Whether the pod asks the GPU scheduler for anything at all.
    pub fn wants_gpus(&self) -> bool {
        self.gpus > 0 || self.gpu_share.is_some()
    }
}

/// `gputopo.dev/gpu-count`, when set, must equal the `nvidia.com/gpu` limit:
/// the limit is what the kubelet grants.
fn check_gpu_count(a: &Annotations<'_>, gpu_limit: Option<u32>) -> Result<(), RequestError> {
    if let Some((k, v)) = a.get(key::GPU_COUNT) {
        let n = parse_u32(k, v, ACCEPT_COUNT, 0..=1024)?;
        match gpu_limit {
            Some(limit) if limit == n => {}
            Some(limit) => {
                return Err(RequestError::Inconsistent {
                    key: k.to_string(),
                    detail: format!(
                        "says {n} GPUs but the pod's {RESOURCE_GPU} limit is {limit}; the limit is what the kubelet grants, so make them equal or drop the annotation"
                    ),
                });
            }
            None if n == 0 => {}
            None => {
                return Err(RequestError::Inconsistent {
                    key: k.to_string(),
                    detail: format!(
                        "says {n} GPUs but the pod sets no {RESOURCE_GPU} limit; set resources.limits.{RESOURCE_GPU}: {n}"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The pod's effective `nvidia.com/gpu` limit, as the kubelet computes effective
/// requests: the larger of the containers' sum and the largest init container.
pub fn effective_gpu_limit(
    containers: &[Container],
    init_containers: Option<&[Container]>,
) -> Result<Option<u32>, RequestError> {
    effective_limit_of(RESOURCE_GPU, containers, init_containers)
}

/// [`effective_gpu_limit`] of any GPU resource (`amd.com/gpu`).
pub fn effective_limit_of(
    resource: &str,
    containers: &[Container],
    init_containers: Option<&[Container]>,
) -> Result<Option<u32>, RequestError> {
    let limit_of = |c: &Container| -> Result<Option<u32>, RequestError> {
        let q: Option<&Quantity> = c
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(resource));
        match q {
            None => Ok(None),
            Some(q) => parse_u32(
                &format!("containers[{}].resources.limits.{resource}", c.name),
                &q.0,
                ACCEPT_COUNT,
                0..=1024,
            )
            .map(Some),
        }
    };
    let mut any = false;
    let mut sum = 0u32;
    for c in containers {
        if let Some(n) = limit_of(c)? {
            any = true;
            sum = sum.saturating_add(n);
        }
    }
    let mut init_max = 0u32;
    for c in init_containers.unwrap_or(&[]) {
        if let Some(n) = limit_of(c)? {
            any = true;
            init_max = init_max.max(n);
        }
    }
    Ok(any.then_some(sum.max(init_max)))
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Collective::Ring => "ring",
            Collective::AllToAll => "all-to-all",
        })
    }
}

#[cfg(test)]
mod tests;
