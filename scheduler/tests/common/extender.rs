//! The extender mode's test harness: `gputopo-scheduler extender` as its
//! own process over TLS, with a CA of its own, and the stanza a
//! KubeSchedulerConfiguration names it by.

use gputopo_testenv::loopback::{TlsClient, request};
use gputopo_testenv::pki::{CertFiles, Pki};
use gputopo_testenv::process::{Process, tail};
use gputopo_testenv::{SchedulerProcess, TestEnv};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The shared control plane with the controller manager (it lifts the
/// not-ready taint off new nodes) and kwok.
pub async fn env() -> &'static TestEnv {
    let env = TestEnv::shared().await;
    env.with_controller_manager().await;
    env.with_kwok().await;
    env
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The largest /filter body the test's extenders take.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// A running `gputopo-scheduler extender`; killed on drop.
pub struct ExtenderProcess {
    pub process: Process,
    /// /healthz, /readyz, /metrics.
    pub port: u16,
    /// /filter, /prioritize, /bind, over TLS.
    pub extender_port: u16,
    /// The extender's own CA: it signed the serving certificate (for
    /// 127.0.0.1) and the client certificates the extender accepts.
    pub pki: Pki,
    /// kube-scheduler's client certificate.
    pub scheduler_cert: CertFiles,
    /// A client presenting it.
    pub client: TlsClient,
}

impl ExtenderProcess {
    /// Binds pods of `scheduler_name` only.
    pub async fn start(env: &TestEnv, scheduler_name: &str) -> ExtenderProcess {
        let (port, extender_port) = (free_port(), free_port());
        let dir = env.dir().join(format!("extender-{extender_port}"));
        std::fs::create_dir_all(&dir).expect("extender dir");
        let config = dir.join("config.yaml");
        std::fs::write(&config, "networkTiers: {preset: gputopo}\n").expect("writing the config");
        let pki = Pki::create(&dir.join("pki")).expect("the extender's CA");
        let scheduler_cert = pki
            .client("kube-scheduler", "kube-scheduler", &[])
            .expect("kube-scheduler's client certificate");
        let client =
            TlsClient::new(&pki.ca_files.cert, Some(&scheduler_cert)).expect("a TLS client");
        let path = |p: &std::path::Path| p.display().to_string();
        let args = vec![
            "extender".to_string(),
            "--config".into(),
            path(&config),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--extender-listen".into(),
            format!("127.0.0.1:{extender_port}"),
            "--tls-cert-file".into(),
            path(&pki.serving.cert),
            "--tls-key-file".into(),
            path(&pki.serving.key),
            "--client-ca-file".into(),
            path(&pki.ca_files.cert),
            "--scheduler-name".into(),
            scheduler_name.into(),
            "--max-request-bytes".into(),
            MAX_REQUEST_BYTES.to_string(),
        ];
        let vars: Vec<(&str, &std::ffi::OsStr)> = vec![
            ("KUBECONFIG", env.kubeconfig_path().as_os_str()),
            (
                "RUST_LOG",
                std::ffi::OsStr::new("info,gputopo_scheduler=debug"),
            ),
        ];
        let process = Process::spawn(
            "gputopo-extender",
            std::path::Path::new(env!("CARGO_BIN_EXE_gputopo-scheduler")),
            &args,
            &vars,
            dir.join("extender.log"),
        )
        .expect("starting gputopo-scheduler extender");
        let mut e = ExtenderProcess {
            process,
            port,
            extender_port,
            pki,
            scheduler_cert,
            client,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Err(err) = e.process.check_running() {
                panic!("{err}");
            }
            if let Some((200, _)) = request(port, "GET", "/readyz", "").await {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the extender is not ready after 60 s:\n{}",
                e.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        e
    }

    /// A POST with kube-scheduler's client certificate.
    pub async fn post(&self, path: &str, body: &str) -> (u16, String) {
        self.client
            .request(self.extender_port, "POST", path, body)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}; log:\n{}", self.log()))
    }

    /// The extender stanza of a KubeSchedulerConfiguration, as
    /// docs/extender.md shows it, over TLS with kube-scheduler's client certificate.
    pub fn stanza(&self) -> Value {
        json!({
            "urlPrefix": format!("https://127.0.0.1:{}", self.extender_port),
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "bindVerb": "bind",
            "weight": 5,
            "enableHTTPS": true,
            "tlsConfig": {
                "certFile": self.scheduler_cert.cert,
                "keyFile": self.scheduler_cert.key,
                "caFile": self.pki.ca_files.cert,
            },
            "nodeCacheCapable": true,
            "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": false}],
            "ignorable": false,
            "httpTimeout": "30s"
        })
    }

    pub fn log(&self) -> String {
        tail(&self.process.log, 60)
    }
}

/// A plain HTTP/1.1 request on 127.0.0.1: (status, body).
/// Polls until `check` returns `Some`, at most 90 s; the panic shows both logs.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    ext: &ExtenderProcess,
    ks: &SchedulerProcess,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within 90 s\nextender log:\n{}\nkube-scheduler log:\n{}",
            ext.log(),
            ks.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

impl ExtenderProcess {
    /// [`ExtenderProcess::stanza`] without `managedResources`: kube-scheduler
    /// then sends every pod of the profile, claim pods too (docs/extender.md,
    /// "Dynamic Resource Allocation in extender mode").
    pub fn stanza_for_every_pod(&self) -> Value {
        let mut stanza = self.stanza();
        stanza
            .as_object_mut()
            .expect("an object")
            .remove("managedResources");
        stanza
    }
}
