//! Serve, register, watch for the kubelet restarting, repeat.
//!
//! The kubelet, when it starts, removes every socket in its device-plugin
//! directory and creates a new `kubelet.sock`; plugins registered with the
//! old kubelet are forgotten. So the plugin polls: when its own socket is gone
//! or `kubelet.sock` is a different file (another inode), it stops its server,
//! binds the socket again and registers again. A kubelet that stops removes
//! `kubelet.sock` before the next one cleans the directory, so the socket
//! bound again may be removed too before the registration: it is bound anew
//! whenever it is gone before one (seen with the real kubelet, see
//! `tests/tests/real_kubelet_gpus.rs`).

use super::devices::DeviceList;
use super::service::{Service, Shared, options};
use crate::allocate::DeviceListStrategy;
use crate::choose::Inventory;
use crate::health::HealthProbe;
use crate::metrics::{Metrics, ResultLabel};
use crate::pods::AssignedPods;
use gputopo_kubelet_api::deviceplugin::device_plugin_server::DevicePluginServer;
use gputopo_kubelet_api::deviceplugin::registration_client::RegistrationClient;
use gputopo_kubelet_api::deviceplugin::{RegisterRequest, VERSION};
use gputopo_kubelet_api::{ServeError, connect_unix, socket};
use gputopo_ops::Readiness;
use std::collections::{BTreeSet, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tracing::{Instrument, info, info_span, warn};

/// How the plugin runs.
#[derive(Clone, Debug)]
pub struct PluginConfig {
    /// The kubelet's device-plugin directory.
    pub dir: PathBuf,
    /// The plugin's socket file name inside `dir`.
    pub socket_name: String,
    /// The extended resource advertised (`nvidia.com/gpu`).
    pub resource: String,
    pub strategies: BTreeSet<DeviceListStrategy>,
    /// How often NVML is asked which GPUs are lost.
    pub health_interval: Duration,
    /// How often the sockets are checked for a kubelet restart, and how long
    /// to wait between registration attempts.
    pub kubelet_poll: Duration,
    /// Bound on connecting to and calling the kubelet.
    pub kubelet_timeout: Duration,
}

/// Why the plugin stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Bind(#[from] ServeError),
}

/// Runs the plugin until `shutdown` completes.
pub async fn run(
    config: PluginConfig,
    inventory: Arc<Inventory>,
    pods: Arc<dyn AssignedPods>,
    probe: Arc<dyn HealthProbe>,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    let (devices_tx, devices_rx) = watch::channel(DeviceList::new(&inventory, &BTreeSet::new()));
    record_health(&metrics, &devices_rx.borrow());
    let health = tokio::spawn(health_loop(
        inventory.clone(),
        probe,
        devices_tx,
        metrics.clone(),
        config.health_interval,
    ));
    let shared = Arc::new(Shared {
        inventory,
        pods: pods.clone(),
        strategies: config.strategies.clone(),
        devices: devices_rx,
        metrics: metrics.clone(),
        told: Mutex::new(HashSet::new()),
    });
    let mut shutdown = std::pin::pin!(shutdown);
    // Preferences read the pod view: register only once it has read the pods.
    while !pods.synced() {
        readiness.set_not_ready("the watch of this node's pods has not synced yet".into());
        tokio::select! {
            () = &mut shutdown => { health.abort(); return Ok(()) }
            () = tokio::time::sleep(config.kubelet_poll) => {}
        }
    }
    let result = serve_and_register(&config, shared, &metrics, &readiness, &mut shutdown).await;
    health.abort();
    result
}

