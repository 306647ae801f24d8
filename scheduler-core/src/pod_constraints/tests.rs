//! Reading a pod's labels, host ports, inter-pod affinity and spread from
//! literal pod specs, with upstream's defaults and its errors.

use super::*;
use gputopo_api::k8s_openapi::api::core::v1::PodSpec;
use serde_json::json;

fn spec(v: serde_json::Value) -> PodSpec {
    serde_json::from_value(v).expect("a valid PodSpec")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

#[test]
fn host_ports_come_from_containers_and_sidecars_only() {
    let s = spec(json!({
        "initContainers": [
            {"name": "init", "ports": [{"containerPort": 1, "hostPort": 9001}]},
            {"name": "side", "restartPolicy": "Always",
             "ports": [{"containerPort": 2, "hostPort": 9002, "protocol": "UDP"}]}
        ],
        "containers": [{"name": "main", "ports": [
            {"containerPort": 80, "hostPort": 18080, "hostIP": "10.0.0.1"},
            {"containerPort": 81},
            {"containerPort": 82, "hostPort": 18082, "hostIP": "0.0.0.0"}
        ]}]
    }));
    let c = PodConstraints::from_k8s("ns", None, &s).unwrap();
    let udp = HostPort {
        protocol: "UDP".into(),
        ip: None,
        port: 9002,
    };
    let on_ip = HostPort {
        protocol: "TCP".into(),
        ip: Some("10.0.0.1".into()),
        port: 18080,
    };
    assert_eq!(c.host_ports, vec![udp, on_ip, HostPort::tcp(18082)]);
}

#[test]
fn host_ports_conflict_by_port_protocol_and_address() {
    let any = HostPort::tcp(80);
    let at = |ip: &str| HostPort {
        ip: Some(ip.into()),
        ..HostPort::tcp(80)
    };
    assert!(any.conflicts(&at("10.0.0.1")));
    assert!(at("10.0.0.1").conflicts(&any));
    assert!(at("10.0.0.1").conflicts(&at("10.0.0.1")));
    assert!(!at("10.0.0.1").conflicts(&at("10.0.0.2")));
    assert!(!any.conflicts(&HostPort::tcp(81)));
    let udp = HostPort {
        protocol: "UDP".into(),
        ..HostPort::tcp(80)
    };
    assert!(!any.conflicts(&udp));
}

#[test]
fn a_term_naming_no_namespace_looks_in_the_pods_own() {
    let s = spec(json!({
        "containers": [{"name": "c"}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"},
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone",
             "namespaceSelector": {}},
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone",
             "namespaces": ["other"]}
        ]}}
    }));
    let c = PodConstraints::from_k8s("team", None, &s).unwrap();
    let [own, all, other] = c.affinity.required_anti.as_slice() else {
        panic!("three terms: {:?}", c.affinity.required_anti);
    };
    let web = labels(&[("app", "web")]);
    assert!(own.matches("team", &web, None));
    assert!(!own.matches("elsewhere", &web, None));
    // `namespaceSelector: {}` selects every namespace, labelled or not.
    assert!(all.matches("elsewhere", &web, None));
    assert!(other.matches("other", &web, None));
    assert!(!other.matches("team", &web, None));
    assert!(!own.matches("team", &labels(&[("app", "db")]), None));
}

#[test]
fn an_absent_label_selector_selects_no_pod_and_an_empty_one_every_pod() {
    let s = spec(json!({
        "containers": [{"name": "c"}],
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "zone"},
            {"labelSelector": {}, "topologyKey": "zone"}
        ]}}
    }));
    let c = PodConstraints::from_k8s("ns", None, &s).unwrap();
    let any = labels(&[("x", "y")]);
    assert!(!c.affinity.required[0].matches("ns", &any, None));
    assert!(c.affinity.required[1].matches("ns", &any, None));
}

#[test]
fn a_namespace_selector_matches_the_namespaces_labels() {
    let s = spec(json!({
        "containers": [{"name": "c"}],
        "affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 7, "podAffinityTerm": {
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                "namespaceSelector": {"matchLabels": {"team": "ml"}},
                "topologyKey": "zone"}}
        ]}}
    }));
    let c = PodConstraints::from_k8s("ns", None, &s).unwrap();
    let WeightedTerm { weight, term } = &c.affinity.preferred[0];
    assert_eq!(*weight, 7);
    let pod = labels(&[("app", "a")]);
    assert!(term.matches("x", &pod, Some(&labels(&[("team", "ml")]))));
    assert!(!term.matches("x", &pod, Some(&labels(&[("team", "web")]))));
    assert!(!term.matches("x", &pod, None));
    // Neither namespaces nor the pod's own: the selector names them.
    assert!(!term.matches("ns", &pod, None));
}

