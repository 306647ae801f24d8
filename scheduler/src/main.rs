//! `gputopo-scheduler`: the secondary scheduler's command line.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use gputopo_ops::daemon::{self, ListenArgs, ListenFlag, LogArgs, LogFormat, OpsServer};
use gputopo_ops::man::{self, ManArgs};
use gputopo_scheduler::Settings;
use gputopo_scheduler::extender::{self, Limits};
use gputopo_scheduler::leader::{self, LeaderConfig, LeaderElector};
use gputopo_scheduler::metrics::{Metrics, router};
use gputopo_scheduler::scheduler::Scheduler;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{error, info};

#[derive(Parser)]
#[command(
    name = "gputopo-scheduler",
    version,
    about = "Secondary Kubernetes scheduler that places GPU pods and gangs where the wires are"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Watch the cluster and schedule pods whose spec.schedulerName is ours.
    /// The API server is found as kubectl finds it (KUBECONFIG, ~/.kube/config,
    /// or the in-cluster service account).
    Run(RunArgs),
    /// Serve kube-scheduler's extender API (filter, prioritize, bind): the
    /// stock kube-scheduler schedules and calls gputopo for GPU topology.
    /// See docs/extender.md for its KubeSchedulerConfiguration.
    Extender(ExtenderArgs),
    /// Print this binary's manual page, or write one per subcommand with --out.
    Man(ManArgs),
}

/// What `run` and `extender` both take.
#[derive(Args)]
struct DaemonArgs {
    /// YAML configuration file (see docs/scheduler.md: network tiers,
    /// weights, Topology Manager policy, backoff). `extender` uses its
    /// networkTiers, weights, defaultTopologyManagerPolicy, memoryTarget and
    /// spotInstanceTypes; schedulerNames, profiles, backoff, gangs and
    /// preemption are checked but unused there (kube-scheduler picks the
    /// pods, retries them and preempts).
    #[arg(long, value_name = "FILE", env = "GPUTOPO_SCHEDULER_CONFIG")]
    config: Option<PathBuf>,
    /// `--listen`: /healthz, /readyz (503 until the watches have listed), /metrics.
    #[command(flatten)]
    ops: ListenArgs<SchedulerListen>,
    /// Deprecated: --log-format json. Still means JSON, whatever
    /// --log-format says.
    #[arg(long, env = "GPUTOPO_SCHEDULER_LOG_JSON", hide_short_help = true)]
    log_json: bool,
}

/// The scheduler's `--listen`.
struct SchedulerListen;

impl ListenFlag for SchedulerListen {
    const ENV: &'static str = "GPUTOPO_SCHEDULER_LISTEN";
    const DEFAULT: &'static str = "0.0.0.0:10261";
}

impl Cli {
    /// `--log-format`, or JSON where the deprecated `--log-json` asks.
    fn log_format(&self, daemon: &DaemonArgs) -> LogFormat {
        if daemon.log_json {
            LogFormat::Json
        } else {
            self.log.log_format
        }
    }
}

impl DaemonArgs {
    /// The configuration file's settings, or the defaults without one.
    fn settings(&self) -> Result<Settings> {
        Ok(match &self.config {
            Some(file) => Settings::from_file(file)?,
            None => Settings::default(),
        })
    }
}

#[derive(Args)]
struct ExtenderArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    /// Address of the extender API: POST /filter, /prioritize, /bind (the
    /// KubeSchedulerConfiguration's urlPrefix). The same address as
    /// --listen serves everything on one port.
    #[arg(
        long,
        value_name = "ADDR",
        env = "GPUTOPO_SCHEDULER_EXTENDER_LISTEN",
        default_value = "0.0.0.0:10262"
    )]
    extender_listen: SocketAddr,
    /// spec.schedulerName values of the pods /bind takes (repeat, or
    /// comma-separated): the profiles of the kube-scheduler that calls this
    /// extender. A bind for any other pod is refused.
    #[arg(
        long,
        value_name = "NAME",
        env = "GPUTOPO_SCHEDULER_NAME",
        value_delimiter = ',',
        default_value = "default-scheduler"
    )]
    scheduler_name: Vec<String>,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    limits: LimitArgs,
}

