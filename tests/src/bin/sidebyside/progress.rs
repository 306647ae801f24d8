//! A trial's workload in flight: the watch that timestamps binds, the
//! concurrent creates, and the wait until the pods are bound or settled.

use super::cluster::retry;
use super::which::{Which, log};
use super::workload::{self, PodPlan};
use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// What the watch saw of one pod.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) bound_at: Option<Instant>,
    pub(super) unschedulable: bool,
}

/// The pods as the watch saw them, by name.
pub(super) type SeenPods = Arc<Mutex<HashMap<String, Seen>>>;
/// When each pod's create request was answered, by name.
pub(super) type CreatedPods = Arc<Mutex<HashMap<String, Instant>>>;

/// How far the workload has got: its creates and the binds the watch saw.
pub(super) struct Progress {
    pub(super) seen: SeenPods,
    pub(super) created: CreatedPods,
    /// The task creating the pods, until it is done: then when it was.
    pub(super) creating: Option<tokio::task::JoinHandle<Result<Instant>>>,
    pub(super) created_at: Option<Instant>,
    /// The first create request.
    pub(super) start: Instant,
    /// How many pods the workload has.
    pub(super) total: usize,
}

/// The watch that timestamps binds, returned once synced (before the first pod).
pub(super) async fn watch_pods(api: Api<Pod>) -> Result<(tokio::task::JoinHandle<()>, SeenPods)> {
    let seen: SeenPods = Arc::default();
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let watch = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        eprintln!("pod watch: {e}");
                        continue;
                    }
                };
                let now = Instant::now();
                let name = pod.metadata.name.clone().unwrap_or_default();
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                let s = seen.entry(name).or_default();
                if s.bound_at.is_none() && node_of(&pod).is_some() {
                    s.bound_at = Some(now);
                }
                s.unschedulable = unschedulable_message(&pod).is_some();
            }
        })
    };
    tokio::time::timeout(Duration::from_secs(60), synced_rx)
        .await
        .context("the pod watch did not sync in 60 s")??;
    Ok((watch, seen))
}

/// Submits every pod, `concurrency` requests in flight, in workload order:
/// the task (which ends when the last create is answered) and the creates'
/// times so far.
pub(super) fn submit(
    api: Api<Pod>,
    plans: &[PodPlan],
    which: Which,
    concurrency: usize,
) -> (tokio::task::JoinHandle<Result<Instant>>, CreatedPods) {
    let created: CreatedPods = Arc::default();
    let objects: Vec<Pod> = plans
        .iter()
        .map(|p| workload::pod(p, which.scheduler_name()))
        .collect();
    let recorded = created.clone();
    let creating = tokio::spawn(async move {
        let limit = Arc::new(Semaphore::new(concurrency.max(1)));
        let mut tasks = JoinSet::new();
        for pod in objects {
            let permit = limit.clone().acquire_owned().await?;
            let api = api.clone();
            let created = recorded.clone();
            tasks.spawn(async move {
                let _permit = permit;
                let name = pod.metadata.name.clone().unwrap_or_default();
                let pp = PostParams::default();
                retry(&format!("creating pod {name}"), || api.create(&pp, &pod)).await?;
                created
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name, Instant::now());
                anyhow::Ok(())
            });
            while let Some(r) = tasks.try_join_next() {
                r??;
            }
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        anyhow::Ok(Instant::now())
    });
    (creating, created)
}

/// Waits until every pod is bound, the rest are reported unschedulable and
/// nothing moved for `quiet`, nothing moved for long, or `timeout`:
/// which of these ended it.
pub(super) async fn wait_for_binds(
    which: Which,
    timeout: Duration,
    quiet: Duration,
    ready_at: Instant,
    progress: &mut Progress,
    scheduler: &mut gputopo_testenv::process::Process,
) -> Result<&'static str> {
    let start = progress.start;
    let total = progress.total;
    let deadline = start.max(ready_at) + timeout;
    let stall = (quiet * 4).max(Duration::from_secs(60));
    let mut last_progress = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Some(handle) = progress.creating.as_mut()
            && handle.is_finished()
        {
            let done = progress.creating.take().expect("checked").await??;
            progress.created_at = Some(done);
            log(
                which,
                format!(
                    "all {total} pods created in {:.1} s",
                    (done - start).as_secs_f64()
                ),
            );
        }
        let (bound, reported, last_bind) = {
            let seen = progress.seen.lock().unwrap_or_else(|e| e.into_inner());
            let bound = seen.values().filter(|s| s.bound_at.is_some()).count();
            let reported = seen
                .values()
                .filter(|s| s.bound_at.is_none() && s.unschedulable)
                .count();
            let last = seen.values().filter_map(|s| s.bound_at).max();
            (bound, reported, last)
        };
        scheduler.check_running()?;
        let now = Instant::now();
        if last_progress.elapsed() >= Duration::from_secs(5) {
            last_progress = now;
            log(
                which,
                format!(
                    "{:>6.1} s: created {}, bound {bound}, unschedulable {reported}",
                    (now - start).as_secs_f64(),
                    progress.created.lock().map(|c| c.len()).unwrap_or(0)
                ),
            );
        }
        let Some(created_at) = progress.created_at else {
            if now > deadline {
                return Ok("timeout");
            }
            continue;
        };
        let last_activity = last_bind.map_or(created_at, |b| b.max(created_at));
        if bound == total {
            return Ok("all bound");
        }
        if bound + reported == total && now - last_activity >= quiet {
            return Ok("settled");
        }
        if now - last_activity >= stall {
            return Ok("stalled");
        }
        if now > deadline {
            return Ok("timeout");
        }
    }
}

pub(super) fn node_of(p: &Pod) -> Option<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
}

pub(super) fn unschedulable_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| c.message.clone().unwrap_or_default())
}
