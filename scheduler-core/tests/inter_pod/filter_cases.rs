//! The filter: kube-scheduler's InterPodAffinity filter scenarios.

use super::*;
use AffinityRefusal::{AffinityRules, AntiAffinityRules, ExistingAntiAffinity};

const HOST: &str = "kubernetes.io/hostname";

fn china() -> Vec<(&'static str, &'static str)> {
    vec![("region", "China")]
}

/// One node `n1` with the existing pod `labels` on it.
fn one_node_with(labels: Value, spec: Value) -> Snapshot {
    snapshot(
        vec![node(
            "n1",
            &[("region", "r1"), ("zone", "z11"), (HOST, "n1")],
        )],
        &[bound("p1", "default", "n1", labels, spec)],
        &[],
    )
}

#[test]
fn required_affinity_in_and_not_in_match_the_existing_pod() {
    let snap = one_node_with(json!({"service": "securityscan"}), json!({}));
    let in_term = pending(
        "default",
        json!({}),
        required(
            "podAffinity",
            vec![term("service", "In", &["securityscan", "value2"], "region")],
        ),
    );
    assert_eq!(verdicts(&snap, &in_term), [None]);
    let not_in = pending(
        "default",
        json!({}),
        required(
            "podAffinity",
            vec![term(
                "service",
                "NotIn",
                &["securityscan3", "value3"],
                "region",
            )],
        ),
    );
    assert_eq!(verdicts(&snap, &not_in), [None]);
}

#[test]
fn affinity_to_a_pod_in_another_namespace_is_not_met() {
    let snap = snapshot(
        vec![node("n1", &[("region", "r1")])],
        &[bound(
            "p1",
            "other",
            "n1",
            json!({"service": "securityscan"}),
            json!({}),
        )],
        &[],
    );
    let pod = pending(
        "default",
        json!({}),
        required(
            "podAffinity",
            vec![term("service", "In", &["securityscan"], "region")],
        ),
    );
    assert_eq!(verdicts(&snap, &pod), [Some(AffinityRules)]);
}

