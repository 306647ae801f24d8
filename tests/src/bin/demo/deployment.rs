//! The demo's inference Deployment: two 1-GPU replicas made by the real
//! Deployment and ReplicaSet controllers, spread one per node by a
//! `topologySpreadConstraints` entry (`maxSkew: 1` over
//! `kubernetes.io/hostname`, `DoNotSchedule`), which gputopo-scheduler
//! honours as kube-scheduler does. The replicas keep off the DRA node
//! (required node affinity): its GPUs are held for the DRA pods, which wait
//! for the ResourceClaim controller to make their claims, so a replica
//! arriving first would otherwise take a GPU the four-GPU claim needs.

use anyhow::{Context, Result};
use gputopo_testenv::TestEnv;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

/// The Deployment's name, and its pods' `app` label.
pub const DEPLOYMENT: &str = "infer-spread";
/// Its replicas.
pub const PODS: usize = 2;

/// Creates the Deployment in `ns`, its pods kept off `avoid_node`.
pub async fn create(env: &TestEnv, ns: &str, scheduler: &str, avoid_node: &str) -> Result<()> {
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": ns},
        "spec": {
            "replicas": PODS,
            "selector": {"matchLabels": {"app": DEPLOYMENT}},
            "template": {
                "metadata": {
                    "labels": {"app": DEPLOYMENT},
                    "annotations": {"gputopo.dev/workload": "inference"}
                },
                "spec": {
                    "schedulerName": scheduler,
                    "affinity": {"nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": [avoid_node]
                            }]}]
                        }
                    }},
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": DEPLOYMENT}}
                    }],
                    "containers": [{
                        "name": "serve",
                        "image": "registry.invalid/serve:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}
                    }]
                }
            }
        }
    }))?;
    Api::<Deployment>::namespaced(env.client().await, ns)
        .create(&PostParams::default(), &deployment)
        .await
        .context("creating the inference Deployment")?;
    Ok(())
}

/// The Deployment's pods' names, sorted (fewer than [`PODS`] while its
/// controllers are still creating them).
pub async fn pod_names(pods: &Api<Pod>) -> Result<Vec<String>> {
    let selector = format!("app={DEPLOYMENT}");
    let mut names: Vec<String> = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}
