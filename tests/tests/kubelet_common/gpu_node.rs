//! gputopo's own processes beside a real kubelet, as on a GPU node with no
//! GPU: `gputopo-device-plugin` and `gputopo-agent` replaying one NVML
//! recording (the same UUIDs), the plugin on the kubelet's device-plugin
//! directory and the agent on its PodResources socket; and
//! `gputopo-scheduler`. The binaries are this workspace's, found beside the
//! test binary (`cargo build -p gputopo-device-plugin -p gputopo-agent
//! -p gputopo-scheduler` first; `cargo test --workspace` builds them).

use gputopo_api::GpuTopologySpec;
use gputopo_testenv::TestEnv;
use gputopo_testenv::binaries::workspace_binary;
use gputopo_testenv::kubelet_node::KubeletNode;
use gputopo_testenv::process::{Process, tail};
use gputopo_topology::discover::{Source, build, gather};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// A recording under `fixtures/recorded/`.
pub fn recording(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/recorded")
        .join(name)
}

/// The topology a recording describes, as the plugin and the agent read it.
pub fn spec_of(recording: &Path, node: &str) -> GpuTopologySpec {
    let (facts, _) = gather(&Source::Fixture(recording.to_path_buf()))
        .unwrap_or_else(|e| panic!("reading {}: {e}", recording.display()));
    build(node, facts).expect("a topology").spec
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One of gputopo's processes and the loopback port of its `/metrics`.
pub struct Daemon {
    pub process: Process,
    pub port: u16,
}

impl Daemon {
    fn start(
        env: &TestEnv,
        dir: &Path,
        name: &str,
        package: &str,
        args: Vec<String>,
        port: u16,
    ) -> Daemon {
        let vars: [(&str, &OsStr); 2] = [
            ("KUBECONFIG", env.kubeconfig_path().as_os_str()),
            ("RUST_LOG", OsStr::new("info,gputopo_scheduler=debug")),
        ];
        let process = Process::spawn(
            name,
            &workspace_binary(name, package),
            &args,
            &vars,
            dir.join(format!("{name}.log")),
        )
        .unwrap_or_else(|e| panic!("starting {name}: {e:#}"));
        Daemon { process, port }
    }

    /// `path` on its port: (status, body).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        gputopo_testenv::loopback::get(self.port, path).await
    }

    /// The value of the sample `series` (name and labels, as printed) in `/metrics`.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics").await?;
        body.lines().find_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            value.trim().parse().ok()
        })
    }

    pub fn log(&self) -> String {
        tail(&self.process.log, 40)
    }
}

/// The device plugin, the agent and the scheduler of one kubelet node.
pub struct GpuStack {
    pub plugin: Daemon,
    pub agent: Daemon,
    pub scheduler: Daemon,
    /// The `spec.schedulerName` the scheduler serves.
    pub scheduler_name: String,
    /// What the recording describes: GPU indices, UUIDs, wiring.
    pub spec: GpuTopologySpec,
}

impl GpuStack {
    /// Starts the three on `node`, all replaying `recording`; logs go to `dir`.
    pub fn start(env: &TestEnv, node: &KubeletNode, recording: &Path, dir: &Path) -> GpuStack {
        let name = node.name().to_owned();
        let fixture = recording.display().to_string();
        let listen = |port: u16| format!("127.0.0.1:{port}");
        let port = free_port();
        let plugin = Daemon::start(
            env,
            dir,
            "gputopo-device-plugin",
            "gputopo-device-plugin",
            vec![
                format!("--fixture={fixture}"),
                format!("--node={name}"),
                format!("--device-plugin-dir={}", node.device_plugin_dir().display()),
                "--device-list-strategy=envvar".into(),
                // Notice the kubelet's restart quickly.
                "--kubelet-poll=200ms".into(),
                format!("--listen={}", listen(port)),
            ],
            port,
        );
        let port = free_port();
        let agent = Daemon::start(
            env,
            dir,
            "gputopo-agent",
            "gputopo-agent",
            vec![
                "run".into(),
                format!("--fixture={fixture}"),
                format!("--node={name}"),
                "--rescan-interval=1s".into(),
                "--max-backoff=2s".into(),
                format!(
                    "--pod-resources-socket={}",
                    node.pod_resources_socket().display()
                ),
                format!("--listen={}", listen(port)),
            ],
            port,
        );
        let scheduler_name = env.unique_name("gputopo");
        let config = dir.join("scheduler.yaml");
        std::fs::write(
            &config,
            "backoff: {initial: 200ms, max: 2s, unschedulableTimeout: 10s}\n",
        )
        .expect("writing the scheduler's config");
        let port = free_port();
        let scheduler = Daemon::start(
            env,
            dir,
            "gputopo-scheduler",
            "gputopo-scheduler",
            vec![
                "run".into(),
                format!("--scheduler-name={scheduler_name}"),
                format!("--config={}", config.display()),
                format!("--listen={}", listen(port)),
                // One replica: no lease to wait for.
                "--leader-elect=false".into(),
            ],
            port,
        );
        GpuStack {
            plugin,
            agent,
            scheduler,
            scheduler_name,
            spec: spec_of(recording, &name),
        }
    }

    /// `Err` naming the first of the three that has exited, with its log.
    pub fn check_running(&mut self) -> Result<(), String> {
        for d in [&mut self.plugin, &mut self.agent, &mut self.scheduler] {
            d.process.check_running().map_err(|e| format!("{e:#}"))?;
        }
        Ok(())
    }

    /// The three logs' tails, for a failure message.
    pub fn logs(&self) -> String {
        [&self.plugin, &self.agent, &self.scheduler]
            .iter()
            .map(|d| format!("== {}\n{}", d.process.name, d.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The UUID of GPU `index` in the recording.
    pub fn uuid(&self, index: u32) -> String {
        self.spec
            .gpus
            .iter()
            .find(|g| g.index == index)
            .and_then(|g| g.uuid.clone())
            .unwrap_or_else(|| panic!("the recording has no GPU {index} with a UUID"))
    }

    /// The index of the GPU with `uuid` in the recording.
    pub fn index(&self, uuid: &str) -> u32 {
        self.spec
            .gpus
            .iter()
            .find(|g| g.uuid.as_deref() == Some(uuid))
            .unwrap_or_else(|| panic!("{uuid} is no GPU of the recording"))
            .index
    }
}
