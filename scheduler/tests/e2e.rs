//! End to end on a real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kwok; see gputopo-testenv): GPU nodes simulated
//! by kwok with `GpuTopology` objects made from recorded `nvidia-smi topo -m`
//! outputs, and `gputopo-scheduler` run as its own process with an admin
//! kubeconfig, as in a cluster.
//!
//! Tests share one control plane. Each gets its own nodes (selected by a
//! unique `e2e-group` label in its pods' nodeSelector) and its own scheduler
//! process with a unique scheduler name, so they cannot take each other's pods.

mod common;

use common::*;
use gputopo_scheduler::gangs::{PodGroup, PodGroupSpec};
use gputopo_scheduler_core::accounting::ReadingTrust;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::SnapshotBuilder;
use gputopo_scheduler_core::snapshot::kube::node_input;
use gputopo_testenv::TestEnv;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ddp_pod_gets_the_nvlink_quad_scheduler_core_chooses_and_runs() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("ddp");
    let node_name = env.unique_name("dgx1");
    let (node, topology) = fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-ddp");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("ddp").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pod = gpu_pod(
        "ddp",
        &sched,
        &group,
        4,
        &[("gputopo.dev/workload", "training")],
    );
    create(&pods, &pod).await;

    // What scheduler-core picks on the same node, empty.
    let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
    b.node(
        node_input(&node, Some(&topology), ReadingTrust::at(Timestamp::now())).expect("node input"),
    );
    let snapshot = b.build().expect("snapshot");
    let mut k8s_pod = pod.clone();
    k8s_pod.metadata.namespace = Some(ns.clone());
    let pending = PendingPod::from_k8s(&k8s_pod).expect("the pod reads");
    let expected = schedule(&snapshot, &pending, &SchedulerConfig::default());
    let expected = match &expected {
        Decision::Placed(p) => p,
        Decision::Unschedulable(u) => panic!("scheduler-core does not place it: {}", u.message),
    };

    let got = bound(&pods, "ddp", &s).await;
    assert_eq!(node_of(&got).as_deref(), Some(node_name.as_str()));
    assert_eq!(
        gpus_of(&got),
        expected.gpus,
        "the GPUs written are scheduler-core's"
    );
    assert_eq!(gpus_of(&got).len(), 4);
    let bottleneck = annotation(&got, "scheduler.gputopo.dev/bottleneck").unwrap_or_default();
    assert!(
        bottleneck.starts_with("NV"),
        "an NVLink-connected quad: {bottleneck}"
    );
    assert_eq!(
        Some(bottleneck),
        expected.bottleneck.map(|b| b.to_string()),
        "the bottleneck is scheduler-core's"
    );
    // Every pair-wise hop of the chosen ring is NVLink on a DGX-1 quad from one island.
    let e = one_event(&client, &ns, "ddp", "Scheduled", &s).await;
    let text = note(&e);
    assert!(
        text.contains(&format!(
            "to {node_name} with GPUs {}",
            expected.assigned_gpus()
        )),
        "{text}"
    );
    // The GPU-set part of the explanation; the rest counts the cluster's
    // nodes, which other tests share.
    let set_part = expected
        .explanation
        .split("; node score")
        .next()
        .unwrap_or_default();
    assert!(set_part.contains("ring bottleneck NV"), "{set_part}");
    assert!(text.contains(set_part), "{text}\nwanted: {set_part}");

    let running = wait_for(
        "the pod Running under kwok",
        Duration::from_secs(60),
        || async {
            pods.get("ddp")
                .await
                .ok()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        },
        || s.log(),
    )
    .await;
    assert_eq!(gpus_of(&running), expected.gpus);

    let (code, metrics) = s.get("/metrics").await.expect("/metrics answers");
    assert_eq!(code, 200);
    for line in [
        "gputopo_placement_decisions_total 1",
        "gputopo_schedule_attempts_total{result=\"scheduled\",workload=\"training\"} 1",
        "gputopo_scheduling_duration_seconds_count",
        "gputopo_gpu_allocation_ratio",
        "gputopo_fragmentation_ratio",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
    assert!(
        metrics.contains(&format!(
            "gputopo_placement_bottleneck_total{{bottleneck=\"{}\"}} 1",
            expected
                .bottleneck
                .map(|b| b.to_string())
                .unwrap_or_default()
        )),
        "{metrics}"
    );
    assert_eq!(s.get("/healthz").await.map(|r| r.0), Some(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impossible_pod_gets_one_failed_scheduling_event_with_the_reasons() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("impossible");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-impossible");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("impossible").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(&pods, &gpu_pod("huge", &sched, &group, 16, &[])).await;
    create(
        &pods,
        &gpu_pod(
            "nv24",
            &sched,
            &group,
            4,
            &[("gputopo.dev/min-nvlink-level", "NV24")],
        ),
    )
    .await;

    let huge = one_event(&client, &ns, "huge", "FailedScheduling", &s).await;
    let text = note(&huge);
    assert!(
        text.starts_with("0/") && text.contains(" nodes are available: "),
        "{text}"
    );
    assert!(text.contains("GPU"), "{text}");
    let nv24 = one_event(&client, &ns, "nv24", "FailedScheduling", &s).await;
    let text = note(&nv24);
    assert!(text.starts_with("0/") && text.contains("NV24"), "{text}");

    // Retries add to an event's series rather than writing new events: one
    // event per distinct message. (The message counts every node of the
    // shared cluster, so it changes while other tests add nodes.)
    tokio::time::sleep(Duration::from_secs(5)).await;
    let all = events(&client, &ns, "huge", "FailedScheduling").await;
    let notes: Vec<String> = all.iter().map(note).collect();
    let distinct: BTreeSet<&String> = notes.iter().collect();
    assert_eq!(distinct.len(), notes.len(), "an event repeated: {notes:?}");
    assert!(
        notes
            .iter()
            .all(|n| n.starts_with("0/") && n.contains("1 too few free GPUs")),
        "{notes:?}"
    );
    let p = pods.get("huge").await.expect("the pod");
    assert!(node_of(&p).is_none());
    let condition = p
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "PodScheduled"))
        .expect("a PodScheduled condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    assert!(condition.message.unwrap_or_default().starts_with("0/"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_annotation_is_named_and_the_scheduler_keeps_going() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("bad");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-bad");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("bad").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(
        &pods,
        &gpu_pod(
            "star",
            &sched,
            &group,
            2,
            &[("gputopo.dev/collective", "star")],
        ),
    )
    .await;
    let e = one_event(&client, &ns, "star", "FailedScheduling", &s).await;
    let text = note(&e);
    assert!(text.contains("gputopo.dev/collective"), "{text}");
    assert!(
        text.contains("ring | all-to-all"),
        "the accepted forms: {text}"
    );

    create(&pods, &gpu_pod("good", &sched, &group, 2, &[])).await;
    let good = bound(&pods, "good", &s).await;
    assert_eq!(gpus_of(&good).len(), 2);
    assert!(node_of(&pods.get("star").await.expect("star")).is_none());
    s.get("/healthz").await.expect("still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_racing_for_the_last_quad_never_share_a_gpu() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("race");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-race");
    let ns = env.create_namespace("race").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // All three wait before the scheduler starts, so one cycle decides them.
    for name in ["r1", "r2", "r3"] {
        create(&pods, &gpu_pod(name, &sched, &group, 4, &[])).await;
    }
    let s = SchedulerProcess::start(env, &sched).await;
    let first = bound(&pods, "r1", &s).await;
    let second = bound(&pods, "r2", &s).await;
    let (a, b) = (gpus_of(&first), gpus_of(&second));
    assert_eq!((a.len(), b.len()), (4, 4));
    let union: BTreeSet<u32> = a.iter().chain(&b).copied().collect();
    assert_eq!(union.len(), 8, "no GPU given twice: {a:?} {b:?}");
    let e = one_event(&client, &ns, "r3", "FailedScheduling", &s).await;
    assert!(note(&e).starts_with("0/"), "{}", note(&e));
    assert!(node_of(&pods.get("r3").await.expect("r3")).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_bound_pods_keep_their_gpus() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("restart");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-restart");
    let ns = env.create_namespace("restart").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let mut s = SchedulerProcess::start(env, &sched).await;
    create(&pods, &gpu_pod("before", &sched, &group, 4, &[])).await;
    let before = gpus_of(&bound(&pods, "before", &s).await);
    s.process.kill();
    drop(s);

    create(&pods, &gpu_pod("after-1", &sched, &group, 4, &[])).await;
    create(&pods, &gpu_pod("after-2", &sched, &group, 4, &[])).await;
    let s = SchedulerProcess::start(env, &sched).await;
    let after = gpus_of(&bound(&pods, "after-1", &s).await);
    assert_eq!(after.len(), 4);
    assert!(
        after.iter().all(|g| !before.contains(g)),
        "a restarted scheduler gave away GPUs it had bound: {before:?} then {after:?}"
    );
    assert_eq!(gpus_of(&pods.get("before").await.expect("before")), before);
    let e = one_event(&client, &ns, "after-2", "FailedScheduling", &s).await;
    assert!(note(&e).starts_with("0/"), "{}", note(&e));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_lands_on_two_adjacent_leaves_or_binds_none() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("gang");
    // 4 leaves of 4 DGX A100 under 2 spines.
    let mut leaf_of = BTreeMap::new();
    for (spine, leaves) in [
        ("spine-a", ["leaf-1", "leaf-2"]),
        ("spine-b", ["leaf-3", "leaf-4"]),
    ] {
        for leaf in leaves {
            for i in 0..4 {
                let name = env.unique_name(&format!("a100-{leaf}-{i}"));
                fixture_node(
                    env,
                    &name,
                    DGX_A100,
                    &[
                        ("e2e-group", &group),
                        ("gputopo.dev/spine", spine),
                        ("gputopo.dev/leaf", leaf),
                    ],
                )
                .await;
                leaf_of.insert(name, (spine, leaf));
            }
        }
    }
    let sched = env.unique_name("sched-gang");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("gang").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    Api::<PodGroup>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &PodGroup::new(
                "train",
                PodGroupSpec {
                    min_member: 8,
                    schedule_timeout_seconds: None,
                },
            ),
        )
        .await
        .expect("creating the PodGroup");
    // Seven members first: none may bind until the eighth exists.
    for i in 0..7 {
        let mut p = gpu_pod(&format!("train-{i}"), &sched, &group, 8, &[]);
        p.metadata.labels = Some(BTreeMap::from([(
            "scheduling.x-k8s.io/pod-group".to_string(),
            "train".to_string(),
        )]));
        create(&pods, &p).await;
    }
    let e = one_event(&client, &ns, "train-0", "FailedScheduling", &s).await;
    assert!(note(&e).contains("PodGroup"), "{}", note(&e));
    assert!(
        pods.list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .iter()
            .all(|p| node_of(p).is_none()),
        "a member bound before the gang was complete"
    );
    let mut p = gpu_pod("train-7", &sched, &group, 8, &[]);
    p.metadata.labels = Some(BTreeMap::from([(
        "scheduling.x-k8s.io/pod-group".to_string(),
        "train".to_string(),
    )]));
    create(&pods, &p).await;
    let mut nodes = BTreeSet::new();
    for i in 0..8 {
        let pod = bound(&pods, &format!("train-{i}"), &s).await;
        assert_eq!(gpus_of(&pod).len(), 8);
        nodes.insert(node_of(&pod).expect("bound"));
    }
    assert_eq!(nodes.len(), 8, "one member per node");
    let leaves: BTreeSet<_> = nodes.iter().map(|n| leaf_of[n]).collect();
    let spines: BTreeSet<_> = leaves.iter().map(|(s, _)| *s).collect();
    assert_eq!(leaves.len(), 2, "two whole leaves: {leaves:?}");
    assert_eq!(
        spines.len(),
        1,
        "adjacent leaves, under one spine: {leaves:?}"
    );

    // Eight nodes are left: a gang of nine 8-GPU pods cannot fit, and binds none.
    for i in 0..9 {
        create(
            &pods,
            &gpu_pod(
                &format!("big-{i}"),
                &sched,
                &group,
                8,
                &[("gputopo.dev/gang", "big"), ("gputopo.dev/gang-size", "9")],
            ),
        )
        .await;
    }
    for i in 0..9 {
        one_event(&client, &ns, &format!("big-{i}"), "FailedScheduling", &s).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bound_big = pods
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("big-"))
        })
        .filter(|p| node_of(p).is_some())
        .count();
    assert_eq!(bound_big, 0, "a gang that cannot fit binds none");
}

