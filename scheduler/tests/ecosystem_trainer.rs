//! Kubeflow Trainer end to end: the real Trainer controller
//! (github.com/kubeflow/trainer/v2) and JobSet controller, both built from
//! their modules by scripts/control-plane-binaries (see
//! docs/ecosystem-tests.md). A TrainJob names a TrainingRuntime whose
//! `podGroupPolicy.coscheduling` makes the Trainer write a scheduler-plugins
//! PodGroup (`minMember` = every pod) and label each pod with it; the
//! runtime's pod template names gputopo only in `schedulerName`.

mod common;

use common::ecosystem::*;
use common::*;
use gputopo_testenv::controllers::jobset::JOBSET_NAME_LABEL;
use serde_json::json;

const TRAINER_V: &str = "trainer.kubeflow.org/v1alpha1";
const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// A TrainingRuntime of `gpus`-GPU nodes, gang-scheduled by coscheduling,
/// kept to the test's nodes by a plain nodeSelector.
fn runtime(name: &str, group: &str, gpus: u32) -> serde_json::Value {
    json!({
        "apiVersion": TRAINER_V, "kind": "TrainingRuntime", "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 300}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {
                        "schedulerName": SCHEDULER,
                        "nodeSelector": {"e2e-group": group},
                        "containers": [{
                            "name": "node",
                            "image": "registry.invalid/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
                        }]
                    }}}
                }
            }]}}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_trainjob_with_coscheduling_is_one_gang_on_the_fewest_leaves() {
    let env = ecosystem_env().await;
    trainer_controller(env).await;
    let s = scheduler(env).await;
    let client = env.client().await;
    // One DGX A100 on leaf 0, two on leaf 1: only leaf 1 holds two 8-GPU nodes.
    let cluster = LeafCluster::create(env, "tj", DGX_A100, &[1, 2]).await;
    let ns = env.create_namespace("trainjob").await;
    create_object(&client, Some(&ns), runtime("gpu-train", &cluster.group, 8)).await;
    create_object(&client, Some(&ns), json!({
        "apiVersion": TRAINER_V, "kind": "TrainJob", "metadata": {"name": "train"},
        "spec": {
            "runtimeRef": {"name": "gpu-train", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {"numNodes": 2}
        }
    }))
    .await;

    let selector = format!("{JOBSET_NAME_LABEL}=train");
    let pods = pods_bound(&client, &ns, &selector, 2, s).await;
    for p in &pods {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(POD_GROUP_LABEL).map(String::as_str),
            Some("train"),
            "the Trainer's coscheduling labels {}",
            pod_name(p)
        );
    }
    let group = dynamic_api(
        &client,
        Some(&ns),
        "scheduling.x-k8s.io/v1alpha1",
        "PodGroup",
    )
    .get("train")
    .await
    .expect("the Trainer's PodGroup");
    assert_eq!(group.data["spec"]["minMember"], 2, "{:?}", group.data);
    let leaf = cluster.assert_one_leaf("the TrainJob", &pods);
    assert!(cluster.leaves_with_at_least(2).contains(&leaf), "{leaf}");
    cluster.assert_optimal_sets("the TrainJob", &pods);
}
