//! What the real-kubelet tests share (`real_kubelet.rs`,
//! `real_kubelet_gpus.rs`): pods for a [`KubeletNode`], waiting with a
//! deadline while checking that the node still runs, and the kubelet's
//! PodResources `List`.

// Each test crate uses a part of this.
#![allow(dead_code)]

pub mod gpu_node;

use gpu_node::GpuStack;
use gputopo_kubelet_api::connect_unix;
use gputopo_kubelet_api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use gputopo_kubelet_api::podresources::{ListPodResourcesRequest, PodResources};
use gputopo_testenv::kubelet_node::KubeletNode;
use gputopo_testenv::kubelet_node::config::BUSYBOX_IMAGE;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ObjectMeta};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long any one wait may take.
pub const WAIT: Duration = Duration::from_secs(120);

/// A busybox pod running `script`; bound to `node` when given (else left to
/// a scheduler); `limits` one extended resource and its count.
pub fn pod(name: &str, node: Option<&str>, script: &str, limits: Option<(&str, &str)>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(Into::into),
            host_network: Some(true),
            automount_service_account_token: Some(false),
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(0),
            containers: vec![Container {
                name: "main".into(),
                image: Some(BUSYBOX_IMAGE.into()),
                image_pull_policy: Some("Never".into()),
                command: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
                resources: limits.map(|(k, v)| ResourceRequirements {
                    limits: Some(BTreeMap::from([(k.to_owned(), Quantity(v.into()))])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// Polls until `check` returns `Ok`, failing with `what`, the last answer
/// and the node's logs after [`WAIT`], or at once if the node stopped.
pub async fn poll<T, F, Fut>(node: &mut KubeletNode, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    poll_with(node, None, what, check).await
}

/// [`poll`], also failing at once if one of `stack`'s processes exited, and
/// with their logs.
pub async fn poll_with<T, F, Fut>(
    node: &mut KubeletNode,
    mut stack: Option<&mut GpuStack>,
    what: &str,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(last) => last,
        };
        if let Err(e) = node.check_running() {
            panic!("while waiting until {what}: {e}");
        }
        if let Some(Err(e)) = stack.as_deref_mut().map(GpuStack::check_running) {
            panic!("while waiting until {what}: {e}");
        }
        if start.elapsed() > WAIT {
            let ours = stack.as_deref().map(GpuStack::logs).unwrap_or_default();
            panic!(
                "not {what} after {WAIT:?}; last: {last}\n{}\n{ours}",
                node.log_tails(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The pod's phase and its first container's exit code, once terminated.
pub async fn pod_state(pods: &Api<Pod>, name: &str) -> Result<(String, Option<i32>), String> {
    let p = pods.get(name).await.map_err(|e| e.to_string())?;
    let status = p.status.unwrap_or_default();
    let phase = status.phase.unwrap_or_default();
    let exit = status
        .container_statuses
        .unwrap_or_default()
        .first()
        .and_then(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code));
    Ok((phase, exit))
}

/// Waits until the pod's phase is `want`; its first container's exit code.
pub async fn wait_phase(
    node: &mut KubeletNode,
    pods: &Api<Pod>,
    name: &str,
    want: &str,
) -> Option<i32> {
    poll(node, &format!("pod {name} is {want}"), || async {
        let (phase, exit) = pod_state(pods, name).await?;
        if phase == want {
            Ok(exit)
        } else {
            Err(format!("phase {phase:?}"))
        }
    })
    .await
}

/// The kubelet's PodResources `List`.
pub async fn list_pod_resources(socket: &Path) -> Result<Vec<PodResources>, String> {
    let channel = connect_unix(socket, Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())?;
    let response = PodResourcesListerClient::new(channel)
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|e| e.to_string())?;
    Ok(response.into_inner().pod_resources)
}

/// `namespace/name` of each listed pod.
pub fn names(pods: &[PodResources]) -> Vec<String> {
    pods.iter()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect()
}

/// `(resource, device IDs)` of every device the listed pod `ns/name` holds,
/// once PodResources lists it.
pub async fn listed_devices(
    node: &mut KubeletNode,
    ns: &str,
    name: &str,
) -> Vec<(String, Vec<String>)> {
    let socket = node.pod_resources_socket();
    poll(node, &format!("PodResources lists {ns}/{name}"), || async {
        let pods = list_pod_resources(&socket).await?;
        let found = pods
            .iter()
            .find(|p| p.namespace == ns && p.name == name)
            .ok_or_else(|| format!("listed {:?}", names(&pods)))?;
        Ok(found
            .containers
            .iter()
            .flat_map(|c| c.devices.iter())
            .map(|d| (d.resource_name.clone(), d.device_ids.clone()))
            .collect())
    })
    .await
}
