//! Dynamic Resource Allocation side by side: the same kwok cluster, whose
//! GPUs only NVIDIA's DRA driver publishes (the ResourceSlices it would
//! publish for recorded machines), and the same ResourceClaims, allocated
//! once by the stock kube-scheduler's DRA plugin and once by
//! gputopo-scheduler, each on a fresh control plane. It measures, for the
//! claims of two or more GPUs, the share allocated on an optimal set (the
//! best ring bottleneck any set of that size reaches on the node's model),
//! the bottleneck link distribution and the NUMA nodes spanned; prints a
//! Markdown table and writes every claim's allocation as JSON.
//!
//! ```sh
//! export GPUTOPO_BIN_DIR=$(scripts/control-plane-binaries | tail -1)
//! cargo build --release -p gputopo-scheduler -p gputopo-testenv --bins
//! target/release/gputopo-dra-sidebyside --json results/sidebyside/dra-sidebyside.json
//! ```
//!
//! The cluster: `--nodes-per-model` kwok nodes of each model (HGX H100 and
//! DGX A100 on NVSwitch, DGX-1 V100's hybrid cube-mesh, an 8× RTX 4090
//! two-socket PCIe box, 4× A100 PCIe in NVLink-bridged pairs). The
//! workload (`--seed`, `--fill` of the GPUs): claims of 1, 2, 4 and 8 GPUs
//! (a claim never larger than the smallest node that could hold it), each
//! with one pod, created in the same order for both schedulers. No
//! controller manager runs: the claims are named (no template), and the
//! benchmark lifts the not-ready taint itself.

#[path = "bench/args.rs"]
mod args;
#[allow(dead_code)]
#[path = "sidebyside/cluster.rs"]
mod cluster;
#[allow(dead_code)] // the device-plugin side by side's models; the DRA one uses a part
#[path = "sidebyside/topo.rs"]
mod topo;

use anyhow::{Context, Result, bail};
use clap::Parser;
use gputopo_api::{GpuTopology, LinkClass};
use gputopo_testenv::TestEnv;
use gputopo_topology::dra_slice::{DriverFacts, nvidia_resource_slice};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use topo::{Model, ModelDef, mask_of};

/// kube-scheduler and gputopo-scheduler allocating the same claims.
#[derive(Parser)]
#[command(name = "gputopo-dra-sidebyside")]
struct Cli {
    /// kwok nodes of each machine model.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    nodes_per_model: u64,
    /// GPU demand over GPU capacity, in (0, 1].
    #[arg(long, default_value_t = 0.85, value_parser = fill_fraction)]
    fill: f64,
    /// Workload seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The gputopo-scheduler binary (default: beside this one).
    #[arg(long, value_name = "PATH")]
    scheduler: Option<PathBuf>,
    /// Recorded hardware (default: the repository's fixtures/).
    #[arg(long, value_name = "DIR")]
    fixtures: Option<PathBuf>,
    /// Longest wait for one scheduler's pods, seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Write every figure and every claim's allocation as JSON.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

fn fill_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("{s:?} is not a fraction in (0, 1]")),
    }
}

/// The machine models, with what NVIDIA's driver says of their GPUs.
const MODELS: [(ModelDef, &str, &str); 5] = [
    (
        ModelDef {
            key: "hgx-h100",
            description: "HGX H100 SXM, 8 GPUs on NVSwitch (NV18 every pair)",
            fixture: "nvidia/hgx-h100-80gb-hbm3-8gpu-12nic-driver580-header-no-leading-tab-topo-m.txt",
        },
        "NVIDIA H100 80GB HBM3",
        "80Gi",
    ),
    (
        ModelDef {
            key: "dgx-a100",
            description: "DGX A100, 8 GPUs on NVSwitch (NV12 every pair)",
            fixture: "nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt",
        },
        "NVIDIA A100-SXM4-40GB",
        "40Gi",
    ),
    (
        ModelDef {
            key: "dgx1-v100",
            description: "DGX-1 V100, 8 GPUs in a hybrid cube-mesh (NV1/NV2, some pairs SYS)",
            fixture: "nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt",
        },
        "Tesla V100-SXM2-32GB",
        "32Gi",
    ),
    (
        ModelDef {
            key: "pcie-4090",
            description: "8x RTX 4090 PCIe, two sockets (PHB pairs, NODE, SYS across sockets)",
            fixture: "nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt",
        },
        "NVIDIA GeForce RTX 4090",
        "24Gi",
    ),
    (
        ModelDef {
            key: "a100-pcie-bridged",
            description: "4x A100 80GB PCIe, NVLink bridges in pairs (NV12), SYS across pairs",
            fixture: "nvidia/a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt",
        },
        "NVIDIA A100 80GB PCIe",
        "80Gi",
    ),
];

