//! The demo's controller workload: a JobSet of two 4-GPU workers, made into
//! Jobs and pods by the real JobSet controller (built from
//! `sigs.k8s.io/jobset` like the end-to-end tests' controllers). It names
//! gputopo only in `schedulerName`; gputopo-scheduler places its pods as one
//! gang, sized from the JobSet's replicated jobs (docs/contract/pod-requests.md, "Gangs").

use anyhow::{Context, Result};
use gputopo_testenv::TestEnv;
use gputopo_testenv::controllers::Controller;
use gputopo_testenv::controllers::jobset::JOBSET_NAME_LABEL;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

/// The JobSet's name.
pub const JOBSET: &str = "jobset-train";
/// Its pods: two replicated-job replicas of one pod each.
pub const PODS: usize = 2;

/// Starts the JobSet controller (its CRD and webhooks installed); before
/// gputopo-scheduler, which watches JobSets only when the CRD is served.
pub async fn start(env: &TestEnv) -> Result<Controller> {
    gputopo_testenv::controllers::jobset::start(env)
        .await
        .context("starting the JobSet controller (scripts/demo builds it)")
}

/// Creates the JobSet in `ns`.
pub async fn create(env: &TestEnv, ns: &str, scheduler: &str) -> Result<()> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "jobset.x-k8s.io",
        "v1alpha2",
        "JobSet",
    ));
    let jobset: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": JOBSET, "namespace": ns},
        "spec": {"replicatedJobs": [{
            "name": "workers",
            "replicas": PODS,
            "template": {"spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": {"gputopo.dev/workload": "training"}},
                    "spec": {
                        "schedulerName": scheduler,
                        "restartPolicy": "Never",
                        "containers": [{
                            "name": "train",
                            "image": "registry.invalid/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "4"}}
                        }]
                    }
                }
            }}
        }]}
    }))?;
    Api::<DynamicObject>::namespaced_with(env.client().await, ns, &resource)
        .create(&PostParams::default(), &jobset)
        .await
        .context("creating the JobSet")?;
    Ok(())
}

/// The JobSet's pods' names, sorted (fewer than [`PODS`] while the
/// controller is still creating them).
pub async fn pod_names(pods: &Api<Pod>) -> Result<Vec<String>> {
    let selector = format!("{JOBSET_NAME_LABEL}={JOBSET}");
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
