//! Objects tests make on the control plane: unique names, namespaces,
//! kwok's fake GPU nodes, CRDs.

use crate::{KWOK_NODE_ANNOTATION, NAMES, TestEnv, process};
use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, Resource as _};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl TestEnv {
    /// A name no other test of this process gets: `<prefix>-<n>`, a valid
    /// DNS label for any prefix of lowercase letters, digits and dashes.
    pub fn unique_name(&self, prefix: &str) -> String {
        format!("{prefix}-{}", NAMES.fetch_add(1, Ordering::Relaxed))
    }

    /// Creates a namespace with a unique name and its `default`
    /// ServiceAccount (which the ServiceAccount admission plugin requires of
    /// every pod; the controller manager would create it, when it runs).
    pub async fn create_namespace(&self, prefix: &str) -> String {
        let name = self.unique_name(prefix);
        let client = self.client().await;
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<ServiceAccount>::namespaced(client, &name)
            .create(&PostParams::default(), &sa)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("creating the default ServiceAccount in {name}: {e}"),
        }
        name
    }

    /// Creates a Node that kwok manages (call [`TestEnv::with_kwok`] first):
    /// `gpus` whole `nvidia.com/gpu` in capacity and allocatable, room for
    /// 110 pods, the given labels; then waits (up to a minute) until kwok
    /// reports it Ready.
    pub async fn create_fake_gpu_node(
        &self,
        name: &str,
        gpus: u32,
        labels: &BTreeMap<String, String>,
    ) -> Node {
        let client = self.client().await;
        let nodes = Api::<Node>::all(client);
        nodes
            .create(&PostParams::default(), &fake_gpu_node(name, gpus, labels))
            .await
            .unwrap_or_else(|e| panic!("creating fake node {name}: {e}"));
        let ready = kube::runtime::wait::await_condition(nodes, name, |n: Option<&Node>| {
            n.and_then(|n| n.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        match tokio::time::timeout(Duration::from_secs(60), ready).await {
            Ok(Ok(Some(node))) => node,
            Ok(Ok(None)) => panic!("fake node {name} was deleted while waiting for it to be Ready"),
            Ok(Err(e)) => panic!("watching fake node {name}: {e}"),
            Err(_) => panic!(
                "fake node {name} not Ready after 60 s: is kwok running (TestEnv::with_kwok)? \
                 kwok log:\n{}",
                process::tail(&self.dir.join("kwok.log"), 30)
            ),
        }
    }
}

/// A Node object as kwok's fake nodes are made: the annotation kwok selects
/// on, the taint-free spec, and the status (Node status may be set at
/// creation; kwok keeps capacity and allocatable as given).
pub fn fake_gpu_node(name: &str, gpus: u32, labels: &BTreeMap<String, String>) -> Node {
    let mut all_labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), name.to_owned()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ("type".to_owned(), "kwok".to_owned()),
    ]);
    all_labels.extend(labels.clone());
    let resources = BTreeMap::from([
        ("cpu".to_owned(), Quantity("128".into())),
        ("memory".to_owned(), Quantity("1Ti".into())),
        ("pods".to_owned(), Quantity("110".into())),
        (
            gputopo_api::keys::RESOURCE_GPU.to_owned(),
            Quantity(gpus.to_string()),
        ),
    ]);
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(all_labels),
            annotations: Some(BTreeMap::from([(
                KWOK_NODE_ANNOTATION.0.to_owned(),
                KWOK_NODE_ANNOTATION.1.to_owned(),
            )])),
            ..Default::default()
        },
        spec: None,
        status: Some(k8s_openapi::api::core::v1::NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            ..Default::default()
        }),
    }
}

/// Creates (or replaces) a CRD and waits until it is Established.
pub async fn install_crd(client: &Client, crd: CustomResourceDefinition) -> anyhow::Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd
        .meta()
        .name
        .clone()
        .ok_or_else(|| anyhow!("CRD without a name"))?;
    api.create(&PostParams::default(), &crd)
        .await
        .with_context(|| format!("creating CRD {name}"))?;
    let established = kube::runtime::wait::await_condition(
        api,
        &name,
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(60), established)
        .await
        .with_context(|| format!("CRD {name} not Established after 60 s"))??;
    Ok(())
}

/// The chart's admission policies, from their plain-manifest twins in
/// `daemonset/` (a deploy test keeps the two equal): the agent's own-node
/// policy and the scheduler's GPU-record policy, with their bindings.
pub const ADMISSION_POLICY_FILES: [&str; 2] = [
    "agent-admission-policy.yaml",
    "scheduler-assignment-policy.yaml",
];

/// Creates what `daemonset/<file>` holds of admission policies and their
/// bindings (one already there is left as it is): what `helm install` puts
/// in the cluster beside the daemons, for the demo and the tests that run
/// the daemons as processes. Returns `kind/name` of each object.
pub async fn install_admission_policies(
    client: &Client,
    file: &str,
) -> anyhow::Result<Vec<String>> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use serde::Deserialize as _;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../daemonset")
        .join(file);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut created = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_json::Value::deserialize(doc)
            .with_context(|| format!("{} is not YAML", path.display()))?;
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let result = match kind.as_str() {
            "ValidatingAdmissionPolicy" => Api::<ValidatingAdmissionPolicy>::all(client.clone())
                .create(&PostParams::default(), &serde_json::from_value(value)?)
                .await
                .map(|_| ()),
            "ValidatingAdmissionPolicyBinding" => {
                Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
                    .create(&PostParams::default(), &serde_json::from_value(value)?)
                    .await
                    .map(|_| ())
            }
            _ => continue,
        };
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating {kind} {name}")),
        }
        created.push(format!("{kind}/{name}"));
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_gpu_nodes_carry_the_kwok_annotation_and_gpus() {
        let labels = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
        let node = fake_gpu_node("n1", 8, &labels);
        let annotations = node.metadata.annotations.unwrap();
        assert_eq!(annotations[KWOK_NODE_ANNOTATION.0], KWOK_NODE_ANNOTATION.1);
        assert_eq!(node.metadata.labels.unwrap()["a"], "b");
        let status = node.status.unwrap();
        assert_eq!(status.allocatable.unwrap()["nvidia.com/gpu"].0, "8");
        assert_eq!(status.capacity.unwrap()["nvidia.com/gpu"].0, "8");
    }
}