/// One claim of the workload and its pod.
#[derive(Clone, Debug, Serialize)]
struct ClaimPlan {
    name: String,
    gpus: u32,
}

/// Claims of 1 (15 %), 2 (30 %), 4 (35 %) and 8 (20 %) GPUs, by count,
/// until `fill` of `capacity` GPUs is asked for.
fn workload(capacity: u32, fill: f64, seed: u64) -> Vec<ClaimPlan> {
    let mut state = seed;
    let target = (f64::from(capacity) * fill).round() as u32;
    let mut asked = 0;
    let mut plans = Vec::new();
    while asked < target {
        let gpus = match args::next(&mut state) % 100 {
            0..15 => 1,
            15..45 => 2,
            45..80 => 4,
            _ => 8,
        }
        .min(target - asked);
        asked += gpus;
        plans.push(ClaimPlan {
            name: format!("claim-{:03}", plans.len()),
            gpus,
        });
    }
    plans
}

/// Which scheduler a trial runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
enum Which {
    #[serde(rename = "kube-scheduler")]
    Stock,
    #[serde(rename = "gputopo-scheduler")]
    Gputopo,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Stock => "kube-scheduler",
            Which::Gputopo => "gputopo-scheduler",
        }
    }
    fn scheduler_name(self) -> &'static str {
        match self {
            Which::Stock => "default-scheduler",
            Which::Gputopo => "gputopo-scheduler",
        }
    }
}

/// One claim as a trial left it.
#[derive(Clone, Debug, Serialize)]
struct Allocation {
    claim: String,
    gpus: u32,
    node: Option<String>,
    model: Option<&'static str>,
    devices: Vec<String>,
    /// The ring bottleneck of the allocated GPUs (two or more).
    bottleneck: Option<String>,
    /// The best any set of that size reaches on the node's model.
    best: Option<String>,
    optimal: Option<bool>,
    numa_nodes: Option<u32>,
}

/// A trial's figures.
#[derive(Clone, Debug, Default, Serialize)]
struct Figures {
    claims: usize,
    allocated: usize,
    multi_gpu_allocated: usize,
    multi_gpu_optimal: usize,
    optimal_share: f64,
    /// Multi-GPU claims by ring bottleneck (`NV18`, `NV12`, …, `SYS`).
    bottlenecks: BTreeMap<String, usize>,
    /// Multi-GPU claims by NUMA nodes spanned.
    numa_nodes: BTreeMap<u32, usize>,
    /// Multi-GPU claims by size: (allocated, optimal).
    by_size: BTreeMap<u32, (usize, usize)>,
}

#[derive(Serialize)]
struct Trial {
    scheduler: Which,
    figures: Figures,
    seconds: f64,
    allocations: Vec<Allocation>,
}

fn log(which: Which, msg: impl std::fmt::Display) {
    eprintln!("[{}] {msg}", which.name());
}

/// The NUMA nodes a set spans (GPUs of unknown NUMA count as one together).
fn numa_span(model: &Model, gpus: &[u32]) -> u32 {
    let mut nodes: Vec<Option<i32>> = gpus
        .iter()
        .map(|&g| {
            model
                .spec
                .gpus
                .iter()
                .find(|x| x.index == g)
                .and_then(|x| x.numa_node)
        })
        .collect();
    nodes.sort();
    nodes.dedup();
    nodes.len() as u32
}

