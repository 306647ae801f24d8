//! The `simulate`, `simulate-report` commands of the binary (anyhow lives here only).

use anyhow::{Context, Result};
use gputopo::simulate::plot::{charts, read_results, summary_charts};
use gputopo::simulate::policy::PolicyKind;
use gputopo::simulate::{self, Order, SimOptions, SimResult};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub struct Args {
    pub cluster: PathBuf,
    pub workload: PathBuf,
    pub policy: String,
    pub seed: u64,
    pub inflate: Option<f64>,
    pub order: Option<String>,
    pub plot: Option<PathBuf>,
    pub no_runtime: bool,
    pub json: bool,
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub fn run(args: Args) -> ExitCode {
    match run_inner(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gputopo simulate: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(args: &Args) -> Result<()> {
    let policy = PolicyKind::parse(&args.policy)?;
    let order = match args.order.as_deref() {
        None if simulate::input::is_csv(&args.workload) => Order::Shuffle,
        None => Order::Arrival,
        Some("shuffle") => Order::Shuffle,
        Some("arrival") => Order::Arrival,
        Some(other) => anyhow::bail!("--order {other:?}: accepted: shuffle, arrival"),
    };
    let mut cluster = simulate::load_cluster(&args.cluster)?;
    let workload = simulate::load_workload(&args.workload, &mut cluster)?;
    let options = SimOptions {
        policy,
        seed: args.seed,
        inflate: args.inflate,
        order,
        popularity_pct: 95.0,
        progress: std::io::stderr().is_terminal(),
        omit_runtime: args.no_runtime,
    };
    let mut result = simulate::simulate(&cluster, &workload, &options)?;
    result.cluster = stem(&args.cluster);
    result.workload = stem(&args.workload);
    if let Some(dir) = &args.plot {
        let title = format!(
            "{} on {}, seed {}",
            result.workload, result.cluster, result.seed
        );
        charts(dir, &title, std::slice::from_ref(&result))?;
    }
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&result)?)
    } else {
        text_summary(&result)
    };
    super::out(&text);
    Ok(())
}

fn text_summary(r: &SimResult) -> String {
    let mut s = format!(
        "{} seed {} on {} ({} GPUs): placed {} failed {} (GPU pods failed {})\narrived%  alloc%   frag%\n",
        r.policy, r.seed, r.cluster, r.total_gpus, r.pods_placed, r.pods_failed, r.gpu_pods_failed
    );
    for p in &r.points {
        let _ = writeln!(
            s,
            "{:>8}  {:>6.2}  {:>6.2}",
            p.arrived_pct, p.gpu_allocation_pct, p.fragmented_gpu_pct
        );
    }
    for d in &r.whole_domains_free {
        let _ = writeln!(
            s,
            "whole {} domains free (of {}): {} at start, mean {:.1}, least {}, {} at the last arrival",
            d.tier, d.domains, d.at_start, d.mean, d.min, d.at_end
        );
    }
    s
}

/// FGD's names for the policies it published.
fn published_name(policy: &str) -> Option<&'static str> {
    Some(match policy {
        "random" => "01-Random",
        "dot-prod" => "02-DotProd",
        "gpu-clustering" => "03-GpuClustering",
        "gpu-packing" => "04-GpuPacking",
        "best-fit" => "05-BestFit",
        "fgd" => "06-FGD",
        _ => return None,
    })
}

/// (workload, published policy, arrived %) → (alloc mean, frag over total mean).
type Published = BTreeMap<(String, String, u32), (f64, f64)>;

