//! One trial: a fresh control plane, the nodes, one scheduler, the
//! workload submitted with concurrency and a watch that timestamps binds
//! (both in `progress`), then each pod's outcome from the final state.

use super::audit::{self, ApiWrites};
use super::cluster::{self, NodePlan, retry};
use super::progress::{
    Progress, node_of, submit, unschedulable_message, wait_for_binds, watch_pods,
};
use super::topo::Model;
use super::which::Which;
use super::which::log;
use super::workload::{self, PodPlan};
use anyhow::{Result, bail};
use gputopo_api::keys::pod as pod_keys;
use gputopo_testenv::{TestEnv, rule_checker};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What a trial is run with.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub nodes: usize,
    pub nodes_per_leaf: usize,
    pub leaves_per_spine: usize,
    pub fill: f64,
    pub seed: u64,
    /// Pods of 9 GPUs added to the workload (no node holds one).
    pub too_big: usize,
    /// The mixed workload, or 1-GPU pods only.
    pub mix: super::workload::Mix,
    /// Create every pod first, then start the scheduler: its drain rate
    /// without pod creation competing for the API server and the cores.
    pub backlog: bool,
    /// Requests in flight while creating nodes and pods.
    pub concurrency: usize,
    /// The longest a trial waits for its pods, seconds.
    pub timeout_s: u64,
    /// With every pod bound or reported unschedulable, the trial ends after
    /// this long without a bind, seconds.
    pub quiet_s: u64,
    pub kube_scheduler_qps: u32,
    pub kube_scheduler_exempt: bool,
    pub gputopo_scheduler: PathBuf,
    pub fixtures: PathBuf,
    /// Copy each control plane's logs (audit log, components) under here.
    pub keep_logs: Option<PathBuf>,
}

/// A pod at the end of a trial.
#[derive(Clone, Debug, Serialize)]
pub struct PodResult {
    pub name: String,
    pub kind: workload::Kind,
    pub gpus: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `gputopo.dev/assigned-gpus` as written by the scheduler (gputopo only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned_gpus: Option<String>,
    /// Seconds from the first create request to the pod's creation.
    pub created_s: f64,
    /// Seconds from the first create request to the bind, as the watch saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_s: Option<f64>,
    /// PodScheduled=False message when not bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<String>,
}

/// Setup and timing of a trial, seconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timings {
    pub control_plane_s: f64,
    pub nodes_s: f64,
    pub scheduler_start_s: f64,
    /// When the scheduler was ready, seconds from the first create request
    /// (negative: before it; positive with --backlog).
    pub scheduler_ready_s: f64,
    /// First create request to the last create response.
    pub create_s: f64,
    /// Why the wait ended: `all bound`, `settled`, `stalled` or `timeout`.
    pub ended: String,
    pub wait_s: f64,
    /// Load average (1 min) before the pods and at the end.
    pub loadavg_before: Option<f64>,
    pub loadavg_after: Option<f64>,
    /// The scheduler process's peak resident memory (`VmHWM`), MiB.
    pub scheduler_peak_rss_mib: Option<f64>,
}

/// Everything one trial measured.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    pub scheduler: Which,
    pub timings: Timings,
    /// gputopo-scheduler's own metrics at the end (decision time, attempts).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub scheduler_metrics: BTreeMap<String, f64>,
    /// The scheduler's API writes, from the API server's audit log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_writes: Option<ApiWrites>,
    pub pods: Vec<PodResult>,
    /// Hard constraints the bindings break, by the independent checker
    /// (`gputopo_testenv::rule_checker`); empty for a sound scheduler.
    pub rule_violations: Vec<String>,
    /// Where the control plane's logs were copied (`--keep-logs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<String>,
}

pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A process's peak resident memory so far (`VmHWM` in
/// `/proc/<pid>/status`), MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// Starts `which` and waits until it is ready: (process, metrics port).
async fn start_scheduler(
    which: Which,
    env: &TestEnv,
    settings: &Settings,
) -> Result<(gputopo_testenv::process::Process, Option<u16>)> {
    Ok(match which {
        Which::Stock => (
            cluster::start_kube_scheduler(
                env,
                settings.kube_scheduler_qps,
                settings.kube_scheduler_exempt,
            )
            .await?,
            None,
        ),
        Which::Gputopo => {
            let g = cluster::start_gputopo(env, &settings.gputopo_scheduler).await?;
            (g.process, Some(g.port))
        }
    })
}

