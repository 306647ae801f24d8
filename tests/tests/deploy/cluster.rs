//! Putting rendered objects on the test control plane for real: a
//! namespace, the objects of chosen kinds, a node's `GpuTopology`.

use super::objects::kind_name;
use super::root;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::{Scope, pinned_kind};
use serde_json::{Value, json};

pub(super) async fn ensure_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

/// Applies (for real) the rendered objects of the given kinds.
pub(super) async fn apply_kinds(client: &kube::Client, docs: &[Value], wanted: &[&str]) {
    for doc in docs {
        let (kind, name) = kind_name(doc);
        if !wanted.contains(&kind.as_str()) {
            continue;
        }
        let gvk = match doc["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split_once('/')
        {
            Some((g, v)) => GroupVersionKind::gvk(g, v, &kind),
            None => GroupVersionKind::gvk("", doc["apiVersion"].as_str().unwrap_or(""), &kind),
        };
        let (resource, caps) = pinned_kind(client, &gvk).await.expect("discovery");
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                doc["metadata"]["namespace"].as_str().expect("a namespace"),
                &resource,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply("helm").validation_strict(),
            &Patch::Apply(doc),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
    }
}

/// Creates a `GpuTopology` for `node`: four GPUs in two NVLink pairs, the
/// `gpu-a` machine of `fixtures/clusters/kube-list.yaml`.
pub(super) async fn create_pair_topology(admin: &kube::Client, node: &str) {
    let list: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("fixtures/clusters/kube-list.yaml")).expect("fixture"),
    )
    .expect("YAML");
    let mut topology = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["kind"] == "GpuTopology" && i["metadata"]["name"] == "gpu-a")
        .expect("gpu-a's GpuTopology")
        .clone();
    topology["metadata"]["name"] = json!(node);
    topology["spec"]["nodeName"] = json!(node);
    topology
        .as_object_mut()
        .expect("an object")
        .remove("status");
    let topology: gputopo_api::GpuTopology =
        serde_json::from_value(topology).expect("a GpuTopology");
    Api::<gputopo_api::GpuTopology>::all(admin.clone())
        .create(&PostParams::default(), &topology)
        .await
        .expect("GpuTopology created");
}
