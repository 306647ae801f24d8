//! The score: upstream's scenarios with their expected normalised scores.

use super::*;

fn soft(max_skew: i32, key: &str, selector: Value) -> Value {
    constraint(max_skew, key, "ScheduleAnyway", selector)
}

fn abcd() -> Vec<NodeInput> {
    ["node-a", "node-b", "node-c", "node-d"].map(host).to_vec()
}

const ABCD: [&str; 4] = ["node-a", "node-b", "node-c", "node-d"];

#[test]
fn no_matching_pods_or_equal_counts_score_every_node_100() {
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![soft(1, HOST, exists("foo"))]),
    );
    let snap = snapshot(vec![host("node-a"), host("node-b")], &[]);
    assert_eq!(scores(&snap, &pod, &["node-a", "node-b"]), [100, 100]);
    let pods = [foo_pods("node-a", 1), foo_pods("node-b", 1)].concat();
    let snap = snapshot(vec![host("node-a"), host("node-b")], &pods);
    assert_eq!(scores(&snap, &pod, &["node-a", "node-b"]), [100, 100]);
    // The only candidate scores 100 whatever it holds.
    let pods = [foo_pods("node-a", 2), foo_pods("node-b", 1)].concat();
    let snap = snapshot(vec![host("node-a"), host("node-b")], &pods);
    assert_eq!(scores(&snap, &pod, &["node-a"]), [100]);
}

#[test]
fn two_one_zero_three_over_hosts_by_max_skew() {
    let pods = [
        foo_pods("node-a", 2),
        foo_pods("node-b", 1),
        foo_pods("node-d", 3),
    ]
    .concat();
    let snap = snapshot(abcd(), &pods);
    let pod = |skew| {
        incoming(
            json!({"foo": ""}),
            spread(vec![soft(skew, HOST, exists("foo"))]),
        )
    };
    assert_eq!(scores(&snap, &pod(1), &ABCD), [20, 60, 100, 0]);
    assert_eq!(scores(&snap, &pod(2), &ABCD), [33, 66, 100, 16]);
    // A constraint without a selector counts no pod.
    let none = incoming(json!({"foo": ""}), spread(vec![soft(1, HOST, Value::Null)]));
    assert_eq!(scores(&snap, &none, &ABCD), [100; 4]);
}

#[test]
fn four_three_two_one_with_max_skew_3_and_under_system_defaults() {
    let pods = [
        foo_pods("node-a", 4),
        foo_pods("node-b", 3),
        foo_pods("node-c", 2),
        foo_pods("node-d", 1),
    ]
    .concat();
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![soft(3, HOST, exists("foo"))]),
    );
    let snap = snapshot(abcd(), &pods);
    assert_eq!(scores(&snap, &pod, &ABCD), [44, 66, 77, 100]);
    // No constraint of its own, a Service selecting it, nodes without a
    // zone: the system defaults give the same scores.
    let mut selectors = WorkloadSelectors::default();
    selectors.services.insert(
        ("default".into(), "svc".into()),
        [("foo".to_string(), String::new())].into(),
    );
    let snap = snapshot_with(abcd(), &pods, selectors);
    let plain = incoming(json!({"foo": ""}), json!({}));
    assert_eq!(scores(&snap, &plain, &ABCD), [44, 66, 77, 100]);
    // Defaults turned off: no score.
    assert_eq!(
        scores_with(&snap, &plain, &ABCD, &SpreadDefaults::List(vec![])),
        None
    );
}

#[test]
fn candidates_only_define_the_host_weight_and_a_node_without_the_key_scores_0() {
    let nodes = vec![
        host("node-a"),
        host("node-b"),
        host("node-x"),
        host("node-y"),
    ];
    let pods = [
        foo_pods("node-a", 4),
        foo_pods("node-b", 2),
        foo_pods("node-x", 1),
        foo_pods("node-y", 3),
    ]
    .concat();
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![soft(1, HOST, exists("foo"))]),
    );
    let snap = snapshot(nodes, &pods);
    assert_eq!(
        scores(&snap, &pod, &["node-a", "node-b", "node-x"]),
        [33, 83, 100]
    );
    let nodes = vec![
        host("node-a"),
        node("node-b", &[("n", "node-b")]),
        host("node-x"),
        host("node-y"),
    ];
    let snap = snapshot(nodes, &pods);
    assert_eq!(
        scores(&snap, &pod, &["node-a", "node-b", "node-x"]),
        [16, 0, 100]
    );
}

#[test]
fn zone_counts_include_pods_on_nodes_that_are_not_candidates() {
    let nodes = vec![
        node("node-a", &[("zone", "zone1"), (HOST, "node-a")]),
        node("node-b", &[("zone", "zone1"), (HOST, "node-b")]),
        node("node-x", &[("zone", "zone2"), (HOST, "node-x")]),
        node("node-y", &[("zone", "zone2"), (HOST, "node-y")]),
    ];
    let pods = [
        foo_pods("node-a", 4),
        foo_pods("node-b", 2),
        foo_pods("node-x", 1),
        foo_pods("node-y", 3),
    ]
    .concat();
    let snap = snapshot(nodes.clone(), &pods);
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![soft(1, "zone", exists("foo"))]),
    );
    assert_eq!(
        scores(&snap, &pod, &["node-a", "node-b", "node-x"]),
        [75, 75, 100]
    );
    // Zone and host together, with a and x the only candidates (2/~1~/2/~4~).
    let pods = [
        foo_pods("node-a", 2),
        foo_pods("node-b", 1),
        foo_pods("node-x", 2),
        foo_pods("node-y", 4),
    ]
    .concat();
    let snap = snapshot(nodes, &pods);
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![
            soft(1, "zone", exists("foo")),
            soft(1, HOST, exists("foo")),
        ]),
    );
    let got = scores(&snap, &pod, &["node-a", "node-x"]);
    // zone1 holds 3, zone2 6: a is preferred.
    assert_eq!(got[0], 100);
    assert!(got[1] < got[0], "{got:?}");
}

#[test]
fn a_pod_without_schedule_anyway_constraints_gets_no_score() {
    let snap = snapshot(abcd(), &[]);
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![constraint(1, HOST, "DoNotSchedule", exists("foo"))]),
    );
    assert_eq!(
        scores_with(&snap, &pod, &ABCD, &SpreadDefaults::System),
        None
    );
}
