//! Side by side with kube-scheduler (issue #5, item 8): the same kwok GPU
//! cluster and the same seeded pods, once for the stock kube-scheduler and
//! once for gputopo-scheduler, each on a fresh control plane (etcd,
//! kube-apiserver, kwok) of its own. It measures bound pods per second,
//! where the gangs landed (leaves spanned), GPU-set quality of multi-GPU
//! pods, and the nodes left with stranded GPUs; prints a table and writes
//! every figure, and every pod's placement, as JSON.
//!
//! ```sh
//! export GPUTOPO_BIN_DIR=$(scripts/control-plane-binaries | tail -1)
//! cargo build --release -p gputopo-scheduler -p gputopo-testenv --bins
//! target/release/gputopo-sidebyside --nodes 1000 --json results/sidebyside/sidebyside-1000.json
//! ```
//!
//! The cluster: `--nodes` kwok nodes of 8 GPUs, `--nodes-per-leaf` to a leaf
//! and `--leaves-per-spine` to a spine (`gputopo.dev/leaf`,
//! `gputopo.dev/spine`); leaf i holds one machine model, cycling through HGX
//! H100, DGX A100, DGX-1 V100 and an 8× RTX 4090 two-socket PCIe box, each
//! built from its recorded `nvidia-smi topo -m` with the agent's parser,
//! with the `GpuTopology` and labels the agent would publish. No controller
//! manager runs: the benchmark lifts the `not-ready` taint new nodes get
//! itself (kwok keeps them Ready), which spares two cores the controllers'
//! work on a thousand nodes. kube-scheduler and gputopo-scheduler meet the
//! same nodes.
//!
//! The workload (`--fill` of the GPUs, `--seed`): 45 % of the GPU demand in
//! gangs of 2 to 16 8-GPU pods (`gputopo.dev/gang` annotations), 25 % 4-GPU
//! DDP pods, 15 % 2-GPU and 15 % 1-GPU pods, jobs shuffled, each pod asking
//! 10 CPUs and 96 GiB per GPU; submitted with `--concurrency` creates in
//! flight. kube-scheduler gets the same pods with `schedulerName:
//! default-scheduler`: the annotations mean nothing to it (no gangs).
//! `--mix one-gpu` submits the same GPU demand as 1-GPU pods only (the shape
//! of `scheduler_perf`'s SchedulingBasic: a scheduler's raw rate).

mod sidebyside;

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde::Serialize;
use sidebyside::analyze::{self, Analysis, Throughput};
use sidebyside::cluster;
use sidebyside::run::{self, Settings, Trial};
use sidebyside::topo::{DeviceModel, MODEL_DEFS, Model};
use sidebyside::which::Which;
use sidebyside::workload;
use std::path::PathBuf;

/// kube-scheduler and gputopo-scheduler on the same kwok GPU cluster and pods.
#[derive(Parser)]
#[command(name = "gputopo-sidebyside")]
struct Cli {
    /// kwok nodes of 8 GPUs.
    #[arg(long, env = "GPUTOPO_SIDEBYSIDE_NODES", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    nodes: u64,
    /// Nodes per leaf.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    nodes_per_leaf: u64,
    /// Leaves per spine.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    leaves_per_spine: u64,
    /// GPU demand over GPU capacity, in (0, 2].
    #[arg(long, default_value_t = 0.9, value_parser = fill_fraction)]
    fill: f64,
    /// Workload seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Which schedulers, in order (kube-scheduler, gputopo-scheduler).
    #[arg(long, value_delimiter = ',', default_value = "kube-scheduler,gputopo-scheduler", value_parser = which)]
    schedulers: Vec<Which>,
    /// The gputopo-scheduler binary (default: beside this one).
    #[arg(long, value_name = "PATH")]
    scheduler: Option<PathBuf>,
    /// Recorded hardware (default: the repository's fixtures/).
    #[arg(long, value_name = "DIR")]
    fixtures: Option<PathBuf>,
    /// Create every pod first, then start the scheduler (its drain rate alone).
    #[arg(long)]
    backlog: bool,
    /// Create requests in flight.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Longest wait for one scheduler's pods, seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// End once every pod is bound or reported and no bind came for this
    /// many seconds.
    #[arg(long, default_value_t = 15)]
    quiet: u64,
    /// kube-scheduler's client QPS and burst (5000 as scheduler_perf; the
    /// stock default is 50/100).
    #[arg(long, default_value_t = 5000)]
    kube_scheduler_qps: u32,
    /// Leave kube-scheduler's requests to API Priority and Fairness
    /// (default: exempt, like gputopo's admin client).
    #[arg(long)]
    kube_scheduler_apf: bool,
    /// Also submit this many pods of 9 GPUs, which fit no node (for tests).
    #[arg(long, default_value_t = 0)]
    too_big: usize,
    /// The workload: `mixed` (gangs, 4-, 2- and 1-GPU pods) or `one-gpu`
    /// (1-GPU pods only, like scheduler_perf's SchedulingBasic).
    #[arg(long, value_enum, default_value = "mixed")]
    mix: workload::Mix,
    /// Copy each control plane's logs (audit log, components) to DIR/<scheduler>/.
    #[arg(long, value_name = "DIR")]
    keep_logs: Option<PathBuf>,
    /// Write every figure and every pod's placement as JSON.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

fn fill_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 2.0 => Ok(f),
        _ => Err(format!("{s:?} is not a fraction in (0, 2]")),
    }
}