/// Reads `fgd_expected_summary.csv`.
fn read_published(path: &Path) -> Result<Published> {
    let mut reader = csv::Reader::from_path(path).with_context(|| path.display().to_string())?;
    let mut map = BTreeMap::new();
    for (i, row) in reader.records().enumerate() {
        let row = row.with_context(|| format!("{}: row {}", path.display(), i + 2))?;
        let get = |k: usize| row.get(k).unwrap_or("");
        let parse = |k: usize| -> Result<f64> {
            get(k)
                .parse::<f64>()
                .with_context(|| format!("{}: line {}, column {}", path.display(), i + 2, k + 1))
        };
        map.insert(
            (get(0).to_string(), get(1).to_string(), parse(3)? as u32),
            (parse(4)?, parse(8)?),
        );
    }
    Ok(map)
}

/// Topology metrics (runs that report them), mean over seeds per workload
/// and policy.
fn topology_table(by_workload: &BTreeMap<String, Vec<SimResult>>) -> String {
    let mut md = String::new();
    for (workload, runs) in by_workload {
        // Trace runs (shuffled, synthesised wiring) are about allocation.
        if runs
            .iter()
            .all(|r| r.topology.is_none() || r.order != Order::Arrival)
        {
            continue;
        }
        let _ = write!(
            md,
            "\n## Topology metrics: {workload}\n\nMean over seeds. Optimal: multi-GPU pods on a set whose ring bottleneck is the best the node's free GPUs offered; rank: `LinkClass::rank` (SYS 1, NODE 2, PHB 3, PXB 4, PIX 5, XGMI-ROUTED 6, XGMI 7, NV1 8 … NV18 25); slots: complete 8-GPU NVLink slots left (mean and least over arrivals); queue and makespan in seconds.\n\n| policy | seeds | pods failed | multi-GPU pods | optimal % | mean bottleneck rank | SYS/NODE/PHB bottlenecks % | gangs over >1 leaf / placed | 8-GPU slots mean / min | queue p50 / p99 s | makespan s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
        );
        for kind in PolicyKind::ALL {
            let list: Vec<&SimResult> = runs
                .iter()
                .filter(|r| {
                    r.policy == kind.name() && r.topology.is_some() && r.order == Order::Arrival
                })
                .collect();
            if list.is_empty() {
                continue;
            }
            let n = list.len() as f64;
            let mean = |f: &dyn Fn(&SimResult) -> Option<f64>| -> String {
                let v: Vec<f64> = list.iter().filter_map(|r| f(r)).collect();
                if v.is_empty() {
                    "–".into()
                } else {
                    format!("{:.1}", v.iter().sum::<f64>() / v.len() as f64)
                }
            };
            let t = |r: &SimResult| r.topology.clone().unwrap_or_default();
            let slow = |r: &SimResult| {
                let t = t(r);
                let pcie: u64 = ["SYS", "NODE", "PHB"]
                    .iter()
                    .filter_map(|k| t.bottlenecks.get(*k))
                    .sum();
                (t.multi_gpu_pods > 0).then(|| pcie as f64 * 100.0 / t.multi_gpu_pods as f64)
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} / {} | {} |",
                kind.name(),
                list.len(),
                list.iter().map(|r| r.pods_failed).sum::<u64>() as f64 / n,
                mean(&|r| Some(t(r).multi_gpu_pods as f64)),
                mean(&|r| t(r).on_optimal_set_pct),
                mean(&|r| t(r).mean_bottleneck_rank),
                mean(&slow),
                mean(&|r| Some(t(r).gangs_spanning_leaves as f64)),
                mean(&|r| Some(t(r).gangs_placed as f64)),
                mean(&|r| t(r).full_nvlink_slots8_mean),
                mean(&|r| t(r).full_nvlink_slots8_min.map(|m| m as f64)),
                mean(&|r| r.queue_time_p50_s),
                mean(&|r| r.queue_time_p99_s),
                mean(&|r| r.makespan_s),
            );
        }
    }
    md
}