/// Runs one trial on a fresh control plane.
pub async fn run_trial(
    which: Which,
    settings: &Settings,
    models: &[Model],
    nodes: &[NodePlan],
    plans: &[PodPlan],
) -> Result<Trial> {
    let mut timings = Timings::default();
    let (env, client) = start_cluster(which, settings, models, nodes, &mut timings).await?;
    let ns = env.create_namespace("bench").await;

    // The scheduler process (killed on drop) and gputopo's metrics port;
    // with --backlog started only once every pod exists.
    let mut sched = None;
    let mut ready_at = Instant::now();
    if !settings.backlog {
        let t = Instant::now();
        sched = Some(start_scheduler(which, &env, settings).await?);
        timings.scheduler_start_s = t.elapsed().as_secs_f64();
        ready_at = Instant::now();
    }

    let pods_api = Api::<Pod>::namespaced(client.clone(), &ns);
    let (watch, seen) = watch_pods(pods_api.clone()).await?;
    timings.loadavg_before = loadavg();
    log(
        which,
        format!(
            "submitting {} pods ({} GPUs)",
            plans.len(),
            plans.iter().map(|p| p.gpus).sum::<u32>()
        ),
    );
    let start = Instant::now();
    let (creating, created) = submit(pods_api.clone(), plans, which, settings.concurrency);
    let mut progress = Progress {
        seen,
        created,
        creating: Some(creating),
        created_at: None,
        start,
        total: plans.len(),
    };
    if settings.backlog {
        let done = progress.creating.take().expect("just set").await??;
        progress.created_at = Some(done);
        log(
            which,
            format!(
                "all {} pods created in {:.1} s; starting the scheduler",
                plans.len(),
                (done - start).as_secs_f64()
            ),
        );
        let t = Instant::now();
        sched = Some(start_scheduler(which, &env, settings).await?);
        timings.scheduler_start_s = t.elapsed().as_secs_f64();
        ready_at = Instant::now();
    }
    let (mut scheduler, metrics_port) = sched.expect("started above");
    timings.scheduler_ready_s = if ready_at >= start {
        (ready_at - start).as_secs_f64()
    } else {
        -(start - ready_at).as_secs_f64()
    };

    let timeout = Duration::from_secs(settings.timeout_s);
    let quiet = Duration::from_secs(settings.quiet_s);
    let ended = wait_for_binds(
        which,
        timeout,
        quiet,
        ready_at,
        &mut progress,
        &mut scheduler,
    )
    .await?;
    timings.ended = ended.to_string();
    timings.wait_s = start.elapsed().as_secs_f64();
    if let Some(done) = progress.created_at {
        timings.create_s = (done - start).as_secs_f64();
    }
    timings.loadavg_after = loadavg();
    timings.scheduler_peak_rss_mib = peak_rss_mib(scheduler.pid());
    log(
        which,
        format!("ended ({ended}) after {:.1} s", timings.wait_s),
    );

    let scheduler_metrics = scheduler_metrics(metrics_port).await;
    // Stop the scheduler before reading the final state: nothing moves after.
    drop(scheduler);
    let lp = ListParams::default();
    let list = retry("listing the pods", || pods_api.list(&lp)).await?;
    watch.abort();
    let rule_violations = check_rules(&client, &list.items).await?;
    log(
        which,
        format!("{} hard constraints broken", rule_violations.len()),
    );
    let pods = pod_results(plans, list.items, &progress);
    ensure_some_bound(&pods, &env, which)?;
    let bound = pods.iter().filter(|p| p.node.is_some()).count();
    let user = match which {
        Which::Stock => "system:kube-scheduler",
        Which::Gputopo => gputopo_testenv::ADMIN_USER,
    };
    let api_writes = audit::scheduler_writes(env.audit_log_path(), user, bound);
    let logs = keep_logs(settings, &env, which)?;
    Ok(Trial {
        scheduler: which,
        timings,
        scheduler_metrics,
        api_writes,
        pods,
        rule_violations,
        logs,
    })
}

/// Every hard constraint the bound `pods` break, read against the nodes as
/// the API server holds them (the benchmark mounts no volumes).
async fn check_rules(client: &kube::Client, pods: &[Pod]) -> Result<Vec<String>> {
    let nodes_api = Api::<Node>::all(client.clone());
    let lp = ListParams::default();
    let nodes = retry("listing the nodes", || nodes_api.list(&lp)).await?;
    Ok(rule_checker::violations(&rule_checker::World {
        pods,
        nodes: &nodes.items,
        volumes: &[],
        claims: &[],
    }))
}

