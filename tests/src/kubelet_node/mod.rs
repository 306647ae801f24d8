//! A real kubelet node beside kwok's fake ones: the upstream kubelet (built
//! by `scripts/control-plane-binaries` with the control plane) on a
//! containerd of its own, registered with the [`TestEnv`]'s kube-apiserver.
//! Pods bound to it really run (runc containers from locally built images),
//! and its gRPC APIs are the kubelet's own: device plugin `Registration` on
//! [`KubeletNode::registration_socket`] and PodResources on
//! [`KubeletNode::pod_resources_socket`].
//!
//! ```no_run
//! # async fn t() {
//! let env = gputopo_testenv::TestEnv::shared().await;
//! let node = gputopo_testenv::kubelet_node::KubeletNode::start(env).await.unwrap();
//! // bind pods with spec.nodeName = node.name(), image BUSYBOX_IMAGE, hostNetwork: true
//! # }
//! ```
//!
//! Isolation: containerd, its shims and containers, and the kubelet run in
//! a mount and PID namespace of their own (`unshare`, entered by the kubelet
//! with `nsenter`). Every mount they make stays in it and every process dies
//! with it: killing the namespace's first process ends them all, and it dies
//! with the test process (parent-death signal, then `unshare --kill-child`).
//! In it, tmpfs hides the host's `/run`, `/var/lib` and `/var/log`, and the
//! node's temp dir is bind-mounted on `/var/lib/kubelet/device-plugins`,
//! the one path the kubelet hard-codes (no flag moves it). The cgroup tree
//! (`cgroupRoot`, named after the temp dir: cgroups are not namespaced) is
//! removed on drop; one left by a killed test process is removed by the next
//! node to start, once its temp dir is gone.
//!
//! Needs, beyond the kubelet: root, `containerd`, `runc`, `ctr`,
//! containernetworking-plugins' `loopback`, a static `busybox`, `unshare` and
//! `nsenter` (Debian 12: `apt-get install containerd runc
//! containernetworking-plugins busybox-static`; `scripts/test` does it).
//! Pods must use `hostNetwork: true` (the CNI network is loopback only) and
//! `automountServiceAccountToken: false` (no token controller runs).

mod cgroups;
pub mod config;
mod error;
mod host;

use crate::process::{self, Process};
use crate::{START_TIMEOUT, TestEnv, free_ports};
use config::{BUSYBOX_IMAGE, KubeletSettings, PAUSE_IMAGE};
use error::{Result, harness, io};
use host::{Tools, overlayfs_supported, plain_get_ok, run};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use error::KubeletNodeError;