/// TLS on the extender port (--extender-listen). One of --tls-cert-file
/// with --tls-key-file, or --insecure-plain-http, is required.
#[derive(Args)]
struct TlsArgs {
    /// PEM serving certificate (then its chain) of the extender API; its
    /// names must cover the urlPrefix's host.
    #[arg(long, value_name = "FILE", env = "GPUTOPO_SCHEDULER_TLS_CERT_FILE")]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, value_name = "FILE", env = "GPUTOPO_SCHEDULER_TLS_KEY_FILE")]
    tls_key_file: Option<PathBuf>,
    /// PEM CA certificate(s): every client must present a certificate one
    /// of them signed (kube-scheduler's tlsConfig certFile/keyFile). Use a
    /// CA of its own, not the cluster's, which signs every kubelet's.
    #[arg(long, value_name = "FILE", env = "GPUTOPO_SCHEDULER_CLIENT_CA_FILE")]
    client_ca_file: Option<PathBuf>,
    /// Serve the extender API over plain HTTP, without authentication: for
    /// local testing only (anyone who reaches the port can bind pods).
    #[arg(long, env = "GPUTOPO_SCHEDULER_INSECURE_PLAIN_HTTP")]
    insecure_plain_http: bool,
}

/// What one caller can make the extender hold.
#[derive(Args)]
struct LimitArgs {
    /// Largest /filter or /prioritize body, in bytes (413 above; /bind: 64 KiB).
    /// The default holds node names for 15,000 nodes (nodeCacheCapable: true).
    #[arg(long, value_name = "BYTES", env = "GPUTOPO_SCHEDULER_MAX_REQUEST_BYTES", default_value_t = 8 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024..))]
    max_request_bytes: u64,
    /// Time to answer one request, its body read included (408 after).
    #[arg(long, value_name = "DURATION", env = "GPUTOPO_SCHEDULER_REQUEST_TIMEOUT", default_value = "25s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// /filter and /prioritize requests in flight at once (503 above).
    #[arg(long, value_name = "N", env = "GPUTOPO_SCHEDULER_MAX_CONCURRENT_FILTERS", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_filters: u32,
    /// /bind requests in flight at once (503 above).
    #[arg(long, value_name = "N", env = "GPUTOPO_SCHEDULER_MAX_CONCURRENT_BINDS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_binds: u32,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            max_request_bytes: usize::try_from(self.max_request_bytes).unwrap_or(usize::MAX),
            request_timeout: self.request_timeout,
            max_concurrent_filters: self.max_concurrent_filters as usize,
            max_concurrent_binds: self.max_concurrent_binds as usize,
        }
    }
}

#[derive(Args)]
struct RunArgs {
    /// spec.schedulerName values to serve (repeat, or comma-separated);
    /// replaces the configuration file's schedulerNames.
    #[arg(
        long,
        value_name = "NAME",
        env = "GPUTOPO_SCHEDULER_NAME",
        value_delimiter = ','
    )]
    scheduler_name: Vec<String>,
    #[command(flatten)]
    daemon: DaemonArgs,
    /// The most bindings outstanding at once: the next pod is decided while
    /// the API server answers, its GPUs already held.
    #[arg(long, value_name = "N", env = "GPUTOPO_SCHEDULER_MAX_BINDS_IN_FLIGHT", default_value_t = gputopo_scheduler::cycle::DEFAULT_BINDS_IN_FLIGHT as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_binds_in_flight: u32,
    #[command(flatten)]
    leader: LeaderArgs,
}

