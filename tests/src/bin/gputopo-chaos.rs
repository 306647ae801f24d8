//! Fault runs (BENCHMARKS.md "Faults and soak"): a stream of pods and gangs arrives
//! and leaves on a kwok GPU cluster while the gputopo-scheduler leader,
//! etcd and kube-apiserver are killed with SIGKILL at seeded moments and
//! brought back. Two scheduler replicas share a leader lease, as the chart
//! deploys them; one that exits (the leader stops when it cannot renew its
//! lease through an outage) is started again at once, as its Deployment
//! would (the kubelet's first restart waits 10 s; this does not).
//! Afterwards it counts what must be zero whatever happened:
//! GPUs held by two pods at once, gangs left partly bound, pods never
//! looked at; and, per fault, the time from the component's return to the
//! next binding.
//!
//! ```sh
//! export GPUTOPO_BIN_DIR=$(scripts/control-plane-binaries | tail -1)
//! cargo build -p gputopo-scheduler -p gputopo-testenv --bins
//! target/debug/gputopo-chaos --duration 300 --json results/chaos/chaos-300.json
//! ```

#[path = "bench/args.rs"]
mod args;
#[allow(dead_code)] // the side by side's cluster helpers; this uses a part
#[path = "sidebyside/cluster.rs"]
mod cluster;
#[allow(dead_code)]
#[path = "sidebyside/topo.rs"]
mod topo;

use anyhow::{Context, Result};
use clap::Parser;
use futures::StreamExt;
use gputopo_testenv::TestEnv;
use gputopo_testenv::process::Process;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Faults while pods and gangs arrive.
#[derive(Parser)]
#[command(name = "gputopo-chaos")]
struct Cli {
    /// Seconds of arrivals and faults.
    #[arg(long, default_value_t = 300)]
    duration: u64,
    /// Seconds between two faults (leader, etcd, kube-apiserver in turn).
    #[arg(long, default_value_t = 30)]
    fault_every: u64,
    /// Seconds a fault lasts before the component is started again.
    #[arg(long, default_value_t = 5)]
    outage: u64,
    /// Milliseconds between two arrivals (a pod or a gang).
    #[arg(long, default_value_t = 1000)]
    arrival_ms: u64,
    /// Seconds a pod runs once bound (a gang: once all its members are).
    #[arg(long, default_value_t = 8.0)]
    lifetime: f64,
    /// kwok nodes of 8 GPUs, four to a leaf.
    #[arg(long, default_value_t = 16)]
    nodes: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The gputopo-scheduler binary (default: beside this one).
    #[arg(long, value_name = "PATH")]
    scheduler: Option<PathBuf>,
    /// Recorded hardware (default: the repository's fixtures/).
    #[arg(long, value_name = "DIR")]
    fixtures: Option<PathBuf>,
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

const SCHEDULER: &str = "gputopo-scheduler";
const NS: &str = "chaos";

fn log(msg: impl std::fmt::Display) {
    eprintln!("[chaos] {msg}");
}

/// One scheduler replica: its `POD_NAME` (the lease identity's prefix).
struct Replica {
    name: &'static str,
    /// The running process and its metrics port.
    process: Option<(Process, u16)>,
}

fn start_replica(env: &TestEnv, bin: &std::path::Path, name: &str) -> Result<(Process, u16)> {
    let port = cluster::free_port()?;
    let dir = env.dir().join(name);
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "backoff: {initial: 200ms, max: 2s, unschedulableTimeout: 10s}\n",
    )?;
    let args: Vec<String> = [
        "run",
        "--config",
        &config.display().to_string(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--leader-elect-namespace",
        NS,
        "--leader-elect-lease-duration",
        "6s",
        "--leader-elect-renew-deadline",
        "4s",
        "--leader-elect-retry-period",
        "1s",
    ]
    .map(String::from)
    .to_vec();
    let vars: Vec<(&str, &std::ffi::OsStr)> = vec![
        ("KUBECONFIG", env.kubeconfig_path().as_os_str()),
        ("POD_NAME", std::ffi::OsStr::new(name)),
        ("RUST_LOG", std::ffi::OsStr::new("info")),
    ];
    let n = std::fs::read_dir(&dir)?.count();
    let log = dir.join(format!("scheduler-{n}.log"));
    Ok((Process::spawn(name, bin, &args, &vars, log)?, port))
}

/// A process's resident set, KiB (`VmRSS` of `/proc/<pid>/status`).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A pod of `gpus` GPUs, in gang `gang` of `size` when given.
fn pod(name: &str, gpus: u32, gang: Option<(&str, u32)>) -> Result<Pod> {
    let mut annotations = BTreeMap::from([("gputopo.dev/workload", "training".to_string())]);
    if let Some((g, size)) = gang {
        annotations.insert("gputopo.dev/gang", g.to_string());
        annotations.insert("gputopo.dev/gang-size", size.to_string());
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [{"name": "main", "image": "registry.invalid/train:1",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]
        }
    }))?)
}

