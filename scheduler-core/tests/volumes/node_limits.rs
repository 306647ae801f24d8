//! The per-node limits of the volume plugins: VolumeRestrictions' exclusive
//! in-tree disks and NodeVolumeLimits' CSI attach counts.

use super::*;
use gputopo_api::k8s_openapi::api::storage::v1::CSINode;

/// A pod with `volumes` (inline in-tree disks), on `node` when given.
fn disk_pod(name: &str, node: Option<&str>, volumes: Value) -> Pod {
    let mut p = pod_json(name, &[]);
    p["spec"]["volumes"] = volumes;
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    serde_json::from_value(p).expect("a pod")
}

#[test]
fn exclusive_in_tree_disks_conflict_on_a_node_unless_both_are_read_only() {
    let gce = |name: &str, ro: bool| json!([{"name": "d", "gcePersistentDisk": {"pdName": name, "readOnly": ro}}]);
    let ebs = |id: &str| json!([{"name": "d", "awsElasticBlockStore": {"volumeID": id}}]);
    let iscsi = |iqn: &str, ro: bool| json!([{"name": "d", "iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": iqn, "lun": 0, "readOnly": ro}}]);
    let rbd = |mons: &[&str], image: &str, ro: bool| json!([{"name": "d", "rbd": {"monitors": mons, "image": image, "readOnly": ro}}]);
    let cases = [
        (gce("foo", false), gce("foo", false), true),
        (gce("foo", false), gce("bar", false), false),
        (gce("foo", true), gce("foo", true), false),
        (gce("foo", true), gce("foo", false), true),
        (ebs("vol-1"), ebs("vol-1"), true),
        (ebs("vol-1"), ebs("vol-2"), false),
        (iscsi("iqn.a", false), iscsi("iqn.a", true), true),
        (iscsi("iqn.a", true), iscsi("iqn.a", true), false),
        (iscsi("iqn.a", false), iscsi("iqn.b", false), false),
        (
            rbd(&["a", "b"], "img", false),
            rbd(&["c", "b"], "img", false),
            true,
        ),
        (rbd(&["a"], "img", false), rbd(&["c"], "img", false), false),
        (
            rbd(&["a"], "img", false),
            rbd(&["a"], "other", false),
            false,
        ),
        (rbd(&["a"], "img", true), rbd(&["a"], "img", true), false),
        (gce("foo", false), ebs("foo"), false),
    ];
    for (existing, incoming, conflict) in cases {
        let mut c = Cluster::new();
        c.bound
            .push(disk_pod("holder", Some("n1"), existing.clone()));
        let snap = c.snapshot();
        let pod = PendingPod::from_k8s(&disk_pod("p", None, incoming.clone())).expect("readable");
        let expected = if conflict {
            [Some(VolumeRefusal::DiskConflict), None, None]
        } else {
            [None, None, None]
        };
        assert_eq!(
            verdicts(&snap, &pod),
            expected,
            "{existing} then {incoming}"
        );
    }
    assert!(VolumeRefusal::DiskConflict.resolvable());
    assert_eq!(
        VolumeRefusal::DiskConflict.summary(""),
        "node(s) had no available disk"
    );
}

/// A CSINode for `node` allowing `count` volumes of `driver`.
fn csi_node(node: &str, driver: &str, count: i32) -> CSINode {
    serde_json::from_value(json!({"metadata": {"name": node},
        "spec": {"drivers": [{"name": driver, "nodeID": node, "allocatable": {"count": count}}]}}))
    .expect("a CSINode")
}

/// A volume of `driver` bound to `claim`, reachable anywhere.
fn csi_volume(name: &str, driver: &str, claim: &str) -> PersistentVolume {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                 "capacity": {"storage": "1Gi"}, "csi": {"driver": driver, "volumeHandle": format!("h-{name}")},
                 "claimRef": {"namespace": "default", "name": claim}},
        "status": {"phase": "Bound"}}))
    .expect("a volume")
}

#[test]
fn a_csi_drivers_attach_limit_counts_distinct_volumes_on_the_node() {
    let mut c = Cluster::new();
    // n1 allows 2 volumes of the driver and has one attached (held by a
    // bound pod); n2 allows 1 and has none; n3 has no CSINode: no limit.
    c.csi_nodes.push(csi_node("n1", "csi.example.com", 2));
    c.csi_nodes.push(csi_node("n2", "csi.example.com", 1));
    for (claim, volume) in [("held", "v-held"), ("a", "v-a"), ("b", "v-b")] {
        c.claims.push(claim_bound(claim, volume));
        c.volumes.push(csi_volume(volume, "csi.example.com", claim));
    }
    let mut holder = pod_json("holder", &["held"]);
    holder["spec"]["nodeName"] = json!("n1");
    c.bound.push(serde_json::from_value(holder).expect("a pod"));
    let snap = c.snapshot();
    use VolumeRefusal::TooManyVolumes;
    // One new volume: 2 on n1 (the limit), 1 on n2.
    assert_eq!(verdicts(&snap, &pending(&["a"])), [None, None, None]);
    // Two new volumes: 3 on n1, 2 on n2.
    assert_eq!(
        verdicts(&snap, &pending(&["a", "b"])),
        [Some(TooManyVolumes), Some(TooManyVolumes), None]
    );
    // The volume already attached there does not count twice.
    assert_eq!(
        verdicts(&snap, &pending(&["held", "a"])),
        [None, Some(TooManyVolumes), None]
    );
    // A claim still waiting counts under its class's provisioner.
    c.claims.push(claim("later", "fast", "1Gi", json!({})));
    let snap = c.snapshot();
    assert_eq!(
        verdicts(&snap, &pending(&["a", "later"])),
        [Some(TooManyVolumes), Some(TooManyVolumes), None]
    );
    assert_eq!(
        TooManyVolumes.summary(""),
        "node(s) exceed max volume count"
    );
}

