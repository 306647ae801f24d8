//! The components a test adds to the env, once each: kube-controller-manager,
//! the stock kube-scheduler and kwok.

use crate::feature_gates::workload_flags;
use crate::{
    KWOK_NODE_ANNOTATION, START_TIMEOUT, StartError, TestEnv, binaries, free_ports, kwok_stages,
    process,
};
use std::future::Future;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::OnceCell;

impl TestEnv {
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
    pub(crate) fn serving_args(&self, kubeconfig: &Path, port: u16) -> [String; 6] {
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
        cell: &OnceCell<Result<(), StartError>>,
        name: &'static str,
        start: F,
    ) -> &'a Self
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let result = cell
            .get_or_init(|| async {
                start().await.map_err(|cause| {
                    process::PANICKED.store(true, Ordering::SeqCst);
                    StartError::Component {
                        component: name,
                        cause,
                        logs: self.dir.clone(),
                    }
                })
            })
            .await;
        if let Err(e) = result {
            panic!("gputopo-testenv: {e}");
        }
        self
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
}
