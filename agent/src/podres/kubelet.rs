//! The kubelet's PodResources socket: dialled afresh every reading (a
//! restarted kubelet makes a new socket), each call bounded by `timeout`.

use super::{
    AllocatableAnswer, ContainerAnswer, DevicesAnswer, KubeletAnswer, ListAnswer, PodAnswer,
    PodResourcesError, PodResourcesSource, Reading,
};
use gputopo_kubelet_api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use gputopo_kubelet_api::podresources::{
    AllocatableResourcesRequest, ContainerDevices, ListPodResourcesRequest,
};
use gputopo_kubelet_api::{DialError, connect_unix};
use std::path::PathBuf;
use std::time::Duration;
use tonic::Code;

/// The kubelet's PodResources v1 API on its unix socket.
#[derive(Debug, Clone)]
pub struct KubeletSocket {
    pub path: PathBuf,
    pub timeout: Duration,
}

impl PodResourcesSource for KubeletSocket {
    fn read(&self) -> Reading<'_> {
        Box::pin(self.read_now())
    }
}

impl KubeletSocket {
    async fn read_now(&self) -> Result<KubeletAnswer, PodResourcesError> {
        let channel = connect_unix(&self.path, self.timeout)
            .await
            .map_err(|e| match e {
                DialError::Missing { path } => PodResourcesError::SocketMissing { path },
                other => PodResourcesError::Connect { source: other },
            })?;
        let mut client = PodResourcesListerClient::new(channel);
        let list = self
            .bounded("List", client.list(ListPodResourcesRequest {}))
            .await?;
        let allocatable = match self
            .bounded(
                "GetAllocatableResources",
                client.get_allocatable_resources(AllocatableResourcesRequest {}),
            )
            .await
        {
            Ok(a) => Some(AllocatableAnswer {
                devices: a.devices.into_iter().map(devices).collect(),
                ..AllocatableAnswer::default()
            }),
            // Kubelets before 1.23, or with KubeletPodResourcesGetAllocatable
            // off, do not serve it: the resource names alone decide then.
            Err(PodResourcesError::Call {
                code: Code::Unimplemented,
                ..
            }) => None,
            Err(e) => return Err(e),
        };
        let answer = KubeletAnswer {
            list: ListAnswer {
                pod_resources: list
                    .pod_resources
                    .into_iter()
                    .map(|p| PodAnswer {
                        name: p.name,
                        namespace: p.namespace,
                        containers: p
                            .containers
                            .into_iter()
                            .map(|c| ContainerAnswer {
                                name: c.name,
                                devices: c.devices.into_iter().map(devices).collect(),
                                ..ContainerAnswer::default()
                            })
                            .collect(),
                    })
                    .collect(),
            },
            allocatable,
        };
        answer.check(&format!("the kubelet at {}", self.path.display()))?;
        Ok(answer)
    }

    /// One call, its answer or a typed failure. The channel's own deadline
    /// (the same `timeout`) may fire first: it comes back as a cancelled or
    /// deadline-exceeded status, which is the same timeout.
    async fn bounded<T>(
        &self,
        call: &'static str,
        request: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, PodResourcesError> {
        let timeout = PodResourcesError::Timeout {
            call,
            after: self.timeout,
        };
        match tokio::time::timeout(self.timeout, request).await {
            Err(_) => Err(timeout),
            Ok(Ok(answer)) => Ok(answer.into_inner()),
            Ok(Err(status))
                if matches!(status.code(), Code::Cancelled | Code::DeadlineExceeded) =>
            {
                Err(timeout)
            }
            Ok(Err(status)) => Err(PodResourcesError::Call {
                call,
                code: status.code(),
                message: status.message().to_string(),
            }),
        }
    }
}

fn devices(d: ContainerDevices) -> DevicesAnswer {
    DevicesAnswer {
        resource_name: d.resource_name,
        device_ids: d.device_ids,
        topology: None,
    }
}
