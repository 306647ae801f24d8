//! A real, local Kubernetes control plane for integration tests.
//!
//! [`TestEnv`] starts `etcd` and `kube-apiserver` (and, on request,
//! `kube-controller-manager`, `kube-scheduler` and `kwok`; more
//! kube-schedulers, each with a KubeSchedulerConfiguration of the test's own,
//! with [`TestEnv::start_scheduler_with_config`]) as child processes
//! on free loopback ports, with TLS and client-certificate authentication
//! from a throw-away CA, RBAC on, and an audit log. Nothing is mocked: the
//! binaries are the upstream ones, built from source by
//! `scripts/control-plane-binaries` (see [`binaries`]).
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

pub mod binaries;
pub mod controllers;
pub mod kubelet_node;
mod kwok_stages;
pub mod loopback;
pub mod pki;
pub mod process;

use anyhow::{Context as _, anyhow, bail};
use gputopo_api::GpuTopology;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, CustomResourceExt as _, Resource as _};
use pki::{CertFiles, Pki};
use process::Process;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

pub use binaries::kubernetes_version;

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
    controller_manager: OnceCell<Result<(), String>>,
    scheduler: OnceCell<Result<(), String>>,
    kwok: OnceCell<Result<(), String>>,
    /// Owned envs clean up in Drop; the shared one at process exit.
    shared: bool,
}

