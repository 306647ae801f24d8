//! The bind pipeline (`drive/binds.rs`): decisions go on while bindings are
//! outstanding, never more than the limit, and a binding that fails frees
//! what its assumption held.

use super::fixtures::{World, pod};
use super::{Harness, binds};
use crate::cycle::{Cycle, Outcome, WriteErrorKind, WriteOp};
use std::time::Duration;

/// `count` DGX A100 nodes (a leaf each) and `pods` pending 2-GPU pods `p0..`.
fn two_gpu_pods(count: usize, pods: usize) -> World {
    let mut w = World::dgx(count, count);
    for i in 0..pods {
        w.add(pod(&format!("p{i}"), 2, None, 0));
    }
    w
}

/// A harness whose bindings stay pending for `delay` polls, with at most
/// `limit` outstanding.
fn slow(world: World, limit: usize, delay: u32) -> Harness {
    let mut h = Harness::new(world, Harness::no_preemption());
    h.cycle = Cycle::new(Harness::no_preemption()).with_binds_in_flight(limit);
    h.writes.delay_binds(delay);
    h
}

#[test]
fn decisions_go_on_while_bindings_are_outstanding_up_to_the_limit() {
    let mut h = slow(two_gpu_pods(4, 12), 3, 8);
    let (report, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 12, "{writes:?}");
    assert!(
        report
            .outcomes
            .iter()
            .all(|o| matches!(o.outcome, Outcome::Scheduled(_))),
        "{:?}",
        report.outcomes
    );
    assert_eq!(
        h.writes.most_binds_outstanding(),
        3,
        "the next pods are decided while three bindings are outstanding, never more"
    );
    // 12 pods of 2 GPUs on 32 GPUs: decided against each other's
    // assumptions, so no GPU is promised twice (asserted by held_gpus).
    assert_eq!(h.held_gpus().len(), 24);
    assert_eq!(h.cycle.assumed(), 12);
}

#[test]
fn with_one_binding_in_flight_each_pod_waits_for_the_last() {
    let mut h = slow(two_gpu_pods(1, 3), 1, 4);
    let (_, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 3);
    assert_eq!(h.writes.most_binds_outstanding(), 1);
    assert_eq!(h.held_gpus().len(), 6);
}

#[test]
fn a_binding_that_fails_in_flight_frees_its_gpus_and_its_pod_backs_off() {
    // One 8-GPU node; `a` is decided first and its binding fails after
    // `b` was decided against its assumption.
    let mut w = World::dgx(1, 1);
    w.add(pod("a", 8, None, 0));
    w.add(pod("b", 8, None, 0));
    let mut h = slow(w, 4, 6);
    h.writes
        .fail_once(WriteOp::Bind, "ml/a", WriteErrorKind::Conflict);
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty(), "{writes:?}");
    assert!(
        matches!(report.outcome("ml/a"), Some(Outcome::BindFailed(e)) if e.kind == WriteErrorKind::Conflict),
        "{:?}",
        report.outcomes
    );
    assert!(
        matches!(report.outcome("ml/b"), Some(Outcome::Unschedulable { .. })),
        "b was decided while a's GPUs were promised: {:?}",
        report.outcomes
    );
    assert_eq!(h.cycle.assumed(), 0, "the failed assumption is gone");
    assert_eq!(h.cycle.held_state().assumed_pods, 0);
    // Its GPUs are free again: once `a` has backed off, one of the two
    // pods gets the node, and only one.
    h.advance(Duration::from_secs(2));
    h.cycle();
    h.advance(Duration::from_secs(2));
    h.cycle();
    assert_eq!(h.bound().len(), 1, "{:?}", h.bound());
    assert_eq!(h.held_gpus().len(), 8);
}

#[test]
fn an_api_outage_with_bindings_in_flight_loses_no_pod() {
    let mut h = slow(two_gpu_pods(2, 6), 4, 3);
    h.writes.api_down();
    let (report, _) = h.cycle();
    assert_eq!(report.outcomes.len(), 6);
    assert!(report.outcomes.iter().all(|o| matches!(&o.outcome,
        Outcome::BindFailed(e) if e.kind == WriteErrorKind::Unavailable)));
    assert_eq!(h.cycle.assumed(), 0);
    h.writes.clear_failures();
    for _ in 0..6 {
        h.advance(Duration::from_secs(2));
        h.cycle();
    }
    assert_eq!(h.bound().len(), 6);
    assert_eq!(h.held_gpus().len(), 12);
}
