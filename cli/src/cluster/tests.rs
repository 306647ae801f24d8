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

/// The storage kinds reach the decision: a pod whose claim's local volume
/// is on one node is refused on the other with kube-scheduler's words, and
/// a malformed claim is an error naming it.
#[test]
fn a_list_carries_claims_volumes_and_classes_into_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.yaml");
    let list = |claim_size: &str| {
        format!(
            "apiVersion: v1\nkind: List\nitems:\n\
             - {{apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {{name: local}}, provisioner: kubernetes.io/no-provisioner, volumeBindingMode: WaitForFirstConsumer}}\n\
             - {{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {{name: data, namespace: ml}}, spec: {{storageClassName: local, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: {claim_size}}}}}}}}}\n\
             - apiVersion: v1\n  kind: PersistentVolume\n  metadata: {{name: disk-b}}\n  spec:\n    storageClassName: local\n    capacity: {{storage: 100Gi}}\n    accessModes: [ReadWriteOnce]\n    local: {{path: /mnt}}\n    nodeAffinity: {{required: {{nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [b]}}]}}]}}}}\n  status: {{phase: Available}}\n\
             - {{apiVersion: v1, kind: Node, metadata: {{name: a, labels: {{kubernetes.io/hostname: a}}}}}}\n\
             - {{apiVersion: v1, kind: Node, metadata: {{name: b, labels: {{kubernetes.io/hostname: b}}}}}}\n"
        )
    };
    std::fs::write(&path, list("10Gi")).unwrap();
    let cluster = load(&path, &Overrides::default()).unwrap();
    let storage = cluster.snapshot.storage();
    assert!(storage.watched);
    assert_eq!(
        (
            storage.claims.len(),
            storage.volumes.len(),
            storage.classes.len()
        ),
        (1, 1, 1)
    );
    let pod: gputopo_api::k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(
        "metadata: {name: p, namespace: ml}\nspec:\n  containers: [{name: c}]\n  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]\n",
    )
    .unwrap();
    let explanation =
        gputopo_scheduler_core::explain::explain_pod(&cluster.snapshot, &pod, &cluster.config);
    let a = explanation
        .rows
        .iter()
        .find(|r| r.node == "a")
        .expect("row a");
    assert!(
        a.reason.contains("PersistentVolume") || a.filter_reason.is_some(),
        "{}",
        a.reason
    );
    assert_eq!(
        a.filter_reason.as_ref().map(|r| r.summaries()),
        Some(vec![
            "node(s) didn't find available persistent volumes to bind".to_string()
        ])
    );
    let b = explanation
        .rows
        .iter()
        .find(|r| r.node == "b")
        .expect("row b");
    assert!(b.filter_reason.is_none(), "{}", b.reason);

    std::fs::write(&path, list("lots")).unwrap();
    let e = load(&path, &Overrides::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("ml/data") && e.contains("spec.resources.requests.storage"),
        "{e}"
    );
}
