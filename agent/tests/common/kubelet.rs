//! A stand-in for the kubelet's PodResources v1 API: a server generated
//! from the kubelet's own `.proto` (`kubelet-api/proto/podresources/v1/api.proto`)
//! on a unix socket. No kubelet runs in these tests; this answers what the
//! test sets, as the kubelet's server would.

use gputopo_kubelet_api::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use gputopo_kubelet_api::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};
use gputopo_kubelet_api::{serve_unix, socket};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::{Request, Response, Status};

/// The stand-in's answer to `List`, changed by the test while it runs.
pub type Answer = Arc<Mutex<Vec<PodResources>>>;

/// How the stand-in behaves beyond its answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Behaviour {
    /// `List` answers only after this long.
    pub list_delay: Option<Duration>,
    /// `GetAllocatableResources` answers Unimplemented, as before Kubernetes 1.23.
    pub no_allocatable: bool,
}

/// The UUIDs of the recorded HGX H100's GPUs (fixtures/recorded/hgx-h100-8gpu-nvswitch-nvml.yaml).
pub fn uuid(gpu: u32) -> String {
    format!("GPU-41000001-0000-4000-8000-00000000000{gpu}")
}

struct StandIn {
    pods: Answer,
    behaviour: Behaviour,
}

#[tonic::async_trait]
impl PodResourcesLister for StandIn {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        if let Some(delay) = self.behaviour.list_delay {
            tokio::time::sleep(delay).await;
        }
        let pods = self.pods.lock().expect("answer").clone();
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: pods,
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        if self.behaviour.no_allocatable {
            return Err(Status::unimplemented("not served by this kubelet"));
        }
        Ok(Response::new(AllocatableResourcesResponse {
            devices: vec![devices("nvidia.com/gpu", (0..8).map(uuid).collect())],
            ..Default::default()
        }))
    }

    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("the agent does not call Get"))
    }
}

/// A stand-in serving on a socket until stopped.
pub struct Kubelet {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Kubelet {
    pub async fn serve(path: &Path, pods: Answer) -> Kubelet {
        Kubelet::serve_as(path, pods, Behaviour::default()).await
    }

    pub async fn serve_as(path: &Path, pods: Answer, behaviour: Behaviour) -> Kubelet {
        let service = PodResourcesListerServer::new(StandIn { pods, behaviour });
        let router = socket::server().add_service(service);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let path = path.to_path_buf();
        let served = tokio::spawn(async move {
            serve_unix(&path, router, async {
                stopped.await.ok();
            })
            .await
            .expect("the stand-in serves");
        });
        Kubelet {
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// Stops serving; the socket file stays, so dialling it is refused.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.expect("the stand-in stopped");
        }
    }
}

pub fn devices(resource: &str, ids: Vec<String>) -> ContainerDevices {
    ContainerDevices {
        resource_name: resource.into(),
        device_ids: ids,
        topology: None,
    }
}

pub fn container(name: &str, devs: Vec<ContainerDevices>) -> ContainerResources {
    ContainerResources {
        name: name.into(),
        devices: devs,
        ..Default::default()
    }
}

pub fn pod(name: &str, containers: Vec<ContainerResources>) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: "ml".into(),
        containers,
    }
}
