//! Gangs: all or nothing, waiting, timeouts, reservations against a stream
//! of small pods, interleaved gangs, and a bind that fails mid-gang. These
//! are the properties scheduler-core's former `GangQueue` and
//! `Reservations` were tested for, now held by the code that runs.

use super::fixtures::{World, group_member, member, pod, pod_group};
use super::{Harness, binds, message};
use crate::config::Settings;
use crate::cycle::{Outcome, WriteErrorKind, WriteOp};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn leaves(h: &Harness, pods: &[String]) -> BTreeSet<String> {
    let bound = h.bound();
    pods.iter()
        .map(|p| {
            let node = &bound[p];
            let n: usize = node[1..].parse().expect("nN");
            format!("leaf of {}", (n - 1) / 2)
        })
        .collect()
}

#[test]
fn a_gang_waits_for_every_member_then_binds_all_in_one_leaf() {
    let mut w = World::dgx(4, 2);
    w.add(member("job", 2, 0, 8, 0));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    let Some(Outcome::WaitingForGang { message }) = report.outcome("ml/job-0") else {
        panic!("{:?}", report.outcomes);
    };
    assert!(message.contains("1 of 2 members present"), "{message}");
    h.world.add(member("job", 2, 1, 8, 0));
    h.advance(Duration::from_secs(2));
    let (report, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 2, "{:?}", report.outcomes);
    assert_eq!(report.gang_waits.len(), 1);
    assert_eq!(report.decisions.len(), 1, "one decision for the whole gang");
    assert_eq!(leaves(&h, &["job-0".into(), "job-1".into()]).len(), 1);
    h.held_gpus();
}

#[test]
fn a_gang_that_does_not_fit_binds_nothing() {
    let mut w = World::dgx(2, 2);
    for i in 0..3 {
        w.add(member("big", 3, i, 8, 0));
    }
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    assert_eq!(report.outcomes.len(), 3);
    for o in &report.outcomes {
        assert_eq!(o.outcome.metric_label(), "unschedulable", "{o:?}");
    }
    assert!(message(&report, "ml/big-0").contains("no reservation"));
}

#[test]
fn two_interleaved_gangs_do_not_deadlock() {
    // Each gang needs 3 of the 4 nodes; their pods arrive interleaved.
    let mut w = World::dgx(4, 2);
    for i in 0..3 {
        w.add(member("a", 3, i, 8, 0));
        w.add(member("b", 3, i, 8, 0));
    }
    let mut h = Harness::new(w, Harness::no_preemption());
    let (_, writes) = h.cycle();
    let bound: Vec<(String, String)> = binds(&writes);
    assert_eq!(bound.len(), 3, "one gang whole: {bound:?}");
    let gangs: BTreeSet<&str> = bound
        .iter()
        .map(|(p, _)| if p.starts_with("ml/a-") { "a" } else { "b" })
        .collect();
    assert_eq!(gangs.len(), 1, "never part of each: {bound:?}");
    assert_eq!(h.held_gpus().len(), 24);

    // At higher priority, the other gang goes first and the first waits
    // holding nothing.
    let mut w = World::dgx(4, 2);
    for i in 0..3 {
        w.add(member("a", 3, i, 8, 0));
        w.add(member("b", 3, i, 8, 10));
    }
    let mut h = Harness::new(w, Harness::no_preemption());
    let (_, writes) = h.cycle();
    assert!(binds(&writes).iter().all(|(p, _)| p.starts_with("ml/b-")));
    assert_eq!(binds(&writes).len(), 3);
}

