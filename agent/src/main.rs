//! `gputopo-agent`: discovers how this node's GPUs are wired and prints or
//! publishes it (docs/contract.md, "Command-line contract").

use anyhow::{Context, Result, bail};
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use gputopo_agent::amd_smi::RealAmdSmi;
use gputopo_agent::auto::{AutoSource, Backend};
use gputopo_agent::daemon::{DaemonConfig, run};
use gputopo_agent::discover::{NvmlPaths, Source, build, gather};
use gputopo_agent::health::{Liveness, router};
use gputopo_agent::host::host_facts;
use gputopo_agent::link_plugin::LinkPluginPaths;
use gputopo_agent::metrics::Metrics;
use gputopo_agent::nvml::RealNvml;
use gputopo_agent::podres::PodResourcesSource;
use gputopo_agent::podres::kubelet::KubeletSocket;
use gputopo_agent::podres::saved::SavedAnswer;
use gputopo_kubelet_api::{dra, pluginregistration, podresources};
use gputopo_ops::daemon::{self, ListenArgs, ListenFlag, LogArgs, OpsServer};
use gputopo_ops::man::{self, ManArgs};
use gputopo_topology::backend::amd_smi::AmdSmiSource;
use gputopo_topology::backend::nvml::NvmlSource;
use gputopo_topology::backend::recording::{RecordMeta, record, run_command_stdout};
use gputopo_topology::backend::sysfs::RealSysfs;
use gputopo_topology::discover::Source as SavedSource;
use gputopo_topology::labels::{LabelOptions, node_labels, to_lines};
use gputopo_topology::object::gpu_topology;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "gputopo-agent",
    version,
    about = "Discovers how a node's GPUs are wired and publishes it as labels and a GpuTopology"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Print the GpuTopology object (or the labels) the agent would publish.
    Discover(DiscoverArgs),
    /// Record what NVML or AMD SMI, the vendor's tools and sysfs say on this node into one fixture file.
    Record(RecordArgs),
    /// Run as the node daemon: publish labels and the GpuTopology, keep them current.
    Run(Box<RunArgs>),
    /// Print this binary's manual page, or write one per subcommand with --out.
    Man(ManArgs),
}

/// Where the agent looks: exactly one of NVML, AMD SMI, whichever answers, saved tool texts, or a recording.
#[derive(Args)]
#[command(group(ArgGroup::new("source").required(true).args(["backend", "nvml", "amd_smi", "nvidia_smi_topo", "rocm_smi_topo", "amd_smi_topo", "fixture"])))]
struct SourceArgs {
    /// The live library to ask: auto (NVML if the NVIDIA driver answers, else AMD SMI if it lists a GPU; one DaemonSet for both vendors), nvml (as --nvml) or amd-smi (as --amd-smi).
    #[arg(long, value_enum, env = "GPUTOPO_BACKEND")]
    backend: Option<Backend>,
    /// Ask the NVIDIA driver through NVML (on a GPU node).
    #[arg(long, env = "GPUTOPO_NVML")]
    nvml: bool,
    /// Ask the amdgpu driver through the AMD SMI library (on an AMD GPU node).
    #[arg(long, env = "GPUTOPO_AMD_SMI")]
    amd_smi: bool,
    /// Saved `rocm-smi --showtopo` and/or `--showtoponuma` output; repeat for several files of one node.
    #[arg(
        long,
        value_name = "FILE",
        env = "GPUTOPO_ROCM_SMI_TOPO",
        value_delimiter = ','
    )]
    rocm_smi_topo: Vec<PathBuf>,
    /// A saved `amd-smi topology` output (its tables or `--json`).
    #[arg(long, value_name = "FILE", env = "GPUTOPO_AMD_SMI_TOPO")]
    amd_smi_topo: Option<PathBuf>,
    /// A saved `nvidia-smi topo -m` output.
    #[arg(long, value_name = "FILE", env = "GPUTOPO_NVIDIA_SMI_TOPO")]
    nvidia_smi_topo: Option<PathBuf>,
    /// With --nvidia-smi-topo: a saved `nvidia-smi nvlink -s` of the same node (link state, speed).
    #[arg(
        long,
        value_name = "FILE",
        requires = "nvidia_smi_topo",
        env = "GPUTOPO_NVLINK_STATUS"
    )]
    nvlink_status: Option<PathBuf>,
    /// With --nvidia-smi-topo: a saved `nvidia-smi -q` (or `-q -x`) of the same node (UUID, memory, PCI).
    #[arg(
        long,
        value_name = "FILE",
        requires = "nvidia_smi_topo",
        env = "GPUTOPO_SMI_QUERY"
    )]
    smi_query: Option<PathBuf>,
    /// A recording made by `gputopo-agent record`.
    #[arg(long, value_name = "FILE", env = "GPUTOPO_FIXTURE")]
    fixture: Option<PathBuf>,
    #[command(flatten)]
    host: HostArgs,
}

