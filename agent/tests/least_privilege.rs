//! The agent runs with exactly the RBAC and admission policy of `daemonset/`,
//! under a real service-account token bound to a pod on node A (the token a
//! kubelet would mount). It may publish node A; node B, foreign labels on A,
//! and anything outside its role are refused by the real API server.

use gputopo_agent::publish::status::PodResourcesRound;
use gputopo_agent::publish::{Observed, PublishError, Publisher};
use gputopo_api::{DeviceForm, GpuAllocation, GpuHolder};
use gputopo_testenv::{TestEnv, fake_gpu_node};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::clique::CliqueVerdict;
use gputopo_topology::discover::build;
use gputopo_topology::labels::LabelOptions;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::Path;
use std::time::{Duration, Instant};

const NAMESPACE: &str = "gputopo-system";
const SERVICE_ACCOUNT: &str = "gputopo-agent";

/// Creates every object of a multi-document manifest, as `kubectl create -f` would.
async fn create_manifest(client: &kube::Client, file: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    let text = std::fs::read_to_string(&path).expect("manifest readable");
    for doc in text.split("\n---\n") {
        let value: serde_json::Value = serde_yaml::from_str(doc).expect("manifest YAML");
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        let pp = PostParams::default();
        macro_rules! create {
            ($api:expr, $ty:ty) => {{
                let object: $ty = serde_json::from_value(value.clone()).expect(&kind);
                match $api.create(&pp, &object).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => panic!("{file}: creating {kind}: {e}"),
                }
            }};
        }
        match kind.as_str() {
            "Namespace" => create!(Api::<Namespace>::all(client.clone()), Namespace),
            "ServiceAccount" => create!(
                Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE),
                ServiceAccount
            ),
            "ClusterRole" => create!(Api::<ClusterRole>::all(client.clone()), ClusterRole),
            "ClusterRoleBinding" => create!(
                Api::<ClusterRoleBinding>::all(client.clone()),
                ClusterRoleBinding
            ),
            "ValidatingAdmissionPolicy" => create!(
                Api::<ValidatingAdmissionPolicy>::all(client.clone()),
                ValidatingAdmissionPolicy
            ),
            "ValidatingAdmissionPolicyBinding" => create!(
                Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()),
                ValidatingAdmissionPolicyBinding
            ),
            other => panic!("{file}: no handler for kind {other}"),
        }
    }
}

/// A client holding a token bound to a pod scheduled on `node`, as the kubelet mounts it.
async fn agent_client_on(env: &TestEnv, admin: &kube::Client, node: &str) -> kube::Client {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("gputopo-agent-{node}")},
        "spec": {
            "nodeName": node,
            "serviceAccountName": SERVICE_ACCOUNT,
            "containers": [{"name": "agent", "image": "gputopo-agent:test"}]
        }
    }))
    .expect("pod");
    let pod = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("agent pod created");
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = sas
        .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .expect("token issued")
        .status
        .expect("token status")
        .token
        .expect("token in status");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: agent\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: agent}}\ncurrent-context: c\n",
        env.apiserver_url(),
        env.ca_cert_path().display()
    );
    let kc = Kubeconfig::from_yaml(&kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

fn dgx_a100(node: &str) -> gputopo_topology::discover::Discovered {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt"),
    )
    .expect("fixture");
    build(node, facts_from_topo(&text).expect("parses")).expect("normalizes")
}

/// What the agent publishes for `found`, with one pod holding GPU 0.
fn observed<'a>(
    found: &'a gputopo_topology::discover::Discovered,
    round: &'a PodResourcesRound,
) -> Observed<'a> {
    Observed {
        spec: &found.spec,
        findings: &found.findings,
        pod_resources: round,
        fabric: &CliqueVerdict::NoFabric,
    }
}

