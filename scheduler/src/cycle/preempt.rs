//! Preemption's pure parts: whether to try, what one round proposes, and
//! what each result says. `steps/preempt.rs` runs the rounds, and the
//! driver (`drive/`) makes their writes: every
//! victim is evicted first as a dry run, and a PodDisruptionBudget that
//! refuses one spares it (and its gang) for the next round's proposal, so
//! a refusal never leaves half a plan evicted.

use super::Outcome;
use crate::cluster::nominated_node;
use crate::config::Preemption;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::preempt_schedule::{PreemptionPlan, propose_preemption_sparing};
use gputopo_scheduler_core::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Each refusal spares at least one pod; a few rounds are enough in
/// practice and bound the API calls of one cycle.
pub const MAX_ROUNDS: usize = 4;

/// What preemption came to for one pod or gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreemptResult {
    /// Preemption is off for this profile.
    Off,
    /// Victims are being evicted (or still terminating) for it.
    Preempting(String),
    /// No plan: not allowed, nothing to evict that helps, or every plan
    /// needs a pod a PodDisruptionBudget protects.
    NoPlan(String),
    /// An eviction failed for another reason.
    Failed(String),
}

impl PreemptResult {
    /// The outcome of a pod (or gang) that fit nowhere for `why`, after
    /// this preemption result.
    pub fn outcome(self, why: String) -> Outcome {
        match self {
            PreemptResult::Off => Outcome::Unschedulable { message: why },
            PreemptResult::NoPlan(note) => Outcome::Unschedulable {
                message: format!("{why}; {note}"),
            },
            PreemptResult::Preempting(note) => Outcome::Preempting {
                message: format!("{why}; {note}"),
            },
            PreemptResult::Failed(note) => Outcome::PreemptionFailed {
                message: format!("{why}; {note}"),
            },
        }
    }
}

/// Whether preemption may be tried for `members` at all; `None`: go ahead.
pub fn precheck(
    members: &[(Arc<Pod>, PendingPod)],
    by_key: &HashMap<String, Arc<Pod>>,
    preemption: &Preemption,
) -> Option<PreemptResult> {
    if !preemption.enabled {
        return Some(PreemptResult::Off);
    }
    if members
        .iter()
        .any(|(p, _)| p.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()) == Some("Never"))
    {
        return Some(PreemptResult::NoPlan(
            "preemption: not tried, preemptionPolicy is Never".into(),
        ));
    }
    // Victims of an earlier round still terminating: wait for them rather
    // than evict more.
    for (pod, _) in members {
        let Some(node) = nominated_node(pod) else {
            continue;
        };
        let terminating = by_key
            .values()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_some()
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            })
            .count();
        if terminating > 0 {
            return Some(PreemptResult::Preempting(format!(
                "preemption: nominated to {node}, waiting for {terminating} evicted pod(s) there to terminate"
            )));
        }
    }
    None
}

/// One round's proposal, never touching `spared`.
pub fn propose(
    snapshot: &Snapshot,
    members: &[PendingPod],
    core: &SchedulerConfig,
    preemption: &Preemption,
    now: Timestamp,
    spared: &BTreeSet<String>,
) -> Result<PreemptionPlan, PreemptResult> {
    propose_preemption_sparing(snapshot, members, core, &preemption.policy, now, spared).map_err(
        |why| {
            PreemptResult::NoPlan(if spared.is_empty() {
                format!("preemption: {why}")
            } else {
                format!(
                    "preemption: {why} (PodDisruptionBudgets refused evicting {})",
                    spared.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
        },
    )
}

/// After [`MAX_ROUNDS`] rounds each refused by a budget.
pub fn every_plan_protected(spared: &BTreeSet<String>) -> PreemptResult {
    PreemptResult::NoPlan(format!(
        "preemption: every plan needed a pod that PodDisruptionBudgets protect ({})",
        spared.iter().cloned().collect::<Vec<_>>().join(", ")
    ))
}

/// The preemptor's note once its plan is under way.
pub fn preempting(plan: &PreemptionPlan) -> PreemptResult {
    let nodes: BTreeSet<&str> = plan.members.iter().map(|(n, _)| n.as_str()).collect();
    PreemptResult::Preempting(format!(
        "preempting {} ({:.2} GPU-hours lost) to make room on {}: {}",
        plan.victims.join(", "),
        plan.gpu_hours_lost,
        nodes.into_iter().collect::<Vec<_>>().join(", "),
        plan.explanation
    ))
}

/// The `Preempted` event's note on a victim.
pub fn victim_note(victim: &Pod, preemptors: &[String], plan: &PreemptionPlan) -> String {
    let node = victim
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    format!(
        "Preempted by {} on node {node} ({})",
        preemptors.join(", "),
        plan.explanation
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cycle::tests::fixtures::pod;

    fn members(p: k8s_openapi::api::core::v1::Pod) -> Vec<(Arc<Pod>, PendingPod)> {
        let pending = PendingPod::from_k8s(&p).expect("readable");
        vec![(Arc::new(p), pending)]
    }

    #[test]
    fn off_never_and_terminating_victims_stop_before_any_proposal() {
        let on = Preemption::default();
        let off = Preemption {
            enabled: false,
            ..on
        };
        let none = HashMap::new();
        assert_eq!(
            precheck(&members(pod("a", 8, None, 9)), &none, &off),
            Some(PreemptResult::Off)
        );
        assert_eq!(precheck(&members(pod("a", 8, None, 9)), &none, &on), None);

        let mut never = pod("a", 8, None, 9);
        never.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        assert!(
            matches!(precheck(&members(never), &none, &on), Some(PreemptResult::NoPlan(m)) if m.contains("preemptionPolicy is Never"))
        );

        let mut nominated = pod("a", 8, None, 9);
        nominated.status.get_or_insert_default().nominated_node_name = Some("n1".into());
        let mut victim = pod("v", 8, Some("n1"), 0);
        victim.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        let by_key = HashMap::from([("ml/v".to_string(), Arc::new(victim))]);
        assert!(matches!(
            precheck(&members(nominated), &by_key, &on),
            Some(PreemptResult::Preempting(m)) if m.contains("waiting for 1 evicted pod(s)")
        ));
    }
}
