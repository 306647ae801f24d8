//! `gputopo`: the operator's tool (docs/contract.md, "Command-line contract").
//!
//! Exit status: 0 done; 1 `place` found no free set that fits (with
//! `-o json`, `{"error": ".."}` on stdout); 2 bad input (a message on stderr
//! naming what was wrong and what is accepted).

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use gputopo::claims;
use gputopo::cluster::{self, Overrides};
use gputopo::draw;
use gputopo::manual::{self, Shell};
use gputopo::place::{self, PlaceRequest, parse_free, parse_level};
use gputopo::report::ExplainReport;
use gputopo::topology;
use gputopo_api::Collective;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_scheduler_core::dra::DraConfig;
use gputopo_scheduler_core::explain::explain_pod;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[path = "simulate/racks/cmd.rs"]
mod racks_cmd;
#[path = "simulate/cmd.rs"]
mod simulate_cmd;

/// Writes to stdout; a closed pipe (`| head`) ends the output quietly rather than panicking.
fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

#[derive(Parser)]
#[command(
    name = "gputopo",
    version,
    about = "Topology-aware GPU placement: inspect, place, simulate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Json,
    Text,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CollectiveArg {
    Ring,
    AllToAll,
}

#[derive(Subcommand)]
enum Command {
    /// The GPU set a request gets on one node, with its bottleneck, score and reasons.
    Place {
        /// A GpuTopology object or spec (JSON or YAML), an agent recording, or
        /// verbatim `nvidia-smi topo -m` text.
        #[arg(long)]
        topology: PathBuf,
        /// GPUs wanted.
        #[arg(long)]
        gpus: u32,
        /// The free GPUs, comma-separated (default: all).
        #[arg(long)]
        free: Option<String>,
        #[arg(long, value_enum, default_value = "ring")]
        collective: CollectiveArg,
        /// Every pair of the set joined by at least this many NVLinks: `2` or `NV2`.
        #[arg(long)]
        min_nvlink_level: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Every node's verdict for a pod on a cluster snapshot: chosen, feasible
    /// (score, GPUs, and for a pod with ResourceClaims the devices) or
    /// rejected (reason).
    Explain {
        /// A cluster snapshot file (see fixtures/clusters/) or a `kind: List` of
        /// Nodes, Pods, GpuTopologies, PodGroups, ResourceSlices,
        /// ResourceClaims and DeviceClasses.
        #[arg(long)]
        cluster: PathBuf,
        /// The pod, as a Pod object (YAML or JSON).
        #[arg(long)]
        pod: PathBuf,
        /// Network tiers: a preset (gputopo, topograph, aws, each +gpu-clique)
        /// or comma-separated label keys, outermost first.
        #[arg(long)]
        tiers: Option<String>,
        /// The moment nodes' kubelet readings are judged at (RFC 3339, e.g.
        /// the time the cluster was dumped); default: now.
        #[arg(long)]
        now: Option<Timestamp>,
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Replay a workload on a cluster with a placement policy (FGD protocol:
    /// arrivals shuffled by seed, failures counted, nothing evicted) and
    /// print GPU allocation and fragmentation against arrived demand.
    Simulate {
        /// An openb node list (`.csv`) or a cluster snapshot file (YAML).
        #[arg(long, required_unless_present = "scenario")]
        cluster: Option<PathBuf>,
        /// An openb pod list (`.csv`) or a workload YAML file (docs/cli.md, "Simulation").
        #[arg(long, required_unless_present = "scenario")]
        workload: Option<PathBuf>,
        /// random, dot-prod, gpu-clustering, gpu-packing, best-fit, fgd,
        /// k8s-default, gpuallocator or gputopo; with --scenario nvl72:
        /// gputopo, gputopo-flat, kueue-tas, kai or all (the default).
        #[arg(long, required_unless_present = "scenario")]
        policy: Option<String>,
        /// A built-in scenario instead of --cluster and --workload: `nvl72`,
        /// structured training gangs on GB200/GB300 NVL72 racks, four
        /// policies side by side (docs/benchmarks/structured-gangs.md).
        #[arg(long, value_parser = ["nvl72"], conflicts_with_all = ["cluster", "workload", "inflate", "order", "plot"])]
        scenario: Option<String>,
        /// --scenario nvl72: racks of 18 four-GPU trays (4 per leaf, 3 leaves per spine).
        #[arg(long, default_value_t = 36, requires = "scenario")]
        racks: usize,
        /// --scenario nvl72: hours of arrivals.
        #[arg(long, default_value_t = 336.0, requires = "scenario")]
        hours: f64,
        /// --scenario nvl72: gputopo-scheduler's gangs.scheduleTimeout, in
        /// seconds, for the two gputopo policies (default 600).
        #[arg(long, requires = "scenario")]
        gang_timeout: Option<u64>,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Resample pods (with replacement) until arrived demand reaches X × capacity.
        #[arg(long)]
        inflate: Option<f64>,
        /// Arrival order: shuffle (by seed; default for CSV) or arrival (by
        /// the workload's times, pods with a duration end; default for YAML).
        #[arg(long)]
        order: Option<String>,
        /// Write gpu-allocation.png and fragmentation.png into this folder.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Leave runtimeMs out, so that runs compare byte for byte.
        #[arg(long)]
        no_runtime: bool,
        #[arg(short = 'o', long, value_enum, default_value = "json")]
        output: Output,
    },
    /// Summarise a folder of `simulate -o json` results: summary.csv,
    /// summary.md and mean-curve charts per workload.
    SimulateReport {
        /// The folder of JSON results; or a summary.csv it wrote, to redraw
        /// that summary's charts (into plots/ beside it) without the runs.
        #[arg(long)]
        results: PathBuf,
        /// Published figures to put beside ours (fgd_expected_summary.csv).
        #[arg(long)]
        published: Option<PathBuf>,
    },
    /// Print a synthetic workload YAML for `simulate` (shares, 1–8 GPU pods,
    /// gangs, arrivals and durations).
    SimulateGen {
        #[arg(long, default_value_t = 200)]
        pods: u32,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Draw a node's wiring and who holds its GPUs, as SVG or PNG.
    ///
    /// GPUs by NUMA node, NVLink and XGMI links (width by link count; an
    /// NVSwitch as one hub), PCIe switches, host bridges and NICs, and each
    /// GPU's holder (docs/cli.md, "gputopo draw").
    Draw {
        /// A GpuTopology object (its status's allocations drawn too) or
        /// spec (JSON or YAML), an agent recording, or `nvidia-smi topo -m`,
        /// `rocm-smi --showtopo` or `amd-smi topology` text.
        #[arg(required_unless_present = "cluster", conflicts_with = "cluster")]
        topology: Option<PathBuf>,
        /// A `kind: List` of Nodes, Pods and GpuTopologies (`kubectl get
        /// nodes,pods,gputopologies -A -o yaml`): draws --node, with the
        /// pods bound to it.
        #[arg(long, requires = "node")]
        cluster: Option<PathBuf>,
        /// The node to draw from --cluster.
        #[arg(long, requires = "cluster")]
        node: Option<String>,
        /// With --cluster: the moment nodes' kubelet readings are judged at
        /// (RFC 3339); default: now.
        #[arg(long, requires = "cluster")]
        now: Option<Timestamp>,
        /// The picture: FILE.svg or FILE.png (the format is the extension's).
        #[arg(long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Print the GpuTopology CustomResourceDefinition, generated from the Rust types.
    Crd,
    /// Print the completion script for a shell, e.g.
    /// `gputopo completions bash > ~/.local/share/bash-completion/completions/gputopo`.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print gputopo's manual page, or write one per command into a folder.
    Man {
        /// Write gputopo.1 and one page per subcommand (gputopo-place.1, ...)
        /// into DIR, e.g. ~/.local/share/man/man1; without it, print
        /// gputopo.1 (roff, for `man -l -`).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Simulate {
            scenario: Some(_),
            policy,
            racks,
            hours,
            gang_timeout,
            seed,
            no_runtime,
            output,
            ..
        } => racks_cmd::run(&racks_cmd::Args {
            policy: policy.unwrap_or_else(|| "all".into()),
            racks,
            hours,
            gang_timeout,
            seed,
            no_runtime,
            json: output == Output::Json,
        }),
        Command::Simulate {
            cluster,
            workload,
            policy,
            seed,
            inflate,
            order,
            plot,
            no_runtime,
            output,
            ..
        } => simulate_cmd::run(simulate_cmd::Args {
            cluster: cluster.unwrap_or_default(),
            workload: workload.unwrap_or_default(),
            policy: policy.unwrap_or_default(),
            seed,
            inflate,
            order,
            plot,
            no_runtime,
            json: output == Output::Json,
        }),
        Command::SimulateReport { results, published } => {
            simulate_cmd::report(&results, published.as_deref())
        }
        Command::SimulateGen { pods, seed } => {
            out(&gputopo::simulate::generate::workload_yaml(pods, seed));
            ExitCode::SUCCESS
        }
        Command::Draw {
            topology,
            cluster,
            node,
            now,
            output,
        } => {
            let input = match (topology, cluster, node) {
                (_, Some(path), Some(node)) => draw::Input::Cluster { path, node, now },
                (Some(path), _, _) => draw::Input::File(path),
                // clap requires a topology or --cluster with --node.
                _ => return bad_input("draw", "give a topology file, or --cluster and --node"),
            };
            match draw::run(&input, &output) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => bad_input("draw", e),
            }
        }
        Command::Crd => {
            out(&gputopo_api::crd_yaml());
            ExitCode::SUCCESS
        }
        Command::Completions { shell } => {
            out(&manual::completions(Cli::command(), shell));
            ExitCode::SUCCESS
        }
        Command::Man { out: None } => {
            let pages = manual::pages(Cli::command());
            out(pages.first().map(|p| p.roff.as_str()).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Command::Man { out: Some(dir) } => match manual::write_pages(Cli::command(), &dir) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => bad_input("man", e),
        },
        Command::Place {
            topology,
            gpus,
            free,
            collective,
            min_nvlink_level,
            output,
        } => run_place(
            &topology,
            gpus,
            free.as_deref(),
            collective,
            min_nvlink_level.as_deref(),
            output,
        ),
        Command::Explain {
            cluster,
            pod,
            tiers,
            now,
            output,
        } => run_explain(&cluster, &pod, Overrides { tiers, now }, output),
    }
}

/// Bad input: a line on stderr, exit 2.
fn bad_input(command: &str, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("gputopo {command}: {message}");
    ExitCode::from(2)
}

fn run_place(
    path: &std::path::Path,
    gpus: u32,
    free: Option<&str>,
    collective: CollectiveArg,
    min_nvlink_level: Option<&str>,
    output: Output,
) -> ExitCode {
    let spec = match topology::load(path) {
        Ok(spec) => spec,
        Err(e) => return bad_input("place", e),
    };
    let free = match parse_free(free, &spec) {
        Ok(mask) => mask,
        Err(e) => return bad_input("place", e),
    };
    let min_nvlink_level = match min_nvlink_level.map(parse_level).transpose() {
        Ok(level) => level,
        Err(e) => return bad_input("place", e),
    };
    let request = PlaceRequest {
        gpus,
        collective: match collective {
            CollectiveArg::Ring => Collective::Ring,
            CollectiveArg::AllToAll => Collective::AllToAll,
        },
        min_nvlink_level,
        free,
    };
    match place::place(&spec, &request) {
        Err(e) => bad_input("place", e),
        Ok(Ok(placed)) => {
            match output {
                Output::Json => match serde_json::to_string_pretty(&placed) {
                    Ok(json) => out(&format!("{json}\n")),
                    Err(e) => return bad_input("place", e),
                },
                Output::Text => out(&format!(
                    "GPUs {}  bottleneck {}  score {}\n{}\n",
                    placed
                        .gpus
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    placed
                        .bottleneck
                        .as_deref()
                        .unwrap_or("none (a single GPU)"),
                    placed.score,
                    placed.explanation
                )),
            }
            ExitCode::SUCCESS
        }
        Ok(Err(no_fit)) => {
            if output == Output::Json {
                out(&format!(
                    "{}\n",
                    serde_json::json!({ "error": no_fit.to_string() })
                ));
            }
            eprintln!(
                "gputopo place: no free set of {gpus} GPUs fits on {}: {no_fit}",
                spec.node_name
            );
            ExitCode::from(1)
        }
    }
}

fn run_explain(
    cluster_path: &std::path::Path,
    pod_path: &std::path::Path,
    overrides: Overrides,
    output: Output,
) -> ExitCode {
    let cluster = match cluster::load(cluster_path, &overrides) {
        Ok(c) => c,
        Err(e) => return bad_input("explain", e),
    };
    for warning in cluster.snapshot.warnings() {
        eprintln!("gputopo explain: warning: {warning}");
    }
    let pod = match cluster::load_pod(pod_path) {
        Ok(p) => p,
        Err(e) => return bad_input("explain", e),
    };
    let explanation = if claims::uses_claims(&pod) {
        match claims::explain_pod_claims(&cluster, &pod, &DraConfig::default()) {
            Ok((explanation, warnings)) => {
                for warning in warnings {
                    eprintln!("gputopo explain: warning: {warning}");
                }
                explanation
            }
            Err(e) => return bad_input("explain", format!("{}: {e}", pod_path.display())),
        }
    } else {
        explain_pod(&cluster.snapshot, &pod, &cluster.config)
    };
    // A malformed pod is bad input, not a verdict about nodes.
    if let Some(u) = explanation.decision.unschedulable()
        && u.invalid_pod.is_some()
    {
        return bad_input("explain", format!("{}: {}", pod_path.display(), u.message));
    }
    let mut report = ExplainReport::new(&explanation, &cluster.reports);
    if let Ok(pending) = gputopo_scheduler_core::pod::PendingPod::from_k8s(&pod) {
        report.gang = gputopo::gang_report::gang_report(&cluster, &pending);
    }
    match output {
        Output::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => out(&format!("{json}\n")),
            Err(e) => return bad_input("explain", e),
        },
        Output::Text => out(&report.text()),
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// Every subcommand's name, and every long flag of each, from the
    /// command line itself.
    fn subcommands() -> Vec<(String, Vec<String>)> {
        Cli::command()
            .get_subcommands()
            .map(|s| {
                let flags = s
                    .get_arguments()
                    .filter(|a| !a.is_hide_set())
                    .filter_map(|a| a.get_long().map(str::to_string))
                    .collect();
                (s.get_name().to_string(), flags)
            })
            .collect()
    }

    #[test]
    fn every_shells_completion_names_every_subcommand() {
        let subs = subcommands();
        assert!(subs.len() >= 8, "{subs:?}");
        for shell in Shell::value_variants() {
            let script = manual::completions(Cli::command(), *shell);
            for (name, _) in &subs {
                assert!(script.contains(name.as_str()), "{shell}: no {name}");
            }
        }
        // bash also completes each subcommand's flags.
        let bash = manual::completions(Cli::command(), Shell::Bash);
        for (name, flags) in &subs {
            for flag in flags {
                assert!(bash.contains(&format!("--{flag}")), "bash: {name} --{flag}");
            }
        }
    }

    #[test]
    fn the_manual_has_every_subcommand_and_flag() {
        let pages = manual::pages(Cli::command());
        let top = &pages[0];
        assert_eq!(top.file_name, "gputopo.1");
        assert!(top.roff.contains(".TH gputopo 1"), "{}", top.roff);
        for (name, flags) in subcommands() {
            let file = format!("gputopo-{name}.1");
            let page = pages
                .iter()
                .find(|p| p.file_name == file)
                .unwrap_or_else(|| panic!("no {file}"));
            // The top page names it; its own page lists each flag (roff
            // escapes every '-').
            let roff_name = format!("gputopo\\-{}(1)", name.replace('-', "\\-"));
            assert!(top.roff.contains(&roff_name), "gputopo.1 lacks {roff_name}");
            for flag in flags {
                let roff_flag = format!("\\-\\-{}", flag.replace('-', "\\-"));
                assert!(page.roff.contains(&roff_flag), "{file} lacks --{flag}");
            }
        }
        assert_eq!(pages.len(), subcommands().len() + 1);
    }

    #[test]
    fn man_out_writes_a_page_per_command() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let folder = dir.path().join("man1");
        let written = manual::write_pages(Cli::command(), &folder).expect("written");
        assert_eq!(written.len(), subcommands().len() + 1);
        for path in written {
            let text = std::fs::read_to_string(&path).expect("a page");
            assert!(text.contains(".SH NAME"), "{}", path.display());
        }
    }
}
