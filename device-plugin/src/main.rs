//! `gputopo-device-plugin`: the kubelet device plugin for `nvidia.com/gpu`
//! that hands a pod the GPUs gputopo chose (docs/device-plugin.md).

use anyhow::{Context, Result};
use clap::{ArgGroup, Parser};
use gputopo_agent::discover::{NvmlPaths, Source, build, gather};
use gputopo_device_plugin::allocate::DeviceListStrategy;
use gputopo_device_plugin::choose::Inventory;
use gputopo_device_plugin::health::{AlwaysHealthy, HealthProbe, NvmlHealth};
use gputopo_device_plugin::metrics::Metrics;
use gputopo_device_plugin::plugin::{PluginConfig, run};
use gputopo_device_plugin::pods::PodWatch;
use gputopo_ops::daemon::{self, ListenArgs, ListenFlag, OpsServer};
use gputopo_ops::{Readiness, router};
use gputopo_topology::discover::Source as SavedSource;
use std::collections::BTreeSet;
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
    #[command(flatten)]
    nvml_paths: NvmlPaths,
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
    #[command(flatten)]
    ops: ListenArgs<PluginListen>,
}

/// The device plugin's `--listen`.
struct PluginListen;

impl ListenFlag for PluginListen {
    const ENV: &'static str = "GPUTOPO_LISTEN";
    const DEFAULT: &'static str = "0.0.0.0:8082";
}

fn main() -> ExitCode {
    daemon::init_logging("info", false);
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
        None => cli.nvml_paths.source(),
    };
    let (facts, _) = gather(&source).context("discovering this node's GPUs")?;
    let spec = build(&cli.node, facts)
        .context("reading this node's GPUs")?
        .spec;
    let inventory = Arc::new(Inventory::from_spec(&spec).context("advertising this node's GPUs")?);
    let probe: Arc<dyn HealthProbe> = if cli.fixture.is_some() {
        Arc::new(AlwaysHealthy)
    } else {
        Arc::new(NvmlHealth::init(cli.nvml_paths.nvml_library.as_deref())?)
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
    let runtime = daemon::runtime(Some(2))?;
    runtime.block_on(async move {
        let client = daemon::kube_client().await?;
        let metrics = Arc::new(Metrics::new());
        let readiness = Arc::new(Readiness::new("not registered with the kubelet yet"));
        let _ops =
            OpsServer::start(cli.ops.listen, router(metrics.clone(), readiness.clone())).await?;
        let pods = Arc::new(PodWatch::start(client, &cli.node));
        let shutdown = daemon::shutdown_signal()?;
        Ok(run(config, inventory, pods, probe, metrics, readiness, shutdown).await?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every environment variable the device plugin's flags have ever read:
    /// the Helm chart, the plain manifests and docs set them.
    const ACCEPTED: &[&str] = &[
        "GPUTOPO_DEVICE_LIST_STRATEGY",
        "GPUTOPO_DEVICE_PLUGIN_DIR",
        "GPUTOPO_FIXTURE",
        "GPUTOPO_HEALTH_INTERVAL",
        "GPUTOPO_KUBELET_POLL",
        "GPUTOPO_KUBELET_TIMEOUT",
        "GPUTOPO_LISTEN",
        "GPUTOPO_NODE_NAME",
        "GPUTOPO_NVML",
        "GPUTOPO_NVML_LIBRARY",
        "GPUTOPO_SOCKET_NAME",
        "GPUTOPO_SYSFS_ROOT",
    ];

    #[test]
    fn every_documented_environment_variable_is_still_accepted() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let manifests = [
            "helm/gputopo/templates/device-plugin-daemonset.yaml",
            "daemonset/device-plugin/device-plugin.yaml",
        ];
        let drift = daemon::env_var_drift(&Cli::command(), ACCEPTED, &repo, &manifests);
        assert!(drift.is_empty(), "{drift:#?}");
    }
}
