//! An agent newer than the cluster's CRD (docs/upgrades.md, version skew):
//! server-side apply refuses the fields the CRD does not declare. The agent
//! publishes the rest (agent/src/publish/skew.rs), and then, with nothing
//! changed, writes nothing, as against a current CRD.

use gputopo_agent::publish::status::PodResourcesRound;
use gputopo_agent::publish::{Observed, Publisher};
use gputopo_api::GpuTopology;
use gputopo_testenv::{TestEnv, fake_gpu_node, install_crd};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::clique::CliqueVerdict;
use gputopo_topology::discover::build;
use gputopo_topology::labels::LabelOptions;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use std::path::Path;
use std::time::{Duration, Instant};

/// The CRD as the previous minor served it: without `summary.p2pBottleneck`.
fn previous_crd() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(GpuTopology::crd()).expect("serializes");
    let summary = crd
        .pointer_mut(
            "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/summary/properties",
        )
        .and_then(serde_json::Value::as_object_mut)
        .expect("summary's properties");
    assert!(summary.remove("p2pBottleneck").is_some(), "the newer field");
    serde_json::from_value(crd).expect("a CRD")
}

/// Replaces the env's GpuTopology CRD with [`previous_crd`].
async fn serve_previous_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "gputopologies.gputopo.dev";
    crds.delete(name, &DeleteParams::default())
        .await
        .expect("the current CRD deleted");
    let deadline = Instant::now() + Duration::from_secs(60);
    while crds.get_opt(name).await.expect("get").is_some() {
        assert!(Instant::now() < deadline, "the CRD still there after 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    install_crd(client, previous_crd())
        .await
        .expect("the previous CRD");
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn an_agent_newer_than_the_crd_writes_its_object_once() {
    // A control plane of its own: the shared one's CRD stays current.
    let env = TestEnv::start().await.expect("a control plane");
    let client = env.client().await;
    serve_previous_crd(&client).await;
    let node = "older-crd";
    Api::all(client.clone())
        .create(
            &PostParams::default(),
            &fake_gpu_node(node, 8, &Default::default()),
        )
        .await
        .expect("the node");

    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt"),
    )
    .expect("fixture");
    let found = build(node, facts_from_topo(&text).expect("parses")).expect("normalizes");
    assert_eq!(found.spec.summary.p2p_bottleneck.as_deref(), Some("NV12"));
    let round = PodResourcesRound::NotRead;
    let observed = Observed {
        spec: &found.spec,
        findings: &found.findings,
        pod_resources: &round,
        fabric: &CliqueVerdict::NoFabric,
    };
    let publisher = Publisher::new(client.clone(), node.to_string(), LabelOptions::default());
    let now = || Time(k8s_openapi::jiff::Timestamp::now());

    // The premise: the API server refuses the newer field outright.
    let topologies = Api::<GpuTopology>::all(client.clone());
    let mut whole = GpuTopology::new(node, found.spec.clone());
    whole.metadata.name = Some("probe".into());
    let refusal = topologies
        .patch("probe", &PatchParams::apply("probe"), &Patch::Apply(&whole))
        .await
        .expect_err("an undeclared field");
    assert!(
        refusal
            .to_string()
            .contains(".spec.summary.p2pBottleneck: field not declared in schema"),
        "{refusal}"
    );

    let first = publisher
        .publish(&observed, now())
        .await
        .expect("published");
    assert!(first.topology && first.status, "{first:?}");
    let stored = topologies.get(node).await.expect("the object");
    assert_eq!(stored.spec.summary.p2p_bottleneck, None);
    assert_eq!(stored.spec.links, found.spec.links);
    assert_eq!(stored.spec.gpus, found.spec.gpus);

    for scan in 0..3 {
        let again = publisher
            .publish(&observed, now())
            .await
            .expect("published");
        assert_eq!(again.count(), 0, "scan {scan} wrote {again:?}");
    }
}