#[test]
fn match_label_keys_merge_the_pods_values_once() {
    let s = spec(json!({
        "containers": [{"name": "c"}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone",
             "matchLabelKeys": ["rev"], "mismatchLabelKeys": ["tenant"]}
        ]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["rev", "absent"]}]
    }));
    let own = labels(&[("app", "web"), ("rev", "2"), ("tenant", "a")]);
    let c = PodConstraints::from_k8s("ns", Some(&own), &s).unwrap();
    let term = &c.affinity.required_anti[0];
    assert!(term.matches(
        "ns",
        &labels(&[("app", "web"), ("rev", "2"), ("tenant", "b")]),
        None
    ));
    assert!(!term.matches(
        "ns",
        &labels(&[("app", "web"), ("rev", "1"), ("tenant", "b")]),
        None
    ));
    assert!(!term.matches(
        "ns",
        &labels(&[("app", "web"), ("rev", "2"), ("tenant", "a")]),
        None
    ));
    let spread = c.spread[0].selector.as_ref().unwrap();
    assert_eq!(spread.requirements.len(), 2, "{spread:?}");
    // Merging again (as the API server already did) changes nothing.
    let mut again = spread.clone();
    again.merge_label_keys(&["rev".into()], &[], &own);
    assert_eq!(&again, spread);
}

#[test]
fn spread_defaults_are_upstreams() {
    let s = spec(json!({
        "containers": [{"name": "c"}],
        "topologySpreadConstraints": [
            {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
             "minDomains": 3, "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor",
             "labelSelector": {"matchLabels": {"a": "b"}}}
        ]
    }));
    let c = PodConstraints::from_k8s("ns", None, &s).unwrap();
    let [soft, hard] = c.spread.as_slice() else {
        panic!("two constraints")
    };
    assert_eq!(soft.when_unsatisfiable, WhenUnsatisfiable::ScheduleAnyway);
    assert_eq!(soft.min_domains, 1);
    assert_eq!(soft.node_affinity_policy, InclusionPolicy::Honor);
    assert_eq!(soft.node_taints_policy, InclusionPolicy::Ignore);
    assert_eq!(soft.selector, None);
    assert_eq!(hard.min_domains, 3);
    assert_eq!(hard.node_affinity_policy, InclusionPolicy::Ignore);
    assert_eq!(hard.node_taints_policy, InclusionPolicy::Honor);
}

#[test]
fn bad_rules_are_errors_naming_the_field_and_what_is_accepted() {
    let cases = [
        (
            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Maybe"}]}),
            "topologySpreadConstraints[0].whenUnsatisfiable",
            "DoNotSchedule | ScheduleAnyway",
        ),
        (
            json!({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]}),
            "topologySpreadConstraints[0].maxSkew",
            "1 or more",
        ),
        (
            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "honor"}]}),
            "topologySpreadConstraints[0].nodeTaintsPolicy",
            "Honor | Ignore",
        ),
        (
            json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, "topologyKey": "z"}]}}}),
            "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0]",
            "In | NotIn | Exists | DoesNotExist",
        ),
        (
            json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 101, "podAffinityTerm": {"topologyKey": "z"}}]}}}),
            "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
            "1 to 100",
        ),
    ];
    for (mut v, field, accepted) in cases {
        v["containers"] = json!([{"name": "c"}]);
        let err = PodConstraints::from_k8s("ns", None, &spec(v)).unwrap_err();
        assert_eq!(err.field, field);
        assert!(err.detail.contains(accepted), "{err}");
    }
}

#[test]
fn pods_without_labels_or_rules_share_one_allocation() {
    let s = spec(json!({"containers": [{"name": "c"}]}));
    let a = PodConstraints::shared_from_k8s("ns", None, &s).unwrap();
    let b = PodConstraints::shared_from_k8s("other", None, &s).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let l = labels(&[("app", "x")]);
    let c = PodConstraints::shared_from_k8s("ns", Some(&l), &s).unwrap();
    assert!(!Arc::ptr_eq(&a, &c));
    assert!(!c.has_rules());
}
