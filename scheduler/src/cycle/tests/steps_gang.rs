//! The gang steps (`steps/gang.rs`) on literal worlds: what the cycle
//! decides for one gang, before any write.

use super::Harness;
use super::fixtures::{World, annotate, member, pod};
use super::stepper::{Stepper, gang_of};
use crate::config::Settings;
use crate::cycle::Outcome;
use crate::cycle::domains::domain_selectors;
use crate::cycle::preempt::PreemptResult;
use crate::cycle::steps::GangStep;
use gputopo_scheduler_core::config::SchedulerConfig;
use std::collections::BTreeMap;
use std::time::Duration;

/// A gang member already bound to `node` (all its GPUs).
fn bound_member(gang: &str, size: u32, i: u32, node: &str) -> k8s_openapi::api::core::v1::Pod {
    let p = pod(&format!("{gang}-{i}"), 8, Some(node), 0);
    let p = annotate(p, "gputopo.dev/gang", gang);
    annotate(p, "gputopo.dev/gang-size", &size.to_string())
}

fn settings(partial_bind_timeout: u64) -> Settings {
    let mut s = Harness::no_preemption();
    s.gangs.schedule_timeout = Duration::from_secs(600);
    s.gangs.partial_bind_timeout = Duration::from_secs(partial_bind_timeout);
    s
}

/// `(pod, node, GPU count)` of each placement, in order.
fn placed(step: &GangStep) -> Vec<(String, String, usize)> {
    match step {
        GangStep::Bind(placements) => placements
            .iter()
            .map(|p| (p.pod.clone(), p.node.clone(), p.gpus.len()))
            .collect(),
        other => panic!("not a bind: {other:?}"),
    }
}

#[test]
fn a_gang_that_fits_is_bound_whole_with_its_members_in_order() {
    let mut w = World::dgx(2, 1);
    w.add(member("g", 2, 1, 8, 0)).add(member("g", 2, 0, 8, 0));
    let mut s = Stepper::new(w, settings(600));
    let core = SchedulerConfig::default();
    let step = s.at(Duration::ZERO, |cycle, work| {
        let unit = gang_of(cycle, work, "ml/g-1");
        let attempt = cycle.gang_attempt(work, unit);
        cycle.gang_step(work, &attempt, &core)
    });
    assert_eq!(
        placed(&step),
        [
            ("ml/g-0".to_string(), "n1".to_string(), 8),
            ("ml/g-1".to_string(), "n2".to_string(), 8)
        ]
    );
}

#[test]
fn the_rest_of_a_partly_bound_gang_goes_to_its_spine_when_its_leaf_is_full() {
    // n1, n2 on leaf-1 (full: g-0 and a pod of higher priority); n3, n4 on
    // leaf-2; every node on spine-1.
    let mut w = World::dgx(4, 2);
    w.add(bound_member("g", 2, 0, "n1"))
        .add(pod("busy", 8, Some("n2"), 1000))
        .add(member("g", 2, 1, 8, 0));
    let mut s = Stepper::new(w, settings(600));
    let core = SchedulerConfig::default();
    let (selectors, step) = s.at(Duration::ZERO, |cycle, work| {
        let selectors = domain_selectors(&work.snapshot, &["n1".to_string()]);
        let unit = gang_of(cycle, work, "ml/g-1");
        let attempt = cycle.gang_attempt(work, unit);
        (selectors, cycle.gang_step(work, &attempt, &core))
    });
    let selector = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        selectors,
        [
            selector(&[
                ("gputopo.dev/spine", "spine-1"),
                ("gputopo.dev/leaf", "leaf-1")
            ]),
            selector(&[("gputopo.dev/spine", "spine-1")]),
            selector(&[]),
        ]
    );
    assert_eq!(placed(&step), [("ml/g-1".to_string(), "n3".to_string(), 8)]);
}