/// The lease's holder, if any.
async fn lease_holder(client: &Client, ns: &str, name: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Whether the replica's /metrics says `gputopo_leader 1`.
async fn leads(s: &SchedulerProcess) -> Option<bool> {
    let (status, body) = s.get("/metrics").await?;
    if status != 200 {
        return None;
    }
    let line = body.lines().find(|l| l.starts_with("gputopo_leader "))?;
    Some(line.trim_end().ends_with(" 1"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_bind_each_pod_once_from_the_leader_and_fail_over() {
    const LEASE: Duration = Duration::from_secs(4);
    const RENEW: Duration = Duration::from_secs(3);
    const RETRY: Duration = Duration::from_secs(1);
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("leader");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-leader");
    let lease = env.unique_name("lease");
    let lease_ns = lease_namespace(env).await;
    let ns = env.create_namespace("leader").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let replica = |pod_name: &'static str| {
        let lease = lease.clone();
        move |_port: u16| {
            (
                vec![
                    "--leader-elect-lease-name".to_string(),
                    lease,
                    "--leader-elect-lease-duration".into(),
                    "4s".into(),
                    "--leader-elect-renew-deadline".into(),
                    "3s".into(),
                    "--leader-elect-retry-period".into(),
                    "1s".into(),
                ],
                vec![("POD_NAME", pod_name.to_string())],
            )
        }
    };
    let mut a = SchedulerProcess::start_with(env, &sched, replica("replica-a")).await;
    let holder_a = wait_for(
        "replica-a holds the lease",
        Duration::from_secs(30),
        || async {
            lease_holder(&client, lease_ns, &lease)
                .await
                .filter(|h| h.starts_with("replica-a_"))
        },
        || a.log(),
    )
    .await;
    let b = SchedulerProcess::start_with(env, &sched, replica("replica-b")).await;

    let names: Vec<String> = (0..4).map(|i| format!("p{i}")).collect();
    for n in &names {
        create(&pods, &gpu_pod(n, &sched, &group, 1, &[])).await;
    }
    let mut used = BTreeSet::new();
    for n in &names {
        let pod = bound(&pods, n, &a).await;
        for g in gpus_of(&pod) {
            assert!(used.insert(g), "GPU {g} given twice");
        }
        // Wait for the (background) event, then check there is one only.
        one_event(&client, &ns, n, "Scheduled", &a).await;
        let scheduled = events(&client, &ns, n, "Scheduled").await;
        assert_eq!(
            scheduled.len(),
            1,
            "{n}: one Scheduled event: {scheduled:?}"
        );
        assert_eq!(
            scheduled[0].reporting_instance.as_deref(),
            Some("replica-a"),
            "{n} bound by the leader"
        );
    }
    assert_eq!(
        lease_holder(&client, lease_ns, &lease).await.as_deref(),
        Some(holder_a.as_str())
    );
    assert_eq!(leads(&a).await, Some(true), "{}", a.log());
    assert_eq!(leads(&b).await, Some(false), "{}", b.log());
    assert!(
        !std::fs::read_to_string(&b.process.log)
            .unwrap_or_default()
            .contains("leading: scheduling"),
        "the standby scheduled:\n{}",
        b.log()
    );

    // Fail over: SIGKILL the leader (no release), then a new pod.
    a.process.kill();
    let killed = Instant::now();
    create(&pods, &gpu_pod("after", &sched, &group, 1, &[])).await;
    let deadline = killed + Duration::from_secs(60);
    let (took_lease, bound_after) = loop {
        let holder = lease_holder(&client, lease_ns, &lease).await;
        let pod = pods.get("after").await.ok();
        if let Some(pod) = pod.filter(|p| node_of(p).is_some()) {
            let took = holder.filter(|h| h.starts_with("replica-b_"));
            assert!(
                took.is_some(),
                "bound while replica-b does not hold the lease"
            );
            break (killed.elapsed(), pod);
        }
        assert!(
            Instant::now() < deadline,
            "no failover within 60 s:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for g in gpus_of(&bound_after) {
        assert!(used.insert(g), "GPU {g} given twice after the failover");
    }
    let scheduled = one_event(&client, &ns, "after", "Scheduled", &b).await;
    assert_eq!(scheduled.reporting_instance.as_deref(), Some("replica-b"));
    assert_eq!(leads(&b).await, Some(true), "{}", b.log());
    let transitions = Api::<Lease>::namespaced(client.clone(), lease_ns)
        .get(&lease)
        .await
        .expect("the lease")
        .spec
        .and_then(|s| s.lease_transitions);
    assert_eq!(transitions, Some(1));
    println!(
        "scheduler failover (lease {LEASE:?}, renew deadline {RENEW:?}, retry {RETRY:?}): {:.2} s from SIGKILL of the leader to the next pod bound by the standby",
        took_lease.as_secs_f64()
    );
    assert!(
        took_lease < LEASE + RETRY + Duration::from_secs(3),
        "failover took {took_lease:?}"
    );
}

/// A pod pinned to the node labelled `e2e-slot=<slot>` of `group`.
fn slot_pod(
    name: &str,
    scheduler: &str,
    group: &str,
    slot: &str,
    gpus: u32,
    annotations: &[(&str, &str)],
) -> Pod {
    let mut p = gpu_pod(name, scheduler, group, gpus, annotations);
    if let Some(spec) = p.spec.as_mut() {
        spec.node_selector
            .get_or_insert_default()
            .insert("e2e-slot".into(), slot.into());
    }
    p
}

/// A cluster-scoped PriorityClass with a unique name; returns the name.
async fn priority_class(env: &TestEnv, prefix: &str, value: i32) -> String {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let name = env.unique_name(prefix);
    let class: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }))
    .expect("a PriorityClass");
    Api::<PriorityClass>::all(env.client().await)
        .create(&PostParams::default(), &class)
        .await
        .unwrap_or_else(|e| panic!("creating PriorityClass {name}: {e}"));
    // The Priority admission plugin reads classes from an informer: until it
    // has seen this one, pods naming it are refused. Wait for a dry-run pod
    // to pass admission.
    let mut probe = gpu_pod("priority-probe", "none", "none", 0, &[]);
    probe.spec.as_mut().expect("spec").priority_class_name = Some(name.clone());
    let pods = Api::<Pod>::namespaced(env.client().await, "default");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        &format!("PriorityClass {name} known to admission"),
        Duration::from_secs(30),
        || async { pods.create(&dry_run, &probe).await.ok().map(|_| ()) },
        String::new,
    )
    .await;
    name
}

