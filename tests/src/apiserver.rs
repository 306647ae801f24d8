//! etcd and kube-apiserver, the part of the control plane every env has:
//! started with the env, and stopped and started again for outage tests.

use crate::audit::AUDIT_POLICY;
use crate::clients::write_kubeconfig;
use crate::feature_gates::workload_flags;
use crate::spawn::free_ports;
use crate::{ADMIN_USER, START_TIMEOUT, TestEnv, process, process_list};
use crate::{binaries, install_crd, pki::Pki};
use anyhow::Context as _;
use gputopo_api::GpuTopology;
use kube::CustomResourceExt as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::OnceCell;

impl TestEnv {
    pub(crate) async fn start_inner(shared: bool) -> anyhow::Result<TestEnv> {
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