fn which(s: &str) -> Result<Which, String> {
    match s.trim() {
        "kube-scheduler" | "stock" | "default-scheduler" => Ok(Which::Stock),
        "gputopo-scheduler" | "gputopo" => Ok(Which::Gputopo),
        other => Err(format!(
            "unknown scheduler {other:?}; accepted: kube-scheduler, gputopo-scheduler"
        )),
    }
}

struct Args {
    settings: Settings,
    schedulers: Vec<Which>,
    json: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let cli = Cli::parse();
    let exe_dir = std::env::current_exe()?
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let settings = Settings {
        nodes: cli.nodes as usize,
        nodes_per_leaf: cli.nodes_per_leaf as usize,
        leaves_per_spine: cli.leaves_per_spine as usize,
        fill: cli.fill,
        seed: cli.seed,
        too_big: cli.too_big,
        mix: cli.mix,
        backlog: cli.backlog,
        concurrency: cli.concurrency,
        timeout_s: cli.timeout,
        quiet_s: cli.quiet,
        kube_scheduler_qps: cli.kube_scheduler_qps,
        kube_scheduler_exempt: !cli.kube_scheduler_apf,
        gputopo_scheduler: cli
            .scheduler
            .unwrap_or_else(|| exe_dir.join("gputopo-scheduler")),
        fixtures: cli
            .fixtures
            .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures"))),
        keep_logs: cli.keep_logs,
    };
    if cli.schedulers.contains(&Which::Gputopo) && !settings.gputopo_scheduler.is_file() {
        bail!(
            "{} not found: build it (cargo build --release -p gputopo-scheduler) or pass --scheduler PATH",
            settings.gputopo_scheduler.display()
        );
    }
    Ok(Args {
        settings,
        schedulers: cli.schedulers,
        json: cli.json,
    })
}

/// The JSON document.
#[derive(Serialize)]
struct Report<'a> {
    command: String,
    machine: Machine,
    settings: &'a Settings,
    kubernetes: &'static str,
    models: Vec<ModelInfo>,
    workload: WorkloadInfo,
    definitions: Definitions,
    results: Vec<TrialReport<'a>>,
}

#[derive(Serialize)]
struct Machine {
    cpus: usize,
    loadavg_at_start: Option<f64>,
    memory_gib: Option<f64>,
}

#[derive(Serialize)]
struct ModelInfo {
    key: &'static str,
    description: &'static str,
    fixture: &'static str,
    nodes: usize,
    best_pair: String,
    best_quad: String,
}

#[derive(Serialize)]
struct WorkloadInfo {
    pods: usize,
    gpus: u32,
    gangs: usize,
    by_kind: std::collections::BTreeMap<String, (usize, u32)>,
}

