//! The score: kube-scheduler's InterPodAffinity score, normalised over the
//! feasible nodes, through the pod-preferences part.

use super::*;
use gputopo_scheduler_core::schedule::{Decision, schedule};

fn preferred(kind: &str, weight: i32, t: Value) -> Value {
    json!({"affinity": {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "podAffinityTerm": t}]}}})
}

fn chosen(snap: &Snapshot, pod: &PendingPod) -> String {
    match schedule(snap, pod, &SchedulerConfig::default()) {
        Decision::Placed(p) => p.node,
        Decision::Unschedulable(u) => panic!("{}", u.message),
    }
}

fn three_regions(pods: &[Pod]) -> Snapshot {
    snapshot(
        vec![
            node("a", &[("region", "r1")]),
            node("b", &[("region", "r2")]),
            node("c", &[("region", "r3")]),
        ],
        pods,
        &[],
    )
}

#[test]
fn preferred_affinity_draws_the_pod_to_the_matching_pods_domain() {
    let snap = three_regions(&[bound(
        "p1",
        "default",
        "b",
        json!({"security": "S1"}),
        json!({}),
    )]);
    let pod = pending(
        "default",
        json!({}),
        preferred("podAffinity", 5, term("security", "In", &["S1"], "region")),
    );
    assert_eq!(chosen(&snap, &pod), "b");
}

#[test]
fn preferred_anti_affinity_pushes_the_pod_away() {
    let snap = three_regions(&[
        bound("p1", "default", "a", json!({"security": "S1"}), json!({})),
        bound("p2", "default", "b", json!({"security": "S1"}), json!({})),
    ]);
    let pod = pending(
        "default",
        json!({}),
        preferred(
            "podAntiAffinity",
            5,
            term("security", "In", &["S1"], "region"),
        ),
    );
    assert_eq!(chosen(&snap, &pod), "c");
}

#[test]
fn a_bound_pods_required_affinity_draws_the_pods_it_selects() {
    // hardPodAffinityWeight: the bound pod on c requires pods labelled
    // app=web beside it; the incoming web pod scores c highest.
    let snap = three_regions(&[bound(
        "p1",
        "default",
        "c",
        json!({}),
        required("podAffinity", vec![term("app", "In", &["web"], "region")]),
    )]);
    let pod = pending("default", json!({"app": "web"}), json!({}));
    assert_eq!(chosen(&snap, &pod), "c");
    let mut off = SchedulerConfig::default();
    off.preferences.hard_pod_affinity = 0;
    let Decision::Placed(p) = schedule(&snap, &pod, &off) else {
        panic!("placed");
    };
    assert_eq!(p.parts.pod_preferences, None, "nothing else connects them");
}

#[test]
fn a_bound_pods_preferred_anti_affinity_pushes_the_selected_pod_away() {
    let snap = three_regions(&[bound(
        "p1",
        "default",
        "a",
        json!({}),
        preferred("podAntiAffinity", 10, term("app", "In", &["web"], "region")),
    )]);
    let pod = pending("default", json!({"app": "web"}), json!({}));
    assert_ne!(chosen(&snap, &pod), "a");
}

#[test]
fn scores_are_normalised_as_upstream() {
    // Weights 5 at r1 (a) and 3 at r2 (b), none at r3 (c): 100, 60, 0.
    let snap = three_regions(&[
        bound("p1", "default", "a", json!({"x": "1"}), json!({})),
        bound("p2", "default", "b", json!({"y": "1"}), json!({})),
    ]);
    let mut spec = preferred("podAffinity", 5, term("x", "Exists", &[], "region"));
    spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        .as_array_mut()
        .unwrap()
        .push(json!({"weight": 3, "podAffinityTerm": term("y", "Exists", &[], "region")}));
    let pod = pending("default", json!({}), spec);
    let rows = explain(&snap, &pod, &SchedulerConfig::default()).rows;
    let part = |name: &str| {
        rows.iter()
            .find(|r| r.node == name)
            .and_then(|r| r.parts.as_ref())
            .and_then(|p| p.pod_preferences)
            .expect("scored")
    };
    assert_eq!((part("a"), part("b"), part("c")), (1.0, 0.6, 0.0));
}