#[test]
fn the_requirements_of_a_selector_are_anded() {
    let snap = one_node_with(json!({"service": "securityscan"}), json!({}));
    let mut t = term("service", "Exists", &[], "region");
    t["labelSelector"]["matchExpressions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "wrongkey", "operator": "DoesNotExist"}));
    t["labelSelector"]["matchExpressions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "service", "operator": "In", "values": ["WrongValue"]}));
    let pod = pending("default", json!({}), required("podAffinity", vec![t]));
    assert_eq!(verdicts(&snap, &pod), [Some(AffinityRules)]);
}

#[test]
fn affinity_met_but_anti_affinity_refused_and_existing_anti_affinity_refused() {
    // The existing pod matches the affinity and the anti-affinity.
    let snap = one_node_with(json!({"service": "securityscan"}), json!({}));
    let mut both = required(
        "podAffinity",
        vec![term("service", "In", &["securityscan"], "region")],
    );
    both["affinity"]["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution":
        [term("service", "In", &["securityscan"], "zone")]});
    assert_eq!(
        verdicts(&snap, &pending("default", json!({}), both)),
        [Some(AntiAffinityRules)]
    );

    // Symmetry: the existing pod's anti-affinity selects the incoming pod.
    let snap = one_node_with(
        json!({"service": "securityscan"}),
        required(
            "podAntiAffinity",
            vec![term("security", "In", &["S1"], "zone")],
        ),
    );
    let pod = pending(
        "default",
        json!({"security": "S1"}),
        required(
            "podAffinity",
            vec![term("service", "In", &["securityscan"], "region")],
        ),
    );
    assert_eq!(verdicts(&snap, &pod), [Some(ExistingAntiAffinity)]);
}

#[test]
fn a_pod_matching_its_own_affinity_goes_beside_the_existing_pod() {
    let snap = one_node_with(json!({"service": "securityscan"}), json!({}));
    let pod = pending(
        "default",
        json!({"service": "securityscan"}),
        required(
            "podAffinity",
            vec![term("service", "In", &["securityscan"], "region")],
        ),
    );
    assert_eq!(verdicts(&snap, &pod), [None]);
}

#[test]
fn nodes_sharing_the_topology_value_with_a_matching_pod_all_qualify() {
    let snap = snapshot(
        vec![
            node("node1", &china()),
            node("node2", &[("region", "China"), ("az", "az1")]),
            node("node3", &[("region", "India")]),
        ],
        &[bound(
            "p1",
            "default",
            "node1",
            json!({"foo": "bar"}),
            json!({}),
        )],
        &[],
    );
    let pod = pending(
        "default",
        json!({}),
        required("podAffinity", vec![term("foo", "In", &["bar"], "region")]),
    );
    assert_eq!(verdicts(&snap, &pod), [None, None, Some(AffinityRules)]);
}

#[test]
fn the_first_pod_of_a_self_affine_group_may_go_where_the_keys_exist() {
    let affine = || {
        pending(
            "default",
            json!({"foo": "bar", "service": "securityscan"}),
            required(
                "podAffinity",
                vec![
                    term("foo", "In", &["bar"], "zone"),
                    term("service", "In", &["securityscan"], "zone"),
                ],
            ),
        )
    };
    let existing = [bound(
        "p1",
        "default",
        "nodeA",
        json!({"foo": "bar"}),
        json!({}),
    )];
    let zoned = snapshot(
        vec![
            node("nodeA", &[("zone", "az1"), ("hostname", "h1")]),
            node("nodeB", &[("zone", "az2"), ("hostname", "h2")]),
        ],
        &existing,
        &[],
    );
    assert_eq!(verdicts(&zoned, &affine()), [None, None]);
    let unzoned = snapshot(
        vec![
            node("nodeA", &[("zoneLabel", "az1"), ("hostname", "h1")]),
            node("nodeB", &[("zoneLabel", "az2"), ("hostname", "h2")]),
        ],
        &existing,
        &[],
    );
    assert_eq!(
        verdicts(&unzoned, &affine()),
        [Some(AffinityRules), Some(AffinityRules)]
    );
}

#[test]
fn anti_affinity_refuses_every_node_of_the_matching_pods_domain() {
    let snap = snapshot(
        vec![
            node("nodeA", &china()),
            node("nodeB", &[("region", "China"), ("az", "az1")]),
            node("nodeC", &[("region", "India")]),
        ],
        &[
            bound("p1", "NS1", "nodeA", json!({"foo": "bar"}), json!({})),
            bound(
                "p2",
                "NS2",
                "nodeC",
                json!({}),
                required(
                    "podAntiAffinity",
                    vec![term("foo", "In", &["123"], "region")],
                ),
            ),
        ],
        &[],
    );
    let pod = pending(
        "NS1",
        json!({"foo": "123"}),
        required(
            "podAntiAffinity",
            vec![term("foo", "In", &["bar"], "region")],
        ),
    );
    // nodeC's pod would refuse foo=123, but only in its own namespace NS2.
    assert_eq!(
        verdicts(&snap, &pod),
        [Some(AntiAffinityRules), Some(AntiAffinityRules), None]
    );
}

#[test]
fn anti_affinity_matches_when_any_term_matches() {
    let snap = snapshot(
        vec![
            node(
                "nodeA",
                &[("region", "r1"), ("zone", "z1"), ("hostname", "nodeA")],
            ),
            node(
                "nodeB",
                &[("region", "r1"), ("zone", "z2"), ("hostname", "nodeB")],
            ),
        ],
        &[bound(
            "p1",
            "default",
            "nodeA",
            json!({"foo": "abc", "service": "securityscan"}),
            json!({}),
        )],
        &[],
    );
    let pod = pending(
        "default",
        json!({}),
        required(
            "podAntiAffinity",
            vec![
                term("foo", "In", &["abc"], "region"),
                term("service", "In", &["securityscan"], "zone"),
            ],
        ),
    );
    assert_eq!(
        verdicts(&snap, &pod),
        [Some(AntiAffinityRules), Some(AntiAffinityRules)]
    );
}

#[test]
fn an_existing_pods_term_counts_only_where_its_topology_key_exists() {
    // The existing pod's anti-affinity names a key no node has: it refuses nothing.
    let snap = snapshot(
        vec![node(
            "nodeA",
            &[("region", "r1"), ("zone", "z1"), ("hostname", "nodeA")],
        )],
        &[bound(
            "p1",
            "default",
            "nodeA",
            json!({}),
            required(
                "podAntiAffinity",
                vec![term("foo", "Exists", &[], "invalid-node-label")],
            ),
        )],
        &[],
    );
    assert_eq!(
        verdicts(&snap, &pending("default", json!({"foo": ""}), json!({}))),
        [None]
    );
}

#[test]
fn existing_anti_affinity_keeps_the_pod_to_the_one_free_node() {
    let terms = || {
        required(
            "podAntiAffinity",
            vec![term("foo", "Exists", &[], "region")],
        )
    };
    let snap = snapshot(
        vec![
            node(
                "nodeA",
                &[("region", "r1"), ("zone", "z1"), ("hostname", "nodeA")],
            ),
            node(
                "nodeB",
                &[("region", "r1"), ("zone", "z2"), ("hostname", "nodeB")],
            ),
            node(
                "nodeC",
                &[("region", "r2"), ("zone", "z3"), ("hostname", "nodeC")],
            ),
        ],
        &[
            bound("p1", "default", "nodeA", json!({}), terms()),
            bound("p2", "default", "nodeB", json!({}), terms()),
        ],
        &[],
    );
    let pod = pending("default", json!({"foo": ""}), json!({}));
    assert_eq!(
        verdicts(&snap, &pod),
        [Some(ExistingAntiAffinity), Some(ExistingAntiAffinity), None]
    );
}

#[test]
fn all_affinity_terms_must_match_one_and_the_same_pod() {
    let snap = snapshot(
        vec![
            node("nodeA", &[(HOST, "nodeA")]),
            node("nodeB", &[(HOST, "nodeB")]),
        ],
        &[
            bound("p1", "default", "nodeA", json!({"foo": ""}), json!({})),
            bound("p2", "default", "nodeB", json!({"bar": ""}), json!({})),
        ],
        &[],
    );
    let pod = pending(
        "default",
        json!({}),
        required(
            "podAffinity",
            vec![
                term("foo", "Exists", &[], "region"),
                term("bar", "Exists", &[], HOST),
            ],
        ),
    );
    assert_eq!(
        verdicts(&snap, &pod),
        [Some(AffinityRules), Some(AffinityRules)]
    );
}

#[test]
fn namespace_selectors_match_namespaces_by_their_labels() {
    let labelled: &[(&str, &[(&str, &str)])] = &[("subteam", &[("team", "team1")]), ("other", &[])];
    let snap = snapshot(
        vec![node(
            "nodeA",
            &[("region", "r1"), ("zone", "z1"), ("hostname", "nodeA")],
        )],
        &[bound(
            "p1",
            "subteam",
            "nodeA",
            json!({"foo": ""}),
            json!({}),
        )],
        labelled,
    );
    let with_selector = |selector: Value| {
        let mut t = term("foo", "Exists", &[], "region");
        t["namespaceSelector"] = selector;
        t
    };
    let affinity = |sel: Value| {
        pending(
            "default",
            json!({}),
            required("podAffinity", vec![with_selector(sel)]),
        )
    };
    assert_eq!(
        verdicts(&snap, &affinity(json!({"matchLabels": {"team": "team1"}}))),
        [None]
    );
    assert_eq!(
        verdicts(&snap, &affinity(json!({"matchLabels": {"team": "team2"}}))),
        [Some(AffinityRules)]
    );
    let anti = |sel: Value| {
        pending(
            "default",
            json!({}),
            required("podAntiAffinity", vec![with_selector(sel)]),
        )
    };
    assert_eq!(
        verdicts(&snap, &anti(json!({"matchLabels": {"team": "team1"}}))),
        [Some(AntiAffinityRules)]
    );
    // `{}` selects every namespace.
    assert_eq!(verdicts(&snap, &anti(json!({}))), [Some(AntiAffinityRules)]);
    assert_eq!(
        verdicts(&snap, &anti(json!({"matchLabels": {"team": "team2"}}))),
        [None]
    );
}

#[test]
fn the_aggregated_message_uses_upstreams_reasons() {
    let snap = one_node_with(json!({"app": "db"}), json!({}));
    let pod = pending(
        "default",
        json!({}),
        required("podAntiAffinity", vec![term("app", "In", &["db"], HOST)]),
    );
    let d = gputopo_scheduler_core::schedule::schedule(&snap, &pod, &SchedulerConfig::default());
    let u = d.unschedulable().expect("refused");
    assert_eq!(
        u.message,
        "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."
    );
}
