//! The unix-socket plumbing, against a PodResources server generated from
//! the kubelet's own .proto (no kubelet runs in this test: it checks only
//! that a client and a server of these generated types meet on a socket).

use gputopo_kubelet_api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use gputopo_kubelet_api::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use gputopo_kubelet_api::podresources::*;
use gputopo_kubelet_api::{DialError, connect_unix, serve_unix, socket};
use std::time::Duration;
use tonic::{Request, Response, Status};

struct OnePod;

#[tonic::async_trait]
impl PodResourcesLister for OnePod {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "trainer".into(),
                namespace: "ml".into(),
                containers: vec![ContainerResources {
                    name: "main".into(),
                    devices: vec![ContainerDevices {
                        resource_name: "nvidia.com/gpu".into(),
                        device_ids: vec!["GPU-1".into()],
                        topology: None,
                    }],
                    ..Default::default()
                }],
            }],
        }))
    }
    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

#[tokio::test]
async fn a_client_lists_through_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubelet.sock");
    // a stale file where the socket goes is replaced, as the kubelet does
    std::fs::write(&path, b"stale").unwrap();
    let router = socket::server().add_service(PodResourcesListerServer::new(OnePod));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serve_path = path.clone();
    let server = tokio::spawn(async move {
        serve_unix(&serve_path, router, async {
            stopped.await.ok();
        })
        .await
    });
    let channel = loop {
        match connect_unix(&path, Duration::from_secs(5)).await {
            Ok(c) => break c,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let answer = PodResourcesListerClient::new(channel)
        .list(ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answer.pod_resources[0].containers[0].devices[0].device_ids,
        ["GPU-1"]
    );
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_missing_socket_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.sock");
    let err = connect_unix(&path, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(&err, DialError::Missing { path: p } if *p == path));
    assert!(err.to_string().contains("absent.sock"), "{err}");
}

#[tokio::test]
async fn a_socket_nobody_listens_on_is_a_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let err = connect_unix(&path, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, DialError::Connect { .. }), "{err}");
}
