//! What a decision reads beside nodes and pods reaches the daemon's cycle
//! (the live snapshot, not only a snapshot built whole): claims, volumes
//! and classes; the owners' selectors that give default spreading.

use super::fixtures::{World, pod};
use super::{Harness, fake::Write};
use serde_json::json;
use std::sync::Arc;

/// `pod` with `labels` and a volume mounting the claim `claim`.
fn with_claim(
    mut p: k8s_openapi::api::core::v1::Pod,
    claim: &str,
) -> k8s_openapi::api::core::v1::Pod {
    p.spec.get_or_insert_default().volumes = Some(vec![
        serde_json::from_value(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}),
        )
        .expect("a volume"),
    ]);
    p
}

/// Pod, node, and the `(claim, volume)` pairs written before its binding.
type BoundWithVolumes = (String, String, Vec<(String, String)>);

fn bound_volumes(writes: &[Write]) -> Vec<BoundWithVolumes> {
    writes
        .iter()
        .filter_map(|w| match w {
            Write::Bind {
                pod,
                node,
                volumes,
                ok: true,
                ..
            } => Some((pod.clone(), node.clone(), volumes.binds.clone())),
            _ => None,
        })
        .collect()
}

/// A local class, the claim `data` in `ml`, and the pod `p` mounting it.
fn world_with_claim() -> World {
    let mut w = World::dgx(2, 2);
    w.storage.watched = true;
    w.storage.classes.push(Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "local"},
            "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}))
        .expect("a class"),
    ));
    w.storage.claims.push(Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "data", "namespace": "ml"},
            "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}))
        .expect("a claim"),
    ));
    w.add(with_claim(pod("p", 1, None, 0), "data"));
    w
}

/// A local volume on `node`, available.
fn local_volume(node: &str) -> Arc<k8s_openapi::api::core::v1::PersistentVolume> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": format!("disk-{node}")},
            "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                     "capacity": {"storage": "10Gi"}, "local": {"path": "/mnt"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchFields": [
                         {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
            "status": {"phase": "Available"}}))
        .expect("a volume"),
    )
}

fn assert_bound_on_n2(writes: &[Write]) {
    assert_eq!(
        bound_volumes(writes),
        [(
            "ml/p".to_string(),
            "n2".to_string(),
            vec![("data".to_string(), "disk-n2".to_string())]
        )],
        "{writes:?}"
    );
}

#[test]
fn a_claims_local_volume_takes_the_pod_to_its_node_and_is_written_before_the_binding() {
    let mut w = world_with_claim();
    w.storage.volumes.push(local_volume("n2"));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (_, writes) = h.cycle();
    assert_bound_on_n2(&writes);
}

/// The cycle reads the storage objects again only when the stores hand
/// back other objects; a volume created later is still seen.
#[test]
fn a_volume_created_after_a_cycle_reaches_the_next_one() {
    let mut h = Harness::new(world_with_claim(), Harness::no_preemption());
    let (_, writes) = h.cycle();
    assert!(
        bound_volumes(&writes).is_empty(),
        "no volume yet: {writes:?}"
    );
    h.world.storage.volumes.push(local_volume("n2"));
    h.advance(std::time::Duration::from_secs(600));
    let (_, writes) = h.cycle();
    assert_bound_on_n2(&writes);
}

#[test]
fn a_services_pods_spread_by_default_in_the_daemons_cycle() {
    let mut w = World::dgx(2, 2);
    // Real nodes carry their hostname label; the default constraints read it.
    for n in &mut w.nodes {
        let n = Arc::make_mut(n);
        let name = n.metadata.name.clone().unwrap_or_default();
        n.metadata
            .labels
            .get_or_insert_default()
            .insert("kubernetes.io/hostname".into(), name);
    }
    let web = |name: &str, node: Option<&str>| {
        let mut p = pod(name, 1, node, 0);
        p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        p
    };
    w.add(web("web-0", Some("n1")));
    w.add(web("web-1", None));
    w.workloads.services.push(Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ml"},
            "spec": {"selector": {"app": "web"}}}))
        .expect("a service"),
    ));
    let mut h = Harness::new(w.clone(), Harness::no_preemption());
    let (_, writes) = h.cycle();
    // kube-scheduler's system default spreading (hostname, maxSkew 3)
    // prefers the node without a replica; packing alone would pick n1.
    assert_eq!(
        super::binds(&writes),
        [("ml/web-1".to_string(), "n2".to_string())]
    );
    w.workloads.services.clear();
    let mut h = Harness::new(w, Harness::no_preemption());
    let (_, writes) = h.cycle();
    assert_eq!(
        super::binds(&writes),
        [("ml/web-1".to_string(), "n1".to_string())]
    );
}
