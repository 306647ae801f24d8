//! Preemption's steps (`steps/preempt.rs`) on literal worlds: one write at
//! a time, and what each answer changes.

use super::fixtures::{World, pod};
use super::stepper::{Stepper, member_of};
use crate::config::Settings;
use crate::cycle::preempt::PreemptResult;
use crate::cycle::steps::{PreemptStep, Preempting};
use crate::cycle::{EvictionResult, WriteError, WriteErrorKind, WriteOp};
use gputopo_scheduler_core::config::SchedulerConfig;
use std::time::Duration;

/// One node held by `low` (priority 0); `urgent` (priority 100) pending.
fn one_busy_node() -> World {
    let mut w = World::dgx(1, 1);
    w.add(pod("low", 8, Some("n1"), 0))
        .add(pod("urgent", 8, None, 100));
    w
}

fn refused(victim: &str) -> WriteError {
    WriteError {
        op: WriteOp::Evict { dry_run: true },
        kind: WriteErrorKind::TooManyRequests,
        target: victim.into(),
        message: "budget".into(),
    }
}

/// A step's kind, victim or node, for comparing sequences.
fn label(step: &PreemptStep) -> String {
    match step {
        PreemptStep::Evict { victim, dry_run } => format!("evict {victim} dry_run={dry_run}"),
        PreemptStep::Event { pod, event } => format!(
            "event {} {}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            event.reason
        ),
        PreemptStep::Nominate { pod, node } => format!(
            "nominate {} {node}",
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
        PreemptStep::Done(r) => format!("done {r:?}"),
    }
}

#[test]
fn a_plan_is_dry_run_then_evicted_with_an_event_then_nominated() {
    let mut s = Stepper::new(one_busy_node(), Settings::default());
    let core = SchedulerConfig::default();
    let settings = Settings::default();
    let (steps, evictions) = s.at(Duration::ZERO, |cycle, work| {
        let member = member_of(cycle, work, "ml/urgent");
        let mut run = Preempting::new(work, &[member], &core, &settings.preemption);
        let mut steps = Vec::new();
        loop {
            let step = run.step(&mut cycle.holds, work);
            steps.push(label(&step));
            match step {
                PreemptStep::Evict { .. } => run.evicted(work, Ok(())),
                PreemptStep::Nominate { .. } => run.nominated(Ok(())),
                PreemptStep::Event { .. } => {}
                PreemptStep::Done(_) => break,
            }
        }
        (steps, work.report.evictions.clone())
    });
    assert_eq!(
        steps[..4],
        [
            "evict ml/low dry_run=true",
            "evict ml/low dry_run=false",
            "event low Preempted",
            "nominate urgent n1",
        ]
    );
    assert!(
        steps[4].starts_with(
            "done Preempting(\"preempting ml/low (0.00 GPU-hours lost) to make room on n1"
        ),
        "{}",
        steps[4]
    );
    assert_eq!(steps.len(), 5);
    assert_eq!(evictions, [EvictionResult::Evicted]);
    assert_eq!(s.cycle.nominations(), 1);
}

#[test]
fn a_victim_its_budget_protects_is_spared_and_nothing_is_evicted() {
    let mut s = Stepper::new(one_busy_node(), Settings::default());
    let core = SchedulerConfig::default();
    let settings = Settings::default();
    let (steps, evictions) = s.at(Duration::ZERO, |cycle, work| {
        let member = member_of(cycle, work, "ml/urgent");
        let mut run = Preempting::new(work, &[member], &core, &settings.preemption);
        let mut steps = Vec::new();
        loop {
            let step = run.step(&mut cycle.holds, work);
            steps.push(label(&step));
            match step {
                PreemptStep::Evict { victim, .. } => run.evicted(work, Err(refused(&victim))),
                PreemptStep::Done(_) => break,
                other => panic!("nothing but evictions is tried: {other:?}"),
            }
        }
        (steps, work.report.evictions.clone())
    });
    assert_eq!(steps[0], "evict ml/low dry_run=true");
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert!(
        steps[1].starts_with("done NoPlan(\"preemption: ")
            && steps[1].ends_with("(PodDisruptionBudgets refused evicting ml/low)\")"),
        "{}",
        steps[1]
    );
    assert_eq!(evictions, [EvictionResult::Refused]);
    assert_eq!(s.cycle.nominations(), 0);
}

#[test]
fn preemption_off_ends_before_any_write() {
    let mut s = Stepper::new(one_busy_node(), Settings::default());
    let core = SchedulerConfig::default();
    let mut off = Settings::default().preemption;
    off.enabled = false;
    let step = s.at(Duration::ZERO, |cycle, work| {
        let member = member_of(cycle, work, "ml/urgent");
        Preempting::new(work, &[member], &core, &off).step(&mut cycle.holds, work)
    });
    assert_eq!(step, PreemptStep::Done(PreemptResult::Off));
}
