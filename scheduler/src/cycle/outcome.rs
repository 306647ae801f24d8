//! What one attempt at a pod came to. Events, metrics and the queue's
//! bookkeeping derive from the variant, never from message text.

use super::writes::{EventSpec, WriteError};
use crate::annotations::bottleneck_text;
use gputopo_api::WorkloadKind;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::Placement;

/// One pod's attempt in a cycle.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Bound to a node with these GPUs.
    Scheduled(Box<Placement>),
    /// No node fits now, and preemption is off, not allowed or cannot help.
    Unschedulable { message: String },
    /// No node fits now; victims are being evicted for it.
    Preempting { message: String },
    /// A gang member: the gang is incomplete (members missing or its
    /// PodGroup not there yet), so none is placed.
    WaitingForGang { message: String },
    /// Its claims are allocated and reserved; the driver has not yet set
    /// every binding condition of their devices (KEP-5007).
    WaitingForDevices { message: String },
    /// A gang member whose gang has waited longer than its schedule timeout.
    GangTimedOut { message: String },
    /// The pod's spec or `gputopo.dev/` annotations cannot be read.
    Invalid { message: String },
    /// Preemption was tried and an eviction failed for a reason other than
    /// a PodDisruptionBudget.
    PreemptionFailed { message: String },
    /// The binding was not written.
    BindFailed(WriteError),
}

impl Outcome {
    /// Every value of the `result` label of `gputopo_schedule_attempts_total`.
    pub const METRIC_LABELS: [&'static str; 7] = [
        "scheduled",
        "unschedulable",
        "preempting",
        "waiting",
        "timeout",
        "invalid",
        "error",
    ];

    /// The `result` label of `gputopo_schedule_attempts_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Outcome::Scheduled(_) => "scheduled",
            Outcome::Unschedulable { .. } => "unschedulable",
            Outcome::Preempting { .. } => "preempting",
            Outcome::WaitingForGang { .. } | Outcome::WaitingForDevices { .. } => "waiting",
            Outcome::GangTimedOut { .. } => "timeout",
            Outcome::Invalid { .. } => "invalid",
            Outcome::PreemptionFailed { .. } | Outcome::BindFailed(_) => "error",
        }
    }

    /// The message of a pod left pending: the `FailedScheduling` note and
    /// the `PodScheduled` condition's message. `None` once scheduled.
    pub fn message(&self) -> Option<String> {
        match self {
            Outcome::Scheduled(_) => None,
            Outcome::Unschedulable { message }
            | Outcome::Preempting { message }
            | Outcome::WaitingForGang { message }
            | Outcome::WaitingForDevices { message }
            | Outcome::GangTimedOut { message }
            | Outcome::Invalid { message }
            | Outcome::PreemptionFailed { message } => Some(message.clone()),
            Outcome::BindFailed(e) => Some(format!("Binding rejected: {e}")),
        }
    }

    /// The event recorded on the pod.
    pub fn event(&self) -> EventSpec {
        match self {
            Outcome::Scheduled(p) => EventSpec::normal("Scheduled", "Binding", scheduled_note(p)),
            other => EventSpec::warning(
                "FailedScheduling",
                "Scheduling",
                other.message().unwrap_or_default(),
            ),
        }
    }

    /// Whether the pod waits for a change in the cluster (the queue's
    /// unschedulable set) rather than retrying after a backoff: every
    /// outcome but a placement and a failed binding.
    pub fn waits_for_a_change(&self) -> bool {
        !matches!(self, Outcome::Scheduled(_) | Outcome::BindFailed(_))
    }
}

/// The `workload` label: `training`, `inference` or `unspecified`.
pub fn workload_label(pod: Option<&PendingPod>) -> &'static str {
    match pod.and_then(|p| p.request.workload) {
        Some(WorkloadKind::Training) => "training",
        Some(WorkloadKind::Inference) => "inference",
        None => "unspecified",
    }
}

/// The `Scheduled` event's note: where, which GPUs, and why.
pub fn scheduled_note(p: &Placement) -> String {
    let gpus = if p.gpus.is_empty() {
        "no GPUs".to_string()
    } else if p.by_count {
        format!("{} GPU(s) by count", p.gpus.len())
    } else {
        format!("GPUs {}", p.assigned_gpus())
    };
    format!(
        "Successfully assigned {} to {} with {gpus} (bottleneck {}): {}",
        p.pod,
        p.node,
        bottleneck_text(p),
        p.explanation
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cycle::writes::{WriteErrorKind, WriteOp};

    fn all() -> Vec<Outcome> {
        let m = || "m".to_string();
        // `Scheduled` needs a real placement: the cycle's tests cover it.
        vec![
            Outcome::Unschedulable { message: m() },
            Outcome::Preempting { message: m() },
            Outcome::WaitingForGang { message: m() },
            Outcome::WaitingForDevices { message: m() },
            Outcome::GangTimedOut { message: m() },
            Outcome::Invalid { message: m() },
            Outcome::PreemptionFailed { message: m() },
            Outcome::BindFailed(WriteError {
                op: WriteOp::Bind,
                kind: WriteErrorKind::Conflict,
                target: "a/b".into(),
                message: m(),
            }),
        ]
    }

    #[test]
    fn every_label_is_listed_and_every_listed_label_is_used() {
        let mut used: std::collections::BTreeSet<&str> =
            all().iter().map(Outcome::metric_label).collect();
        used.insert("scheduled");
        let listed: std::collections::BTreeSet<&str> = Outcome::METRIC_LABELS.into_iter().collect();
        assert_eq!(used, listed);
    }

    #[test]
    fn a_pod_left_pending_gets_a_warning_with_its_message() {
        for o in all() {
            let e = o.event();
            assert!(e.warning, "{o:?}");
            assert_eq!(e.reason, "FailedScheduling");
            assert!(e.note.ends_with('m'), "{o:?}: {}", e.note);
            assert!(o.waits_for_a_change() != matches!(o, Outcome::BindFailed(_)));
        }
    }
}
