//! Single pods: placed, refused with reasons, invalid, and binds that fail.

use super::fake::Write;
use super::fixtures::{World, annotate, pod};
use super::{Harness, binds, message};
use crate::config::Settings;
use crate::cycle::{Outcome, WriteErrorKind, WriteOp};
use std::time::Duration;

#[test]
fn a_pod_is_bound_with_a_best_gpu_set_and_says_why() {
    let mut w = World::dgx(2, 2);
    w.add(pod("ddp", 4, None, 0));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert_eq!(binds(&writes), [("ml/ddp".to_string(), "n1".to_string())]);
    let Some(Outcome::Scheduled(p)) = report.outcome("ml/ddp") else {
        panic!("not scheduled: {:?}", report.outcomes);
    };
    assert_eq!(p.gpus.len(), 4);
    let label = report.outcomes[0].outcome.metric_label();
    assert!(
        label == "scheduled" && Outcome::METRIC_LABELS.contains(&label),
        "{label}"
    );
    assert_eq!(p.bottleneck.map(|b| b.to_string()).as_deref(), Some("NV12"));
    let event = writes
        .iter()
        .find_map(|w| match w {
            Write::Event { pod, event } if pod == "ml/ddp" => Some(event),
            _ => None,
        })
        .expect("an event");
    assert!(!event.warning && event.reason == "Scheduled", "{event:?}");
    assert!(event.note.contains("bottleneck NV12"), "{}", event.note);
    assert_eq!(report.decisions.len(), 1);
    assert_eq!(report.outcomes[0].workload, "unspecified");
    assert!(report.usage.expect("usage").allocation_ratio > 0.0);
    assert_eq!(
        h.cycle.assumed(),
        1,
        "assumed until the watch shows it bound"
    );
    assert_eq!(
        report.held,
        crate::cycle::HeldState {
            assumed_pods: 1,
            ..Default::default()
        }
    );
    // The world now shows it bound: forgotten, nothing more to do.
    let (report, writes) = h.cycle();
    assert!(
        report.outcomes.is_empty() && writes.is_empty(),
        "{writes:?}"
    );
    assert_eq!(h.cycle.assumed(), 0);
    assert_eq!(report.held, crate::cycle::HeldState::default(), "idle");
    assert_eq!(h.held_gpus().len(), 4);
}

#[test]
fn pods_decided_in_one_cycle_or_the_next_never_share_a_gpu() {
    let mut w = World::dgx(1, 1);
    w.add(pod("a", 4, None, 0)).add(pod("b", 4, None, 0));
    let mut h = Harness::new(w, Settings::default());
    let (_, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 2);
    h.held_gpus();
    // A third pod before the watch would show the binds: the assume cache
    // alone keeps it off their GPUs.
    let mut h2 = Harness::new(World::dgx(1, 1), Settings::default());
    h2.world.add(pod("a", 4, None, 0)).add(pod("b", 4, None, 0));
    let (_, first) = h2.cycle();
    assert_eq!(binds(&first).len(), 2);
    // Undo what the API server did, as if its watch were late.
    h2.world = World::dgx(1, 1);
    h2.world
        .add(pod("a", 4, None, 0))
        .add(pod("b", 4, None, 0))
        .add(pod("c", 1, None, 0));
    // a and b look pending again; they are assumed, so only c is tried.
    let (report, writes) = h2.cycle();
    assert_eq!(report.outcomes.len(), 1, "{:?}", report.outcomes);
    assert!(matches!(
        report.outcome("ml/c"),
        Some(Outcome::Unschedulable { .. })
    ));
    assert!(binds(&writes).is_empty());
}

#[test]
fn an_impossible_pod_gets_counted_reasons_then_waits_for_a_change() {
    let mut w = World::dgx(2, 2);
    w.add(pod("too-big", 9, None, 0));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    let m = message(&report, "ml/too-big");
    assert_eq!(m, "0/2 nodes are available: 2 too few free GPUs.");
    assert!(writes.iter().any(|w| matches!(w,
        Write::Event { event, .. } if event.warning && event.reason == "FailedScheduling" && event.note == m)));
    assert!(writes.contains(&Write::Unschedulable {
        pod: "ml/too-big".into(),
        message: m.clone()
    }));
    assert_eq!(
        report.outcome("ml/too-big").map(Outcome::metric_label),
        Some("unschedulable")
    );
    // Not retried before a change and its backoff ...
    let (report, _) = h.cycle();
    assert!(report.outcomes.is_empty());
    // ... then retried.
    h.advance(Duration::from_secs(2));
    let (report, _) = h.cycle();
    assert_eq!(report.outcomes.len(), 1);
}

