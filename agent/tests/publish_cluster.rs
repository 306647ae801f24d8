//! `gputopo-agent run` against a real kube-apiserver and etcd (built from
//! source by scripts/control-plane-binaries; see gputopo-testenv). The agent
//! runs as its own process, as on a node, with an admin kubeconfig.

use gputopo_api::GpuTopology;
use gputopo_api::keys::node::OWNED;
use gputopo_testenv::{AuditEvent, TestEnv};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;

use common::{Agent, create_node, fixture, labels_of, until};

const DGX_A100: &str = "nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt";
const BRIDGED: &str =
    "nvidia/a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt";

fn writes_about(events: &[AuditEvent], node: &str) -> usize {
    events
        .iter()
        .filter(|e| {
            e.is_write() && (e.is_about("nodes", node) || e.is_about("gputopologies", node))
        })
        .count()
}

fn copy_to_temp(dir: &Path, rel: &str) -> PathBuf {
    let to = dir.join(Path::new(rel).file_name().expect("a file name"));
    std::fs::copy(fixture(rel), &to).expect("fixture copied");
    to
}

/// Replaces a watched file in one step, as a ConfigMap update or an operator would.
fn replace(path: &Path, contents: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, contents).expect("written");
    std::fs::rename(&tmp, path).expect("renamed");
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn publishes_labels_and_topology_then_writes_nothing_while_unchanged() {
    let env = TestEnv::shared().await;
    let (node, created) = create_node(env, "agent-quiet", &[]).await;
    let agent = Agent::start(
        env,
        &node,
        &["--nvidia-smi-topo", fixture(DGX_A100).to_str().unwrap()],
    );
    let topologies: Api<GpuTopology> = Api::all(env.client().await);

    let labels = until("the agent's labels", || async {
        let l = labels_of(env, &node).await;
        l.contains_key("nvidia.com/nvlink.p2p.level").then_some(l)
    })
    .await;
    assert_eq!(labels["nvidia.com/nvlink.p2p.level"], "NV12");
    assert_eq!(labels["nvidia.com/gpu.count"], "8");
    assert_eq!(labels["gputopo.dev/interconnect"], "nvswitch");
    assert_eq!(labels["gputopo.dev/numa-nodes"], "4");
    assert_eq!(
        labels["kubernetes.io/hostname"], node,
        "foreign labels kept"
    );

    let topology = until("the GpuTopology with status", || async {
        topologies
            .get_opt(&node)
            .await
            .ok()
            .flatten()
            .filter(|t| t.status.is_some())
    })
    .await;
    assert_eq!(topology.spec.summary.p2p_level.as_deref(), Some("NV12"));
    assert_eq!(topology.spec.links.len(), 28);
    let owner = &topology.metadata.owner_references.expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), &owner.uid),
        ("Node", created.metadata.uid.as_ref().unwrap())
    );
    let condition = &topology.status.expect("status").conditions[0];
    assert_eq!(
        (condition.type_.as_str(), condition.status.as_str()),
        ("Degraded", "False")
    );
    until("readiness", || async {
        (agent.get("/readyz").0 == 200).then_some(())
    })
    .await;

    // Count the writes so far, let it scan several more times, count again.
    let scans_before = agent.ok_scans();
    let before = writes_about(&env.audit_events(), &node);
    assert!(
        before >= 2,
        "the first publish wrote labels and the object ({before} writes)"
    );
    agent.rescan();
    until("three more scans", || async {
        (agent.ok_scans() >= scans_before + 3).then_some(())
    })
    .await;
    // The audit log is written as requests finish; give a straggler time to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = writes_about(&env.audit_events(), &node);
    assert_eq!(after, before, "rescans with nothing changed must not write");

    // SIGTERM: a clean, prompt exit.
    let mut agent = agent;
    agent.signal(libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = agent.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the agent ignored SIGTERM for 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "exit after SIGTERM: {status}");
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn follows_a_changed_topology_and_never_touches_foreign_labels() {
    let env = TestEnv::shared().await;
    let (node, _) = create_node(
        env,
        "agent-change",
        &[("team", "ml"), ("gputopo.dev/leaf", "leaf-1")],
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let topo = copy_to_temp(dir.path(), DGX_A100);
    let agent = Agent::start(env, &node, &["--nvidia-smi-topo", topo.to_str().unwrap()]);
    until("NV12 labels", || async {
        labels_of(env, &node)
            .await
            .get("nvidia.com/nvlink.p2p.level")
            .filter(|v| *v == "NV12")
            .map(|_| ())
    })
    .await;

    // The node now reports NVLink-bridged pairs.
    replace(&topo, &std::fs::read(fixture(BRIDGED)).expect("fixture"));
    agent.rescan();
    let labels = until("bridged labels", || async {
        let l = labels_of(env, &node).await;
        (l.get("gputopo.dev/interconnect").map(String::as_str) == Some("nvlink-bridge"))
            .then_some(l)
    })
    .await;
    assert!(
        !labels.contains_key("nvidia.com/nvlink.p2p.level"),
        "no p2p level for pairs: {labels:?}"
    );
    assert_eq!(labels["gputopo.dev/nvlink.largest-island"], "2");
    assert_eq!(labels["nvidia.com/gpu.count"], "4");
    assert_eq!(labels["team"], "ml");
    assert_eq!(
        labels["gputopo.dev/leaf"], "leaf-1",
        "a gputopo.dev label the agent does not own"
    );
    let topologies: Api<GpuTopology> = Api::all(env.client().await);
    let t = until("the updated object", || async {
        topologies
            .get_opt(&node)
            .await
            .ok()
            .flatten()
            .filter(|t| t.spec.summary.gpu_count == 4)
    })
    .await;
    assert_eq!(t.spec.islands, vec![vec![0, 1], vec![2, 3]]);
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_node_that_loses_its_gpus_loses_the_agents_labels() {
    let env = TestEnv::shared().await;
    let (node, _) = create_node(env, "agent-gone", &[("team", "ml")]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = copy_to_temp(dir.path(), "recorded/dgx1-v100-nvml.yaml");
    let agent = Agent::start(env, &node, &["--fixture", rec.to_str().unwrap()]);
    until("labels", || async {
        labels_of(env, &node)
            .await
            .contains_key("nvidia.com/gpu.count")
            .then_some(())
    })
    .await;

    // The same recording with NVML listing no devices.
    let mut doc: serde_yaml::Value =
        serde_yaml::from_slice(&std::fs::read(&rec).expect("read")).expect("YAML");
    doc["nvml"]["devices"] = serde_yaml::Value::Sequence(vec![]);
    doc["nvml"]["pairs"] = serde_yaml::Value::Sequence(vec![]);
    doc["commands"] = serde_yaml::Value::Mapping(Default::default());
    replace(&rec, serde_yaml::to_string(&doc).expect("YAML").as_bytes());
    agent.rescan();
    let labels = until("the agent's labels to go", || async {
        let l = labels_of(env, &node).await;
        (!OWNED.iter().any(|k| l.contains_key(*k))).then_some(l)
    })
    .await;
    assert_eq!(labels["team"], "ml");
    // Labels are applied before the object, so wait for the object too.
    let topologies: Api<GpuTopology> = Api::all(env.client().await);
    until("the object to say 0 GPUs", || async {
        topologies
            .get_opt(&node)
            .await
            .ok()
            .flatten()
            .filter(|t| t.spec.summary.gpu_count == 0 && t.spec.gpus.is_empty())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn deleting_the_node_garbage_collects_its_topology() {
    let env = TestEnv::shared().await;
    env.with_controller_manager().await;
    let (node, _) = create_node(env, "agent-gc", &[]).await;
    let topologies: Api<GpuTopology> = Api::all(env.client().await);
    {
        let _agent = Agent::start(
            env,
            &node,
            &["--nvidia-smi-topo", fixture(DGX_A100).to_str().unwrap()],
        );
        until("the GpuTopology", || async {
            topologies.get_opt(&node).await.ok().flatten()
        })
        .await;
    }
    let nodes: Api<Node> = Api::all(env.client().await);
    nodes
        .delete(&node, &DeleteParams::default())
        .await
        .expect("node deleted");
    let deadline = Instant::now() + Duration::from_secs(60);
    while topologies.get_opt(&node).await.expect("readable").is_some() {
        assert!(
            Instant::now() < deadline,
            "GpuTopology {node} not collected 60 s after its Node went"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_label_value_changed_by_hand_is_set_back() {
    let env = TestEnv::shared().await;
    let (node, _) = create_node(env, "agent-drift", &[]).await;
    let agent = Agent::start(
        env,
        &node,
        &["--nvidia-smi-topo", fixture(DGX_A100).to_str().unwrap()],
    );
    until("labels", || async {
        labels_of(env, &node)
            .await
            .contains_key("nvidia.com/nvlink.p2p.level")
            .then_some(())
    })
    .await;
    let nodes: Api<Node> = Api::all(env.client().await);
    let patch = serde_json::json!({"metadata": {"labels": {"nvidia.com/nvlink.p2p.level": "NV1"}}});
    nodes
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patched by hand");
    agent.rescan();
    until("the label to be set back", || async {
        (labels_of(env, &node)
            .await
            .get("nvidia.com/nvlink.p2p.level")
            .map(String::as_str)
            == Some("NV12"))
        .then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn recovers_by_itself_when_the_api_server_goes_away_and_comes_back() {
    // A control plane of its own: the outage must not disturb other tests.
    let env = TestEnv::start().await.expect("control plane");
    let (node, _) = create_node(&env, "agent-outage", &[("team", "ml")]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let topo = copy_to_temp(dir.path(), DGX_A100);
    let agent = Agent::start(&env, &node, &["--nvidia-smi-topo", topo.to_str().unwrap()]);
    let published = until("labels", || async {
        let l = labels_of(&env, &node).await;
        l.contains_key("nvidia.com/nvlink.p2p.level").then_some(l)
    })
    .await;
    let events = env
        .wait_for_audit("the first publish", |e| writes_about(e, &node) >= 3)
        .await;
    let writes_before = writes_about(&events, &node);

    // Outage with nothing changed on the node: the agent notices, keeps
    // retrying, and once the API server is back writes nothing (no flap).
    env.stop_apiserver();
    until("the agent to report not ready", || async {
        (agent.get("/readyz").0 == 503).then_some(())
    })
    .await;
    let (_, body) = agent.get("/readyz");
    assert!(body.contains("not ready"), "{body}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    env.start_apiserver_again().await.expect("API server back");
    let scans = agent.ok_scans();
    until("the agent to recover", || async {
        (agent.get("/readyz").0 == 200 && agent.ok_scans() > scans + 1).then_some(())
    })
    .await;
    assert_eq!(
        labels_of(&env, &node).await,
        published,
        "labels unchanged across the outage"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        writes_about(&env.audit_events(), &node),
        writes_before,
        "an outage must not make the agent rewrite (or remove and re-add) anything"
    );

    // Outage during which the node changes: published without any nudge.
    env.stop_apiserver();
    replace(&topo, &std::fs::read(fixture(BRIDGED)).expect("fixture"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.start_apiserver_again().await.expect("API server back");
    let labels = until("the change made during the outage", || async {
        let l = labels_of(&env, &node).await;
        (l.get("gputopo.dev/interconnect").map(String::as_str) == Some("nvlink-bridge"))
            .then_some(l)
    })
    .await;
    assert_eq!(labels["team"], "ml");
    assert!(!labels.contains_key("nvidia.com/nvlink.p2p.level"));
}

/// On a GPU Operator cluster GPU Feature Discovery writes
/// `nvidia.com/gpu.count/.product/.memory`, with other values under MIG:
/// the agent leaves the labels another writer holds alone (and still writes
/// its own), so the two never flip them back and forth.
#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn labels_gpu_feature_discovery_holds_are_left_to_it() {
    let env = TestEnv::shared().await;
    // Created with GFD's labels: the creating client manages them.
    let (node, _) = create_node(
        env,
        "agent-gfd",
        &[
            ("nvidia.com/gpu.count", "56"),
            (
                "nvidia.com/gpu.product",
                "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
            ),
        ],
    )
    .await;
    let agent = Agent::start(
        env,
        &node,
        &["--nvidia-smi-topo", fixture(DGX_A100).to_str().unwrap()],
    );
    until("the agent's own labels", || async {
        labels_of(env, &node)
            .await
            .contains_key("nvidia.com/nvlink.p2p.level")
            .then_some(())
    })
    .await;
    agent.rescan();
    until("a second scan", || async {
        (agent.ok_scans() >= 2).then_some(())
    })
    .await;
    let labels = labels_of(env, &node).await;
    assert_eq!(
        labels.get("nvidia.com/gpu.count").map(String::as_str),
        Some("56")
    );
    assert_eq!(
        labels.get("nvidia.com/gpu.product").map(String::as_str),
        Some("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb")
    );
    assert_eq!(
        labels
            .get("nvidia.com/nvlink.p2p.level")
            .map(String::as_str),
        Some("NV12")
    );
}