/// Leader election (kube-scheduler's flags and defaults): of the replicas
/// sharing a lease only the holder schedules; the others keep their caches
/// warm and take over when its lease expires.
#[derive(Args)]
struct LeaderArgs {
    /// Elect a leader before scheduling (`--leader-elect=false`: schedule at
    /// once, for a single replica).
    #[arg(
        long,
        env = "GPUTOPO_SCHEDULER_LEADER_ELECT",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    leader_elect: bool,
    /// The name of the `coordination.k8s.io/v1` Lease.
    #[arg(
        long,
        env = "GPUTOPO_SCHEDULER_LEASE_NAME",
        default_value = "gputopo-scheduler",
        value_name = "NAME"
    )]
    leader_elect_lease_name: String,
    /// The Lease's namespace; it must exist (the scheduler never creates namespaces).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "gputopo-system",
        value_name = "NAMESPACE"
    )]
    leader_elect_namespace: String,
    /// How long a standby waits after the leader's last renewal before it
    /// takes the lease over.
    #[arg(long, env = "GPUTOPO_SCHEDULER_LEASE_DURATION", default_value = "15s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    leader_elect_lease_duration: Duration,
    /// How long the leader retries a failed renewal before it stops (the
    /// process exits; the Deployment restarts it as a standby).
    #[arg(long, env = "GPUTOPO_SCHEDULER_RENEW_DEADLINE", default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    leader_elect_renew_deadline: Duration,
    /// The time between two attempts to acquire or renew the lease.
    #[arg(long, env = "GPUTOPO_SCHEDULER_RETRY_PERIOD", default_value = "2s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    leader_elect_retry_period: Duration,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let daemon = match &cli.command {
        Command::Run(args) => &args.daemon,
        Command::Extender(args) => &args.daemon,
        Command::Man(args) => return print_man(args),
    };
    daemon::init_logging("info", cli.log_format(daemon));
    if daemon.log_json {
        tracing::warn!(
            "--log-json (GPUTOPO_SCHEDULER_LOG_JSON) is deprecated: use --log-format json (GPUTOPO_LOG_FORMAT)"
        );
    }
    let result = daemon::runtime(None)
        .map_err(anyhow::Error::from)
        .and_then(|rt| {
            rt.block_on(async {
                match cli.command {
                    Command::Run(args) => run(args).await,
                    Command::Extender(args) => extender(args).await,
                    Command::Man(_) => Ok(()),
                }
            })
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gputopo-scheduler: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_man(args: &ManArgs) -> ExitCode {
    use clap::CommandFactory;
    match man::run(Cli::command(), args) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gputopo-scheduler man: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> Result<()> {
    let mut settings = args.daemon.settings()?;
    if !args.scheduler_name.is_empty() {
        settings.set_scheduler_names(args.scheduler_name.clone())?;
    }
    let kube_config = daemon::kube_config().await?;
    let client = daemon::client_of(kube_config.clone())?;
    // Evictions answer 429 when a PodDisruptionBudget refuses: an answer,
    // not a transient error to retry for a minute.
    let mut eviction_config = kube_config;
    eviction_config.default_retry = false;
    let eviction_client =
        daemon::client_of(eviction_config).context("connecting to the API server for evictions")?;
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(gputopo_scheduler::metrics::readiness());
    let _ops = OpsServer::start(
        args.daemon.ops.listen,
        router(metrics.clone(), readiness.clone()),
    )
    .await?;
    let shutdown = daemon::shutdown_signal()?;
    let l = &args.leader;
    if !l.leader_elect {
        info!("leader election off (--leader-elect=false): scheduling as the only replica");
        let (_leader_tx, leader_rx) = watch::channel(true);
        return Scheduler::new(client.clone(), settings, metrics)
            .with_eviction_client(eviction_client)
            .with_binds_in_flight(args.max_binds_in_flight as usize)
            .run(readiness, shutdown, leader_rx)
            .await
            .context("scheduling");
    }
    let config = LeaderConfig {
        lease_name: l.leader_elect_lease_name.clone(),
        namespace: l.leader_elect_namespace.clone(),
        identity: leader::identity(),
        lease_duration: l.leader_elect_lease_duration,
        renew_deadline: l.leader_elect_renew_deadline,
        retry_period: l.leader_elect_retry_period,
    };
    config.validate().context("--leader-elect-* flags")?;
    let elector = LeaderElector::new(client.clone(), config);
    let (leader_tx, leader_rx) = watch::channel(false);
    let scheduling = Scheduler::new(client, settings, metrics)
        .with_eviction_client(eviction_client)
        .with_binds_in_flight(args.max_binds_in_flight as usize)
        .run(readiness, shutdown, leader_rx);
    // Whichever ends first wins; losing the lease drops the scheduling
    // future at once, mid-cycle if need be, so no bind follows.
    tokio::select! {
        result = scheduling => {
            elector.release().await;
            result.context("scheduling")
        }
        lost = elector.run(&leader_tx) => {
            let Err(e) = lost;
            error!(error = %e, "leader lease lost; exiting");
            Err(e).context("leader election")
        }
    }
}

async fn extender(args: ExtenderArgs) -> Result<()> {
    let settings = args.daemon.settings()?;
    // The TLS files before anything else: a bad one stops the start, naming
    // its flag and path.
    let t = args.tls;
    let tls = extender::transport(
        t.tls_cert_file,
        t.tls_key_file,
        t.client_ca_file,
        t.insecure_plain_http,
    )?
    .map(|files| files.load())
    .transpose()?;
    let client = daemon::kube_client().await?;
    let shutdown = daemon::shutdown_signal()?;
    let options = extender::ServeOptions {
        addresses: extender::Addresses {
            listen: args.daemon.ops.listen,
            extender_listen: args.extender_listen,
        },
        tls,
        limits: args.limits.limits(),
        scheduler_names: args.scheduler_name,
        accounting: settings.accounting,
        dra: settings.dra,
    };
    extender::run(client, settings.core, options, shutdown)
        .await
        .context("serving the scheduler extender")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every environment variable the scheduler's flags have ever read: the
    /// Helm chart, the plain manifests and docs set them.
    const ACCEPTED: &[&str] = &[
        "GPUTOPO_SCHEDULER_CLIENT_CA_FILE",
        "GPUTOPO_SCHEDULER_CONFIG",
        "GPUTOPO_SCHEDULER_EXTENDER_LISTEN",
        "GPUTOPO_SCHEDULER_INSECURE_PLAIN_HTTP",
        "GPUTOPO_SCHEDULER_LEADER_ELECT",
        "GPUTOPO_SCHEDULER_LEASE_DURATION",
        "GPUTOPO_SCHEDULER_LEASE_NAME",
        "GPUTOPO_SCHEDULER_LISTEN",
        "GPUTOPO_LOG_FORMAT",
        "GPUTOPO_SCHEDULER_LOG_JSON",
        "GPUTOPO_SCHEDULER_MAX_BINDS_IN_FLIGHT",
        "GPUTOPO_SCHEDULER_MAX_CONCURRENT_BINDS",
        "GPUTOPO_SCHEDULER_MAX_CONCURRENT_FILTERS",
        "GPUTOPO_SCHEDULER_MAX_REQUEST_BYTES",
        "GPUTOPO_SCHEDULER_NAME",
        "GPUTOPO_SCHEDULER_RENEW_DEADLINE",
        "GPUTOPO_SCHEDULER_REQUEST_TIMEOUT",
        "GPUTOPO_SCHEDULER_RETRY_PERIOD",
        "GPUTOPO_SCHEDULER_TLS_CERT_FILE",
        "GPUTOPO_SCHEDULER_TLS_KEY_FILE",
        "POD_NAMESPACE",
    ];

    #[test]
    fn every_documented_environment_variable_is_still_accepted() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let manifests = [
            "helm/gputopo/templates/scheduler-deployment.yaml",
            "daemonset/scheduler.yaml",
        ];
        let drift = daemon::env_var_drift(&Cli::command(), ACCEPTED, &repo, &manifests);
        assert!(drift.is_empty(), "{drift:#?}");
        // Both subcommands take the shared flags.
        for sub in ["run", "extender"] {
            let cli = Cli::try_parse_from([
                "gputopo-scheduler",
                sub,
                "--listen",
                "127.0.0.1:1",
                "--log-json",
            ])
            .unwrap_or_else(|e| panic!("{sub}: {e}"));
            let daemon = daemon_args(&cli);
            assert_eq!(daemon.ops.listen.to_string(), "127.0.0.1:1");
            assert_eq!(cli.log_format(daemon), LogFormat::Json);
        }
    }

    fn daemon_args(cli: &Cli) -> &DaemonArgs {
        match &cli.command {
            Command::Run(a) => &a.daemon,
            Command::Extender(a) => &a.daemon,
            Command::Man(_) => panic!("not a daemon"),
        }
    }

    #[test]
    fn log_format_is_taken_by_both_modes_before_or_after_the_subcommand() {
        let cases: [&[&str]; 4] = [
            &["run", "--log-format", "json"],
            &["--log-format", "json", "extender"],
            &["extender", "--log-format=json"],
            &["run", "--log-json", "--log-format", "text"],
        ];
        for args in cases {
            let cli = Cli::try_parse_from(
                std::iter::once("gputopo-scheduler").chain(args.iter().copied()),
            )
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(
                cli.log_format(daemon_args(&cli)),
                LogFormat::Json,
                "{args:?}"
            );
        }
        let cli = Cli::try_parse_from(["gputopo-scheduler", "run", "--log-format", "text"])
            .expect("text");
        assert_eq!(cli.log_format(daemon_args(&cli)), LogFormat::Text);
        assert!(Cli::try_parse_from(["gputopo-scheduler", "run", "--log-format", "xml"]).is_err());
        // Its environment twin, the one every daemon reads.
        let mut cmd = Cli::command();
        cmd.build();
        for sub in ["run", "extender"] {
            let arg = cmd
                .find_subcommand(sub)
                .and_then(|s| {
                    s.get_arguments()
                        .find(|a| a.get_long() == Some("log-format"))
                })
                .unwrap_or_else(|| panic!("{sub} has no --log-format"));
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some("GPUTOPO_LOG_FORMAT")
            );
        }
    }

    #[test]
    fn the_manual_has_a_page_per_mode_with_its_flags() {
        let pages = man::pages(Cli::command());
        let names: Vec<&str> = pages.iter().map(|p| p.file_name.as_str()).collect();
        assert_eq!(
            names,
            [
                "gputopo-scheduler.1",
                "gputopo-scheduler-run.1",
                "gputopo-scheduler-extender.1",
                "gputopo-scheduler-man.1"
            ]
        );
        // Each page lists its own command's flags: the top one --log-format.
        let cmd = Cli::command();
        let commands = std::iter::once(&cmd).chain(cmd.get_subcommands());
        for (page, sub) in pages.iter().zip(commands) {
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(long) = arg.get_long() {
                    let flag = format!("\\-\\-{}", long.replace('-', "\\-"));
                    assert!(page.roff.contains(&flag), "{}: no {flag}", page.file_name);
                }
            }
        }
    }

    fn extender_args(args: &[&str]) -> ExtenderArgs {
        let cli = Cli::try_parse_from(["gputopo-scheduler", "extender"].iter().chain(args))
            .unwrap_or_else(|e| panic!("{e}"));
        match cli.command {
            Command::Extender(a) => a,
            Command::Run(_) | Command::Man(_) => panic!("not the extender"),
        }
    }

    #[test]
    fn the_extenders_defaults_are_the_librarys() {
        let a = extender_args(&["--insecure-plain-http"]);
        assert_eq!(a.limits.limits(), Limits::default());
        assert_eq!(a.scheduler_name, ["default-scheduler"]);
        let a = extender_args(&["--scheduler-name", "a,b", "--max-concurrent-binds", "3"]);
        assert_eq!(a.scheduler_name, ["a", "b"]);
        assert_eq!(a.limits.limits().max_concurrent_binds, 3);
        assert!(
            Cli::try_parse_from([
                "gputopo-scheduler",
                "extender",
                "--max-concurrent-binds",
                "0"
            ])
            .is_err()
        );
    }
}