impl SourceArgs {
    fn into_source(self) -> Result<Source> {
        Ok(if self.nvml || self.backend == Some(Backend::Nvml) {
            self.host.nvml.source()
        } else if self.amd_smi || self.backend == Some(Backend::AmdSmi) {
            Source::AmdSmi {
                library: self.host.amd_smi_library,
            }
        } else if self.backend == Some(Backend::Auto) {
            Source::Auto(AutoSource {
                nvml_library: self.host.nvml.nvml_library,
                sysfs_root: self.host.nvml.sysfs_root,
                amd_smi_library: self.host.amd_smi_library,
            })
        } else if !self.rocm_smi_topo.is_empty() {
            Source::Saved(SavedSource::RocmSmi {
                texts: self.rocm_smi_topo,
            })
        } else if let Some(text) = self.amd_smi_topo {
            Source::Saved(SavedSource::AmdSmi { text })
        } else if let Some(topo) = self.nvidia_smi_topo {
            Source::Saved(SavedSource::NvidiaSmi {
                topo,
                nvlink_status: self.nvlink_status,
                query: self.smi_query,
            })
        } else if let Some(path) = self.fixture {
            Source::Saved(SavedSource::Fixture(path))
        } else {
            bail!(
                "one of --backend, --nvml, --amd-smi, --nvidia-smi-topo, --rocm-smi-topo, --amd-smi-topo or --fixture is required"
            );
        })
    }
}

#[derive(Args)]
struct DiscoverArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// The node's name [default: the fixture's node, else the hostname].
    #[arg(long, env = "NODE_NAME")]
    node: Option<String>,
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Yaml)]
    output: Output,
    /// Write nvidia.com/gpu.count, .product, .memory and .clique; turn off where GPU Feature Discovery runs.
    #[arg(long, env = "GPUTOPO_GFD_COMPATIBLE_LABELS", default_value_t = true, action = clap::ArgAction::Set)]
    gfd_compatible_labels: bool,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// This node's name, from the downward API (`spec.nodeName`).
    #[arg(long, env = "NODE_NAME")]
    node: String,
    /// Write nvidia.com/gpu.count, .product, .memory and .clique; turn off where GPU Feature Discovery runs.
    #[arg(long, env = "GPUTOPO_GFD_COMPATIBLE_LABELS", default_value_t = true, action = clap::ArgAction::Set)]
    gfd_compatible_labels: bool,
    /// How often to rescan and reconcile (SIGHUP rescans at once).
    #[arg(long, env = "GPUTOPO_RESCAN_INTERVAL", default_value = "60s", value_parser = humantime::parse_duration)]
    rescan_interval: Duration,
    /// The longest wait between retries while the API server is unreachable.
    #[arg(long, env = "GPUTOPO_MAX_BACKOFF", default_value = "30s", value_parser = humantime::parse_duration)]
    max_backoff: Duration,
    #[command(flatten)]
    ops: ListenArgs<AgentListen>,
    /// The longest one round (discovery, the kubelet's answer, the writes) may take; /healthz fails after three missed rounds plus this.
    #[arg(long, env = "GPUTOPO_SCAN_TIMEOUT", default_value = "2m", value_parser = humantime::parse_duration)]
    scan_timeout: Duration,
    #[command(flatten)]
    pod_resources: PodResourcesArgs,
    #[command(flatten)]
    link_devices: LinkDeviceArgs,
}

/// gputopo's link devices: the wiring as DRA devices plain DRA users match.
#[derive(Args)]
struct LinkDeviceArgs {
    /// Publish gputopo's link devices (NVLink island, PCIe switch, NUMA node, NIC rail per GPU and NIC) as a ResourceSlice of driver topology.gputopo.dev and serve their kubelet plugin; needs DRA, RBAC on resourceslices and the kubelet's plugin directories.
    #[arg(long = "link-devices", env = "GPUTOPO_LINK_DEVICES", default_value_t = false, action = clap::ArgAction::Set)]
    link_devices: bool,
    /// The kubelet's plugins directory (the driver's dra.sock goes in <dir>/topology.gputopo.dev/).
    #[arg(long = "kubelet-plugins-dir", env = "GPUTOPO_KUBELET_PLUGINS_DIR", value_name = "DIR", default_value = dra::KUBELET_PLUGINS_DIR)]
    plugins_dir: PathBuf,
    /// The kubelet's plugin registration directory.
    #[arg(long = "kubelet-registry-dir", env = "GPUTOPO_KUBELET_REGISTRY_DIR", value_name = "DIR", default_value = pluginregistration::KUBELET_REGISTRY_DIR)]
    registry_dir: PathBuf,
}

