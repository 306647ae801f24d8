//! The volume plugins through the public decision: claims, volumes and
//! classes written as Kubernetes JSON and read by `snapshot::storage`, as
//! the scheduler reads them; the verdict per node and, for the node chosen,
//! the writes `volume_plan` asks for (a static volume's `claimRef`, a
//! provisioner's `selected-node`). The scenarios are those of kube-
//! scheduler's VolumeBinding, VolumeZone and VolumeRestrictions tests.

mod capacity;
mod node_limits;

use gputopo_api::k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use gputopo_api::k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::explain::explain;
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::from_k8s::bound_pod_input;
use gputopo_scheduler_core::snapshot::{NodeInput, Snapshot, SnapshotBuilder, Storage, storage};
use gputopo_scheduler_core::volumes::{VolumePlan, VolumeRefusal, volume_plan};
use serde_json::{Value, json};

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

fn node(name: &str, zone: &str) -> NodeInput {
    NodeInput {
        name: name.to_string(),
        labels: [(HOST, name), (ZONE, zone)]
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        ..NodeInput::default()
    }
}

fn class(name: &str, provisioner: &str, mode: &str, topologies: Value) -> StorageClass {
    let mut c = json!({"metadata": {"name": name}, "provisioner": provisioner,
        "volumeBindingMode": mode});
    if !topologies.is_null() {
        c["allowedTopologies"] = topologies;
    }
    serde_json::from_value(c).expect("a class")
}

fn claim(name: &str, class: &str, size: &str, extra: Value) -> PersistentVolumeClaim {
    let mut c = json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": size}}}});
    merge(&mut c, &extra);
    serde_json::from_value(c).expect("a claim")
}