#[derive(Serialize)]
struct Definitions {
    stranded: &'static str,
    stranded_for_pending: &'static str,
    throughput: &'static str,
    kube_scheduler_gpus: &'static str,
    set_quality: &'static str,
}

#[derive(Serialize)]
struct TrialReport<'a> {
    scheduler: Which,
    timings: &'a run::Timings,
    throughput: Throughput,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    scheduler_metrics: &'a std::collections::BTreeMap<String, f64>,
    analyses: Vec<Analysis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_writes: &'a Option<sidebyside::audit::ApiWrites>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logs: &'a Option<String>,
    pods: &'a [run::PodResult],
}

fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

/// How a row of the table reads its cell from one column.
type Cell<'f> = &'f dyn Fn(&Throughput, &Trial, &Analysis) -> String;
/// Prints one row of the table: its label and a cell per column.
type Row<'a> = dyn Fn(&str, Cell) + 'a;

/// The side-by-side table: a column per (trial, GPU choice), a row per measure.
fn print_table(trials: &[(&Trial, Throughput, Vec<Analysis>)]) {
    // One column per (trial, GPU choice).
    let mut cols: Vec<(String, &Throughput, &Trial, &Analysis)> = Vec::new();
    for (trial, tp, analyses) in trials {
        for a in analyses {
            let name = match trial.scheduler {
                Which::Stock => format!("kube-sched. ({})", a.gpu_choice),
                Which::Gputopo => "gputopo-scheduler".to_string(),
            };
            cols.push((name, tp, trial, a));
        }
    }
    let width = 26;
    let mut header = format!("{:<44}", "");
    for c in &cols {
        header.push_str(&format!("{:>width$}", c.0));
    }
    println!("{header}");
    let row = |label: &str, f: Cell| {
        let mut line = format!("{label:<44}");
        for (_, tp, trial, a) in &cols {
            line.push_str(&format!("{:>width$}", f(tp, trial, a)));
        }
        println!("{line}");
    };
    throughput_rows(&row);
    placement_rows(&row);
    stranding_rows(&row);
    cost_rows(&row);
}

/// How fast pods were bound.
fn throughput_rows(row: &Row<'_>) {
    row("pods bound / submitted", &|tp, _, _| {
        format!("{} / {}", tp.bound, tp.pods)
    });
    row("bound pods/s, first create* to last bind", &|tp, _, _| {
        format!("{:.1}", tp.pods_per_s)
    });
    row("bound pods/s, steady (10-90 % of binds)", &|tp, _, _| {
        format!("{:.1}", tp.steady_pods_per_s)
    });
    row("bound pods/s, best 1 s window", &|tp, _, _| {
        format!("{:.0}", tp.peak_pods_per_s)
    });
    row("create to bind, s: p50 / p99", &|tp, _, _| {
        format!(
            "{:.1} / {:.1}",
            tp.create_to_bind_s[0], tp.create_to_bind_s[2]
        )
    });
    row("pods created/s (all creates)", &|tp, _, _| {
        format!("{:.1}", tp.created_per_s)
    });
    row("first create* to last bind, s", &|tp, _, _| {
        format!("{:.1}", tp.span_s)
    });
    row("wait ended", &|_, t, _| t.timings.ended.clone());
}

/// Where gangs and 2- and 4-GPU pods landed.
fn placement_rows(row: &Row<'_>) {
    row("gangs fully / partly / not bound", &|_, _, a| {
        format!(
            "{} / {} / {}",
            a.gangs.fully_bound, a.gangs.partially_bound, a.gangs.none_bound
        )
    });
    row("GPUs idle in partly bound gangs", &|_, _, a| {
        a.gangs.gpus_held_by_partial_gangs.to_string()
    });
    row("leaves per bound gang, mean / max", &|_, _, a| {
        format!("{:.2} / {}", a.gangs.leaves_mean, a.gangs.leaves_max)
    });
    row("gangs on the fewest leaves", &|_, _, a| {
        pct(a.gangs.on_fewest_leaves)
    });
    row("gangs under one spine", &|_, _, a| {
        pct(a.gangs.under_one_spine)
    });
    row("gangs on one machine model", &|_, _, a| {
        pct(a.gangs.one_model)
    });
    row("2-GPU pods on a best pair", &|_, _, a| {
        pct(a.two_gpu.optimal)
    });
    row("2-GPU pods on NVLink (NVLink nodes)", &|_, _, a| {
        pct(a.two_gpu.nvlink_ring)
    });
    row("4-GPU pods on a best set", &|_, _, a| {
        pct(a.four_gpu.optimal)
    });
    row("4-GPU pods, NVLink ring (NVLink nodes)", &|_, _, a| {
        pct(a.four_gpu.nvlink_ring)
    });
}

