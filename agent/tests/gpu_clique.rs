//! Rack-scale NVLink from the node itself: the agent reads each GPU's NVML
//! fabric answer and labels the node `nvidia.com/gpu.clique` (the
//! scheduler's `gpu-clique` tier) when all its GPUs are in one clique, with
//! `GpuFabricReady` on its `GpuTopology` saying so, or naming the GPUs that
//! disagree or have not finished registering.
//!
//! There is no recording of a GB200/GB300 NVL72 tray in `fixtures/`: the
//! node here is CONSTRUCTED from the recorded HGX H100
//! (`fixtures/recorded/hgx-h100-8gpu-nvswitch-nvml.yaml`, itself synthetic)
//! by giving its GPUs the fabric answers a rack's tray gives. Only the
//! answers' format is real: `nvmlGpuFabricInfo_v2_t` (state, status,
//! 16-byte cluster UUID, clique id) as the agent's live NVML records it, and
//! GPU Feature Discovery's label value `<cluster UUID>.<clique id>`, whose
//! README's example cluster UUID `7b968a6d-c8aa-45e1-9e07-e1e51be99c31`
//! (NVIDIA/k8s-device-plugin, docs/gpu-feature-discovery/README.md) is used
//! here. The UUID and clique ids are not from a machine.

use gputopo_agent::discover::Source;
use gputopo_agent::scan::{Scanned, Scanner};
use gputopo_api::GpuTopology;
use gputopo_api::keys::node::GPU_CLIQUE;
use gputopo_api::topology::CONDITION_GPU_FABRIC_READY;
use gputopo_testenv::TestEnv;
use gputopo_topology::clique::CliqueVerdict;
use gputopo_topology::discover::Source as SavedSource;
use gputopo_topology::labels::{LabelOptions, node_labels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::Api;
use serde_yaml::Value;
use std::path::{Path, PathBuf};

mod common;

use common::{Agent, create_node, labels_of, until};

const HGX_H100: &str = "recorded/hgx-h100-8gpu-nvswitch-nvml.yaml";
const CLUSTER: &str = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31";

/// A registered GPU's fabric answer, as `agent/src/nvml/live.rs` records it.
fn member(clique: u32) -> Value {
    serde_yaml::from_str(&format!(
        "{{state: completed, status: Success, clusterUuid: \"{CLUSTER}\", cliqueId: {clique}, healthMask: 0}}"
    ))
    .expect("YAML")
}

/// A GPU still registering: the live NVML records no cluster or clique then.
fn registering() -> Value {
    serde_yaml::from_str(
        "{state: inProgress, status: Success, clusterUuid: null, cliqueId: null, healthMask: 0}",
    )
    .expect("YAML")
}

/// The HGX H100 recording with `fabric(gpu)` as each GPU's fabric answer.
fn constructed(dir: &Path, fabric: impl Fn(usize) -> Value) -> PathBuf {
    let to = dir.join("gb200-tray.yaml");
    std::fs::copy(common::fixture(HGX_H100), &to).expect("fixture copied");
    set_fabric(&to, fabric);
    to
}

/// Rewrites every GPU's fabric answer in one step (write beside, rename).
fn set_fabric(path: &Path, fabric: impl Fn(usize) -> Value) {
    let mut doc: Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).expect("read")).expect("YAML");
    doc["nodeName"] = Value::String("gb200-constructed".into());
    let devices = doc["nvml"]["devices"]
        .as_sequence_mut()
        .expect("NVML devices");
    for (i, d) in devices.iter_mut().enumerate() {
        d["fabric"] = fabric(i);
    }
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, serde_yaml::to_string(&doc).expect("YAML")).expect("written");
    std::fs::rename(&tmp, path).expect("renamed");
}

fn label(s: &Scanned) -> Option<String> {
    node_labels(&s.found.spec, LabelOptions::default())
        .get(GPU_CLIQUE)
        .cloned()
}

