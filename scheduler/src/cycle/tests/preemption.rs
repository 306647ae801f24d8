//! Preemption: dry runs first, budgets spare their pods, nominations hold
//! the freed GPUs, failures never leave half a plan.

use super::fake::Write;
use super::fixtures::{World, pod};
use super::{Harness, binds, message};
use crate::config::Settings;
use crate::cycle::{EvictionResult, Outcome, WriteErrorKind, WriteOp};
use std::time::Duration;

fn evictions(writes: &[Write], dry_run: bool) -> Vec<String> {
    writes
        .iter()
        .filter_map(|w| match w {
            Write::Evict {
                pod,
                dry_run: d,
                ok: true,
            } if *d == dry_run => Some(pod.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_high_priority_pod_evicts_dry_run_first_then_takes_the_freed_gpus() {
    let mut w = World::dgx(1, 1);
    w.add(pod("low", 8, Some("n1"), 0));
    w.add(pod("urgent", 8, None, 100));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert_eq!(evictions(&writes, true), ["ml/low"]);
    assert_eq!(evictions(&writes, false), ["ml/low"]);
    let dry = writes
        .iter()
        .position(|w| matches!(w, Write::Evict { dry_run: true, .. }));
    let real = writes
        .iter()
        .position(|w| matches!(w, Write::Evict { dry_run: false, .. }));
    assert!(dry < real, "dry run first: {writes:?}");
    assert!(writes.iter().any(|w| matches!(w,
        Write::Event { pod, event } if pod == "ml/low" && event.reason == "Preempted")));
    assert!(writes.contains(&Write::Nominate {
        pod: "ml/urgent".into(),
        node: "n1".into()
    }));
    let Some(Outcome::Preempting { message }) = report.outcome("ml/urgent") else {
        panic!("{:?}", report.outcomes);
    };
    assert!(message.contains("preempting ml/low"), "{message}");
    assert_eq!(report.evictions, [EvictionResult::Evicted]);
    assert_eq!(h.cycle.nominations(), 1);
    // The victim is gone: the preemptor binds where it was nominated.
    h.advance(Duration::from_secs(2));
    let (_, writes) = h.cycle();
    assert_eq!(
        binds(&writes),
        [("ml/urgent".to_string(), "n1".to_string())]
    );
    h.advance(Duration::from_secs(1));
    h.cycle();
    assert_eq!(h.cycle.nominations(), 0, "a bound preemptor holds nothing");
}

#[test]
fn a_nomination_keeps_a_lower_priority_pod_off_the_freed_gpus() {
    let mut w = World::dgx(1, 1);
    w.add(pod("low", 8, Some("n1"), 0));
    w.add(pod("urgent", 8, None, 100));
    let mut h = Harness::new(w, Settings::default());
    h.cycle();
    // The victim goes, and before the preemptor's retry a small pod that
    // cannot preempt anything is tried.
    h.world.add(pod("small", 1, None, 0));
    h.advance(Duration::from_millis(10));
    let (report, _) = h.cycle();
    assert!(
        matches!(
            report.outcome("ml/small"),
            Some(Outcome::Unschedulable { .. })
        ),
        "{:?}",
        report.outcomes
    );
}

#[test]
fn a_budget_refusal_spares_its_pod_and_the_plan_goes_around_it() {
    let mut w = World::dgx(2, 2);
    w.add(pod("low-a", 8, Some("n1"), 0));
    w.add(pod("low-b", 8, Some("n2"), 0));
    w.add(pod("urgent", 8, None, 100));
    let mut h = Harness::new(w, Settings::default());
    h.writes.fail(
        WriteOp::Evict { dry_run: true },
        "ml/low-a",
        WriteErrorKind::TooManyRequests,
    );
    let (report, writes) = h.cycle();
    assert_eq!(evictions(&writes, false), ["ml/low-b"], "{writes:?}");
    assert!(matches!(
        report.outcome("ml/urgent"),
        Some(Outcome::Preempting { .. })
    ));
    assert!(h.bound().contains_key("low-a"));
}

#[test]
fn when_every_plan_needs_a_protected_pod_nothing_is_evicted() {
    let mut w = World::dgx(2, 2);
    w.add(pod("low-a", 8, Some("n1"), 0));
    w.add(pod("low-b", 8, Some("n2"), 0));
    w.add(pod("urgent", 8, None, 100));
    let mut h = Harness::new(w, Settings::default());
    for victim in ["ml/low-a", "ml/low-b"] {
        h.writes.fail(
            WriteOp::Evict { dry_run: true },
            victim,
            WriteErrorKind::TooManyRequests,
        );
    }
    let (report, writes) = h.cycle();
    assert!(evictions(&writes, false).is_empty(), "{writes:?}");
    let m = message(&report, "ml/urgent");
    assert!(
        m.contains("PodDisruptionBudgets refused evicting ml/low-a, ml/low-b"),
        "{m}"
    );
    assert_eq!(
        report.outcome("ml/urgent").map(Outcome::metric_label),
        Some("unschedulable")
    );
    assert_eq!(
        report.evictions,
        [EvictionResult::Refused, EvictionResult::Refused]
    );
    assert_eq!(h.cycle.nominations(), 0);
}

#[test]
fn an_eviction_that_fails_for_real_is_reported_and_nominates_nothing() {
    let mut w = World::dgx(1, 1);
    w.add(pod("low", 8, Some("n1"), 0));
    w.add(pod("urgent", 8, None, 100));
    let mut h = Harness::new(w, Settings::default());
    h.writes.fail(
        WriteOp::Evict { dry_run: false },
        "ml/low",
        WriteErrorKind::Timeout,
    );
    let (report, writes) = h.cycle();
    assert!(matches!(
        report.outcome("ml/urgent"),
        Some(Outcome::PreemptionFailed { .. })
    ));
    assert_eq!(report.evictions, [EvictionResult::Error]);
    assert!(!writes.iter().any(|w| matches!(w, Write::Nominate { .. })));
    assert_eq!(h.cycle.nominations(), 0);
}

#[test]
fn preemption_off_evicts_nothing() {
    let mut w = World::dgx(1, 1);
    w.add(pod("low", 8, Some("n1"), 0));
    w.add(pod("urgent", 8, None, 100));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert!(!writes.iter().any(|w| matches!(w, Write::Evict { .. })));
    assert_eq!(
        message(&report, "ml/urgent"),
        "0/1 nodes are available: 1 too few free GPUs."
    );
}

/// A new leader finds a preemptor nominated by the old one, its victim
/// terminating. While the preemptor backs off, the victim goes and a small
/// pod arrives: the freed GPUs are held for the preemptor, read back from
/// its `nominatedNodeName`.
#[test]
fn a_nomination_from_an_earlier_leader_is_read_back() {
    let mut w = World::dgx(1, 1);
    let mut victim = pod("low", 8, Some("n1"), 0);
    victim.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    w.add(victim);
    let mut urgent = pod("urgent", 8, None, 100);
    urgent.status.get_or_insert_default().nominated_node_name = Some("n1".into());
    w.add(urgent);
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert!(
        matches!(report.outcome("ml/urgent"), Some(Outcome::Preempting { message }) if message.contains("waiting for 1 evicted pod")),
        "{:?}",
        report.outcomes
    );
    assert!(
        !writes.iter().any(|w| matches!(w, Write::Evict { .. })),
        "evicts nothing more"
    );
    h.world.remove("low");
    h.world.add(pod("small", 1, None, 0));
    h.advance(Duration::from_millis(100));
    let (report, writes) = h.cycle();
    assert!(report.outcome("ml/urgent").is_none(), "still backing off");
    assert!(
        binds(&writes).is_empty(),
        "the small pod took the freed GPUs: {writes:?}"
    );
    h.advance(Duration::from_secs(2));
    let (_, writes) = h.cycle();
    assert!(
        binds(&writes).contains(&("ml/urgent".to_string(), "n1".to_string())),
        "{writes:?}"
    );
}
