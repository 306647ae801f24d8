//! The differential test: one seeded stream of pods with random mixes of
//! the constraints kube-scheduler's plugins honour (inter-pod affinity and
//! anti-affinity, spread over zones and hostnames, host ports, local
//! volumes behind `WaitForFirstConsumer` claims, namespaces with labels),
//! placed once by kube-scheduler and once by gputopo-scheduler, each on its
//! own identical kwok nodes (three zones) in the one control plane, with
//! the real volume controller binding claims. An independent checker
//! (`gputopo_testenv::rule_checker`) reads every binding back: gputopo must break no hard
//! constraint, and a pod it leaves pending must carry only reasons
//! kube-scheduler gives.
//!
//! `GPUTOPO_DIFFERENTIAL_PODS` (default 150) pods per seed,
//! `GPUTOPO_DIFFERENTIAL_SEEDS` (default 3) seeds; BENCHMARKS.md records a
//! 2,000-pod run.

mod workload;

use super::common::*;
use gputopo_testenv::rule_checker;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use workload::{PodSpec, ZONE, ZONES};

/// kube-scheduler's reasons (as the aggregated message phrases them), and
/// gputopo's words for the same shortage of GPUs.
const UPSTREAM_REASONS: &[&str] = &[
    "Insufficient ",
    "Too many pods",
    "node(s) didn't match pod anti-affinity rules",
    "node(s) didn't match pod affinity rules",
    "node(s) didn't satisfy existing pods anti-affinity rules",
    "node(s) didn't match pod topology spread constraints",
    "node(s) didn't have free ports for the requested pod ports",
    "node(s) had volume node affinity conflict",
    "node(s) didn't find available persistent volumes to bind",
    "node(s) didn't match Pod's node affinity/selector",
    // A kwok node the node controller finds unreachable under load.
    "node(s) had untolerated taint",
    "node(s) were unschedulable",
    "too few free GPUs",
];

/// What became of one run.
struct Run {
    pods: Vec<Pod>,
    violations: Vec<String>,
}

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn gputopo_breaks_no_constraint_kube_scheduler_honours() {
    let pods = env_usize("GPUTOPO_DIFFERENTIAL_PODS", 150);
    let seeds = env_usize("GPUTOPO_DIFFERENTIAL_SEEDS", 3);
    let nodes = (pods / 40).max(9);
    let env = env().await;
    env.with_scheduler().await;
    env.with_controller_manager().await;
    for seed in 1..=seeds as u64 {
        let stream = workload::stream(seed, pods, nodes);
        let started = Instant::now();
        let kube = run("default-scheduler", &stream, nodes, &String::new).await;
        // A scheduler of its own per seed: the pods a seed leaves pending
        // are not the next seed's (each run's objects are deleted, too).
        let sched = env.unique_name("sched-diff");
        let s = SchedulerProcess::start(env, &sched).await;
        let ours = run(&sched, &stream, nodes, &|| s.log()).await;
        drop(s);
        let bound = |r: &Run| r.pods.iter().filter(|p| node_of(p).is_some()).count();
        let mut problems: Vec<String> = ours.violations.clone();
        for (who, r) in [("kube-scheduler", &kube), ("gputopo-scheduler", &ours)] {
            let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
            for p in r.pods.iter().filter(|p| node_of(p).is_none()) {
                for phrase in phrases(&unschedulable_message(p)) {
                    *reasons.entry(phrase).or_default() += 1;
                }
            }
            println!("seed {seed}: {who} pending reasons {reasons:?}");
        }
        for p in &ours.pods {
            if node_of(p).is_some() {
                continue;
            }
            let message = unschedulable_message(p);
            for phrase in phrases(&message) {
                if !UPSTREAM_REASONS.iter().any(|r| phrase.contains(r)) {
                    problems.push(format!(
                        "{}: pending for a reason kube-scheduler does not give: {phrase:?} ({message})",
                        p.metadata.name.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
        println!(
            "seed {seed}: {} pods on {nodes} nodes; kube-scheduler bound {} ({} violations), gputopo-scheduler bound {}; {} problems; {:.0} s",
            stream.len(),
            bound(&kube),
            kube.violations.len(),
            bound(&ours),
            problems.len(),
            started.elapsed().as_secs_f64()
        );
        // The checker is checked too: kube-scheduler must pass it.
        assert!(
            kube.violations.is_empty(),
            "kube-scheduler: {:#?}",
            kube.violations
        );
        assert!(
            problems.is_empty(),
            "gputopo-scheduler, seed {seed}: {problems:#?}"
        );
    }
}

/// The phrases of a `0/N nodes are available: 3 a, 2 b.` message.
fn phrases(message: &str) -> Vec<String> {
    let Some((_, rest)) = message.split_once("are available: ") else {
        return vec![message.to_string()];
    };
    // The reasons end with the first sentence (what follows is gputopo's
    // preemption note).
    let rest = rest.split(". ").next().unwrap_or(rest);
    let rest = rest
        .split(".;")
        .next()
        .unwrap_or(rest)
        .trim_end_matches('.');
    rest.split(", ")
        .map(|p| {
            p.split_once(' ')
                .filter(|(n, _)| n.chars().all(|c| c.is_ascii_digit()))
                .map_or(p, |(_, t)| t)
                .to_string()
        })
        .collect()
}

fn unschedulable_message(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| "(no PodScheduled message)".into())
}

/// Places `stream` under `scheduler` on fresh nodes and namespaces, waits
/// until every pod is bound or refused and nothing moves for 5 s, and
/// checks the outcome.
async fn run(scheduler: &str, stream: &[PodSpec], nodes: usize, log: &dyn Fn() -> String) -> Run {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("diff");
    let node_names: Vec<String> = (0..nodes)
        .map(|i| env.unique_name(&format!("diff-n{i}")))
        .collect();
    futures::future::join_all(node_names.iter().enumerate().map(|(i, name)| {
        let zone = format!("zone-{}", i % ZONES);
        let group = group.clone();
        async move {
            fixture_node(env, name, DGX_A100, &[("e2e-group", &group), (ZONE, &zone)]).await;
        }
    }))
    .await;
    let mut namespaces = BTreeMap::new();
    for team in ["a", "b"] {
        let ns = env.create_namespace(&format!("diff-{team}")).await;
        Api::<Namespace>::all(client.clone())
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"team": team}}})),
            )
            .await
            .expect("labelling the namespace");
        namespaces.insert(team, ns);
    }
    let class = env.unique_name("diff-local");
    let post = PostParams::default();
    let class_object: StorageClass = serde_json::from_value(json!({"metadata": {"name": class},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}))
    .expect("a class");
    Api::<StorageClass>::all(client.clone())
        .create(&post, &class_object)
        .await
        .expect("creating the class");
    let mut volume_names = Vec::new();
    for spec in stream {
        let ns = &namespaces[spec.namespace];
        if let Some(index) = spec.local_volume {
            let pv = env.unique_name("diff-pv");
            let node = &node_names[index];
            let volume: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": pv},
                "spec": {"storageClassName": class, "capacity": {"storage": "10Gi"},
                         "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/disk"},
                         "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}))
            .expect("a volume");
            Api::<PersistentVolume>::all(client.clone())
                .create(&post, &volume)
                .await
                .expect("creating a volume");
            volume_names.push(pv);
            let claim_name = format!("data-{}", spec.labels["app"].as_str().unwrap_or_default());
            let claim: PersistentVolumeClaim =
                serde_json::from_value(json!({"metadata": {"name": claim_name},
                "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}))
                .expect("a claim");
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
                .create(&post, &claim)
                .await
                .expect("creating a claim");
        }
        let mut pod = gpu_pod(&spec.name, scheduler, &group, spec.gpus, &[]);
        pod.metadata.labels = serde_json::from_value(spec.labels.clone()).expect("labels");
        let mut body = serde_json::to_value(pod.spec.take()).expect("a spec");
        merge_json(&mut body, &spec.extra);
        pod.spec = Some(serde_json::from_value(body).expect("a pod spec"));
        create(&Api::<Pod>::namespaced(client.clone(), ns), &pod).await;
    }
    let pods = settle(&client, &namespaces, stream.len(), log).await;
    let all_nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("e2e-group={group}")))
        .await
        .expect("nodes")
        .items;
    let volumes: Vec<PersistentVolume> = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("volumes")
        .items
        .into_iter()
        .filter(|v| volume_names.contains(v.metadata.name.as_ref().expect("named")))
        .collect();
    let mut claims = Vec::new();
    for ns in namespaces.values() {
        claims.extend(
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .expect("claims")
                .items,
        );
    }
    let violations = rule_checker::violations(&rule_checker::World {
        pods: &pods,
        nodes: &all_nodes,
        volumes: &volumes,
        claims: &claims,
    });
    clean_up(&client, &namespaces, &group, &volume_names).await;
    Run { pods, violations }
}