fn one_pod_on_gpu_0() -> PodResourcesRound {
    PodResourcesRound::Read {
        allocations: vec![GpuAllocation {
            gpu: 0,
            pods: vec!["ml/trainer".into()],
            holders: vec![GpuHolder {
                pod: "ml/trainer".into(),
                container: "main".into(),
                resource: "nvidia.com/gpu".into(),
                device: "GPU-0".into(),
                form: DeviceForm::Whole,
            }],
        }],
        unknown_devices: vec![],
    }
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The agent's RBAC and admission policy from `daemonset/`, nodes
/// `<prefix>-a` and `<prefix>-b`, and the agent's client on node A.
async fn two_nodes(prefix: &str) -> (&'static TestEnv, kube::Client, String, String, kube::Client) {
    let env = TestEnv::shared().await;
    let admin = env.client().await;
    create_manifest(&admin, "daemonset/agent-rbac.yaml").await;
    create_manifest(&admin, "daemonset/agent-admission-policy.yaml").await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let (a, b) = (
        env.unique_name(&format!("{prefix}-a")),
        env.unique_name(&format!("{prefix}-b")),
    );
    for n in [&a, &b] {
        nodes
            .create(
                &PostParams::default(),
                &fake_gpu_node(n, 8, &Default::default()),
            )
            .await
            .expect("node created");
    }
    let agent = agent_client_on(env, &admin, &a).await;
    (env, admin, a, b, agent)
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_agent_may_publish_its_own_node_and_nothing_else() {
    let (_, admin, a, b, agent) = two_nodes("node").await;
    let nodes: Api<Node> = Api::all(admin.clone());

    // Node B with node A's credentials: refused by the admission policy. The
    // policy takes effect once the API server has loaded it, so retry briefly.
    let on_b = Publisher::new(agent.clone(), b.clone(), LabelOptions::default());
    let deadline = Instant::now() + Duration::from_secs(20);
    let refusal = loop {
        let found = dgx_a100(&b);
        let result = on_b
            .publish(&observed(&found, &one_pod_on_gpu_0()), now())
            .await;
        match result {
            Err(PublishError::ApplyLabels {
                source: kube::Error::Api(e),
                ..
            }) if e.code == 403 => break e,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "node B was not refused within 20 s: {other:?}"
                );
                // Undo what got through before the policy was active.
                let _ = nodes
                    .patch(&b, &PatchParams::apply("gputopo-agent").force(), &Patch::Apply(serde_json::json!({
                        "apiVersion": "v1", "kind": "Node", "metadata": {"name": b, "labels": {}}
                    })))
                    .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert!(
        refusal.message.contains(&format!(
            "may only change Node and GpuTopology {a}, not {b}"
        )),
        "{}",
        refusal.message
    );

    // Node A with node A's credentials: allowed, labels and object both.
    let on_a = Publisher::new(agent.clone(), a.clone(), LabelOptions::default());
    let found = dgx_a100(&a);
    let writes = on_a
        .publish(&observed(&found, &one_pod_on_gpu_0()), now())
        .await
        .expect("own node published");
    assert!(
        writes.labels && writes.topology && writes.status,
        "{writes:?}"
    );
    // The status, allocations included, is the agent's to write.
    let status = Api::<gputopo_api::GpuTopology>::all(admin.clone())
        .get(&a)
        .await
        .expect("its GpuTopology")
        .status
        .expect("a status");
    assert_eq!(status.allocations[0].pods, ["ml/trainer"]);
    let labels = nodes
        .get(&a)
        .await
        .expect("node")
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(labels["nvidia.com/nvlink.p2p.level"], "NV12");

    // Its GpuTopology for node B: refused too.
    let topologies: Api<gputopo_api::GpuTopology> = Api::all(agent.clone());
    let mut other = gputopo_api::GpuTopology::new(&b, dgx_a100(&b).spec);
    other.metadata.owner_references = None;
    let e = topologies
        .create(&PostParams::default(), &other)
        .await
        .expect_err("another node's GpuTopology");
    assert!(matches!(e, kube::Error::Api(ref r) if r.code == 403), "{e}");

    // A label the agent does not own, on its own node: refused.
    let agent_nodes: Api<Node> = Api::all(agent.clone());
    let patch = serde_json::json!({"metadata": {"labels": {"team": "evil"}}});
    let e = agent_nodes
        .patch(&a, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect_err("a foreign label");
    match e {
        kube::Error::Api(r) => {
            assert_eq!(r.code, 403);
            assert!(
                r.message.contains("may only change its own labels") && r.message.contains("team"),
                "{}",
                r.message
            );
        }
        other => panic!("{other}"),
    }
    // Taints (the node's spec) are out of bounds as well.
    let patch = serde_json::json!({"spec": {"unschedulable": true}});
    assert!(
        agent_nodes
            .patch(&a, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .is_err()
    );

    // And RBAC alone: no deleting nodes, no reading pods or secrets.
    assert!(
        agent_nodes
            .delete(&a, &DeleteParams::default())
            .await
            .is_err()
    );
    let pods: Api<Pod> = Api::all(agent.clone());
    assert!(pods.list(&ListParams::default()).await.is_err());
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_agent_publishes_link_devices_for_its_own_node_only() {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    let (_, admin, a, b, agent) = two_nodes("links").await;
    let slices: Api<ResourceSlice> = Api::all(admin.clone());
    let agent_slices: Api<ResourceSlice> = Api::all(agent.clone());
    let found = dgx_a100(&a);

    // Another node's slice, or another driver's on its own node: refused
    // (once the API server has loaded the policy).
    let deadline = Instant::now() + Duration::from_secs(20);
    let foreign = |node: &str, driver: &str| -> ResourceSlice {
        let mut s = gputopo_topology::dra_slice::link_resource_slice(node, &found.spec);
        s["spec"]["driver"] = serde_json::json!(driver);
        s["metadata"]["name"] = serde_json::json!(format!("{node}-{driver}-x"));
        serde_json::from_value(s).expect("a slice")
    };
    for (node, driver) in [
        (b.as_str(), "topology.gputopo.dev"),
        (a.as_str(), "gpu.nvidia.com"),
    ] {
        let e = loop {
            match agent_slices
                .create(&PostParams::default(), &foreign(node, driver))
                .await
            {
                Err(kube::Error::Api(e))
                    if e.code == 403 && e.message.contains("may only write") =>
                {
                    break e;
                }
                other => {
                    assert!(
                        Instant::now() < deadline,
                        "{node}/{driver} not refused: {other:?}"
                    );
                    let name = format!("{node}-{driver}-x");
                    let _ = slices.delete(&name, &DeleteParams::default()).await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        assert!(
            e.message
                .contains(&format!("topology.gputopo.dev for node {a}")),
            "{}",
            e.message
        );
    }

    // Its own: published once, owned by the node, not rewritten unchanged.
    let on_a =
        Publisher::new(agent.clone(), a.clone(), LabelOptions::default()).with_link_devices(true);
    let round = one_pod_on_gpu_0();
    let writes = on_a
        .publish(&observed(&found, &round), now())
        .await
        .expect("published");
    assert!(writes.link_slice, "{writes:?}");
    let again = on_a
        .publish(&observed(&found, &round), now())
        .await
        .expect("published");
    assert!(
        !again.link_slice,
        "unchanged devices are not rewritten: {again:?}"
    );
    let slice = slices
        .get(&format!("{a}-topology.gputopo.dev-0"))
        .await
        .expect("the slice");
    assert_eq!(slice.spec.node_name.as_deref(), Some(a.as_str()));
    assert_eq!(slice.spec.pool.generation, 1);
    let owner = &slice.metadata.owner_references.expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", a.as_str())
    );
    let devices = slice.spec.devices.expect("devices");
    assert_eq!(devices.len(), 8 + 12, "8 GPUs and 12 NICs");
    let gpu4 = devices.iter().find(|d| d.name == "gpu-4").expect("gpu-4");
    let attrs = serde_json::to_value(&gpu4.attributes).expect("json");
    assert_eq!(attrs["rail"]["string"], "mlx5_6");
    // The API server kept allowMultipleAllocations (consumable capacity on in 1.37).
    assert_eq!(gpu4.allow_multiple_allocations, Some(true));
}
