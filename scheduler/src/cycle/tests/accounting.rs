//! Accounting from what nodes report: a node that disagrees with a pod's
//! `gputopo.dev/assigned-gpus` is believed (while its reading is fresh),
//! and the difference is an event and a metric, once.

use super::fake::Write;
use super::fixtures::{World, pod};
use super::{Harness, binds};
use crate::config::Settings;
use gputopo_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gputopo_api::{DeviceForm, GpuAllocation, GpuHolder, GpuTopologyStatus, PodResourcesReading};
use std::sync::Arc;
use std::time::Duration;

/// `n1` reports `ml/held` holding `gpus` whole, read at `read`.
fn n1_reports(world: &mut World, gpus: &[u32], read: &str) {
    let t = Arc::make_mut(&mut world.topologies[0]);
    t.status = Some(GpuTopologyStatus {
        conditions: vec![],
        allocations: gpus
            .iter()
            .map(|&gpu| GpuAllocation {
                gpu,
                pods: vec!["ml/held".into()],
                holders: vec![GpuHolder {
                    pod: "ml/held".into(),
                    container: "c".into(),
                    resource: "nvidia.com/gpu".into(),
                    device: format!("GPU-{gpu}"),
                    form: DeviceForm::Whole,
                }],
            })
            .collect(),
        pod_resources: Some(PodResourcesReading {
            observed_at: Time(read.parse().expect("a time")),
            last_error: None,
            unknown_devices: vec![],
        }),
    });
}

/// One DGX A100 `n1`; `ml/held` bound there with GPUs 0-3 recorded,
/// started two hours before the harness starts (2026-01-01T00:00:00Z);
/// `ml/new` pending for 4 GPUs.
fn world() -> World {
    let mut w = World::dgx(1, 1);
    let mut held = pod("held", 4, Some("n1"), 0);
    held.status.as_mut().expect("status").start_time =
        Some(Time("2025-12-31T22:00:00Z".parse().expect("a time")));
    w.add(held).add(pod("new", 4, None, 0));
    w
}

fn new_pods_gpus(h: &Harness) -> String {
    h.world
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("new"))
        .and_then(|p| {
            p.metadata
                .annotations
                .as_ref()?
                .get("gputopo.dev/assigned-gpus")
                .cloned()
        })
        .expect("new is bound with its GPUs")
}

#[test]
fn a_node_that_disagrees_with_the_annotation_is_believed_and_reported_once() {
    let mut w = world();
    n1_reports(&mut w, &[4, 5, 6, 7], "2025-12-31T23:59:30Z");
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    // The node says 4-7 are held: the new pod gets what is really free.
    assert_eq!(binds(&writes), [("ml/new".to_string(), "n1".to_string())]);
    assert_eq!(new_pods_gpus(&h), "0,1,2,3");
    let events: Vec<_> = writes
        .iter()
        .filter_map(|w| match w {
            Write::Event { pod, event } if event.reason == "GPUAssignmentMismatch" => {
                Some((pod.clone(), event.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(events.len(), 1, "{writes:?}");
    let (pod, event) = &events[0];
    assert_eq!(pod, "ml/held");
    assert!(event.warning, "{event:?}");
    assert!(
        event.note.contains("GPUs 0,1,2,3") && event.note.contains("reports 4,5,6,7"),
        "{}",
        event.note
    );
    assert_eq!(report.assignment_mismatches.len(), 1);
    assert_eq!(report.assignment_mismatches[0].node, "n1");

    // Later cycles (the check due again) do not repeat it.
    h.advance(Duration::from_secs(60));
    let (report, writes) = h.cycle();
    assert!(report.assignment_mismatches.is_empty());
    assert!(
        !writes.iter().any(
            |w| matches!(w, Write::Event { event, .. } if event.reason == "GPUAssignmentMismatch")
        ),
        "{writes:?}"
    );
}

#[test]
fn without_a_fresh_reading_the_annotation_counts_and_nothing_is_reported() {
    for (reading, why) in [
        (None, "no reading"),
        (
            Some("2025-12-31T23:00:00Z"),
            "read an hour before, 15 minutes trusted",
        ),
    ] {
        let mut w = world();
        if let Some(read) = reading {
            n1_reports(&mut w, &[4, 5, 6, 7], read);
        }
        let mut h = Harness::new(w, Settings::default());
        let (report, writes) = h.cycle();
        assert_eq!(binds(&writes).len(), 1, "{why}");
        assert_eq!(new_pods_gpus(&h), "4,5,6,7", "{why}");
        assert!(report.assignment_mismatches.is_empty(), "{why}");
    }
}

#[test]
fn each_difference_is_reported_once_and_again_after_it_changes() {
    use crate::cycle::Clock;
    use crate::cycle::accounting::{AssignmentChecks, CHECK_EVERY};
    use k8s_openapi::jiff::Timestamp;
    use std::time::Instant;

    let mut w = world();
    let start = Instant::now();
    let max_age = Duration::from_secs(900);
    let at = |after: Duration| Clock {
        now: start + after,
        wall: "2026-01-01T00:00:00Z".parse::<Timestamp>().expect("a time"),
    };
    let mut checks = AssignmentChecks::default();
    let mut due = |w: &World, after| checks.due(&w.pods, &w.topologies, at(after), max_age);

    n1_reports(&mut w, &[4, 5, 6, 7], "2025-12-31T23:59:30Z");
    let first = due(&w, Duration::ZERO);
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0].1.chosen.clone(), first[0].1.got.clone()),
        (vec![0, 1, 2, 3], vec![4, 5, 6, 7])
    );
    // not due yet, then due but already reported
    assert!(due(&w, Duration::from_secs(1)).is_empty());
    assert!(due(&w, CHECK_EVERY).is_empty());
    // the node now reports the chosen GPUs: nothing; then others again: reported again
    n1_reports(&mut w, &[0, 1, 2, 3], "2025-12-31T23:59:40Z");
    assert!(due(&w, 2 * CHECK_EVERY).is_empty());
    n1_reports(&mut w, &[4, 5, 6, 7], "2025-12-31T23:59:50Z");
    assert_eq!(due(&w, 3 * CHECK_EVERY).len(), 1);
    // a new pod of the same name (another uid) is another difference
    let held = w
        .pods
        .iter_mut()
        .find(|p| p.metadata.name.as_deref() == Some("held"))
        .expect("held");
    Arc::make_mut(held).metadata.uid = Some("uid-held-2".into());
    assert_eq!(due(&w, 4 * CHECK_EVERY).len(), 1);
}
