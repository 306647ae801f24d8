//! The scheduler's RBAC, and the extender's, is exactly the listed rules,
//! in the chart and in `daemonset/`.

use super::helm::render_ok;
use super::objects::{permissions, plain_manifests, scheduler_object, triples};
use super::values::EXTENDER_VALUES;
use serde_json::json;

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_schedulers_rbac_is_exactly_the_least_it_needs() {
    // Widening either role (a verb, a resource, a wildcard) fails here: say
    // in docs/deploy.md and the template why the scheduler needs it first.
    let cluster_wide = triples(&[
        ("", "pods", &["get", "list", "watch"]),
        ("", "nodes", &["get", "list", "watch"]),
        ("", "namespaces", &["get", "list", "watch"]),
        ("", "services", &["get", "list", "watch"]),
        ("", "replicationcontrollers", &["get", "list", "watch"]),
        ("apps", "replicasets", &["get", "list", "watch"]),
        ("apps", "statefulsets", &["get", "list", "watch"]),
        (
            "",
            "persistentvolumeclaims",
            &["get", "list", "watch", "patch"],
        ),
        ("", "persistentvolumes", &["get", "list", "watch", "update"]),
        (
            "storage.k8s.io",
            "storageclasses",
            &["get", "list", "watch"],
        ),
        ("storage.k8s.io", "csinodes", &["get", "list", "watch"]),
        ("storage.k8s.io", "csidrivers", &["get", "list", "watch"]),
        (
            "storage.k8s.io",
            "csistoragecapacities",
            &["get", "list", "watch"],
        ),
        ("gputopo.dev", "gputopologies", &["get", "list", "watch"]),
        (
            "scheduling.x-k8s.io",
            "podgroups",
            &["get", "list", "watch"],
        ),
        ("scheduling.k8s.io", "podgroups", &["get", "list", "watch"]),
        ("scheduling.x-k8s.io", "podgroups/status", &["patch"]),
        ("scheduling.k8s.io", "podgroups/status", &["patch"]),
        ("jobset.x-k8s.io", "jobsets", &["get", "list", "watch"]),
        (
            "leaderworkerset.x-k8s.io",
            "leaderworkersets",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "resourceslices",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "deviceclasses",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "devicetaintrules",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "resourceclaims",
            &["get", "list", "watch", "update", "create", "delete"],
        ),
        ("resource.k8s.io", "resourceclaims/status", &["update"]),
        ("", "pods/binding", &["create"]),
        ("", "nodes/status", &["patch"]),
        ("", "pods/status", &["patch"]),
        ("", "pods/eviction", &["create"]),
        ("events.k8s.io", "events", &["create", "patch"]),
        ("", "events", &["create", "patch"]),
    ]);
    let leases = triples(&[(
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update"],
    )]);
    for (what, docs) in [
        ("the chart", render_ok("team-a", "gpu-infra", None)),
        ("daemonset/", plain_manifests()),
    ] {
        let role = scheduler_object(&docs, "ClusterRole").expect("a scheduler ClusterRole");
        assert_eq!(permissions(role), cluster_wide, "{what}: ClusterRole");
        let role = scheduler_object(&docs, "Role").expect("a scheduler Role");
        assert_eq!(permissions(role), leases, "{what}: Role");
        let namespace = role["metadata"]["namespace"].clone();
        let account = scheduler_object(&docs, "ServiceAccount").expect("a ServiceAccount");
        let subject = json!([{
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": namespace,
        }]);
        for (binding, role_kind) in [
            ("ClusterRoleBinding", "ClusterRole"),
            ("RoleBinding", "Role"),
        ] {
            let binding = scheduler_object(&docs, binding).expect("a binding");
            assert_eq!(binding["subjects"], subject, "{what}: {binding}");
            assert_eq!(binding["roleRef"]["kind"], role_kind, "{what}");
            assert_eq!(
                binding["roleRef"]["name"],
                scheduler_object(&docs, role_kind).expect("the role")["metadata"]["name"],
                "{what}"
            );
        }
        // Nothing else in the chart grants the scheduler anything.
        let bound_to_it = docs
            .iter()
            .filter(|d| {
                d["kind"].as_str().is_some_and(|k| k.ends_with("Binding"))
                    && d["subjects"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|s| s["name"] == account["metadata"]["name"]))
            })
            .count();
        assert_eq!(bound_to_it, 2, "{what}");
    }
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_extenders_rbac_is_exactly_what_it_uses() {
    // The extender watches what it decides from (DRA's objects read only:
    // kube-scheduler allocates claims) and posts the binding, which carries
    // the GPU annotations; kube-scheduler writes the pod conditions and
    // does preemption; the extender's one event says when kube-scheduler
    // allocated a worse GPU set than gputopo would have. No PodGroups (no
    // gangs in extender mode), no lease (one replica).
    // `the_extender_binds_a_pod_with_exactly_the_charts_rbac` runs it under
    // exactly these rules.
    let cluster_wide = triples(&[
        ("", "pods", &["get", "list", "watch"]),
        ("", "nodes", &["get", "list", "watch"]),
        ("", "namespaces", &["get", "list", "watch"]),
        ("gputopo.dev", "gputopologies", &["get", "list", "watch"]),
        (
            "resource.k8s.io",
            "resourceslices",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "deviceclasses",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "devicetaintrules",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "resourceclaims",
            &["get", "list", "watch"],
        ),
        ("", "pods/binding", &["create"]),
        ("", "pods/status", &["patch"]),
        ("events.k8s.io", "events", &["create", "patch"]),
    ]);
    let docs = render_ok("team-a", "gpu-infra", Some(EXTENDER_VALUES));
    let role = scheduler_object(&docs, "ClusterRole").expect("a scheduler ClusterRole");
    assert_eq!(permissions(role), cluster_wide);
    assert!(scheduler_object(&docs, "Role").is_none(), "a lease Role");
    assert!(scheduler_object(&docs, "RoleBinding").is_none());
    let account = scheduler_object(&docs, "ServiceAccount").expect("a ServiceAccount");
    let binding = scheduler_object(&docs, "ClusterRoleBinding").expect("a binding");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "gpu-infra"}])
    );
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let bound_to_it = docs
        .iter()
        .filter(|d| {
            d["kind"].as_str().is_some_and(|k| k.ends_with("Binding"))
                && d["subjects"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s["name"] == account["metadata"]["name"]))
        })
        .count();
    assert_eq!(bound_to_it, 1);
}