/// A local volume on `host`, available.
fn local_volume(name: &str, class: &str, size: &str, host: &str, extra: Value) -> PersistentVolume {
    let mut v = json!({"metadata": {"name": name},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "capacity": {"storage": size}, "local": {"path": "/mnt/disk"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": HOST, "operator": "In", "values": [host]}]}]}}},
        "status": {"phase": "Available"}});
    merge(&mut v, &extra);
    serde_json::from_value(v).expect("a volume")
}

fn merge(base: &mut Value, extra: &Value) {
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            match b.get_mut(k) {
                Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                _ => {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

fn pod_json(name: &str, claims: &[&str]) -> Value {
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": format!("v-{c}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    json!({"metadata": {"name": name, "namespace": "default"},
           "spec": {"containers": [{"name": "c"}], "volumes": volumes}})
}

fn pending(claims: &[&str]) -> PendingPod {
    let pod: Pod = serde_json::from_value(pod_json("p", claims)).expect("a pod");
    PendingPod::from_k8s(&pod).expect("readable")
}

struct Cluster {
    claims: Vec<PersistentVolumeClaim>,
    volumes: Vec<PersistentVolume>,
    classes: Vec<StorageClass>,
    csi_nodes: Vec<CSINode>,
    /// CSIDrivers and CSIStorageCapacities (`capacity.rs`).
    drivers: Vec<gputopo_api::k8s_openapi::api::storage::v1::CSIDriver>,
    capacities: Vec<gputopo_api::k8s_openapi::api::storage::v1::CSIStorageCapacity>,
    bound: Vec<Pod>,
    /// `(node, resource, count)` added to a node's allocatable.
    allocatable: Vec<(&'static str, &'static str, i64)>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            claims: Vec::new(),
            volumes: Vec::new(),
            classes: vec![
                class(
                    "local",
                    "kubernetes.io/no-provisioner",
                    "WaitForFirstConsumer",
                    Value::Null,
                ),
                class(
                    "fast",
                    "csi.example.com",
                    "WaitForFirstConsumer",
                    Value::Null,
                ),
                class(
                    "zonal",
                    "csi.example.com",
                    "WaitForFirstConsumer",
                    json!([{"matchLabelExpressions": [{"key": ZONE, "values": ["z1"]}]}]),
                ),
                class("now", "csi.example.com", "Immediate", Value::Null),
            ],
            csi_nodes: Vec::new(),
            drivers: Vec::new(),
            capacities: Vec::new(),
            bound: Vec::new(),
            allocatable: Vec::new(),
        }
    }

    fn snapshot(&self) -> Snapshot {
        let (mut storage, errors) =
            storage(&self.claims, &self.volumes, &self.classes, &self.csi_nodes);
        assert!(errors.is_empty(), "{errors:?}");
        let errors = storage.read_capacity(&self.drivers, &self.capacities);
        assert!(errors.is_empty(), "{errors:?}");
        let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
        for mut n in [node("n1", "z1"), node("n2", "z1"), node("n3", "z2")] {
            for (_, resource, count) in self.allocatable.iter().filter(|(at, ..)| *at == n.name) {
                n.allocatable.set(resource, *count);
            }
            b.node(n);
        }
        for p in &self.bound {
            b.pod(bound_pod_input(p).expect("readable").expect("bound"));
        }
        b.storage(storage);
        b.build().expect("a snapshot")
    }
}

/// Per node n1, n2, n3: `None` when it may take the pod, else the volume
/// refusal (any other reason fails the test).
fn verdicts(snapshot: &Snapshot, pod: &PendingPod) -> Vec<Option<VolumeRefusal>> {
    let mut rows = explain(snapshot, pod, &SchedulerConfig::default()).rows;
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    rows.into_iter()
        .map(|r| match r.filter_reason {
            None => None,
            Some(FilterReason::Volume { refusal, .. }) => Some(refusal),
            Some(other) => panic!("node {} refused for another reason: {other}", r.node),
        })
        .collect()
}

/// The `FailedScheduling` message of a pod no node takes.
fn unschedulable_message(snapshot: &Snapshot, pod: &PendingPod) -> String {
    match schedule(snapshot, pod, &SchedulerConfig::default()) {
        Decision::Unschedulable(u) => u.message,
        other => panic!("expected no node, got {other:?}"),
    }
}

fn plan_on(snapshot: &Snapshot, pod: &PendingPod, node: &str) -> VolumePlan {
    volume_plan(snapshot, pod, snapshot.node_id(node).expect("a node")).expect("a plan")
}

#[test]
fn a_bound_local_volume_admits_only_its_node() {
    let mut c = Cluster::new();
    c.claims.push(claim(
        "data",
        "local",
        "10Gi",
        json!({"spec": {"volumeName": "pv-n2"}}),
    ));
    c.volumes.push(local_volume("pv-n2", "local", "10Gi", "n2",
        json!({"spec": {"claimRef": {"namespace": "default", "name": "data"}}, "status": {"phase": "Bound"}})));
    let snap = c.snapshot();
    let pod = pending(&["data"]);
    use VolumeRefusal::NodeConflict;
    assert_eq!(
        verdicts(&snap, &pod),
        [Some(NodeConflict), None, Some(NodeConflict)]
    );
    assert!(plan_on(&snap, &pod, "n2").is_empty());
    match schedule(&snap, &pod, &SchedulerConfig::default()) {
        Decision::Placed(p) => assert_eq!(p.node, "n2"),
        other => panic!("expected n2, got {other:?}"),
    }
    // Its volume on a node that is gone: every node says so.
    c.volumes[0] = local_volume("pv-n2", "local", "10Gi", "n9", json!({}));
    let message = unschedulable_message(&c.snapshot(), &pod);
    assert!(
        message.contains("3 node(s) had volume node affinity conflict"),
        "{message}"
    );
}

#[test]
fn a_wait_for_first_consumer_claim_binds_the_smallest_local_volume_that_fits() {
    let mut c = Cluster::new();
    c.claims.push(claim("data", "local", "10Gi", json!({})));
    c.volumes
        .push(local_volume("big-n1", "local", "100Gi", "n1", json!({})));
    c.volumes
        .push(local_volume("small-n1", "local", "20Gi", "n1", json!({})));
    c.volumes
        .push(local_volume("tiny-n2", "local", "5Gi", "n2", json!({})));
    c.volumes.push(local_volume(
        "taken-n3",
        "local",
        "50Gi",
        "n3",
        json!({"spec": {"claimRef": {"namespace": "default", "name": "other"}}}),
    ));
    let snap = c.snapshot();
    let pod = pending(&["data"]);
    use VolumeRefusal::BindConflict;
    // n2's volume is too small, n3's is claimed by another claim; the
    // local class cannot provision.
    assert_eq!(
        verdicts(&snap, &pod),
        [None, Some(BindConflict), Some(BindConflict)]
    );
    assert_eq!(
        plan_on(&snap, &pod, "n1"),
        VolumePlan {
            binds: vec![("data".into(), "small-n1".into())],
            provisions: vec![],
        }
    );
}

#[test]
fn two_claims_of_one_pod_take_two_volumes() {
    let mut c = Cluster::new();
    c.claims.push(claim("a", "local", "10Gi", json!({})));
    c.claims.push(claim("b", "local", "20Gi", json!({})));
    c.volumes
        .push(local_volume("v1", "local", "30Gi", "n1", json!({})));
    c.volumes
        .push(local_volume("v2", "local", "25Gi", "n1", json!({})));
    c.volumes
        .push(local_volume("v3", "local", "40Gi", "n2", json!({})));
    let snap = c.snapshot();
    let pod = pending(&["a", "b"]);
    use VolumeRefusal::BindConflict;
    // n2 has one volume for two claims.
    assert_eq!(
        verdicts(&snap, &pod),
        [None, Some(BindConflict), Some(BindConflict)]
    );
    let plan = plan_on(&snap, &pod, "n1");
    assert_eq!(
        plan.binds,
        [
            ("a".to_string(), "v2".to_string()),
            ("b".into(), "v1".into())
        ]
    );
}

#[test]
fn a_claim_selector_access_modes_and_a_pre_bound_volume_are_honoured() {
    let mut c = Cluster::new();
    c.claims.push(claim(
        "sel",
        "local",
        "1Gi",
        json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}}),
    ));
    c.claims.push(claim(
        "rwx",
        "local",
        "1Gi",
        json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
    ));
    c.volumes
        .push(local_volume("plain-n1", "local", "5Gi", "n1", json!({})));
    c.volumes.push(local_volume(
        "gold-n2",
        "local",
        "5Gi",
        "n2",
        json!({"metadata": {"labels": {"tier": "gold"}}}),
    ));
    c.volumes.push(local_volume(
        "rwx-n3",
        "local",
        "5Gi",
        "n3",
        json!({"spec": {"accessModes": ["ReadWriteMany", "ReadWriteOnce"]}}),
    ));
    let snap = c.snapshot();
    use VolumeRefusal::BindConflict;
    assert_eq!(
        verdicts(&snap, &pending(&["sel"])),
        [Some(BindConflict), None, Some(BindConflict)]
    );
    assert_eq!(
        verdicts(&snap, &pending(&["rwx"])),
        [Some(BindConflict), Some(BindConflict), None]
    );

    // A volume pre-bound to the claim wins even though it is bigger.
    let mut c = Cluster::new();
    c.claims.push(claim("data", "local", "1Gi", json!({})));
    c.volumes
        .push(local_volume("small-n1", "local", "2Gi", "n1", json!({})));
    c.volumes.push(local_volume(
        "mine-n1",
        "local",
        "50Gi",
        "n1",
        json!({"spec": {"claimRef": {"namespace": "default", "name": "data"}}}),
    ));
    let snap = c.snapshot();
    assert_eq!(
        plan_on(&snap, &pending(&["data"]), "n1").binds,
        [("data".to_string(), "mine-n1".to_string())]
    );
}

