//! The demo's training pod with a dataset on a node-local NVMe volume: a
//! `WaitForFirstConsumer` claim whose only volume is a local
//! PersistentVolume on one node. gputopo-scheduler takes the pod to that
//! node and binds the claim to the volume as kube-scheduler would (the
//! volume's `claimRef`; the volume controller finishes the binding).

use anyhow::{Context, Result};
use gputopo_testenv::TestEnv;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The pod's name.
pub const POD: &str = "train-ckpt";
/// The node the volume is on.
pub const NODE: &str = "a100-bridged-1";
const CLASS: &str = "local-nvme";
const CLAIM: &str = "dataset";

/// Creates the class, the volume on [`NODE`] and the claim in `ns`.
pub async fn create_storage(env: &TestEnv, ns: &str) -> Result<()> {
    let client = env.client().await;
    let post = PostParams::default();
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"
    }))?;
    Api::<StorageClass>::all(client.clone())
        .create(&post, &class)
        .await
        .context("creating the local StorageClass")?;
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": format!("nvme-{NODE}")},
        "spec": {
            "storageClassName": CLASS,
            "capacity": {"storage": "3Ti"},
            "accessModes": ["ReadWriteOnce"],
            "local": {"path": "/mnt/nvme0"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}
            ]}]}}
        }
    }))?;
    Api::<PersistentVolume>::all(client.clone())
        .create(&post, &volume)
        .await
        .context("creating the local PersistentVolume")?;
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": CLAIM},
        "spec": {
            "storageClassName": CLASS,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Ti"}}
        }
    }))?;
    Api::<PersistentVolumeClaim>::namespaced(client, ns)
        .create(&post, &claim)
        .await
        .context("creating the dataset claim")?;
    Ok(())
}

/// `pod` mounting the dataset claim.
pub fn with_dataset(mut pod: Pod) -> Result<Pod> {
    pod.spec.get_or_insert_default().volumes = Some(vec![serde_json::from_value(
        json!({"name": "dataset", "persistentVolumeClaim": {"claimName": CLAIM}}),
    )?]);
    Ok(pod)
}
