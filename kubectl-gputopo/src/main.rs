//! `kubectl-gputopo`: the kubectl plugin (`kubectl gputopo ...` finds it on
//! PATH). Parses the command line, reads the cluster once through the
//! library (`View`), prints the command's report as a table or JSON.
//! Exit status: 0 done; 1 an error (a line on stderr).

use anyhow::{Context as _, Result};
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use kubectl_gputopo::settings::{ConfigSource, DEFAULT_CONFIG_MAP, DEFAULT_NAMESPACE};
use kubectl_gputopo::view::View;
use kubectl_gputopo::{Scope, connect, events, explain, gangs, nodes, pending};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kubectl-gputopo",
    bin_name = "kubectl-gputopo",
    version,
    about = "gputopo's view of the live cluster: why a pod is where it is or pending, who holds which GPU, how gangs stand. Nothing is written."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    global: Global,
}

/// What every command that reads the cluster takes.
#[derive(Args)]
struct Global {
    /// The kubeconfig file (default: KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
    /// The scheduler's configuration file, instead of its ConfigMap.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The namespace of the scheduler's ConfigMap.
    #[arg(long, global = true, value_name = "NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    scheduler_namespace: String,
    /// The scheduler's ConfigMap (key config.yaml).
    #[arg(long, global = true, value_name = "NAME", default_value = DEFAULT_CONFIG_MAP)]
    config_map: String,
    /// spec.schedulerName values the scheduler serves (repeat, or
    /// comma-separated), as its own --scheduler-name: replaces the
    /// configuration's schedulerNames.
    #[arg(long, global = true, value_name = "NAME", value_delimiter = ',')]
    scheduler_name: Vec<String>,
    #[arg(short = 'o', long, global = true, value_enum, default_value = "text")]
    output: Output,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

/// `-n NS` or `-A`.
#[derive(Args)]
struct Namespaces {
    /// The namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    all_namespaces: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Why a pod is where it is (node, GPUs, bottleneck, the node's report),
    /// or what the scheduler decides for it now and every node's verdict.
    Explain {
        pod: String,
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
    /// Every pending pod of the scheduler, one line each with its reason, grouped.
    WhyPending(Namespaces),
    /// Each GPU node's wiring, domains, free GPUs, and who holds each GPU.
    Nodes { node: Option<String> },
    /// Each gang: members, bound and pending counts, nodes, domains, state.
    Gangs(Namespaces),
    /// Print the completion script for a shell.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page, or write one per command into a folder.
    Man(gputopo_ops::man::ManArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(*shell, &mut cmd, "kubectl-gputopo", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Man(args) => {
            return match gputopo_ops::man::run(Cli::command(), args) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => fail(e.into()),
            };
        }
        _ => {}
    }
    // Logs only where RUST_LOG asks: the scheduler's cycle logs as it decides.
    gputopo_ops::daemon::init_logging("off", gputopo_ops::daemon::LogFormat::Text);
    let result = gputopo_ops::daemon::runtime(Some(2))
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run(cli)));
    match result {
        Ok(text) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`| head`) ends the output quietly.
            let _ = stdout.write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn fail(e: anyhow::Error) -> ExitCode {
    eprintln!("kubectl-gputopo: {e:#}");
    ExitCode::FAILURE
}

async fn run(cli: Cli) -> Result<String> {
    let g = &cli.global;
    let client = connect::client(g.kubeconfig.as_deref(), g.context.as_deref()).await?;
    let source = match &g.config {
        Some(file) => ConfigSource::File(file.clone()),
        None => ConfigSource::ConfigMap {
            namespace: g.scheduler_namespace.clone(),
            name: g.config_map.clone(),
        },
    };
    let view = View::load(&client, &source, &g.scheduler_name).await?;
    let scope = |n: &Namespaces| match (&n.namespace, n.all_namespaces) {
        (_, true) => Scope::All,
        (Some(ns), false) => Scope::Namespace(ns.clone()),
        (None, false) => Scope::Namespace(client.default_namespace().to_string()),
    };
    let json = g.output == Output::Json;
    match &cli.command {
        Command::Explain { pod, namespace } => {
            let namespace = namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string());
            let mut report = explain::report(&view, &namespace, pod)?;
            let uid = view
                .cluster
                .pod(&namespace, pod)
                .and_then(|p| p.metadata.uid.clone());
            report.events = events::pod_events(&client, &namespace, pod, uid.as_deref())
                .await
                .context("listing the pod's events")?;
            print(json, &report, explain::ExplainReport::text)
        }
        Command::WhyPending(n) => print(
            json,
            &pending::report(&view, &scope(n)),
            pending::PendingReport::text,
        ),
        Command::Nodes { node } => print(
            json,
            &nodes::report(&view, node.as_deref())?,
            nodes::NodesReport::text,
        ),
        Command::Gangs(n) => print(
            json,
            &gangs::report(&view, &scope(n)),
            gangs::GangsReport::text,
        ),
        Command::Completions { .. } | Command::Man(_) => Ok(String::new()),
    }
}

/// The report as JSON, or as `text` reads it.
fn print<R: serde::Serialize>(json: bool, report: &R, text: fn(&R) -> String) -> Result<String> {
    Ok(if json {
        format!("{}\n", serde_json::to_string_pretty(report)?)
    } else {
        text(report)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_in_the_completions_and_the_manual() {
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "kubectl-gputopo",
            &mut bash,
        );
        let bash = String::from_utf8(bash).expect("UTF-8");
        let pages = gputopo_ops::man::pages(Cli::command());
        for sub in ["explain", "why-pending", "nodes", "gangs"] {
            assert!(bash.contains(sub), "bash completion lacks {sub}");
            let file = format!("kubectl-gputopo-{sub}.1");
            assert!(pages.iter().any(|p| p.file_name == file), "no {file}");
        }
        assert!(bash.contains("--all-namespaces") && bash.contains("--config-map"));
    }

    #[test]
    fn namespace_and_all_namespaces_exclude_each_other() {
        let err = Cli::try_parse_from(["kubectl-gputopo", "why-pending", "-n", "a", "-A"]);
        assert!(err.is_err());
        let ok = Cli::try_parse_from(["kubectl-gputopo", "gangs", "-A", "-o", "json"]);
        assert!(ok.is_ok());
    }
}