/// The agent's `--listen`.
struct AgentListen;

impl ListenFlag for AgentListen {
    const ENV: &'static str = "GPUTOPO_LISTEN";
    const DEFAULT: &'static str = "0.0.0.0:8081";
}

/// Reading which GPUs each pod holds from the kubelet.
#[derive(Args)]
struct PodResourcesArgs {
    /// Read the kubelet's PodResources API every scan and publish which GPUs each pod holds (GpuTopology status.allocations).
    #[arg(long = "pod-resources", env = "GPUTOPO_POD_RESOURCES", default_value_t = true, action = clap::ArgAction::Set)]
    enabled: bool,
    /// The kubelet's PodResources socket.
    #[arg(long = "pod-resources-socket", env = "GPUTOPO_POD_RESOURCES_SOCKET", value_name = "PATH", default_value = podresources::KUBELET_SOCKET)]
    socket: PathBuf,
    /// A saved PodResources answer (JSON) to read instead of the socket, for offline runs.
    #[arg(
        long = "pod-resources-saved",
        env = "GPUTOPO_POD_RESOURCES_SAVED",
        value_name = "FILE"
    )]
    saved: Option<PathBuf>,
    /// How long one PodResources call may take.
    #[arg(long = "pod-resources-timeout", env = "GPUTOPO_POD_RESOURCES_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Refresh podResources.observedAt at least this often while nothing changes; readers treat a reading older than three heartbeats as stale.
    #[arg(long = "allocations-heartbeat", env = "GPUTOPO_ALLOCATIONS_HEARTBEAT", default_value = "5m", value_parser = humantime::parse_duration)]
    heartbeat: Duration,
}

/// Where the host's driver library and sysfs are (they move inside containers).
#[derive(Args)]
struct HostArgs {
    #[command(flatten)]
    nvml: NvmlPaths,
    /// Path of libamd_smi.so when it is neither on the loader path nor in /opt/rocm/lib.
    #[arg(long, env = "GPUTOPO_AMD_SMI_LIBRARY", value_name = "FILE")]
    amd_smi_library: Option<PathBuf>,
}

