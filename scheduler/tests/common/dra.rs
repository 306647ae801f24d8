//! DRA helpers for the end-to-end tests: kwok nodes with the ResourceSlice
//! NVIDIA's DRA driver would publish for them, NVIDIA's DeviceClass,
//! claims, templates, pods using them, and reading allocations back.

use super::*;
use gputopo_api::GpuTopologySpec;
use gputopo_testenv::TestEnv;
use gputopo_topology::dra_slice::{
    A100_40GB_MIG, DriverFacts, compute_domain_resource_slice, link_resource_slice,
    nic_resource_slice, nvidia_mig_resource_slices, nvidia_resource_slice,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceRequestAllocationResult, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub const CLASS: &str = "gpu.nvidia.com";

/// A kwok node from `fixture` in `group`, its `GpuTopology`, and the slice
/// NVIDIA's driver publishes for it (devices by `index`: the fixtures'
/// `topo -m` names no UUID); NVIDIA's DeviceClass if missing.
/// `device_plugin`: whether the node also lists `nvidia.com/gpu`.
pub async fn dra_node(
    env: &TestEnv,
    name: &str,
    fixture: &str,
    product: &str,
    group: &str,
    device_plugin: bool,
) -> GpuTopologySpec {
    let (_, topology) =
        fixture_node_with(env, name, fixture, &[("e2e-group", group)], device_plugin).await;
    let client = env.client().await;
    let mut facts = DriverFacts::for_product(product, "32Gi").expect("a known product");
    facts.publish_index = topology.spec.gpus.iter().all(|g| g.uuid.is_none());
    let slice: ResourceSlice =
        serde_json::from_value(nvidia_resource_slice(name, &topology.spec, &facts))
            .expect("a slice");
    Api::<ResourceSlice>::all(client.clone())
        .create(&PostParams::default(), &slice)
        .await
        .unwrap_or_else(|e| panic!("creating the ResourceSlice of {name}: {e}"));
    device_class(
        &client,
        CLASS,
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    )
    .await;
    topology.spec
}

/// A DeviceClass of one CEL selector, unless it exists.
pub async fn device_class(client: &kube::Client, name: &str, expression: &str) {
    let class: DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]}
    }))
    .expect("a class");
    match Api::<DeviceClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating DeviceClass {name}: {e}"),
    }
}

/// The ComputeDomain driver's default-channel class, as its Helm chart writes it.
pub const CHANNEL_CLASS: &str = "compute-domain-default-channel.nvidia.com";
/// dranet's RDMA NICs, as its NVIDIA guide selects them.
pub const NIC_CLASS: &str = "dranet-rdma";

/// Beside the GPU slice of node `name`: the ComputeDomain driver's slice
/// (`channel-0`, `daemon-0`) and dranet's NICs from `spec`, with their
/// classes. The ComputeDomain controller and its IMEX daemons need GPUs
/// and do not run here: the objects are shaped as their sources build them.
pub async fn other_drivers(env: &TestEnv, name: &str, spec: &GpuTopologySpec) {
    let client = env.client().await;
    let mut objects = vec![compute_domain_resource_slice(name)];
    objects.extend(nic_resource_slice(name, spec));
    create_slices(&client, name, objects).await;
    device_class(
        &client,
        CHANNEL_CLASS,
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel' && device.attributes['compute-domain.nvidia.com'].id == 0",
    )
    .await;
    device_class(&client, NIC_CLASS, RDMA_SELECTOR).await;
}

/// dranet's RDMA class selector, as its NVIDIA guide writes it.
const RDMA_SELECTOR: &str =
    "device.driver == 'dra.net' && device.attributes['dra.net'].rdma == true";

/// Creates the slices (JSON) of node `name`.
async fn create_slices(client: &kube::Client, name: &str, objects: Vec<Value>) {
    let slices = Api::<ResourceSlice>::all(client.clone());
    for object in objects {
        let slice: ResourceSlice = serde_json::from_value(object).expect("a slice");
        slices
            .create(&PostParams::default(), &slice)
            .await
            .unwrap_or_else(|e| panic!("creating a ResourceSlice of {name}: {e}"));
    }
}

