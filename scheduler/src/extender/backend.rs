//! What the extender's HTTP layer reads and writes through ([`Backend`]),
//! and why each call can fail: the HTTP handlers (`http/`) call it, the
//! extender process (`server.rs`) implements it over its watches and the API
//! server, and the HTTP tests over a fake. Every error's text is what
//! kube-scheduler (or `/readyz`) is told.

use super::protocol::{BindingRequest, PlanError, PodClaims};
use futures::future::BoxFuture;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::schedule::Placement;
use gputopo_scheduler_core::snapshot::Snapshot;
use gputopo_scheduler_core::snapshot::SnapshotError;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;
use std::time::Duration;

/// The extender cannot answer yet: the reason, as `/readyz` says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct NotReady {
    pub reason: String,
}

/// The cluster snapshot could not be built from the caches.
#[derive(Debug, thiserror::Error)]
#[error("building the cluster snapshot: {0}")]
pub struct SnapshotUnavailable(#[from] pub SnapshotError);

/// Why a bind did not happen; the message goes back to kube-scheduler.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Boxed: the largest reason, and a bind's result crosses tasks.
    #[error(transparent)]
    Plan(Box<PlanError>),
    #[error(
        "pod {pod} is not in gputopo's pod cache after {}s; kube-scheduler will retry it",
        waited.as_secs()
    )]
    NotCached { pod: String, waited: Duration },
    #[error("pod {pod} was bound by this extender moments ago (its binding is still on its way)")]
    AlreadyAssumed { pod: String },
    #[error(transparent)]
    Snapshot(#[from] SnapshotUnavailable),
    #[error("binding pod {pod} (with its GPUs) to node {node}: {source}")]
    Bind {
        pod: String,
        node: String,
        source: kube::Error,
    },
    /// The task the bind ran on panicked or was cancelled.
    #[error("the bind task failed: {0}")]
    Task(tokio::task::JoinError),
}

/// What the handlers read and write through.
pub trait Backend: Send + Sync + 'static {
    /// `Err` with the reason until the caches have synced.
    fn ready(&self) -> Result<(), NotReady>;
    /// The cluster now, with the pods this extender bound and has not yet
    /// seen bound; `Err` when it cannot be built.
    fn snapshot(&self) -> Result<Arc<Snapshot>, SnapshotUnavailable>;
    fn config(&self) -> &SchedulerConfig;
    /// What the pod's DRA claims are judged by on `snapshot` (none without
    /// DRA objects).
    fn claims(&self, _pod: &Pod, _snapshot: &Snapshot) -> PodClaims {
        PodClaims::Unjudged
    }
    /// Chooses the GPUs on the request's node, writes them on the pod and
    /// binds it; one bind at a time. `Err` is the message for kube-scheduler.
    fn bind(&self, request: BindingRequest) -> BoxFuture<'_, Result<Placement, BindError>>;
}

impl From<PlanError> for BindError {
    fn from(e: PlanError) -> BindError {
        BindError::Plan(Box::new(e))
    }
}
