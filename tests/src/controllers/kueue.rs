//! Kueue (`sigs.k8s.io/kueue`): admits workloads labelled
//! `kueue.x-k8s.io/queue-name` against a ClusterQueue's quota, then lets
//! them run: a Job is created suspended and unsuspended at admission (with
//! the flavor's node labels in its pods' nodeSelector); under
//! topology-aware scheduling its pods are held by the
//! `kueue.x-k8s.io/topology` scheduling gate until Kueue has assigned each
//! a topology domain, which it writes into the pod's nodeSelector.

use super::{Controller, Launch, Ports, Result, harness};
use crate::TestEnv;
use crate::binaries::KUEUE;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The label that sends a workload to a LocalQueue.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The scheduling gate Kueue holds pods with until it assigns their topology domain.
pub const TOPOLOGY_GATE: &str = "kueue.x-k8s.io/topology";
/// The pod template annotation asking for all pods in one domain of a level.
pub const REQUIRED_TOPOLOGY_ANNOTATION: &str = "kueue.x-k8s.io/podset-required-topology";
/// Kueue's namespace (its configuration's `namespace`).
pub const NAMESPACE: &str = "kueue-system";

/// The scheduling gate Kueue holds a plain pod (pod integration) with until it admits it.
pub const ADMISSION_GATE: &str = "kueue.x-k8s.io/admission";
/// The label grouping plain pods into one Kueue workload.
pub const POD_GROUP_NAME_LABEL: &str = "kueue.x-k8s.io/pod-group-name";
/// The annotation giving a plain pod group's size.
pub const POD_GROUP_TOTAL_COUNT_ANNOTATION: &str = "kueue.x-k8s.io/pod-group-total-count";

/// The integrations Kueue manages here: what the tests create (Jobs, plain
/// pods), and the other controllers of this harness.
const FRAMEWORKS: [&str; 5] = [
    "batch/job",
    "pod",
    "jobset.x-k8s.io/jobset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "trainer.kubeflow.org/trainjob",
];

/// Starts the Kueue controller manager (CRDs and webhooks from `config/default`).
pub async fn start(env: &TestEnv) -> Result<Controller> {
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<Namespace>::all(env.client().await)
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(harness(format!("creating namespace {NAMESPACE}"))(e)),
    }
    Controller::launch(
        env,
        Launch {
            name: "kueue-controller",
            tool: KUEUE,
            binary: "kueue",
            kustomize_dirs: &["config/default"],
            config,
            probe: json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "webhook-probe"},
                "spec": {}
            }),
            dependency_crds: &[],
            fixed_cert_dirs: &["/etc/kueue/metrics/certs"],
        },
    )
    .await
}

/// `config.kueue.x-k8s.io/v1beta2` Configuration.
fn config(ports: &Ports) -> serde_json::Value {
    json!({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": false},
        // Its cert rotation writes a Secret and patches the webhook
        // configurations' caBundle; the test CA is set already.
        "internalCertManagement": {"enable": false},
        "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": ports.cert_dir},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": format!("127.0.0.1:{}", ports.probe)},
        "manageJobsWithoutQueueName": false,
        "integrations": {"frameworks": FRAMEWORKS},
        // The pending-workloads API is an aggregated API server (an
        // APIService in front of a Service); nothing here reads it.
        "featureGates": {"VisibilityOnDemand": false},
    })
}