#[test]
fn a_reserved_gang_is_not_starved_by_a_stream_of_small_pods() {
    for reservations in [true, false] {
        let mut settings = Harness::reserving();
        if !reservations {
            settings.gangs.reservations = None;
        }
        // n1 busy with a low-priority pod; the gang needs n1 and n2.
        let mut w = World::dgx(2, 2);
        w.add(pod("low", 8, Some("n1"), 0));
        w.add(member("big", 2, 0, 8, 100))
            .add(member("big", 2, 1, 8, 100));
        let mut h = Harness::new(w, settings);
        let (report, _) = h.cycle();
        let m = message(&report, "ml/big-0");
        assert_eq!(
            m.contains("reserved 16 GPUs"),
            reservations,
            "reservations {reservations}: {m}"
        );
        assert_eq!(h.cycle.reservations(), usize::from(reservations));
        // A stream of one-GPU pods, one per cycle.
        let mut small_bound = 0;
        for i in 0..4 {
            h.world.add(pod(&format!("small-{i}"), 1, None, 0));
            h.advance(Duration::from_secs(31));
            let (_, writes) = h.cycle();
            small_bound += binds(&writes)
                .iter()
                .filter(|(p, _)| p.starts_with("ml/small-"))
                .count();
        }
        if !reservations {
            assert_eq!(small_bound, 4, "without a reservation they take n2");
            continue;
        }
        assert_eq!(small_bound, 0, "a small pod took reserved GPUs");
        // The low-priority pod ends: the gang takes what was held for it.
        h.world.remove("low");
        h.advance(Duration::from_secs(31));
        let (_, writes) = h.cycle();
        let gang: BTreeSet<String> = binds(&writes)
            .into_iter()
            .filter(|(p, _)| p.starts_with("ml/big-"))
            .map(|(_, n)| n)
            .collect();
        assert_eq!(gang, BTreeSet::from(["n1".to_string(), "n2".to_string()]));
        assert_eq!(h.cycle.reservations(), 0, "released once placed");
        h.held_gpus();
    }
}

#[test]
fn a_gang_past_its_timeout_is_told_and_loses_its_reservation() {
    let mut w = World::dgx(2, 2);
    w.gangs
        .pod_groups
        .push(Arc::new(pod_group("job", 2, Some(30))));
    w.add(pod("low", 8, Some("n1"), 0));
    for i in 0..2 {
        w.add(group_member("job", i, 8, 100));
    }
    let mut h = Harness::new(w, Harness::reserving());
    let (report, _) = h.cycle();
    assert!(message(&report, "ml/job-0").contains("reserved"));
    assert_eq!(h.cycle.reservations(), 1);
    h.advance(Duration::from_secs(31));
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    let Some(Outcome::GangTimedOut { message }) = report.outcome("ml/job-1") else {
        panic!("{:?}", report.outcomes);
    };
    assert!(
        message.contains("longer than its schedule timeout (30s); its reservation is released"),
        "{message}"
    );
    assert_eq!(h.cycle.reservations(), 0);
}

#[test]
fn a_reservation_lapses_after_its_ttl() {
    let mut settings = Harness::reserving();
    let mut policy = settings.gangs.reservations.expect("on by default");
    policy.ttl = Duration::from_secs(60);
    settings.gangs.reservations = Some(policy);
    settings.gangs.schedule_timeout = Duration::from_secs(3600);
    let mut w = World::dgx(2, 2);
    w.add(pod("low", 8, Some("n1"), 0));
    w.add(member("big", 2, 0, 8, 100))
        .add(member("big", 2, 1, 8, 100));
    let mut h = Harness::new(w, settings);
    h.cycle();
    assert_eq!(h.cycle.reservations(), 1);
    h.advance(Duration::from_secs(61));
    h.cycle();
    // Lapsed, then made again by the same cycle's decision: a fresh ttl.
    assert_eq!(h.cycle.reservations(), 1);
    // The gang is deleted: its reservation ends with it.
    h.world.remove("big-0");
    h.world.remove("big-1");
    h.advance(Duration::from_secs(1));
    h.cycle();
    assert_eq!(h.cycle.reservations(), 0);
}