async fn create_cluster(env: &TestEnv, models: &[Model], per_model: usize) -> Result<()> {
    let client = env.client().await;
    let pp = PostParams::default();
    let class: DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}
    }))?;
    Api::<DeviceClass>::all(client.clone())
        .create(&pp, &class)
        .await?;
    let nodes = Api::<Node>::all(client.clone());
    for (m, (model, (_, product, memory))) in models.iter().zip(MODELS.iter()).enumerate() {
        for i in 0..per_model {
            let name = format!("{}-{i:02}", model.key);
            let labels = BTreeMap::from([("sidebyside/model".to_string(), model.key.to_string())]);
            let node = gputopo_testenv::fake_gpu_node(&name, 0, &labels);
            cluster::retry(&format!("creating node {name}"), || {
                nodes.create(&pp, &node)
            })
            .await?;
            let mut spec = model.spec.clone();
            spec.node_name = name.clone();
            let topology = GpuTopology::new(&name, spec.clone());
            Api::<GpuTopology>::all(client.clone())
                .create(&pp, &topology)
                .await
                .with_context(|| format!("creating GpuTopology {name}"))?;
            let mut facts = DriverFacts::for_product(product, memory)
                .with_context(|| format!("model {m}: no driver facts for {product}"))?;
            facts.publish_index = spec.gpus.iter().all(|g| g.uuid.is_none());
            let slice: ResourceSlice =
                serde_json::from_value(nvidia_resource_slice(&name, &spec, &facts))?;
            Api::<ResourceSlice>::all(client.clone())
                .create(&pp, &slice)
                .await
                .with_context(|| format!("creating the ResourceSlice of {name}"))?;
            let untaint = Patch::Merge(json!({"spec": {"taints": null}}));
            let params = PatchParams::default();
            cluster::retry(&format!("lifting the taints of {name}"), || {
                nodes.patch(&name, &params, &untaint)
            })
            .await?;
        }
    }
    cluster::wait_nodes_ready(&client, models.len() * per_model, Duration::from_secs(300)).await
}

async fn run_trial(
    which: Which,
    cli: &Cli,
    scheduler_bin: &std::path::Path,
    models: &[Model],
    plans: &[ClaimPlan],
) -> Result<Trial> {
    let started = Instant::now();
    log(which, "starting etcd, kube-apiserver and kwok");
    let env = TestEnv::start().await?;
    env.with_kwok().await;
    create_cluster(&env, models, cli.nodes_per_model as usize).await?;
    let client = env.client().await;
    let ns = env.create_namespace("dra-bench").await;
    let _scheduler = match which {
        Which::Stock => cluster::start_kube_scheduler(&env, 5000, true).await?,
        Which::Gputopo => cluster::start_gputopo(&env, scheduler_bin).await?.process,
    };
    log(
        which,
        format!("creating {} claims and their pods", plans.len()),
    );
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), &ns);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    for plan in plans {
        let claim: ResourceClaim = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": plan.name},
            "spec": {"devices": {"requests": [{"name": "gpus",
                "exactly": {"deviceClassName": "gpu.nvidia.com", "count": plan.gpus}}]}}
        }))?;
        claims.create(&pp, &claim).await?;
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": plan.name},
            "spec": {
                "schedulerName": which.scheduler_name(),
                "resourceClaims": [{"name": "gpus", "resourceClaimName": plan.name}],
                "containers": [{"name": "main", "image": "registry.invalid/train:1",
                    "resources": {"claims": [{"name": "gpus"}]}}]
            }
        }))?;
        pods.create(&pp, &pod).await?;
    }
    // Until every pod is bound or the count stops moving for 15 s.
    let deadline = Instant::now() + Duration::from_secs(cli.timeout);
    let (mut last, mut since) = (usize::MAX, Instant::now());
    loop {
        let bound = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        if bound != last {
            (last, since) = (bound, Instant::now());
        }
        if bound == plans.len() || since.elapsed() > Duration::from_secs(15) {
            log(which, format!("{bound} of {} pods bound", plans.len()));
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "{}: {bound} of {} pods bound after {} s",
                which.name(),
                plans.len(),
                cli.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let by_key: BTreeMap<&str, &Model> = models.iter().map(|m| (m.key, m)).collect();
    let mut allocations = Vec::new();
    for plan in plans {
        let claim = claims.get(&plan.name).await?;
        allocations.push(read_allocation(&claim, plan, &by_key));
    }
    Ok(Trial {
        scheduler: which,
        figures: figures(&allocations),
        seconds: started.elapsed().as_secs_f64(),
        allocations,
    })
}

/// A claim's allocation placed on its node's model.
fn read_allocation(
    claim: &ResourceClaim,
    plan: &ClaimPlan,
    models: &BTreeMap<&str, &Model>,
) -> Allocation {
    let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
    let results: Vec<_> = allocation
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.clone())
        .unwrap_or_default();
    let node = results.first().map(|r| r.pool.clone());
    // Nodes are named <model>-NN.
    let model = node
        .as_deref()
        .and_then(|n| n.rsplit_once('-'))
        .and_then(|(key, _)| models.get(key).copied());
    let gpus: Vec<u32> = results
        .iter()
        .filter_map(|r| r.device.strip_prefix("gpu-")?.parse().ok())
        .collect();
    let (bottleneck, best, optimal, numa) = match model {
        Some(m) if gpus.len() >= 2 => {
            let ring = m.ring(mask_of(&gpus));
            let best = m.best(gpus.len());
            (ring, best, Some(ring == best), Some(numa_span(m, &gpus)))
        }
        Some(m) => (None, None, None, Some(numa_span(m, &gpus))),
        None => (None, None, None, None),
    };
    Allocation {
        claim: plan.name.clone(),
        gpus: plan.gpus,
        node,
        model: model.map(|m| m.key),
        devices: results.iter().map(|r| r.device.clone()).collect(),
        bottleneck: bottleneck.map(|b: LinkClass| b.to_string()),
        best: best.map(|b: LinkClass| b.to_string()),
        optimal,
        numa_nodes: numa,
    }
}

