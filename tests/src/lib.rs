//! A real, local Kubernetes control plane for integration tests.
//!
//! [`TestEnv`] starts `etcd` and `kube-apiserver` (and, on request,
//! `kube-controller-manager`, `kube-scheduler` and `kwok`; more
//! kube-schedulers, each with a KubeSchedulerConfiguration of the test's own,
//! with [`TestEnv::start_scheduler_with_config`]) as child processes
//! on free loopback ports, with TLS and client-certificate authentication
//! from a throw-away CA, RBAC on, and an audit log. Nothing is mocked: the
//! binaries are the upstream ones, built from source by
//! `scripts/control-plane-binaries` (see [`binaries`]). A test that starts
//! one is marked `#[ignore = "..."]` with [`binaries::IGNORE_REASON`], so
//! plain `cargo test` skips it and `scripts/test` runs it (README, "Test
//! tiers").
//!
//! ```no_run
//! # async fn t() {
//! let env = gputopo_testenv::TestEnv::shared().await;
//! let client = env.client().await;
//! let node = env.unique_name("node");
//! # }
//! ```
//!
//! Every wait is bounded; a component that fails to start fails the test
//! with the tail of its log. Logs and data live in a temp dir that is
//! removed afterwards, unless a test failed or `GPUTOPO_KEEP_LOGS=1` is set,
//! in which case its path is printed. Processes die with the test process,
//! however it ends (see [`process`]).

mod apiserver;
mod audit;
pub mod binaries;
mod clients;
mod components;
pub mod controllers;
mod feature_gates;
pub mod kubelet_node;
mod kwok_stages;
pub mod loopback;
pub mod nvl72;
mod objects;
pub mod pki;
pub mod process;
pub mod rule_checker;
mod scheduler_process;
mod spawn;
mod start_error;

use pki::Pki;
use process::Process;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::sync::OnceCell;

pub use audit::{AuditEvent, AuditObjectRef, AuditStatus, AuditUser};
pub use binaries::kubernetes_version;
pub use feature_gates::{API_SERVER_TOPOLOGY_FEATURE, WORKLOAD_FEATURES};
pub use objects::{ADMISSION_POLICY_FILES, fake_gpu_node, install_admission_policies, install_crd};
pub use scheduler_process::SchedulerProcess;
pub use start_error::StartError;

// `controllers` and `kubelet_node` reach these as `crate::free_ports` and
// `crate::client_from_kubeconfig`.
use clients::client_from_kubeconfig;
use spawn::{free_ports, process_list};

/// How long a component may take to become healthy. kube-apiserver on a
/// busy 2-core machine needs 10 to 30 seconds.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// The annotation kwok selects the nodes it manages by (see [`TestEnv::with_kwok`]).
pub const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// The admin user: a client certificate in `system:masters`.
pub const ADMIN_USER: &str = "gputopo-admin";

/// A running control plane. See the crate documentation.
pub struct TestEnv {
    dir: PathBuf,
    pki: Pki,
    apiserver_url: String,
    kubeconfig: PathBuf,
    audit_log: PathBuf,
    processes: Mutex<Vec<Process>>,
    /// How kube-apiserver was started, to start it again after [`TestEnv::stop_apiserver`].
    apiserver_command: Mutex<Option<(PathBuf, Vec<String>)>>,
    etcd_command: Mutex<Option<(PathBuf, Vec<String>)>>,
    controller_manager: OnceCell<Result<(), StartError>>,
    scheduler: OnceCell<Result<(), StartError>>,
    kwok: OnceCell<Result<(), StartError>>,
    /// Owned envs clean up in Drop; the shared one at process exit.
    shared: bool,
}

static SHARED: OnceCell<Result<TestEnv, StartError>> = OnceCell::const_new();
static NAMES: AtomicU64 = AtomicU64::new(0);

impl TestEnv {
    /// The control plane shared by all tests of this test binary, started by
    /// the first caller. Panics (in every test that asks) if it cannot start,
    /// including when the binaries have not been built.
    ///
    /// Tests sharing it must use [`TestEnv::unique_name`] for the objects
    /// they create. Components added with `with_*` stay for later tests.
    pub async fn shared() -> &'static TestEnv {
        let env = SHARED
            .get_or_init(|| async {
                TestEnv::start_inner(true)
                    .await
                    .map_err(StartError::ControlPlane)
            })
            .await;
        match env {
            Ok(env) => env,
            Err(e) => panic!("gputopo-testenv: {e}"),
        }
    }

    /// A control plane of its own (etcd + kube-apiserver, gputopo CRD
    /// installed), stopped when the value is dropped.
    pub async fn start() -> anyhow::Result<TestEnv> {
        TestEnv::start_inner(false).await
    }

    /// The admin kubeconfig (for `kubectl`, `helm`, or a binary under test).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:<port>`.
    pub fn apiserver_url(&self) -> &str {
        &self.apiserver_url
    }

    /// The CA that signed the serving and client certificates.
    pub fn ca_cert_path(&self) -> &Path {
        &self.pki.ca_files.cert
    }

    /// The control plane's CA, to issue more certificates from (a client
    /// certificate this CA signed authenticates to the API server).
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// The env's directory: logs (`<component>.log`), audit log, certificates.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.shared {
            return;
        }
        // Kill (and reap) every process before touching their files.
        process_list(&self.processes).clear();
        if process::keep_logs() {
            eprintln!(
                "gputopo-testenv: control plane logs kept in {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
