//! A pod mounting a `WaitForFirstConsumer` claim whose only volume is a
//! local PersistentVolume on one node: kube-scheduler (the oracle) binds
//! the pod to that node and the volume controller then binds the claim;
//! gputopo-scheduler must do the same, through the same writes (the
//! volume's `claimRef`). Each run has its own two nodes, namespace, class
//! and volume; kube-controller-manager runs the volume controller.

use super::common::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::Duration;

/// The slot the pod was bound to, once its claim is bound too.
async fn run(scheduler: &str, log: &dyn Fn() -> String) -> String {
    let env = env().await;
    let client = env.client().await;
    let (group, slot_of) = slot_nodes(env, "vol").await;
    let ns = env.create_namespace("vol").await;
    let class_name = env.unique_name("local");
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": class_name},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"
    }))
    .expect("a class");
    let post = PostParams::default();
    Api::<StorageClass>::all(client.clone())
        .create(&post, &class)
        .await
        .expect("creating the class");
    let volume_name = env.unique_name("disk-b");
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": volume_name},
        "spec": {
            "storageClassName": class_name,
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteOnce"],
            "local": {"path": "/mnt/nvme0"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "e2e-group", "operator": "In", "values": [group]},
                {"key": "e2e-slot", "operator": "In", "values": ["b"]}
            ]}]}}
        }
    }))
    .expect("a volume");
    Api::<PersistentVolume>::all(client.clone())
        .create(&post, &volume)
        .await
        .expect("creating the volume");
    let node = mount_claim(
        &client,
        &ns,
        (&group, scheduler),
        (&class_name, "dataset", "50Gi"),
        log,
    )
    .await;
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let bound_to = wait_for(
        &format!("{scheduler}: the claim bound"),
        Duration::from_secs(90),
        || async {
            let c = claims.get("dataset").await.ok()?;
            let phase = c.status.as_ref()?.phase.as_deref()?;
            (phase == "Bound").then(|| c.spec?.volume_name)?
        },
        log,
    )
    .await;
    assert_eq!(bound_to, volume_name, "{scheduler}: the claim's volume");
    slot_of.get(&node).cloned().unwrap_or(node)
}

/// A claim `name` of `class` and `size` in `ns`, and a 1-GPU pod `trainer`
/// of `group` mounting it, for `scheduler`: the node the pod was bound to.
pub(super) async fn mount_claim(
    client: &kube::Client,
    ns: &str,
    (group, scheduler): (&str, &str),
    (class, name, size): (&str, &str, &str),
    log: &dyn Fn() -> String,
) -> String {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "storageClassName": class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}}
        }
    }))
    .expect("a claim");
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &claim)
        .await
        .expect("creating the claim");
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let mut pod = gpu_pod("trainer", scheduler, group, 1, &[]);
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = Some(vec![
            serde_json::from_value(
                json!({"name": "data", "persistentVolumeClaim": {"claimName": name}}),
            )
            .expect("a volume"),
        ]);
    }
    create(&pods, &pod).await;
    wait_for(
        &format!("{scheduler}: the pod bound"),
        Duration::from_secs(120),
        || async { pods.get("trainer").await.ok().as_ref().and_then(node_of) },
        log,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_wait_for_first_consumer_claim_takes_the_pod_to_its_local_volume() {
    let env = env().await;
    env.with_scheduler().await;
    env.with_controller_manager().await;
    let oracle = run("default-scheduler", &String::new).await;
    assert_eq!(oracle, "b", "kube-scheduler");
    let sched = env.unique_name("sched-vol");
    let s = SchedulerProcess::start(env, &sched).await;
    let ours = run(&sched, &|| s.log()).await;
    assert_eq!(ours, "b", "gputopo-scheduler\n{}", s.log());
}
