//! Preemption on the snapshot: the victims proposed free a usable set, under
//! the rules of `preempt` (inference first, never equal priority).

mod common;

use common::{a100, gpu_node, holder, pod, snapshot};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::preempt::PreemptionPolicy;
use gputopo_scheduler_core::preempt_schedule::{propose_preemption, propose_preemption_sparing};
use gputopo_scheduler_core::schedule::{Decision, schedule};
use std::collections::BTreeSet;

fn now() -> Timestamp {
    "2026-11-21T12:00:00Z".parse().expect("a time")
}

#[test]
fn evicts_inference_not_training_to_free_a_quad() {
    let mut training = holder("train", "n1", &[4, 5, 6, 7], Some("training"));
    training.start_time = Some("2026-11-21T11:55:00Z".parse().expect("time"));
    let mut inference = holder("serve", "n1", &[0, 1, 2, 3], Some("inference"));
    inference.start_time = Some("2026-11-21T09:00:00Z".parse().expect("time"));
    let snap = snapshot(vec![gpu_node("n1", a100())], vec![training, inference]);
    let config = SchedulerConfig::default();
    let mut preemptor = pod(4, &[("gputopo.dev/workload", "training")]);
    preemptor.priority = 100;
    assert!(
        matches!(
            schedule(&snap, &preemptor, &config),
            Decision::Unschedulable(_)
        ),
        "the node is full"
    );

    let plan = propose_preemption(
        &snap,
        &[preemptor.clone()],
        &config,
        &PreemptionPolicy::default(),
        now(),
    )
    .expect("a plan");
    assert_eq!(
        plan.victims,
        vec!["default/serve".to_string()],
        "{}",
        plan.explanation
    );
    assert_eq!(plan.members, vec![("n1".to_string(), vec![0, 1, 2, 3])]);

    // Equal priority: nobody may be evicted.
    preemptor.priority = 0;
    let e = propose_preemption(
        &snap,
        &[preemptor],
        &config,
        &PreemptionPolicy::default(),
        now(),
    )
    .expect_err("no victim of equal priority");
    assert!(!e.to_string().is_empty());
}

#[test]
fn a_spared_pod_is_worked_around_and_its_gang_spared_whole() {
    // Two inference pods and a two-member inference gang, each on a quad.
    let mut serve_a = holder("serve-a", "n1", &[0, 1, 2, 3], Some("inference"));
    serve_a.start_time = Some("2026-11-21T09:00:00Z".parse().expect("time"));
    let mut serve_b = holder("serve-b", "n1", &[4, 5, 6, 7], Some("inference"));
    serve_b.start_time = Some("2026-11-21T09:00:00Z".parse().expect("time"));
    let snap = snapshot(vec![gpu_node("n1", a100())], vec![serve_a, serve_b]);
    let config = SchedulerConfig::default();
    let mut preemptor = pod(4, &[("gputopo.dev/workload", "training")]);
    preemptor.priority = 100;
    let policy = PreemptionPolicy::default();

    let first =
        propose_preemption(&snap, &[preemptor.clone()], &config, &policy, now()).expect("a plan");
    assert_eq!(first.victims.len(), 1, "{}", first.explanation);
    let refused = first.victims[0].clone();
    let other = if refused == "default/serve-a" {
        "default/serve-b"
    } else {
        "default/serve-a"
    };

    // The API server refused that eviction (a PodDisruptionBudget): the
    // next proposal takes the other quad.
    let spared = BTreeSet::from([refused.clone()]);
    let second = propose_preemption_sparing(
        &snap,
        &[preemptor.clone()],
        &config,
        &policy,
        now(),
        &spared,
    )
    .expect("a plan around the spared pod");
    assert_eq!(
        second.victims,
        vec![other.to_string()],
        "{}",
        second.explanation
    );

    // Both spared: nothing is left to evict, and the answer says no.
    let both = BTreeSet::from([refused, other.to_string()]);
    assert!(
        propose_preemption_sparing(&snap, &[preemptor], &config, &policy, now(), &both).is_err()
    );
}

/// Evictions free GPUs; they are never proposed on a node whose host port
/// the preemptor wants is taken, where the preemptor would still be
/// refused once the victims are gone.
#[test]
fn no_evictions_on_a_node_the_pods_host_port_still_refuses() {
    use gputopo_scheduler_core::pod_constraints::{HostPort, PodConstraints};
    use std::sync::Arc;
    let ported = || {
        Arc::new(PodConstraints {
            host_ports: vec![HostPort::tcp(18080)],
            ..PodConstraints::default()
        })
    };
    let mut web = holder("web", "n1", &[], None);
    web.priority = 1000;
    web.constraints = ported();
    let full = |node: &str| {
        holder(
            &format!("fill-{node}"),
            node,
            &[0, 1, 2, 3, 4, 5, 6, 7],
            Some("inference"),
        )
    };
    let config = SchedulerConfig::default();
    let mut preemptor = pod(4, &[("gputopo.dev/workload", "training")]);
    preemptor.priority = 100;
    preemptor.constraints = ported();
    let only_n1 = snapshot(vec![gpu_node("n1", a100())], vec![web.clone(), full("n1")]);
    let e = propose_preemption(
        &only_n1,
        &[preemptor.clone()],
        &config,
        &PreemptionPolicy::default(),
        now(),
    );
    assert!(e.is_err(), "no eviction on n1: its port stays taken: {e:?}");

    let both = snapshot(
        vec![gpu_node("n1", a100()), gpu_node("n2", a100())],
        vec![web, full("n1"), full("n2")],
    );
    let plan = propose_preemption(
        &both,
        &[preemptor],
        &config,
        &PreemptionPolicy::default(),
        now(),
    )
    .expect("n2 has the port free");
    assert_eq!(
        plan.victims,
        vec!["default/fill-n2".to_string()],
        "{}",
        plan.explanation
    );
}
