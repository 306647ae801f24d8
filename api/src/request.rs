//! A pod's GPU request: the `nvidia.com/gpu` limit plus the `gputopo.dev/`
//! annotations (docs/contract.md, "What a pod asks for"), parsed into one typed value.
//!
//! A bad value is a [`RequestError`] naming the key and the accepted forms; it is
//! never replaced by a default.

use crate::keys::{RESOURCE_GPU, RESOURCE_GPU_AMD, pod as key};
use crate::quantity;
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

pub use crate::gang::GangRef;

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

const KNOWN_KEYS: [&str; 18] = [
    key::MIN_NVLINK_LEVEL,
    key::COLLECTIVE,
    key::WORKLOAD,
    key::PLACEMENT_STRATEGY,
    key::PREFERRED_DOMAIN,
    key::GPU_MEMORY,
    key::LATENCY_SENSITIVE,
    key::GPU_SHARE,
    key::CHECKPOINT_TIME,
    key::EXPECTED_COMPLETION,
    key::NETWORK_BANDWIDTH,
    key::GPU_COUNT,
    key::GANG,
    key::GANG_SIZE,
    key::GANG_MIXED_MODELS,
    key::DERIVE_GANG,
    key::ASSIGNED_GPUS,
    key::ASSIGNED_GPU_UUIDS,
];

const ACCEPT_NVLINK: &str = "an NVLink count 1..=64, as `8` or `NV8`";
const ACCEPT_COLLECTIVE: &str = "ring | all-to-all";
const ACCEPT_WORKLOAD: &str = "training | inference";
const ACCEPT_STRATEGY: &str = "consolidated | distributed | balanced";
const ACCEPT_BOOL: &str = "true | false";
const ACCEPT_SHARE: &str =
    "a fraction of one GPU from 0.05 to 1 (e.g. 0.25), or a memory quantity (e.g. 15Gi)";
const ACCEPT_TIME: &str = "an RFC 3339 time such as 2026-11-21T08:00:00Z";
const ACCEPT_BANDWIDTH: &str =
    "a bit rate such as 100Gbps, 400G, 800Mbps (a bare number is Gbit/s)";
