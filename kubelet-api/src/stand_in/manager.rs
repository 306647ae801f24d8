//! The stand-in's device manager: registered plugins, their devices, the
//! allocations, and admission (see the parent module's docs).

use crate::connect_unix;
use crate::deviceplugin::device_plugin_client::DevicePluginClient;
use crate::deviceplugin::registration_server::Registration;
use crate::deviceplugin::{
    AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, Device, DevicePluginOptions, Empty, HEALTHY,
    PreferredAllocationRequest, RegisterRequest, VERSION,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// How long the stand-in waits on a plugin's socket and calls.
const PLUGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A pod as the kubelet keys it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One container's devices of one resource.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    pub pod: PodKey,
    pub container: String,
    pub resource: String,
    /// The devices allocated, in the order sent to `Allocate`.
    pub devices: Vec<String>,
    /// The plugin's `GetPreferredAllocation` answer, if it was asked.
    pub preferred: Option<Vec<String>>,
    /// The plugin's `Allocate` answer for the container.
    pub response: ContainerAllocateResponse,
}

/// Why a container was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error("can't allocate unregistered device {resource}")]
    Unregistered { resource: String },
    #[error(
        "requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}"
    )]
    TooFew {
        resource: String,
        requested: usize,
        available: usize,
    },
    #[error("device plugin GetPreferredAllocation rpc failed with err: {0}")]
    Preferred(Status),
    #[error("device plugin Allocate rpc failed with err: {0}")]
    Allocate(Status),
    #[error("no containers return in allocation response")]
    NoContainerResponse,
}

struct Endpoint {
    client: DevicePluginClient<Channel>,
    options: DevicePluginOptions,
    /// `None` until the first ListAndWatch message.
    devices: Option<Vec<Device>>,
    reader: JoinHandle<()>,
}

#[derive(Default)]
struct State {
    endpoints: BTreeMap<String, Endpoint>,
    allocations: Vec<Admission>,
    registrations: usize,
}

pub(super) struct Manager {
    dir: PathBuf,
    state: Mutex<State>,
    /// One admission at a time, so two cannot pick the same device.
    admitting: tokio::sync::Mutex<()>,
}