/// Whole network domains free (runs on clusters with tier labels), mean
/// over seeds per workload, policy and tier.
fn domains_table(by_workload: &BTreeMap<String, Vec<SimResult>>) -> String {
    let mut md = String::new();
    for (workload, runs) in by_workload {
        if runs.iter().all(|r| r.whole_domains_free.is_empty()) {
            continue;
        }
        let _ = write!(
            md,
            "\n## Whole domains free: {workload}\n\nMean over seeds. Per network tier, the domains with every GPU free: mean and least over the instants just after each arrival, and at the last arrival (of the tier's domains with GPUs).\n\n| policy | seeds | tier | domains | mean | least | at the last arrival |\n| --- | --- | --- | --- | --- | --- | --- |\n"
        );
        for kind in PolicyKind::ALL {
            let list: Vec<&SimResult> = runs
                .iter()
                .filter(|r| r.policy == kind.name() && !r.whole_domains_free.is_empty())
                .collect();
            let Some(first) = list.first() else { continue };
            let n = list.len() as f64;
            for (t, tier) in first.whole_domains_free.iter().enumerate() {
                let mean = |f: &dyn Fn(&simulate::WholeDomainsFree) -> f64| {
                    list.iter()
                        .filter_map(|r| r.whole_domains_free.get(t))
                        .map(f)
                        .sum::<f64>()
                        / n
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | `{}` | {} | {:.1} | {:.1} | {:.1} |",
                    kind.name(),
                    list.len(),
                    tier.tier,
                    tier.domains,
                    mean(&|d| d.mean),
                    mean(&|d| d.min as f64),
                    mean(&|d| d.at_end as f64),
                );
            }
        }
    }
    md
}

/// Policies × workloads at 100 % arrived, ours with the published figure
/// beside it, and per published policy the lists within one point.
fn pivot(at_100: &BTreeMap<(String, String), (f64, Option<f64>)>) -> String {
    let workloads: Vec<&String> = {
        let mut w: Vec<&String> = at_100.keys().map(|k| &k.1).collect();
        w.sort();
        w.dedup();
        w
    };
    let short = |w: &str| w.trim_start_matches("openb_pod_list_").to_string();
    let mut md =
        String::from("\n## Policies × workloads at 100 % arrived: ours (published)\n\n| policy |");
    for w in &workloads {
        let _ = write!(md, " {} |", short(w));
    }
    md.push_str(" within 1 point |\n| --- |");
    for _ in &workloads {
        md.push_str(" --- |");
    }
    md.push_str(" --- |\n");
    for kind in PolicyKind::ALL {
        let policy = kind.name();
        if !workloads
            .iter()
            .any(|w| at_100.contains_key(&(policy.to_string(), (*w).clone())))
        {
            continue;
        }
        let _ = write!(md, "| {policy} |");
        let (mut close, mut compared) = (0, 0);
        for w in &workloads {
            match at_100.get(&(policy.to_string(), (*w).clone())) {
                Some((ours, Some(p))) => {
                    compared += 1;
                    if (ours - p).abs() <= 1.0 {
                        close += 1;
                    }
                    let _ = write!(md, " {ours:.2} ({p:.2}) |");
                }
                Some((ours, None)) => {
                    let _ = write!(md, " {ours:.2} |");
                }
                None => md.push_str(" |"),
            }
        }
        if compared > 0 {
            let _ = writeln!(md, " {close} of {compared} |");
        } else {
            md.push_str(" – |\n");
        }
    }
    md
}

