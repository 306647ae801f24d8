//! What a run reports: the curve points, the topology metrics and the result
//! printed with `-o json`.

use super::Order;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One point of the curves.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Point {
    pub arrived_pct: u32,
    pub gpu_allocation_pct: f64,
    pub fragmented_gpu_pct: f64,
    /// Complete 8-GPU NVLink slots left over the cluster (clusters with
    /// known or synthesised wiring): disjoint sets of 8 free GPUs joined
    /// pairwise by NVLink (`gpuset::full_nvlink_slots`).
    #[serde(rename = "fullNvlinkSlots8", skip_serializing_if = "Option::is_none")]
    pub full_nvlink_slots8: Option<u64>,
}

/// What topology-aware placement achieved (clusters whose nodes have a
/// known or synthesised wiring).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopologyMetrics {
    /// Pods placed on two or more whole GPUs of a node with known wiring.
    pub multi_gpu_pods: u64,
    /// Share of those on an optimal set: a ring bottleneck as good as the
    /// best any set of that many of the node's free GPUs offered then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_optimal_set_pct: Option<f64>,
    /// Mean `LinkClass::rank` of their ring bottleneck (SYS 1 … PIX 5, XGMI-ROUTED 6, XGMI 7, NV1 8 … NV18 25).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_bottleneck_rank: Option<f64>,
    /// Their ring bottlenecks by class (`NV12`, `PIX`, …).
    pub bottlenecks: BTreeMap<String, u64>,
    pub gangs_placed: u64,
    /// Gangs whose members landed under more than one leaf (the innermost
    /// network tier).
    pub gangs_spanning_leaves: u64,
    #[serde(rename = "fullNvlinkSlots8AtStart")]
    pub full_nvlink_slots8_at_start: u64,
    /// At the last arrival.
    #[serde(rename = "fullNvlinkSlots8AtEnd")]
    pub full_nvlink_slots8_at_end: u64,
    /// Arrival order: the mean and the least over the instants just after
    /// each arrival (the trace's time axis).
    #[serde(
        rename = "fullNvlinkSlots8Mean",
        skip_serializing_if = "Option::is_none"
    )]
    pub full_nvlink_slots8_mean: Option<f64>,
    #[serde(
        rename = "fullNvlinkSlots8Min",
        skip_serializing_if = "Option::is_none"
    )]
    pub full_nvlink_slots8_min: Option<u64>,
    #[serde(skip)]
    pub(super) slots_sum: u64,
    #[serde(skip)]
    pub(super) slots_samples: u64,
    #[serde(skip)]
    pub(super) optimal: u64,
    #[serde(skip)]
    pub(super) rank_sum: u64,
}

/// Whole network domains left free over a run, one tier (clusters whose
/// nodes carry the configured tiers' labels; `domains.rs`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WholeDomainsFree {
    /// The tier's node label key (`gputopo.dev/leaf`).
    pub tier: String,
    /// Its domains with GPUs.
    pub domains: u64,
    pub at_start: u64,
    /// Mean over the instants just after each arrival.
    pub mean: f64,
    /// The least over those instants.
    pub min: u64,
    /// At the last arrival.
    pub at_end: u64,
}

/// The result of one run, as printed with `-o json`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimResult {
    pub policy: String,
    pub seed: u64,
    pub cluster: String,
    pub workload: String,
    pub inflate: Option<f64>,
    pub order: Order,
    pub nodes: usize,
    pub total_gpus: u32,
    pub typical_pod_types: usize,
    pub points: Vec<Point>,
    pub pods_arrived: u64,
    pub pods_placed: u64,
    pub pods_failed: u64,
    pub gpu_pods_failed: u64,
    pub pods_ended: u64,
    pub gangs_placed: u64,
    pub gangs_failed: u64,
    pub arrived_gpu_pct: f64,
    pub final_gpu_allocation_pct: f64,
    pub final_fragmented_gpu_pct: f64,
    /// Arrival order only (units that do not fit wait): the time from a
    /// pod's arrival to its start, seconds, over the pods that started.
    #[serde(rename = "queueTimeP50S", skip_serializing_if = "Option::is_none")]
    pub queue_time_p50_s: Option<f64>,
    #[serde(rename = "queueTimeP99S", skip_serializing_if = "Option::is_none")]
    pub queue_time_p99_s: Option<f64>,
    /// Arrival order only: when the last pod with a duration ended, seconds.
    #[serde(rename = "makespanS", skip_serializing_if = "Option::is_none")]
    pub makespan_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyMetrics>,
    /// Per network tier, outermost first: its domains with every GPU free.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub whole_domains_free: Vec<WholeDomainsFree>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_ms: Option<u64>,
}
