//! LeaderWorkerSet (`sigs.k8s.io/lws`): each replica is a group of one
//! leader pod and `size - 1` worker pods, labelled with the set's name and
//! the group's index and annotated with the group's size.

use super::{Controller, Launch, Ports, Result};
use crate::TestEnv;
use crate::binaries::LWS;
use serde_json::json;

/// The label naming a pod's LeaderWorkerSet.
pub const NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";
/// The label holding a pod's group index.
pub const GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// The annotation holding the group's size (leader included).
pub const SIZE_ANNOTATION: &str = "leaderworkerset.sigs.k8s.io/size";

/// Starts the LeaderWorkerSet controller manager (CRDs and webhooks from `config/default`).
pub async fn start(env: &TestEnv) -> Result<Controller> {
    Controller::launch(
        env,
        Launch {
            name: "lws-controller",
            tool: LWS,
            binary: "lws",
            kustomize_dirs: &["config/default"],
            config,
            probe: json!({
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": {"name": "webhook-probe", "namespace": "default"},
                "spec": {}
            }),
            dependency_crds: &[],
            fixed_cert_dirs: &[],
        },
    )
    .await
}

/// `config.lws.x-k8s.io/v1alpha1` Configuration.
fn config(ports: &Ports) -> serde_json::Value {
    json!({
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
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