#[test]
fn a_bind_that_fails_mid_gang_retries_that_member_alone() {
    let mut w = World::dgx(2, 2);
    for i in 0..2 {
        w.add(member("job", 2, i, 8, 0));
    }
    let mut h = Harness::new(w, Settings::default());
    h.writes
        .fail_once(WriteOp::Bind, "ml/job-1", WriteErrorKind::Timeout);
    let (report, writes) = h.cycle();
    let first = binds(&writes);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].0, "ml/job-0");
    assert!(
        matches!(report.outcome("ml/job-1"), Some(Outcome::BindFailed(e)) if e.kind == WriteErrorKind::Timeout)
    );
    assert!(report.gang_waits.is_empty(), "the gang is not placed yet");
    h.advance(Duration::from_secs(1));
    let (report, writes) = h.cycle();
    let second = binds(&writes);
    assert_eq!(second.len(), 1, "{:?}", report.outcomes);
    assert_eq!(second[0].0, "ml/job-1");
    assert_ne!(second[0].1, first[0].1, "the bound member's GPUs are taken");
    assert_eq!(report.gang_waits.len(), 1, "placed whole now");
    assert_eq!(h.held_gpus().len(), 16, "no GPU twice");
}

#[test]
fn a_restarted_scheduler_completes_a_half_bound_gang_without_a_gpu_twice() {
    let mut w = World::dgx(2, 2);
    for i in 0..2 {
        w.add(member("job", 2, i, 8, 0));
    }
    let mut h = Harness::new(w, Settings::default());
    // The process dies between the two binds: its state is lost, the
    // first member's binding stands.
    h.writes
        .fail_once(WriteOp::Bind, "ml/job-1", WriteErrorKind::Unavailable);
    h.cycle();
    assert_eq!(h.bound().len(), 1);
    h.cycle = crate::cycle::Cycle::new(Settings::default());
    let (report, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 1, "{:?}", report.outcomes);
    assert_eq!(h.bound().len(), 2);
    assert_eq!(h.held_gpus().len(), 16, "no GPU twice");
}

/// Kueue (and others) hold pods with scheduling gates until they admit
/// them: a gated pod is never placed, and a gang waits until enough of its
/// members are ungated, reserving and preempting nothing meanwhile.
#[test]
fn gated_pods_wait_and_a_gang_counts_only_ungated_members() {
    let gate = |mut p: k8s_openapi::api::core::v1::Pod| {
        p.spec.as_mut().expect("spec").scheduling_gates =
            Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate {
                name: "kueue.x-k8s.io/admission".into(),
            }]);
        p
    };
    let mut w = World::busy_pair();
    w.add(gate(pod("single", 1, None, 100)));
    w.add(member("job", 2, 0, 8, 100));
    w.add(gate(member("job", 2, 1, 8, 100)));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert!(
        report.outcome("ml/single").is_none(),
        "a gated pod was tried"
    );
    assert!(!h.cycle.is_queued("ml/single"));
    let m = message(&report, "ml/job-0");
    assert!(m.contains("1 more held by scheduling gates"), "{m}");
    assert!(
        !writes
            .iter()
            .any(|w| matches!(w, super::fake::Write::Evict { .. })),
        "a gated member is no reason to preempt: {writes:?}"
    );
    assert_eq!(
        h.cycle.reservations(),
        0,
        "nothing reserved for a gated gang"
    );
    // Admitted: the gates go. Both pods are tried now, and the gang,
    // complete, preempts the low-priority pod it needs.
    for p in &mut h.world.pods {
        std::sync::Arc::make_mut(p)
            .spec
            .as_mut()
            .expect("spec")
            .scheduling_gates = None;
    }
    h.advance(Duration::from_secs(2));
    let (report, _) = h.cycle();
    assert!(
        report.outcome("ml/single").is_some(),
        "{:?}",
        report.outcomes
    );
    assert!(
        matches!(report.outcome("ml/job-1"), Some(Outcome::Preempting { .. })),
        "{:?}",
        report.outcomes
    );
    h.advance(Duration::from_secs(2));
    let (_, writes) = h.cycle();
    let gang: Vec<String> = binds(&writes).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        gang,
        ["ml/job-0", "ml/job-1"],
        "the gang binds once its victim is gone"
    );
}

