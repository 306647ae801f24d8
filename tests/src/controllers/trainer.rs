//! The Kubeflow Trainer (`github.com/kubeflow/trainer/v2`): a TrainJob
//! names a (Cluster)TrainingRuntime whose template is a JobSet; the Trainer
//! makes that JobSet, and with the runtime's `podGroupPolicy.coscheduling`
//! a scheduler-plugins PodGroup (`scheduling.x-k8s.io`) whose name every
//! pod carries in the `scheduling.x-k8s.io/pod-group` label.
//!
//! It watches JobSets: start [`super::jobset::start`] first. The PodGroup
//! CRD installed is scheduler-plugins' own, from the module the Trainer is
//! built against (`spec.minResources` included, which its server-side apply
//! writes), so start it before anything that needs the CRD at start-up
//! (gputopo-scheduler reads PodGroups only if the CRD is served when it starts).

use super::{Controller, Launch, Ports, Result};
use crate::TestEnv;
use crate::binaries::TRAINER;
use serde_json::json;

/// The label naming a pod's TrainJob.
pub const TRAINJOB_NAME_LABEL: &str = "trainer.kubeflow.org/trainjob-name";

/// Starts the Trainer's controller manager (CRDs and webhooks from
/// `manifests/base`, the PodGroup CRD from scheduler-plugins; its runtimes
/// are the test's own).
pub async fn start(env: &TestEnv) -> Result<Controller> {
    Controller::launch(
        env,
        Launch {
            name: "trainer-controller",
            tool: TRAINER,
            binary: "trainer-controller-manager",
            kustomize_dirs: &["manifests/base/crds", "manifests/base/webhook"],
            config,
            probe: json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "webhook-probe", "namespace": "default"},
                "spec": {"runtimeRef": {"name": "webhook-probe"}}
            }),
            dependency_crds: &[(
                "scheduler-plugins",
                "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml",
            )],
            fixed_cert_dirs: &[],
        },
    )
    .await
}

/// `config.trainer.kubeflow.org/v1alpha1` Configuration. It has no
/// certDir: the webhook server reads controller-runtime's default,
/// `$TMPDIR/k8s-webhook-server/serving-certs`, which the harness links to
/// the certificates.
fn config(ports: &Ports) -> serde_json::Value {
    json!({
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": false},
        // Its cert management writes a Secret and patches the webhook
        // configurations' caBundle; the test CA is set already.
        "certManagement": {"enable": false},
        "webhook": {"host": "127.0.0.1", "port": ports.webhook},
        "metrics": {"bindAddress": "0"},
        "health": {
            "healthProbeBindAddress": format!("127.0.0.1:{}", ports.probe),
            "readinessEndpointName": "readyz",
            "livenessEndpointName": "healthz",
        },
        "statusServer": {"port": ports.extra},
    })
}