fn condition(s: &Scanned) -> Option<Condition> {
    s.fabric
        .condition(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
}

#[tokio::test]
async fn a_recorded_tray_in_one_clique_is_labelled_and_one_that_is_not_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = constructed(dir.path(), |_| member(1));
    let mut scanner = Scanner::new(
        "gb200".into(),
        Source::Saved(SavedSource::Fixture(rec.clone())),
    );

    // Every GPU in clique 1: the label, as GFD writes it, and True.
    let one = scanner.scan().await.expect("scanned");
    assert_eq!(label(&one).as_deref(), Some(&*format!("{CLUSTER}.1")));
    let c = condition(&one).expect("GpuFabricReady");
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        (CONDITION_GPU_FABRIC_READY, "True", "OneClique")
    );
    let fabric = one.found.spec.gpus[7].fabric.as_ref().expect("published");
    assert_eq!(
        (fabric.cluster_uuid.as_deref(), fabric.clique_id),
        (Some(CLUSTER), Some(1))
    );
    // Not written where GFD owns it.
    let off = LabelOptions {
        gfd_compatible: false,
    };
    assert!(!node_labels(&one.found.spec, off).contains_key(GPU_CLIQUE));

    // GPUs 4-7 now in clique 2 (read at the next scan, as the live agent
    // reads the registration every scan): no label, both cliques named.
    set_fabric(&rec, |i| member(if i < 4 { 1 } else { 2 }));
    let split = scanner.scan().await.expect("scanned");
    assert_eq!(label(&split), None);
    let c = condition(&split).expect("GpuFabricReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "CliquesDisagree")
    );
    assert!(
        c.message
            .contains(&format!("GPUs 0-3 in clique {CLUSTER}.1"))
            && c.message
                .contains(&format!("GPUs 4-7 in clique {CLUSTER}.2")),
        "{}",
        c.message
    );

    // GPU 5 still registering (the agent started before the fabric manager
    // finished): no label, and the condition says which GPU.
    set_fabric(&rec, |i| if i == 5 { registering() } else { member(1) });
    let early = scanner.scan().await.expect("scanned");
    assert_eq!(label(&early), None);
    let c = condition(&early).expect("GpuFabricReady");
    assert_eq!(c.reason, "FabricRegistrationIncomplete");
    assert!(
        c.message.contains("GPU 5 fabric registration in progress")
            && c.message
                .contains(&format!("GPUs 0-4,6-7 in clique {CLUSTER}.1")),
        "{}",
        c.message
    );

    // Registered: labelled without a restart or SIGHUP.
    set_fabric(&rec, |_| member(1));
    let done = scanner.scan().await.expect("scanned");
    assert_eq!(label(&done).as_deref(), Some(&*format!("{CLUSTER}.1")));
}

#[tokio::test]
async fn the_recorded_hgx_h100_has_no_clique_and_no_condition() {
    // As recorded: registered with the nil cluster UUID (single-node NVSwitch).
    let mut scanner = Scanner::new(
        "hgx".into(),
        Source::Saved(SavedSource::Fixture(common::fixture(HGX_H100))),
    );
    let s = scanner.scan().await.expect("scanned");
    assert_eq!(s.fabric, CliqueVerdict::NoFabric);
    assert_eq!((label(&s), condition(&s)), (None, None));
    // PCIe-era recording with no fabric answer at all.
    let mut scanner = Scanner::new(
        "dgx1".into(),
        Source::Saved(SavedSource::Fixture(common::fixture(
            "recorded/dgx1-v100-nvml.yaml",
        ))),
    );
    let s = scanner.scan().await.expect("scanned");
    assert_eq!((label(&s), condition(&s)), (None, None));
}

/// The agent as its own process against a real API server, replaying the
/// constructed tray: the label and `GpuFabricReady` appear, then go (the
/// label) and flip (the condition) when the GPUs stop agreeing.
#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_agent_labels_a_node_whose_gpus_share_a_clique() {
    let env = TestEnv::shared().await;
    let (node, _) = create_node(env, "agent-clique", &[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = constructed(dir.path(), |_| member(1));
    let _agent = Agent::start(env, &node, &["--fixture", rec.to_str().unwrap()]);
    let topologies: Api<GpuTopology> = Api::all(env.client().await);
    let ready = |status: &'static str| {
        let topologies = topologies.clone();
        let node = node.clone();
        move || {
            let (topologies, node) = (topologies.clone(), node.clone());
            async move {
                let t = topologies.get_opt(&node).await.ok().flatten()?;
                t.status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == CONDITION_GPU_FABRIC_READY && c.status == status)
            }
        }
    };

    let labels = until("the clique label", || async {
        let l = labels_of(env, &node).await;
        l.contains_key(GPU_CLIQUE).then_some(l)
    })
    .await;
    assert_eq!(labels[GPU_CLIQUE], format!("{CLUSTER}.1"));
    assert_eq!(labels["nvidia.com/gpu.count"], "8");
    let c = until("GpuFabricReady True", ready("True")).await;
    assert_eq!(c.reason, "OneClique");

    // The GPUs split into two cliques: the label goes, the condition says why.
    set_fabric(&rec, |i| member(if i < 4 { 1 } else { 2 }));
    until("the clique label to go", || async {
        (!labels_of(env, &node).await.contains_key(GPU_CLIQUE)).then_some(())
    })
    .await;
    let c = until("GpuFabricReady False", ready("False")).await;
    assert_eq!(c.reason, "CliquesDisagree");
    assert!(c.message.contains("GPUs 4-7"), "{}", c.message);
}
