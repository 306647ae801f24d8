//! The status the agent wants, and whether it needs a write. Pure: `now` is
//! passed in. The agent is the status's only writer and applies it whole
//! (server-side apply drops what an apply leaves out), so the plan is the
//! complete status: the `Degraded` condition, `GpuFabricReady` on nodes
//! with a multi-node NVLink fabric, `allocations` and `podResources`.
//!
//! A quiet node writes nothing: each condition keeps its transition time,
//! unchanged allocations keep their `observedAt` — until it is
//! `heartbeat` old, when it is refreshed so that readers can tell a live
//! reading from an agent that stopped (docs/contract/gpu-topology.md: a
//! reading older than three heartbeats is stale).

use gputopo_api::{GpuAllocation, GpuTopologyStatus, PodResourcesReading};
use gputopo_topology::clique::CliqueVerdict;
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
    fabric: &CliqueVerdict,
    round: &PodResourcesRound,
    now: &Time,
    heartbeat: Duration,
) -> Option<GpuTopologyStatus> {
    let mut conditions = vec![plan_condition(
        current,
        degraded_condition(findings, now.clone()),
    )];
    conditions.extend(
        fabric
            .condition(now.clone())
            .map(|c| plan_condition(current, c)),
    );
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
        conditions,
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

/// `condition` (dated now), or the stored one of its type when nothing
/// about it changed; its transition time moves only when the status flips.
fn plan_condition(current: Option<&GpuTopologyStatus>, mut condition: Condition) -> Condition {
    let previous = current.and_then(|s| s.conditions.iter().find(|c| c.type_ == condition.type_));
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

#[cfg(test)]
mod tests {
    use super::*;
    use gputopo_api::{DeviceForm, GpuHolder};
    use gputopo_topology::health::FindingKind;

    const HEARTBEAT: Duration = Duration::from_secs(300);

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    fn held(gpu: u32, pod: &str) -> GpuAllocation {
        GpuAllocation {
            gpu,
            pods: vec![pod.into()],
            holders: vec![GpuHolder {
                pod: pod.into(),
                container: "main".into(),
                resource: "nvidia.com/gpu".into(),
                device: format!("GPU-{gpu}"),
                form: DeviceForm::Whole,
            }],
        }
    }

    fn read(allocations: Vec<GpuAllocation>, unknown: &[&str]) -> PodResourcesRound {
        PodResourcesRound::Read {
            allocations,
            unknown_devices: unknown.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn failed(error: &str) -> PodResourcesRound {
        PodResourcesRound::Failed {
            error: error.into(),
        }
    }

    /// The status after one round, starting from `current`.
    fn step(
        current: Option<&GpuTopologyStatus>,
        round: &PodResourcesRound,
        now: i64,
    ) -> Option<GpuTopologyStatus> {
        plan_status(
            current,
            &[],
            &CliqueVerdict::NoFabric,
            round,
            &at(now),
            HEARTBEAT,
        )
    }

    #[test]
    fn a_reading_is_written_then_left_alone_until_the_heartbeat() {
        let first = step(None, &read(vec![held(0, "ml/a")], &[]), 100).expect("written");
        assert_eq!(first.allocations, [held(0, "ml/a")]);
        let reading = first.pod_resources.clone().expect("podResources");
        assert_eq!((reading.observed_at, reading.last_error), (at(100), None));

        // Same allocations within the heartbeat: nothing to write.
        assert_eq!(
            step(Some(&first), &read(vec![held(0, "ml/a")], &[]), 399),
            None
        );
        // A heartbeat later: observedAt is refreshed, nothing else changes.
        let beat = step(Some(&first), &read(vec![held(0, "ml/a")], &[]), 400).expect("refreshed");
        assert_eq!(beat.pod_resources.as_ref().unwrap().observed_at, at(400));
        assert_eq!(beat.allocations, first.allocations);
        assert_eq!(beat.conditions, first.conditions);

        // Changed allocations are written at once, with a new observedAt.
        let moved = step(Some(&first), &read(vec![held(3, "ml/b")], &[]), 150).expect("written");
        assert_eq!(moved.allocations, [held(3, "ml/b")]);
        assert_eq!(moved.pod_resources.unwrap().observed_at, at(150));
        // So is a new unknown device.
        let odd = step(Some(&first), &read(vec![held(0, "ml/a")], &["GPU-x"]), 150).unwrap();
        assert_eq!(odd.pod_resources.unwrap().unknown_devices, ["GPU-x"]);
    }

    #[test]
    fn a_failed_reading_keeps_the_last_good_allocations_and_says_why() {
        let good = step(None, &read(vec![held(0, "ml/a")], &["GPU-x"]), 100).unwrap();
        let bad = step(Some(&good), &failed("no PodResources socket at /s"), 200).expect("written");
        assert_eq!(bad.allocations, good.allocations);
        let r = bad.pod_resources.clone().unwrap();
        assert_eq!(r.observed_at, at(100), "the time of the last good reading");
        assert_eq!(
            r.last_error.as_deref(),
            Some("no PodResources socket at /s")
        );
        assert_eq!(r.unknown_devices, ["GPU-x"]);
        // Failing the same way again writes nothing, even past the heartbeat:
        // observedAt ages, which is what tells readers the reading is stale.
        assert_eq!(
            step(Some(&bad), &failed("no PodResources socket at /s"), 900),
            None
        );
        // Readable again: a fresh observedAt, no lastError.
        let back = step(Some(&bad), &read(vec![held(0, "ml/a")], &["GPU-x"]), 950).unwrap();
        let r = back.pod_resources.unwrap();
        assert_eq!((r.observed_at, r.last_error), (at(950), None));
    }

    #[test]
    fn before_any_good_reading_observed_at_is_the_epoch() {
        let s = step(None, &failed("refused"), 100).expect("written");
        assert!(s.allocations.is_empty());
        let r = s.pod_resources.unwrap();
        assert_eq!(r.observed_at, never_read());
        assert_eq!(r.last_error.as_deref(), Some("refused"));
    }

    #[test]
    fn not_reading_publishes_no_allocations_and_drops_old_ones() {
        let good = step(None, &read(vec![held(0, "ml/a")], &[]), 100).unwrap();
        let off = step(Some(&good), &PodResourcesRound::NotRead, 200).expect("written");
        assert!(off.allocations.is_empty() && off.pod_resources.is_none());
        assert_eq!(off.conditions, good.conditions);
        assert_eq!(step(Some(&off), &PodResourcesRound::NotRead, 300), None);
    }

    #[test]
    fn a_long_error_is_cut_to_what_the_crd_holds() {
        let long = "é".repeat(MAX_LAST_ERROR);
        let s = step(None, &failed(&long), 100).unwrap();
        let e = s.pod_resources.unwrap().last_error.unwrap();
        assert!(e.len() <= MAX_LAST_ERROR && e.ends_with('…'), "{}", e.len());
    }

    #[test]
    fn the_condition_follows_the_findings_with_the_reading() {
        let good = step(None, &read(vec![], &[]), 100).unwrap();
        let lost = HealthFinding {
            gpu: 5,
            kind: FindingKind::GpuLost,
            detail: "lost".into(),
        };
        let s = plan_status(
            Some(&good),
            &[lost],
            &CliqueVerdict::NoFabric,
            &read(vec![], &[]),
            &at(150),
            HEARTBEAT,
        )
        .expect("the condition flipped");
        let c = &s.conditions[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "GpuLost"));
        assert_eq!(c.last_transition_time, at(150));
        assert_eq!(
            s.pod_resources, good.pod_resources,
            "the reading is unchanged"
        );
    }

    #[test]
    fn gpu_fabric_ready_follows_the_clique_and_goes_with_the_fabric() {
        let clique = |c: &str| CliqueVerdict::OneClique {
            clique: c.into(),
            gpus: 4,
        };
        let plan = |current: Option<&GpuTopologyStatus>, fabric: &CliqueVerdict, now: i64| {
            plan_status(
                current,
                &[],
                fabric,
                &PodResourcesRound::NotRead,
                &at(now),
                HEARTBEAT,
            )
        };
        let first = plan(None, &clique("u.1"), 100).expect("written");
        let types: Vec<&str> = first.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Degraded", "GpuFabricReady"]);
        let ready = &first.conditions[1];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "OneClique")
        );
        // Unchanged: nothing to write.
        assert_eq!(plan(Some(&first), &clique("u.1"), 200), None);
        // Another clique, still True: the message moves, the time stays.
        let moved = plan(Some(&first), &clique("u.2"), 200).expect("written");
        assert_eq!(moved.conditions[1].last_transition_time, at(100));
        assert!(moved.conditions[1].message.ends_with("u.2"));
        // The GPUs disagree: False from now on.
        let split = CliqueVerdict::CliquesDisagree {
            message: "GPUs 0-1 in clique u.1; GPUs 2-3 in clique u.2".into(),
        };
        let bad = plan(Some(&moved), &split, 300).expect("written");
        let c = &bad.conditions[1];
        assert_eq!(
            (
                c.status.as_str(),
                c.reason.as_str(),
                c.last_transition_time.clone()
            ),
            ("False", "CliquesDisagree", at(300))
        );
        assert_eq!(bad.conditions[0], first.conditions[0], "Degraded untouched");
        // No fabric any more: the condition goes.
        let gone = plan(Some(&bad), &CliqueVerdict::NoFabric, 400).expect("written");
        assert_eq!(gone.conditions, first.conditions[..1]);
    }
}
