//! The demo's Dynamic Resource Allocation part: the ResourceSlice NVIDIA's
//! DRA driver would publish for the DRA node (from the `GpuTopology` its
//! agent published), NVIDIA's `gpu.nvidia.com` DeviceClass and one that
//! serves `nvidia.com/gpu` (KEP-5004), a claim template, the two pods, and
//! the table of claims and their devices.

use anyhow::{Context, Result};
use gputopo_api::GpuTopology;
use gputopo_testenv::TestEnv;
use gputopo_topology::dra_slice::{DriverFacts, nvidia_resource_slice};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

/// Publishes `node`'s slice as NVIDIA's driver would, and the classes.
pub async fn publish(env: &TestEnv, topologies: &[GpuTopology], node: &str) -> Result<()> {
    let client = env.client().await;
    let topology = topologies
        .iter()
        .find(|t| t.spec.node_name == node)
        .with_context(|| format!("no GpuTopology for {node}"))?;
    let product = topology
        .spec
        .summary
        .product
        .clone()
        .unwrap_or_else(|| "Tesla V100-SXM2-32GB".into());
    let mut facts = DriverFacts::for_product(&product, "32Gi")
        .with_context(|| format!("no driver facts for {product}"))?;
    facts.publish_index = topology.spec.gpus.iter().all(|g| g.uuid.is_none());
    let slice: ResourceSlice =
        serde_json::from_value(nvidia_resource_slice(node, &topology.spec, &facts))?;
    Api::<ResourceSlice>::all(client.clone())
        .create(&PostParams::default(), &slice)
        .await
        .context("creating the DRA node's ResourceSlice")?;
    let classes = [
        json!({"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}),
        json!({"metadata": {"name": "gpu-extended"}, "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "extendedResourceName": "nvidia.com/gpu"}}),
    ];
    for class in classes {
        let class: DeviceClass = serde_json::from_value(class)?;
        Api::<DeviceClass>::all(client.clone())
            .create(&PostParams::default(), &class)
            .await
            .context("creating a DeviceClass")?;
    }
    Ok(())
}

/// The claim template of four GPUs the claim pod uses.
pub async fn create_template(env: &TestEnv, namespace: &str) -> Result<()> {
    let t: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": {"name": "four-gpus"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus",
            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}}
    }))?;
    Api::<ResourceClaimTemplate>::namespaced(env.client().await, namespace)
        .create(&PostParams::default(), &t)
        .await
        .context("creating the claim template")?;
    Ok(())
}

/// A pod whose GPUs come from a claim of `template`, for an NVLink ring.
pub fn claim_pod(name: &str, template: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"gputopo.dev/collective": "ring"}},
        "spec": {
            "schedulerName": "gputopo-scheduler",
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [{"name": "main", "image": "registry.invalid/demo:1",
                            "resources": {"claims": [{"name": "gpus"}]}}]
        }
    }))?)
}

/// `pod` (a plain `nvidia.com/gpu` request) kept to the DRA node.
pub fn plain_pod(mut pod: Pod, node: &str) -> Pod {
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_selector =
            Some([("kubernetes.io/hostname".to_string(), node.to_string())].into());
    }
    pod
}

/// CLAIM POD NODE DEVICES GPUS: each claim's devices beside the GPU indices
/// gputopo wrote on its pod.
pub async fn print_claims(env: &TestEnv, namespace: &str) -> Result<()> {
    let client = env.client().await;
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items;
    let pods = Api::<Pod>::namespaced(client, namespace);
    println!(
        "{:<40} {:<10} {:<14} {:<30} GPUS",
        "CLAIM", "POD", "NODE", "DEVICES"
    );
    for c in claims {
        let pod = c
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.as_ref())
            .and_then(|r| r.first())
            .map(|r| r.name.clone())
            .unwrap_or_else(|| "-".into());
        let allocation = c.status.as_ref().and_then(|s| s.allocation.as_ref());
        let devices: Vec<String> = allocation
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
            .map(|r| r.device.clone())
            .collect();
        let (node, gpus) = match pods.get(&pod).await {
            Ok(p) => (
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_else(|| "<pending>".into()),
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("gputopo.dev/assigned-gpus").cloned())
                    .unwrap_or_else(|| "-".into()),
            ),
            Err(_) => ("-".into(), "-".into()),
        };
        println!(
            "{:<40} {:<10} {:<14} {:<30} {}",
            c.metadata.name.unwrap_or_default(),
            pod,
            node,
            if devices.is_empty() {
                "-".to_string()
            } else {
                devices.join(",")
            },
            gpus
        );
    }
    Ok(())
}
