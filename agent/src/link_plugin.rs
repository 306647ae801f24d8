//! The kubelet's side of gputopo's link devices: a DRA kubelet plugin for
//! driver `topology.gputopo.dev`. The kubelet prepares every device of a
//! claim through its driver's plugin and will not start a pod whose driver
//! has none, so the agent registers one (`<registry>/<driver>-reg.sock`,
//! serving `<plugins>/<driver>/dra.sock`). Link devices stand for wiring
//! and put nothing into a container: preparing one succeeds with no CDI
//! device, unpreparing one too.

use gputopo_kubelet_api::dra::dra_plugin_server::{DraPlugin, DraPluginServer};
use gputopo_kubelet_api::dra::{
    DRA_PLUGIN_SERVICE, NodePrepareResourceResponse, NodePrepareResourcesRequest,
    NodePrepareResourcesResponse, NodeUnprepareResourceResponse, NodeUnprepareResourcesRequest,
    NodeUnprepareResourcesResponse,
};
use gputopo_kubelet_api::pluginregistration::registration_server::{
    Registration, RegistrationServer,
};
use gputopo_kubelet_api::pluginregistration::{
    DRA_PLUGIN, InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use gputopo_kubelet_api::socket::{self, ServeError};
use gputopo_topology::dra_slice::LINK_DRIVER;
use std::path::PathBuf;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

/// Where the kubelet looks for plugins, as the agent's container sees the
/// host's directories (mounted at the same paths).
#[derive(Clone, Debug)]
pub struct LinkPluginPaths {
    /// `/var/lib/kubelet/plugins`: the driver's `dra.sock` goes in `<this>/<driver>/`.
    pub plugins_dir: PathBuf,
    /// `/var/lib/kubelet/plugins_registry`: the registration socket.
    pub registry_dir: PathBuf,
}

impl LinkPluginPaths {
    pub fn dra_socket(&self) -> PathBuf {
        self.plugins_dir.join(LINK_DRIVER).join("dra.sock")
    }

    pub fn registration_socket(&self) -> PathBuf {
        self.registry_dir.join(format!("{LINK_DRIVER}-reg.sock"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LinkPluginError {
    #[error("cannot create {path} for the link devices' kubelet plugin: {source}")]
    Directory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Binds both sockets now (so a missing mount fails the start, loudly) and
/// returns the servers to run.
pub fn bind(
    paths: &LinkPluginPaths,
) -> Result<impl std::future::Future<Output = ()> + Send + use<>, LinkPluginError> {
    let dra = paths.dra_socket();
    if let Some(dir) = dra.parent() {
        std::fs::create_dir_all(dir).map_err(|source| LinkPluginError::Directory {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let dra_listener = socket::bind(&dra)?;
    let reg_listener = socket::bind(&paths.registration_socket())?;
    let registration = Registrar::new(paths);
    Ok(async move {
        let dra_server = socket::server()
            .add_service(DraPluginServer::new(LinkDevices))
            .serve_with_incoming(UnixListenerStream::new(dra_listener));
        let reg_server = socket::server()
            .add_service(RegistrationServer::new(registration))
            .serve_with_incoming(UnixListenerStream::new(reg_listener));
        let (a, b) = tokio::join!(dra_server, reg_server);
        for r in [a, b] {
            if let Err(e) = r {
                warn!(error = %e, "the link devices' kubelet plugin stopped serving");
            }
        }
    })
}

/// Answers the kubelet's `GetInfo` and hears whether it registered us.
pub struct Registrar {
    endpoint: String,
}

impl Registrar {
    pub fn new(paths: &LinkPluginPaths) -> Registrar {
        Registrar {
            endpoint: paths.dra_socket().display().to_string(),
        }
    }
}

#[tonic::async_trait]
impl Registration for Registrar {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(PluginInfo {
            r#type: DRA_PLUGIN.to_string(),
            name: LINK_DRIVER.to_string(),
            endpoint: self.endpoint.clone(),
            supported_versions: vec![DRA_PLUGIN_SERVICE.to_string()],
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            info!(
                driver = LINK_DRIVER,
                "the kubelet registered the link devices' plugin"
            );
            Ok(Response::new(RegistrationStatusResponse {}))
        } else {
            warn!(driver = LINK_DRIVER, error = %status.error, "the kubelet refused the link devices' plugin");
            Err(Status::failed_precondition(format!(
                "registration refused: {}",
                status.error
            )))
        }
    }
}

/// Prepares link devices: nothing to do, no CDI device, for every claim.
pub struct LinkDevices;

#[tonic::async_trait]
impl DraPlugin for LinkDevices {
    async fn node_prepare_resources(
        &self,
        request: Request<NodePrepareResourcesRequest>,
    ) -> Result<Response<NodePrepareResourcesResponse>, Status> {
        let claims = request
            .into_inner()
            .claims
            .into_iter()
            .map(|c| (c.uid, NodePrepareResourceResponse::default()))
            .collect();
        Ok(Response::new(NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<NodeUnprepareResourcesRequest>,
    ) -> Result<Response<NodeUnprepareResourcesResponse>, Status> {
        let claims = request
            .into_inner()
            .claims
            .into_iter()
            .map(|c| (c.uid, NodeUnprepareResourceResponse::default()))
            .collect();
        Ok(Response::new(NodeUnprepareResourcesResponse { claims }))
    }
}
