//! The pure stage of publishing: given what the API server holds and what the
//! agent found, which writes are needed. No I/O, no clock: `now` is passed in.
//! Writing only what changed keeps a quiet node at zero writes per scan.

use super::status::{PodResourcesRound, plan_status};
use gputopo_api::keys::node::{GFD_COMPATIBLE, OWNED};
use gputopo_api::{GpuTopology, GpuTopologySpec, GpuTopologyStatus};
use gputopo_topology::clique::CliqueVerdict;
use gputopo_topology::health::HealthFinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference, Time};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The field manager of every write the agent makes, so server-side apply
/// knows which labels are the agent's and removes them when it stops applying them.
pub const FIELD_MANAGER: &str = "gputopo-agent";

/// Label keys `manager` holds on an object, read from its `managedFields`.
pub fn labels_managed_by(entries: &[ManagedFieldsEntry], manager: &str) -> BTreeSet<String> {
    entries
        .iter()
        .filter(|e| {
            e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some("Apply")
        })
        .filter_map(|e| e.fields_v1.as_ref())
        .filter_map(|f| f.0.get("f:metadata")?.get("f:labels")?.as_object())
        .flat_map(|labels| labels.keys())
        .filter_map(|k| k.strip_prefix("f:").map(str::to_string))
        .collect()
}

/// The GPU Feature Discovery-compatible labels (`nvidia.com/gpu.count`,
/// `.product`, `.memory`) that a writer other than the agent manages on the
/// node (GFD, the GPU Operator, an operator's `kubectl label`): the agent
/// leaves those alone rather than fight over them, since under MIG,
/// time-slicing or mixed models the two writers' values differ.
pub fn gfd_labels_held_by_others(entries: &[ManagedFieldsEntry]) -> BTreeSet<String> {
    entries
        .iter()
        .filter(|e| e.manager.as_deref() != Some(FIELD_MANAGER))
        .filter_map(|e| e.fields_v1.as_ref())
        .filter_map(|f| f.0.get("f:metadata")?.get("f:labels")?.as_object())
        .flat_map(|labels| labels.keys())
        .filter_map(|k| k.strip_prefix("f:"))
        .filter(|k| GFD_COMPATIBLE.contains(k))
        .map(str::to_string)
        .collect()
}

/// The labels to apply, or `None` when the node already carries exactly the
/// desired labels and the agent holds no stale one. Only keys the agent owns
/// (`keys::node::OWNED`) are ever in the result, and none of `yielded`
/// (another writer's, see [`gfd_labels_held_by_others`]).
pub fn plan_labels(
    current: &BTreeMap<String, String>,
    managed_by_agent: &BTreeSet<String>,
    desired: &BTreeMap<String, String>,
    yielded: &BTreeSet<String>,
) -> Option<BTreeMap<String, String>> {
    let desired: BTreeMap<String, String> = desired
        .iter()
        .filter(|(k, _)| OWNED.contains(&k.as_str()) && !yielded.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let values_differ = desired.iter().any(|(k, v)| current.get(k) != Some(v));
    // A label the agent applied before but no longer wants: applying the new set drops it.
    let stale = managed_by_agent
        .iter()
        .any(|k| OWNED.contains(&k.as_str()) && !desired.contains_key(k));
    // A desired label someone else set to the same value: take ownership, so that
    // the agent removes it when the GPUs go.
    let unowned = desired.keys().any(|k| !managed_by_agent.contains(k));
    (values_differ || stale || unowned).then_some(desired)
}

/// What the agent observed this round, to publish.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    pub spec: &'a GpuTopologySpec,
    pub findings: &'a [HealthFinding],
    pub pod_resources: &'a PodResourcesRound,
    /// The GPUs' multi-node NVLink clique, for `GpuFabricReady`.
    pub fabric: &'a CliqueVerdict,
}

/// The writes a `GpuTopology` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct TopologyPlan {
    /// The object (metadata with owner reference, and spec) to apply, when it differs.
    pub object: Option<GpuTopology>,
    /// The complete status to apply, when it differs (see [`super::status`]).
    pub status: Option<GpuTopologyStatus>,
}

