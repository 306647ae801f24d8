//! JobSet (`sigs.k8s.io/jobset`): a JobSet makes one batch/v1 Job per
//! replicated job replica; the Jobs' pods carry the JobSet's name as a label.

use super::{Controller, Launch, Ports, Result};
use crate::TestEnv;
use crate::binaries::JOBSET;
use serde_json::json;

/// The label on every pod of a JobSet naming it.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";

/// Starts the JobSet controller manager (CRD and webhooks from `config/default`).
pub async fn start(env: &TestEnv) -> Result<Controller> {
    Controller::launch(
        env,
        Launch {
            name: "jobset-controller",
            tool: JOBSET,
            binary: "jobset",
            kustomize_dirs: &["config/default"],
            config,
            probe: json!({
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "webhook-probe", "namespace": "default"},
                "spec": {"replicatedJobs": []}
            }),
            dependency_crds: &[],
            fixed_cert_dirs: &[],
        },
    )
    .await
}

/// `config.jobset.x-k8s.io/v1alpha1` Configuration.
fn config(ports: &Ports) -> serde_json::Value {
    json!({
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": false},
        // Its cert rotation writes a Secret and patches the webhook
        // configurations' caBundle; the test CA is set already.
        "internalCertManagement": {"enable": false},
        "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": ports.cert_dir},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": format!("127.0.0.1:{}", ports.probe)},
    })
}