/// A fresh control plane with kwok, and `nodes` created and Ready.
async fn start_cluster(
    which: Which,
    settings: &Settings,
    models: &[Model],
    nodes: &[NodePlan],
    timings: &mut Timings,
) -> Result<(TestEnv, kube::Client)> {
    let t = Instant::now();
    log(which, "starting etcd, kube-apiserver and kwok");
    let env = TestEnv::start().await?;
    env.with_kwok().await;
    timings.control_plane_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let client = env.client().await;
    log(which, format!("creating {} nodes", nodes.len()));
    cluster::create_nodes(&client, nodes, models, settings.concurrency).await?;
    cluster::wait_nodes_ready(&client, nodes.len(), Duration::from_secs(600)).await?;
    timings.nodes_s = t.elapsed().as_secs_f64();
    log(
        which,
        format!("{} nodes Ready in {:.1} s", nodes.len(), timings.nodes_s),
    );
    Ok((env, client))
}

/// Each planned pod's outcome, from the final list and what the watch saw.
fn pod_results(plans: &[PodPlan], listed: Vec<Pod>, progress: &Progress) -> Vec<PodResult> {
    let start = progress.start;
    let by_name: HashMap<String, Pod> = listed
        .into_iter()
        .filter_map(|p| Some((p.metadata.name.clone()?, p)))
        .collect();
    let seen = progress.seen.lock().unwrap_or_else(|e| e.into_inner());
    let created = progress.created.lock().unwrap_or_else(|e| e.into_inner());
    let end = Instant::now();
    let mut pods = Vec::with_capacity(plans.len());
    for plan in plans {
        let pod = by_name.get(&plan.name);
        let node = pod.and_then(node_of);
        let bound_at = seen.get(&plan.name).and_then(|s| s.bound_at);
        let bound_s = match (&node, bound_at) {
            (Some(_), Some(t)) => Some((t - start).as_secs_f64()),
            // Bound, but the watch had not shown it yet: at the end.
            (Some(_), None) => Some((end - start).as_secs_f64()),
            (None, _) => None,
        };
        pods.push(PodResult {
            name: plan.name.clone(),
            kind: plan.kind,
            gpus: plan.gpus,
            gang: plan.gang.as_ref().map(|g| g.0.clone()),
            assigned_gpus: pod.and_then(|p| {
                p.metadata
                    .annotations
                    .as_ref()?
                    .get(pod_keys::ASSIGNED_GPUS)
                    .cloned()
            }),
            created_s: created
                .get(&plan.name)
                .map_or(f64::NAN, |t| (*t - start).as_secs_f64()),
            bound_s,
            unschedulable: if node.is_none() {
                pod.and_then(unschedulable_message)
            } else {
                None
            },
            node,
        });
    }
    pods
}

/// With --keep-logs: the trial's logs copied to `<keep>/<scheduler>`.
fn keep_logs(settings: &Settings, env: &TestEnv, which: Which) -> Result<Option<String>> {
    let Some(keep) = &settings.keep_logs else {
        return Ok(None);
    };
    let to = keep.join(which.name());
    std::fs::create_dir_all(&to)?;
    for entry in std::fs::read_dir(env.dir())? {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "log") {
            std::fs::copy(&path, to.join(path.file_name().unwrap_or_default()))?;
        }
    }
    Ok(Some(to.display().to_string()))
}

/// A trial that bound no pod at all says why, from the scheduler's log.
fn ensure_some_bound(pods: &[PodResult], env: &TestEnv, which: Which) -> Result<()> {
    if pods.iter().all(|p| p.node.is_none()) && !pods.is_empty() {
        let log = env.dir().join(match which {
            Which::Stock => "kube-scheduler.log",
            Which::Gputopo => "gputopo-scheduler.log",
        });
        bail!(
            "{}: no pod was bound; last lines of {}:\n{}",
            which.name(),
            log.display(),
            gputopo_testenv::process::tail(&log, 30)
        );
    }
    Ok(())
}

/// gputopo-scheduler's metrics that the report keeps (none for kube-scheduler).
async fn scheduler_metrics(port: Option<u16>) -> BTreeMap<String, f64> {
    if let Some(port) = port
        && let Some((200, text)) = gputopo_testenv::loopback::get(port, "/metrics").await
    {
        return cluster::keep_metrics(&text);
    }
    BTreeMap::new()
}
