//! VolumeBinding's storage capacity check for claims to provision, as
//! kube-scheduler's `hasEnoughCapacity`: only drivers whose CSIDriver says
//! `storageCapacity: true` are checked; a CSIStorageCapacity counts for a
//! node when its class is the claim's, its `nodeTopology` selects the node
//! and its `maximumVolumeSize` (else `capacity`) holds the claim.

use super::*;
use gputopo_api::k8s_openapi::api::storage::v1::{CSIDriver, CSIStorageCapacity};

fn driver(name: &str, publishes: bool) -> CSIDriver {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"storageCapacity": publishes}}))
    .expect("a driver")
}

fn capacity(
    name: &str,
    class: &str,
    zone: Option<&str>,
    capacity: &str,
    max: Option<&str>,
) -> CSIStorageCapacity {
    let mut c = json!({"metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": class, "capacity": capacity});
    if let Some(z) = zone {
        c["nodeTopology"] = json!({"matchLabels": {ZONE: z}});
    }
    if let Some(m) = max {
        c["maximumVolumeSize"] = json!(m);
    }
    serde_json::from_value(c).expect("a capacity")
}

const SHORT: Option<VolumeRefusal> = Some(VolumeRefusal::NotEnoughSpace);

#[test]
fn a_claim_to_provision_goes_where_its_driver_reports_room() {
    let mut c = Cluster::new();
    c.drivers = vec![driver("csi.example.com", true)];
    c.capacities = vec![
        capacity("z1", "fast", Some("z1"), "100Gi", None),
        // z2 has room in all, but no one volume over 5Gi.
        capacity("z2", "fast", Some("z2"), "1Ti", Some("5Gi")),
    ];
    c.claims = vec![claim("data", "fast", "50Gi", Value::Null)];
    let pod = pending(&["data"]);
    assert_eq!(verdicts(&c.snapshot(), &pod), [None, None, SHORT]);

    // Bigger than any: every node says so, in kube-scheduler's words.
    c.claims = vec![claim("data", "fast", "500Gi", Value::Null)];
    let snapshot = c.snapshot();
    assert_eq!(verdicts(&snapshot, &pod), [SHORT, SHORT, SHORT]);
    assert!(
        unschedulable_message(&snapshot, &pod)
            .contains("3 node(s) did not have enough free storage"),
        "{}",
        unschedulable_message(&snapshot, &pod)
    );

    // A capacity without nodeTopology reaches no node.
    c.capacities = vec![capacity("anywhere", "fast", None, "10Ti", None)];
    c.claims = vec![claim("data", "fast", "50Gi", Value::Null)];
    assert_eq!(verdicts(&c.snapshot(), &pod), [SHORT, SHORT, SHORT]);

    // Another class's capacity does not count.
    c.capacities = vec![capacity("z1", "zonal", Some("z1"), "10Ti", None)];
    assert_eq!(verdicts(&c.snapshot(), &pod), [SHORT, SHORT, SHORT]);
}

#[test]
fn drivers_that_publish_nothing_and_claims_without_a_size_are_not_checked() {
    let mut c = Cluster::new();
    c.claims = vec![claim("data", "fast", "50Gi", Value::Null)];
    let pod = pending(&["data"]);
    // No CSIDriver object at all, then one that does not publish capacity.
    assert_eq!(verdicts(&c.snapshot(), &pod), [None, None, None]);
    c.drivers = vec![driver("csi.example.com", false)];
    assert_eq!(verdicts(&c.snapshot(), &pod), [None, None, None]);
    // Publishing, with nothing published: a claim without a size still fits.
    c.drivers = vec![driver("csi.example.com", true)];
    c.claims = vec![claim(
        "data",
        "fast",
        "1Gi",
        json!({"spec": {"resources": {"requests": null}}}),
    )];
    assert_eq!(verdicts(&c.snapshot(), &pod), [None, None, None]);
}

#[test]
fn an_unreadable_capacity_is_an_error_naming_the_field() {
    let bad: CSIStorageCapacity = serde_json::from_value(json!({
        "metadata": {"name": "bad", "namespace": "kube-system"},
        "storageClassName": "fast", "capacity": "lots"}))
    .expect("a capacity");
    let errors = Storage::default().read_capacity([], [&bad]);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0]
            .to_string()
            .contains("CSIStorageCapacity kube-system/bad: capacity"),
        "{}",
        errors[0]
    );
}
