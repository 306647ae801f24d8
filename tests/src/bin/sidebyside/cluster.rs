//! The cluster: kwok GPU nodes on leaves under spines, each with the
//! `GpuTopology` its agent would publish and the agent's labels; and the two
//! schedulers, each started as its own process against it.

use super::topo::Model;
use anyhow::{Context, Result, bail};
use gputopo_api::GpuTopology;
use gputopo_api::keys::node as node_keys;
use gputopo_testenv::TestEnv;
use gputopo_testenv::process::{Process, tail};
use gputopo_topology::labels::{LabelOptions, node_labels};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// One node of the layout.
#[derive(Clone, Debug, Serialize)]
pub struct NodePlan {
    pub name: String,
    pub leaf: usize,
    pub spine: usize,
    /// Index into the models.
    #[serde(skip)]
    pub model: usize,
    #[serde(rename = "model")]
    pub model_key: &'static str,
}

/// `nodes` nodes, `per_leaf` to a leaf, `leaves_per_spine` leaves to a
/// spine; leaf i holds machines of model i mod 4 (a rack is one machine type).
pub fn layout(
    nodes: usize,
    per_leaf: usize,
    leaves_per_spine: usize,
    models: &[Model],
) -> Vec<NodePlan> {
    (0..nodes)
        .map(|i| {
            let leaf = i / per_leaf;
            let model = leaf % models.len();
            NodePlan {
                name: format!("gpu-{i:04}"),
                leaf,
                spine: leaf / leaves_per_spine,
                model,
                model_key: models[model].key,
            }
        })
        .collect()
}

pub fn leaf_name(leaf: usize) -> String {
    format!("leaf-{leaf:03}")
}

pub fn spine_name(spine: usize) -> String {
    format!("spine-{spine:02}")
}

/// Retries a request on what a busy API server answers (429, 5xx, a
/// timeout or a dropped connection): up to 8 tries, 50 ms doubling.
pub async fn retry<T, F, Fut>(what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut wait = Duration::from_millis(50);
    for attempt in 1.. {
        match f().await {
            Ok(v) => return Ok(v),
            Err(kube::Error::Api(s)) if s.code != 429 && s.code < 500 => {
                return Err(kube::Error::Api(s)).with_context(|| what.to_string());
            }
            Err(e) if attempt >= 8 => return Err(e).with_context(|| what.to_string()),
            Err(_) => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        }
    }
    unreachable!()
}

/// Creates every node (kwok's annotation, the agent's labels, the tier
/// labels), its `GpuTopology` (owned by the node) and lifts the
/// `node.kubernetes.io/not-ready` taint the admission plugin puts on a new
/// node (no controller manager runs: see the module of the binary), with
/// `concurrency` requests in flight; then waits until kwok reports all Ready.
pub async fn create_nodes(
    client: &Client,
    plans: &[NodePlan],
    models: &[Model],
    concurrency: usize,
) -> Result<()> {
    let limit = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut tasks = JoinSet::new();
    for plan in plans {
        let model = &models[plan.model];
        let mut labels = node_labels(&model.spec, LabelOptions::default());
        labels.insert(node_keys::SPINE.to_string(), spine_name(plan.spine));
        labels.insert(node_keys::LEAF.to_string(), leaf_name(plan.leaf));
        labels.insert("sidebyside/model".to_string(), model.key.to_string());
        let node = gputopo_testenv::fake_gpu_node(&plan.name, model.gpus as u32, &labels);
        let mut spec = model.spec.clone();
        spec.node_name = plan.name.clone();
        let topology = GpuTopology::new(&plan.name, spec);
        let client = client.clone();
        let permit = limit.clone().acquire_owned().await?;
        let name = plan.name.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let nodes = Api::<Node>::all(client.clone());
            let pp = PostParams::default();
            let created = retry(&format!("creating node {name}"), || {
                nodes.create(&pp, &node)
            })
            .await?;
            let mut topology = topology;
            topology.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: name.clone(),
                uid: created.metadata.uid.clone().unwrap_or_default(),
                ..OwnerReference::default()
            }]);
            let topologies = Api::<GpuTopology>::all(client.clone());
            retry(&format!("creating GpuTopology {name}"), || {
                topologies.create(&pp, &topology)
            })
            .await?;
            let untaint = Patch::Merge(json!({"spec": {"taints": null}}));
            let params = PatchParams::default();
            retry(&format!("lifting the not-ready taint of {name}"), || {
                nodes.patch(&name, &params, &untaint)
            })
            .await?;
            anyhow::Ok(())
        });
        while tasks.len() > concurrency * 2 {
            if let Some(r) = tasks.join_next().await {
                r??;
            }
        }
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

