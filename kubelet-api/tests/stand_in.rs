//! The kubelet stand-in (`stand_in`, feature `stand-in`) against a small
//! device plugin generated from the kubelet's own .proto. No kubelet runs
//! here: the stand-in plays the kubelet's device manager and PodResources
//! server, and these tests check that it behaves as its module docs say.
#![cfg(feature = "stand-in")]

use gputopo_kubelet_api::deviceplugin::device_plugin_server::{DevicePlugin, DevicePluginServer};
use gputopo_kubelet_api::deviceplugin::registration_client::RegistrationClient;
use gputopo_kubelet_api::deviceplugin::*;
use gputopo_kubelet_api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use gputopo_kubelet_api::podresources::{
    AllocatableResourcesRequest, GetPodResourcesRequest, ListPodResourcesRequest,
};
use gputopo_kubelet_api::stand_in::{AdmitError, PodKey, StandIn};
use gputopo_kubelet_api::{connect_unix, socket};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

const RESOURCE: &str = "example.com/dev";
const WAIT: Duration = Duration::from_secs(20);

/// A plugin with devices d0..d3 (d0, d1 on NUMA 0; d2, d3 on NUMA 1) that
/// prefers `preferred` and records what it was asked.
#[derive(Clone)]
struct TestPlugin {
    preferred: Option<Vec<String>>,
    devices: Vec<Device>,
    asked: Arc<Mutex<Vec<Vec<String>>>>,
}

fn device(id: &str, health: &str, numa: i64) -> Device {
    Device {
        id: id.into(),
        health: health.into(),
        topology: Some(TopologyInfo {
            nodes: vec![NumaNode { id: numa }],
        }),
    }
}

impl TestPlugin {
    fn new(preferred: Option<&[&str]>) -> TestPlugin {
        TestPlugin {
            preferred: preferred.map(|p| p.iter().map(|s| s.to_string()).collect()),
            devices: vec![
                device("d0", HEALTHY, 0),
                device("d1", HEALTHY, 0),
                device("d2", HEALTHY, 1),
                device("d3", HEALTHY, 1),
            ],
            asked: Arc::default(),
        }
    }
}

