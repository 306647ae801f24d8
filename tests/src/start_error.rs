//! Why the control plane, or a component added to it, did not start. The
//! first attempt's error is kept (in a `OnceCell`), so every test that asks
//! for the same control plane or component fails with the same cause.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// etcd, kube-apiserver or the CRD install of the shared env failed.
    #[error("the control plane did not start: {0:#}")]
    ControlPlane(anyhow::Error),
    /// kube-controller-manager, kube-scheduler or kwok failed to start.
    #[error("{component} did not start: {cause:#}\n(control plane logs: {logs})")]
    Component {
        component: &'static str,
        cause: anyhow::Error,
        logs: PathBuf,
    },
}
