//! Dynamic provisioning: a pod mounting a `WaitForFirstConsumer` claim whose
//! class has a CSI provisioner that publishes its free space
//! (`CSIDriver.spec.storageCapacity`), with room only on slot `b` (one
//! CSIStorageCapacity whose `nodeTopology` selects it). The scheduler must
//! pick a node with room, name it on the claim
//! (`volume.kubernetes.io/selected-node`) for the provisioner, wait until
//! the claim is bound, then bind the pod there. kube-scheduler is the
//! oracle; gputopo-scheduler must do the same.
//!
//! A real CSI provisioner (external-provisioner beside a CSI driver) cannot
//! run here: a stand-in in this test plays its part as external-provisioner
//! does for a claim with a selected node: it creates a volume pre-bound to
//! the claim (`claimRef`), with node affinity to the selected node, the
//! class and the claim's size. kube-controller-manager's volume controller,
//! the real one, then binds the claim to it.

use super::common::*;
use super::volumes::mount_claim;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIStorageCapacity, StorageClass};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::time::Duration;

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The stand-in provisioner: each claim of `class` in `ns` that names a
/// selected node gets a volume pre-bound to it. Runs until aborted.
async fn provision(client: Client, ns: String, class: String, group: String) {
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let volumes = Api::<PersistentVolume>::all(client);
    loop {
        for c in claims
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let spec = c.spec.clone().unwrap_or_default();
            let node = c
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SELECTED_NODE))
                .cloned();
            let (Some(node), Some(uid), Some(name)) =
                (node, c.metadata.uid.clone(), c.metadata.name.clone())
            else {
                continue;
            };
            if spec.storage_class_name.as_deref() != Some(class.as_str())
                || spec.volume_name.is_some()
            {
                continue;
            }
            let size = spec
                .resources
                .and_then(|r| r.requests)
                .and_then(|r| r.get("storage").cloned())
                .map_or_else(|| "1Gi".to_string(), |q| q.0);
            let volume: PersistentVolume = serde_json::from_value(json!({
                "metadata": {
                    "name": format!("pvc-{uid}"),
                    "annotations": {"pv.kubernetes.io/provisioned-by": "e2e.gputopo.dev/standin"}
                },
                "spec": {
                    "storageClassName": class,
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Delete",
                    "claimRef": {"namespace": ns, "name": name, "uid": uid},
                    "local": {"path": "/mnt/provisioned"},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{
                        "matchExpressions": [
                            {"key": "e2e-group", "operator": "In", "values": [group]}
                        ],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node]}
                        ]
                    }]}}
                }
            }))
            .expect("a volume");
            // Already made on an earlier pass: the conflict is the answer.
            let _ = volumes.create(&PostParams::default(), &volume).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The slot the pod was bound to and the node named on its claim, once the
/// claim is bound.
async fn run(scheduler: &str, log: &dyn Fn() -> String) -> (String, String) {
    let env = env().await;
    let client = env.client().await;
    let (group, slot_of) = slot_nodes(env, "prov").await;
    let ns = env.create_namespace("prov").await;
    let class_name = env.unique_name("standin");
    let driver_name = format!("{}.e2e.gputopo.dev", env.unique_name("standin"));
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": class_name},
        "provisioner": driver_name,
        "volumeBindingMode": "WaitForFirstConsumer"
    }))
    .expect("a class");
    let post = PostParams::default();
    Api::<StorageClass>::all(client.clone())
        .create(&post, &class)
        .await
        .expect("creating the class");
    // The driver publishes capacity: room for the claim on slot b only.
    let driver: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": driver_name},
        "spec": {"storageCapacity": true, "attachRequired": false}
    }))
    .expect("a CSIDriver");
    Api::<CSIDriver>::all(client.clone())
        .create(&post, &driver)
        .await
        .expect("creating the driver");
    for (slot, room) in [("a", "1Gi"), ("b", "100Gi")] {
        let capacity: CSIStorageCapacity = serde_json::from_value(json!({
            "metadata": {"name": format!("room-{slot}")},
            "storageClassName": class_name,
            "capacity": room,
            "nodeTopology": {"matchLabels": {"e2e-group": group, "e2e-slot": slot}}
        }))
        .expect("a CSIStorageCapacity");
        Api::<CSIStorageCapacity>::namespaced(client.clone(), &ns)
            .create(&post, &capacity)
            .await
            .expect("creating the capacity");
    }
    let standin = tokio::spawn(provision(
        client.clone(),
        ns.clone(),
        class_name.clone(),
        group.clone(),
    ));
    let node = mount_claim(
        &client,
        &ns,
        (&group, scheduler),
        (&class_name, "scratch", "20Gi"),
        log,
    )
    .await;
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let selected = wait_for(
        &format!("{scheduler}: the claim bound, its node named"),
        Duration::from_secs(90),
        || async {
            let c = claims.get("scratch").await.ok()?;
            let phase = c.status.as_ref()?.phase.as_deref()?;
            (phase == "Bound").then_some(())?;
            c.metadata.annotations?.get(SELECTED_NODE).cloned()
        },
        log,
    )
    .await;
    standin.abort();
    assert_eq!(
        selected, node,
        "{scheduler}: the claim names the pod's node"
    );
    (slot_of.get(&node).cloned().unwrap_or(node), selected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_provisioned_claim_gets_a_node_with_room_before_the_pod_binds() {
    let env = env().await;
    env.with_scheduler().await;
    env.with_controller_manager().await;
    let (oracle, _) = run("default-scheduler", &String::new).await;
    assert_eq!(oracle, "b", "kube-scheduler");
    let sched = env.unique_name("sched-prov");
    let s = SchedulerProcess::start(env, &sched).await;
    let (ours, _) = run(&sched, &|| s.log()).await;
    assert_eq!(ours, "b", "gputopo-scheduler\n{}", s.log());
}
