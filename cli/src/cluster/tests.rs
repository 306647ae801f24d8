//! Cluster files: names expanded, and the bounds on what one file builds.

use super::*;

#[test]
fn names_expand() {
    assert_eq!(expand("n-{i:03}", 7, Some(10)).unwrap(), "n-007");
    assert_eq!(expand("n-{i}", 7, Some(10)).unwrap(), "n-7");
    assert_eq!(expand("solo", 1, None).unwrap(), "solo");
    assert!(expand("solo", 1, Some(2)).is_err());
    assert!(expand("n-{i:x}", 1, Some(2)).is_err());
    assert_eq!(expand("n-{i:063}", 1, Some(2)).unwrap().len(), 65);
}

/// Found by fuzzing (scripts/fuzz): a padding wider than `format!`
/// takes panicked, and a huge `count` built nodes until memory ran out.
#[test]
fn padding_and_counts_are_bounded() {
    let e = expand("n-{i:0999999999}", 1, Some(2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("N up to 63"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let load_text = |text: &str| {
        let path = dir.path().join("cluster.yaml");
        std::fs::write(&path, text).unwrap();
        load(&path, &Overrides::default())
            .err()
            .map(|e| e.to_string())
    };
    let e = load_text("nodes:\n  - {name: \"n-{i}\", count: 4294967295}\n").unwrap();
    assert!(
        e.contains("nodes[0].count") && e.contains("at most 10000 nodes"),
        "{e}"
    );
    let e = load_text(
        "nodes: [{name: n}]\npods:\n  - {name: \"p-{i}\", node: n, count: 100000}\n  - {name: \"q-{i}\", node: n, count: 50001}\n",
    )
    .unwrap();
    assert!(e.contains("pods[1].count") && e.contains("150001"), "{e}");
    assert_eq!(
        load_text("nodes:\n  - {name: \"n-{i}\", count: 10000}\n"),
        None,
        "the limit itself is accepted"
    );
}

/// A `kubectl get -o yaml` List carries what inter-pod rules and default
/// spreading read: Namespaces' labels and the Services' and controllers'
/// selectors, into the snapshot the decision uses.
#[test]
fn a_list_carries_namespaces_and_owners_into_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.yaml");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: v1, kind: Namespace, metadata: {name: ml, labels: {team: ml}}}\n\
         - {apiVersion: v1, kind: Service, metadata: {name: web, namespace: ml}, spec: {selector: {app: web}}}\n\
         - apiVersion: apps/v1\n  kind: ReplicaSet\n  metadata: {name: web-1, namespace: ml}\n  \
         spec:\n    selector: {matchLabels: {app: web, rev: '1'}}\n    template: {metadata: {labels: {app: web, rev: '1'}}}\n\
         - {apiVersion: v1, kind: Node, metadata: {name: n}}\n",
    )
    .unwrap();
    let cluster = load(&path, &Overrides::default()).unwrap();
    let snapshot = &cluster.snapshot;
    assert_eq!(
        snapshot.namespace_labels("ml").and_then(|l| l.get("team")),
        Some(&"ml".to_string())
    );
    let owners = snapshot.workload_selectors();
    assert_eq!(owners.services.len(), 1);
    assert_eq!(owners.replica_sets.len(), 1);
    let e = {
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n",
        )
        .unwrap();
        load(&path, &Overrides::default())
            .err()
            .expect("a ConfigMap is refused")
            .to_string()
    };
    assert!(e.contains("Namespace, Service, ReplicaSet"), "{e}");
}