fn claim_bound(name: &str, volume: &str) -> PersistentVolumeClaim {
    claim(name, "fast", "1Gi", json!({"spec": {"volumeName": volume}}))
}

/// A pod with an inline EBS volume (`awsElasticBlockStore`), bound to
/// `node` when given.
fn ebs_pod(name: &str, volume_id: &str, node: Option<&str>) -> serde_json::Value {
    let mut pod = json!({"metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c"}],
                 "volumes": [{"name": "data", "awsElasticBlockStore": {"volumeID": volume_id}}]}});
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    pod
}

/// In-tree volumes CSI migration moved (here EBS) count against their CSI
/// driver's limit on a node whose CSINode lists the plugin as migrated, as
/// upstream's CSILimits counts them; elsewhere they count nowhere.
#[test]
fn in_tree_volumes_count_under_their_csi_driver_where_the_node_migrated_them() {
    let mut c = Cluster::new();
    // n1: EBS migrated, 1 volume allowed; n2: 1 allowed, not migrated; n3:
    // no CSINode.
    let mut migrated = csi_node("n1", "ebs.csi.aws.com", 1);
    migrated.metadata.annotations = Some(
        [(
            "storage.alpha.kubernetes.io/migrated-plugins".to_string(),
            "kubernetes.io/gce-pd, kubernetes.io/aws-ebs".to_string(),
        )]
        .into(),
    );
    c.csi_nodes.push(migrated);
    c.csi_nodes.push(csi_node("n2", "ebs.csi.aws.com", 1));
    for node in ["n1", "n2"] {
        let holder = ebs_pod(&format!("holder-{node}"), "vol-1", Some(node));
        c.bound.push(serde_json::from_value(holder).expect("a pod"));
    }
    // A PersistentVolume of the in-tree kind behind a claim, and a class
    // with the in-tree provisioner.
    c.claims.push(claim_bound("ebs-claim", "ebs-pv"));
    c.volumes.push(
        serde_json::from_value(json!({"metadata": {"name": "ebs-pv"},
            "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                     "capacity": {"storage": "1Gi"},
                     "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-9"},
                     "claimRef": {"namespace": "default", "name": "ebs-claim"}},
            "status": {"phase": "Bound"}}))
        .expect("a volume"),
    );
    c.classes.push(class(
        "gp2",
        "kubernetes.io/aws-ebs",
        "WaitForFirstConsumer",
        Value::Null,
    ));
    c.claims.push(claim("ebs-later", "gp2", "1Gi", json!({})));
    let snap = c.snapshot();
    use VolumeRefusal::TooManyVolumes;
    let inline = |id: &str| {
        let pod: Pod = serde_json::from_value(ebs_pod("p", id, None)).expect("a pod");
        PendingPod::from_k8s(&pod).expect("readable")
    };
    // Another EBS volume: 2 on n1 (limit 1); n2 does not count in-tree ones.
    assert_eq!(
        verdicts(&snap, &inline("vol-2")),
        [Some(TooManyVolumes), None, None]
    );
    // The one already attached there (named with its zone) counts once.
    assert_eq!(
        verdicts(&snap, &inline("aws://us-east-1a/vol-1")),
        [None, None, None]
    );
    // A PersistentVolume's in-tree source, and a claim its in-tree
    // provisioner will make, count the same way.
    assert_eq!(
        verdicts(&snap, &pending(&["ebs-claim"])),
        [Some(TooManyVolumes), None, None]
    );
    assert_eq!(
        verdicts(&snap, &pending(&["ebs-later"])),
        [Some(TooManyVolumes), None, None]
    );
}

/// Where a node has no CSINode, upstream still reads a driver's limit from
/// the Node's legacy `attachable-volumes-csi-<driver>` allocatable; a
/// CSINode's count wins over it.
#[test]
fn a_node_without_a_csinode_takes_its_limit_from_the_legacy_allocatable() {
    let mut c = Cluster::new();
    c.allocatable = vec![
        ("n3", "attachable-volumes-csi-csi.example.com", 1),
        ("n1", "attachable-volumes-csi-csi.example.com", 1),
    ];
    // n1's CSINode allows 2 and wins; n2 has neither: no limit.
    c.csi_nodes.push(csi_node("n1", "csi.example.com", 2));
    for (claim, volume) in [("held", "v-held"), ("a", "v-a")] {
        c.claims.push(claim_bound(claim, volume));
        c.volumes.push(csi_volume(volume, "csi.example.com", claim));
    }
    for node in ["n1", "n3"] {
        let mut holder = pod_json(&format!("holder-{node}"), &["held"]);
        holder["spec"]["nodeName"] = json!(node);
        c.bound.push(serde_json::from_value(holder).expect("a pod"));
    }
    let snap = c.snapshot();
    assert_eq!(
        verdicts(&snap, &pending(&["a"])),
        [None, None, Some(VolumeRefusal::TooManyVolumes)]
    );
}