#[test]
fn a_provisioner_provisions_where_its_allowed_topologies_reach() {
    let mut c = Cluster::new();
    c.claims.push(claim("fast", "fast", "10Gi", json!({})));
    c.claims.push(claim("zonal", "zonal", "10Gi", json!({})));
    let snap = c.snapshot();
    assert_eq!(verdicts(&snap, &pending(&["fast"])), [None, None, None]);
    assert_eq!(
        plan_on(&snap, &pending(&["fast"]), "n3"),
        VolumePlan {
            binds: vec![],
            provisions: vec!["fast".into()]
        }
    );
    use VolumeRefusal::BindConflict;
    assert_eq!(
        verdicts(&snap, &pending(&["zonal"])),
        [None, None, Some(BindConflict)]
    );
    // A claim a provisioner already works on for n2 stays there.
    let mut c = Cluster::new();
    c.claims.push(claim(
        "fast",
        "fast",
        "10Gi",
        json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n2"}}}),
    ));
    let snap = c.snapshot();
    assert_eq!(
        verdicts(&snap, &pending(&["fast"])),
        [Some(BindConflict), None, Some(BindConflict)]
    );
    assert!(plan_on(&snap, &pending(&["fast"]), "n2").is_empty());
}

#[test]
fn claims_no_node_can_help_refuse_every_node_naming_the_claim() {
    let mut c = Cluster::new();
    c.claims.push(claim("now", "now", "1Gi", json!({})));
    c.claims.push(claim("gone", "fast", "1Gi", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["kubernetes.io/pvc-protection"]}})));
    let snap = c.snapshot();
    let cases = [
        (
            vec!["missing"],
            VolumeRefusal::ClaimNotFound,
            "persistentvolumeclaim \"missing\" not found",
        ),
        (
            vec!["now"],
            VolumeRefusal::UnboundImmediate,
            "pod has unbound immediate PersistentVolumeClaims",
        ),
        (
            vec!["gone"],
            VolumeRefusal::ClaimDeleting,
            "persistentvolumeclaim \"gone\" is being deleted",
        ),
    ];
    for (claims, refusal, text) in cases {
        let pod = pending(&claims);
        assert_eq!(verdicts(&snap, &pod), [Some(refusal); 3]);
        let message = unschedulable_message(&snap, &pod);
        assert!(message.contains(&format!("3 {text}")), "{message}");
    }
    // An ephemeral volume's claim is `<pod>-<volume>`.
    let mut json = pod_json("p", &[]);
    json["spec"]["volumes"] = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]);
    let pod: Pod = serde_json::from_value(json).expect("a pod");
    let pod = PendingPod::from_k8s(&pod).expect("readable");
    assert_eq!(
        verdicts(&snap, &pod),
        [Some(VolumeRefusal::EphemeralClaimPending); 3]
    );
    let mut c = Cluster::new();
    c.claims.push(claim("p-scratch", "fast", "1Gi", json!({})));
    assert_eq!(verdicts(&c.snapshot(), &pod), [None, None, None]);
}

