//! The claim writes' steps (`steps/binds.rs`'s [`ClaimBinds`]) on a
//! literal DRA world: the order of the writes, and what a failure undoes.

use super::Harness;
use super::claims::{claim, claim_pod, dra_world, gpus};
use super::stepper::{Stepper, member_of};
use crate::cycle::steps::{ClaimBindStep, ClaimBinds, MemberBinding, PodStep};
use crate::cycle::{Outcome, WriteError, WriteErrorKind, WriteOp};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::BindingState;
use std::sync::Arc;
use std::time::Duration;

fn failed(op: WriteOp) -> WriteError {
    WriteError {
        op,
        kind: WriteErrorKind::Conflict,
        target: "ml/a".into(),
        message: "changed".into(),
    }
}

/// A step's kind and what it names, for comparing sequences.
fn label(step: &ClaimBindStep) -> String {
    match step {
        ClaimBindStep::Reserve(w) => {
            format!("reserve {}/{} for {}", w.namespace, w.name, w.pod_name)
        }
        ClaimBindStep::Release { write, allocated } => {
            format!("release {} allocated={allocated}", write.name)
        }
        ClaimBindStep::Bind { member, placement } => {
            format!("bind {member} to {}", placement.node)
        }
        ClaimBindStep::Wait { member, .. } => format!("wait {member}"),
        ClaimBindStep::Finish { member, outcome } => {
            format!("finish {member} {}", outcome.metric_label())
        }
        ClaimBindStep::Done => "done".into(),
    }
}

/// Runs the claim writes of pod `a` (two GPUs through the claim `c1`),
/// answering binds with `bind` and claim writes with `reserve`.
fn run(
    reserve: Option<WriteError>,
    bind: Option<WriteError>,
) -> (Vec<String>, Vec<Outcome>, usize) {
    run_with(reserve, bind, BindingState::Ready)
}

/// [`run`] with the pod's claims standing at `state` with their binding conditions.
fn run_with(
    reserve: Option<WriteError>,
    bind: Option<WriteError>,
    state: BindingState,
) -> (Vec<String>, Vec<Outcome>, usize) {
    let mut w = dra_world(1);
    w.dra.claims.push(Arc::new(claim("c1", gpus(2))));
    w.add(claim_pod("a", "c1"));
    let mut s = Stepper::new(w, Harness::no_preemption());
    let core = SchedulerConfig::default();
    let (steps, outcomes) = s.at(Duration::ZERO, |cycle, work| {
        let member = member_of(cycle, work, "ml/a");
        let PodStep::BindClaims(placed) = cycle.pod_step(work, &member, &core) else {
            panic!("the pod fits with its claim");
        };
        assert_eq!(placed.placement.node, "n1");
        let conditional = std::iter::once("ml/c1".to_string())
            .filter(|_| state != BindingState::Ready)
            .collect();
        let states = vec![MemberBinding {
            state: state.clone(),
            conditional,
        }];
        let mut binds = ClaimBinds::new(vec![member], vec![*placed]).with_states(states);
        let mut steps = Vec::new();
        let mut outcomes = Vec::new();
        loop {
            let step = binds.step();
            steps.push(label(&step));
            match step {
                ClaimBindStep::Reserve(write) => {
                    binds.reserved(write, reserve.clone().map_or(Ok(()), Err));
                }
                ClaimBindStep::Release { .. } => binds.released(Ok(())),
                ClaimBindStep::Bind { .. } => {
                    binds.bound(&mut cycle.holds, work, bind.clone().map_or(Ok(()), Err));
                }
                ClaimBindStep::Wait { message, .. } => {
                    binds.waiting(&mut cycle.holds, work, message);
                }
                ClaimBindStep::Finish { outcome, .. } => outcomes.push(outcome),
                ClaimBindStep::Done => break,
            }
        }
        (steps, outcomes)
    });
    (steps, outcomes, s.cycle.assumed())
}

#[test]
fn the_claim_is_written_before_the_binding() {
    let (steps, outcomes, assumed) = run(None, None);
    assert_eq!(
        steps,
        [
            "reserve ml/c1 for a",
            "bind 0 to n1",
            "finish 0 scheduled",
            "done"
        ]
    );
    assert!(matches!(&outcomes[..], [Outcome::Scheduled(p)] if p.gpus.len() == 2));
    assert_eq!(assumed, 1);
}

#[test]
fn a_binding_that_fails_releases_the_claim_it_allocated() {
    let (steps, outcomes, assumed) = run(None, Some(failed(WriteOp::Bind)));
    assert_eq!(
        steps,
        [
            "reserve ml/c1 for a",
            "bind 0 to n1",
            "release c1 allocated=true",
            "finish 0 error",
            "done"
        ]
    );
    assert_eq!(outcomes, [Outcome::BindFailed(failed(WriteOp::Bind))]);
    assert_eq!(assumed, 0, "nothing is assumed for a pod not bound");
}

#[test]
fn a_claim_write_that_fails_binds_nothing() {
    let (steps, outcomes, assumed) = run(Some(failed(WriteOp::ClaimReserve)), None);
    assert_eq!(steps, ["reserve ml/c1 for a", "finish 0 error", "done"]);
    assert_eq!(
        outcomes,
        [Outcome::BindFailed(failed(WriteOp::ClaimReserve))]
    );
    assert_eq!(assumed, 0);
}

#[test]
fn claims_waiting_for_binding_conditions_are_written_and_held_and_the_pod_is_not_bound() {
    let waiting = BindingState::Waiting("waiting for gpu-0 (attached)".into());
    let (steps, outcomes, assumed) = run_with(None, None, waiting);
    assert_eq!(
        steps,
        ["reserve ml/c1 for a", "wait 0", "finish 0 waiting", "done"]
    );
    assert_eq!(
        outcomes,
        [Outcome::WaitingForDevices {
            message: "waiting for gpu-0 (attached)".into()
        }]
    );
    assert_eq!(
        assumed, 0,
        "no binding, so the pod is not assumed on the node"
    );
}

#[test]
fn failed_binding_conditions_deallocate_the_claim_and_do_not_bind() {
    let failed = BindingState::Failed("device gpu-0 reports attach-failed".into());
    let (steps, outcomes, assumed) = run_with(None, None, failed);
    assert_eq!(
        steps,
        [
            "reserve ml/c1 for a",
            "release c1 allocated=true",
            "finish 0 unschedulable",
            "done"
        ]
    );
    assert!(
        matches!(&outcomes[..], [Outcome::Unschedulable { message }] if message.contains("attach-failed")),
        "{outcomes:?}"
    );
    assert_eq!(assumed, 0);
}
