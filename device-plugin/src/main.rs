//! `gputopo-device-plugin`: the kubelet device plugin for `nvidia.com/gpu`
//! that hands a pod the GPUs gputopo chose (docs/device-plugin.md).

use anyhow::{Context, Result};
use clap::{ArgGroup, Parser, Subcommand};
use gputopo_agent::discover::{NvmlPaths, Source, build, gather};
use gputopo_device_plugin::allocate::DeviceListStrategy;
use gputopo_device_plugin::choose::Inventory;
use gputopo_device_plugin::health::{AlwaysHealthy, HealthProbe, NvmlHealth};
use gputopo_device_plugin::metrics::Metrics;
use gputopo_device_plugin::plugin::{PluginConfig, run};
use gputopo_device_plugin::pods::PodWatch;
use gputopo_ops::daemon::{self, ListenArgs, ListenFlag, LogArgs, OpsServer};
use gputopo_ops::man::{self, ManArgs};
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
// `man` needs none of the daemon's required flags, and takes no others.
#[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<PluginCommand>,
    /// Ask the NVIDIA driver through NVML (on a GPU node).
    #[arg(long, env = "GPUTOPO_NVML")]
    nvml: bool,
    /// A recording made by `gputopo-agent record` (dry runs: every GPU healthy).
    #[arg(long, value_name = "FILE", env = "GPUTOPO_FIXTURE")]
    fixture: Option<PathBuf>,
    #[command(flatten)]
    nvml_paths: NvmlPaths,
    /// This node's name, from the downward API (`spec.nodeName`).
    // An Option only so that `man` parses without it: clap requires it otherwise.
    #[arg(long, env = "GPUTOPO_NODE_NAME", required = true)]
    node: Option<String>,
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
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Print this binary's manual page (or write it into --out DIR).
    Man(ManArgs),
}

/// The device plugin's `--listen`.
struct PluginListen;

impl ListenFlag for PluginListen {
    const ENV: &'static str = "GPUTOPO_LISTEN";
    const DEFAULT: &'static str = "0.0.0.0:8082";
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(PluginCommand::Man(args)) = &cli.command {
        use clap::CommandFactory;
        return match man::run(Cli::command(), args) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gputopo-device-plugin man: {e}");
                ExitCode::FAILURE
            }
        };
    }
    daemon::init_logging("info", cli.log.log_format);
    match run_plugin(cli) {
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
    let node = cli.node.context("--node (GPUTOPO_NODE_NAME) is required")?;
    let (facts, _) = gather(&source).context("discovering this node's GPUs")?;
    let spec = build(&node, facts)
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
        let pods = Arc::new(PodWatch::start(client, &node));
        let shutdown = daemon::shutdown_signal()?;
        Ok(run(config, inventory, pods, probe, metrics, readiness, shutdown).await?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use gputopo_ops::daemon::LogFormat;

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
        "GPUTOPO_LOG_FORMAT",
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

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("gputopo-device-plugin").chain(args.iter().copied()))
    }

    #[test]
    fn log_format_takes_its_flag_and_its_environment_twin() {
        let daemon = ["--fixture", "f.yaml", "--node", "n"];
        let cli = parse(&[&daemon[..], &["--log-format", "json"]].concat()).expect("json");
        assert_eq!(cli.log.log_format, LogFormat::Json);
        let cli = parse(&[&daemon[..], &["--log-format", "text"]].concat()).expect("text");
        assert_eq!(cli.log.log_format, LogFormat::Text);
        assert!(parse(&[&daemon[..], &["--log-format", "xml"]].concat()).is_err());
        let cmd = Cli::command();
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some("log-format"))
            .expect("--log-format");
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some("GPUTOPO_LOG_FORMAT")
        );
    }

    #[test]
    fn man_needs_none_of_the_daemons_flags_and_the_daemon_still_needs_them() {
        let cli = parse(&["man"]).expect("man alone");
        assert!(matches!(cli.command, Some(PluginCommand::Man(_))));
        assert!(
            parse(&["--fixture", "f.yaml"]).is_err(),
            "--node is required"
        );
        assert!(parse(&["--node", "n"]).is_err(), "a source is required");
        assert!(parse(&["--fixture", "f.yaml", "--node", "n", "man"]).is_err());
        let cli = parse(&["--fixture", "f.yaml", "--node", "n"]).expect("the daemon");
        assert_eq!(cli.node.as_deref(), Some("n"));
        assert!(cli.command.is_none());
    }

    #[test]
    fn the_manual_lists_every_flag() {
        let pages = man::pages(Cli::command());
        let names: Vec<&str> = pages.iter().map(|p| p.file_name.as_str()).collect();
        assert_eq!(
            names,
            ["gputopo-device-plugin.1", "gputopo-device-plugin-man.1"]
        );
        for arg in Cli::command().get_arguments() {
            if let Some(long) = arg.get_long() {
                let flag = format!("\\-\\-{}", long.replace('-', "\\-"));
                assert!(pages[0].roff.contains(&flag), "no {flag}");
            }
            if let Some(env) = arg.get_env().and_then(|e| e.to_str()) {
                assert!(pages[0].roff.contains(env), "no {env}");
            }
        }
    }
}