#[test]
fn a_zonal_volume_admits_nodes_of_its_zones_only() {
    let mut c = Cluster::new();
    c.claims.push(claim(
        "data",
        "now",
        "1Gi",
        json!({"spec": {"volumeName": "pv"}}),
    ));
    let mut v = local_volume("pv", "now", "1Gi", "n1", json!({}));
    v.spec.as_mut().expect("spec").node_affinity = None;
    v.metadata.labels = Some([(ZONE.to_string(), "z2__z9".to_string())].into());
    c.volumes.push(v);
    let snap = c.snapshot();
    use VolumeRefusal::ZoneConflict;
    assert_eq!(
        verdicts(&snap, &pending(&["data"])),
        [Some(ZoneConflict), Some(ZoneConflict), None]
    );
}

#[test]
fn a_read_write_once_pod_claim_in_use_refuses_every_node_resolvably() {
    let mut c = Cluster::new();
    c.claims.push(claim(
        "solo",
        "fast",
        "1Gi",
        json!({"spec": {"accessModes": ["ReadWriteOncePod"], "volumeName": "pv"}}),
    ));
    let mut v = local_volume("pv", "fast", "1Gi", "n1", json!({}));
    v.spec.as_mut().expect("spec").node_affinity = None;
    c.volumes.push(v);
    let mut holder = pod_json("holder", &["solo"]);
    holder["spec"]["nodeName"] = json!("n1");
    c.bound.push(serde_json::from_value(holder).expect("a pod"));
    let snap = c.snapshot();
    assert_eq!(
        verdicts(&snap, &pending(&["solo"])),
        [Some(VolumeRefusal::ReadWriteOncePod); 3]
    );
    assert!(VolumeRefusal::ReadWriteOncePod.resolvable());
    // Without the holder, any node.
    c.bound.clear();
    assert_eq!(
        verdicts(&c.snapshot(), &pending(&["solo"])),
        [None, None, None]
    );
}

#[test]
fn unreadable_objects_are_errors_naming_the_field() {
    let bad = claim("bad", "fast", "ten gigs", json!({}));
    let (read, errors) = storage([&bad], [], [], []);
    assert!(read.claims.is_empty());
    assert_eq!(errors.len(), 1);
    let text = errors[0].to_string();
    assert!(
        text.contains("default/bad") && text.contains("spec.resources.requests.storage"),
        "{text}"
    );
    let mut mode = claim("mode", "fast", "1Gi", json!({}));
    mode.spec.as_mut().expect("spec").access_modes = Some(vec!["ReadWriteSometimes".into()]);
    let (_, errors) = storage([&mode], [], [], []);
    assert!(
        errors[0].to_string().contains("accepted: ReadWriteOnce"),
        "{}",
        errors[0]
    );
}
