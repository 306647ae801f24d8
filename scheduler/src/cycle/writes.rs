//! The one way the cycle touches the API server. `kube_writes.rs`
//! implements it over `kube::Client`; the cycle's tests implement it with a
//! recording fake that can fail on demand.

use gputopo_scheduler_core::schedule::Placement;
use k8s_openapi::api::core::v1::Pod;
use std::future::Future;

/// Every write the scheduling cycle makes. `Sync`: several bindings are
/// outstanding at once (`drive/binds.rs`), each holding a reference.
pub trait ClusterWrites: Sync {
    /// Binds `pod` to `placement.node` through `pods/binding`, carrying the
    /// GPUs as the binding's annotations (the API server copies them onto
    /// the pod): node and GPUs are written by one request.
    fn bind(
        &self,
        pod: &Pod,
        placement: &Placement,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Evicts `victim` (`namespace/name`) through the Eviction API, so that
    /// PodDisruptionBudgets hold; a dry run only asks whether it would.
    /// A victim already gone is success.
    fn evict(
        &self,
        victim: &str,
        dry_run: bool,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Sets `status.nominatedNodeName`: where a preemptor waits for its
    /// victims to go.
    fn nominate(
        &self,
        pod: &Pod,
        node: &str,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Sets the pod's `PodScheduled` condition to False, reason
    /// `Unschedulable`, with `message` (nothing when it already says so).
    fn set_unschedulable(
        &self,
        pod: &Pod,
        message: &str,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Writes a gang object's status (`gang_status.rs`): a scheduler-plugins
    /// PodGroup's `status`, or an upstream PodGroup's condition.
    fn set_gang_status(
        &self,
        write: &super::gang_status::GangStatusWrite,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Sets a node's `GpuTopologyTrusted` condition (`node_trust.rs`),
    /// leaving the kubelet's conditions alone.
    fn set_node_condition(
        &self,
        write: &super::node_trust::NodeConditionWrite,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Allocates or reserves one ResourceClaim for a pod about to be bound
    /// (`claims::ClaimWrite`): refused, never overwriting, when the claim
    /// changed since it was decided on.
    fn reserve_claim(
        &self,
        write: &crate::claims::ClaimWrite,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Undoes [`ClusterWrites::reserve_claim`] for a pod not bound after
    /// all; `deallocate` also clears an allocation made for it.
    fn release_claim(
        &self,
        write: &crate::claims::ClaimWrite,
        deallocate: bool,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Creates a pod's special claim (KEP-5004) from `claim`'s
    /// `generateName`; returns it as created (name, uid).
    fn create_claim(
        &self,
        claim: &k8s_openapi::api::resource::v1::ResourceClaim,
    ) -> impl Future<Output = Result<k8s_openapi::api::resource::v1::ResourceClaim, WriteError>> + Send;

    /// Deletes a special claim this decision created (its pod was not bound).
    fn delete_claim(
        &self,
        write: &crate::claims::ClaimWrite,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Sets the pod's `status.extendedResourceClaimStatus`: which request of
    /// its special claim serves which container's `nvidia.com/gpu`.
    fn set_extended_claim_status(
        &self,
        pod: &Pod,
        status: &k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Records an event on `pod`. Sent in the background: an event is a
    /// report, not part of the decision, so it neither waits nor fails.
    fn emit_event(&self, pod: &Pod, event: EventSpec);
}

/// An event the cycle records on a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub warning: bool,
    /// `Scheduled`, `FailedScheduling`, `Preempted`.
    pub reason: &'static str,
    /// `Binding`, `Scheduling`, `Preempting`.
    pub action: &'static str,
    /// At most [`NOTE_MAX`] bytes.
    pub note: String,
}

/// A Kubernetes Event's note may hold 1 kB.
pub const NOTE_MAX: usize = 1000;

impl EventSpec {
    pub fn normal(reason: &'static str, action: &'static str, note: String) -> EventSpec {
        EventSpec {
            warning: false,
            reason,
            action,
            note: truncate(note),
        }
    }

    pub fn warning(reason: &'static str, action: &'static str, note: String) -> EventSpec {
        EventSpec {
            warning: true,
            ..EventSpec::normal(reason, action, note)
        }
    }
}

/// Cuts `s` to [`NOTE_MAX`] bytes on a character boundary, marking the cut.
pub fn truncate(mut s: String) -> String {
    if s.len() > NOTE_MAX {
        let mut cut = NOTE_MAX - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// Which write failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOp {
    Bind,
    Evict {
        dry_run: bool,
    },
    Nominate,
    Condition,
    GangStatus,
    NodeCondition,
    ClaimReserve,
    ClaimRelease,
    ClaimCreate,
    ClaimDelete,
    ExtendedClaimStatus,
    /// A static PersistentVolume's `claimRef`, before a binding.
    VolumeBind,
    /// A claim's `volume.kubernetes.io/selected-node`, before a binding.
    VolumeSelectNode,
    /// Waiting for a written claim to be bound, before a binding.
    VolumeWait,
}

/// How it failed, as the cycle must react: the kind, never the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteErrorKind {
    /// 404: the object is gone.
    NotFound,
    /// 409: someone else changed it first (bound by another scheduler).
    Conflict,
    /// 429: refused for now; for an eviction, a PodDisruptionBudget.
    TooManyRequests,
    /// The request timed out.
    Timeout,
    /// The API server could not be reached or answered 5xx.
    Unavailable,
    /// Any other refusal (403, 422, ...).
    Rejected,
}

/// A write that did not happen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} {target}: {message}", op_text(.op))]
pub struct WriteError {
    pub op: WriteOp,
    pub kind: WriteErrorKind,
    /// `namespace/name` of the object written: the pod (or the evicted
    /// pod, the claim, the gang object, the node).
    pub target: String,
    /// The API server's words, for people.
    pub message: String,
}

fn op_text(op: &WriteOp) -> &'static str {
    match op {
        WriteOp::Bind => "binding",
        WriteOp::Evict { dry_run: true } => "evicting (dry run)",
        WriteOp::Evict { dry_run: false } => "evicting",
        WriteOp::Nominate => "nominating a node for",
        WriteOp::Condition => "setting the PodScheduled condition of",
        WriteOp::GangStatus => "writing the status of PodGroup",
        WriteOp::NodeCondition => "setting the GpuTopologyTrusted condition of node",
        WriteOp::ClaimReserve => "allocating ResourceClaim",
        WriteOp::ClaimRelease => "releasing ResourceClaim",
        WriteOp::ClaimCreate => "creating the special ResourceClaim of",
        WriteOp::ClaimDelete => "deleting ResourceClaim",
        WriteOp::ExtendedClaimStatus => "setting the extendedResourceClaimStatus of",
        WriteOp::VolumeBind => "binding",
        WriteOp::VolumeSelectNode => "selecting a node for PersistentVolumeClaim",
        WriteOp::VolumeWait => "waiting for the binding of PersistentVolumeClaim",
    }
}

impl WriteError {
    /// The pod is gone: nothing to retry. (A volume or claim not found
    /// before the binding is not the pod: it is decided again.)
    pub fn pod_gone(&self) -> bool {
        self.kind == WriteErrorKind::NotFound
            && !matches!(
                self.op,
                WriteOp::VolumeBind | WriteOp::VolumeSelectNode | WriteOp::VolumeWait
            )
    }

    /// An eviction a PodDisruptionBudget refused.
    pub fn budget_refused(&self) -> bool {
        matches!(self.op, WriteOp::Evict { .. }) && self.kind == WriteErrorKind::TooManyRequests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        let s = "é".repeat(NOTE_MAX);
        let t = truncate(s);
        assert!(t.len() <= NOTE_MAX && t.ends_with("..."), "{}", t.len());
        assert_eq!(truncate("short".into()), "short");
    }

    #[test]
    fn errors_name_the_write_and_the_pod() {
        let e = WriteError {
            op: WriteOp::Evict { dry_run: true },
            kind: WriteErrorKind::TooManyRequests,
            target: "ml/a".into(),
            message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        };
        assert!(e.budget_refused() && !e.pod_gone());
        assert!(
            e.to_string()
                .starts_with("evicting (dry run) ml/a: Cannot evict")
        );
    }
}
