//! One daemon's start, shared by `gputopo-scheduler`, `gputopo-agent` and
//! `gputopo-device-plugin`: command-line flags ([`ListenArgs`], [`LogArgs`]) in, then
//! logging ([`init_logging`]), the async runtime ([`runtime`]), the API
//! server's client ([`kube_config`], [`kube_client`]), the probes' and
//! Prometheus' HTTP server ([`OpsServer`]) and the stop signal
//! ([`shutdown_signal`]) out. Each daemon's own work starts after.

use axum::Router;
use std::future::Future;
use std::marker::PhantomData;
use std::net::SocketAddr;
use tracing::{error, info};

/// Why a daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("finding the API server (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    KubeConfig(#[source] kube::config::InferConfigError),
    #[error("connecting to the API server (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    KubeClient(#[source] kube::Error),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("installing the SIGTERM handler: {0}")]
    Signal(#[source] std::io::Error),
}

/// How a daemon writes its log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line, for a log pipeline (Loki, Elasticsearch, Cloud Logging).
    Json,
}

/// `--log-format text|json` (`GPUTOPO_LOG_FORMAT`): one flag, one variable
/// for every daemon, so that a chart or an operator sets it the same way
/// everywhere.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct LogArgs {
    /// Log lines as text or as JSON objects (the level comes from RUST_LOG).
    // Global: a daemon with subcommands takes it before or after the subcommand.
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        env = "GPUTOPO_LOG_FORMAT",
        default_value_t = LogFormat::Text,
        global = true
    )]
    pub log_format: LogFormat,
}

/// Logs to stderr, the level from `RUST_LOG` (else `default_level`), in
/// `format`.
pub fn init_logging(default_level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// The multi-threaded runtime; `worker_threads` for a node daemon that
/// should take little of its node (`None`: one per core).
pub fn runtime(worker_threads: Option<usize>) -> Result<tokio::runtime::Runtime, BootstrapError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = worker_threads {
        builder.worker_threads(n);
    }
    builder
        .enable_all()
        .build()
        .map_err(BootstrapError::Runtime)
}

/// The API server's address and credentials, found as kubectl finds them.
pub async fn kube_config() -> Result<kube::Config, BootstrapError> {
    kube::Config::infer()
        .await
        .map_err(BootstrapError::KubeConfig)
}

/// A client of the API server found as kubectl finds it.
pub async fn kube_client() -> Result<kube::Client, BootstrapError> {
    client_of(kube_config().await?)
}

/// A client for `config` (e.g. one with retries turned off).
pub fn client_of(config: kube::Config) -> Result<kube::Client, BootstrapError> {
    kube::Client::try_from(config).map_err(BootstrapError::KubeClient)
}

/// The HTTP server of `/healthz`, `/readyz` and `/metrics` (or whatever
/// router the daemon gives), running until dropped.
pub struct OpsServer {
    task: tokio::task::JoinHandle<()>,
}

impl OpsServer {
    /// Listens on `addr` (an error names it) and serves `app` in the background.
    pub async fn start(addr: SocketAddr, app: Router) -> Result<OpsServer, BootstrapError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| BootstrapError::Listen { addr, source })?;
        info!(listen = %addr, "serving /healthz, /readyz, /metrics");
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                error!("HTTP server stopped: {e}");
            }
        });
        Ok(OpsServer { task })
    }
}

impl Drop for OpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Resolves at SIGTERM (the kubelet stopping the pod) or Ctrl-C. The
/// handler is installed at once, so a signal sent before the future is
/// polled still counts.
pub fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static, BootstrapError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).map_err(BootstrapError::Signal)?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => info!("SIGTERM"),
            _ = tokio::signal::ctrl_c() => info!("interrupted"),
        }
    })
}

/// What differs between the daemons' `--listen` flags: the environment
/// variable the manifests set, and the port.
pub trait ListenFlag {
    /// The flag's environment variable twin (`GPUTOPO_LISTEN`, ...).
    const ENV: &'static str;
    /// `0.0.0.0:<port>`.
    const DEFAULT: &'static str;
}

/// `--listen ADDR`: where `/healthz`, `/readyz` and `/metrics` are served.
/// One flag for every daemon, its environment variable and default from
/// `F`: clap's derive takes only literals, so the flag is built by hand.
pub struct ListenArgs<F> {
    pub listen: SocketAddr,
    flag: PhantomData<F>,
}

impl<F> Clone for ListenArgs<F> {
    fn clone(&self) -> Self {
        ListenArgs {
            listen: self.listen,
            flag: PhantomData,
        }
    }
}

impl<F> std::fmt::Debug for ListenArgs<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenArgs")
            .field("listen", &self.listen)
            .finish()
    }
}

const LISTEN_ID: &str = "listen";