fn figures(allocations: &[Allocation]) -> Figures {
    let mut f = Figures {
        claims: allocations.len(),
        ..Figures::default()
    };
    for a in allocations {
        if a.node.is_some() {
            f.allocated += 1;
        }
        let Some(optimal) = a.optimal else { continue };
        f.multi_gpu_allocated += 1;
        f.multi_gpu_optimal += usize::from(optimal);
        let size = f.by_size.entry(a.gpus).or_default();
        size.0 += 1;
        size.1 += usize::from(optimal);
        *f.bottlenecks
            .entry(a.bottleneck.clone().unwrap_or_else(|| "-".into()))
            .or_default() += 1;
        if let Some(n) = a.numa_nodes {
            *f.numa_nodes.entry(n).or_default() += 1;
        }
    }
    f.optimal_share = if f.multi_gpu_allocated == 0 {
        0.0
    } else {
        f.multi_gpu_optimal as f64 / f.multi_gpu_allocated as f64
    };
    f
}

/// The Markdown table: per scheduler, what BENCHMARKS.md ("Dynamic Resource
/// Allocation side by side") and its bottleneck distribution in
/// docs/benchmarks/side-by-side.md show.
fn table(trials: &[Trial]) -> String {
    let mut classes: Vec<&String> = trials
        .iter()
        .flat_map(|t| t.figures.bottlenecks.keys())
        .collect();
    classes.sort_by_key(|c| std::cmp::Reverse(c.parse::<LinkClass>().ok()));
    classes.dedup();
    let mut spans: Vec<u32> = trials
        .iter()
        .flat_map(|t| t.figures.numa_nodes.keys().copied())
        .collect();
    spans.sort_unstable();
    spans.dedup();
    let mut out = String::from("| | claims allocated | multi-GPU on an optimal set |");
    let mut rule = String::from("| --- | --- | --- |");
    for c in &classes {
        out += &format!(" {c} |");
        rule += " --- |";
    }
    for n in &spans {
        out += &format!(" {n} NUMA |");
        rule += " --- |";
    }
    out += "\n";
    out += &rule;
    out += "\n";
    for t in trials {
        let f = &t.figures;
        out += &format!(
            "| {} | {}/{} | {}/{} ({:.0} %) |",
            t.scheduler.name(),
            f.allocated,
            f.claims,
            f.multi_gpu_optimal,
            f.multi_gpu_allocated,
            100.0 * f.optimal_share
        );
        for c in &classes {
            out += &format!(" {} |", f.bottlenecks.get(*c).copied().unwrap_or(0));
        }
        for n in &spans {
            out += &format!(" {} |", f.numa_nodes.get(n).copied().unwrap_or(0));
        }
        out += "\n";
    }
    out
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let fixtures = args::fixtures_dir(cli.fixtures.as_deref());
    let scheduler_bin = args::scheduler_binary(cli.scheduler.as_deref())?;
    let models = MODELS
        .iter()
        .map(|(def, _, _)| Model::load(def, &fixtures))
        .collect::<Result<Vec<_>>>()?;
    let capacity: u32 =
        models.iter().map(|m| m.gpus as u32).sum::<u32>() * cli.nodes_per_model as u32;
    let plans = workload(capacity, cli.fill, cli.seed);
    let mut trials = Vec::new();
    for which in [Which::Stock, Which::Gputopo] {
        trials.push(run_trial(which, &cli, &scheduler_bin, &models, &plans).await?);
    }
    let table = table(&trials);
    println!("{table}");
    if let Some(path) = &cli.json {
        let doc = json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "models": models.iter().map(|m| json!({
                "key": m.key, "description": m.description, "fixture": m.fixture,
                "bestPair": m.best(2).map(|b| b.to_string()),
                "bestQuad": m.best(4).map(|b| b.to_string()),
            })).collect::<Vec<_>>(),
            "claims": plans,
            "table": table,
            "results": trials,
        });
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
