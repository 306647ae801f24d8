//! Preemption: a training gang evicts inference pods but not a training
//! pod near completion, and a PodDisruptionBudget stops it.

use super::common::*;
use super::slot_pod;
use gputopo_testenv::TestEnv;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A cluster-scoped PriorityClass with a unique name; returns the name.
pub(super) async fn priority_class(env: &TestEnv, prefix: &str, value: i32) -> String {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let name = env.unique_name(prefix);
    let class: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }))
    .expect("a PriorityClass");
    Api::<PriorityClass>::all(env.client().await)
        .create(&PostParams::default(), &class)
        .await
        .unwrap_or_else(|e| panic!("creating PriorityClass {name}: {e}"));
    // The Priority admission plugin reads classes from an informer: until it
    // has seen this one, pods naming it are refused. Wait for a dry-run pod
    // to pass admission.
    let mut probe = gpu_pod("priority-probe", "none", "none", 0, &[]);
    probe.spec.as_mut().expect("spec").priority_class_name = Some(name.clone());
    let pods = Api::<Pod>::namespaced(env.client().await, "default");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        &format!("PriorityClass {name} known to admission"),
        Duration::from_secs(30),
        || async { pods.create(&dry_run, &probe).await.ok().map(|_| ()) },
        String::new,
    )
    .await;
    name
}

/// Whether the pod is gone or on its way out.
pub(super) async fn evicted(pods: &Api<Pod>, name: &str) -> bool {
    match pods.get_opt(name).await.expect("reading a pod") {
        None => true,
        Some(p) => p.metadata.deletion_timestamp.is_some(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_training_gang_preempts_inference_not_a_training_pod_near_completion() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("preempt");
    // One leaf of three DGX A100: `serve` full of inference, `train` full
    // with a training pod due to finish in 30 minutes, `free` empty.
    for slot in ["serve", "train", "free"] {
        let name = env.unique_name(&format!("a100-{slot}"));
        fixture_node(
            env,
            &name,
            DGX_A100,
            &[
                ("e2e-group", &group),
                ("e2e-slot", slot),
                ("gputopo.dev/spine", "spine-a"),
                ("gputopo.dev/leaf", "leaf-1"),
            ],
        )
        .await;
    }
    let sched = env.unique_name("sched-preempt");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("preempt").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for i in 0..8 {
        let name = format!("serve-{i}");
        create(
            &pods,
            &slot_pod(
                &name,
                &sched,
                &group,
                "serve",
                1,
                &[("gputopo.dev/workload", "inference")],
            ),
        )
        .await;
    }
    let finish = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_secs(30 * 60))
    .to_string();
    create(
        &pods,
        &slot_pod(
            "finetune",
            &sched,
            &group,
            "train",
            8,
            &[
                ("gputopo.dev/workload", "training"),
                ("gputopo.dev/expected-completion", &finish),
            ],
        ),
    )
    .await;
    for i in 0..8 {
        bound(&pods, &format!("serve-{i}"), &s).await;
    }
    let finetune = bound(&pods, "finetune", &s).await;

    // A higher-priority two-member gang of 8-GPU training pods: one member
    // fits on `free`; the other needs a whole node freed.
    let high = priority_class(env, "e2e-high", 1000).await;
    for i in 0..2 {
        let mut p = gpu_pod(
            &format!("pretrain-{i}"),
            &sched,
            &group,
            8,
            &[
                ("gputopo.dev/workload", "training"),
                ("gputopo.dev/gang", "pretrain"),
                ("gputopo.dev/gang-size", "2"),
            ],
        );
        p.spec.as_mut().expect("spec").priority_class_name = Some(high.clone());
        create(&pods, &p).await;
    }
    let mut nodes = BTreeSet::new();
    for i in 0..2 {
        let p = bound(&pods, &format!("pretrain-{i}"), &s).await;
        assert_eq!(gpus_of(&p).len(), 8);
        nodes.insert(node_of(&p).expect("bound"));
    }
    assert!(
        !nodes.contains(&node_of(&finetune).expect("bound")),
        "the gang took the protected training pod's node: {nodes:?}"
    );
    for i in 0..8 {
        assert!(
            evicted(&pods, &format!("serve-{i}")).await,
            "serve-{i} still runs"
        );
    }
    let still = pods.get("finetune").await.expect("finetune is still there");
    assert!(
        still.metadata.deletion_timestamp.is_none(),
        "the training pod near completion was evicted"
    );
    // The victims were told who preempted them; the preemptors why they waited.
    event_where(
        &client,
        &ns,
        "serve-0",
        "Preempted",
        |n| n.contains("pretrain-"),
        &s,
    )
    .await;
    event_where(
        &client,
        &ns,
        "pretrain-0",
        "FailedScheduling",
        |n| n.contains("preempting"),
        &s,
    )
    .await;
    let metrics = s.get("/metrics").await.expect("metrics").1;
    assert!(
        metrics.contains("gputopo_preemption_evictions_total{result=\"evicted\"} 8"),
        "{metrics}"
    );
    assert!(
        metrics.contains("gputopo_gang_wait_seconds_count 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn preemption_honours_a_pod_disruption_budget() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("pdb");
    fixture_node(
        env,
        &env.unique_name("a100-pdb"),
        DGX_A100,
        &[("e2e-group", &group), ("e2e-slot", "serve")],
    )
    .await;
    let sched = env.unique_name("sched-pdb");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("pdb").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // Every serving replica must stay up.
    let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "serve"},
        "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "serve"}}}
    }))
    .expect("a PDB");
    Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pdb)
        .await
        .expect("creating the PDB");
    for i in 0..4 {
        let mut p = slot_pod(
            &format!("serve-{i}"),
            &sched,
            &group,
            "serve",
            2,
            &[("gputopo.dev/workload", "inference")],
        );
        p.metadata.labels = Some(BTreeMap::from([("app".into(), "serve".into())]));
        create(&pods, &p).await;
    }
    for i in 0..4 {
        bound(&pods, &format!("serve-{i}"), &s).await;
    }
    let high = priority_class(env, "e2e-high", 1000).await;
    let mut p = gpu_pod(
        "urgent",
        &sched,
        &group,
        8,
        &[("gputopo.dev/workload", "training")],
    );
    p.spec.as_mut().expect("spec").priority_class_name = Some(high);
    create(&pods, &p).await;
    let e = wait_for(
        "a FailedScheduling event naming the budget",
        Duration::from_secs(60),
        || async {
            events(&client, &ns, "urgent", "FailedScheduling")
                .await
                .into_iter()
                .find(|e| note(e).contains("PodDisruptionBudget"))
        },
        || s.log(),
    )
    .await;
    assert!(note(&e).contains("serve-"), "{}", note(&e));
    for i in 0..4 {
        assert!(
            !evicted(&pods, &format!("serve-{i}")).await,
            "serve-{i} was evicted despite its budget"
        );
    }
    let urgent = pods.get("urgent").await.expect("urgent");
    assert!(node_of(&urgent).is_none(), "urgent bound on a full node");
    let metrics = s.get("/metrics").await.expect("metrics").1;
    assert!(
        !metrics.contains("gputopo_preemption_evictions_total{result=\"evicted\"}"),
        "{metrics}"
    );
}
