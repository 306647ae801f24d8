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