const ACCEPT_COUNT: &str = "a whole number of GPUs, 0..=1024";
const ACCEPT_DOMAIN: &str =
    "a label value: 1-63 characters of [A-Za-z0-9._-], alphanumeric at both ends";

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
        let mut req = GpuRequest {
            gpus: gpu_limit.unwrap_or(0),
            ..GpuRequest::default()
        };

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
        if let Some((k, v)) = a.get(key::MIN_NVLINK_LEVEL) {
            let digits = v.strip_prefix("NV").unwrap_or(v);
            req.min_nvlink_level = Some(
                parse_u32(k, digits, ACCEPT_NVLINK, 1..=64)
                    .map_err(|_| bad(k, v, ACCEPT_NVLINK))?,
            );
        }
        if let Some((k, v)) = a.get(key::COLLECTIVE) {
            req.collective = match v {
                "ring" => Collective::Ring,
                "all-to-all" => Collective::AllToAll,
                _ => return Err(bad(k, v, ACCEPT_COLLECTIVE)),
            };
        }
        if let Some((k, v)) = a.get(key::WORKLOAD) {
            req.workload = Some(match v {
                "training" => WorkloadKind::Training,
                "inference" => WorkloadKind::Inference,
                _ => return Err(bad(k, v, ACCEPT_WORKLOAD)),
            });
        }
        if let Some((k, v)) = a.get(key::PLACEMENT_STRATEGY) {
            req.placement_strategy = match v {
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
            req.preferred_domain = Some(v.to_string());
        }
        if let Some((k, v)) = a.get(key::GPU_MEMORY) {
            let mib = quantity::parse_mib(v).map_err(|_| bad(k, v, quantity::ACCEPTED_MEMORY))?;
            if mib == 0 {
                return Err(bad(k, v, quantity::ACCEPTED_MEMORY));
            }
            req.gpu_memory_mib = Some(mib);
        }
        if let Some((k, v)) = a.get(key::LATENCY_SENSITIVE) {
            req.latency_sensitive = match v {
                "true" => true,
                "false" => false,
                _ => return Err(bad(k, v, ACCEPT_BOOL)),
            };
        }
        if let Some((k, v)) = a.get(key::GPU_SHARE) {
            req.gpu_share = Some(parse_share(k, v)?);
            if req.gpus > 1 {
                return Err(RequestError::Inconsistent {
                    key: k.to_string(),
                    detail: format!(
                        "a shared pod takes part of one GPU, but the pod's {RESOURCE_GPU} limit is {}; use a limit of 0 or 1 with {k}",
                        req.gpus
                    ),
                });
            }
            // A shared pod holds no GPU whole, whatever its time-slicing replica limit says.
            req.gpus = 0;
        }
        if let Some((k, v)) = a.get(key::CHECKPOINT_TIME) {
            req.checkpoint_time = Some(v.parse().map_err(|_| bad(k, v, ACCEPT_TIME))?);
        }
        if let Some((k, v)) = a.get(key::EXPECTED_COMPLETION) {
            req.expected_completion = Some(v.parse().map_err(|_| bad(k, v, ACCEPT_TIME))?);
        }
        if let Some((k, v)) = a.get(key::NETWORK_BANDWIDTH) {
            req.network_bandwidth_mbps = Some(parse_bandwidth(k, v)?);
        }
        req.gang = crate::gang::parse(&crate::gang::GangFields {
            scheduling_group,
            gang: a.get(key::GANG),
            size: a.get(key::GANG_SIZE),
            derive: a.get(key::DERIVE_GANG),
            labels,
            annotations,
        })?;
        if let Some((k, v)) = a.get(key::GANG_MIXED_MODELS) {
            req.gang_mixed_models = Some(match v {
                "true" => true,
                "false" => false,
                _ => return Err(bad(k, v, ACCEPT_BOOL)),
            });
        }
        Ok(req)
    }

    /// Whether the pod asks the GPU scheduler for anything at all.
    pub fn wants_gpus(&self) -> bool {
        self.gpus > 0 || self.gpu_share.is_some()
    }
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

/// The pod's `gputopo.dev/` annotations with aliases folded in and unknown keys refused.
struct Annotations<'a> {
    /// canonical key -> (the key the pod used, value)
    values: BTreeMap<&'static str, (&'a str, &'a str)>,
}

impl<'a> Annotations<'a> {
    fn new(all: &'a BTreeMap<String, String>) -> Result<Self, RequestError> {
        let mut values = BTreeMap::new();
        for (k, v) in all {
            let canonical: &'static str = if let Some(c) = KNOWN_KEYS.iter().find(|c| **c == k) {
                c
            } else if let Some((_, c)) = key::ALIASES.iter().find(|(alias, _)| *alias == k) {
                c
            } else if k.starts_with(crate::keys::PREFIX) {
                return Err(RequestError::UnknownKey { key: k.clone() });
            } else {
                continue;
            };
            if let Some((other_key, other_value)) =
                values.insert(canonical, (k.as_str(), v.as_str()))
                && other_value != v
            {
                let (alias, alias_value, canonical_value) = if other_key == canonical {
                    (k.clone(), v.clone(), other_value.to_string())
                } else {
                    (other_key.to_string(), other_value.to_string(), v.clone())
                };
                return Err(RequestError::ConflictingAlias {
                    alias,
                    canonical: canonical.to_string(),
                    alias_value,
                    canonical_value,
                });
            }
        }
        Ok(Annotations { values })
    }

    fn get(&self, canonical: &'static str) -> Option<(&'a str, &'a str)> {
        self.values.get(canonical).map(|(k, v)| (*k, v.trim()))
    }
}

fn bad(key: &str, value: &str, accepted: &'static str) -> RequestError {
    RequestError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        accepted,
    }
}

fn parse_u32(
    key: &str,
    value: &str,
    accepted: &'static str,
    range: std::ops::RangeInclusive<u32>,
) -> Result<u32, RequestError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(key, value, accepted));
    }
    match value.parse::<u32>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(bad(key, value, accepted)),
    }
}