pub fn report(dir: &Path, published: Option<&Path>) -> ExitCode {
    match report_inner(dir, published) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gputopo simulate-report: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn report_inner(dir: &Path, published: Option<&Path>) -> Result<()> {
    // A summary.csv: its charts redrawn from its means, the runs not needed.
    if dir.is_file() {
        if published.is_some() {
            anyhow::bail!(
                "--published: only with a folder of results (a summary.csv already holds the published figures)"
            );
        }
        for path in summary_charts(dir)? {
            eprintln!("wrote {}", path.display());
        }
        return Ok(());
    }
    let results = read_results(dir)?;
    let published = published
        .map(read_published)
        .transpose()?
        .unwrap_or_default();
    let mut by_workload: BTreeMap<String, Vec<SimResult>> = BTreeMap::new();
    for r in results {
        by_workload.entry(r.workload.clone()).or_default().push(r);
    }
    let mut csv_text = String::from(
        "workload,policy,n_seeds,arrived_pct,gpu_alloc_pct_mean,gpu_alloc_pct_min,gpu_alloc_pct_max,frag_over_total_pct_mean,published_gpu_alloc_pct_mean,published_frag_over_total_pct_mean,mean_runtime_s\n",
    );
    let mut md = String::from(
        "# Simulation summary\n\nGPU allocation % at 100 % arrived demand, mean over seeds (min–max); published: FGD authors' cached results.\n\n| workload | policy | seeds | ours | published | Δ | frag % (ours / published) | runtime s |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    // (policy, workload) -> (ours, published) at 100 % arrived, for the pivot.
    let mut at_100: BTreeMap<(String, String), (f64, Option<f64>)> = BTreeMap::new();
    for (workload, runs) in &by_workload {
        let mut by_policy: BTreeMap<&str, Vec<&SimResult>> = BTreeMap::new();
        for r in runs {
            by_policy.entry(&r.policy).or_default().push(r);
        }
        let order: Vec<&str> = PolicyKind::ALL
            .iter()
            .map(|p| p.name())
            .filter(|p| by_policy.contains_key(p))
            .collect();
        for policy in order {
            let list = &by_policy[policy];
            let runtime = list
                .iter()
                .filter_map(|r| r.runtime_ms)
                .map(|ms| ms as f64 / 1000.0)
                .sum::<f64>()
                / list.len() as f64;
            for pct in (10..=130).step_by(10) {
                let vals: Vec<(f64, f64)> = list
                    .iter()
                    .filter_map(|r| r.points.iter().find(|p| p.arrived_pct == pct))
                    .map(|p| (p.gpu_allocation_pct, p.fragmented_gpu_pct))
                    .collect();
                if vals.is_empty() {
                    continue;
                }
                let n = vals.len() as f64;
                let mean = vals.iter().map(|v| v.0).sum::<f64>() / n;
                let min = vals.iter().map(|v| v.0).fold(f64::INFINITY, f64::min);
                let max = vals.iter().map(|v| v.0).fold(f64::NEG_INFINITY, f64::max);
                let frag = vals.iter().map(|v| v.1).sum::<f64>() / n;
                let pubd = published_name(policy)
                    .and_then(|p| published.get(&(workload.clone(), p.to_string(), pct)));
                let _ = writeln!(
                    csv_text,
                    "{workload},{policy},{},{pct},{mean:.2},{min:.2},{max:.2},{frag:.2},{},{},{runtime:.2}",
                    vals.len(),
                    pubd.map_or(String::new(), |p| format!("{:.2}", p.0)),
                    pubd.map_or(String::new(), |p| format!("{:.2}", p.1)),
                );
                if pct == 100 {
                    at_100.insert(
                        (policy.to_string(), workload.clone()),
                        (mean, pubd.map(|p| p.0)),
                    );
                    let _ = writeln!(
                        md,
                        "| {workload} | {policy} | {} | {mean:.2} ({min:.2}–{max:.2}) | {} | {} | {frag:.2} / {} | {runtime:.1} |",
                        vals.len(),
                        pubd.map_or("–".into(), |p| format!("{:.2}", p.0)),
                        pubd.map_or("–".into(), |p| format!("{:+.2}", mean - p.0)),
                        pubd.map_or("–".into(), |p| format!("{:.2}", p.1)),
                    );
                }
            }
        }
        charts(&dir.join("plots").join(workload), workload, runs)?;
    }
    md.push_str(&pivot(&at_100));
    md.push_str(&topology_table(&by_workload));
    md.push_str(&domains_table(&by_workload));
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| path.display().to_string())
    };
    write("summary.csv", &csv_text)?;
    write("summary.md", &md)?;
    Ok(())
}