/// Plans the `GpuTopology` writes for node `node_uid`.
pub fn plan_topology(
    current: Option<&GpuTopology>,
    observed: &Observed<'_>,
    node_uid: &str,
    now: &Time,
    heartbeat: Duration,
) -> TopologyPlan {
    let spec = observed.spec;
    let owner = OwnerReference {
        api_version: "v1".to_string(),
        kind: "Node".to_string(),
        name: spec.node_name.clone(),
        uid: node_uid.to_string(),
        controller: None,
        block_owner_deletion: None,
    };
    let owner_ok = current.is_some_and(|c| {
        c.metadata
            .owner_references
            .as_ref()
            .is_some_and(|refs| refs.contains(&owner))
    });
    let object = if current.is_some_and(|c| &c.spec == spec) && owner_ok {
        None
    } else {
        let mut desired = GpuTopology::new(&spec.node_name, spec.clone());
        desired.metadata.owner_references = Some(vec![owner]);
        Some(desired)
    };
    let status = plan_status(
        current.and_then(|c| c.status.as_ref()),
        observed.findings,
        observed.fabric,
        observed.pod_resources,
        now,
        heartbeat,
    );
    TopologyPlan { object, status }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputopo_api::{Interconnect, TopologySource, TopologySummary};
    use gputopo_topology::health::FindingKind;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use k8s_openapi::jiff::Timestamp;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn keys(k: &[&str]) -> BTreeSet<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn managed_labels_are_read_from_managed_fields() {
        let entries: Vec<ManagedFieldsEntry> = serde_json::from_value(serde_json::json!([
            {"manager": "gputopo-agent", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}, "f:gputopo.dev/interconnect": {}}}}},
            {"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:kubernetes.io/hostname": {}}}}},
            {"manager": "gputopo-agent", "operation": "Update",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:stale-update": {}}}}}
        ]))
        .unwrap();
        assert_eq!(
            labels_managed_by(&entries, FIELD_MANAGER),
            keys(&["gputopo.dev/interconnect", "nvidia.com/gpu.count"])
        );
        let _ = FieldsV1::default();
    }

    #[test]
    fn gfd_labels_another_writer_holds_are_left_alone() {
        let entries: Vec<ManagedFieldsEntry> = serde_json::from_value(serde_json::json!([
            {"manager": "gpu-feature-discovery", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.product": {}, "f:nvidia.com/gpu.count": {}, "f:nvidia.com/mig.strategy": {}}}}},
            {"manager": "gputopo-agent", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.memory": {}}}}}
        ]))
        .unwrap();
        let yielded = gfd_labels_held_by_others(&entries);
        assert_eq!(
            yielded,
            keys(&["nvidia.com/gpu.count", "nvidia.com/gpu.product"])
        );
        // GFD says 56 MIG slices of a product the agent names otherwise: the
        // agent writes its own labels and leaves GFD's as they are.
        let current = labels(&[
            ("nvidia.com/gpu.count", "56"),
            (
                "nvidia.com/gpu.product",
                "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
            ),
        ]);
        let desired = labels(&[
            ("nvidia.com/gpu.count", "8"),
            ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),
            ("nvidia.com/nvlink.p2p.level", "NV12"),
        ]);
        let plan = plan_labels(&current, &BTreeSet::new(), &desired, &yielded).expect("a write");
        assert_eq!(plan, labels(&[("nvidia.com/nvlink.p2p.level", "NV12")]));
    }

    #[test]
    fn nothing_to_write_when_labels_match() {
        let current = labels(&[
            ("nvidia.com/gpu.count", "8"),
            ("kubernetes.io/hostname", "n"),
        ]);
        let desired = labels(&[("nvidia.com/gpu.count", "8")]);
        assert_eq!(
            plan_labels(
                &current,
                &keys(&["nvidia.com/gpu.count"]),
                &desired,
                &BTreeSet::new()
            ),
            None
        );
    }

    #[test]
    fn changed_new_and_stale_labels_are_written() {
        let current = labels(&[
            ("nvidia.com/gpu.count", "8"),
            ("gputopo.dev/numa-nodes", "2"),
        ]);
        let owned = keys(&["nvidia.com/gpu.count", "gputopo.dev/numa-nodes"]);
        // A changed value.
        let desired = labels(&[
            ("nvidia.com/gpu.count", "4"),
            ("gputopo.dev/numa-nodes", "2"),
        ]);
        assert_eq!(
            plan_labels(&current, &owned, &desired, &BTreeSet::new()),
            Some(desired.clone())
        );
        // A label the agent owned and no longer wants: the apply drops it.
        let desired = labels(&[("nvidia.com/gpu.count", "8")]);
        assert_eq!(
            plan_labels(&current, &owned, &desired, &BTreeSet::new()),
            Some(desired.clone())
        );
        // The node lost its GPUs: apply the empty set so every owned label goes.
        assert_eq!(
            plan_labels(&current, &owned, &BTreeMap::new(), &BTreeSet::new()),
            Some(BTreeMap::new())
        );
        // Same value set by someone else: take ownership once.
        let desired = labels(&[
            ("nvidia.com/gpu.count", "8"),
            ("gputopo.dev/numa-nodes", "2"),
        ]);
        assert!(
            plan_labels(
                &current,
                &keys(&["nvidia.com/gpu.count"]),
                &desired,
                &BTreeSet::new()
            )
            .is_some()
        );
    }

    #[test]
    fn labels_the_agent_does_not_own_are_never_written() {
        let desired = labels(&[("team", "ml"), ("nvidia.com/gpu.count", "8")]);
        let plan = plan_labels(
            &BTreeMap::new(),
            &BTreeSet::new(),
            &desired,
            &BTreeSet::new(),
        )
        .unwrap();
        assert_eq!(plan, labels(&[("nvidia.com/gpu.count", "8")]));
        // A foreign label the agent never managed is not "stale".
        let current = labels(&[("nvidia.com/gpu.count", "8"), ("team", "ml")]);
        let owned = keys(&["nvidia.com/gpu.count", "team"]);
        assert_eq!(
            plan_labels(
                &current,
                &owned,
                &labels(&[("nvidia.com/gpu.count", "8")]),
                &BTreeSet::new()
            ),
            None
        );
    }

    fn spec(gpus: u32) -> GpuTopologySpec {
        GpuTopologySpec {
            node_name: "n1".into(),
            source: TopologySource::Fixture,
            vendor: None,
            driver_version: None,
            cuda_version: None,
            gpus: vec![],
            links: vec![],
            nics: vec![],
            islands: vec![],
            summary: TopologySummary {
                gpu_count: gpus,
                product: None,
                p2p_level: None,
                p2p_bottleneck: None,
                all_to_all_nvlink: false,
                largest_island: 0,
                numa_nodes: None,
                interconnect: Interconnect::Pcie,
            },
        }
    }

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    const HEARTBEAT: Duration = Duration::from_secs(300);

    /// plan_topology for `spec`, `findings` and no PodResources reading.
    fn plan(
        current: Option<&GpuTopology>,
        spec: &GpuTopologySpec,
        findings: &[HealthFinding],
        uid: &str,
        now: Time,
    ) -> TopologyPlan {
        let observed = Observed {
            spec,
            findings,
            pod_resources: &PodResourcesRound::NotRead,
            fabric: &CliqueVerdict::NoFabric,
        };
        plan_topology(current, &observed, uid, &now, HEARTBEAT)
    }

    #[test]
    fn topology_is_created_then_left_alone() {
        let first = plan(None, &spec(8), &[], "uid-1", at(100));
        let object = first.object.clone().expect("created");
        assert_eq!(object.metadata.name.as_deref(), Some("n1"));
        assert_eq!(
            object.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-1"
        );
        let status = first.status.clone().expect("status written");
        assert_eq!(status.conditions[0].status, "False");

        let mut stored = object;
        stored.status = Some(status);
        let again = plan(Some(&stored), &spec(8), &[], "uid-1", at(200));
        assert_eq!(
            again,
            TopologyPlan {
                object: None,
                status: None
            }
        );

        // A recreated Node (new uid) needs the owner reference fixed.
        assert!(
            plan(Some(&stored), &spec(8), &[], "uid-2", at(200))
                .object
                .is_some()
        );
        // A changed spec is written, the unchanged status is not.
        let changed = plan(Some(&stored), &spec(4), &[], "uid-1", at(200));
        assert!(changed.object.is_some() && changed.status.is_none());
    }

    #[test]
    fn condition_transition_time_moves_only_on_a_flip() {
        let finding = |detail: &str| HealthFinding {
            gpu: 3,
            kind: FindingKind::LinksDown,
            detail: detail.into(),
        };
        let mut stored = plan(None, &spec(8), &[finding("link 1 down")], "u", at(100))
            .object
            .unwrap();
        stored.status = plan(None, &spec(8), &[finding("link 1 down")], "u", at(100)).status;
        // Still degraded, different detail: message changes, time stays.
        let p = plan(
            Some(&stored),
            &spec(8),
            &[finding("links 1,2 down")],
            "u",
            at(200),
        );
        let c = &p.status.unwrap().conditions[0];
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.clone()),
            ("True", at(100))
        );
        // Healthy again: the time moves.
        let p = plan(Some(&stored), &spec(8), &[], "u", at(300));
        let c = &p.status.unwrap().conditions[0];
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.clone()),
            ("False", at(300))
        );
    }
}
