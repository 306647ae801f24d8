//! One test per filter predicate, the aggregated message's exact format, and
//! the compiled selector checked against the reference string matcher.
//!
//! One test binary: Kubernetes node predicates (`node_rules`), node selectors
//! and affinity (`affinity`), the GPU predicates (`gpu_rules`) and the
//! aggregated message (`message`). The verdict helpers they share live here.

#[path = "../common/mod.rs"]
mod common;

mod affinity;
mod gpu_rules;
mod host_ports;
mod message;
mod node_features;
mod node_rules;
mod node_scores;
mod preferred_affinity;

use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::Snapshot;

/// The reason each node was rejected, or `None` for the node the pod went to.
fn verdicts(snapshot: &Snapshot, pod: &PendingPod) -> Vec<(String, Option<FilterReason>)> {
    verdicts_with(snapshot, pod, &SchedulerConfig::default())
}

fn verdicts_with(
    snapshot: &Snapshot,
    pod: &PendingPod,
    config: &SchedulerConfig,
) -> Vec<(String, Option<FilterReason>)> {
    let explanation = gputopo_scheduler_core::explain::explain(snapshot, pod, config);
    let mut rows: Vec<(String, Option<FilterReason>)> = explanation
        .rows
        .into_iter()
        .map(|r| (r.node, r.filter_reason))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

fn only_reason(snapshot: &Snapshot, pod: &PendingPod) -> FilterReason {
    let v = verdicts(snapshot, pod);
    assert_eq!(v.len(), 1);
    v[0].1.clone().expect("the node should be rejected")
}

fn fits(snapshot: &Snapshot, pod: &PendingPod) -> bool {
    matches!(
        schedule(snapshot, pod, &SchedulerConfig::default()),
        Decision::Placed(_)
    )
}
