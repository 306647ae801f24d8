//! The CRD across `helm upgrade` (docs/upgrades.md): the chart renders it
//! as a template kept on uninstall, and a release of the previous chart,
//! whose CRD lacks a field the current one has, upgrades to this one on the
//! real API server with its `GpuTopology` objects kept and readable.

use super::helm::{documents, helm_on, render_ok};
use super::objects::find;
use super::root;
use super::values::{NAMESPACE, RELEASE};
use gputopo_api::{GpuTopology, GpuTopologySpec};
use gputopo_testenv::TestEnv;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The chart as committed before `summary.p2pBottleneck` (8d5cf76): chart
/// 0.1.0, its CRD in crds/. Taken from the repository's own history, so
/// the test needs no network, only a clone that has this commit.
const PREVIOUS_CHART: &str = "89f82464254a96605261206a0371d405c69e95b1";
const CRD: &str = "gputopologies.gputopo.dev";

/// `helm/gputopo` at [`PREVIOUS_CHART`], extracted under `dir`.
fn previous_chart(dir: &Path) -> PathBuf {
    let tar = dir.join("chart.tar");
    let out = Command::new("git")
        .arg("-C")
        .arg(root())
        .args(["archive", "--format=tar", "-o"])
        .arg(&tar)
        .args([PREVIOUS_CHART, "helm/gputopo"])
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "the previous chart is read from git history (a shallow clone lacks {PREVIOUS_CHART}; `git fetch --unshallow`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(dir)
        .output()
        .expect("tar runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("helm/gputopo")
}

fn summary_fields(crd: &CustomResourceDefinition) -> Vec<String> {
    let crd = serde_json::to_value(crd).expect("serializes");
    crd.pointer(
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/summary/properties",
    )
    .and_then(Value::as_object)
    .map(|m| m.keys().cloned().collect())
    .unwrap_or_default()
}

/// What the agent publishes for the DGX A100 fixture, named `name`.
fn topology(name: &str) -> GpuTopology {
    let text = std::fs::read_to_string(
        root().join("fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt"),
    )
    .expect("the fixture");
    let facts = gputopo_topology::backend::nvidia_smi::facts_from_topo(&text).expect("it parses");
    let spec = gputopo_topology::normalize::normalize(name, &facts).expect("it normalizes");
    GpuTopology::new(name, spec)
}

/// An object as the previous agent wrote it: without the newer field.
fn older_agents(name: &str) -> GpuTopologySpec {
    let mut spec = topology(name).spec;
    assert!(spec.summary.p2p_bottleneck.take().is_some());
    spec
}

/// Removes the env's current CRD, as in a cluster that never had gputopo.
async fn without_the_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(CRD, &DeleteParams::default())
        .await
        .expect("deleted");
    let deadline = Instant::now() + Duration::from_secs(60);
    while crds.get_opt(CRD).await.expect("get").is_some() {
        assert!(Instant::now() < deadline, "the CRD still there after 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sets `summary.p2pBottleneck` on `name` until the server keeps it: a
/// changed CRD's schema takes effect a moment after the update.
async fn set_p2p_bottleneck(topologies: &Api<GpuTopology>, name: &str) -> GpuTopology {
    let patch = json!({"spec": {"summary": {"p2pBottleneck": "NV12"}}});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let patched = topologies
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patched");
        if patched.spec.summary.p2p_bottleneck.is_some() {
            return patched;
        }
        assert!(
            Instant::now() < deadline,
            "the upgraded CRD still drops p2pBottleneck after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn upgrading_from_the_previous_chart_updates_the_crd_and_keeps_the_objects() {
    // A control plane of its own: the previous CRD must not meet other tests.
    let env = TestEnv::start().await.expect("a control plane");
    let client = env.client().await;
    without_the_crd(&client).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let previous = previous_chart(dir.path());
    let previous = previous.to_str().expect("a UTF-8 path");
    let out = helm_on(
        &env,
        &[
            "install",
            RELEASE,
            previous,
            "-n",
            NAMESPACE,
            "--create-namespace",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("STATUS: deployed"), "{out}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let before = crds.get(CRD).await.expect("the previous chart's CRD");
    assert!(!summary_fields(&before).contains(&"p2pBottleneck".to_string()));

    let topologies: Api<GpuTopology> = Api::all(client.clone());
    let old = GpuTopology::new("written-before", older_agents("written-before"));
    topologies
        .create(&PostParams::default(), &old)
        .await
        .expect("the previous agent's object");

    // 0.1 installed the CRD from crds/, which Helm never records in the
    // release: the first upgrade takes it over, once (docs/upgrades.md).
    let refused = helm_on(&env, &["upgrade", RELEASE, "CHART", "-n", NAMESPACE])
        .expect_err("the CRD is not the release's yet");
    assert!(
        refused.to_string().contains("invalid ownership metadata"),
        "{refused}"
    );
    let out = helm_on(
        &env,
        &[
            "upgrade",
            RELEASE,
            "CHART",
            "-n",
            NAMESPACE,
            "--take-ownership",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("STATUS: deployed"), "{out}");
    let after = crds.get(CRD).await.expect("the CRD");
    assert!(summary_fields(&after).contains(&"p2pBottleneck".to_string()));
    let meta = &after.metadata;
    let annotation = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k)).cloned();
    assert_eq!(
        annotation("helm.sh/resource-policy").as_deref(),
        Some("keep")
    );
    assert_eq!(
        annotation("meta.helm.sh/release-name").as_deref(),
        Some(RELEASE)
    );

    // The previous agent's object reads as it was written; the new field
    // is now kept, on it and on a new object.
    let read = topologies.get("written-before").await.expect("kept");
    assert_eq!(read.spec, old.spec);
    let patched = set_p2p_bottleneck(&topologies, "written-before").await;
    assert_eq!(patched.spec.summary.p2p_bottleneck.as_deref(), Some("NV12"));
    let new = topology("written-after");
    let created = topologies
        .create(&PostParams::default(), &new)
        .await
        .expect("a current object");
    assert_eq!(created.spec, new.spec);

    // The release owns the CRD now: later upgrades need nothing more.
    helm_on(
        &env,
        &[
            "upgrade",
            RELEASE,
            "CHART",
            "-n",
            NAMESPACE,
            "--set",
            "logFormat=json",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    helm_on(&env, &["uninstall", RELEASE, "-n", NAMESPACE]).unwrap_or_else(|e| panic!("{e}"));
    let kept = crds.get(CRD).await.expect("uninstall keeps the CRD");
    assert!(summary_fields(&kept).contains(&"p2pBottleneck".to_string()));
    let mut names: Vec<String> = topologies
        .list(&ListParams::default())
        .await
        .expect("listed")
        .items
        .into_iter()
        .filter_map(|t| t.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["written-after", "written-before"]);
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_crd_template_is_the_generated_crd_kept_on_uninstall_or_off() {
    let docs = render_ok(RELEASE, NAMESPACE, None);
    let crd = find(&docs, "CustomResourceDefinition").expect("the CRD by default");
    assert_eq!(
        crd["metadata"]["annotations"],
        json!({"helm.sh/resource-policy": "keep"})
    );
    assert_eq!(
        crd["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );
    // Exactly what `gputopo crd` prints, with the chart's metadata added.
    let generated = documents(&gputopo_api::crd_yaml()).expect("YAML");
    let mut body = crd.clone();
    let meta = body["metadata"].as_object_mut().expect("metadata");
    meta.remove("labels");
    meta.remove("annotations");
    assert_eq!([body], generated.as_slice());

    let docs = render_ok(RELEASE, NAMESPACE, Some("crds:\n  keep: false\n"));
    let crd = find(&docs, "CustomResourceDefinition").expect("the CRD");
    assert!(crd["metadata"].get("annotations").is_none(), "{crd}");
    let docs = render_ok(RELEASE, NAMESPACE, Some("crds:\n  install: false\n"));
    assert!(find(&docs, "CustomResourceDefinition").is_none());
    // The rest of the chart is unchanged without it.
    assert_eq!(docs.len() + 1, render_ok(RELEASE, NAMESPACE, None).len());
}
