//! JobSet end to end: the real JobSet controller (sigs.k8s.io/jobset, built
//! from its module by scripts/control-plane-binaries; see
//! docs/ecosystem-tests.md) makes the Jobs, the controller manager's Job
//! controller the pods, and gputopo-scheduler places them on kwok GPU nodes.
//! The JobSet names gputopo only in `schedulerName`: the gang (every pod of
//! the JobSet, sized by the JobSet's replicated jobs) is gputopo's own
//! reading of JobSet's labels.

mod common;

use common::ecosystem::*;
use common::*;
use gputopo_testenv::controllers::jobset::JOBSET_NAME_LABEL;
use serde_json::json;

/// A JobSet of one replicated job: `replicas` Jobs of one pod, each pod
/// asking for `gpus` GPUs, kept to the test's nodes by a plain nodeSelector.
fn jobset(name: &str, group: &str, replicas: u32, gpus: u32) -> serde_json::Value {
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [{
            "name": "workers",
            "replicas": replicas,
            "template": {"spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "template": {"spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "nodeSelector": {"e2e-group": group},
                    "containers": [{
                        "name": "train",
                        "image": "registry.invalid/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
                    }]
                }}
            }}
        }]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_jobset_is_one_gang_on_the_fewest_leaves_with_optimal_gpu_sets() {
    let env = ecosystem_env().await;
    jobset_controller(env).await;
    let s = scheduler(env).await;
    let client = env.client().await;
    // One DGX-1 on leaf 0, two on leaf 1: only leaf 1 holds both 8-GPU pods.
    let cluster = LeafCluster::create(env, "js", DGX1, &[1, 2]).await;
    let ns = env.create_namespace("jobset").await;
    create_object(&client, Some(&ns), jobset("train", &cluster.group, 2, 8)).await;

    let selector = format!("{JOBSET_NAME_LABEL}=train");
    let pods = pods_bound(&client, &ns, &selector, 2, s).await;
    let leaf = cluster.assert_one_leaf("the JobSet", &pods);
    assert!(
        cluster.leaves_with_at_least(2).contains(&leaf),
        "the gang went to {leaf}, which cannot hold two nodes' worth"
    );
    let nodes: std::collections::BTreeSet<_> = pods.iter().filter_map(node_of).collect();
    assert_eq!(nodes.len(), 2, "two 8-GPU pods need two nodes: {nodes:?}");
    cluster.assert_optimal_sets("the JobSet", &pods);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_jobset_of_half_node_pods_gets_nvlink_quads_in_one_leaf() {
    let env = ecosystem_env().await;
    jobset_controller(env).await;
    let s = scheduler(env).await;
    let client = env.client().await;
    // Three 4-GPU pods (12 GPUs): more than leaf 0's one DGX-1 holds.
    let cluster = LeafCluster::create(env, "jsq", DGX1, &[1, 2]).await;
    let ns = env.create_namespace("jobset-quads").await;
    create_object(&client, Some(&ns), jobset("quads", &cluster.group, 3, 4)).await;

    let selector = format!("{JOBSET_NAME_LABEL}=quads");
    let pods = pods_bound(&client, &ns, &selector, 3, s).await;
    cluster.assert_one_leaf("the JobSet of quads", &pods);
    cluster.assert_optimal_sets("the JobSet of quads", &pods);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_jobset_too_big_for_the_cluster_gets_an_event_naming_its_gang_and_binds_nothing() {
    let env = ecosystem_env().await;
    jobset_controller(env).await;
    let s = scheduler(env).await;
    let client = env.client().await;
    let cluster = LeafCluster::create(env, "jsbig", DGX1, &[1, 2]).await;
    let ns = env.create_namespace("jobset-big").await;
    // Four 8-GPU pods; the test's nodes are three.
    create_object(&client, Some(&ns), jobset("too-big", &cluster.group, 4, 8)).await;

    let selector = format!("{JOBSET_NAME_LABEL}=too-big");
    // All four pods exist (the gang is complete), so what holds them is room.
    pods_where(&client, &ns, &selector, 4, "created", |_| true, s).await;
    // gputopo's word on the whole gang: named after the JobSet, nothing bound.
    let event = wait_for(
        "a FailedScheduling event for the JobSet's gang",
        CHAIN_TIMEOUT,
        || async {
            // Earlier ones may say the gang waits for members still being created.
            events_in(&client, &ns).await.into_iter().find(|e| {
                let text = note(e);
                e.reason.as_deref() == Some("FailedScheduling")
                    && text.contains("too-big")
                    && text.contains("nothing bound")
            })
        },
        || s.log(),
    )
    .await;
    let text = note(&event);
    assert!(
        text.contains("(4 members)"),
        "the event counts the JobSet's pods (replicas x parallelism): {text}"
    );
    // The event came after gputopo judged the whole gang: none of it is bound.
    let pods = pods_where(&client, &ns, &selector, 4, "listed", |_| true, s).await;
    let bound: Vec<String> = pods.iter().filter_map(node_of).collect();
    assert!(bound.is_empty(), "a partial gang was bound: {bound:?}");
}