/// Waits until `count` nodes are Ready (kwok's heartbeat) and untainted.
pub async fn wait_nodes_ready(client: &Client, count: usize, timeout: Duration) -> Result<()> {
    let nodes = Api::<Node>::all(client.clone());
    let deadline = Instant::now() + timeout;
    loop {
        let lp = ListParams::default();
        let list = retry("listing nodes", || nodes.list(&lp)).await?;
        let ready = list
            .items
            .iter()
            .filter(|n| {
                let cond = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                let tainted = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| !t.is_empty());
                cond && !tainted
            })
            .count();
        if ready >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {count} nodes Ready and untainted after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A free loopback port.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts the stock kube-scheduler (default profile) with client QPS and
/// burst raised to `qps` (scheduler_perf uses 5000; the default is 50/100)
/// and no leader election. It authenticates as `system:kube-scheduler`; with
/// `exempt`, also in `system:masters`, whose requests API Priority and
/// Fairness does not queue, as gputopo-scheduler's admin credentials are not.
pub async fn start_kube_scheduler(env: &TestEnv, qps: u32, exempt: bool) -> Result<Process> {
    let bin =
        gputopo_testenv::binaries::locate(gputopo_testenv::binaries::KUBERNETES, "kube-scheduler")?;
    let groups: &[&str] = if exempt { &["system:masters"] } else { &[] };
    let kubeconfig = env.kubeconfig_for_user("system:kube-scheduler", groups)?;
    let dir = env.dir().join("kube-scheduler-bench");
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("config.yaml");
    let burst = qps.max(100);
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\n\
             kind: KubeSchedulerConfiguration\n\
             clientConnection:\n  kubeconfig: {}\n  qps: {qps}\n  burst: {burst}\n\
             leaderElection:\n  leaderElect: false\n",
            kubeconfig.display()
        ),
    )?;
    let port = free_port()?;
    let args = vec![
        format!("--config={}", config.display()),
        format!("--authentication-kubeconfig={}", kubeconfig.display()),
        format!("--authorization-kubeconfig={}", kubeconfig.display()),
        "--bind-address=127.0.0.1".to_string(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", dir.join("certs").display()),
        "--v=1".to_string(),
    ];
    let log = env.dir().join("kube-scheduler.log");
    std::fs::write(&log, format!("# {} {}\n", bin.display(), args.join(" ")))?;
    let mut process = Process::spawn("kube-scheduler", &bin, &args, &[], log.clone())?;
    // /healthz on its self-signed serving certificate.
    let kc = Kubeconfig::read_from(env.kubeconfig_path())?;
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    cfg.cluster_url = format!("https://127.0.0.1:{port}").parse()?;
    cfg.accept_invalid_certs = true;
    cfg.connect_timeout = Some(Duration::from_secs(2));
    cfg.read_timeout = Some(Duration::from_secs(5));
    let probe = Client::try_from(cfg)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        process.check_running()?;
        let req = http::Request::get("/healthz").body(Vec::new())?;
        if let Ok(body) = probe.request_text(req).await
            && body.trim() == "ok"
        {
            return Ok(process);
        }
        if Instant::now() > deadline {
            bail!(
                "kube-scheduler not healthy after 120 s; last lines of {}:\n{}",
                log.display(),
                tail(&log, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A running gputopo-scheduler and the port of its /metrics.
pub struct Gputopo {
    pub process: Process,
    pub port: u16,
}

/// Starts `gputopo-scheduler run` as deployed (default configuration, the
/// admin kubeconfig), one replica without leader election; waits for /readyz.
pub async fn start_gputopo(env: &TestEnv, bin: &Path) -> Result<Gputopo> {
    let port = free_port()?;
    let args = vec![
        "run".to_string(),
        "--leader-elect=false".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    let log = env.dir().join("gputopo-scheduler.log");
    let vars: Vec<(&str, &std::ffi::OsStr)> = vec![
        ("KUBECONFIG", env.kubeconfig_path().as_os_str()),
        ("RUST_LOG", std::ffi::OsStr::new("info")),
    ];
    let mut process = Process::spawn("gputopo-scheduler", bin, &args, &vars, log.clone())
        .with_context(|| format!("starting {}", bin.display()))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        process.check_running()?;
        if let Some((200, _)) = gputopo_testenv::loopback::get(port, "/readyz").await {
            return Ok(Gputopo { process, port });
        }
        if Instant::now() > deadline {
            bail!(
                "gputopo-scheduler not ready after 120 s; last lines of {}:\n{}",
                log.display(),
                tail(&log, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The scheduler's metric lines worth keeping: decision time, attempts by
/// result, placements.
pub fn keep_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with("gputopo_scheduling_duration_seconds_sum")
                || l.starts_with("gputopo_scheduling_duration_seconds_count")
                || l.starts_with("gputopo_schedule_attempts")
                || l.starts_with("gputopo_placement_decisions")
                || l.starts_with("gputopo_fragmentation_ratio")
                || l.starts_with("gputopo_gpu_allocation_ratio")
        })
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}
