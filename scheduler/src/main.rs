//! `gputopo-scheduler`: the secondary scheduler's command line.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use gputopo_scheduler::Settings;
use gputopo_scheduler::scheduler::Scheduler;
use gputopo_scheduler::serve::{Metrics, router};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::signal::unix::{SignalKind, signal};
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
}

#[derive(Subcommand)]
enum Command {
    /// Watch the cluster and schedule pods whose spec.schedulerName is ours.
    /// The API server is found as kubectl finds it (KUBECONFIG, ~/.kube/config,
    /// or the in-cluster service account).
    Run(RunArgs),
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
    /// YAML configuration file (see the README: network tiers, weights,
    /// Topology Manager policy, backoff).
    #[arg(long, value_name = "FILE", env = "GPUTOPO_SCHEDULER_CONFIG")]
    config: Option<PathBuf>,
    /// Address for /healthz, /readyz and /metrics.
    #[arg(
        long,
        value_name = "ADDR",
        env = "GPUTOPO_SCHEDULER_LISTEN",
        default_value = "0.0.0.0:10261"
    )]
    listen: SocketAddr,
    /// Log lines as JSON instead of text (the level comes from RUST_LOG, default info).
    #[arg(long, env = "GPUTOPO_SCHEDULER_LOG_JSON")]
    log_json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Command::Run(args) = cli.command;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if args.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .and_then(|rt| rt.block_on(run(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gputopo-scheduler: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> Result<()> {
    let mut settings = match &args.config {
        Some(file) => Settings::from_file(file)?,
        None => Settings::default(),
    };
    if !args.scheduler_name.is_empty() {
        settings.scheduler_names = args.scheduler_name.clone();
    }
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server (KUBECONFIG, ~/.kube/config or in-cluster)")?;
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(gputopo_scheduler::serve::readiness());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    info!(listen = %args.listen, "serving /healthz, /readyz, /metrics");
    let app = router(metrics.clone(), readiness.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            error!("HTTP server stopped: {e}");
        }
    });
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => info!("SIGTERM"),
            _ = tokio::signal::ctrl_c() => info!("interrupted"),
        }
    };
    Scheduler::new(client, settings, metrics)
        .run(readiness, shutdown)
        .await
        .context("scheduling")?;
    Ok(())
}