/// What the watch saw: each pod's first bind.
#[derive(Default)]
struct Seen {
    binds: Vec<f64>,
    bound: HashMap<String, f64>,
}

#[derive(Clone, Debug, Serialize)]
struct Fault {
    kind: &'static str,
    at_s: f64,
    back_s: f64,
    /// From `back_s` to the next binding; `None` when none came.
    rebind_s: Option<f64>,
}

#[derive(Debug, Default, Serialize)]
struct Outcome {
    pods_created: usize,
    gangs_created: usize,
    pods_bound: usize,
    /// GPU indices held by two live pods of one node at once.
    gpus_assigned_twice: usize,
    /// Gangs with some members bound and some not, after the quiet period.
    gangs_partly_bound: usize,
    /// Pods neither bound nor marked unschedulable after the quiet period.
    pods_lost: usize,
    faults: Vec<Fault>,
    max_rebind_s: Option<f64>,
    /// Per replica process (`name (pid N)`): RSS samples (seconds, MiB), every 10 s.
    rss_mib: BTreeMap<String, Vec<(u64, f64)>>,
    /// `gputopo_scheduler_state` per replica once every pod is gone.
    idle_state: BTreeMap<String, BTreeMap<String, f64>>,
    /// Replicas that exited by themselves and were started again.
    replica_restarts: usize,
}

/// The pods created so far, name → (created at, gang), and each gang's members.
#[derive(Default)]
struct Created {
    pods: BTreeMap<String, (f64, Option<String>)>,
    gangs: BTreeMap<String, Vec<String>>,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let fixtures = args::fixtures_dir(cli.fixtures.as_deref());
    let bin = args::scheduler_binary(cli.scheduler.as_deref())?;
    let models = topo::MODEL_DEFS[1..3]
        .iter()
        .map(|d| topo::Model::load(d, &fixtures))
        .collect::<Result<Vec<_>>>()?;

    log("starting etcd, kube-apiserver, kube-controller-manager and kwok");
    let env = TestEnv::start().await?;
    env.with_controller_manager().await;
    env.with_kwok().await;
    let client = env.client().await;
    let plans = cluster::layout(cli.nodes, 4, 4, &models);
    cluster::create_nodes(&client, &plans, &models, 8).await?;
    cluster::wait_nodes_ready(&client, plans.len(), Duration::from_secs(300)).await?;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": NS}}))?;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let mut replicas = Vec::new();
    for name in ["replica-a", "replica-b"] {
        let process = Some(start_replica(&env, &bin, name)?);
        replicas.push(Replica { name, process });
    }

    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let start = Instant::now();
    let seen = watch_binds(pods.clone(), start);
    let mut rng = cli.seed;
    let mut outcome = Outcome::default();
    let mut created = Created::default();
    let mut next_fault = Duration::from_secs(cli.fault_every);
    let kinds = ["leader", "etcd", "kube-apiserver"];
    let mut next_sample = Duration::ZERO;
    while start.elapsed() < Duration::from_secs(cli.duration) {
        arrive(&pods, &mut rng, start, &mut created, &mut outcome).await?;
        let now = start.elapsed().as_secs_f64();
        depart(&pods, &seen, &mut created, now, cli.lifetime).await;
        if start.elapsed() >= next_fault {
            let kind = kinds[outcome.faults.len() % kinds.len()];
            let at_s = start.elapsed().as_secs_f64();
            log(format!("{at_s:.0} s: killing {kind}"));
            let outage = Duration::from_secs(cli.outage);
            fault(&env, &client, &bin, &mut replicas, kind, outage).await?;
            let back_s = start.elapsed().as_secs_f64();
            outcome.faults.push(Fault {
                kind,
                at_s,
                back_s,
                rebind_s: None,
            });
            next_fault += Duration::from_secs(cli.fault_every);
        }
        if start.elapsed() >= next_sample {
            sample_rss(&replicas, start, &mut outcome);
            next_sample += Duration::from_secs(10);
        }
        // A replica that exited (the leader stops when it cannot renew
        // through an outage) is started again, as its Deployment would.
        for r in &mut replicas {
            if r.process
                .as_mut()
                .is_some_and(|(p, _)| p.check_running().is_err())
            {
                log(format!("{} exited; starting it again", r.name));
                outcome.replica_restarts += 1;
                r.process = Some(start_replica(&env, &bin, r.name)?);
            }
        }
        tokio::time::sleep(Duration::from_millis(cli.arrival_ms)).await;
    }