/// The classes of gputopo's link devices, as its Helm chart writes them.
pub const GPU_LINK_CLASS: &str = "gpu-link.gputopo.dev";
pub const NIC_LINK_CLASS: &str = "nic-link.gputopo.dev";

/// A kwok node from `fixture` whose GPUs carry UUIDs (as NVML reports
/// them; a bare `topo -m` names none), publishing NVIDIA's GPU slice,
/// dranet's NICs and gputopo's link devices (`dra_slice::link_resource_slice`,
/// what the agent publishes), with the classes of all three.
pub async fn linked_node(env: &TestEnv, name: &str, fixture: &str, group: &str) -> GpuTopologySpec {
    let mut spec = topology(name, fixture).spec;
    for g in &mut spec.gpus {
        g.uuid = Some(format!("GPU-5a1e0000-0000-4000-8000-{:012}", g.index));
    }
    spec_node(env, name, spec.clone(), &[("e2e-group", group)], false).await;
    let client = env.client().await;
    let facts = DriverFacts::for_product("Tesla V100-SXM2-32GB", "32Gi").expect("known");
    let mut objects = vec![
        nvidia_resource_slice(name, &spec, &facts),
        link_resource_slice(name, &spec),
    ];
    objects.extend(nic_resource_slice(name, &spec));
    create_slices(&client, name, objects).await;
    device_class(
        &client,
        CLASS,
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    )
    .await;
    device_class(&client, NIC_CLASS, RDMA_SELECTOR).await;
    device_class(&client, GPU_LINK_CLASS, "device.driver == 'topology.gputopo.dev' && device.attributes['topology.gputopo.dev'].type == 'gpu'").await;
    device_class(&client, NIC_LINK_CLASS, "device.driver == 'topology.gputopo.dev' && device.attributes['topology.gputopo.dev'].type == 'nic'").await;
    spec
}

pub fn request(count: u32) -> Value {
    json!({"name": "gpus", "exactly": {"deviceClassName": CLASS, "count": count}})
}

pub async fn template(client: &kube::Client, ns: &str, name: &str, request: Value) {
    let t: ResourceClaimTemplate = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}}
    }))
    .expect("a template");
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &t)
        .await
        .unwrap_or_else(|e| panic!("creating template {name}: {e}"));
}

/// A claim named `name` whose `spec.devices` is `devices`.
pub async fn named_claim(client: &kube::Client, ns: &str, name: &str, devices: Value) {
    let c: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": devices},
    }))
    .expect("a claim");
    Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &c)
        .await
        .unwrap_or_else(|e| panic!("creating claim {name}: {e}"));
}

/// NVIDIA's MIG class (its Helm chart).
pub const MIG_CLASS: &str = "mig.nvidia.com";

/// A kwok node from `fixture` in `group` whose GPUs NVIDIA's driver
/// publishes with dynamic MIG (A100 40GB profiles: a counters slice, then
/// a slice per GPU), with the MIG class.
pub async fn mig_node(env: &TestEnv, name: &str, fixture: &str, group: &str) {
    let (_, topology) = fixture_node_with(env, name, fixture, &[("e2e-group", group)], false).await;
    let client = env.client().await;
    let mut facts = DriverFacts::for_product("NVIDIA A100-SXM4-40GB", "40Gi").expect("known");
    facts.publish_index = topology.spec.gpus.iter().all(|g| g.uuid.is_none());
    let slices = Api::<ResourceSlice>::all(client.clone());
    for object in nvidia_mig_resource_slices(name, &topology.spec, &facts, A100_40GB_MIG) {
        let slice: ResourceSlice = serde_json::from_value(object).expect("a slice");
        slices
            .create(&PostParams::default(), &slice)
            .await
            .unwrap_or_else(|e| panic!("creating a MIG ResourceSlice of {name}: {e}"));
    }
    device_class(
        &client,
        CLASS,
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    )
    .await;
    device_class(
        &client,
        MIG_CLASS,
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
    )
    .await;
}

