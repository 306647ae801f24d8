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

/// The proposal for one pod under the default configuration and policy.
fn preempt_for(
    snap: &gputopo_scheduler_core::snapshot::Snapshot,
    pod: gputopo_scheduler_core::pod::PendingPod,
) -> Result<
    gputopo_scheduler_core::preempt_schedule::PreemptionPlan,
    gputopo_scheduler_core::preempt_schedule::PreemptionError,
> {
    propose_preemption(
        snap,
        &[pod],
        &SchedulerConfig::default(),
        &PreemptionPolicy::default(),
        now(),
    )
}

/// A pod's rules: host port 18080 and nothing else.
fn ported() -> std::sync::Arc<gputopo_scheduler_core::pod_constraints::PodConstraints> {
    use gputopo_scheduler_core::pod_constraints::{HostPort, PodConstraints};
    std::sync::Arc::new(PodConstraints {
        host_ports: vec![HostPort::tcp(18080)],
        ..PodConstraints::default()
    })
}

/// Evictions free GPUs; they are never proposed on a node whose host port
/// the preemptor wants is taken, where the preemptor would still be
/// refused once the victims are gone.
#[test]
fn no_evictions_on_a_node_the_pods_host_port_still_refuses() {
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
    let mut preemptor = pod(4, &[("gputopo.dev/workload", "training")]);
    preemptor.priority = 100;
    preemptor.constraints = ported();
    let only_n1 = snapshot(vec![gpu_node("n1", a100())], vec![web.clone(), full("n1")]);
    let e = preempt_for(&only_n1, preemptor.clone());
    assert!(e.is_err(), "no eviction on n1: its port stays taken: {e:?}");

    let both = snapshot(
        vec![gpu_node("n1", a100()), gpu_node("n2", a100())],
        vec![web, full("n1"), full("n2")],
    );
    let plan = preempt_for(&both, preemptor).expect("n2 has the port free");
    assert_eq!(
        plan.victims,
        vec!["default/fill-n2".to_string()],
        "{}",
        plan.explanation
    );
}

/// A lower-priority pod whose host port is the only obstacle is evicted for
/// the preemptor, as kube-scheduler's DefaultPreemption would, even though
/// it holds no GPU; a GPU pod on the node is left alone, its GPUs not needed.
#[test]
fn a_lower_priority_pods_host_port_is_evicted_for_the_preemptor() {
    let mut web = holder("web", "n1", &[], None);
    web.priority = 10;
    web.constraints = ported();
    let serve = holder("serve", "n1", &[0, 1], Some("inference"));
    let snap = snapshot(vec![gpu_node("n1", a100())], vec![web.clone(), serve]);
    let config = SchedulerConfig::default();
    let mut preemptor = pod(4, &[("gputopo.dev/workload", "training")]);
    preemptor.priority = 100;
    preemptor.constraints = ported();
    assert!(matches!(
        schedule(&snap, &preemptor, &config),
        Decision::Unschedulable(_)
    ));
    let plan = preempt_for(&snap, preemptor.clone()).expect("the port holder goes");
    assert_eq!(
        plan.victims,
        vec!["default/web".to_string()],
        "{}",
        plan.explanation
    );
    assert_eq!(plan.members.len(), 1);
    assert_eq!(plan.members[0].0, "n1");
    assert_eq!(plan.members[0].1.len(), 4, "four free GPUs there");

    // A pod asking no GPU is preempted for too: only the port holder goes.
    let mut cpu = gputopo_scheduler_core::pod::PendingPod::new(
        "default",
        "proxy",
        gputopo_api::GpuRequest::default(),
    );
    cpu.requests.gpus = 0;
    cpu.priority = 100;
    cpu.constraints = ported();
    let plan = preempt_for(&snap, cpu.clone()).expect("the port holder goes");
    assert_eq!(
        plan.victims,
        vec!["default/web".to_string()],
        "{}",
        plan.explanation
    );
    assert_eq!(plan.members, vec![("n1".to_string(), vec![])]);

    // Of equal priority the holder stays, and nothing else would help.
    web.priority = 100;
    let kept = snapshot(vec![gpu_node("n1", a100())], vec![web]);
    let e = preempt_for(&kept, cpu).expect_err("the holder outranks no one");
    assert!(
        matches!(
            e,
            gputopo_scheduler_core::preempt_schedule::PreemptionError::NoRoomWithoutGpus {
                tried: 0,
                ..
            }
        ),
        "{e}"
    );
}