#[derive(Args)]
struct RecordArgs {
    /// The file to write (YAML).
    #[arg(long, short = 'o', value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    host: HostArgs,
    /// The node's name [default: the hostname].
    #[arg(long, env = "NODE_NAME")]
    node: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Json,
    Yaml,
    Labels,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    daemon::init_logging("warn", cli.log.log_format);
    let result = match cli.command {
        Command::Discover(args) => discover(args),
        Command::Record(args) => record_node(args),
        Command::Run(args) => run_daemon(*args),
        Command::Man(args) => {
            use clap::CommandFactory;
            man::run(Cli::command(), &args)
                .map(drop)
                .map_err(Into::into)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn hostname() -> Option<String> {
    sysinfo::System::host_name().ok()
}

fn now() -> Timestamp {
    Timestamp::now()
}

fn discover(args: DiscoverArgs) -> Result<()> {
    let source = args.source.into_source()?;
    let (facts, recorded_node) = gather(&source)?;
    let node = args
        .node
        .or(recorded_node)
        .or_else(hostname)
        .context("no node name: pass --node or set NODE_NAME")?;
    let found = build(&node, facts)?;
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Labels => {
            let opts = LabelOptions {
                gfd_compatible: args.gfd_compatible_labels,
            };
            out.write_all(to_lines(&node_labels(&found.spec, opts)).as_bytes())?;
        }
        Output::Json => {
            let object = gpu_topology(found.spec, &found.findings, Time(now()));
            serde_json::to_writer_pretty(&mut out, &object)?;
            writeln!(out)?;
        }
        Output::Yaml => {
            let object = gpu_topology(found.spec, &found.findings, Time(now()));
            out.write_all(serde_yaml::to_string(&object)?.as_bytes())?;
        }
    }
    Ok(())
}

fn record_node(args: RecordArgs) -> Result<()> {
    let node = args
        .node
        .or_else(hostname)
        .context("no node name: pass --node or set NODE_NAME")?;
    let nvml = match &args.host.nvml.nvml_library {
        Some(path) => RealNvml::init_with_library(path),
        None => RealNvml::init(),
    };
    let (nvml, nvml_unavailable) = match nvml {
        Ok(n) => (Some(n), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let amd = match &args.host.amd_smi_library {
        Some(path) => RealAmdSmi::init_with_library(path),
        None => RealAmdSmi::init(),
    };
    let (amd, amd_smi_unavailable) = match amd {
        Ok(a) => (Some(a), None),
        Err(e) => (None, Some(e.to_string())),
    };
    if nvml.is_none() && amd.is_none() {
        eprintln!(
            "warning: {}; {}; recording the vendors' tools and sysfs only",
            nvml_unavailable.as_deref().unwrap_or_default(),
            amd_smi_unavailable.as_deref().unwrap_or_default()
        );
    }
    let recording = record(
        nvml.as_ref().map(|n| n as &dyn NvmlSource),
        amd.as_ref().map(|a| a as &dyn AmdSmiSource),
        &run_command_stdout,
        &RealSysfs::new(&args.host.nvml.sysfs_root),
        RecordMeta {
            node_name: node,
            recorded_at: now().to_string(),
            host: Some(host_facts()),
            nvml_unavailable,
            // Said only on nodes where neither library answered.
            amd_smi_unavailable: nvml_ok_or(amd_smi_unavailable, &nvml),
        },
    );
    if recording.nvml.is_none() && recording.amd_smi.is_none() && recording.commands.is_empty() {
        bail!(
            "nothing to record: {}; {}; and no nvidia-smi, rocm-smi or amd-smi command answered",
            recording
                .nvml_error
                .as_deref()
                .unwrap_or("NVML not available"),
            recording
                .amd_smi_error
                .as_deref()
                .unwrap_or("AMD SMI not available")
        );
    }
    recording.save(&args.output)?;
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    eprintln!(
        "recorded {} (NVML: {}, AMD SMI: {}, commands: {}) to {}",
        recording.node_name,
        yes_no(recording.nvml.is_some()),
        yes_no(recording.amd_smi.is_some()),
        recording
            .commands
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
        args.output.display()
    );
    Ok(())
}

/// The AMD SMI error is worth recording only where NVML did not answer either:
/// on an NVIDIA node its absence is expected.
fn nvml_ok_or(amd_error: Option<String>, nvml: &Option<RealNvml>) -> Option<String> {
    amd_error.filter(|_| nvml.is_none())
}

/// Refuses durations and combinations that cannot work, naming the flag.
fn check_run_args(args: &RunArgs) -> Result<()> {
    for (flag, value) in [
        ("--rescan-interval", args.rescan_interval),
        ("--max-backoff", args.max_backoff),
        ("--scan-timeout", args.scan_timeout),
        ("--pod-resources-timeout", args.pod_resources.timeout),
        ("--allocations-heartbeat", args.pod_resources.heartbeat),
    ] {
        if value.is_zero() {
            bail!("{flag} must be longer than 0 (a duration such as 30s, 5m)");
        }
    }
    let p = &args.pod_resources;
    if p.heartbeat < args.rescan_interval {
        bail!(
            "--allocations-heartbeat ({}) must be at least --rescan-interval ({}): observedAt is refreshed only when the agent scans",
            humantime::format_duration(p.heartbeat),
            humantime::format_duration(args.rescan_interval)
        );
    }
    if !p.enabled && p.saved.is_some() {
        bail!(
            "--pod-resources-saved needs --pod-resources=true (it is what the agent reads instead of the socket)"
        );
    }
    Ok(())
}

fn pod_resources_source(args: PodResourcesArgs) -> Option<Box<dyn PodResourcesSource>> {
    if !args.enabled {
        return None;
    }
    Some(match args.saved {
        Some(path) => Box::new(SavedAnswer { path }),
        None => Box::new(KubeletSocket {
            path: args.socket,
            timeout: args.timeout,
        }),
    })
}

fn run_daemon(args: RunArgs) -> Result<()> {
    check_run_args(&args)?;
    let limit = Liveness::limit_for(args.rescan_interval, args.max_backoff, args.scan_timeout);
    let config = DaemonConfig {
        node: args.node,
        source: args.source.into_source()?,
        labels: LabelOptions {
            gfd_compatible: args.gfd_compatible_labels,
        },
        rescan_interval: args.rescan_interval,
        max_backoff: args.max_backoff,
        scan_timeout: args.scan_timeout,
        allocations_heartbeat: args.pod_resources.heartbeat,
        link_devices: args.link_devices.link_devices.then_some(LinkPluginPaths {
            plugins_dir: args.link_devices.plugins_dir,
            registry_dir: args.link_devices.registry_dir,
        }),
        pod_resources: pod_resources_source(args.pod_resources),
    };
    let runtime = daemon::runtime(Some(2))?;
    runtime.block_on(async move {
        let client = daemon::kube_client().await?;
        let metrics = Arc::new(Metrics::new());
        let readiness = Arc::new(gputopo_agent::health::readiness());
        let liveness = Arc::new(Liveness::new(limit));
        let app = router(metrics.clone(), readiness.clone(), liveness.clone());
        let _ops = OpsServer::start(args.ops.listen, app).await?;
        Ok(run(config, client, metrics, readiness, liveness).await?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use gputopo_ops::daemon::LogFormat;

    /// Every environment variable the agent's flags have ever read:
    /// the Helm chart, the plain manifests and docs set them.
    const ACCEPTED: &[&str] = &[
        "GPUTOPO_ALLOCATIONS_HEARTBEAT",
        "GPUTOPO_AMD_SMI",
        "GPUTOPO_AMD_SMI_LIBRARY",
        "GPUTOPO_AMD_SMI_TOPO",
        "GPUTOPO_BACKEND",
        "GPUTOPO_FIXTURE",
        "GPUTOPO_GFD_COMPATIBLE_LABELS",
        "GPUTOPO_LISTEN",
        "GPUTOPO_LOG_FORMAT",
        "GPUTOPO_KUBELET_PLUGINS_DIR",
        "GPUTOPO_KUBELET_REGISTRY_DIR",
        "GPUTOPO_LINK_DEVICES",
        "GPUTOPO_MAX_BACKOFF",
        "GPUTOPO_NVIDIA_SMI_TOPO",
        "GPUTOPO_NVLINK_STATUS",
        "GPUTOPO_NVML",
        "GPUTOPO_NVML_LIBRARY",
        "GPUTOPO_POD_RESOURCES",
        "GPUTOPO_POD_RESOURCES_SAVED",
        "GPUTOPO_POD_RESOURCES_SOCKET",
        "GPUTOPO_POD_RESOURCES_TIMEOUT",
        "GPUTOPO_RESCAN_INTERVAL",
        "GPUTOPO_ROCM_SMI_TOPO",
        "GPUTOPO_SCAN_TIMEOUT",
        "GPUTOPO_SMI_QUERY",
        "GPUTOPO_SYSFS_ROOT",
        "NODE_NAME",
    ];

    #[test]
    fn every_documented_environment_variable_is_still_accepted() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        // The chart's agent DaemonSets (NVIDIA, AMD, auto) are one template.
        let manifests = [
            "helm/gputopo/templates/_agent-daemonset.tpl",
            "daemonset/agent-daemonset.yaml",
        ];
        let drift = daemon::env_var_drift(&Cli::command(), ACCEPTED, &repo, &manifests);
        assert!(drift.is_empty(), "{drift:#?}");
    }

    #[test]
    fn log_format_is_taken_before_or_after_the_subcommand() {
        let fixture = ["--fixture", "f.yaml", "--node", "n"];
        let cases: [Vec<&str>; 3] = [
            [&["run", "--log-format", "json"][..], &fixture].concat(),
            [&["--log-format", "json", "run"][..], &fixture].concat(),
            [&["discover", "--log-format=json"][..], &fixture].concat(),
        ];
        for args in cases {
            let cli = Cli::try_parse_from(std::iter::once("gputopo-agent").chain(args.clone()))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(cli.log.log_format, LogFormat::Json, "{args:?}");
        }
        let text = [&["run", "--log-format", "text"][..], &fixture].concat();
        let cli = Cli::try_parse_from(std::iter::once("gputopo-agent").chain(text)).expect("text");
        assert_eq!(cli.log.log_format, LogFormat::Text);
        let xml = [&["run", "--log-format", "xml"][..], &fixture].concat();
        assert!(Cli::try_parse_from(std::iter::once("gputopo-agent").chain(xml)).is_err());
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
    fn the_manual_has_a_page_per_subcommand_with_its_flags() {
        let pages = man::pages(Cli::command());
        let cmd = Cli::command();
        let commands: Vec<&clap::Command> =
            std::iter::once(&cmd).chain(cmd.get_subcommands()).collect();
        assert_eq!(pages.len(), commands.len());
        for (page, command) in pages.iter().zip(commands) {
            let name = match command.get_name() {
                "gputopo-agent" => "gputopo-agent.1".to_string(),
                sub => format!("gputopo-agent-{sub}.1"),
            };
            assert_eq!(page.file_name, name);
            for long in command.get_arguments().filter_map(|a| a.get_long()) {
                let flag = format!("\\-\\-{}", long.replace('-', "\\-"));
                assert!(page.roff.contains(&flag), "{name}: no {flag}");
            }
        }
    }
}