/// Deletes a run's namespaces (their pods and claims), nodes and volumes,
/// so that the next run's control plane carries none of its load.
async fn clean_up(
    client: &kube::Client,
    namespaces: &BTreeMap<&str, String>,
    group: &str,
    volumes: &[String],
) {
    let delete = DeleteParams::background();
    for ns in namespaces.values() {
        let pods = Api::<Pod>::namespaced(client.clone(), ns);
        let _ = pods
            .delete_collection(
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..delete.clone()
                },
                &ListParams::default(),
            )
            .await;
        let _ = Api::<Namespace>::all(client.clone())
            .delete(ns, &delete)
            .await;
    }
    let _ = Api::<Node>::all(client.clone())
        .delete_collection(
            &delete,
            &ListParams::default().labels(&format!("e2e-group={group}")),
        )
        .await;
    let pvs = Api::<PersistentVolume>::all(client.clone());
    for v in volumes {
        let _ = pvs.delete(v, &delete).await;
    }
}

/// Every pod bound or refused (`PodScheduled=False`), and no binding for
/// 5 s; claims of bound pods given time to bind.
async fn settle(
    client: &kube::Client,
    namespaces: &BTreeMap<&str, String>,
    expected: usize,
    log: &dyn Fn() -> String,
) -> Vec<Pod> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last_bound = usize::MAX;
    let mut stable_since = Instant::now();
    loop {
        let mut pods = Vec::new();
        for ns in namespaces.values() {
            pods.extend(
                Api::<Pod>::namespaced(client.clone(), ns)
                    .list(&ListParams::default())
                    .await
                    .expect("pods")
                    .items,
            );
        }
        let bound = pods.iter().filter(|p| node_of(p).is_some()).count();
        let decided = pods
            .iter()
            .filter(|p| {
                node_of(p).is_some() || unschedulable_message(p) != "(no PodScheduled message)"
            })
            .count();
        if bound != last_bound {
            last_bound = bound;
            stable_since = Instant::now();
        }
        if pods.len() == expected
            && decided == expected
            && stable_since.elapsed() > Duration::from_secs(5)
        {
            return pods;
        }
        assert!(
            Instant::now() < deadline,
            "{decided} of {expected} pods decided after 600 s; scheduler log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