pub async fn claim(client: &kube::Client, ns: &str, name: &str, request: Value) -> ResourceClaim {
    let c: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}}
    }))
    .expect("a claim");
    Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &c)
        .await
        .unwrap_or_else(|e| panic!("creating claim {name}: {e}"))
}

/// A pod for `scheduler` in `group` whose GPUs come from one claim: a
/// template's (`template: true`) or a named claim's. No extended resource.
pub fn claim_pod(name: &str, scheduler: &str, group: &str, source: &str, template: bool) -> Pod {
    let source_field = if template {
        "resourceClaimTemplateName"
    } else {
        "resourceClaimName"
    };
    pod_with_claims(
        name,
        scheduler,
        group,
        &[json!({"name": "gpus", source_field: source})],
    )
}

/// A pod for `scheduler` in `group` using `entries` (its
/// `spec.resourceClaims`), each in its one container.
pub fn pod_with_claims(name: &str, scheduler: &str, group: &str, entries: &[Value]) -> Pod {
    let uses: Vec<Value> = entries.iter().map(|e| json!({"name": e["name"]})).collect();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {"e2e-group": group},
            "resourceClaims": entries,
            "containers": [{
                "name": "main",
                "image": "registry.invalid/train:1",
                "resources": {"claims": uses}
            }]
        }
    }))
    .expect("a pod")
}

/// The claim a pod's `gpus` entry names (its own, or the template's).
pub async fn claim_of(client: &kube::Client, ns: &str, pod: &Pod) -> ResourceClaim {
    let name = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .and_then(|s| s.iter().find(|c| c.name == "gpus"))
        .and_then(|c| c.resource_claim_name.clone())
        .or_else(|| {
            pod.spec
                .as_ref()?
                .resource_claims
                .as_ref()?
                .first()?
                .resource_claim_name
                .clone()
        })
        .expect("the pod names its claim");
    Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .get(&name)
        .await
        .expect("the claim")
}

/// `(node, [device names])` of a claim's allocation, devices sorted.
pub fn allocated(claim: &ResourceClaim) -> Option<(String, Vec<String>)> {
    let a = claim.status.as_ref()?.allocation.as_ref()?;
    let node = a
        .node_selector
        .as_ref()?
        .node_selector_terms
        .first()?
        .match_fields
        .as_ref()?
        .first()?
        .values
        .as_ref()?
        .first()?
        .clone();
    let mut devices: Vec<String> = a
        .devices
        .as_ref()?
        .results
        .iter()
        .flatten()
        .map(|r| r.device.clone())
        .collect();
    devices.sort();
    Some((node, devices))
}

pub fn device_names(gpus: &[u32]) -> Vec<String> {
    let mut v: Vec<String> = gpus.iter().map(|g| format!("gpu-{g}")).collect();
    v.sort();
    v
}

pub fn reserved_for(claim: &ResourceClaim) -> Vec<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .map(|r| r.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

/// Per `(driver, device)` of `node`'s slices, the device's attributes as JSON.
pub async fn published(client: &kube::Client, node: &str) -> BTreeMap<(String, String), Value> {
    let slices = Api::<ResourceSlice>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("listing slices");
    let mut out = BTreeMap::new();
    for s in slices
        .items
        .iter()
        .filter(|s| s.spec.node_name.as_deref() == Some(node))
    {
        for d in s.spec.devices.iter().flatten() {
            out.insert(
                (s.spec.driver.clone(), d.name.clone()),
                serde_json::to_value(&d.attributes).expect("json"),
            );
        }
    }
    out
}

/// The results of `claim`'s allocation (none when it is not allocated).
pub fn results_of(claim: &ResourceClaim) -> Vec<DeviceRequestAllocationResult> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.clone())
        .unwrap_or_default()
}