fn k8s_pod(
    name: &str,
    node: Option<&str>,
    labels: serde_json::Value,
    spec: serde_json::Value,
    gpus: u32,
) -> gputopo_api::k8s_openapi::api::core::v1::Pod {
    let mut spec = spec;
    spec["containers"] = serde_json::json!([{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]);
    if let Some(n) = node {
        spec["nodeName"] = serde_json::json!(n);
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": spec
    }))
    .expect("a pod")
}

fn bound_k8s(
    name: &str,
    node: &str,
    labels: serde_json::Value,
    gpus: u32,
    priority: i32,
) -> gputopo_scheduler_core::snapshot::BoundPodInput {
    let spec = serde_json::json!({"priority": priority});
    if gpus > 0 {
        let held: Vec<String> = (0..gpus).map(|g| g.to_string()).collect();
        let mut p = k8s_pod(name, Some(node), labels, spec, gpus);
        p.metadata.annotations =
            Some([("gputopo.dev/assigned-gpus".to_string(), held.join(","))].into());
        return gputopo_scheduler_core::snapshot::from_k8s::bound_pod_input(&p)
            .expect("readable")
            .expect("bound");
    }
    gputopo_scheduler_core::snapshot::from_k8s::bound_pod_input(&k8s_pod(
        name,
        Some(node),
        labels,
        spec,
        0,
    ))
    .expect("readable")
    .expect("bound")
}

fn preemptor_with(
    affinity: serde_json::Value,
    gpus: u32,
) -> gputopo_scheduler_core::pod::PendingPod {
    let spec = serde_json::json!({"priority": 100, "affinity": affinity});
    gputopo_scheduler_core::pod::PendingPod::from_k8s(&k8s_pod(
        "p",
        None,
        serde_json::json!({}),
        spec,
        gpus,
    ))
    .expect("readable")
}

/// Node n1 (labelled with its hostname) holding one priority-1 pod named
/// `app`, labelled `app: <app>`, on `gpus` GPUs.
fn n1_with(app: &str, gpus: u32) -> gputopo_scheduler_core::snapshot::Snapshot {
    let mut n = gpu_node("n1", a100());
    n.labels
        .insert("kubernetes.io/hostname".into(), "n1".into());
    snapshot(
        vec![n],
        vec![bound_k8s(
            app,
            "n1",
            serde_json::json!({"app": app}),
            gpus,
            1,
        )],
    )
}

/// A required `kind` (`podAffinity`, `podAntiAffinity`) term per hostname
/// selecting `app: <app>`.
fn per_host(kind: &str, app: &str) -> serde_json::Value {
    serde_json::json!({kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}})
}

/// The preemptor's required anti-affinity against a lower-priority pod on
/// the node: that pod is evicted (and only it), as kube-scheduler would.
#[test]
fn a_pod_the_preemptors_anti_affinity_refuses_is_evicted() {
    let snap = n1_with("noisy", 2);
    let preemptor = preemptor_with(per_host("podAntiAffinity", "noisy"), 2);
    let config = SchedulerConfig::default();
    assert!(matches!(
        schedule(&snap, &preemptor, &config),
        Decision::Unschedulable(_)
    ));
    let plan = preempt_for(&snap, preemptor).expect("the noisy pod goes");
    assert_eq!(
        plan.victims,
        vec!["default/noisy".to_string()],
        "{}",
        plan.explanation
    );
}

/// Evicting the pod the preemptor's required affinity needs never counts
/// as making room: with its GPUs the only ones to free, nothing is proposed.
#[test]
fn a_pod_the_preemptors_affinity_needs_is_never_the_room_made() {
    let snap = n1_with("db", 8);
    let preemptor = preemptor_with(per_host("podAffinity", "db"), 4);
    let e = preempt_for(&snap, preemptor).expect_err("evicting db would leave its affinity unmet");
    assert!(e.to_string().contains("n1"), "{e}");
}
