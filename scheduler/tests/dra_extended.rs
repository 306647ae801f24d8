//! Plain `nvidia.com/gpu` requests served through DRA (KEP-5004) end to
//! end on the real 1.37 control plane: a DeviceClass declares
//! `extendedResourceName: nvidia.com/gpu`; a DGX-1 publishes its GPUs only
//! in a ResourceSlice (no device plugin), a PCIe box only through its
//! device plugin. A pod that says nothing but `nvidia.com/gpu: 4` gets the
//! DGX-1's NVLink set through its special ResourceClaim, with
//! `status.extendedResourceClaimStatus` set as kube-scheduler sets it; a pod
//! pinned to the PCIe box is served by its device plugin as before; the
//! claim goes with its pod. No kubelet or driver runs here (no GPU).

mod common;

use common::dra::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use std::time::Duration;

const EXTENDED_CLASS: &str = "gpu-extended";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_plain_gpu_pod_gets_an_nvlink_set_through_its_special_claim() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("dra-ext");
    let dgx = env.unique_name("dra-ext-dgx1");
    let pcie = env.unique_name("dra-ext-pcie");
    dra_node(env, &dgx, DGX1, "Tesla V100-SXM2-32GB", &group, false).await;
    fixture_node(env, &pcie, PCIE_2SOCKET, &[("e2e-group", &group)]).await;
    let class: DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": EXTENDED_CLASS},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "extendedResourceName": "nvidia.com/gpu"
        }
    }))
    .expect("a class");
    match Api::<DeviceClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating DeviceClass {EXTENDED_CLASS}: {e}"),
    }
    let sched = env.unique_name("sched-dra-ext");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("dra-ext").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    create(&pods, &gpu_pod("plain", &sched, &group, 4, &[])).await;
    let pod = bound(&pods, "plain", &s).await;
    assert_eq!(
        node_of(&pod).as_deref(),
        Some(dgx.as_str()),
        "NVLink beats PCIe"
    );
    // The status as kube-scheduler writes it (the API server keeps it only
    // where it serves the field).
    let pod = wait_for(
        "the pod's extendedResourceClaimStatus",
        Duration::from_secs(30),
        || async {
            pods.get("plain").await.ok().filter(|p| {
                p.status
                    .as_ref()
                    .is_some_and(|s| s.extended_resource_claim_status.is_some())
            })
        },
        || s.log(),
    )
    .await;
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.clone())
        .expect("set");
    let mappings: Vec<(String, String, String)> = status
        .request_mappings
        .iter()
        .map(|m| {
            (
                m.container_name.clone(),
                m.resource_name.clone(),
                m.request_name.clone(),
            )
        })
        .collect();
    assert_eq!(
        mappings,
        [(
            "main".to_string(),
            "nvidia.com/gpu".to_string(),
            "container-0-request-0".to_string()
        )]
    );
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), &ns);
    let claim = claims
        .get(&status.resource_claim_name)
        .await
        .expect("the special claim");
    let annotations = claim.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("resource.kubernetes.io/extended-resource-claim")
            .map(String::as_str),
        Some("true")
    );
    let owner = claim
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .next()
        .expect("owned");
    assert_eq!(
        (owner.kind.as_str(), owner.uid),
        ("Pod", pod.metadata.uid.clone().expect("uid"))
    );
    assert_eq!(owner.controller, Some(true));
    let requests = claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.clone())
        .unwrap_or_default();
    assert_eq!(requests.len(), 1);
    let exactly = requests[0].exactly.as_ref().expect("exactly");
    assert_eq!(
        (exactly.device_class_name.as_str(), exactly.count),
        (EXTENDED_CLASS, Some(4))
    );
    assert_eq!(
        allocated(&claim),
        Some((dgx.clone(), device_names(&gpus_of(&pod)))),
        "the claim's devices are the pod's GPUs"
    );
    assert_eq!(reserved_for(&claim), ["plain"]);

    // Pinned to the PCIe box: its device plugin serves it, no claim.
    let mut pinned = gpu_pod("pinned", &sched, &group, 2, &[]);
    pinned.spec.as_mut().expect("spec").node_selector =
        Some([("kubernetes.io/hostname".to_string(), pcie.clone())].into());
    create(&pods, &pinned).await;
    let pinned = bound(&pods, "pinned", &s).await;
    assert_eq!(node_of(&pinned), Some(pcie));
    assert!(
        pinned
            .status
            .as_ref()
            .is_none_or(|s| s.extended_resource_claim_status.is_none()),
        "a device-plugin node needs no claim"
    );

    // The claim goes with its pod.
    pods.delete("plain", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting the pod");
    wait_for(
        "the special claim deleted with its pod",
        Duration::from_secs(60),
        || async {
            matches!(claims.get(&status.resource_claim_name).await, Err(kube::Error::Api(e)) if e.code == 404)
                .then_some(())
        },
        || s.log(),
    )
    .await;
}
