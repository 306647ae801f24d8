//! The filter: upstream's single- and multiple-constraint scenarios, the
//! node inclusion policies and `minDomains`.

use super::*;
use SpreadRefusal::{MissingLabel, Skew};

const ABXY: [&str; 4] = ["node-a", "node-b", "node-x", "node-y"];

fn four_nodes() -> Vec<NodeInput> {
    vec![
        zoned("node-a", "zone1"),
        zoned("node-b", "zone1"),
        zoned("node-x", "zone2"),
        zoned("node-y", "zone2"),
    ]
}

/// Matching pods spread 2/1/0/3 over a, b, x, y.
fn two_one_zero_three() -> Vec<Pod> {
    [
        foo_pods("node-a", 2),
        foo_pods("node-b", 1),
        foo_pods("node-y", 3),
    ]
    .concat()
}

fn hard(max_skew: i32, key: &str, selector: Value) -> Value {
    constraint(max_skew, key, "DoNotSchedule", selector)
}

#[test]
fn an_empty_cluster_admits_every_node_whether_or_not_the_pod_matches_itself() {
    let snap = snapshot(four_nodes(), &[]);
    for selector in [exists("foo"), exists("bar")] {
        let pod = incoming(json!({"foo": ""}), spread(vec![hard(1, "zone", selector)]));
        assert_eq!(verdicts(&snap, &pod, &ABXY), [None; 4]);
    }
}

#[test]
fn pods_of_other_namespaces_do_not_count() {
    let pods = vec![
        bound(
            "p-a1",
            "node-a",
            json!({"namespace": "ns1", "labels": {"foo": ""}}),
        ),
        bound(
            "p-b1",
            "node-a",
            json!({"namespace": "ns2", "labels": {"foo": ""}}),
        ),
        bound("p-x1", "node-x", json!({"labels": {"foo": ""}})),
        bound("p-y1", "node-y", json!({"labels": {"foo": ""}})),
    ];
    let snap = snapshot(four_nodes(), &pods);
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![hard(1, "zone", exists("foo"))]),
    );
    assert_eq!(
        verdicts(&snap, &pod, &ABXY),
        [None, None, Some(Skew), Some(Skew)]
    );
}

#[test]
fn three_and_three_across_zones_admits_every_node() {
    let snap = snapshot(four_nodes(), &two_one_zero_three());
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![hard(1, "zone", exists("foo"))]),
    );
    assert_eq!(verdicts(&snap, &pod, &ABXY), [None; 4]);
}

#[test]
fn a_node_without_the_key_is_refused_and_its_pods_do_not_count() {
    let mut nodes = four_nodes();
    nodes[1] = node("node-b", &[("zon", "zone1"), ("node", "node-b")]);
    let pods = [
        foo_pods("node-a", 1),
        foo_pods("node-b", 1),
        foo_pods("node-x", 1),
        foo_pods("node-y", 1),
    ]
    .concat();
    let snap = snapshot(nodes, &pods);
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![hard(1, "zone", exists("foo"))]),
    );
    assert_eq!(
        verdicts(&snap, &pod, &ABXY),
        [None, Some(MissingLabel), Some(Skew), Some(Skew)]
    );
}

#[test]
fn a_key_no_node_has_refuses_every_node_as_missing() {
    let snap = snapshot(
        vec![zoned("node-a", "zone1"), zoned("node-x", "zone2")],
        &[],
    );
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![hard(1, "rack", exists("foo"))]),
    );
    assert_eq!(
        verdicts(&snap, &pod, &["node-a", "node-x"]),
        [Some(MissingLabel), Some(MissingLabel)]
    );
}

#[test]
fn two_one_zero_three_over_nodes_admits_by_max_skew_and_self_match() {
    let snap = snapshot(four_nodes(), &two_one_zero_three());
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![hard(1, "node", exists("foo"))]),
    );
    assert_eq!(
        verdicts(&snap, &pod, &ABXY),
        [Some(Skew), Some(Skew), None, Some(Skew)]
    );
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![hard(2, "node", exists("foo"))]),
    );
    assert_eq!(
        verdicts(&snap, &pod, &ABXY),
        [Some(Skew), None, None, Some(Skew)]
    );
    // The pod does not match itself: placing it changes no count.
    let pod = incoming(
        json!({"bar": ""}),
        spread(vec![hard(1, "node", exists("foo"))]),
    );
    assert_eq!(
        verdicts(&snap, &pod, &ABXY),
        [Some(Skew), None, None, Some(Skew)]
    );
}

