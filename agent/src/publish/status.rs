//! The status the agent wants, and whether it needs a write. Pure: `now` is
//! passed in. The agent is the status's only writer and applies it whole
//! (server-side apply drops what an apply leaves out), so the plan is the
//! complete status: the `Degraded` condition, `allocations` and
//! `podResources`.
//!
//! A quiet node writes nothing: the condition keeps its transition time,
//! unchanged allocations keep their `observedAt` — until it is
//! `heartbeat` old, when it is refreshed so that readers can tell a live
//! reading from an agent that stopped (docs/contract.md: a reading older
//! than three heartbeats is stale).

use gputopo_api::{CONDITION_DEGRADED, GpuAllocation, GpuTopologyStatus, PodResourcesReading};
use gputopo_topology::health::{HealthFinding, degraded_condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::time::Duration;

/// The most `lastError` holds (the CRD's bound).
pub const MAX_LAST_ERROR: usize = 1024;

/// `observedAt` before any reading succeeded: the Unix epoch, older than
/// any staleness bound, so that no reader takes the empty `allocations`
/// for a live reading (`lastError` says why there is none).
pub fn never_read() -> Time {
    Time(Timestamp::UNIX_EPOCH)
}

/// What this round read from the kubelet.
#[derive(Debug, Clone, PartialEq)]
pub enum PodResourcesRound {
    /// Not asked (`--pod-resources=false`): no `allocations`, no `podResources`.
    NotRead,
    /// A reading, mapped onto the node's GPUs.
    Read {
        allocations: Vec<GpuAllocation>,
        unknown_devices: Vec<String>,
    },
    /// The reading failed: the last good allocations stay, `lastError` says why.
    Failed { error: String },
}

/// The complete status for this round, or `None` when `current` already is it.
pub fn plan_status(
    current: Option<&GpuTopologyStatus>,
    findings: &[HealthFinding],
    round: &PodResourcesRound,
    now: &Time,
    heartbeat: Duration,
) -> Option<GpuTopologyStatus> {
    let condition = plan_condition(current, findings, now);
    let previous = current.and_then(|s| s.pod_resources.as_ref());
    let kept_allocations = || current.map(|s| s.allocations.clone()).unwrap_or_default();
    let (allocations, pod_resources) = match round {
        PodResourcesRound::NotRead => (Vec::new(), None),
        PodResourcesRound::Read {
            allocations,
            unknown_devices,
        } => {
            let fresh = previous.is_some_and(|p| {
                p.last_error.is_none()
                    && p.unknown_devices == *unknown_devices
                    && kept_allocations() == *allocations
                    && age(&p.observed_at, now) < heartbeat
            });
            let observed_at = match previous {
                Some(p) if fresh => p.observed_at.clone(),
                _ => now.clone(),
            };
            (
                allocations.clone(),
                Some(PodResourcesReading {
                    observed_at,
                    last_error: None,
                    unknown_devices: unknown_devices.clone(),
                }),
            )
        }
        PodResourcesRound::Failed { error } => (
            kept_allocations(),
            Some(PodResourcesReading {
                observed_at: previous.map_or_else(never_read, |p| p.observed_at.clone()),
                last_error: Some(bounded(error)),
                unknown_devices: previous
                    .map(|p| p.unknown_devices.clone())
                    .unwrap_or_default(),
            }),
        ),
    };
    let desired = GpuTopologyStatus {
        conditions: vec![condition],
        allocations,
        pod_resources,
    };
    (current != Some(&desired)).then_some(desired)
}

/// How long ago `then` was; a time in the future (another clock) is age 0.
fn age(then: &Time, now: &Time) -> Duration {
    let elapsed: SignedDuration = now.0.duration_since(then.0);
    Duration::try_from(elapsed).unwrap_or_default()
}

/// `error` cut to [`MAX_LAST_ERROR`] bytes at a character boundary.
fn bounded(error: &str) -> String {
    if error.len() <= MAX_LAST_ERROR {
        return error.to_string();
    }
    let mut end = MAX_LAST_ERROR - "…".len();
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &error[..end])
}

/// The `Degraded` condition for `findings`: the stored one when nothing
/// about it changed; its transition time moves only when the status flips.
fn plan_condition(
    current: Option<&GpuTopologyStatus>,
    findings: &[HealthFinding],
    now: &Time,
) -> Condition {
    let mut condition = degraded_condition(findings, now.clone());
    let previous =
        current.and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_DEGRADED));
    match previous {
        Some(p) if same_condition(p, &condition) => p.clone(),
        Some(p) if p.status == condition.status => {
            condition.last_transition_time = p.last_transition_time.clone();
            condition
        }
        _ => condition,
    }
}

fn same_condition(a: &Condition, b: &Condition) -> bool {
    a.type_ == b.type_ && a.status == b.status && a.reason == b.reason && a.message == b.message
}
