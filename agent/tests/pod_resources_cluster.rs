//! `gputopo-agent run` reading what the kubelet allocated and publishing it
//! in the `GpuTopology` status, against the real kube-apiserver of the test
//! environment.
//!
//! No kubelet runs here: the PodResources API is a **stand-in**, a server
//! generated from the kubelet's own `.proto`
//! (`kubelet-api/proto/podresources/v1/api.proto`, through
//! `gputopo-kubelet-api`) on a temporary unix socket, answering what each
//! test sets. The node's GPUs are the recorded HGX H100 (replayed as NVML).

mod common;

use common::kubelet::{Answer, Kubelet, container, devices, pod, uuid};
use common::{Agent, create_node, fixture, until};
use gputopo_api::{DeviceForm, GpuTopology, GpuTopologyStatus};
use gputopo_kubelet_api::podresources::PodResources;
use gputopo_testenv::TestEnv;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const HGX_H100: &str = "recorded/hgx-h100-8gpu-nvswitch-nvml.yaml";
const UNKNOWN: &str = "GPU-ffffffff-0000-4000-8000-00000000dead";

/// A trainer on GPUs 0 and 1; a pod whose two containers share GPU 3 by
/// time-slicing; a pod holding a GPU this node does not have; a NIC.
fn busy_node() -> Vec<PodResources> {
    vec![
        pod(
            "trainer",
            vec![container(
                "main",
                vec![devices("nvidia.com/gpu", vec![uuid(0), uuid(1)])],
            )],
        ),
        pod(
            "pair",
            vec![
                container(
                    "a",
                    vec![devices("nvidia.com/gpu", vec![format!("{}::0", uuid(3))])],
                ),
                container(
                    "b",
                    vec![devices("nvidia.com/gpu", vec![format!("{}::1", uuid(3))])],
                ),
            ],
        ),
        pod(
            "stray",
            vec![container(
                "main",
                vec![devices("nvidia.com/gpu", vec![UNKNOWN.into()])],
            )],
        ),
        pod(
            "net",
            vec![container(
                "main",
                vec![devices("rdma/hca_shared_devices_a", vec!["mlx5_0".into()])],
            )],
        ),
    ]
}

fn recording(dir: &Path) -> PathBuf {
    let to = dir.join("node.yaml");
    std::fs::copy(fixture(HGX_H100), &to).expect("fixture copied");
    to
}

fn start(env: &TestEnv, node: &str, rec: &Path, socket: &Path, heartbeat: &str) -> Agent {
    Agent::start(
        env,
        node,
        &[
            "--fixture",
            rec.to_str().expect("utf-8"),
            "--pod-resources-socket",
            socket.to_str().expect("utf-8"),
            "--pod-resources-timeout",
            "2s",
            "--allocations-heartbeat",
            heartbeat,
        ],
    )
}

async fn status_where(
    env: &TestEnv,
    node: &str,
    what: &str,
    ok: impl Fn(&GpuTopologyStatus) -> bool,
) -> GpuTopology {
    let topologies: Api<GpuTopology> = Api::all(env.client().await);
    until(what, || async {
        topologies
            .get_opt(node)
            .await
            .ok()
            .flatten()
            .filter(|t| t.status.as_ref().is_some_and(&ok))
    })
    .await
}

