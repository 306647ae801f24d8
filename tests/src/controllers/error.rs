//! What can go wrong starting an ecosystem controller.

use std::path::PathBuf;
use std::time::Duration;

/// Why a controller (JobSet, Kueue, LeaderWorkerSet, the Trainer) could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The binary, kustomize or the module link is missing: the message says
    /// how to build them.
    #[error("{0:#}")]
    NotBuilt(anyhow::Error),
    #[error("kustomize build {dir} failed ({status}):\n{output}")]
    Kustomize {
        dir: PathBuf,
        status: std::process::ExitStatus,
        output: String,
    },
    #[error(
        "kustomize build {dir}: document {index} ({kind} {name}) does not read as {kind}: {source}"
    )]
    Manifest {
        dir: PathBuf,
        index: usize,
        kind: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "kustomize build {dir} rendered no {what}: the controller's manifests are not laid out \
         as this harness expects (CRDs and Mutating/ValidatingWebhookConfigurations)"
    )]
    NothingRendered { dir: PathBuf, what: &'static str },
    #[error(
        "{name} not ready after {timeout:?} (last check: {last}); last lines of {log}:\n{tail}"
    )]
    NotReady {
        name: String,
        timeout: Duration,
        last: NotYet,
        log: PathBuf,
        tail: String,
    },
    #[error("{what}: {source}")]
    Harness {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Why a readiness check of a starting controller has not passed yet; the
/// last one is in [`ControllerError::NotReady`].
#[derive(Debug, thiserror::Error)]
pub enum NotYet {
    #[error("/readyz: {code} {body}")]
    Readyz { code: u16, body: String },
    #[error("/readyz: no answer")]
    NoReadyz,
    /// The API server's dry-run create says it cannot call a webhook.
    #[error("{0}")]
    WebhookUnreachable(String),
    #[error("{0}")]
    DryRun(Box<kube::Error>),
}

pub type Result<T, E = ControllerError> = std::result::Result<T, E>;

/// Wraps any error with what the harness was doing.
pub(crate) fn harness<E>(what: impl Into<String>) -> impl FnOnce(E) -> ControllerError
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let what = what.into();
    move |e| ControllerError::Harness {
        what,
        source: e.into(),
    }
}
