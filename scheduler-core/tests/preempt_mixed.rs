//! Preemption for a gang whose members ask different things: a Ray-like
//! head without GPUs and workers with GPUs, or workers asking different GPU
//! counts. Evictions free what the whole gang needs, each member counted
//! with its own request.

mod common;

use common::{a100, gpu_node, holder, request, snapshot};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::preempt::PreemptionPolicy;
use gputopo_scheduler_core::preempt_schedule::propose_preemption;
use gputopo_scheduler_core::snapshot::{BoundPodInput, Snapshot};

fn now() -> Timestamp {
    "2026-11-21T12:00:00Z".parse().expect("a time")
}

fn serving(name: &str, node: &str, gpus: &[u32]) -> BoundPodInput {
    let mut p = holder(name, node, gpus, Some("inference"));
    p.start_time = Some("2026-11-21T09:00:00Z".parse().expect("time"));
    p
}

fn member(name: &str, gpus: u32, size: usize) -> PendingPod {
    let size = size.to_string();
    let mut p = PendingPod::new(
        "default",
        name,
        request(
            gpus,
            &[
                ("gputopo.dev/gang", "ray"),
                ("gputopo.dev/gang-size", &size),
                ("gputopo.dev/workload", "training"),
            ],
        ),
    );
    p.priority = 100;
    p
}

/// Two full DGX A100: each two 4-GPU inference pods.
fn full_cluster() -> Snapshot {
    snapshot(
        vec![gpu_node("n1", a100()), gpu_node("n2", a100())],
        vec![
            serving("s1a", "n1", &[0, 1, 2, 3]),
            serving("s1b", "n1", &[4, 5, 6, 7]),
            serving("s2a", "n2", &[0, 1, 2, 3]),
            serving("s2b", "n2", &[4, 5, 6, 7]),
        ],
    )
}

#[test]
fn a_head_without_gpus_and_its_workers_get_room_for_the_workers_only() {
    let snap = full_cluster();
    let config = SchedulerConfig::default();
    let gang = vec![
        member("head", 0, 3),
        member("worker-0", 4, 3),
        member("worker-1", 4, 3),
    ];
    assert!(matches!(
        schedule_gang(&snap, &gang, &config),
        GangDecision::Waiting { .. }
    ));

    let plan = propose_preemption(&snap, &gang, &config, &PreemptionPolicy::default(), now())
        .expect("a plan");
    // Two 4-GPU pods make room for two 4-GPU workers; the head needs none.
    assert_eq!(
        plan.victims.len(),
        2,
        "{:?}: {}",
        plan.victims,
        plan.explanation
    );
    assert_eq!(plan.members.len(), 3, "a nomination per member");
    assert!(
        plan.members[0].1.is_empty(),
        "the head holds no GPU: {:?}",
        plan.members
    );
    assert_eq!(plan.members[1].1.len(), 4);
    assert_eq!(plan.members[2].1.len(), 4);

    // With the victims gone the whole gang is placed.
    let mut freed = snap.clone();
    for v in &plan.victims {
        let (ns, name) = v.split_once('/').unwrap();
        freed.remove_pod(freed.pod_id(ns, name).unwrap());
    }
    assert!(matches!(
        schedule_gang(&freed, &gang, &config),
        GangDecision::Placed(_)
    ));
}

#[test]
fn workers_asking_different_counts_are_freed_group_by_group() {
    let snap = full_cluster();
    let config = SchedulerConfig::default();
    let gang = vec![member("big", 8, 2), member("small", 4, 2)];
    let plan = propose_preemption(&snap, &gang, &config, &PreemptionPolicy::default(), now())
        .expect("a plan");
    assert_eq!(plan.victims.len(), 3, "8 + 4 GPUs: {:?}", plan.victims);
    assert_eq!(plan.members[0].1.len(), 8);
    assert_eq!(plan.members[1].1.len(), 4);
    assert_ne!(plan.members[0].0, plan.members[1].0);
    assert!(
        plan.explanation.contains("largest first"),
        "{}",
        plan.explanation
    );
}

#[test]
fn a_mixed_gang_that_cannot_fit_even_with_every_victim_gone_is_refused() {
    let snap = full_cluster();
    let gang = vec![
        member("big", 8, 3),
        member("big-2", 8, 3),
        member("small", 4, 3),
    ];
    let e = propose_preemption(
        &snap,
        &gang,
        &SchedulerConfig::default(),
        &PreemptionPolicy::default(),
        now(),
    )
    .expect_err("20 GPUs on 16");
    assert!(!e.to_string().is_empty());
}