type Devices =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for TestPlugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: self.preferred.is_some(),
        }))
    }
    type ListAndWatchStream = Devices;
    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<Devices>, Status> {
        let first = ListAndWatchResponse {
            devices: self.devices.clone(),
        };
        // One list, then the stream stays open as a plugin's does.
        let stream =
            tokio_stream::StreamExt::chain(tokio_stream::once(Ok(first)), tokio_stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }
    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let c = &request.get_ref().container_requests[0];
        self.asked
            .lock()
            .unwrap()
            .push(c.available_device_i_ds.clone());
        Ok(Response::new(PreferredAllocationResponse {
            container_responses: vec![ContainerPreferredAllocationResponse {
                device_i_ds: self.preferred.clone().unwrap_or_default(),
            }],
        }))
    }
    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| ContainerAllocateResponse {
                envs: [("DEVS".to_string(), c.devices_ids.join(","))].into(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }
    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// Serves `plugin` on `<dir>/plugin.sock` and registers it.
async fn serve_and_register(dir: &Path, plugin: TestPlugin) -> tokio::task::JoinHandle<()> {
    let listener = socket::bind(&dir.join("plugin.sock")).unwrap();
    let router = socket::server().add_service(DevicePluginServer::new(plugin));
    let task = tokio::spawn(async move {
        let _ = router
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
    });
    register(dir, VERSION).await.unwrap();
    task
}

async fn register(dir: &Path, version: &str) -> Result<(), Status> {
    let channel = connect_unix(&dir.join("kubelet.sock"), WAIT).await.unwrap();
    RegistrationClient::new(channel)
        .register(RegisterRequest {
            version: version.into(),
            endpoint: "plugin.sock".into(),
            resource_name: RESOURCE.into(),
            options: None,
        })
        .await
        .map(|_| ())
}

fn pod(name: &str) -> PodKey {
    PodKey {
        namespace: "ns".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

async fn stand_in(dir: &Path) -> StandIn {
    StandIn::start(&dir.join("device-plugins"), &dir.join("pod-resources.sock"))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_preferred_allocation_is_used_and_reported_in_pod_resources() {
    let tmp = tempfile::tempdir().unwrap();
    let kubelet = stand_in(tmp.path()).await;
    let dir = tmp.path().join("device-plugins");
    let plugin = TestPlugin::new(Some(&["d3", "d1"]));
    let asked = plugin.asked.clone();
    let _p = serve_and_register(&dir, plugin).await;
    kubelet
        .wait_for_devices(RESOURCE, WAIT, |d| d.len() == 4)
        .await
        .unwrap();

    let a = kubelet.admit(&pod("a"), "main", RESOURCE, 2).await.unwrap();
    assert_eq!(a.devices, ["d3", "d1"]);
    assert_eq!(a.response.envs["DEVS"], "d3,d1");
    assert_eq!(asked.lock().unwrap()[0], ["d0", "d1", "d2", "d3"]);
    // Admitting the same container again makes no call and changes nothing.
    let again = kubelet.admit(&pod("a"), "main", RESOURCE, 2).await.unwrap();
    assert_eq!(again.devices, a.devices);
    assert_eq!(asked.lock().unwrap().len(), 1);
    // The next container is offered only what is left; d3, d1 are taken, so
    // the preference is unusable and the stand-in picks in sorted order.
    let b = kubelet.admit(&pod("b"), "main", RESOURCE, 2).await.unwrap();
    assert_eq!(asked.lock().unwrap()[1], ["d0", "d2"]);
    assert_eq!(b.devices, ["d0", "d2"]);
    let err = kubelet
        .admit(&pod("c"), "main", RESOURCE, 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, AdmitError::TooFew { available: 0, .. }),
        "{err}"
    );

    let channel = connect_unix(&tmp.path().join("pod-resources.sock"), WAIT)
        .await
        .unwrap();
    let mut lister = PodResourcesListerClient::new(channel);
    let list = lister
        .list(ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = list.pod_resources.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    let a_devices: Vec<_> = list.pod_resources[0].containers[0]
        .devices
        .iter()
        .map(|d| {
            (
                d.device_ids[0].as_str(),
                d.topology.as_ref().unwrap().nodes[0].id,
            )
        })
        .collect();
    assert_eq!(a_devices, [("d3", 1), ("d1", 0)]);
    let got = lister
        .get(GetPodResourcesRequest {
            pod_name: "b".into(),
            pod_namespace: "ns".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pod_resources.unwrap().containers[0].devices.len(), 2);
    let missing = lister
        .get(GetPodResourcesRequest {
            pod_name: "nobody".into(),
            pod_namespace: "ns".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let allocatable = lister
        .get_allocatable_resources(AllocatableResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(allocatable.devices.len(), 4);

    // A pod that ends frees its devices.
    kubelet.remove_pod("uid-a");
    let c = kubelet.admit(&pod("c"), "main", RESOURCE, 2).await.unwrap();
    assert_eq!(c.devices, ["d3", "d1"]);
}

#[tokio::test]
async fn without_preferred_allocation_the_plugin_is_not_asked_and_unhealthy_devices_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let kubelet = stand_in(tmp.path()).await;
    let dir = tmp.path().join("device-plugins");
    let mut plugin = TestPlugin::new(None);
    plugin.devices[0].health = UNHEALTHY.into();
    let asked = plugin.asked.clone();
    let _p = serve_and_register(&dir, plugin).await;
    kubelet
        .wait_for_devices(RESOURCE, WAIT, |d| d.len() == 4)
        .await
        .unwrap();
    let a = kubelet.admit(&pod("a"), "main", RESOURCE, 3).await.unwrap();
    assert_eq!(a.devices, ["d1", "d2", "d3"]);
    assert_eq!(a.preferred, None);
    assert!(asked.lock().unwrap().is_empty());
    let unknown = kubelet.admit(&pod("b"), "main", "other.com/x", 1).await;
    assert!(matches!(unknown, Err(AdmitError::Unregistered { .. })));
}

#[tokio::test]
async fn a_restart_removes_plugin_sockets_and_forgets_plugins_until_they_register_again() {
    let tmp = tempfile::tempdir().unwrap();
    let mut kubelet = stand_in(tmp.path()).await;
    let dir = tmp.path().join("device-plugins");
    let first = serve_and_register(&dir, TestPlugin::new(None)).await;
    kubelet
        .wait_for_devices(RESOURCE, WAIT, |d| d.len() == 4)
        .await
        .unwrap();
    let a = kubelet.admit(&pod("a"), "main", RESOURCE, 1).await.unwrap();
    std::fs::write(dir.join("kubelet_internal_checkpoint"), b"{}").unwrap();

    kubelet.restart().await.unwrap();
    assert!(
        !dir.join("plugin.sock").exists(),
        "the plugin's socket is removed"
    );
    assert!(
        dir.join("kubelet_internal_checkpoint").exists(),
        "other files stay"
    );
    assert!(kubelet.devices(RESOURCE).is_none());
    first.abort();

    let _second = serve_and_register(&dir, TestPlugin::new(None)).await;
    kubelet
        .wait_for_devices(RESOURCE, WAIT, |d| d.len() == 4)
        .await
        .unwrap();
    assert_eq!(kubelet.registrations(), 2);
    // Allocations survive the restart (the kubelet's checkpoint).
    let b = kubelet.admit(&pod("b"), "main", RESOURCE, 1).await.unwrap();
    assert_ne!(a.devices, b.devices);
}

#[tokio::test]
async fn another_api_version_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let kubelet = stand_in(tmp.path()).await;
    let err = register(&tmp.path().join("device-plugins"), "v1alpha")
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("v1alpha"), "{}", err.message());
    assert_eq!(kubelet.registrations(), 0);
}
