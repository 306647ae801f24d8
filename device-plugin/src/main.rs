//! `gputopo-device-plugin`: the kubelet device plugin for `nvidia.com/gpu`
//! that hands a pod the GPUs gputopo chose (docs/device-plugin.md).

use anyhow::{Context, Result};
use clap::{ArgGroup, Parser};
use gputopo_agent::discover::{Source, build, gather};
use gputopo_device_plugin::allocate::DeviceListStrategy;
use gputopo_device_plugin::choose::Inventory;
use gputopo_device_plugin::health::{AlwaysHealthy, HealthProbe, NvmlHealth};
use gputopo_device_plugin::metrics::Metrics;
use gputopo_device_plugin::plugin::{PluginConfig, run};
use gputopo_device_plugin::pods::PodWatch;
use gputopo_ops::{Readiness, router};
use gputopo_topology::discover::Source as SavedSource;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "gputopo-device-plugin",
    version,
    about = "Kubelet device plugin for nvidia.com/gpu that hands each pod the GPUs gputopo chose for it"
)]
#[command(group(ArgGroup::new("source").required(true).args(["nvml", "fixture"])))]
struct Cli {
    /// Ask the NVIDIA driver through NVML (on a GPU node).
    #[arg(long, env = "GPUTOPO_NVML")]
    nvml: bool,
    /// A recording made by `gputopo-agent record` (dry runs: every GPU healthy).
    #[arg(long, value_name = "FILE", env = "GPUTOPO_FIXTURE")]
    fixture: Option<PathBuf>,
    /// Path of libnvidia-ml.so.1 when it is not on the loader path.
    #[arg(long, env = "GPUTOPO_NVML_LIBRARY", value_name = "FILE")]
    nvml_library: Option<PathBuf>,
    /// Where sysfs is mounted.
    #[arg(long, env = "GPUTOPO_SYSFS_ROOT", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// This node's name, from the downward API (`spec.nodeName`).
    #[arg(long, env = "GPUTOPO_NODE_NAME")]
    node: String,
    /// The kubelet's device-plugin directory (its kubelet.sock and the plugin's socket).
    #[arg(
        long,
        env = "GPUTOPO_DEVICE_PLUGIN_DIR",
        default_value = gputopo_kubelet_api::deviceplugin::DEVICE_PLUGIN_PATH
    )]
    device_plugin_dir: PathBuf,
    /// The plugin's socket file name in that directory.
    #[arg(
        long,
        env = "GPUTOPO_SOCKET_NAME",
        default_value = "gputopo-nvidia-gpu.sock"
    )]
    socket_name: String,
    /// How the container runtime is told the GPUs, comma-separated: envvar
    /// (NVIDIA_VISIBLE_DEVICES), cdi-cri (CDI names nvidia.com/gpu=<uuid>).
    #[arg(
        long,
        env = "GPUTOPO_DEVICE_LIST_STRATEGY",
        default_value = "envvar",
        value_delimiter = ','
    )]
    device_list_strategy: Vec<DeviceListStrategy>,
    /// How often NVML is asked which GPUs are lost.
    #[arg(long, env = "GPUTOPO_HEALTH_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    health_interval: Duration,
    /// How often the kubelet's socket is checked for a restart.
    #[arg(long, env = "GPUTOPO_KUBELET_POLL", default_value = "1s", value_parser = humantime::parse_duration)]
    kubelet_poll: Duration,
    /// Bound on connecting to and calling the kubelet.
    #[arg(long, env = "GPUTOPO_KUBELET_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    kubelet_timeout: Duration,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "GPUTOPO_LISTEN", default_value = "0.0.0.0:8082")]
    listen: SocketAddr,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run_plugin(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_plugin(cli: Cli) -> Result<()> {
    let source = match &cli.fixture {
        Some(path) => Source::Saved(SavedSource::Fixture(path.clone())),
        None => Source::Nvml {
            library: cli.nvml_library.clone(),
            sysfs_root: cli.sysfs_root.clone(),
        },
    };
    let (facts, _) = gather(&source).context("discovering this node's GPUs")?;
    let spec = build(&cli.node, facts)
        .context("reading this node's GPUs")?
        .spec;
    let inventory = Arc::new(Inventory::from_spec(&spec).context("advertising this node's GPUs")?);
    let probe: Arc<dyn HealthProbe> = if cli.fixture.is_some() {
        Arc::new(AlwaysHealthy)
    } else {
        Arc::new(NvmlHealth::init(cli.nvml_library.as_deref())?)
    };
    let config = PluginConfig {
        dir: cli.device_plugin_dir,
        socket_name: cli.socket_name,
        resource: gputopo_api::keys::RESOURCE_GPU.to_string(),
        strategies: cli
            .device_list_strategy
            .into_iter()
            .collect::<BTreeSet<_>>(),
        health_interval: cli.health_interval,
        kubelet_poll: cli.kubelet_poll,
        kubelet_timeout: cli.kubelet_timeout,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let client = kube::Client::try_default().await.context(
            "no Kubernetes client configuration (in-cluster service account or KUBECONFIG)",
        )?;
        let metrics = Arc::new(Metrics::new());
        let readiness = Arc::new(Readiness::new("not registered with the kubelet yet"));
        let listener = tokio::net::TcpListener::bind(cli.listen)
            .await
            .with_context(|| format!("listening on {}", cli.listen))?;
        let app = router(metrics.clone(), readiness.clone());
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let claims = Arc::new(PodWatch::start(client, &cli.node));
        let shutdown = async {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                },
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch for SIGTERM; stopping on Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        let result = run(
            config, inventory, claims, probe, metrics, readiness, shutdown,
        )
        .await;
        server.abort();
        Ok(result?)
    })
}
