//! Preemption where the obstacle is a rule, not GPUs: a lower-priority pod
//! holds the host port a higher-priority pod needs on its only allowed
//! node. kube-scheduler (the oracle) evicts it and binds the newcomer
//! there; gputopo-scheduler must do the same. Each scheduler runs on its own
//! two fresh nodes and namespace.

use super::common::*;
use super::preemption::{evicted, priority_class};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use std::time::Duration;

/// Runs the scenario under `scheduler`: returns the slot the
/// high-priority pod was bound to once the port holder was evicted.
async fn port_taken_by_a_lower_priority_pod(
    scheduler: &str,
    low: &str,
    high: &str,
    log: &dyn Fn() -> String,
) -> String {
    let env = env().await;
    let (group, slot_of) = slot_nodes(env, "preempt-port").await;
    let ns = env.create_namespace("preempt-port").await;
    let pods = Api::<Pod>::namespaced(env.client().await, &ns);
    let ported = |name: &str, class: &str| {
        let mut pod = gpu_pod(name, scheduler, &group, 1, &[]);
        let mut spec = serde_json::to_value(pod.spec.take()).expect("a spec");
        merge_json(
            &mut spec,
            &json!({
                "priorityClassName": class,
                "nodeSelector": {"e2e-slot": "a"},
                "containers": [{
                    "name": "main", "image": "registry.invalid/serve:1",
                    "ports": [{"containerPort": 8080, "hostPort": 18080}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
            }),
        );
        pod.spec = Some(serde_json::from_value(spec).expect("a pod spec"));
        pod
    };
    create(&pods, &ported("holder", low)).await;
    let holder = wait_for(
        &format!("{scheduler}: the port holder bound"),
        Duration::from_secs(90),
        || async { pods.get("holder").await.ok().and_then(|p| node_of(&p)) },
        log,
    )
    .await;
    assert_eq!(slot_of[&holder], "a");
    create(&pods, &ported("newcomer", high)).await;
    let node = wait_for(
        &format!("{scheduler}: the newcomer bound once the holder is evicted"),
        Duration::from_secs(120),
        || async { pods.get("newcomer").await.ok().and_then(|p| node_of(&p)) },
        log,
    )
    .await;
    assert!(
        evicted(&pods, "holder").await,
        "{scheduler}: the holder still runs beside the newcomer\n{}",
        log()
    );
    slot_of[&node].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_lower_priority_pods_host_port_is_preempted_as_kube_scheduler_does() {
    let env = env().await;
    env.with_scheduler().await;
    let low = priority_class(env, "e2e-port-low", 10).await;
    let high = priority_class(env, "e2e-port-high", 1000).await;
    let oracle =
        port_taken_by_a_lower_priority_pod("default-scheduler", &low, &high, &String::new).await;
    assert_eq!(oracle, "a", "kube-scheduler");
    let sched = env.unique_name("sched-port");
    let s = SchedulerProcess::start(env, &sched).await;
    let ours = port_taken_by_a_lower_priority_pod(&sched, &low, &high, &|| s.log()).await;
    assert_eq!(ours, "a", "gputopo-scheduler\n{}", s.log());
}