/// Free GPUs left unusable, and pods left pending.
fn stranding_rows(row: &Row<'_>) {
    row("nodes empty / full / partly used", &|_, _, a| {
        format!(
            "{} / {} / {}",
            a.stranding.nodes_empty, a.stranding.nodes_full, a.stranding.nodes_partial
        )
    });
    row("free GPUs / on partly used nodes", &|_, _, a| {
        format!(
            "{} / {}",
            a.stranding.free_gpus, a.stranding.free_gpus_on_partial_nodes
        )
    });
    row("stranded for the pending pods: nodes (GPUs)", &|_, _, a| {
        format!(
            "{} ({})",
            a.stranding.pending_stranded_nodes, a.stranding.pending_stranded_gpus
        )
    });
    row("stranded by topology: nodes (GPUs)", &|_, _, a| {
        format!(
            "{} ({})",
            a.stranding.stranded_nodes, a.stranding.stranded_gpus
        )
    });
    row("pods pending (GPUs)", &|_, _, a| {
        format!("{} ({})", a.pending.pods, a.pending.gpus)
    });
}

/// What the scheduler cost the API server and the machine, and what went wrong.
fn cost_rows(row: &Row<'_>) {
    row("scheduler API writes per bound pod", &|_, t, _| {
        t.api_writes
            .as_ref()
            .map_or("-".into(), |w| format!("{:.2}", w.writes_per_bound_pod))
    });
    row("  most in flight at once", &|_, t, _| {
        t.api_writes
            .as_ref()
            .map_or("-".into(), |w| w.max_in_flight.to_string())
    });
    row("scheduler peak RSS, MiB", &|_, t, _| {
        t.timings
            .scheduler_peak_rss_mib
            .map_or("-".into(), |m| format!("{m:.1}"))
    });
    row("  server time in them per second of binding", &|_, t, _| {
        t.api_writes
            .as_ref()
            .map_or("-".into(), |w| format!("{:.2} s", w.server_busy_ratio))
    });
    row("invariant violations", &|_, _, a| {
        a.violations.len().to_string()
    });
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let s = &args.settings;
    let loadavg_at_start = run::loadavg();
    let models: Vec<Model> = MODEL_DEFS
        .iter()
        .map(|d| Model::load(d, &s.fixtures))
        .collect::<Result<_>>()?;
    let nodes = cluster::layout(s.nodes, s.nodes_per_leaf, s.leaves_per_spine, &models);
    let plans = workload::generate(s.nodes, s.fill, s.seed, s.too_big, s.mix);
    eprintln!(
        "cluster: {} nodes ({} GPUs), {} leaves, {} spines; workload: {} pods, {} GPUs",
        nodes.len(),
        nodes.len() * 8,
        nodes.last().map_or(0, |n| n.leaf + 1),
        nodes.last().map_or(0, |n| n.spine + 1),
        plans.len(),
        plans.iter().map(|p| p.gpus).sum::<u32>()
    );

    let mut trials = Vec::new();
    for which in &args.schedulers {
        let trial = run::run_trial(*which, s, &models, &nodes, &plans).await?;
        trials.push(trial);
    }
    let analysed: Vec<(&Trial, Throughput, Vec<Analysis>)> = trials
        .iter()
        .map(|t| {
            let devices: Vec<Option<DeviceModel>> = match t.scheduler {
                Which::Stock => vec![Some(DeviceModel::FirstFit), Some(DeviceModel::BestEffort)],
                Which::Gputopo => vec![None],
            };
            let analyses = devices
                .into_iter()
                .map(|d| analyze::analyze(t, &nodes, &models, s.nodes_per_leaf, d))
                .collect();
            (t, analyze::throughput(t), analyses)
        })
        .collect();
    println!();
    print_table(&analysed);
    for (t, _, analyses) in &analysed {
        for a in analyses {
            for v in a.violations.iter().take(10) {
                println!("VIOLATION {} ({}): {v}", t.scheduler.name(), a.gpu_choice);
            }
        }
    }

    if let Some(path) = &args.json {
        let report = Report {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine: machine(loadavg_at_start),
            settings: s,
            kubernetes: gputopo_testenv::kubernetes_version(),
            models: model_infos(&models, &nodes),
            workload: workload_info(&plans)?,
            definitions: DEFINITIONS,
            results: analysed
                .iter()
                .map(|(t, tp, a)| TrialReport {
                    scheduler: t.scheduler,
                    timings: &t.timings,
                    throughput: tp.clone(),
                    scheduler_metrics: &t.scheduler_metrics,
                    analyses: a.clone(),
                    api_writes: &t.api_writes,
                    logs: &t.logs,
                    pods: &t.pods,
                })
                .collect(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The machine the benchmark ran on.
fn machine(loadavg_at_start: Option<f64>) -> Machine {
    Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg_at_start,
        memory_gib: std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            let kb: f64 = m.lines().next()?.split_whitespace().nth(1)?.parse().ok()?;
            Some((kb / 1024.0 / 1024.0 * 10.0).round() / 10.0)
        }),
    }
}

/// Each machine model: how many nodes have it and its best pair and quad.
fn model_infos(models: &[Model], nodes: &[cluster::NodePlan]) -> Vec<ModelInfo> {
    models
        .iter()
        .enumerate()
        .map(|(i, m)| ModelInfo {
            key: m.key,
            description: m.description,
            fixture: m.fixture,
            nodes: nodes.iter().filter(|n| n.model == i).count(),
            best_pair: m.best(2).map(|c| c.to_string()).unwrap_or_default(),
            best_quad: m.best(4).map(|c| c.to_string()).unwrap_or_default(),
        })
        .collect()
}

/// The workload's size, and its pods and GPUs per kind.
fn workload_info(plans: &[workload::PodPlan]) -> Result<WorkloadInfo> {
    let mut by_kind = std::collections::BTreeMap::new();
    for p in plans {
        let e = by_kind
            .entry(
                serde_json::to_value(p.kind)?
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
            .or_insert((0usize, 0u32));
        e.0 += 1;
        e.1 += p.gpus;
    }
    Ok(WorkloadInfo {
        pods: plans.len(),
        gpus: plans.iter().map(|p| p.gpus).sum(),
        gangs: plans
            .iter()
            .filter_map(|p| p.gang.as_ref().map(|g| &g.0))
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        by_kind,
    })
}

/// What the report's measures mean.
const DEFINITIONS: Definitions = Definitions {
    stranded: analyze::DEFINITION,
    stranded_for_pending: analyze::DEFINITION_PENDING,
    throughput: "Bind times are when the benchmark's pod watch first saw spec.nodeName set, measured from the first pod create request. pods_per_s = bound pods / (last bind - origin), the origin being the first create request, or with --backlog the scheduler ready (every pod already created); steady = binds between the 10th and 90th percentile bind over the time between them; create_to_bind_s = per pod, its create response to its bind (p50, p90, p99, max).",
    kube_scheduler_gpus: "kube-scheduler only counts nvidia.com/gpu; which GPUs a pod gets is chosen on the node by the kubelet and the device plugin, which kwok does not run. They are replayed per node in bind order: first-fit (lowest free indices) and best-effort (the free set maximising go-gpuallocator's pair-score sum, the NVIDIA device plugin's preferred allocation). gputopo-scheduler's sets are its gputopo.dev/assigned-gpus annotations.",
    set_quality: "A set is optimal when the weakest hop of its best ring equals that of the best set of the same size on an empty node of the same model; NVLink ring: every hop of the best ring is NVLink (counted on NVLink machines only).",
};