#[test]
fn node_affinity_leaves_the_nodes_it_excludes_out_of_the_domains() {
    let snap = snapshot(four_nodes(), &two_one_zero_three());
    let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "node", "operator": "In", "values": ["node-a", "node-y"]}]}]}}});
    let mut spec = spread(vec![hard(1, "node", exists("foo"))]);
    spec["affinity"] = affinity.clone();
    let pod = incoming(json!({"foo": ""}), spec);
    // Domains a (2) and y (3) only: a is at the minimum. b and x are
    // refused by node affinity itself, not here.
    assert_eq!(verdicts(&snap, &pod, &ABXY), [None, None, None, Some(Skew)]);
    // nodeAffinityPolicy Ignore: every node is a domain again.
    let mut c = hard(1, "node", exists("foo"));
    c["nodeAffinityPolicy"] = json!("Ignore");
    let mut spec = spread(vec![c]);
    spec["affinity"] = affinity;
    let pod = incoming(json!({"foo": ""}), spec);
    assert_eq!(
        verdicts(&snap, &pod, &ABXY),
        [Some(Skew), Some(Skew), None, Some(Skew)]
    );
}

#[test]
fn terminating_pods_are_not_counted() {
    let nodes = vec![
        node("node-a", &[("node", "node-a")]),
        node("node-b", &[("node", "node-b")]),
    ];
    let pods = vec![
        bound(
            "p-a",
            "node-a",
            json!({"labels": {"foo": ""}, "deletionTimestamp": "2026-01-01T00:00:00Z"}),
        ),
        bound("p-b", "node-b", json!({"labels": {"foo": ""}})),
    ];
    let snap = snapshot(nodes, &pods);
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![hard(1, "node", exists("foo"))]),
    );
    assert_eq!(
        verdicts(&snap, &pod, &["node-a", "node-b"]),
        [None, Some(Skew)]
    );
}

#[test]
fn two_constraints_intersect() {
    let snap = snapshot(four_nodes(), &two_one_zero_three());
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![
            hard(1, "zone", exists("foo")),
            hard(1, "node", exists("foo")),
        ]),
    );
    // zone 3/3 admits all; node 2/1/0/3 admits x.
    assert_eq!(
        verdicts(&snap, &pod, &ABXY),
        [Some(Skew), Some(Skew), None, Some(Skew)]
    );
    // One more pod on y: zone 3/4 admits zone1, node admits x: none left.
    let mut pods = two_one_zero_three();
    pods.push(bound("p-y4", "node-y", json!({"labels": {"foo": ""}})));
    let snap = snapshot(four_nodes(), &pods);
    assert_eq!(verdicts(&snap, &pod, &ABXY), [Some(Skew); 4]);
}

#[test]
fn constraints_with_different_selectors_count_their_own_pods() {
    let pods = vec![
        bound("p-a1", "node-a", json!({"labels": {"foo": ""}})),
        bound("p-b1", "node-b", json!({"labels": {"bar": ""}})),
        bound("p-x1", "node-x", json!({"labels": {"foo": ""}})),
        bound("p-y1", "node-y", json!({"labels": {"bar": ""}})),
    ];
    let snap = snapshot(four_nodes(), &pods);
    let pod = incoming(
        json!({"foo": "", "bar": ""}),
        spread(vec![
            hard(1, "zone", exists("foo")),
            hard(1, "node", exists("bar")),
        ]),
    );
    // zone: foo 1/1 admits all; node: bar 0/1/0/1 admits a and x.
    assert_eq!(
        verdicts(&snap, &pod, &ABXY),
        [None, Some(Skew), None, Some(Skew)]
    );
}

#[test]
fn min_domains_treats_the_minimum_as_zero_while_domains_are_too_few() {
    // Two zones hold 1 and 1 matching pods; with minDomains 3 the global
    // minimum is 0, so a third pod in either zone would skew by 2.
    let pods = [foo_pods("node-a", 1), foo_pods("node-x", 1)].concat();
    let snap = snapshot(four_nodes(), &pods);
    let mut c = hard(1, "zone", exists("foo"));
    c["minDomains"] = json!(3);
    let pod = incoming(json!({"foo": ""}), spread(vec![c]));
    assert_eq!(verdicts(&snap, &pod, &ABXY), [Some(Skew); 4]);
    let mut c = hard(1, "zone", exists("foo"));
    c["minDomains"] = json!(2);
    let pod = incoming(json!({"foo": ""}), spread(vec![c]));
    assert_eq!(verdicts(&snap, &pod, &ABXY), [None; 4]);
}

