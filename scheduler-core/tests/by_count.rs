//! GPUs handed out by count: where a node's pods hold GPUs that neither
//! their `gputopo.dev/assigned-gpus` record nor the node's report names,
//! which GPUs are free is not known, so a placement there names none (the
//! kubelet picks among the free ones) and nothing that needs a known set
//! (an NVLink level, a memory floor, one NUMA node) is promised there.

mod common;

use common::*;
use gputopo_api::GpuAllocation;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::schedule::{Decision, Placement, schedule};
use gputopo_scheduler_core::snapshot::{BoundPodInput, GpuHolding, Snapshot};

/// A pod on `n` holding `count` GPUs nobody named (its record unreadable).
fn unnamed(name: &str, count: u32) -> BoundPodInput {
    let mut p = BoundPodInput::new("ml", name, "n");
    p.request = Ok(request(count, &[]));
    p.requests.gpus = i64::from(count);
    p.holding = GpuHolding::Unknown(count);
    p.unreadable_assignment = Some("x".into());
    p
}

fn placed(snapshot: &Snapshot, gpus: u32, annotations: &[(&str, &str)]) -> Placement {
    match schedule(
        snapshot,
        &pod(gpus, annotations),
        &SchedulerConfig::default(),
    ) {
        Decision::Placed(p) => p,
        Decision::Unschedulable(u) => panic!("not placed: {}", u.message),
    }
}

fn refusal(snapshot: &Snapshot, gpus: u32, annotations: &[(&str, &str)]) -> String {
    match schedule(
        snapshot,
        &pod(gpus, annotations),
        &SchedulerConfig::default(),
    ) {
        Decision::Placed(p) => panic!("placed on GPUs {:?}", p.gpus),
        Decision::Unschedulable(u) => {
            let reasons: Vec<String> = u.rejections.iter().map(|r| r.reason.to_string()).collect();
            format!("{} / {}", u.message, reasons.join("; "))
        }
    }
}

#[test]
fn a_node_with_unnamed_gpus_hands_out_the_rest_by_count() {
    let s = snapshot(vec![gpu_node("n", dgx1())], vec![unnamed("ddp-4gpu", 4)]);
    let p = placed(&s, 4, &[]);
    assert!(p.by_count, "{p:?}");
    assert!(!p.names_gpus());
    assert_eq!(p.gpus.len(), 4);
    assert_eq!(p.bottleneck, None);
    assert!(
        p.explanation.contains("ml/ddp-4gpu") && p.explanation.contains("by count"),
        "{}",
        p.explanation
    );
    // Bound, the pod is one more holder of unnamed GPUs: the node is full
    // by count, whatever indices stood in for either pod.
    let holding = p.bound_pod(&pod(4, &[])).holding;
    assert_eq!(holding, GpuHolding::Unknown(4));
    let mut s = s;
    let mut second = p.bound_pod(&pod(4, &[]));
    second.name = "second".into();
    s.add_pod(second).expect("the node is known");
    let message = refusal(&s, 1, &[]);
    assert!(message.contains("free"), "{message}");
}

#[test]
fn what_only_a_known_gpu_set_vouches_for_is_refused_there_saying_why() {
    let s = snapshot(vec![gpu_node("n", dgx1())], vec![unnamed("ddp-4gpu", 4)]);
    for (key, value) in [
        ("gputopo.dev/min-nvlink-level", "1"),
        ("gputopo.dev/gpu-memory", "8Gi"),
    ] {
        let message = refusal(&s, 2, &[(key, value)]);
        assert!(
            message.contains("which of the node's GPUs are free is not known")
                && message.contains("ml/ddp-4gpu"),
            "{key}: {message}"
        );
    }
}

#[test]
fn indices_come_back_once_the_node_reports_or_the_holder_goes() {
    // The node's kubelet reading names the holder's GPUs: they are known.
    let mut node = gpu_node("n", dgx1());
    let started: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
    node.allocations_observed_at = Some("2026-11-29T10:05:00Z".parse().unwrap());
    node.gpu_allocations = (0..4)
        .map(|gpu| GpuAllocation {
            gpu,
            pods: vec!["ml/ddp-4gpu".into()],
            holders: vec![],
        })
        .collect();
    let mut holder = unnamed("ddp-4gpu", 4);
    holder.start_time = Some(started);
    let s = snapshot(vec![node], vec![holder]);
    let p = placed(&s, 4, &[]);
    assert!(!p.by_count, "{}", p.explanation);
    assert!(p.gpus.iter().all(|g| *g >= 4), "{:?}", p.gpus);

    // Without a report, the holder finishing makes the node known again.
    let mut s = snapshot(vec![gpu_node("n", dgx1())], vec![unnamed("ddp-4gpu", 4)]);
    let id = s.pod_id("ml", "ddp-4gpu").expect("bound");
    s.remove_pod(id);
    let p = placed(&s, 4, &[]);
    assert!(!p.by_count && p.names_gpus(), "{}", p.explanation);
}

#[test]
fn a_record_naming_fewer_gpus_than_the_pod_holds_makes_the_node_count() {
    let mut short = holder("short", "n", &[0], None);
    short.requests.gpus = 2;
    short.request = Ok(request(2, &[]));
    let s = snapshot(vec![gpu_node("n", dgx1())], vec![short]);
    let p = placed(&s, 2, &[]);
    assert!(p.by_count, "{}", p.explanation);
    assert!(p.explanation.contains("default/short"), "{}", p.explanation);
}