async fn serve_and_register(
    config: &PluginConfig,
    shared: Arc<Shared>,
    metrics: &Metrics,
    readiness: &Readiness,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Result<(), RunError> {
    let socket_path = config.dir.join(&config.socket_name);
    let kubelet_socket = config.dir.join("kubelet.sock");
    loop {
        let (stop_tx, stop_rx) = watch::channel(false);
        let service = Service {
            shared: shared.clone(),
            stopping: stop_rx.clone(),
        };
        let listener = socket::bind(&socket_path)?;
        let ours = file_id(&socket_path);
        let router = socket::server().add_service(DevicePluginServer::new(service));
        let mut server_stop = stop_rx;
        let server = tokio::spawn(async move {
            router
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                    let _ = server_stop.wait_for(|s| *s).await;
                })
                .await
        });
        readiness.set_not_ready("not registered with the kubelet yet".into());
        let kubelet_id = loop {
            // A kubelet starting removes every socket in the directory, ours
            // too, and may do so after we served again (a kubelet stopping
            // removes kubelet.sock first): the kubelet could never dial us,
            // so serve again before registering.
            if file_id(&socket_path) != ours {
                break None;
            }
            match register(config, &kubelet_socket).await {
                Ok(id) => {
                    metrics
                        .registrations
                        .get_or_create(&ResultLabel { result: "ok" })
                        .inc();
                    break Some(id);
                }
                Err(e) => {
                    metrics
                        .registrations
                        .get_or_create(&ResultLabel { result: "error" })
                        .inc();
                    warn!(error = %e, "registering with the kubelet failed; retrying");
                    readiness.set_not_ready(format!("registering with the kubelet failed: {e}"));
                }
            }
            tokio::select! {
                () = &mut *shutdown => return stop(stop_tx, server, &socket_path).await,
                () = tokio::time::sleep(config.kubelet_poll) => {}
            }
        };
        if let Some(kubelet_id) = kubelet_id {
            readiness.set_ready();
            info!(socket = %socket_path.display(), resource = config.resource, "registered with the kubelet");
            loop {
                tokio::select! {
                    () = &mut *shutdown => return stop(stop_tx, server, &socket_path).await,
                    () = tokio::time::sleep(config.kubelet_poll) => {}
                }
                if file_id(&socket_path) != ours || file_id(&kubelet_socket) != Some(kubelet_id) {
                    info!(
                        "the kubelet restarted (its socket changed or ours was removed); registering again"
                    );
                    break;
                }
            }
        } else {
            info!("our socket was removed before the kubelet registered us; serving it again");
        }
        let _ = stop_tx.send(true);
        if let Ok(Err(e)) = server.await {
            warn!(error = %e, "the plugin's gRPC server ended with an error");
        }
    }
}

async fn stop(
    stop_tx: watch::Sender<bool>,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    socket_path: &Path,
) -> Result<(), RunError> {
    let _ = stop_tx.send(true);
    let _ = server.await;
    let _ = std::fs::remove_file(socket_path);
    Ok(())
}

/// Why one registration attempt failed.
#[derive(Debug, thiserror::Error)]
enum RegisterError {
    #[error(transparent)]
    Dial(#[from] gputopo_kubelet_api::DialError),
    #[error("the kubelet refused the registration: {0}")]
    Refused(#[from] tonic::Status),
    #[error("the kubelet's socket {0} changed while registering")]
    Moved(PathBuf),
}

/// Registers with the kubelet at `kubelet_socket`; the socket file's
/// identity at that moment, to notice a restart later.
async fn register(
    config: &PluginConfig,
    kubelet_socket: &Path,
) -> Result<(u64, u64), RegisterError> {
    let before = file_id(kubelet_socket);
    let span = info_span!(
        "register",
        resource = config.resource,
        endpoint = config.socket_name
    );
    async {
        let channel = connect_unix(kubelet_socket, config.kubelet_timeout).await?;
        RegistrationClient::new(channel)
            .register(RegisterRequest {
                version: VERSION.to_string(),
                endpoint: config.socket_name.clone(),
                resource_name: config.resource.clone(),
                options: Some(options()),
            })
            .await?;
        Ok::<(), RegisterError>(())
    }
    .instrument(span)
    .await?;
    match (before, file_id(kubelet_socket)) {
        (Some(a), Some(b)) if a == b => Ok(a),
        _ => Err(RegisterError::Moved(kubelet_socket.to_path_buf())),
    }
}

/// A file's identity (device, inode), `None` if absent.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

async fn health_loop(
    inventory: Arc<Inventory>,
    probe: Arc<dyn HealthProbe>,
    devices: watch::Sender<DeviceList>,
    metrics: Arc<Metrics>,
    interval: Duration,
) {
    let uuids: Vec<String> = inventory.gpus().map(|g| g.uuid.clone()).collect();
    loop {
        let probe_now = probe.clone();
        let asked = uuids.clone();
        // NVML calls block: off the async workers.
        let answer = tokio::task::spawn_blocking(move || probe_now.lost(&asked)).await;
        match answer {
            Ok(Ok(lost)) => {
                let list = DeviceList::new(&inventory, &lost);
                devices.send_if_modified(|current| {
                    if *current == list {
                        return false;
                    }
                    for uuid in &lost {
                        warn!(
                            gpu = uuid,
                            "NVML reports the GPU lost; advertised Unhealthy"
                        );
                    }
                    *current = list.clone();
                    true
                });
                record_health(&metrics, &list);
            }
            Ok(Err(e)) => warn!(error = %e, "cannot check GPU health; keeping the last answer"),
            Err(e) => warn!(error = %e, "the health check panicked; keeping the last answer"),
        }
        tokio::time::sleep(interval).await;
    }
}

fn record_health(metrics: &Metrics, list: &DeviceList) {
    let unhealthy = list.unhealthy() as i64;
    metrics.unhealthy.set(unhealthy);
    metrics.healthy.set(list.devices.len() as i64 - unhealthy);
}