impl<F: ListenFlag> clap::FromArgMatches for ListenArgs<F> {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let listen = matches
            .get_one::<SocketAddr>(LISTEN_ID)
            .copied()
            .ok_or_else(|| {
                clap::Error::raw(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "--listen has no value",
                )
            })?;
        Ok(ListenArgs {
            listen,
            flag: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        if let Some(listen) = matches.get_one::<SocketAddr>(LISTEN_ID) {
            self.listen = *listen;
        }
        Ok(())
    }
}

impl<F: ListenFlag> clap::Args for ListenArgs<F> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.arg(
            clap::Arg::new(LISTEN_ID)
                .long("listen")
                .value_name("ADDR")
                .env(F::ENV)
                .default_value(F::DEFAULT)
                .value_parser(clap::value_parser!(SocketAddr))
                .help("Address of /healthz, /readyz and /metrics"),
        )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Every environment variable `cmd` and its subcommands read for a flag:
/// the manifests set flags through these, so a daemon's tests check that
/// none went missing.
pub fn flag_env_vars(cmd: &clap::Command) -> std::collections::BTreeSet<String> {
    let mut out: std::collections::BTreeSet<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    for sub in cmd.get_subcommands() {
        out.extend(flag_env_vars(sub));
    }
    out
}

/// The `GPUTOPO_*` variables a manifest sets (`- name: GPUTOPO_...`).
pub fn manifest_env_vars(manifest: &str) -> std::collections::BTreeSet<String> {
    manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- name: "))
        .map(str::trim)
        .filter(|n| n.starts_with("GPUTOPO_"))
        .map(str::to_string)
        .collect()
}

/// What went missing between a daemon's flags and what it documents: each
/// variable in `expected` that no flag reads any more (or a flag's variable
/// not in it), and each `GPUTOPO_*` that a manifest under `repo` sets and no
/// flag reads. Empty when they agree; the daemons' tests assert that.
pub fn env_var_drift(
    cmd: &clap::Command,
    expected: &[&str],
    repo: &std::path::Path,
    manifests: &[&str],
) -> Vec<String> {
    let accepted = flag_env_vars(cmd);
    let expected: std::collections::BTreeSet<String> =
        expected.iter().map(|v| v.to_string()).collect();
    let mut drift: Vec<String> = expected
        .difference(&accepted)
        .map(|v| format!("{v} is documented and no flag reads it"))
        .chain(
            accepted
                .difference(&expected)
                .map(|v| format!("{v} is read by a flag and not in the list")),
        )
        .collect();
    for manifest in manifests {
        match std::fs::read_to_string(repo.join(manifest)) {
            Ok(text) => drift.extend(
                manifest_env_vars(&text)
                    .into_iter()
                    .filter(|v| !accepted.contains(v))
                    .map(|v| format!("{manifest} sets {v}, which no flag reads")),
            ),
            Err(e) => drift.push(format!("{manifest} cannot be read: {e}")),
        }
    }
    drift
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    struct Probe;
    impl ListenFlag for Probe {
        const ENV: &'static str = "GPUTOPO_OPS_TEST_LISTEN";
        const DEFAULT: &'static str = "0.0.0.0:9999";
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        ops: ListenArgs<Probe>,
    }

    #[test]
    fn listen_takes_its_default_its_flag_and_refuses_a_non_address() {
        let cli = Cli::try_parse_from(["d"]).expect("defaults");
        assert_eq!(cli.ops.listen, "0.0.0.0:9999".parse().expect("an address"));
        let cli = Cli::try_parse_from(["d", "--listen", "127.0.0.1:1"]).expect("the flag");
        assert_eq!(cli.ops.listen, "127.0.0.1:1".parse().expect("an address"));
        assert!(Cli::try_parse_from(["d", "--listen", "nowhere"]).is_err());
        let help = Cli::try_parse_from(["d", "--help"])
            .err()
            .expect("help")
            .to_string();
        assert!(help.contains("[env: GPUTOPO_OPS_TEST_LISTEN=]"), "{help}");
        let vars = flag_env_vars(&<Cli as clap::CommandFactory>::command());
        assert_eq!(
            vars.into_iter().collect::<Vec<_>>(),
            ["GPUTOPO_OPS_TEST_LISTEN"]
        );
    }

    #[derive(Parser)]
    struct LogCli {
        #[command(flatten)]
        log: LogArgs,
    }

    /// Set in the child process [`log_format_reads_its_environment_twin`] starts.
    const CHILD: &str = "GPUTOPO_OPS_TEST_LOG_FORMAT_CHILD";

    #[test]
    fn log_format_takes_its_flag_and_refuses_other_formats() {
        let cli = LogCli::try_parse_from(["d", "--log-format", "json"]).expect("json");
        assert_eq!(cli.log.log_format, LogFormat::Json);
        let cli = LogCli::try_parse_from(["d", "--log-format", "text"]).expect("text");
        assert_eq!(cli.log.log_format, LogFormat::Text);
        let err = LogCli::try_parse_from(["d", "--log-format", "xml"])
            .err()
            .expect("xml is refused");
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
        let vars = flag_env_vars(&<LogCli as clap::CommandFactory>::command());
        assert_eq!(vars.into_iter().collect::<Vec<_>>(), ["GPUTOPO_LOG_FORMAT"]);
    }

    /// The variable is read in a child process (this test binary run again):
    /// setting one in the multi-threaded test process is unsound.
    #[test]
    fn log_format_reads_its_environment_twin() {
        if std::env::var_os(CHILD).is_some() {
            match LogCli::try_parse_from(["d"]) {
                Ok(cli) => println!("parsed {:?}", cli.log.log_format),
                Err(e) => println!("refused {:?}", e.kind()),
            }
            return;
        }
        let child = |value: &str| {
            let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
                .args([
                    "--exact",
                    "daemon::tests::log_format_reads_its_environment_twin",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .env("GPUTOPO_LOG_FORMAT", value)
                .output()
                .expect("the test binary runs");
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        assert!(child("json").contains("parsed Json"));
        assert!(child("text").contains("parsed Text"));
        assert!(child("xml").contains("refused InvalidValue"));
    }

    #[test]
    fn manifests_name_their_variables() {
        let yaml = "env:\n  - name: GPUTOPO_LISTEN\n    value: x\n  - name: NODE_NAME\n";
        let vars = manifest_env_vars(yaml);
        assert_eq!(vars.into_iter().collect::<Vec<_>>(), ["GPUTOPO_LISTEN"]);
    }
}
