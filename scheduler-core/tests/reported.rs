//! What nodes report about who holds which GPU: freshness of the reading
//! and the pods running on other GPUs than gputopo chose (literal objects).

mod common;

use common::*;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_api::{
    DeviceForm, GpuAllocation, GpuHolder, GpuTopology, GpuTopologyStatus, LinkClass,
    PodResourcesReading,
};
use gputopo_scheduler_core::reported::{
    AssignmentMismatch, ReadingState, ReadingTrust, SetLinks, assignment_mismatches, reported_gpus,
};
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

const MAX_AGE: Duration = Duration::from_secs(900);

fn at(t: &str) -> Timestamp {
    t.parse().unwrap()
}

fn holder(pod: &str, form: DeviceForm) -> GpuHolder {
    GpuHolder {
        pod: pod.into(),
        container: "main".into(),
        resource: "nvidia.com/gpu".into(),
        device: "GPU-00000000-0000-0000-0000-000000000000".into(),
        form,
    }
}

/// The DGX-1 node `n`, read at `read` with these (gpu, pod, form) holdings.
fn dgx1_read_at(read: &str, holds: &[(u32, &str, DeviceForm)]) -> GpuTopology {
    let mut by_gpu: std::collections::BTreeMap<u32, GpuAllocation> = Default::default();
    for &(gpu, pod, form) in holds {
        let a = by_gpu.entry(gpu).or_insert(GpuAllocation {
            gpu,
            pods: vec![],
            holders: vec![],
        });
        if !a.pods.iter().any(|p| p == pod) {
            a.pods.push(pod.into());
        }
        a.holders.push(holder(pod, form));
    }
    let mut t = GpuTopology::new("n", dgx1());
    t.status = Some(GpuTopologyStatus {
        conditions: vec![],
        allocations: by_gpu.into_values().collect(),
        pod_resources: Some(PodResourcesReading {
            observed_at: Time(at(read)),
            last_error: None,
            unknown_devices: vec![],
        }),
    });
    t
}

fn bound_pod(name: &str, assigned: &str, started: &str, extra: serde_json::Value) -> Pod {
    let mut annotations = json!({"gputopo.dev/assigned-gpus": assigned});
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            annotations[k] = v.clone();
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
        "status": {"phase": "Running", "startTime": started}
    }))
    .unwrap()
}

fn mismatches(topology: &GpuTopology, pods: &[Pod], now: &str) -> Vec<AssignmentMismatch> {
    let topologies = HashMap::from([("n", topology)]);
    let trust = ReadingTrust {
        now: at(now),
        max_age: MAX_AGE,
    };
    assignment_mismatches(pods, &topologies, trust)
}

const T0: &str = "2026-03-01T10:00:00Z";
const READ: &str = "2026-03-01T10:01:00Z";
const NOW: &str = "2026-03-01T10:02:00Z";

#[test]
fn a_pod_on_other_gpus_than_chosen_is_named_with_both_sets_and_the_links_lost() {
    // DGX-1: 0-3 are joined by NV2, 0-5 only through the CPUs (SYS).
    let t = dgx1_read_at(
        READ,
        &[
            (0, "ml/ring", DeviceForm::Whole),
            (5, "ml/ring", DeviceForm::Whole),
        ],
    );
    let found = mismatches(&t, &[bound_pod("ring", "0,3", T0, json!({}))], NOW);
    assert_eq!(found.len(), 1, "{found:?}");
    let m = &found[0];
    assert_eq!((m.pod.as_str(), m.node.as_str()), ("ml/ring", "n"));
    assert_eq!(
        (m.chosen.as_slice(), m.got.as_slice()),
        (&[0, 3][..], &[0, 5][..])
    );
    assert_eq!(m.chosen_links, SetLinks::Worst(LinkClass::Nv(2)));
    assert_eq!(m.got_links, SetLinks::Worst(LinkClass::Sys));
    let message = m.message();
    assert!(
        message.contains("GPUs 0,3")
            && message.contains("reports 0,5")
            && message.contains("NV2 ring chosen, got SYS ring"),
        "{message}"
    );
}

#[test]
fn the_same_set_in_another_order_or_a_pod_not_yet_reported_is_no_mismatch() {
    let t = dgx1_read_at(
        READ,
        &[
            (3, "ml/same", DeviceForm::Whole),
            (0, "ml/same", DeviceForm::Whole),
        ],
    );
    let pods = [
        bound_pod("same", "3,0", T0, json!({})),
        // admitted after the reading: the node has not reported it yet
        bound_pod("new", "4,5", T0, json!({})),
    ];
    assert_eq!(mismatches(&t, &pods, NOW), vec![]);
}