    log("arrivals stopped; waiting for the cluster to settle");
    settle(&pods, &created.pods, &created.gangs).await;
    let listed = list_all(&pods).await?;
    let binds = seen.lock().unwrap_or_else(|e| e.into_inner()).binds.clone();
    for f in &mut outcome.faults {
        f.rebind_s = binds
            .iter()
            .copied()
            .filter(|&t| t >= f.back_s)
            .reduce(f64::min)
            .map(|t| t - f.back_s);
    }
    outcome.max_rebind_s = outcome
        .faults
        .iter()
        .filter_map(|f| f.rebind_s)
        .reduce(f64::max);
    outcome.pods_bound = seen.lock().unwrap_or_else(|e| e.into_inner()).bound.len();
    count(&listed, &created.gangs, &mut outcome);
    // Every pod gone: what the schedulers still carry should be nothing.
    let _ = pods
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    outcome.idle_state = idle_states(&replicas).await;
    drop(replicas);
    write_report(&cli, &outcome)
}

/// When each pod of `pods` was first seen bound, seconds after `start`,
/// from a watch that runs for the rest of the process.
fn watch_binds(pods: Api<Pod>, start: Instant) -> Arc<Mutex<Seen>> {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let recorded = seen.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(
            watcher(pods, watcher::Config::default())
                .default_backoff()
                .applied_objects()
        );
        while let Some(event) = stream.next().await {
            let Ok(p) = event else { continue };
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
                continue;
            }
            let name = p.metadata.name.unwrap_or_default();
            let mut s = recorded.lock().unwrap_or_else(|e| e.into_inner());
            if let std::collections::hash_map::Entry::Vacant(e) = s.bound.entry(name) {
                let t = start.elapsed().as_secs_f64();
                e.insert(t);
                s.binds.push(t);
            }
        }
    });
    seen
}

/// An arrival: a single pod (60 %) or a gang of 2-3.
async fn arrive(
    pods: &Api<Pod>,
    rng: &mut u64,
    start: Instant,
    created: &mut Created,
    outcome: &mut Outcome,
) -> Result<()> {
    let i = outcome.pods_created;
    if args::next(rng) % 100 < 60 {
        let gpus = [1, 2, 4, 8][(args::next(rng) % 4) as usize];
        let name = format!("p-{i:05}");
        let spec = pod(&name, gpus, None)?;
        if pods.create(&PostParams::default(), &spec).await.is_ok() {
            created
                .pods
                .insert(name, (start.elapsed().as_secs_f64(), None));
            outcome.pods_created += 1;
        }
        return Ok(());
    }
    let size = 2 + (args::next(rng) % 2) as u32;
    let gpus = [4, 8][(args::next(rng) % 2) as usize];
    let gang = format!("g-{:04}", outcome.gangs_created);
    let mut members = Vec::new();
    for m in 0..size {
        let name = format!("{gang}-{m}");
        let spec = pod(&name, gpus, Some((&gang, size)))?;
        if pods.create(&PostParams::default(), &spec).await.is_ok() {
            let at = start.elapsed().as_secs_f64();
            created.pods.insert(name.clone(), (at, Some(gang.clone())));
            members.push(name);
            outcome.pods_created += 1;
        }
    }
    created.gangs.insert(gang, members);
    outcome.gangs_created += 1;
    Ok(())
}

/// Departures: singles bound for `lifetime` seconds, gangs once all are.
async fn depart(
    pods: &Api<Pod>,
    seen: &Mutex<Seen>,
    created: &mut Created,
    now: f64,
    lifetime: f64,
) {
    let leaving: Vec<String> = {
        let s = seen.lock().unwrap_or_else(|e| e.into_inner());
        let old = |n: &String| s.bound.get(n).is_some_and(|&t| now - t > lifetime);
        let mut v: Vec<String> = created
            .pods
            .iter()
            .filter(|(n, (_, g))| g.is_none() && old(n))
            .map(|(n, _)| n.clone())
            .collect();
        for members in created.gangs.values() {
            if members.iter().all(old) {
                v.extend(members.iter().cloned());
            }
        }
        v
    };
    for name in leaving {
        if pods.delete(&name, &DeleteParams::default()).await.is_ok()
            && let Some((_, Some(g))) = created.pods.remove(&name)
        {
            created.gangs.remove(&g);
        }
    }
}

/// One RSS sample (MiB) per running replica process.
fn sample_rss(replicas: &[Replica], start: Instant, outcome: &mut Outcome) {
    for r in replicas {
        if let Some((p, _)) = &r.process
            && let Some(kib) = rss_kib(p.pid())
        {
            let key = format!("{} (pid {})", r.name, p.pid());
            let sample = (start.elapsed().as_secs(), kib as f64 / 1024.0);
            outcome.rss_mib.entry(key).or_default().push(sample);
        }
    }
}

