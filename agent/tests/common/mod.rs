//! What the agent's cluster tests share: the agent as its own process, as
//! on a node, and polling with a deadline.

// Each test crate uses a part of this.
#![allow(dead_code)]

pub mod kubelet;

use gputopo_testenv::{TestEnv, fake_gpu_node};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(rel)
}

/// A running agent process; killed when dropped.
pub struct Agent {
    pub child: Child,
    pub port: u16,
}

impl Agent {
    pub fn start(env: &TestEnv, node: &str, source: &[&str]) -> Agent {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_gputopo-agent"))
            .arg("run")
            .args(source)
            .args([
                "--node",
                node,
                "--rescan-interval",
                "1s",
                "--max-backoff",
                "2s",
            ])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("KUBECONFIG", env.kubeconfig_path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the agent starts");
        Agent { child, port }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "signalling the agent");
    }

    pub fn rescan(&self) {
        self.signal(libc::SIGHUP);
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("writes");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("reads");
        let code = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (code, out)
    }

    /// The `ok` scan count from /metrics.
    pub fn ok_scans(&self) -> u64 {
        self.metric("gputopo_agent_scans_total{result=\"ok\"}") as u64
    }

    /// The value of the /metrics sample `series` (name and labels), 0 when absent.
    pub fn metric(&self, series: &str) -> f64 {
        let (_, body) = self.get("/metrics");
        body.lines()
            .find(|l| l.split_whitespace().next() == Some(series))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after 30 s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn create_node(env: &TestEnv, prefix: &str, labels: &[(&str, &str)]) -> (String, Node) {
    let name = env.unique_name(prefix);
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let nodes: Api<Node> = Api::all(env.client().await);
    let node = nodes
        .create(&PostParams::default(), &fake_gpu_node(&name, 8, &labels))
        .await
        .expect("node created");
    (name, node)
}

pub async fn labels_of(env: &TestEnv, node: &str) -> BTreeMap<String, String> {
    let nodes: Api<Node> = Api::all(env.client().await);
    nodes
        .get(node)
        .await
        .expect("node")
        .metadata
        .labels
        .unwrap_or_default()
}