/// A gang member bound on `node` (as a restart or a lost member leaves it).
fn bound_member(gang: &str, size: u32, i: u32, node: &str) -> k8s_openapi::api::core::v1::Pod {
    let mut p = member(gang, size, i, 8, 0);
    p.spec.as_mut().expect("spec").node_name = Some(node.into());
    p.status.get_or_insert_default().phase = Some("Running".into());
    super::fixtures::annotate(p, "gputopo.dev/assigned-gpus", "0,1,2,3,4,5,6,7")
}

#[test]
fn the_rest_of_a_partly_bound_gang_goes_to_its_bound_members_leaf_and_is_timed_as_a_recovery() {
    // n1, n2 on leaf-1; n3, n4 on leaf-2. One member runs on n3.
    let mut w = World::dgx(4, 2);
    w.add(bound_member("job", 2, 0, "n3"));
    w.add(member("job", 2, 1, 8, 0));
    let mut h = Harness::new(w, Settings::default());
    h.advance(Duration::from_secs(7));
    let (report, writes) = h.cycle();
    assert_eq!(
        binds(&writes),
        [("ml/job-1".to_string(), "n4".to_string())],
        "{:?}",
        report.outcomes
    );
    // A lost member's replacement: timed from its creation, and told where.
    assert_eq!(report.gang_recoveries, [Duration::from_secs(7)]);
    let note = writes
        .iter()
        .find_map(|w| match w {
            super::fake::Write::Event { pod, event }
                if pod == "ml/job-1" && event.reason == "GangMemberReplaced" =>
            {
                Some(event.note.clone())
            }
            _ => None,
        })
        .expect("a GangMemberReplaced event");
    assert!(
        note.contains("beside its 1 bound member(s)") && note.contains("gputopo.dev/leaf=leaf-2"),
        "{note}"
    );
}

#[test]
fn a_gang_stuck_partly_bound_is_undone_after_its_timeout() {
    let mut settings = Harness::no_preemption();
    settings.gangs.partial_bind_timeout = Duration::from_secs(60);
    // n2 is full with a pod of higher priority: job-1 fits nowhere.
    let mut w = World::dgx(2, 2);
    w.add(pod("keeper", 8, Some("n2"), 1000));
    w.add(bound_member("job", 2, 0, "n1"));
    w.add(member("job", 2, 1, 8, 0));
    let mut h = Harness::new(w, settings);
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    assert_eq!(
        report.outcome("ml/job-1").map(Outcome::metric_label),
        Some("unschedulable")
    );
    h.advance(Duration::from_secs(61));
    let (report, writes) = h.cycle();
    assert!(
        writes.contains(&super::fake::Write::Evict {
            pod: "ml/job-0".into(),
            dry_run: false,
            ok: true
        }),
        "{writes:?}"
    );
    let Some(Outcome::GangTimedOut { message }) = report.outcome("ml/job-1") else {
        panic!("{:?}", report.outcomes);
    };
    assert!(
        message.contains("partialBindTimeout") && message.contains("evicted ml/job-0"),
        "{message}"
    );
    assert!(
        !h.bound().contains_key("job-0"),
        "no GPU held for a gang that cannot complete"
    );
}

/// A gang's wait is read from its members' creation times: a scheduler that
/// takes over (or restarts) does not give it a fresh timeout.
#[test]
fn a_new_leader_keeps_a_gangs_schedule_timeout() {
    let mut w = World::busy_pair();
    w.gangs
        .pod_groups
        .push(Arc::new(pod_group("job", 2, Some(30))));
    for i in 0..2 {
        w.add(group_member("job", i, 8, 100));
    }
    let mut h = Harness::new(w, Harness::reserving());
    // The members were created 31 s before this process first looks.
    h.advance(Duration::from_secs(31));
    let (report, _) = h.cycle();
    assert!(
        matches!(
            report.outcome("ml/job-0"),
            Some(Outcome::GangTimedOut { .. })
        ),
        "{:?}",
        report.outcomes
    );
}