fn status_writes(env: &TestEnv, node: &str) -> usize {
    env.audit_events()
        .iter()
        .filter(|e| e.is_write() && e.is_about("gputopologies", node))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn publishes_what_the_kubelet_allocated_and_follows_it() {
    let env = TestEnv::shared().await;
    let (node, _) = create_node(env, "podres-busy", &[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("kubelet.sock");
    let pods: Answer = Arc::new(Mutex::new(busy_node()));
    let kubelet = Kubelet::serve(&sock, pods.clone()).await;
    let started = Timestamp::now();
    let agent = start(env, &node, &recording(dir.path()), &sock, "1h");

    let t = status_where(env, &node, "allocations", |s| !s.allocations.is_empty()).await;
    let status = t.status.expect("status");
    let gpus: Vec<u32> = status.allocations.iter().map(|a| a.gpu).collect();
    assert_eq!(gpus, [0, 1, 3]);
    assert_eq!(status.allocations[0].pods, ["ml/trainer"]);
    let shared = &status.allocations[2];
    assert_eq!(shared.pods, ["ml/pair"], "one pod");
    let holders: Vec<(&str, DeviceForm)> = shared
        .holders
        .iter()
        .map(|h| (h.container.as_str(), h.form))
        .collect();
    assert_eq!(
        holders,
        [("a", DeviceForm::Replica), ("b", DeviceForm::Replica)]
    );
    let reading = status.pod_resources.expect("podResources");
    assert_eq!(reading.last_error, None);
    assert_eq!(reading.unknown_devices, [UNKNOWN]);
    assert!(reading.observed_at.0 >= started.checked_sub(Duration::from_secs(5)).unwrap());
    assert_eq!(
        status.conditions[0].status, "False",
        "the rest is published"
    );
    assert_eq!(
        agent.metric("gputopo_agent_pod_resources_unknown_devices"),
        1.0
    );
    assert_eq!(agent.get("/healthz").0, 200);
    assert_eq!(agent.get("/readyz").0, 200);

    // Nothing changes for three scans: no write (the heartbeat is an hour).
    let scans = agent.ok_scans();
    let before = status_writes(env, &node);
    until("three more scans", || async {
        (agent.ok_scans() >= scans + 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        status_writes(env, &node),
        before,
        "a quiet node writes nothing"
    );

    // The trainer finishes: its GPUs are free at the next scan.
    pods.lock().expect("answer").remove(0);
    let t = status_where(env, &node, "GPUs 0 and 1 freed", |s| {
        s.allocations.iter().all(|a| a.gpu == 3)
    })
    .await;
    let after = t.status.expect("status").pod_resources.expect("reading");
    assert!(after.observed_at.0 > reading.observed_at.0, "a new reading");
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_missing_or_refusing_socket_is_last_error_and_the_rest_is_published() {
    let env = TestEnv::shared().await;
    let (node, _) = create_node(env, "podres-down", &[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("kubelet.sock");
    let agent = start(env, &node, &recording(dir.path()), &sock, "1h");

    // No socket yet: lastError says so; spec, labels and condition are published.
    let t = status_where(env, &node, "lastError", |s| {
        s.pod_resources
            .as_ref()
            .is_some_and(|r| r.last_error.is_some())
    })
    .await;
    assert_eq!(t.spec.summary.gpu_count, 8);
    let status = t.status.expect("status");
    let reading = status.pod_resources.expect("reading");
    let error = reading.last_error.expect("lastError");
    assert!(
        error.contains("no PodResources socket at") && error.contains("kubelet.sock"),
        "{error}"
    );
    assert_eq!(reading.observed_at.0, Timestamp::UNIX_EPOCH, "never read");
    assert!(status.allocations.is_empty());
    assert_eq!(status.conditions[0].type_, "Degraded");
    until("readiness", || async {
        (agent.get("/readyz").0 == 200).then_some(())
    })
    .await;
    assert!(
        agent.metric("gputopo_agent_pod_resources_failures_total{reason=\"socket_missing\"}")
            >= 1.0
    );

    // The kubelet comes up: read, lastError gone.
    let kubelet = Kubelet::serve(&sock, Arc::new(Mutex::new(busy_node()))).await;
    let t = status_where(env, &node, "a good reading", |s| {
        s.pod_resources
            .as_ref()
            .is_some_and(|r| r.last_error.is_none())
    })
    .await;
    let good = t.status.expect("status");
    assert_eq!(good.allocations.len(), 3);
    let good_at = good
        .pod_resources
        .as_ref()
        .expect("reading")
        .observed_at
        .clone();

    // It stops answering (the socket stays, nobody listens): the last good
    // allocations stay, of their time, and lastError says why.
    kubelet.stop().await;
    assert!(sock.exists(), "the socket file stays behind");
    let t = status_where(env, &node, "a refusal", |s| {
        s.pod_resources
            .as_ref()
            .and_then(|r| r.last_error.as_deref())
            .is_some_and(|e| e.contains("cannot connect"))
    })
    .await;
    let status = t.status.expect("status");
    assert_eq!(status.allocations, good.allocations);
    assert_eq!(status.pod_resources.expect("reading").observed_at, good_at);
    assert!(
        agent.metric("gputopo_agent_pod_resources_failures_total{reason=\"connect_failed\"}")
            >= 1.0
    );
    assert_eq!(agent.get("/readyz").0, 200, "the publish itself succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn observed_at_is_refreshed_every_heartbeat_while_nothing_changes() {
    let env = TestEnv::shared().await;
    let (node, _) = create_node(env, "podres-beat", &[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("kubelet.sock");
    let kubelet = Kubelet::serve(&sock, Arc::new(Mutex::new(busy_node()))).await;
    let _agent = start(env, &node, &recording(dir.path()), &sock, "2s");
    let first = status_where(env, &node, "a reading", |s| s.pod_resources.is_some())
        .await
        .status
        .expect("status");
    let at = first.pod_resources.as_ref().expect("reading").observed_at.0;
    let later = status_where(env, &node, "a refreshed observedAt", |s| {
        s.pod_resources
            .as_ref()
            .is_some_and(|r| r.observed_at.0 > at)
    })
    .await
    .status
    .expect("status");
    assert_eq!(later.allocations, first.allocations, "only the time moved");
    kubelet.stop().await;
}

/// Offline: a saved answer read every scan, as the socket would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_saved_answer_is_read_every_scan() {
    let env = TestEnv::shared().await;
    let (node, _) = create_node(env, "podres-saved", &[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let saved = dir.path().join("answer.json");
    let answer = |gpu: u32| {
        format!(
            r#"{{"list": {{"podResources": [{{"name": "trainer", "namespace": "ml", "containers": [{{"name": "main", "devices": [{{"resourceName": "nvidia.com/gpu", "deviceIds": ["{}"]}}]}}]}}]}}}}"#,
            uuid(gpu)
        )
    };
    std::fs::write(&saved, answer(4)).expect("written");
    let agent = Agent::start(
        env,
        &node,
        &[
            "--fixture",
            recording(dir.path()).to_str().expect("utf-8"),
            "--pod-resources-saved",
            saved.to_str().expect("utf-8"),
        ],
    );
    status_where(env, &node, "GPU 4 held", |s| {
        s.allocations.iter().map(|a| a.gpu).eq([4])
    })
    .await;
    std::fs::write(&saved, answer(6)).expect("rewritten");
    status_where(env, &node, "GPU 6 held", |s| {
        s.allocations.iter().map(|a| a.gpu).eq([6])
    })
    .await;
    // A broken answer: the last good allocations stay, lastError names the field.
    std::fs::write(&saved, r#"{"list": {"podResources": [{"name": 7}]}}"#).expect("rewritten");
    let t = status_where(env, &node, "lastError", |s| {
        s.pod_resources
            .as_ref()
            .is_some_and(|r| r.last_error.is_some())
    })
    .await;
    let status = t.status.expect("status");
    assert_eq!(
        status.allocations.iter().map(|a| a.gpu).collect::<Vec<_>>(),
        [6]
    );
    let error = status
        .pod_resources
        .expect("reading")
        .last_error
        .expect("lastError");
    assert!(
        error.contains("answer.json: list.podResources[0].name"),
        "{error}"
    );
    assert!(
        agent.metric("gputopo_agent_pod_resources_failures_total{reason=\"answer_invalid\"}")
            >= 1.0
    );
}