#[test]
fn an_invalid_annotation_names_the_key_and_binds_nothing() {
    let mut w = World::dgx(1, 1);
    w.add(annotate(
        pod("typo", 1, None, 0),
        "gputopo.dev/colective",
        "ring",
    ));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    let Some(Outcome::Invalid { message }) = report.outcome("ml/typo") else {
        panic!("{:?}", report.outcomes);
    };
    assert!(message.contains("gputopo.dev/colective"), "{message}");
    assert!(binds(&writes).is_empty());
    assert_eq!(report.outcomes[0].outcome.metric_label(), "invalid");
}

#[test]
fn a_conflicting_bind_backs_off_and_promises_no_gpu() {
    let mut w = World::dgx(1, 1);
    w.add(pod("a", 8, None, 0));
    let mut h = Harness::new(w, Settings::default());
    h.writes
        .fail_once(WriteOp::Bind, "ml/a", WriteErrorKind::Conflict);
    let (report, writes) = h.cycle();
    assert!(
        matches!(report.outcome("ml/a"), Some(Outcome::BindFailed(e)) if e.kind == WriteErrorKind::Conflict)
    );
    assert_eq!(report.outcomes[0].outcome.metric_label(), "error");
    assert!(binds(&writes).is_empty());
    assert_eq!(h.cycle.assumed(), 0, "a failed bind assumes nothing");
    // It backs off without waiting for a change in the cluster.
    assert!(h.cycle().0.outcomes.is_empty());
    h.advance(Duration::from_secs(1));
    let (_, writes) = h.cycle();
    assert_eq!(binds(&writes), [("ml/a".to_string(), "n1".to_string())]);
}

#[test]
fn a_pod_gone_before_its_bind_leaves_the_queue() {
    let mut w = World::dgx(1, 1);
    w.add(pod("a", 1, None, 0));
    let mut h = Harness::new(w, Settings::default());
    h.writes
        .fail(WriteOp::Bind, "ml/a", WriteErrorKind::NotFound);
    let (_, writes) = h.cycle();
    assert!(
        !writes.iter().any(|w| matches!(w, Write::Event { .. })),
        "no event on a pod that is gone: {writes:?}"
    );
    assert!(!h.cycle.is_queued("ml/a"));
}

#[test]
fn an_api_outage_loses_no_pod_and_promises_no_gpu() {
    let mut w = World::dgx(2, 2);
    for i in 0..4 {
        w.add(pod(&format!("p{i}"), 4, None, 0));
    }
    let mut h = Harness::new(w, Settings::default());
    h.writes.api_down();
    let (report, writes) = h.cycle();
    assert_eq!(report.outcomes.len(), 4);
    assert!(report.outcomes.iter().all(|o| matches!(&o.outcome,
        Outcome::BindFailed(e) if e.kind == WriteErrorKind::Unavailable)));
    assert!(binds(&writes).is_empty());
    assert_eq!(h.cycle.assumed(), 0);
    h.writes.clear_failures();
    for _ in 0..6 {
        h.advance(Duration::from_secs(2));
        h.cycle();
    }
    assert_eq!(h.bound().len(), 4, "every pod placed once the API is back");
    assert_eq!(h.held_gpus().len(), 16);
}

#[test]
fn shared_inference_pods_pack_onto_few_gpus_never_a_held_one() {
    let mut w = World::dgx(1, 1);
    w.add(pod("train", 4, None, 0));
    let mut h = Harness::new(w, Settings::default());
    h.cycle();
    let held: Vec<u32> = h.held_gpus().into_iter().map(|(_, g)| g).collect();
    assert_eq!(held.len(), 4);
    for i in 0..6 {
        let mut p = pod(&format!("infer-{i}"), 0, None, 0);
        p.spec.as_mut().expect("spec").containers[0].resources = None;
        let p = annotate(p, "gputopo.dev/workload", "inference");
        h.world.add(annotate(p, "gputopo.dev/gpu-share", "0.25"));
    }
    let (report, _) = h.cycle();
    let mut per_gpu: std::collections::BTreeMap<u32, u32> = Default::default();
    for i in 0..6 {
        let Some(Outcome::Scheduled(p)) = report.outcome(&format!("ml/infer-{i}")) else {
            panic!("infer-{i}: {:?}", report.outcomes);
        };
        assert_eq!(p.gpus.len(), 1, "a shared pod names the one GPU it shares");
        assert!(!held.contains(&p.gpus[0]), "shares a GPU held whole");
        *per_gpu.entry(p.gpus[0]).or_default() += 1;
    }
    assert!(per_gpu.values().all(|&n| n <= 4), "{per_gpu:?}");
    assert!(per_gpu.len() <= 2, "spread instead of packed: {per_gpu:?}");
    assert_eq!(report.outcomes[0].workload, "inference");
}
