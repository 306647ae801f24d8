//! The `GpuTopologyTrusted` node condition: `False` with the reason on a
//! node whose topology the scheduler does not believe, written once;
//! nothing on a node never doubted; `True` to clear a `False`; a few per
//! check however many nodes are doubted.

use super::Harness;
use super::fake::Write;
use super::fixtures::World;
use crate::cycle::node_trust::{CONDITIONS_PER_CHECK, TOPOLOGY_TRUSTED};
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::sync::Arc;
use std::time::Duration;

fn conditions(writes: &[Write]) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = writes
        .iter()
        .filter_map(|w| match w {
            Write::NodeCondition(c) => {
                assert_eq!(c.condition.type_, TOPOLOGY_TRUSTED);
                Some((
                    c.node.clone(),
                    c.condition.status.clone(),
                    c.condition.message.clone().unwrap_or_default(),
                ))
            }
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// The one condition a cycle wrote, with the node it went to and its status
/// checked; its message returned.
fn only_condition(writes: &[Write], node: &str, status: &str) -> String {
    let written = conditions(writes);
    assert_eq!(written.len(), 1, "{written:?}");
    let (n, s, message) = written.into_iter().next().expect("one condition");
    assert_eq!((n.as_str(), s.as_str()), (node, status));
    message
}

/// `node`'s device plugin lists 12 GPUs: neither at most 8 nor a
/// multiple of 8, so its 8-GPU `GpuTopology` is not believed.
fn contradicted(node: &mut Arc<Node>) {
    Arc::make_mut(node)
        .status
        .as_mut()
        .and_then(|s| s.allocatable.as_mut())
        .expect("allocatable")
        .insert("nvidia.com/gpu".into(), Quantity("12".into()));
}

#[test]
fn a_node_whose_gpu_count_its_allocatable_contradicts_is_told_it_is_not_believed() {
    let mut w = World::dgx(2, 2);
    contradicted(&mut w.nodes[1]);
    let mut h = Harness::new(w, Harness::no_preemption());
    let (_, writes) = h.cycle();
    // n1, believed and never doubted, is left alone.
    let message = only_condition(&writes, "n2", "False");
    assert!(
        message.contains("lists 8 GPUs but the node's allocatable nvidia.com/gpu is 12"),
        "{message}"
    );
    // Not again before the next check is due.
    h.advance(Duration::from_secs(2));
    let (_, writes) = h.cycle();
    assert!(conditions(&writes).is_empty());
}

#[test]
fn a_node_believed_again_has_its_false_cleared_by_true() {
    let mut w = World::dgx(2, 2);
    // n2 shows the False an earlier check wrote; its allocatable now agrees.
    Arc::make_mut(&mut w.nodes[1])
        .status
        .as_mut()
        .expect("status")
        .conditions = Some(vec![NodeCondition {
        type_: TOPOLOGY_TRUSTED.into(),
        status: "False".into(),
        reason: Some("Implausible".into()),
        message: Some("an old doubt".into()),
        ..NodeCondition::default()
    }]);
    let mut h = Harness::new(w, Harness::no_preemption());
    let (_, writes) = h.cycle();
    only_condition(&writes, "n2", "True");
}

#[test]
fn a_fleet_of_doubted_nodes_is_told_a_few_per_check_and_pods_are_placed_meanwhile() {
    let count = CONDITIONS_PER_CHECK + 3;
    let mut w = World::dgx(count, 8);
    for n in &mut w.nodes {
        contradicted(n);
        // Unchanged between checks: what was written stays written.
        Arc::make_mut(n).metadata.resource_version = Some("1".into());
    }
    w.add(super::fixtures::pod("p", 1, None, 0));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert_eq!(conditions(&writes).len(), CONDITIONS_PER_CHECK);
    assert_eq!(report.outcomes.len(), 1, "{:?}", report.outcomes);
    assert!(
        matches!(
            report.outcomes[0].outcome,
            crate::cycle::Outcome::Scheduled(_)
        ),
        "{:?}",
        report.outcomes[0]
    );
    // The rest at the next check, not before.
    h.advance(Duration::from_secs(2));
    let (_, writes) = h.cycle();
    assert!(conditions(&writes).is_empty());
    h.advance(crate::cycle::accounting::CHECK_EVERY);
    let (_, writes) = h.cycle();
    let rest: Vec<_> = conditions(&writes).into_iter().map(|c| c.0).collect();
    assert_eq!(rest.len(), 3, "{rest:?}");
}