/// Whether the pod is gone or on its way out.
async fn evicted(pods: &Api<Pod>, name: &str) -> bool {
    match pods.get_opt(name).await.expect("reading a pod") {
        None => true,
        Some(p) => p.metadata.deletion_timestamp.is_some(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_training_gang_preempts_inference_not_a_training_pod_near_completion() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("preempt");
    // One leaf of three DGX A100: `serve` full of inference, `train` full
    // with a training pod due to finish in 30 minutes, `free` empty.
    for slot in ["serve", "train", "free"] {
        let name = env.unique_name(&format!("a100-{slot}"));
        fixture_node(
            env,
            &name,
            DGX_A100,
            &[
                ("e2e-group", &group),
                ("e2e-slot", slot),
                ("gputopo.dev/spine", "spine-a"),
                ("gputopo.dev/leaf", "leaf-1"),
            ],
        )
        .await;
    }
    let sched = env.unique_name("sched-preempt");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("preempt").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for i in 0..8 {
        let name = format!("serve-{i}");
        create(
            &pods,
            &slot_pod(
                &name,
                &sched,
                &group,
                "serve",
                1,
                &[("gputopo.dev/workload", "inference")],
            ),
        )
        .await;
    }
    let finish = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_secs(30 * 60))
    .to_string();
    create(
        &pods,
        &slot_pod(
            "finetune",
            &sched,
            &group,
            "train",
            8,
            &[
                ("gputopo.dev/workload", "training"),
                ("gputopo.dev/expected-completion", &finish),
            ],
        ),
    )
    .await;
    for i in 0..8 {
        bound(&pods, &format!("serve-{i}"), &s).await;
    }
    let finetune = bound(&pods, "finetune", &s).await;

    // A higher-priority two-member gang of 8-GPU training pods: one member
    // fits on `free`; the other needs a whole node freed.
    let high = priority_class(env, "e2e-high", 1000).await;
    for i in 0..2 {
        let mut p = gpu_pod(
            &format!("pretrain-{i}"),
            &sched,
            &group,
            8,
            &[
                ("gputopo.dev/workload", "training"),
                ("gputopo.dev/gang", "pretrain"),
                ("gputopo.dev/gang-size", "2"),
            ],
        );
        p.spec.as_mut().expect("spec").priority_class_name = Some(high.clone());
        create(&pods, &p).await;
    }
    let mut nodes = BTreeSet::new();
    for i in 0..2 {
        let p = bound(&pods, &format!("pretrain-{i}"), &s).await;
        assert_eq!(gpus_of(&p).len(), 8);
        nodes.insert(node_of(&p).expect("bound"));
    }
    assert!(
        !nodes.contains(&node_of(&finetune).expect("bound")),
        "the gang took the protected training pod's node: {nodes:?}"
    );
    for i in 0..8 {
        assert!(
            evicted(&pods, &format!("serve-{i}")).await,
            "serve-{i} still runs"
        );
    }
    let still = pods.get("finetune").await.expect("finetune is still there");
    assert!(
        still.metadata.deletion_timestamp.is_none(),
        "the training pod near completion was evicted"
    );
    // The victims were told who preempted them; the preemptors why they waited.
    event_where(
        &client,
        &ns,
        "serve-0",
        "Preempted",
        |n| n.contains("pretrain-"),
        &s,
    )
    .await;
    event_where(
        &client,
        &ns,
        "pretrain-0",
        "FailedScheduling",
        |n| n.contains("preempting"),
        &s,
    )
    .await;
    let metrics = s.get("/metrics").await.expect("metrics").1;
    assert!(
        metrics.contains("gputopo_preemption_evictions_total{result=\"evicted\"} 8"),
        "{metrics}"
    );
    assert!(
        metrics.contains("gputopo_gang_wait_seconds_count 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_honours_a_pod_disruption_budget() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("pdb");
    fixture_node(
        env,
        &env.unique_name("a100-pdb"),
        DGX_A100,
        &[("e2e-group", &group), ("e2e-slot", "serve")],
    )
    .await;
    let sched = env.unique_name("sched-pdb");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("pdb").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // Every serving replica must stay up.
    let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "serve"},
        "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "serve"}}}
    }))
    .expect("a PDB");
    Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pdb)
        .await
        .expect("creating the PDB");
    for i in 0..4 {
        let mut p = slot_pod(
            &format!("serve-{i}"),
            &sched,
            &group,
            "serve",
            2,
            &[("gputopo.dev/workload", "inference")],
        );
        p.metadata.labels = Some(BTreeMap::from([("app".into(), "serve".into())]));
        create(&pods, &p).await;
    }
    for i in 0..4 {
        bound(&pods, &format!("serve-{i}"), &s).await;
    }
    let high = priority_class(env, "e2e-high", 1000).await;
    let mut p = gpu_pod(
        "urgent",
        &sched,
        &group,
        8,
        &[("gputopo.dev/workload", "training")],
    );
    p.spec.as_mut().expect("spec").priority_class_name = Some(high);
    create(&pods, &p).await;
    let e = wait_for(
        "a FailedScheduling event naming the budget",
        Duration::from_secs(60),
        || async {
            events(&client, &ns, "urgent", "FailedScheduling")
                .await
                .into_iter()
                .find(|e| note(e).contains("PodDisruptionBudget"))
        },
        || s.log(),
    )
    .await;
    assert!(note(&e).contains("serve-"), "{}", note(&e));
    for i in 0..4 {
        assert!(
            !evicted(&pods, &format!("serve-{i}")).await,
            "serve-{i} was evicted despite its budget"
        );
    }
    let urgent = pods.get("urgent").await.expect("urgent");
    assert!(node_of(&urgent).is_none(), "urgent bound on a full node");
    let metrics = s.get("/metrics").await.expect("metrics").1;
    assert!(
        !metrics.contains("gputopo_preemption_evictions_total{result=\"evicted\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inference_pods_sharing_gpus_pack_and_never_touch_a_held_gpu() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("share");
    fixture_node(
        env,
        &env.unique_name("a100-share"),
        DGX_A100,
        &[("e2e-group", &group)],
    )
    .await;
    let sched = env.unique_name("sched-share");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("share").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(
        &pods,
        &gpu_pod(
            "train",
            &sched,
            &group,
            4,
            &[("gputopo.dev/workload", "training")],
        ),
    )
    .await;
    let held: BTreeSet<u32> = gpus_of(&bound(&pods, "train", &s).await)
        .into_iter()
        .collect();
    assert_eq!(held.len(), 4);
    // Six quarter-GPU inference pods: no nvidia.com/gpu limit, a share.
    for i in 0..6 {
        let mut p = gpu_pod(
            &format!("infer-{i}"),
            &sched,
            &group,
            0,
            &[
                ("gputopo.dev/workload", "inference"),
                ("gputopo.dev/gpu-share", "0.25"),
            ],
        );
        p.spec.as_mut().expect("spec").containers[0].resources = None;
        create(&pods, &p).await;
    }
    let mut per_gpu: BTreeMap<u32, u32> = BTreeMap::new();
    for i in 0..6 {
        let p = bound(&pods, &format!("infer-{i}"), &s).await;
        let gpus = gpus_of(&p);
        assert_eq!(gpus.len(), 1, "a shared pod names the one GPU it shares");
        assert!(
            !held.contains(&gpus[0]),
            "infer-{i} shares GPU {} held whole by train",
            gpus[0]
        );
        *per_gpu.entry(gpus[0]).or_default() += 1;
    }
    assert!(
        per_gpu.values().all(|&n| n <= 4),
        "a GPU over 100 %: {per_gpu:?}"
    );
    assert!(
        per_gpu.len() <= 2,
        "six quarter-GPU pods spread over {} GPUs instead of packing: {per_gpu:?}",
        per_gpu.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_gang_holds_the_gpus_a_stream_of_small_pods_would_take() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("reserve");
    for slot in ["a", "b"] {
        fixture_node(
            env,
            &env.unique_name(&format!("a100-reserve-{slot}")),
            DGX_A100,
            &[
                ("e2e-group", &group),
                ("e2e-slot", slot),
                ("gputopo.dev/spine", "spine-a"),
                ("gputopo.dev/leaf", "leaf-1"),
            ],
        )
        .await;
    }
    let sched = env.unique_name("sched-reserve");
    // The shared cluster's size varies with the tests running beside this
    // one: allow any fraction, so that only this test's nodes matter.
    let s = SchedulerProcess::start_with_config(
        env,
        &sched,
        "gangs: {reservations: {maxFraction: 1.0}}\n",
    )
    .await;
    let ns = env.create_namespace("reserve").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // Both nodes full of one-GPU pods of the gang's own priority:
    // preemption cannot help, only waiting can.
    for slot in ["a", "b"] {
        for i in 0..8 {
            create(
                &pods,
                &slot_pod(&format!("fill-{slot}-{i}"), &sched, &group, slot, 1, &[]),
            )
            .await;
        }
    }
    for slot in ["a", "b"] {
        for i in 0..8 {
            bound(&pods, &format!("fill-{slot}-{i}"), &s).await;
        }
    }
    for i in 0..2 {
        create(
            &pods,
            &gpu_pod(
                &format!("big-{i}"),
                &sched,
                &group,
                8,
                &[
                    ("gputopo.dev/workload", "training"),
                    ("gputopo.dev/gang", "big"),
                    ("gputopo.dev/gang-size", "2"),
                ],
            ),
        )
        .await;
    }
    let e = wait_for(
        "a FailedScheduling event saying the gang reserved its GPUs",
        Duration::from_secs(60),
        || async {
            events(&client, &ns, "big-0", "FailedScheduling")
                .await
                .into_iter()
                .find(|e| note(e).contains("reserved 16 GPUs"))
        },
        || s.log(),
    )
    .await;
    assert!(
        note(&e).contains("no other pod may take them"),
        "{}",
        note(&e)
    );
    // The stream: each time a GPU frees up, a new one-GPU pod arrives.
    for slot in ["a", "b"] {
        for i in 0..8 {
            pods.delete(
                &format!("fill-{slot}-{i}"),
                &kube::api::DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await
            .expect("deleting a filler");
            create(
                &pods,
                &gpu_pod(&format!("small-{slot}-{i}"), &sched, &group, 1, &[]),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    for i in 0..2 {
        let p = bound(&pods, &format!("big-{i}"), &s).await;
        assert_eq!(gpus_of(&p).len(), 8);
    }
    let small_bound: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("small-"))
                && node_of(p).is_some()
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert!(
        small_bound.is_empty(),
        "small pods took GPUs reserved for the gang: {small_bound:?}"
    );
    let metrics = s.get("/metrics").await.expect("metrics").1;
    assert!(
        metrics.contains("gputopo_gang_wait_seconds_count 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_killed_mid_gang_completes_it_after_restart_and_assigns_no_gpu_twice() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("midgang");
    for i in 0..4 {
        fixture_node(
            env,
            &env.unique_name(&format!("a100-midgang-{i}")),
            DGX_A100,
            &[
                ("e2e-group", &group),
                ("gputopo.dev/spine", "spine-a"),
                ("gputopo.dev/leaf", "leaf-1"),
            ],
        )
        .await;
    }
    let sched = env.unique_name("sched-midgang");
    let ns = env.create_namespace("midgang").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // The first process dies after its second binding, between members.
    let mut s = SchedulerProcess::start_with(env, &sched, |port| {
        (
            vec![
                "--leader-elect-lease-name".into(),
                format!("{sched}-{port}"),
            ],
            vec![(
                gputopo_scheduler::scheduler::FAILPOINT_EXIT_AFTER_BINDS,
                "2".to_string(),
            )],
        )
    })
    .await;
    for i in 0..4 {
        create(
            &pods,
            &gpu_pod(
                &format!("member-{i}"),
                &sched,
                &group,
                8,
                &[
                    ("gputopo.dev/gang", "midgang"),
                    ("gputopo.dev/gang-size", "4"),
                ],
            ),
        )
        .await;
    }
    s.wait_exit("the first scheduler to abort mid-gang").await;
    let list = pods.list(&ListParams::default()).await.expect("pods").items;
    let bound_now = list.iter().filter(|p| node_of(p).is_some()).count();
    assert_eq!(
        bound_now, 2,
        "the failpoint should stop it after two bindings"
    );
    drop(s);

    let s = SchedulerProcess::start(env, &sched).await;
    let mut seen: BTreeSet<(String, u32)> = BTreeSet::new();
    for i in 0..4 {
        let p = bound(&pods, &format!("member-{i}"), &s).await;
        let node = node_of(&p).expect("bound");
        let gpus = gpus_of(&p);
        assert_eq!(gpus.len(), 8, "member-{i}: {gpus:?}");
        for g in gpus {
            assert!(
                seen.insert((node.clone(), g)),
                "GPU {g} of {node} assigned twice"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_on_four_leaves_places_each_pod_where_its_wires_are() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("fleet");
    // Two spines, four leaves, one machine kind per leaf, two of each.
    let mut leaf_of: BTreeMap<String, &str> = BTreeMap::new();
    for (spine, leaf, kind, fixture_path) in [
        ("spine-a", "leaf-1", "dgx1", DGX1),
        ("spine-a", "leaf-2", "a100", DGX_A100),
        ("spine-b", "leaf-3", "h100", HGX_H100),
        ("spine-b", "leaf-4", "pcie", PCIE_2SOCKET),
    ] {
        for i in 0..2 {
            let name = env.unique_name(&format!("{kind}-{i}"));
            fixture_node(
                env,
                &name,
                fixture_path,
                &[
                    ("e2e-group", &group),
                    ("gputopo.dev/spine", spine),
                    ("gputopo.dev/leaf", leaf),
                ],
            )
            .await;
            leaf_of.insert(name, leaf);
        }
    }
    let sched = env.unique_name("sched-fleet");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("fleet").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let leaf = |p: &Pod| leaf_of[&node_of(p).expect("bound")];

    // Eight GPUs all-to-all at NV18: only the H100s have it.
    create(
        &pods,
        &gpu_pod(
            "nv18",
            &sched,
            &group,
            8,
            &[("gputopo.dev/min-nvlink-level", "NV18")],
        ),
    )
    .await;
    let nv18 = bound(&pods, "nv18", &s).await;
    assert_eq!(leaf(&nv18), "leaf-3");

    // On the PCIe box: a pair behind one host bridge, a quad on one socket.
    let mut pair = gpu_pod("pcie-pair", &sched, &group, 2, &[]);
    let mut quad = gpu_pod("pcie-quad", &sched, &group, 4, &[]);
    for p in [&mut pair, &mut quad] {
        p.spec
            .as_mut()
            .expect("spec")
            .node_selector
            .get_or_insert_default()
            .insert("gputopo.dev/leaf".into(), "leaf-4".into());
    }
    create(&pods, &pair).await;
    let pair = bound(&pods, "pcie-pair", &s).await;
    let gpus = gpus_of(&pair);
    assert!(
        [[0, 1], [2, 3], [4, 5], [6, 7]]
            .iter()
            .any(|p| p[..] == gpus[..]),
        "the pair {gpus:?} is not behind one host bridge"
    );
    assert_eq!(
        annotation(&pair, "scheduler.gputopo.dev/bottleneck").as_deref(),
        Some("PHB")
    );
    create(&pods, &quad).await;
    let quad = bound(&pods, "pcie-quad", &s).await;
    let bottleneck = annotation(&quad, "scheduler.gputopo.dev/bottleneck");
    assert_ne!(
        bottleneck.as_deref(),
        Some("SYS"),
        "the quad {:?} crosses the sockets",
        gpus_of(&quad)
    );

    // A two-node gang needing NV12: one H100 is taken, the DGX-1 and the
    // PCIe boxes lack NV12, so both members go to the A100 leaf.
    for i in 0..2 {
        create(
            &pods,
            &gpu_pod(
                &format!("gang-{i}"),
                &sched,
                &group,
                8,
                &[
                    ("gputopo.dev/min-nvlink-level", "NV12"),
                    ("gputopo.dev/gang", "fleet"),
                    ("gputopo.dev/gang-size", "2"),
                ],
            ),
        )
        .await;
    }
    let mut nodes = BTreeSet::new();
    for i in 0..2 {
        let p = bound(&pods, &format!("gang-{i}"), &s).await;
        assert_eq!(leaf(&p), "leaf-2", "gang-{i}");
        nodes.insert(node_of(&p).expect("bound"));
    }
    assert_eq!(nodes.len(), 2, "one member per node");
}