/// `gputopo_scheduler_state` per replica that serves its metrics.
async fn idle_states(replicas: &[Replica]) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut states = BTreeMap::new();
    for r in replicas {
        if let Some((_, port)) = &r.process
            && let Some((200, text)) = gputopo_testenv::loopback::get(*port, "/metrics").await
        {
            let state = text
                .lines()
                .filter_map(|l| l.strip_prefix("gputopo_scheduler_state"))
                .filter_map(|l| {
                    let (k, v) = l.rsplit_once(' ')?;
                    Some((k.to_string(), v.parse().ok()?))
                })
                .collect();
            states.insert(r.name.to_string(), state);
        }
    }
    states
}

/// The report as JSON on stdout, and in `--json`'s file when given.
fn write_report(cli: &Cli, outcome: &Outcome) -> Result<()> {
    let report = serde_json::to_string_pretty(&json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "outcome": outcome,
    }))?;
    println!("{report}");
    if let Some(path) = &cli.json {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, &report).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Kills `kind` with SIGKILL, waits `outage`, starts it again.
async fn fault(
    env: &TestEnv,
    client: &kube::Client,
    bin: &std::path::Path,
    replicas: &mut [Replica],
    kind: &str,
    outage: Duration,
) -> Result<()> {
    match kind {
        "leader" => {
            let holder = Api::<Lease>::namespaced(client.clone(), NS)
                .get(SCHEDULER)
                .await
                .ok()
                .and_then(|l| l.spec?.holder_identity)
                .unwrap_or_default();
            let Some(r) = replicas
                .iter_mut()
                .find(|r| holder.starts_with(&format!("{}_", r.name)))
            else {
                log(format!("no leader to kill (holder {holder:?})"));
                return Ok(());
            };
            r.process = None; // SIGKILL on drop
            tokio::time::sleep(outage).await;
            r.process = Some(start_replica(env, bin, r.name)?);
        }
        "etcd" => {
            env.stop_etcd();
            tokio::time::sleep(outage).await;
            env.start_etcd_again().await?;
        }
        _ => {
            env.stop_apiserver();
            tokio::time::sleep(outage).await;
            env.start_apiserver_again().await?;
        }
    }
    Ok(())
}

async fn list_all(pods: &Api<Pod>) -> Result<Vec<Pod>> {
    for _ in 0..30 {
        if let Ok(l) = pods.list(&ListParams::default()).await {
            return Ok(l.items);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    anyhow::bail!("listing pods failed for 30 s")
}

fn is_bound(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
}

/// Whether the scheduler said something about the pod: bound, or
/// `PodScheduled=False`.
fn looked_at(p: &Pod) -> bool {
    is_bound(p)
        || p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "PodScheduled" && c.status == "False")
            })
}

/// Waits (at most 120 s) until no gang is partly bound and every pod was
/// looked at.
async fn settle(
    pods: &Api<Pod>,
    created: &BTreeMap<String, (f64, Option<String>)>,
    gangs: &BTreeMap<String, Vec<String>>,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(listed) = list_all(pods).await {
            let mut o = Outcome::default();
            count(&listed, gangs, &mut o);
            let pending = listed
                .iter()
                .filter(|p| created.contains_key(p.metadata.name.as_deref().unwrap_or_default()))
                .filter(|p| !looked_at(p))
                .count();
            if o.gangs_partly_bound == 0 && pending == 0 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// GPUs held twice, gangs partly bound, pods never looked at.
fn count(listed: &[Pod], gangs: &BTreeMap<String, Vec<String>>, o: &mut Outcome) {
    let live: Vec<&Pod> = listed
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let mut held: BTreeMap<(String, u32), usize> = BTreeMap::new();
    for p in live.iter().filter(|p| is_bound(p)) {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let gpus = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("gputopo.dev/assigned-gpus"))
            .map(|v| {
                v.split(',')
                    .filter_map(|g| g.trim().parse().ok())
                    .collect::<BTreeSet<u32>>()
            })
            .unwrap_or_default();
        for g in gpus {
            *held.entry((node.clone(), g)).or_default() += 1;
        }
    }
    o.gpus_assigned_twice = held.values().filter(|&&n| n > 1).count();
    let by_name: HashMap<&str, &Pod> = live
        .iter()
        .map(|p| (p.metadata.name.as_deref().unwrap_or_default(), *p))
        .collect();
    o.gangs_partly_bound = gangs
        .values()
        .filter(|members| {
            let bound = members
                .iter()
                .filter(|m| by_name.get(m.as_str()).is_some_and(|p| is_bound(p)))
                .count();
            bound > 0 && bound < members.len()
        })
        .count();
    o.pods_lost = live.iter().filter(|p| !looked_at(p)).count();
}
