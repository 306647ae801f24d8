//! The `GpuTopologyTrusted` node condition: `False` with the reason on a
//! node whose topology the scheduler does not believe, `True` elsewhere,
//! each written once.

use super::Harness;
use super::fake::Write;
use super::fixtures::World;
use crate::cycle::node_trust::TOPOLOGY_TRUSTED;
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

#[test]
fn a_node_whose_gpu_count_its_allocatable_contradicts_is_told_it_is_not_believed() {
    let mut w = World::dgx(2, 2);
    // n2's device plugin lists 12: neither at most 8 nor a multiple of 8.
    let n2 = Arc::make_mut(&mut w.nodes[1]);
    n2.status
        .as_mut()
        .and_then(|s| s.allocatable.as_mut())
        .expect("allocatable")
        .insert("nvidia.com/gpu".into(), Quantity("12".into()));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (_, writes) = h.cycle();
    let written = conditions(&writes);
    assert_eq!(written.len(), 2, "{written:?}");
    assert_eq!(
        (written[0].0.as_str(), written[0].1.as_str()),
        ("n1", "True")
    );
    assert_eq!(
        (written[1].0.as_str(), written[1].1.as_str()),
        ("n2", "False")
    );
    assert!(
        written[1]
            .2
            .contains("lists 8 GPUs but the node's allocatable nvidia.com/gpu is 12"),
        "{}",
        written[1].2
    );
    // Not again before the next check is due.
    h.advance(Duration::from_secs(2));
    let (_, writes) = h.cycle();
    assert!(conditions(&writes).is_empty());
}
