//! The stand-in's PodResources v1 server, answered from its allocations.

use super::manager::{Admission, Manager};
use crate::deviceplugin::Device;
use crate::podresources::pod_resources_lister_server::PodResourcesLister;
use crate::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, NumaNode, PodResources, TopologyInfo,
};
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub(super) struct Lister {
    pub(super) manager: Arc<Manager>,
}

/// One entry per device with its NUMA nodes.
fn container_devices(resource: &str, id: &str, listed: Option<Device>) -> ContainerDevices {
    let topology = listed
        .and_then(|d| d.topology)
        .filter(|t| !t.nodes.is_empty())
        .map(|t| TopologyInfo {
            nodes: t.nodes.iter().map(|n| NumaNode { id: n.id }).collect(),
        });
    ContainerDevices {
        resource_name: resource.to_string(),
        device_ids: vec![id.to_string()],
        topology,
    }
}

impl Lister {
    /// Admissions grouped by pod (in admission order), then by container.
    fn pods(&self) -> Vec<PodResources> {
        let mut pods: Vec<(String, PodResources)> = Vec::new();
        for a in self.manager.allocations() {
            let at = match pods.iter().position(|(uid, _)| *uid == a.pod.uid) {
                Some(i) => i,
                None => {
                    pods.push((
                        a.pod.uid.clone(),
                        PodResources {
                            name: a.pod.name.clone(),
                            namespace: a.pod.namespace.clone(),
                            containers: vec![],
                        },
                    ));
                    pods.len() - 1
                }
            };
            self.add(&mut pods[at].1, &a);
        }
        pods.into_iter().map(|(_, p)| p).collect()
    }

    fn add(&self, pod: &mut PodResources, a: &Admission) {
        let at = match pod.containers.iter().position(|c| c.name == a.container) {
            Some(i) => i,
            None => {
                pod.containers.push(ContainerResources {
                    name: a.container.clone(),
                    ..Default::default()
                });
                pod.containers.len() - 1
            }
        };
        for id in &a.devices {
            pod.containers[at].devices.push(container_devices(
                &a.resource,
                id,
                self.manager.device(&a.resource, id),
            ));
        }
    }
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: self.pods(),
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        let devices = self
            .manager
            .healthy()
            .into_iter()
            .map(|(resource, d)| container_devices(&resource, &d.id.clone(), Some(d)))
            .collect();
        Ok(Response::new(AllocatableResourcesResponse {
            devices,
            ..Default::default()
        }))
    }

    async fn get(
        &self,
        request: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        let r = request.into_inner();
        let pod = self
            .pods()
            .into_iter()
            .find(|p| p.name == r.pod_name && p.namespace == r.pod_namespace)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "pod {} not found in {}",
                    r.pod_name, r.pod_namespace
                ))
            })?;
        Ok(Response::new(GetPodResourcesResponse {
            pod_resources: Some(pod),
        }))
    }
}
