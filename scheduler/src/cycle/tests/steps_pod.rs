//! The pod steps (`steps/pod.rs`, `steps/due.rs`) on literal worlds.

use super::Harness;
use super::fixtures::{World, annotate, pod};
use super::stepper::{Stepper, due, member_of};
use crate::cycle::steps::{DueStep, Finish, PodStep};
use crate::cycle::writes::EventSpec;
use crate::cycle::{Outcome, WriteError, WriteErrorKind, WriteOp};
use gputopo_scheduler_core::config::SchedulerConfig;
use std::time::Duration;

#[test]
fn a_pod_that_fits_is_bound_where_the_gpus_are_free() {
    let mut w = World::busy_pair();
    w.add(pod("a", 4, None, 0));
    let mut s = Stepper::new(w, Harness::no_preemption());
    let core = SchedulerConfig::default();
    let step = s.at(Duration::ZERO, |cycle, work| {
        let member = member_of(cycle, work, "ml/a");
        cycle.pod_step(work, &member, &core)
    });
    let PodStep::Bind(p) = step else {
        panic!("{step:?}");
    };
    assert_eq!((p.pod.as_str(), p.node.as_str()), ("ml/a", "n2"));
    assert_eq!(p.gpus.len(), 4);
}

#[test]
fn a_pod_that_fits_nowhere_goes_to_preemption_as_the_filter_saw_it() {
    let mut w = World::busy_pair();
    w.add(pod("x", 8, Some("n2"), 0)).add(pod("a", 8, None, 5));
    let mut s = Stepper::new(w, Harness::no_preemption());
    let core = SchedulerConfig::default();
    let step = s.at(Duration::ZERO, |cycle, work| {
        let member = member_of(cycle, work, "ml/a");
        cycle.pod_step(work, &member, &core)
    });
    let PodStep::Preempt {
        judged,
        message,
        claims,
    } = step
    else {
        panic!("{step:?}");
    };
    assert!(!claims, "a device-plugin pod: any plan counts");
    assert_eq!((judged.name.as_str(), judged.priority), ("a", 5));
    assert_eq!(message, "0/2 nodes are available: 2 too few free GPUs.");
}

#[test]
fn an_unreadable_pod_is_invalid_before_any_decision() {
    let mut w = World::dgx(1, 1);
    w.add(annotate(
        pod("a", 1, None, 0),
        "gputopo.dev/gang-size",
        "many",
    ));
    let mut s = Stepper::new(w, Harness::no_preemption());
    let step = s.at(Duration::ZERO, |cycle, work| due(cycle, work, "ml/a"));
    let DueStep::Finish(p, Outcome::Invalid { message }) = step else {
        panic!("not invalid");
    };
    assert_eq!(p.metadata.name.as_deref(), Some("a"));
    assert!(message.starts_with("invalid "), "{message}");
}

#[test]
fn an_outcome_ends_with_its_event_and_for_a_pod_left_pending_its_condition() {
    let mut w = World::dgx(1, 1);
    w.add(pod("a", 1, None, 0));
    let mut s = Stepper::new(w, Harness::no_preemption());
    let (waiting, gone) = s.at(Duration::ZERO, |cycle, work| {
        let (p, pending) = member_of(cycle, work, "ml/a");
        let waiting = cycle.finish_step(
            work,
            &p,
            Some(&pending),
            Outcome::Unschedulable {
                message: "no room".into(),
            },
        );
        let gone = WriteError {
            op: WriteOp::Bind,
            kind: WriteErrorKind::NotFound,
            target: "ml/a".into(),
            message: "gone".into(),
        };
        let gone = cycle.finish_step(work, &p, Some(&pending), Outcome::BindFailed(gone));
        (waiting, gone)
    });
    assert_eq!(
        waiting,
        Finish {
            event: Some(EventSpec::warning(
                "FailedScheduling",
                "Scheduling",
                "no room".into()
            )),
            condition: Some("no room".into()),
        }
    );
    assert_eq!(
        gone,
        Finish {
            event: None,
            condition: None
        }
    );
    assert!(!s.cycle.is_queued("ml/a"), "a pod gone leaves the queue");
}
