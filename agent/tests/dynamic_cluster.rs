//! `gputopo-agent run` against the real kube-apiserver of the test
//! environment, on a recording replayed as NVML: what changes on the node
//! while the agent runs (a link going down, a GPU falling off the bus)
//! reaches the published links and the `Degraded` condition at the next
//! scan, with no SIGHUP, and the agent stays ready.

mod common;

use common::{Agent, create_node, fixture, until};
use gputopo_api::GpuTopology;
use gputopo_testenv::TestEnv;
use kube::api::Api;
use serde_yaml::Value;
use std::path::Path;

const HGX_H100: &str = "recorded/hgx-h100-8gpu-nvswitch-nvml.yaml";

/// Edits the recording in one step (write beside, rename).
fn edit(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut doc: Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).expect("read")).expect("YAML");
    change(&mut doc["nvml"]["devices"]);
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, serde_yaml::to_string(&doc).expect("YAML")).expect("written");
    std::fs::rename(&tmp, path).expect("renamed");
}

async fn topology_where(
    env: &TestEnv,
    node: &str,
    what: &str,
    ok: impl Fn(&GpuTopology) -> bool,
) -> GpuTopology {
    let topologies: Api<GpuTopology> = Api::all(env.client().await);
    until(what, || async {
        topologies.get_opt(node).await.ok().flatten().filter(&ok)
    })
    .await
}

fn degraded(t: &GpuTopology) -> Option<(String, String, String)> {
    let c = t
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_link_down_or_a_lost_gpu_flips_degraded_at_the_next_scan() {
    let env = TestEnv::shared().await;
    let (node, _) = create_node(env, "nvml-dynamic", &[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = dir.path().join("node.yaml");
    std::fs::copy(fixture(HGX_H100), &rec).expect("fixture copied");
    let agent = Agent::start(
        env,
        &node,
        &[
            "--fixture",
            rec.to_str().expect("utf-8"),
            "--pod-resources=false",
        ],
    );
    let t = topology_where(env, &node, "a healthy topology", |t| {
        degraded(t).is_some_and(|(s, _, _)| s == "False")
    })
    .await;
    assert_eq!(t.spec.link(2, 5).expect("a link").nvlinks, 18);

    // Link 3 of GPU 2 goes down: no SIGHUP, the next scan sees it.
    edit(&rec, |devices| {
        devices[2]["nvlinks"][3]["active"] = Value::Bool(false);
    });
    let t = topology_where(env, &node, "Degraded for GPU 2's link", |t| {
        degraded(t).is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    let (_, reason, message) = degraded(&t).expect("the condition");
    assert_eq!(reason, "NvLinkDegraded");
    assert!(message.contains("GPU2: NVLink link 3 down"), "{message}");
    let t = topology_where(env, &node, "the links to follow", |t| {
        t.spec.link(2, 5).is_some_and(|l| l.nvlinks == 17)
    })
    .await;
    assert_eq!(t.spec.summary.p2p_level.as_deref(), Some("NV17"));

    // GPU 5 falls off the bus.
    edit(&rec, |devices| {
        devices[5]["lost"] = Value::String("nvmlDeviceGetUUID: GPU is lost".into());
    });
    let t = topology_where(env, &node, "Degraded for the lost GPU", |t| {
        degraded(t).is_some_and(|(_, r, _)| r == "GpuLost")
    })
    .await;
    let (_, _, message) = degraded(&t).expect("the condition");
    assert!(message.contains("GPU5: lost"), "{message}");
    assert!(message.contains("GPU is lost"), "{message}");
    assert_eq!(agent.get("/readyz").0, 200);
    assert_eq!(agent.get("/healthz").0, 200);
}