#[test]
fn a_partly_bound_gang_past_its_timeout_that_fits_now_is_completed_not_undone() {
    let mut settings = Harness::no_preemption();
    settings.gangs.partial_bind_timeout = Duration::from_secs(60);
    let mut w = World::dgx(2, 2);
    w.add(pod("keeper", 8, Some("n2"), 1000));
    w.add(bound_member("job", 2, 0, "n1"));
    w.add(member("job", 2, 1, 8, 0));
    let mut h = Harness::new(w, settings);
    h.cycle();
    // Past the timeout, but the keeper has finished: the gang completes.
    h.world.remove("keeper");
    h.advance(Duration::from_secs(61));
    let (_, writes) = h.cycle();
    assert_eq!(binds(&writes), [("ml/job-1".to_string(), "n2".to_string())]);
    assert!(
        !writes
            .iter()
            .any(|w| matches!(w, super::fake::Write::Evict { .. })),
        "{writes:?}"
    );
}

#[test]
fn a_new_leader_reserves_for_a_waiting_gang_before_a_small_pod_can_take_its_gpus() {
    // n1 busy with a low-priority pod; the gang needs n1 and n2.
    let mut w = World::dgx(2, 2);
    w.add(pod("low", 8, Some("n1"), 0));
    w.add(member("big", 2, 0, 8, 100))
        .add(member("big", 2, 1, 8, 100));
    let mut h = Harness::new(w.clone(), Harness::reserving());
    h.cycle();
    assert_eq!(h.cycle.reservations(), 1);
    // Failover: the reservation lived only in the old leader. The new one
    // derives it again from the API's view in its first cycle, before the
    // small pod that arrived meanwhile is decided (the queue takes the gang
    // first: higher priority, and older at equal priority).
    for small_priority in [0, 100] {
        let mut w = w.clone();
        w.add(pod("small", 1, None, small_priority));
        let mut next = Harness::new(w, Harness::reserving());
        let (_, writes) = next.cycle();
        assert_eq!(next.cycle.reservations(), 1, "priority {small_priority}");
        assert!(
            binds(&writes).iter().all(|(p, _)| p != "ml/small"),
            "priority {small_priority}: the small pod took reserved GPUs: {writes:?}"
        );
    }
}

#[test]
fn a_member_beyond_the_minimum_joins_on_the_gangs_gpu_model_and_says_so() {
    // n1, n2 (H100) on leaf-1 hold the gang's two members; on leaf-2, n3
    // (H200, half used: packing's first choice for a 4-GPU pod) and n4
    // (H100, empty) have room. A third member, beyond the minimum of
    // two (an elastic gang scaled up), arrives.
    let mut w = World::dgx(4, 2);
    for (i, product) in ["H100", "H100", "H200", "H100"].iter().enumerate() {
        Arc::make_mut(&mut w.nodes[i])
            .metadata
            .labels
            .get_or_insert_default()
            .insert("nvidia.com/gpu.product".into(), product.to_string());
    }
    w.add(bound_member("job", 2, 0, "n1"));
    w.add(bound_member("job", 2, 1, "n2"));
    w.add(pod("busy", 4, Some("n3"), 0));
    w.add(member("job", 2, 2, 4, 0));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert_eq!(
        binds(&writes),
        [("ml/job-2".to_string(), "n4".to_string())],
        "the gang's model, not the first free node: {:?}",
        report.outcomes
    );
    assert!(report.gang_recoveries.is_empty(), "nothing was lost");
    let reasons: Vec<(&str, String)> = writes
        .iter()
        .filter_map(|w| match w {
            super::fake::Write::Event { pod, event } if pod == "ml/job-2" => {
                Some((event.reason, event.note.clone()))
            }
            _ => None,
        })
        .collect();
    let joined = reasons
        .iter()
        .find(|(r, _)| *r == "GangMemberJoined")
        .map(|(_, n)| n.clone())
        .unwrap_or_else(|| panic!("a GangMemberJoined event: {reasons:?}"));
    assert!(
        joined.contains("member 3 of minimum 2") && joined.contains("H100"),
        "{joined}"
    );
    assert!(
        reasons.iter().all(|(r, _)| *r != "GangMemberReplaced"),
        "{reasons:?}"
    );
}
