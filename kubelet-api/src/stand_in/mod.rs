//! A stand-in for the kubelet's device manager and PodResources server, for
//! tests where no kubelet runs. It speaks the generated v1beta1 and v1 APIs
//! of this crate on unix sockets, as the kubelet does; it is not a kubelet.
//!
//! # What it mirrors (`pkg/kubelet/cm/devicemanager/`, Kubernetes 1.34)
//!
//! - **Start** (`plugin/v1beta1/server.go`, `Start`): removes the sockets in
//!   the device-plugin directory (plugins watch for this to register again),
//!   then serves `Registration` on `kubelet.sock` there.
//! - **Register**: refuses an API version other than `v1beta1` and an empty
//!   resource name; otherwise connects before answering, as the kubelet
//!   does (`connectClient`, `plugin/v1beta1/handler.go`): dials
//!   `<dir>/<endpoint>` and calls `GetDevicePluginOptions`
//!   (`PluginConnected`), failing the registration when either fails; then,
//!   in the background, keeps reading `ListAndWatch`, each message replacing
//!   the resource's device list. A second registration of a resource
//!   replaces the first.
//! - **Stop** ([`StandIn::stop_registration`]): what a kubelet stopping
//!   does: `kubelet.sock` goes (Go unlinks a unix listener's file on close),
//!   plugin sockets stay.
//! - **Admission** ([`StandIn::admit`], `devicesToAllocate`): a container that
//!   already holds devices of the resource gets them again, with no call;
//!   else `available` = healthy devices not allocated to any container; too
//!   few is an error; if the plugin registered with
//!   `GetPreferredAllocationAvailable`, it is asked with `available`, no
//!   must-include devices and the size, and the devices of its answer that are
//!   available are taken first (the kubelet does not check the answer further);
//!   the rest come from `available`. Then `Allocate` with the chosen devices,
//!   and the allocation is recorded with the plugin's response.
//! - **PodResources v1** (`pkg/kubelet/apis/podresources/server_v1.go`):
//!   `List` gives each admitted pod's containers with their devices,
//!   `GetAllocatableResources` every healthy device, `Get` one pod (an error
//!   for a pod it does not know); devices are listed one per entry with their
//!   NUMA nodes, as `containerDevicesFromResourceDeviceInstances` does.
//! - **Restart** ([`StandIn::restart`]): forgets every plugin (the kubelet
//!   starts without endpoints), keeps the allocations (the kubelet reads them
//!   back from its checkpoint), cleans the directory and serves a new
//!   `kubelet.sock`.
//!
//! # What it leaves out
//!
//! The Topology Manager (no NUMA alignment, so every device is
//! "no affinity"), init containers and device reuse between them
//! (`must_include` is always empty), `PreStartContainer`, the checkpoint
//! file, the registration grace period for unhealthy or vanished plugins,
//! CPUs, memory and dynamic resources in PodResources, pods without devices
//! (it knows only the pods it admitted), and the order of the kubelet's own
//! pick: the kubelet takes devices in Go map order (unspecified), the
//! stand-in in sorted order so tests are repeatable. Admissions run one at a
//! time, as the kubelet admits pods one by one.

mod manager;
mod podresources;

pub use manager::{Admission, AdmitError, PodKey};

use crate::deviceplugin::Device;
use crate::deviceplugin::registration_server::RegistrationServer;
use crate::podresources::pod_resources_lister_server::PodResourcesListerServer;
use crate::socket::{self, ServeError};
use manager::{Manager, Registrar};
use podresources::Lister;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;

/// Why waiting on the stand-in gave up.
#[derive(Debug, thiserror::Error)]
pub enum StandInError {
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("cannot clean the device-plugin directory {path}: {source}")]
    Clean {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("waited {waited:?} for {what}")]
    Timeout { what: String, waited: Duration },
}