#[test]
fn a_gang_partly_bound_past_the_timeout_is_undone() {
    // g-0 bound on n1; g-1 and g-2 pending, and only n2 has room for one.
    let mut w = World::dgx(2, 2);
    w.add(bound_member("g", 3, 0, "n1"))
        .add(member("g", 3, 1, 8, 0))
        .add(member("g", 3, 2, 8, 0));
    let mut s = Stepper::new(w, settings(60));
    let core = SchedulerConfig::default();
    let first = s.at(Duration::ZERO, |cycle, work| {
        let unit = gang_of(cycle, work, "ml/g-1");
        let attempt = cycle.gang_attempt(work, unit);
        cycle.gang_step(work, &attempt, &core)
    });
    // Not yet past the timeout: it fits nowhere, so preemption is next.
    assert!(
        matches!(&first, GangStep::Preempt { message }
            if message.starts_with("gang g (2 members) waits, nothing bound: 2 members need 8 free GPUs each")),
        "{first:?}"
    );
    assert_eq!(s.cycle.held_state().partial_gangs, 1);
    let (step, outcome) = s.at(Duration::from_secs(61), |cycle, work| {
        let unit = gang_of(cycle, work, "ml/g-1");
        let attempt = cycle.gang_attempt(work, unit);
        let step = cycle.gang_step(work, &attempt, &core);
        let outcome = cycle.gang_undone(work, &attempt, vec![Ok(())]);
        (step, outcome)
    });
    assert_eq!(
        step,
        GangStep::UndoPartial {
            bound: vec!["ml/g-0".into()]
        }
    );
    assert_eq!(
        outcome,
        Outcome::GangTimedOut {
            message: "gang ml/g stayed partly bound (1 bound, 2 pending) for 61s, longer than gangs.partialBindTimeout (60s): evicted ml/g-0 so that the gang is placed again as one".into()
        }
    );
    let held = s.cycle.held_state();
    assert_eq!((held.waiting_gangs, held.partial_gangs), (0, 0));
}

#[test]
fn a_gang_that_fits_nowhere_takes_a_reservation() {
    // n1 holds a low-priority pod; the gang needs both nodes whole.
    let mut w = World::busy_pair();
    w.add(member("big", 2, 0, 8, 100))
        .add(member("big", 2, 1, 8, 100));
    let mut s = Stepper::new(w, Harness::reserving());
    let core = SchedulerConfig::default();
    let outcome = s.at(Duration::ZERO, |cycle, work| {
        let unit = gang_of(cycle, work, "ml/big-0");
        let attempt = cycle.gang_attempt(work, unit);
        let GangStep::Preempt { message } = cycle.gang_step(work, &attempt, &core) else {
            panic!("a gang that fits nowhere goes to preemption first");
        };
        cycle.gang_unplaced(work, &attempt, PreemptResult::Off.outcome(message), &core)
    });
    let Outcome::Unschedulable { message } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        message.ends_with("; reserved 16 GPUs (n1 GPUs 0,1,2,3,4,5,6,7, n2 GPUs 0,1,2,3,4,5,6,7) for it: no other pod may take them as they free up"),
        "{message}"
    );
    assert_eq!(s.cycle.reservations(), 1);
}

#[test]
fn an_incomplete_gang_waits_then_times_out() {
    let mut w = World::dgx(2, 2);
    w.add(member("g", 3, 0, 8, 0)).add(member("g", 3, 1, 8, 0));
    let core = SchedulerConfig::default();
    let waiting = "gang ml/g: 2 of 3 members present (2 pending, 0 bound); waiting for the rest before placing any";
    let step_at = |secs: u64| {
        let mut s = Stepper::new(w.clone(), settings(600));
        s.at(Duration::from_secs(secs), |cycle, work| {
            let unit = gang_of(cycle, work, "ml/g-0");
            let attempt = cycle.gang_attempt(work, unit);
            cycle.gang_step(work, &attempt, &core)
        })
    };
    assert_eq!(
        step_at(10),
        GangStep::Finish(Outcome::WaitingForGang {
            message: waiting.into()
        })
    );
    assert_eq!(
        step_at(601),
        GangStep::Finish(Outcome::GangTimedOut {
            message: format!(
                "gang ml/g has waited 601s, longer than its schedule timeout (600s): {waiting}"
            )
        })
    );
}