impl Manager {
    pub(super) fn new(dir: &Path) -> Manager {
        Manager {
            dir: dir.to_path_buf(),
            state: Mutex::new(State::default()),
            admitting: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn forget_plugins(&self) {
        let mut st = self.state();
        for (_, e) in std::mem::take(&mut st.endpoints) {
            e.reader.abort();
        }
    }

    pub(super) fn devices(&self, resource: &str) -> Option<Vec<Device>> {
        self.state().endpoints.get(resource)?.devices.clone()
    }

    pub(super) fn registrations(&self) -> usize {
        self.state().registrations
    }

    pub(super) fn remove_pod(&self, uid: &str) {
        self.state().allocations.retain(|a| a.pod.uid != uid);
    }

    pub(super) fn allocations(&self) -> Vec<Admission> {
        self.state().allocations.clone()
    }

    /// Healthy devices of every connected plugin, by resource.
    pub(super) fn healthy(&self) -> Vec<(String, Device)> {
        let st = self.state();
        st.endpoints
            .iter()
            .flat_map(|(r, e)| {
                e.devices
                    .iter()
                    .flatten()
                    .filter(|d| d.health == HEALTHY)
                    .map(move |d| (r.clone(), d.clone()))
            })
            .collect()
    }

    /// The device's listing, for its NUMA nodes.
    pub(super) fn device(&self, resource: &str, id: &str) -> Option<Device> {
        let st = self.state();
        st.endpoints
            .get(resource)?
            .devices
            .as_ref()?
            .iter()
            .find(|d| d.id == id)
            .cloned()
    }

    /// Connects to a registered plugin (the kubelet's `connectClient` and
    /// `PluginConnected`, inside `Register`): a plugin that cannot be dialled
    /// or answers no options fails its registration.
    async fn connect(
        self: std::sync::Arc<Self>,
        resource: String,
        endpoint: String,
    ) -> Result<(), Status> {
        let path = self.dir.join(&endpoint);
        let channel = connect_unix(&path, PLUGIN_TIMEOUT)
            .await
            .map_err(|e| Status::unavailable(format!("failed to dial device plugin: {e}")))?;
        let mut client = DevicePluginClient::new(channel);
        let options = client.get_device_plugin_options(Empty {}).await?;
        let mut listing = client.clone();
        let manager = self.clone();
        let name = resource.clone();
        let reader = tokio::spawn(async move {
            let Ok(stream) = listing.list_and_watch(Empty {}).await else {
                return;
            };
            let mut stream = stream.into_inner();
            while let Ok(Some(message)) = stream.message().await {
                if let Some(e) = manager.state().endpoints.get_mut(&name) {
                    e.devices = Some(message.devices);
                }
            }
        });
        let mut st = self.state();
        if let Some(old) = st.endpoints.insert(
            resource,
            Endpoint {
                client,
                options: options.into_inner(),
                devices: None,
                reader,
            },
        ) {
            old.reader.abort();
        }
        Ok(())
    }

    pub(super) async fn admit(
        &self,
        pod: &PodKey,
        container: &str,
        resource: &str,
        count: usize,
    ) -> Result<Admission, AdmitError> {
        let _one_at_a_time = self.admitting.lock().await;
        let (mut client, options, available) = {
            let st = self.state();
            if let Some(done) = st.allocations.iter().find(|a| {
                a.pod.uid == pod.uid && a.container == container && a.resource == resource
            }) {
                return Ok(done.clone());
            }
            let unregistered = || AdmitError::Unregistered {
                resource: resource.to_string(),
            };
            let e = st.endpoints.get(resource).ok_or_else(unregistered)?;
            let in_use: BTreeSet<&str> = st
                .allocations
                .iter()
                .filter(|a| a.resource == resource)
                .flat_map(|a| a.devices.iter().map(String::as_str))
                .collect();
            let available: BTreeSet<String> = e
                .devices
                .iter()
                .flatten()
                .filter(|d| d.health == HEALTHY && !in_use.contains(d.id.as_str()))
                .map(|d| d.id.clone())
                .collect();
            (e.client.clone(), e.options, available)
        };
        if available.len() < count {
            return Err(AdmitError::TooFew {
                resource: resource.to_string(),
                requested: count,
                available: available.len(),
            });
        }
        let mut chosen: Vec<String> = Vec::with_capacity(count);
        let mut preferred = None;
        if options.get_preferred_allocation_available {
            let answer = client
                .get_preferred_allocation(PreferredAllocationRequest {
                    container_requests: vec![ContainerPreferredAllocationRequest {
                        available_device_i_ds: available.iter().cloned().collect(),
                        must_include_device_i_ds: vec![],
                        allocation_size: count as i32,
                    }],
                })
                .await
                .map_err(AdmitError::Preferred)?
                .into_inner();
            let ids = answer
                .container_responses
                .into_iter()
                .next()
                .map(|c| c.device_i_ds)
                .unwrap_or_default();
            take(&mut chosen, ids.iter(), &available, count);
            preferred = Some(ids);
        }
        take(&mut chosen, available.iter(), &available, count);
        let answer = client
            .allocate(AllocateRequest {
                container_requests: vec![ContainerAllocateRequest {
                    devices_ids: chosen.clone(),
                }],
            })
            .await
            .map_err(AdmitError::Allocate)?
            .into_inner();
        let response = answer
            .container_responses
            .into_iter()
            .next()
            .ok_or(AdmitError::NoContainerResponse)?;
        let admission = Admission {
            pod: pod.clone(),
            container: container.to_string(),
            resource: resource.to_string(),
            devices: chosen,
            preferred,
            response,
        };
        self.state().allocations.push(admission.clone());
        Ok(admission)
    }
}

/// Adds devices of `from` that are available and not yet chosen, up to `count`.
fn take<'a>(
    chosen: &mut Vec<String>,
    from: impl Iterator<Item = &'a String>,
    available: &BTreeSet<String>,
    count: usize,
) {
    for id in from {
        if chosen.len() == count {
            return;
        }
        if available.contains(id) && !chosen.contains(id) {
            chosen.push(id.clone());
        }
    }
}

/// The `Registration` service.
pub(super) struct Registrar {
    pub(super) manager: std::sync::Arc<Manager>,
}

#[tonic::async_trait]
impl Registration for Registrar {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        if r.version != VERSION {
            return Err(Status::invalid_argument(format!(
                "Unsupported API version: {}; supported: {VERSION}",
                r.version
            )));
        }
        if r.resource_name.is_empty() {
            return Err(Status::invalid_argument("invalid resource name: empty"));
        }
        self.manager.state().registrations += 1;
        self.manager
            .clone()
            .connect(r.resource_name, r.endpoint)
            .await?;
        Ok(Response::new(Empty {}))
    }
}
