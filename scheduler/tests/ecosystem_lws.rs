//! LeaderWorkerSet end to end: the real LWS controller (sigs.k8s.io/lws,
//! built from its module by scripts/control-plane-binaries; see
//! docs/ecosystem-tests.md) makes a leader StatefulSet and, per leader, a
//! worker StatefulSet; the controller manager makes the pods and
//! gputopo-scheduler places them on kwok GPU nodes. The set names gputopo
//! only in `schedulerName`: a group (leader and workers, sized by LWS's own
//! `leaderworkerset.sigs.k8s.io/size` annotation) is gputopo's gang.

mod common;

use common::ecosystem::*;
use common::*;
use gputopo_testenv::controllers::lws::{GROUP_INDEX_LABEL, NAME_LABEL, SIZE_ANNOTATION};
use serde_json::json;

/// One group of `size` pods (a leader and `size - 1` workers), each asking
/// for `gpus` GPUs, kept to the test's nodes by a plain nodeSelector.
fn leader_worker_set(
    name: &str,
    group: &str,
    replicas: u32,
    size: u32,
    gpus: u32,
) -> serde_json::Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "workerTemplate": {"spec": {
                    "schedulerName": SCHEDULER,
                    "nodeSelector": {"e2e-group": group},
                    "containers": [{
                        "name": "serve",
                        "image": "registry.invalid/serve:1",
                        "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
                    }]
                }}
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_leader_worker_group_is_one_gang_on_the_fewest_leaves_with_optimal_gpu_sets() {
    let env = ecosystem_env().await;
    lws_controller(env).await;
    let s = scheduler(env).await;
    let client = env.client().await;
    // A leader and two workers of 4 GPUs (12 GPUs): more than leaf 0's one DGX-1.
    let cluster = LeafCluster::create(env, "lws", DGX1, &[1, 2]).await;
    let ns = env.create_namespace("lws").await;
    create_object(
        &client,
        Some(&ns),
        leader_worker_set("serve", &cluster.group, 1, 3, 4),
    )
    .await;

    let selector = format!("{NAME_LABEL}=serve,{GROUP_INDEX_LABEL}=0");
    let pods = pods_bound(&client, &ns, &selector, 3, s).await;
    for p in &pods {
        assert_eq!(
            annotation(p, SIZE_ANNOTATION).as_deref(),
            Some("3"),
            "LWS sizes the group on every pod: {}",
            pod_name(p)
        );
    }
    cluster.assert_one_leaf("the leader-worker group", &pods);
    cluster.assert_optimal_sets("the leader-worker group", &pods);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn each_group_of_a_two_replica_set_is_a_gang_of_its_own() {
    let env = ecosystem_env().await;
    lws_controller(env).await;
    let s = scheduler(env).await;
    let client = env.client().await;
    // Two groups of two 8-GPU pods; each leaf holds exactly one group.
    let cluster = LeafCluster::create(env, "lws2", DGX_A100, &[2, 2]).await;
    let ns = env.create_namespace("lws-two").await;
    create_object(
        &client,
        Some(&ns),
        leader_worker_set("pair", &cluster.group, 2, 2, 8),
    )
    .await;

    let mut leaves = Vec::new();
    for group in 0..2 {
        let selector = format!("{NAME_LABEL}=pair,{GROUP_INDEX_LABEL}={group}");
        let pods = pods_bound(&client, &ns, &selector, 2, s).await;
        leaves.push(cluster.assert_one_leaf(&format!("group {group}"), &pods));
        cluster.assert_optimal_sets(&format!("group {group}"), &pods);
    }
    assert_ne!(
        leaves[0], leaves[1],
        "each leaf holds one group of two nodes"
    );
}