#[test]
fn node_taints_policy_honor_leaves_untolerated_nodes_out() {
    let mut nodes = four_nodes();
    nodes[3].taints = vec![crate::selector::Taint {
        key: "gpu".into(),
        value: "broken".into(),
        effect: crate::selector::TaintEffect::NoSchedule,
    }];
    // node-y is tainted and empty; the others hold one matching pod each.
    let pods = [
        foo_pods("node-a", 1),
        foo_pods("node-b", 1),
        foo_pods("node-x", 1),
    ]
    .concat();
    let snap = snapshot(nodes, &pods);
    // Ignore (the default): y is a domain at 0, so a, b and x are skewed.
    let pod = incoming(
        json!({"foo": ""}),
        spread(vec![hard(1, "node", exists("foo"))]),
    );
    assert_eq!(
        verdicts(&snap, &pod, &ABXY)[..3],
        [Some(Skew), Some(Skew), Some(Skew)]
    );
    let mut c = hard(1, "node", exists("foo"));
    c["nodeTaintsPolicy"] = json!("Honor");
    let pod = incoming(json!({"foo": ""}), spread(vec![c]));
    assert_eq!(verdicts(&snap, &pod, &ABXY)[..3], [None, None, None]);
}

#[test]
fn match_label_keys_narrow_the_selector_to_the_pods_revision() {
    let pods = vec![
        bound(
            "old-1",
            "node-a",
            json!({"labels": {"app": "web", "rev": "1"}}),
        ),
        bound(
            "old-2",
            "node-a",
            json!({"labels": {"app": "web", "rev": "1"}}),
        ),
        bound(
            "new-1",
            "node-x",
            json!({"labels": {"app": "web", "rev": "2"}}),
        ),
    ];
    let snap = snapshot(four_nodes(), &pods);
    let mut c = hard(1, "node", json!({"matchLabels": {"app": "web"}}));
    c["matchLabelKeys"] = json!(["rev"]);
    let pod = incoming(json!({"app": "web", "rev": "2"}), spread(vec![c]));
    // Only rev 2 counts: 0/0/1/0, so x is refused and a is not.
    assert_eq!(verdicts(&snap, &pod, &ABXY), [None, None, Some(Skew), None]);
}

#[test]
fn defaults_of_kind_list_spread_a_pod_that_states_none_over_its_owners_pods() {
    let pods = [foo_pods("node-a", 2)].concat();
    let mut selectors = WorkloadSelectors::default();
    selectors.services.insert(
        ("default".into(), "svc".into()),
        [("foo".to_string(), String::new())].into(),
    );
    let snap = snapshot_with(four_nodes(), &pods, selectors);
    let pod = incoming(json!({"foo": ""}), json!({}));
    let defaults = SpreadDefaults::List(vec![crate::pod_constraints::SpreadConstraint {
        selector: None,
        ..crate::pod_constraints::SpreadConstraint::new(
            1,
            "node",
            crate::pod_constraints::WhenUnsatisfiable::DoNotSchedule,
            Default::default(),
        )
    }]);
    let config = SchedulerConfig::default();
    let ctx = PodContext::new(&snap, &pod, &config);
    let filter =
        SpreadFilter::new(&snap, &pod, &defaults, &|i| ctx.eligibility(i)).expect("defaults apply");
    assert_eq!(filter.check(&snap, index(&snap, "node-a")), Err(Skew));
    assert_eq!(filter.check(&snap, index(&snap, "node-b")), Ok(()));
    // A pod no Service or controller selects gets no default.
    let loner = incoming(json!({"other": ""}), json!({}));
    assert!(SpreadFilter::new(&snap, &loner, &defaults, &|i| ctx.eligibility(i)).is_none());
    // The system defaults are ScheduleAnyway only: no filter.
    assert!(
        SpreadFilter::new(&snap, &pod, &SpreadDefaults::System, &|i| ctx
            .eligibility(i))
        .is_none()
    );
}