static SHARED: OnceCell<Result<TestEnv, String>> = OnceCell::const_new();
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
                    .map_err(|e| format!("{e:#}"))
            })
            .await;
        match env {
            Ok(env) => env,
            Err(e) => panic!("gputopo-testenv: the control plane did not start: {e}"),
        }
    }

    /// A control plane of its own (etcd + kube-apiserver, gputopo CRD
    /// installed), stopped when the value is dropped.
    pub async fn start() -> anyhow::Result<TestEnv> {
        TestEnv::start_inner(false).await
    }

    async fn start_inner(shared: bool) -> anyhow::Result<TestEnv> {
        let etcd_bin = binaries::locate(binaries::ETCD, "etcd")?;
        let apiserver_bin = binaries::locate(binaries::KUBERNETES, "kube-apiserver")?;

        let dir = tempfile::Builder::new()
            .prefix("gputopo-testenv-")
            .tempdir()?
            .keep();
        if shared {
            process::clean_at_exit(&dir);
        }
        let pki = Pki::create(&dir.join("pki"))?;
        let admin = pki.client("admin", ADMIN_USER, &["system:masters"])?;
        let [etcd_port, etcd_peer_port, apiserver_port] = free_ports()?;
        let apiserver_url = format!("https://127.0.0.1:{apiserver_port}");
        let kubeconfig = dir.join("admin.kubeconfig");
        write_kubeconfig(&kubeconfig, &apiserver_url, &pki.ca_files.cert, &admin)?;

        let env = TestEnv {
            audit_log: dir.join("audit.log"),
            dir,
            pki,
            apiserver_url,
            kubeconfig,
            processes: Mutex::new(Vec::new()),
            apiserver_command: Mutex::new(None),
            etcd_command: Mutex::new(None),
            controller_manager: OnceCell::new(),
            scheduler: OnceCell::new(),
            kwok: OnceCell::new(),
            shared,
        };
        // From here on, an error drops `env`, which kills what was started;
        // the error carries the log tail and the directory is kept.
        match env
            .start_etcd_and_apiserver(
                &etcd_bin,
                &apiserver_bin,
                etcd_port,
                etcd_peer_port,
                apiserver_port,
            )
            .await
        {
            Ok(()) => Ok(env),
            Err(e) => {
                process::PANICKED.store(true, Ordering::SeqCst);
                Err(e.context(format!("control plane logs: {}", env.dir.display())))
            }
        }
    }

    async fn start_etcd_and_apiserver(
        &self,
        etcd_bin: &Path,
        apiserver_bin: &Path,
        etcd_port: u16,
        etcd_peer_port: u16,
        apiserver_port: u16,
    ) -> anyhow::Result<()> {
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer_port}");
        let etcd_args = vec![
            "--name=gputopo-test".to_owned(),
            format!("--data-dir={}", self.dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=gputopo-test={peer_url}"),
            // The data is thrown away after the test: fsync buys nothing.
            "--unsafe-no-fsync".to_owned(),
            "--log-level=warn".to_owned(),
        ];
        self.spawn("etcd", etcd_bin, &etcd_args)?;
        if let Ok(mut cmd) = self.etcd_command.lock() {
            *cmd = Some((etcd_bin.to_path_buf(), etcd_args.clone()));
        }
        self.wait_until("etcd", Duration::from_secs(60), || async {
            etcd_healthy(etcd_port)
        })
        .await?;

        let policy = self.dir.join("audit-policy.yaml");
        std::fs::write(&policy, AUDIT_POLICY)?;
        let pki = &self.pki;
        let apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={apiserver_port}"),
            format!("--tls-cert-file={}", pki.serving.cert.display()),
            format!("--tls-private-key-file={}", pki.serving.key.display()),
            format!("--client-ca-file={}", pki.ca_files.cert.display()),
            format!("--service-account-key-file={}", pki.sa_pub.display()),
            format!(
                "--service-account-signing-key-file={}",
                pki.sa_key.display()
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
            "--authorization-mode=Node,RBAC".to_owned(),
            // A configuration value only: no traffic is routed.
            "--service-cluster-ip-range=10.96.0.0/24".to_owned(),
            // The `kubernetes` Service's endpoints would be 127.0.0.1, which
            // Endpoints validation refuses; nothing here routes to it anyway.
            "--endpoint-reconciler-type=none".to_owned(),
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", self.audit_log.display()),
            // Blocking: an event is on disk before the response is sent, so a
            // test can count requests right after making them.
            "--audit-log-mode=blocking".to_owned(),
            "--allow-privileged=true".to_owned(),
            format!("--cert-dir={}", self.dir.join("apiserver-certs").display()),
            "--profiling=false".to_owned(),
            "--v=1".to_owned(),
        ];
        let mut apiserver_args = apiserver_args;
        apiserver_args.extend(workload_flags(apiserver_bin, true)?);
        self.spawn("kube-apiserver", apiserver_bin, &apiserver_args)?;
        if let Ok(mut cmd) = self.apiserver_command.lock() {
            *cmd = Some((apiserver_bin.to_path_buf(), apiserver_args.clone()));
        }
        self.wait_apiserver_ready().await?;

        let client = self.client_result().await?;
        install_crd(&client, GpuTopology::crd()).await
    }

    /// Kills kube-apiserver (etcd keeps the data), as an outage or an upgrade
    /// would. Only for an env of one's own ([`TestEnv::start`]): tests sharing
    /// an env would see the outage too.
    pub fn stop_apiserver(&self) {
        assert!(
            !self.shared,
            "stop_apiserver on the shared env would disturb other tests"
        );
        process_list(&self.processes).retain(|p| p.name != "kube-apiserver");
    }

    /// Starts kube-apiserver again, same port and flags, and waits for `/readyz`.
    pub async fn start_apiserver_again(&self) -> anyhow::Result<()> {
        self.start_again("kube-apiserver", &self.apiserver_command)?;
        self.wait_apiserver_ready().await
    }

    /// Kills etcd with SIGKILL (its data directory stays), as a crash
    /// would. Only for an env of one's own, as [`TestEnv::stop_apiserver`].
    pub fn stop_etcd(&self) {
        assert!(
            !self.shared,
            "stop_etcd on the shared env would disturb other tests"
        );
        process_list(&self.processes).retain(|p| p.name != "etcd");
    }

    /// Starts etcd again, same ports, flags and data, and waits until
    /// kube-apiserver is ready on it.
    pub async fn start_etcd_again(&self) -> anyhow::Result<()> {
        self.start_again("etcd", &self.etcd_command)?;
        self.wait_apiserver_ready().await
    }

    /// Spawns `name` again with the command it first ran with; the first
    /// run's log is kept beside the new one.
    fn start_again(
        &self,
        name: &str,
        command: &Mutex<Option<(PathBuf, Vec<String>)>>,
    ) -> anyhow::Result<()> {
        let (bin, args) = command
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .with_context(|| format!("{name} was never started"))?;
        anyhow::ensure!(
            !process_list(&self.processes).iter().any(|p| p.name == name),
            "{name} is still running: stop it first"
        );
        let log = self.dir.join(format!("{name}.log"));
        let mut n = 1;
        while self.dir.join(format!("{name}.{n}.log")).exists() {
            n += 1;
        }
        let _ = std::fs::rename(&log, self.dir.join(format!("{name}.{n}.log")));
        self.spawn(name, &bin, &args)
    }

    async fn wait_apiserver_ready(&self) -> anyhow::Result<()> {
        let probe = self
            .client_with_timeouts(Duration::from_secs(2), Duration::from_secs(10))
            .await?;
        self.wait_until("kube-apiserver", START_TIMEOUT, || async {
            let req = http::Request::get("/readyz").body(Vec::new())?;
            let body = probe.request_text(req).await?;
            anyhow::ensure!(body.trim() == "ok", "/readyz: {body}");
            Ok(())
        })
        .await
    }

    /// Starts `program` with its log in the env's dir and remembers it.
    fn spawn(&self, name: &str, program: &Path, args: &[String]) -> anyhow::Result<()> {
        self.spawn_with_env(name, program, args, &[])
    }

    fn spawn_with_env(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> anyhow::Result<()> {
        let log = self.dir.join(format!("{name}.log"));
        // The command line first, so the log says how to rerun it by hand.
        std::fs::write(
            &log,
            format!("# {} {}\n", program.display(), args.join(" ")),
        )?;
        let p = Process::spawn(name, program, args, env, log)?;
        process_list(&self.processes).push(p);
        Ok(())
    }

    /// Polls `check` every 250 ms until it succeeds, the component exits, or
    /// `timeout` passes; the error names the last failure and the log tail.
    async fn wait_until<F, Fut>(
        &self,
        name: &str,
        timeout: Duration,
        mut check: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let start = Instant::now();
        loop {
            let last = match tokio::time::timeout(Duration::from_secs(15), check()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => "the check itself took over 15 s".to_owned(),
            };
            {
                let mut procs = process_list(&self.processes);
                if let Some(p) = procs.iter_mut().find(|p| p.name == name) {
                    p.check_running()?;
                }
            }
            if start.elapsed() > timeout {
                let log = self.dir.join(format!("{name}.log"));
                bail!(
                    "{name} not healthy after {timeout:?} (last check: {last}); last lines of {}:\n{}",
                    log.display(),
                    process::tail(&log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// An admin client (`system:masters`). Build one per test: a client is
    /// bound to the tokio runtime that created it, and each test has its own.
    pub async fn client(&self) -> Client {
        self.client_result()
            .await
            .expect("building a client for the test control plane")
    }

    async fn client_result(&self) -> anyhow::Result<Client> {
        client_from_kubeconfig(&self.kubeconfig, None, None).await
    }

    async fn client_with_timeouts(
        &self,
        connect: Duration,
        read: Duration,
    ) -> anyhow::Result<Client> {
        client_from_kubeconfig(&self.kubeconfig, Some(connect), Some(read)).await
    }

    /// A client authenticated by a fresh client certificate for `user` in
    /// `groups` (at most two), with no permissions beyond what RBAC grants
    /// them (`system:authenticated` gets discovery and little else).
    pub async fn client_for_user(&self, user: &str, groups: &[&str]) -> Client {
        let path = self
            .kubeconfig_for_user(user, groups)
            .expect("writing a kubeconfig for a test user");
        client_from_kubeconfig(&path, None, None)
            .await
            .expect("building a client for a test user")
    }

    /// Writes a kubeconfig for `user` in `groups` and returns its path.
    pub fn kubeconfig_for_user(&self, user: &str, groups: &[&str]) -> anyhow::Result<PathBuf> {
        let stem = format!("user-{}", NAMES.fetch_add(1, Ordering::Relaxed));
        let cert = self.pki.client(&stem, user, groups)?;
        let path = self.dir.join(format!("{stem}.kubeconfig"));
        write_kubeconfig(&path, &self.apiserver_url, &self.pki.ca_files.cert, &cert)?;
        Ok(path)
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

    /// The apiserver's audit log: one JSON event per line, every request at
    /// `Metadata` level except health checks (stage `ResponseComplete`).
    pub fn audit_log_path(&self) -> &Path {
        &self.audit_log
    }

    /// The audit events written so far, oldest first.
    ///
    /// The apiserver writes a request's event just *after* the response
    /// leaves, so the last request's event may be missing here: to count
    /// requests, use [`TestEnv::wait_for_audit`] for a request you know was
    /// made (the last one), then count.
    pub fn audit_events(&self) -> Vec<AuditEvent> {
        let text = std::fs::read_to_string(&self.audit_log).unwrap_or_default();
        text.lines()
            .filter_map(|l| AuditEvent::parse(l).ok())
            .collect()
    }

    /// The audit events once `ready` holds for them (polled every 50 ms, at
    /// most 10 s, then panics naming `what`).
    pub async fn wait_for_audit(
        &self,
        what: &str,
        ready: impl Fn(&[AuditEvent]) -> bool,
    ) -> Vec<AuditEvent> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = self.audit_events();
            if ready(&events) {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "audit log {} has no {what} after 10 s ({} events)",
                self.audit_log.display(),
                events.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A name no other test of this process gets: `<prefix>-<n>`, a valid
    /// DNS label for any prefix of lowercase letters, digits and dashes.
    pub fn unique_name(&self, prefix: &str) -> String {
        format!("{prefix}-{}", NAMES.fetch_add(1, Ordering::Relaxed))
    }

    /// Creates a namespace with a unique name and its `default`
    /// ServiceAccount (which the ServiceAccount admission plugin requires of
    /// every pod; the controller manager would create it, when it runs).
    pub async fn create_namespace(&self, prefix: &str) -> String {
        let name = self.unique_name(prefix);
        let client = self.client().await;
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<ServiceAccount>::namespaced(client, &name)
            .create(&PostParams::default(), &sa)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("creating the default ServiceAccount in {name}: {e}"),
        }
        name
    }

    /// Starts `kube-controller-manager` (once; later calls return at once)
    /// with every default controller: garbage collector, namespace, job,
    /// ServiceAccount, node lifecycle, ... It authenticates as
    /// `system:kube-controller-manager` and gives each controller its own
    /// ServiceAccount credentials, as kubeadm sets it up.
    pub async fn with_controller_manager(&self) -> &Self {
        self.start_component(&self.controller_manager, "kube-controller-manager", || {
            self.start_controller_manager()
        })
        .await
    }

    async fn start_controller_manager(&self) -> anyhow::Result<()> {
        let bin = binaries::locate(binaries::KUBERNETES, "kube-controller-manager")?;
        let kubeconfig = self.kubeconfig_for_user("system:kube-controller-manager", &[])?;
        let [port] = free_ports()?;
        let pki = &self.pki;
        let mut args = vec![format!("--kubeconfig={}", kubeconfig.display())];
        args.extend(self.serving_args(&kubeconfig, port));
        args.extend([
            format!("--cert-dir={}", self.dir.join("kcm-certs").display()),
            "--controllers=*".to_owned(),
            format!(
                "--service-account-private-key-file={}",
                pki.sa_key.display()
            ),
            format!("--root-ca-file={}", pki.ca_files.cert.display()),
            format!(
                "--cluster-signing-cert-file={}",
                pki.ca_files.cert.display()
            ),
            format!("--cluster-signing-key-file={}", pki.ca_files.key.display()),
            "--use-service-account-credentials=true".to_owned(),
            "--leader-elect=false".to_owned(),
            "--profiling=false".to_owned(),
            "--v=1".to_owned(),
        ]);
        args.extend(workload_flags(&bin, false)?);
        self.spawn("kube-controller-manager", &bin, &args)?;
        self.wait_healthz("kube-controller-manager", port).await
    }

    /// The flags every control-plane component with a secure port shares:
    /// delegated authentication and authorization through `kubeconfig`,
    /// serving on loopback `port` with the env's serving certificate.
    fn serving_args(&self, kubeconfig: &Path, port: u16) -> [String; 6] {
        let pki = &self.pki;
        [
            format!("--authentication-kubeconfig={}", kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kubeconfig.display()),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", pki.serving.cert.display()),
            format!("--tls-private-key-file={}", pki.serving.key.display()),
        ]
    }

    /// Starts the stock `kube-scheduler` (once), authenticated as
    /// `system:kube-scheduler`, with its default profile.
    ///
    /// As in a real cluster, a new Node carries the `node.kubernetes.io/not-ready`
    /// taint (added at creation by the TaintNodesByCondition admission plugin)
    /// until the controller manager's node lifecycle controller sees it Ready:
    /// to schedule onto fake nodes, start [`TestEnv::with_controller_manager`] too.
    pub async fn with_scheduler(&self) -> &Self {
        self.start_component(&self.scheduler, "kube-scheduler", || self.start_scheduler())
            .await
    }

    async fn start_scheduler(&self) -> anyhow::Result<()> {
        let bin = binaries::locate(binaries::KUBERNETES, "kube-scheduler")?;
        let kubeconfig = self.kubeconfig_for_user("system:kube-scheduler", &[])?;
        let [port] = free_ports()?;
        let mut args = vec![format!("--kubeconfig={}", kubeconfig.display())];
        args.extend(self.serving_args(&kubeconfig, port));
        args.extend([
            "--leader-elect=false".to_owned(),
            "--profiling=false".to_owned(),
            "--v=1".to_owned(),
        ]);
        args.extend(workload_flags(&bin, false)?);
        self.spawn("kube-scheduler", &bin, &args)?;
        self.wait_healthz("kube-scheduler", port).await
    }

    /// Starts one more stock `kube-scheduler`, configured by `config` (a
    /// `KubeSchedulerConfiguration` as JSON: its profiles, extenders,
    /// backoff), and waits for its `/healthz`. Unlike
    /// [`TestEnv::with_scheduler`], each call starts a process of its own,
    /// owned by the returned handle (killed when it is dropped), so several
    /// can run side by side: give each profile a `schedulerName` no other
    /// scheduler serves.
    ///
    /// The harness fills in what only it knows: `apiVersion` and `kind` when
    /// absent, `clientConnection.kubeconfig` (the `system:kube-scheduler`
    /// identity, as [`TestEnv::with_scheduler`] uses) and
    /// `leaderElection.leaderElect: false` (a shared lease would let only one
    /// of several schedulers run). The file and the log are
    /// `<name>-config.yaml` and `<name>.log` in [`TestEnv::dir`].
    pub async fn start_scheduler_with_config(
        &self,
        name: &str,
        config: serde_json::Value,
    ) -> anyhow::Result<SchedulerProcess> {
        let bin = binaries::locate(binaries::KUBERNETES, "kube-scheduler")?;
        let kubeconfig = self.kubeconfig_for_user("system:kube-scheduler", &[])?;
        let mut config = config;
        let object = config
            .as_object_mut()
            .context("the KubeSchedulerConfiguration must be a JSON object")?;
        object
            .entry("apiVersion")
            .or_insert_with(|| "kubescheduler.config.k8s.io/v1".into());
        object
            .entry("kind")
            .or_insert_with(|| "KubeSchedulerConfiguration".into());
        object.insert(
            "clientConnection".into(),
            serde_json::json!({"kubeconfig": kubeconfig}),
        );
        object.insert(
            "leaderElection".into(),
            serde_json::json!({"leaderElect": false}),
        );
        let config_file = self.dir.join(format!("{name}-config.yaml"));
        // JSON is YAML.
        std::fs::write(&config_file, serde_json::to_string_pretty(&config)?)?;
        let [port] = free_ports()?;
        let mut args = vec![format!("--config={}", config_file.display())];
        args.extend(self.serving_args(&kubeconfig, port));
        args.extend(["--profiling=false".to_owned(), "--v=2".to_owned()]);
        let log = self.dir.join(format!("{name}.log"));
        std::fs::write(&log, format!("# {} {}\n", bin.display(), args.join(" ")))?;
        let mut process = Process::spawn(name, &bin, &args, &[], log.clone())?;
        let client = self.loopback_client(port).await?;
        let start = Instant::now();
        loop {
            let last = match tokio::time::timeout(Duration::from_secs(15), async {
                let req = http::Request::get("/healthz").body(Vec::new())?;
                let body = client.request_text(req).await?;
                anyhow::ensure!(body.trim() == "ok", "/healthz: {body}");
                Ok(())
            })
            .await
            {
                Ok(Ok(())) => break,
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => "the check itself took over 15 s".to_owned(),
            };
            if let Err(e) = process.check_running() {
                process::PANICKED.store(true, Ordering::SeqCst);
                return Err(e);
            }
            if start.elapsed() > START_TIMEOUT {
                process::PANICKED.store(true, Ordering::SeqCst);
                bail!(
                    "{name} not healthy after {START_TIMEOUT:?} (last check: {last}); last lines of {}:\n{}",
                    log.display(),
                    process::tail(&log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(SchedulerProcess {
            process,
            port,
            config_file,
        })
    }

    /// Starts `kwok` (once): it plays the kubelet for the nodes annotated
    /// [`KWOK_NODE_ANNOTATION`] (see [`TestEnv::create_fake_gpu_node`]),
    /// keeps them Ready with lease heartbeats, and runs the pods bound to
    /// them (phase Running, a pod IP from 10.0.0.0/16) until they are
    /// deleted, Job pods too (see `kwok_stages`). It authenticates as `kwok`
    /// in `system:masters`.
    pub async fn with_kwok(&self) -> &Self {
        self.start_component(&self.kwok, "kwok", || self.start_kwok())
            .await
    }

    async fn start_kwok(&self) -> anyhow::Result<()> {
        let bin = binaries::locate(binaries::KWOK, "kwok")?;
        let kubeconfig = self.kubeconfig_for_user("kwok", &["system:masters"])?;
        let (key, value) = KWOK_NODE_ANNOTATION;
        // kwok reads ~/.kwok/kwok.yaml when it exists: give it an empty home.
        let home = self.dir.join("kwok-home");
        std::fs::create_dir_all(&home)?;
        let stages = self.dir.join("kwok-stages.yaml");
        kwok_stages::write_pod_stages(&stages)?;
        let args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--config={}", stages.display()),
            "--manage-all-nodes=false".to_owned(),
            format!("--manage-nodes-with-annotation-selector={key}={value}"),
            "--cidr=10.0.0.1/16".to_owned(),
            "--node-ip=10.255.0.1".to_owned(),
        ];
        self.spawn_with_env("kwok", &bin, &args, &[("HOME", home.as_os_str())])?;
        // kwok has no health endpoint unless it serves kubelet ports; it is
        // up once it logs that it watches nodes. A fake node turning Ready
        // is the real proof, which create_fake_gpu_node waits for.
        self.wait_until("kwok", Duration::from_secs(60), || async {
            let log = std::fs::read_to_string(self.dir.join("kwok.log")).unwrap_or_default();
            anyhow::ensure!(
                log.contains("Watch nodes"),
                "kwok has not started watching nodes"
            );
            Ok(())
        })
        .await
    }

    async fn start_component<'a, F, Fut>(
        &'a self,
        cell: &OnceCell<Result<(), String>>,
        name: &str,
        start: F,
    ) -> &'a Self
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let result = cell
            .get_or_init(|| async {
                start().await.map_err(|e| {
                    process::PANICKED.store(true, Ordering::SeqCst);
                    format!("{e:#}\n(control plane logs: {})", self.dir.display())
                })
            })
            .await;
        if let Err(e) = result {
            panic!("gputopo-testenv: {name} did not start: {e}");
        }
        self
    }

    /// A client for `https://127.0.0.1:<port>`, which the env's serving certificate serves.
    async fn loopback_client(&self, port: u16) -> anyhow::Result<Client> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)?;
        let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        config.cluster_url = format!("https://127.0.0.1:{port}").parse()?;
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(10));
        Ok(Client::try_from(config)?)
    }

    /// Polls `https://127.0.0.1:<port>/healthz`, served with the env's serving certificate.
    async fn wait_healthz(&self, name: &str, port: u16) -> anyhow::Result<()> {
        let client = self.loopback_client(port).await?;
        self.wait_until(name, START_TIMEOUT, || async {
            let req = http::Request::get("/healthz").body(Vec::new())?;
            let body = client.request_text(req).await?;
            anyhow::ensure!(body.trim() == "ok", "/healthz: {body}");
            Ok(())
        })
        .await
    }

    /// Creates a Node that kwok manages (call [`TestEnv::with_kwok`] first):
    /// `gpus` whole `nvidia.com/gpu` in capacity and allocatable, room for
    /// 110 pods, the given labels; then waits (up to a minute) until kwok
    /// reports it Ready.
    pub async fn create_fake_gpu_node(
        &self,
        name: &str,
        gpus: u32,
        labels: &BTreeMap<String, String>,
    ) -> Node {
        let client = self.client().await;
        let nodes = Api::<Node>::all(client);
        nodes
            .create(&PostParams::default(), &fake_gpu_node(name, gpus, labels))
            .await
            .unwrap_or_else(|e| panic!("creating fake node {name}: {e}"));
        let ready = kube::runtime::wait::await_condition(nodes, name, |n: Option<&Node>| {
            n.and_then(|n| n.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        match tokio::time::timeout(Duration::from_secs(60), ready).await {
            Ok(Ok(Some(node))) => node,
            Ok(Ok(None)) => panic!("fake node {name} was deleted while waiting for it to be Ready"),
            Ok(Err(e)) => panic!("watching fake node {name}: {e}"),
            Err(_) => panic!(
                "fake node {name} not Ready after 60 s: is kwok running (TestEnv::with_kwok)? \
                 kwok log:\n{}",
                process::tail(&self.dir.join("kwok.log"), 30)
            ),
        }
    }
}

/// A `kube-scheduler` started by [`TestEnv::start_scheduler_with_config`];
/// killed when dropped.
pub struct SchedulerProcess {
    process: Process,
    port: u16,
    config_file: PathBuf,
}

impl SchedulerProcess {
    /// Its secure port (`/healthz`, `/metrics`), on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The configuration file it was started with, as the harness completed it.
    pub fn config_file(&self) -> &Path {
        &self.config_file
    }

    pub fn log_path(&self) -> &Path {
        &self.process.log
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        process::tail(&self.process.log, lines)
    }

    /// `Err` with the exit status and the log's tail when it has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        self.process.check_running()
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

/// A Node object as kwok's fake nodes are made: the annotation kwok selects
/// on, the taint-free spec, and the status (Node status may be set at
/// creation; kwok keeps capacity and allocatable as given).
pub fn fake_gpu_node(name: &str, gpus: u32, labels: &BTreeMap<String, String>) -> Node {
    let mut all_labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), name.to_owned()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ("type".to_owned(), "kwok".to_owned()),
    ]);
    all_labels.extend(labels.clone());
    let resources = BTreeMap::from([
        ("cpu".to_owned(), Quantity("128".into())),
        ("memory".to_owned(), Quantity("1Ti".into())),
        ("pods".to_owned(), Quantity("110".into())),
        (
            gputopo_api::keys::RESOURCE_GPU.to_owned(),
            Quantity(gpus.to_string()),
        ),
    ]);
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(all_labels),
            annotations: Some(BTreeMap::from([(
                KWOK_NODE_ANNOTATION.0.to_owned(),
                KWOK_NODE_ANNOTATION.1.to_owned(),
            )])),
            ..Default::default()
        },
        spec: None,
        status: Some(k8s_openapi::api::core::v1::NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            ..Default::default()
        }),
    }
}

/// One line of the apiserver's audit log (the fields tests look at).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// `ResponseComplete`, or `ResponseStarted` for a watch's start, or `Panic`.
    pub stage: String,
    pub verb: String,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub user: AuditUser,
    #[serde(default)]
    pub object_ref: Option<AuditObjectRef>,
    #[serde(default)]
    pub response_status: Option<AuditStatus>,
    #[serde(default)]
    pub impersonated_user: Option<AuditUser>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AuditUser {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub subresource: Option<String>,
    #[serde(default)]
    pub api_group: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AuditStatus {
    #[serde(default)]
    pub code: Option<i32>,
}

impl AuditEvent {
    /// Parses one line of the audit log.
    pub fn parse(line: &str) -> serde_json::Result<AuditEvent> {
        serde_json::from_str(line)
    }

    /// Whether the event is about `resource` (plural, e.g. `nodes`) named `name`.
    pub fn is_about(&self, resource: &str, name: &str) -> bool {
        self.object_ref
            .as_ref()
            .is_some_and(|o| o.resource == resource && o.name.as_deref() == Some(name))
    }

    /// create, update, patch, delete or deletecollection.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// Every request at Metadata level, except the probes' health checks.
/// The upstream gang API (KEP-4671: `scheduling.k8s.io/v1beta1` Workload
/// and PodGroup, the pod's `spec.schedulingGroup`; beta and off by default
/// in 1.37) and the Job controller's use of it (KEP-5547, alpha), so that
/// the tests run gangs the way a 1.37 cluster that enables them does.
pub const WORKLOAD_FEATURES: &str = "GenericWorkload=true,WorkloadWithJob=true";

/// The flags that turn [`WORKLOAD_FEATURES`] on for the component `bin`,
/// on releases where the API is `scheduling.k8s.io/v1beta1` (1.37 and
/// later; older releases run without it: `scripts/test-oldest-kubernetes`).
/// `api_server` adds the API group's `--runtime-config`.
fn workload_flags(bin: &Path, api_server: bool) -> anyhow::Result<Vec<String>> {
    let out = std::process::Command::new(bin).arg("--version").output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let minor = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v1."))
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok())
        .with_context(|| format!("{} --version printed {text:?}", bin.display()))?;
    if minor < 37 {
        return Ok(Vec::new());
    }
    let mut flags = vec![format!("--feature-gates={WORKLOAD_FEATURES}")];
    if api_server {
        flags.push("--runtime-config=scheduling.k8s.io/v1beta1=true".into());
    }
    Ok(flags)
}

const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    nonResourceURLs: [/healthz*, /readyz*, /livez*]
  - level: Metadata
";

fn process_list(m: &Mutex<Vec<Process>>) -> std::sync::MutexGuard<'_, Vec<Process>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Free loopback ports (bound, read, released: a race with other programs
/// is possible but a start failure then says "address already in use").
fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ports = [0; N];
    for (p, l) in ports.iter_mut().zip(&listeners) {
        *p = l.local_addr()?.port();
    }
    Ok(ports)
}

/// etcd's plain-HTTP /health, with std's TcpStream (no HTTP client needed).
fn etcd_healthy(port: u16) -> anyhow::Result<()> {
    use std::io::{Read as _, Write as _};
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    anyhow::ensure!(
        response.contains("\"health\":\"true\""),
        "etcd /health: {response}"
    );
    Ok(())
}

fn write_kubeconfig(path: &Path, server: &str, ca: &Path, cert: &CertFiles) -> anyhow::Result<()> {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gputopo-test", "cluster": {
            "server": server,
            "certificate-authority": ca,
        }}],
        "users": [{"name": "user", "user": {
            "client-certificate": cert.cert,
            "client-key": cert.key,
        }}],
        "contexts": [{"name": "gputopo-test", "context": {"cluster": "gputopo-test", "user": "user"}}],
        "current-context": "gputopo-test",
    });
    // JSON is YAML: kubectl, helm and kube all read it.
    std::fs::write(path, serde_json::to_string_pretty(&config)?)?;
    Ok(())
}