/// A running stand-in; see the module docs.
pub struct StandIn {
    dir: PathBuf,
    manager: Arc<Manager>,
    registration: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    podresources: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl StandIn {
    /// Starts serving `Registration` on `<dir>/kubelet.sock` and PodResources
    /// on `podresources_socket`.
    pub async fn start(dir: &Path, podresources_socket: &Path) -> Result<StandIn, StandInError> {
        let manager = Arc::new(Manager::new(dir));
        let mut stand_in = StandIn {
            dir: dir.to_path_buf(),
            manager: manager.clone(),
            registration: None,
            podresources: None,
        };
        let listener = socket::bind(podresources_socket)?;
        let router =
            socket::server().add_service(PodResourcesListerServer::new(Lister { manager }));
        stand_in.podresources = Some(spawn(router, listener));
        stand_in.serve_registration()?;
        Ok(stand_in)
    }

    fn serve_registration(&mut self) -> Result<(), StandInError> {
        clean(&self.dir)?;
        let listener = socket::bind(&self.dir.join("kubelet.sock"))?;
        let router = socket::server().add_service(RegistrationServer::new(Registrar {
            manager: self.manager.clone(),
        }));
        self.registration = Some(spawn(router, listener));
        Ok(())
    }

    /// What a kubelet restart does to the device manager: see the module docs.
    pub async fn restart(&mut self) -> Result<(), StandInError> {
        self.stop_registration().await;
        self.start_registration()
    }

    /// The first half of a restart: the kubelet gone, `kubelet.sock` removed.
    pub async fn stop_registration(&mut self) {
        if let Some((stop, task)) = self.registration.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
        let _ = std::fs::remove_file(self.dir.join("kubelet.sock"));
        self.manager.forget_plugins();
    }

    /// The second half: a kubelet starting cleans the directory (plugin
    /// sockets included) and serves a new `kubelet.sock`.
    pub fn start_registration(&mut self) -> Result<(), StandInError> {
        self.serve_registration()
    }

    /// Admits `count` devices of `resource` for `pod`'s `container`.
    pub async fn admit(
        &self,
        pod: &PodKey,
        container: &str,
        resource: &str,
        count: usize,
    ) -> Result<Admission, AdmitError> {
        self.manager.admit(pod, container, resource, count).await
    }

    /// Frees the devices of a pod that ended.
    pub fn remove_pod(&self, uid: &str) {
        self.manager.remove_pod(uid);
    }

    /// The resource's devices as the plugin last listed them; `None` while no
    /// plugin of it is connected or none has listed yet.
    pub fn devices(&self, resource: &str) -> Option<Vec<Device>> {
        self.manager.devices(resource)
    }

    /// Registrations accepted so far (a restart does not reset the count).
    pub fn registrations(&self) -> usize {
        self.manager.registrations()
    }

    /// Polls until the resource's device list satisfies `ready`, or `timeout`.
    pub async fn wait_for_devices(
        &self,
        resource: &str,
        timeout: Duration,
        ready: impl Fn(&[Device]) -> bool,
    ) -> Result<Vec<Device>, StandInError> {
        let start = Instant::now();
        loop {
            if let Some(devices) = self.devices(resource)
                && ready(&devices)
            {
                return Ok(devices);
            }
            if start.elapsed() > timeout {
                return Err(StandInError::Timeout {
                    what: format!("the {resource} device list to be as expected"),
                    waited: timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        for (stop, task) in [self.registration.take(), self.podresources.take()]
            .into_iter()
            .flatten()
        {
            let _ = stop.send(());
            task.abort();
        }
        self.manager.forget_plugins();
    }
}

fn spawn(
    router: tonic::transport::server::Router,
    listener: tokio::net::UnixListener,
) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = router
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = stopped.await;
            })
            .await;
    });
    (stop, task)
}

/// Removes the sockets in `dir` (other files, such as the kubelet's
/// checkpoint, stay), creating `dir` if needed.
fn clean(dir: &Path) -> Result<(), StandInError> {
    use std::os::unix::fs::FileTypeExt;
    let err = |source| StandInError::Clean {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        if entry.file_type().map_err(err)?.is_socket() {
            std::fs::remove_file(entry.path()).map_err(err)?;
        }
    }
    Ok(())
}
