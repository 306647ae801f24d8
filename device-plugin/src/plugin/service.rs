//! The `DevicePlugin` gRPC service (device plugin API v1beta1).

use super::devices::DeviceList;
use crate::allocate::{DeviceListStrategy, container_response};
use crate::choose::{Inventory, Request as Ask, prefer};
use crate::metrics::{Metrics, OutcomeLabel, ReasonLabel};
use crate::pods::AssignedPods;
use futures::{Stream, StreamExt};
use gputopo_kubelet_api::deviceplugin::device_plugin_server::DevicePlugin;
use gputopo_kubelet_api::deviceplugin::{
    AllocateRequest, AllocateResponse, ContainerPreferredAllocationResponse, DevicePluginOptions,
    Empty, ListAndWatchResponse, PreStartContainerRequest, PreStartContainerResponse,
    PreferredAllocationRequest, PreferredAllocationResponse,
};
use std::collections::{BTreeSet, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};
use tracing::{info, info_span, warn};

/// What every server generation of the plugin shares.
pub struct Shared {
    pub inventory: Arc<Inventory>,
    pub pods: Arc<dyn AssignedPods>,
    pub strategies: BTreeSet<DeviceListStrategy>,
    pub devices: watch::Receiver<DeviceList>,
    pub metrics: Arc<Metrics>,
    /// (pod uid, reason) already told, so each bad annotation is logged and counted once.
    pub told: Mutex<HashSet<(String, &'static str)>>,
}

/// One server generation: its ListAndWatch streams end when `stopping` turns
/// true, so a restart (the kubelet's) does not wait on them.
pub struct Service {
    pub shared: Arc<Shared>,
    pub stopping: watch::Receiver<bool>,
}

/// Bound on the fresh pod list `GetPreferredAllocation` may make: the
/// kubelet waits for the answer while admitting the pod.
const FRESH_LIST_TIMEOUT: Duration = Duration::from_secs(5);

type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for Service {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let mut stopping = self.stopping.clone();
        let stream = WatchStream::new(self.shared.devices.clone())
            .map(|list| {
                Ok(ListAndWatchResponse {
                    devices: list.devices,
                })
            })
            .take_until(async move {
                let _ = stopping.wait_for(|s| *s).await;
            });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let mut pods = self.shared.pods.assigned();
        let mut listed = false;
        let mut container_responses = Vec::new();
        for c in request.into_inner().container_requests {
            let ask = Ask {
                available: c.available_device_i_ds,
                must_include: c.must_include_device_i_ds,
                size: c.allocation_size,
            };
            let choose = |pods: &[crate::choose::AssignedPod]| {
                prefer(&self.shared.inventory, pods, &ask)
                    .map_err(|e| Status::invalid_argument(e.to_string()))
            };
            let mut preference = choose(&pods)?;
            // The kubelet may admit a pod its own watch delivered before
            // ours did: before falling back to the topology rule, ask the
            // API server once per request.
            if !preference.outcome.is_assigned() && !listed {
                listed = true;
                match tokio::time::timeout(FRESH_LIST_TIMEOUT, self.shared.pods.fresh()).await {
                    Ok(Ok(fresh)) => {
                        pods = fresh;
                        preference = choose(&pods)?;
                        if preference.outcome.is_assigned() {
                            info!(
                                "the pod view lagged behind the kubelet; a fresh list found the pod's assignment"
                            );
                        }
                    }
                    Ok(Err(e)) => {
                        warn!(error = %e, "listing this node's pods failed; answering from the watched view")
                    }
                    Err(_) => warn!(
                        timeout = ?FRESH_LIST_TIMEOUT,
                        "listing this node's pods timed out; answering from the watched view"
                    ),
                }
            }
            self.tell_problems(&preference.problems);
            let outcome = preference.outcome.metric_label();
            self.shared
                .metrics
                .preferred
                .get_or_create(&OutcomeLabel { outcome })
                .inc();
            info!(
                outcome,
                detail = ?preference.outcome,
                size = ask.size,
                devices = preference.devices.join(","),
                "preferred allocation"
            );
            container_responses.push(ContainerPreferredAllocationResponse {
                device_i_ds: preference.devices,
            });
        }
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let mut container_responses = Vec::new();
        for c in request.into_inner().container_requests {
            if let Some(unknown) = c
                .devices_ids
                .iter()
                .find(|id| self.shared.inventory.index_of(id).is_none())
            {
                return Err(Status::invalid_argument(format!(
                    "device {unknown:?} is not a GPU this plugin advertises"
                )));
            }
            let _span = info_span!("allocate", devices = c.devices_ids.join(",")).entered();
            info!("allocated");
            self.shared.metrics.allocations.inc();
            container_responses.push(container_response(&c.devices_ids, &self.shared.strategies));
        }
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        // Registered with pre_start_required = false: nothing to do.
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

impl Service {
    fn tell_problems(
        &self,
        problems: &[(crate::choose::PodRef, crate::choose::AnnotationProblem)],
    ) {
        let mut told = self.shared.told.lock().unwrap_or_else(|p| p.into_inner());
        for (pod, problem) in problems {
            let reason = problem.metric_label();
            if told.insert((pod.uid.clone(), reason)) {
                warn!(pod = %pod, reason, "{problem}; its annotation is ignored, so it may get other GPUs than gputopo chose");
                self.shared
                    .metrics
                    .bad_annotations
                    .get_or_create(&ReasonLabel { reason })
                    .inc();
            }
        }
    }
}

/// What the plugin registers with and answers in `GetDevicePluginOptions`.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}