fn parse_share(key: &str, value: &str) -> Result<GpuShare, RequestError> {
    let is_fraction = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if is_fraction {
        // Thousandths, exactly: "0.05" -> 50, "1" -> 1000; finer than 1/1000 is refused.
        let (int, frac) = value.split_once('.').unwrap_or((value, ""));
        if frac.len() > 3 || frac.contains('.') || (int.is_empty() && frac.is_empty()) {
            return Err(bad(key, value, ACCEPT_SHARE));
        }
        let int: u32 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| bad(key, value, ACCEPT_SHARE))?
        };
        let frac_milli: u32 = format!("{frac:0<3}")
            .parse()
            .map_err(|_| bad(key, value, ACCEPT_SHARE))?;
        let milli = int.saturating_mul(1000).saturating_add(frac_milli);
        if !(50..=1000).contains(&milli) {
            return Err(bad(key, value, ACCEPT_SHARE));
        }
        return Ok(GpuShare::Milli(milli));
    }
    match quantity::parse_mib(value) {
        Ok(mib) if mib > 0 => Ok(GpuShare::MemoryMiB(mib)),
        _ => Err(bad(key, value, ACCEPT_SHARE)),
    }
}

fn parse_bandwidth(key: &str, value: &str) -> Result<u64, RequestError> {
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let per_unit_mbps: f64 = match unit {
        "" | "G" | "Gbps" | "Gb/s" => 1_000.0,
        "M" | "Mbps" | "Mb/s" => 1.0,
        "T" | "Tbps" | "Tb/s" => 1_000_000.0,
        _ => return Err(bad(key, value, ACCEPT_BANDWIDTH)),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| bad(key, value, ACCEPT_BANDWIDTH))?;
    let mbps = n * per_unit_mbps;
    if !mbps.is_finite() || mbps <= 0.0 || mbps > 1e9 {
        return Err(bad(key, value, ACCEPT_BANDWIDTH));
    }
    Ok(mbps.ceil() as u64)
}

fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(c))
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
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn parse(limit: Option<u32>, pairs: &[(&str, &str)]) -> Result<GpuRequest, RequestError> {
        GpuRequest::parse(limit, &ann(pairs), &BTreeMap::new())
    }

    #[test]
    fn defaults_without_annotations() {
        let r = parse(Some(4), &[]).unwrap();
        assert_eq!(r.gpus, 4);
        assert_eq!(r.collective, Collective::Ring);
        assert_eq!(r.placement_strategy, PlacementStrategy::Balanced);
        assert!(r.gang.is_none() && r.gpu_share.is_none());
    }

    #[test]
    fn every_annotation_parses() {
        let r = parse(
            Some(8),
            &[
                (key::MIN_NVLINK_LEVEL, "NV12"),
                (key::COLLECTIVE, "all-to-all"),
                (key::WORKLOAD, "training"),
                (key::PLACEMENT_STRATEGY, "consolidated"),
                (key::PREFERRED_DOMAIN, "leaf-1"),
                (key::GPU_MEMORY, "40Gi"),
                (key::LATENCY_SENSITIVE, "false"),
                (key::CHECKPOINT_TIME, "2026-11-21T08:00:00Z"),
                (key::EXPECTED_COMPLETION, "2026-11-21T10:00:00+01:00"),
                (key::NETWORK_BANDWIDTH, "400Gbps"),
                (key::GANG, "job-a"),
                (key::GANG_SIZE, "8"),
            ],
        )
        .unwrap();
        assert_eq!(r.min_nvlink_level, Some(12));
        assert_eq!(r.collective, Collective::AllToAll);
        assert_eq!(r.workload, Some(WorkloadKind::Training));
        assert_eq!(r.placement_strategy, PlacementStrategy::Consolidated);
        assert_eq!(r.preferred_domain.as_deref(), Some("leaf-1"));
        assert_eq!(r.gpu_memory_mib, Some(40 * 1024));
        assert_eq!(r.network_bandwidth_mbps, Some(400_000));
        assert_eq!(
            r.expected_completion.unwrap().as_second() - r.checkpoint_time.unwrap().as_second(),
            3600
        );
        assert_eq!(
            r.gang,
            Some(GangRef::Annotation {
                name: "job-a".into(),
                size: 8
            })
        );
        assert_eq!(
            parse(Some(2), &[(key::MIN_NVLINK_LEVEL, "8")])
                .unwrap()
                .min_nvlink_level,
            Some(8)
        );
    }

    #[test]
    fn gpu_share_forms() {
        let r = parse(Some(1), &[(key::GPU_SHARE, "0.25")]).unwrap();
        assert_eq!((r.gpus, r.gpu_share), (0, Some(GpuShare::Milli(250))));
        let r = parse(None, &[(key::GPU_SHARE, "15Gi")]).unwrap();
        assert_eq!(r.gpu_share, Some(GpuShare::MemoryMiB(15 * 1024)));
        assert_eq!(
            parse(None, &[(key::GPU_SHARE, "1")]).unwrap().gpu_share,
            Some(GpuShare::Milli(1000))
        );
        assert_eq!(
            parse(None, &[(key::GPU_SHARE, ".05")]).unwrap().gpu_share,
            Some(GpuShare::Milli(50))
        );
        assert!(
            parse(None, &[(key::GPU_SHARE, "0.25")])
                .unwrap()
                .wants_gpus()
        );
    }

    #[test]
    fn seed_aliases_are_accepted() {
        let r = parse(
            Some(4),
            &[
                ("topology.scheduler/gpu-count", "4"),
                ("topology.scheduler/preferred-domain", "leaf-2"),
                ("topology.scheduler/placement-strategy", "distributed"),
                ("topology.scheduler/latency-sensitive", "true"),
                ("topology.scheduler/network-bandwidth", "100"),
            ],
        )
        .unwrap();
        assert_eq!(r.preferred_domain.as_deref(), Some("leaf-2"));
        assert_eq!(r.placement_strategy, PlacementStrategy::Distributed);
        assert!(r.latency_sensitive);
        assert_eq!(r.network_bandwidth_mbps, Some(100_000));
        // The same value under both keys is fine.
        parse(
            Some(4),
            &[
                (key::PREFERRED_DOMAIN, "a"),
                ("topology.scheduler/preferred-domain", "a"),
            ],
        )
        .unwrap();
    }

    /// Every malformed annotation gives its typed error naming the key and the accepted forms.
    #[test]
    fn bad_values_name_key_and_accepted_forms() {
        let cases: &[(&str, &str, &str)] = &[
            (key::MIN_NVLINK_LEVEL, "NV0", "NV8"),
            (key::MIN_NVLINK_LEVEL, "eight", "NV8"),
            (key::MIN_NVLINK_LEVEL, "NV99", "NV8"),
            (key::COLLECTIVE, "star", "ring | all-to-all"),
            (key::COLLECTIVE, "Ring", "ring | all-to-all"),
            (key::WORKLOAD, "batch", "training | inference"),
            (key::PLACEMENT_STRATEGY, "spread", "consolidated"),
            (key::PREFERRED_DOMAIN, "leaf 1", "label value"),
            (key::PREFERRED_DOMAIN, "-leaf", "label value"),
            (key::GPU_MEMORY, "40GB", "40Gi"),
            (key::GPU_MEMORY, "0", "40Gi"),
            (key::LATENCY_SENSITIVE, "yes", "true | false"),
            (key::GPU_SHARE, "0.01", "0.05 to 1"),
            (key::GPU_SHARE, "1.5", "0.05 to 1"),
            (key::GPU_SHARE, "0.0001", "0.05 to 1"),
            (key::GPU_SHARE, "half", "0.05 to 1"),
            (key::CHECKPOINT_TIME, "yesterday", "RFC 3339"),
            (key::EXPECTED_COMPLETION, "2026-13-01T00:00:00Z", "RFC 3339"),
            (key::NETWORK_BANDWIDTH, "fast", "bit rate"),
            (key::NETWORK_BANDWIDTH, "-5G", "bit rate"),
            (
                "topology.scheduler/placement-strategy",
                "packed",
                "consolidated",
            ),
        ];
        for (k, v, accepted) in cases {
            let e = parse(Some(1), &[(k, v)]).unwrap_err();
            assert_eq!(e.key(), *k, "{e}");
            let msg = e.to_string();
            assert!(msg.contains(k) && msg.contains(accepted), "{k}={v}: {msg}");
            assert!(matches!(e, RequestError::BadValue { .. }), "{e:?}");
        }
    }

    #[test]
    fn inconsistent_requests_are_refused() {
        let e = parse(Some(2), &[("topology.scheduler/gpu-count", "4")]).unwrap_err();
        assert!(
            matches!(e, RequestError::Inconsistent { .. }) && e.to_string().contains("limit is 2")
        );
        let e = parse(None, &[(key::GPU_COUNT, "4")]).unwrap_err();
        assert!(e.to_string().contains("no nvidia.com/gpu limit"), "{e}");
        let e = parse(Some(2), &[(key::GPU_SHARE, "0.5")]).unwrap_err();
        assert_eq!(e.key(), key::GPU_SHARE);
        let e = parse(Some(1), &[(key::GANG, "g")]).unwrap_err();
        assert!(e.to_string().contains(key::GANG_SIZE));
        let e = parse(Some(1), &[(key::GANG_SIZE, "2")]).unwrap_err();
        assert!(e.to_string().contains(key::GANG));
        let e = parse(Some(1), &[(key::GANG, "G_1"), (key::GANG_SIZE, "2")]).unwrap_err();
        assert!(matches!(e, RequestError::BadValue { .. }));
        let e = parse(Some(1), &[(key::GANG, "g"), (key::GANG_SIZE, "0")]).unwrap_err();
        assert_eq!(e.key(), key::GANG_SIZE);
    }

    #[test]
    fn unknown_and_conflicting_keys_are_refused() {
        let e = parse(Some(1), &[("gputopo.dev/colective", "ring")]).unwrap_err();
        assert_eq!(
            e,
            RequestError::UnknownKey {
                key: "gputopo.dev/colective".into()
            }
        );
        assert!(e.to_string().contains(key::COLLECTIVE));
        let e = parse(
            Some(1),
            &[
                (key::PREFERRED_DOMAIN, "a"),
                ("topology.scheduler/preferred-domain", "b"),
            ],
        )
        .unwrap_err();
        assert!(matches!(e, RequestError::ConflictingAlias { .. }), "{e:?}");
        // Other prefixes are not ours to judge.
        parse(Some(1), &[("example.com/anything", "x")]).unwrap();
    }

    #[test]
    fn pod_group_label_names_the_gang() {
        let labels: BTreeMap<String, String> =
            [(key::POD_GROUP_LABEL.to_string(), "pg-1".to_string())].into();
        let r = GpuRequest::parse(Some(8), &BTreeMap::new(), &labels).unwrap();
        assert_eq!(
            r.gang,
            Some(GangRef::PodGroup {
                name: "pg-1".into()
            })
        );
        let e = GpuRequest::parse(
            Some(8),
            &ann(&[(key::GANG, "x"), (key::GANG_SIZE, "2")]),
            &labels,
        )
        .unwrap_err();
        assert!(matches!(e, RequestError::Inconsistent { .. }));
    }

    #[test]
    fn pod_limits_sum_containers_and_respect_init_containers() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "annotations": {"gputopo.dev/collective": "all-to-all"}},
            "spec": {
                "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                "containers": [
                    {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                    {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "3"}}},
                    {"name": "c"}
                ]
            }
        }))
        .unwrap();
        let r = GpuRequest::from_pod(&pod).unwrap();
        assert_eq!((r.gpus, r.collective), (8, Collective::AllToAll));

        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}
        }))
        .unwrap();
        let e = GpuRequest::from_pod(&pod).unwrap_err();
        assert!(e.key().contains("containers[a]"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn no_annotation_value_panics(k in 0usize..KNOWN_KEYS.len(), v in "\\PC{0,24}") {
            let _ = parse(Some(1), &[(KNOWN_KEYS[k], &v)]);
        }
    }
}