#[test]
fn a_stale_reading_or_one_from_before_the_pod_started_proves_nothing() {
    let holds = [(7, "ml/p", DeviceForm::Whole)];
    let pod = bound_pod("p", "1", T0, json!({}));
    // fresh: a mismatch (control)
    assert_eq!(
        mismatches(&dgx1_read_at(READ, &holds), std::slice::from_ref(&pod), NOW).len(),
        1
    );
    // read 16 minutes before now, with 15 allowed
    let stale = dgx1_read_at(READ, &holds);
    assert_eq!(
        mismatches(&stale, std::slice::from_ref(&pod), "2026-03-01T10:17:01Z"),
        vec![]
    );
    // read before this pod started: it names an earlier pod of the same name
    let early = dgx1_read_at("2026-03-01T09:59:59Z", &holds);
    assert_eq!(mismatches(&early, &[pod], NOW), vec![]);
}

#[test]
fn unreadable_records_finished_pods_and_unbound_pods_are_skipped() {
    let t = dgx1_read_at(READ, &[(7, "ml/p", DeviceForm::Whole)]);
    let unreadable = bound_pod("p", "x", T0, json!({}));
    let mut finished = bound_pod("p", "1", T0, json!({}));
    finished.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let mut unbound = bound_pod("p", "1", T0, json!({}));
    unbound.spec.as_mut().unwrap().node_name = None;
    for pod in [unreadable, finished, unbound] {
        assert_eq!(mismatches(&t, &[pod], NOW), vec![]);
    }
}

#[test]
fn a_shared_gpu_pod_is_compared_on_the_gpu_its_replica_sits_on() {
    let t = dgx1_read_at(READ, &[(6, "ml/share", DeviceForm::Replica)]);
    let share = json!({"gputopo.dev/gpu-share": "0.25"});
    let moved = bound_pod("share", "2", T0, share.clone());
    let found = mismatches(&t, &[moved], NOW);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].chosen.as_slice(), found[0].got.as_slice()),
        (&[2][..], &[6][..])
    );
    assert!(
        found[0].message().contains("same links (one GPU)"),
        "{}",
        found[0].message()
    );
    let stayed = bound_pod("share", "6", T0, share);
    assert_eq!(mismatches(&t, &[stayed], NOW), vec![]);
}

#[test]
fn reading_states() {
    let t = dgx1_read_at(READ, &[]);
    let status = t.status.as_ref();
    assert_eq!(
        ReadingState::of(status, at(NOW), MAX_AGE),
        ReadingState::Fresh {
            observed_at: at(READ)
        }
    );
    assert!(matches!(
        ReadingState::of(status, at("2026-03-01T11:00:00Z"), MAX_AGE),
        ReadingState::Stale { age, .. } if age.as_secs() == 59 * 60
    ));
    // a reading from the future (clock skew between nodes) is not stale
    assert!(ReadingState::of(status, at(T0), MAX_AGE).is_fresh());
    let mut unread = t.clone();
    unread.status.as_mut().unwrap().pod_resources = None;
    assert_eq!(
        ReadingState::of(unread.status.as_ref(), at(NOW), MAX_AGE),
        ReadingState::NotReported
    );
    assert_eq!(
        ReadingState::of(None, at(NOW), MAX_AGE),
        ReadingState::NotReported
    );
}

#[test]
fn reported_gpus_count_a_pod_once_per_gpu_and_read_old_agents_pods_as_whole() {
    let allocations = vec![
        // two containers of one pod on GPU 1, one whole and one replica
        GpuAllocation {
            gpu: 1,
            pods: vec!["ml/a".into()],
            holders: vec![
                holder("ml/a", DeviceForm::Whole),
                holder("ml/a", DeviceForm::Replica),
            ],
        },
        // an agent that publishes no holders: pods hold whole GPUs
        GpuAllocation {
            gpu: 2,
            pods: vec!["ml/a".into(), "ml/b".into()],
            holders: vec![],
        },
        GpuAllocation {
            gpu: 3,
            pods: vec!["ml/b".into()],
            holders: vec![holder("ml/b", DeviceForm::Mig)],
        },
        // out of any mask: ignored, not a panic
        GpuAllocation {
            gpu: 40,
            pods: vec!["ml/b".into()],
            holders: vec![],
        },
    ];
    let r = reported_gpus(&allocations);
    assert_eq!((r["ml/a"].whole, r["ml/a"].any), (0b110, 0b110));
    assert_eq!((r["ml/b"].whole, r["ml/b"].any), (0b100, 0b1100));
}