async fn client_from_kubeconfig(
    path: &Path,
    connect_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    if connect_timeout.is_some() {
        config.connect_timeout = connect_timeout;
    }
    if read_timeout.is_some() {
        config.read_timeout = read_timeout;
    }
    Ok(Client::try_from(config)?)
}

/// Creates (or replaces) a CRD and waits until it is Established.
pub async fn install_crd(client: &Client, crd: CustomResourceDefinition) -> anyhow::Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd
        .meta()
        .name
        .clone()
        .ok_or_else(|| anyhow!("CRD without a name"))?;
    api.create(&PostParams::default(), &crd)
        .await
        .with_context(|| format!("creating CRD {name}"))?;
    let established = kube::runtime::wait::await_condition(
        api,
        &name,
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(60), established)
        .await
        .with_context(|| format!("CRD {name} not Established after 60 s"))??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_apiserver_audit_line() {
        // A line kube-apiserver v1.34 wrote with the policy above.
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"007cca94-ee37-4996-88c6-cdc1a64cc0b7","stage":"ResponseComplete","requestURI":"/api/v1/nodes?","verb":"create","user":{"username":"gputopo-admin","groups":["system:masters","system:authenticated"],"extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=258e"]}},"sourceIPs":["127.0.0.1"],"objectRef":{"resource":"nodes","name":"audited-0","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2026-11-21T05:56:13.240000Z","stageTimestamp":"2026-11-21T05:56:13.250000Z"}"#;
        let e = AuditEvent::parse(line).unwrap();
        assert_eq!(e.stage, "ResponseComplete");
        assert_eq!(e.request_uri, "/api/v1/nodes?");
        assert!(e.is_write() && e.is_about("nodes", "audited-0"));
        assert_eq!(e.user.username, ADMIN_USER);
        assert_eq!(e.response_status.and_then(|s| s.code), Some(201));
    }

    #[test]
    fn fake_gpu_nodes_carry_the_kwok_annotation_and_gpus() {
        let labels = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
        let node = fake_gpu_node("n1", 8, &labels);
        let annotations = node.metadata.annotations.unwrap();
        assert_eq!(annotations[KWOK_NODE_ANNOTATION.0], KWOK_NODE_ANNOTATION.1);
        assert_eq!(node.metadata.labels.unwrap()["a"], "b");
        let status = node.status.unwrap();
        assert_eq!(status.allocatable.unwrap()["nvidia.com/gpu"].0, "8");
        assert_eq!(status.capacity.unwrap()["nvidia.com/gpu"].0, "8");
    }
}