/// Whether `name` may name a node here: a DNS label (so a Node name) short
/// enough to leave room for the cgroup prefix.
pub fn valid_node_name(name: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    (1..=50).contains(&name.len())
        && name.chars().all(ok_char)
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A running kubelet node; everything it started is killed, and its mounts,
/// cgroups and files removed, when it is dropped.
pub struct KubeletNode {
    name: String,
    dir: PathBuf,
    nodes: Api<Node>,
    tools: Tools,
    /// `unshare` and the namespace's processes: containerd, shims, containers.
    runtime: Option<Process>,
    kubelet: Option<Process>,
    kubelet_args: Vec<String>,
    healthz_port: u16,
    cgroups: Vec<PathBuf>,
}

/// The prefix of a node's temp dir name, which is also its cgroup's name.
const CGROUP_PREFIX: &str = "gputopo-node-";

/// The namespace's first process: hides host state, then runs containerd
/// (in the background, so that a shell stays PID 1 and reaps orphans).
const NAMESPACE_INIT: &str = r#"set -eu
dir=$1
mount -t tmpfs gputopo-run /run
mount -t tmpfs gputopo-var-lib /var/lib
mount -t tmpfs gputopo-var-log /var/log
mkdir -p /var/lib/kubelet/device-plugins
mount --bind "$dir/device-plugins" /var/lib/kubelet/device-plugins
containerd --config "$dir/containerd.toml" &
wait $!
"#;

impl KubeletNode {
    /// Starts a node named `env.unique_name("kubelet")` and waits until it is Ready.
    pub async fn start(env: &TestEnv) -> Result<KubeletNode> {
        KubeletNode::start_named(env, &env.unique_name("kubelet")).await
    }

    /// Starts a node called `name` (see [`valid_node_name`]) and waits until it is Ready.
    pub async fn start_named(env: &TestEnv, name: &str) -> Result<KubeletNode> {
        if !valid_node_name(name) {
            return Err(KubeletNodeError::BadName {
                name: name.to_owned(),
            });
        }
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        if uid != 0 {
            return Err(KubeletNodeError::NotRoot { uid });
        }
        let tools = Tools::find()?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{CGROUP_PREFIX}{name}-"))
            .tempdir()
            .map_err(io("making the node's temp dir"))?
            .keep();
        let mut node = KubeletNode {
            name: name.to_owned(),
            nodes: Api::all(env.client().await),
            tools,
            runtime: None,
            kubelet: None,
            kubelet_args: Vec::new(),
            healthz_port: 0,
            cgroups: Vec::new(),
            dir,
        };
        // From here on an error drops `node`, which undoes what was done.
        match node.bring_up(env).await {
            Ok(()) => Ok(node),
            Err(e) => {
                process::PANICKED.store(true, std::sync::atomic::Ordering::SeqCst);
                Err(e)
            }
        }
    }

    async fn bring_up(&mut self, env: &TestEnv) -> Result<()> {
        let dir = self.dir.clone();
        for sub in ["device-plugins", "cni", "pod-logs", "root", "pki"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(io(format!("making {sub}/")))?;
        }
        std::fs::write(dir.join("cni/10-loopback.conflist"), config::CNI_CONFLIST)
            .map_err(io("writing the CNI configuration"))?;
        let snapshotter = if overlayfs_supported() {
            "overlayfs"
        } else {
            "native"
        };
        std::fs::write(
            dir.join("containerd.toml"),
            config::containerd_toml(&dir, snapshotter),
        )
        .map_err(io("writing containerd.toml"))?;
        // Named after the temp dir, so unique on the machine (test processes
        // side by side each have a node "kubelet-0").
        let cgroup = self.cgroup_root();
        cgroups::remove_stale(CGROUP_PREFIX);
        self.cgroups = cgroups::create(&cgroup).map_err(io("making the node's cgroups"))?;

        self.start_runtime()?;
        self.wait_for("containerd to answer", Duration::from_secs(60), |node| {
            node.ctr(&["version"]).map(drop)
        })
        .await?;
        let images = dir.join("images.tar");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("kubelet-node/build-image");
        run(std::process::Command::new(&script).args([
            self.tools.busybox.as_os_str(),
            images.as_os_str(),
            PAUSE_IMAGE.as_ref(),
            BUSYBOX_IMAGE.as_ref(),
        ]))?;
        self.ctr(&["images", "import", &images.display().to_string()])?;

        let kubeconfig = env
            .kubeconfig_for_user(&format!("system:node:{}", self.name), &["system:nodes"])
            .map_err(harness("writing the node's kubeconfig"))?;
        let [port, healthz_port] = free_ports().map_err(harness("choosing kubelet ports"))?;
        self.healthz_port = healthz_port;
        let settings = KubeletSettings {
            dir: &dir,
            cgroup_root: &format!("/{cgroup}"),
            port,
            healthz_port,
        };
        let config_file = dir.join("kubelet-config.yaml");
        let json = serde_json::to_string_pretty(&config::kubelet_config(&settings))
            .map_err(|e| harness("writing the kubelet configuration")(e.into()))?;
        std::fs::write(&config_file, json).map_err(io("writing kubelet-config.yaml"))?;
        self.kubelet_args = vec![
            format!("--config={}", config_file.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--root-dir={}", dir.join("root").display()),
            format!("--cert-dir={}", dir.join("pki").display()),
            format!("--hostname-override={}", self.name),
            "--v=1".to_owned(),
        ];
        self.start_kubelet().await?;
        self.wait_ready().await
    }

    /// `unshare` making the namespace; its first process runs [`NAMESPACE_INIT`].
    fn start_runtime(&mut self) -> Result<()> {
        let args: Vec<String> = [
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            NAMESPACE_INIT,
            "gputopo-kubelet-node-init",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([self.dir.display().to_string()])
        .collect();
        let log = self.dir.join("containerd.log");
        let process = Process::spawn("containerd", &self.tools.unshare, &args, &[], log)
            .map_err(harness("starting containerd in a namespace of its own"))?;
        self.runtime = Some(process);
        Ok(())
    }

    fn ctr(&self, args: &[&str]) -> Result<String> {
        let socket = self.dir.join("containerd.sock");
        run(std::process::Command::new(&self.tools.ctr)
            .arg(format!("--address={}", socket.display()))
            .arg("--namespace=k8s.io")
            .args(args))
    }

    /// Starts the kubelet (after [`KubeletNode::stop_kubelet`]) and waits
    /// until it serves `/healthz` and its device plugin registration socket.
    pub async fn start_kubelet(&mut self) -> Result<()> {
        if self.kubelet.is_some() {
            return Ok(());
        }
        let runtime_pid = match &self.runtime {
            Some(p) => p.pid(),
            None => return Err(KubeletNodeError::Exited("the node was stopped".into())),
        };
        // A fresh socket is the sign that this kubelet's device manager serves.
        let _ = std::fs::remove_file(self.registration_socket());
        let mut args = vec![
            format!("--mount=/proc/{runtime_pid}/ns/mnt"),
            format!("--pid=/proc/{runtime_pid}/ns/pid_for_children"),
            "--".to_owned(),
            self.tools.kubelet.display().to_string(),
        ];
        args.extend(self.kubelet_args.iter().cloned());
        let log = self.dir.join("kubelet.log");
        let process = Process::spawn("kubelet", &self.tools.nsenter, &args, &[], log)
            .map_err(harness("starting the kubelet"))?;
        self.kubelet = Some(process);
        self.wait_for("the kubelet to serve", START_TIMEOUT, |node| {
            plain_get_ok(node.healthz_port, "/healthz")?;
            if !node.registration_socket().exists() {
                return Err(KubeletNodeError::NotYet(format!(
                    "no {} yet",
                    node.registration_socket().display()
                )));
            }
            Ok(())
        })
        .await
    }

    /// Kills the kubelet (containerd and the pods keep running), as a
    /// crash or an upgrade would.
    pub fn stop_kubelet(&mut self) {
        self.kubelet = None;
    }

    /// [`KubeletNode::stop_kubelet`], then [`KubeletNode::start_kubelet`].
    pub async fn restart_kubelet(&mut self) -> Result<()> {
        self.stop_kubelet();
        self.start_kubelet().await
    }

    /// Waits until the Node object says Ready.
    pub async fn wait_ready(&mut self) -> Result<()> {
        self.wait_for_async(
            "the node to be Ready",
            START_TIMEOUT,
            |nodes, name| async move {
                let node = nodes
                    .get_opt(&name)
                    .await
                    .map_err(|e| harness("reading the Node")(e.into()))?;
                let ready = node
                    .as_ref()
                    .and_then(|n| n.status.as_ref()?.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                    .map(|c| {
                        format!(
                            "Ready={} ({})",
                            c.status,
                            c.message.clone().unwrap_or_default()
                        )
                    });
                match ready {
                    Some(r) if r.starts_with("Ready=True") => Ok(()),
                    Some(r) => Err(KubeletNodeError::NotYet(r)),
                    None => Err(KubeletNodeError::NotYet("no Ready condition yet".into())),
                }
            },
        )
        .await
    }

    async fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Self) -> Result<()>,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            let last = match check(self) {
                Ok(()) => return Ok(()),
                Err(e) => e.to_string(),
            };
            self.check_running()?;
            if start.elapsed() > timeout {
                return Err(self.timeout(what, timeout, last));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn wait_for_async<F, Fut>(
        &mut self,
        what: &str,
        timeout: Duration,
        check: F,
    ) -> Result<()>
    where
        F: Fn(Api<Node>, String) -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        let start = Instant::now();
        loop {
            let last = match check(self.nodes.clone(), self.name.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) => e.to_string(),
            };
            self.check_running()?;
            if start.elapsed() > timeout {
                return Err(self.timeout(what, timeout, last));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn timeout(&self, what: &str, timeout: Duration, last: String) -> KubeletNodeError {
        KubeletNodeError::Timeout {
            what: what.to_owned(),
            timeout,
            last,
            dir: self.dir.clone(),
            tails: self.log_tails(30),
        }
    }

    /// `Err` naming the process and its log's tail when containerd or the kubelet has exited.
    pub fn check_running(&mut self) -> Result<()> {
        for p in [self.runtime.as_mut(), self.kubelet.as_mut()]
            .into_iter()
            .flatten()
        {
            p.check_running()
                .map_err(|e| KubeletNodeError::Exited(format!("{e:#}")))?;
        }
        Ok(())
    }

    /// The last `lines` lines of containerd's and the kubelet's logs.
    pub fn log_tails(&self, lines: usize) -> String {
        ["containerd.log", "kubelet.log"]
            .iter()
            .map(|f| format!("== {f}\n{}", process::tail(&self.dir.join(f), lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's temp dir (logs, configuration, the kubelet's root dir).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The node's `cgroupRoot` (one path element, in every hierarchy).
    pub fn cgroup_root(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The kubelet's device plugin directory (what it sees as
    /// `/var/lib/kubelet/device-plugins/`): plugins serve their sockets here.
    pub fn device_plugin_dir(&self) -> PathBuf {
        self.dir.join("device-plugins")
    }

    /// The kubelet's device plugin `Registration` socket.
    pub fn registration_socket(&self) -> PathBuf {
        self.device_plugin_dir().join("kubelet.sock")
    }

    /// The kubelet's PodResources socket.
    pub fn pod_resources_socket(&self) -> PathBuf {
        self.dir.join("root/pod-resources/kubelet.sock")
    }

    /// Stops everything and removes what the node left; the same as dropping it.
    pub fn stop(self) {}
}

impl Drop for KubeletNode {
    fn drop(&mut self) {
        // The kubelet first, so that it does not see its runtime vanish;
        // killing the namespace's first process ends containerd, the shims
        // and the containers, and unmounts everything they mounted.
        self.kubelet = None;
        self.runtime = None;
        let left = cgroups::remove(&self.cgroups, Duration::from_secs(30));
        if !left.is_empty() {
            eprintln!(
                "gputopo-testenv: kubelet node {}: cgroups left behind: {left:?}",
                self.name
            );
        }
        if process::keep_logs() {
            eprintln!(
                "gputopo-testenv: kubelet node {} logs kept in {}",
                self.name,
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
