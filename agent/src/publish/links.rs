//! gputopo's link devices (`topology::dra_slice::link_resource_slice`) as
//! a ResourceSlice of the agent's own node: what to apply (pure), given
//! the slice the API server holds.

use gputopo_api::GpuTopologySpec;
use gputopo_topology::dra_slice::link_resource_slice;
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::{Value, json};

/// The slice to apply for `node` (uid `node_uid`) and `spec`, or `None`
/// when `current` already says it. The pool's generation goes up whenever
/// the devices change, as DRA drivers do, so that a scheduler holding the
/// old devices knows they are gone.
pub fn plan_link_slice(
    current: Option<&ResourceSlice>,
    node: &str,
    node_uid: &str,
    spec: &GpuTopologySpec,
) -> Option<Value> {
    let mut desired = link_resource_slice(node, spec);
    desired["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
    }]);
    let Some(current) = current else {
        return Some(desired);
    };
    let owned = current
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Node" && o.uid == node_uid);
    let held = serde_json::to_value(&current.spec.devices).unwrap_or(Value::Null);
    let same_devices = comparable(&held) == comparable(&desired["spec"]["devices"]);
    let same_place = current.spec.node_name.as_deref() == Some(node)
        && current.spec.pool.name == node
        && current.spec.pool.resource_slice_count == 1;
    if same_devices && owned && same_place {
        return None;
    }
    let generation = current.spec.pool.generation;
    desired["spec"]["pool"]["generation"] = json!(if same_devices {
        generation
    } else {
        generation + 1
    });
    Some(desired)
}

/// Devices as compared: without `allowMultipleAllocations`, which an API
/// server with consumable capacity turned off drops (a slice would
/// otherwise be rewritten every round there).
fn comparable(devices: &Value) -> Value {
    let mut devices = devices.clone();
    for d in devices.as_array_mut().into_iter().flatten() {
        if let Some(d) = d.as_object_mut() {
            d.remove("allowMultipleAllocations");
        }
    }
    devices
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputopo_topology::backend::nvidia_smi::facts_from_topo;
    use gputopo_topology::discover::build;

    fn spec(fixture: &str) -> GpuTopologySpec {
        let path = format!(
            "{}/../fixtures/nvidia/{fixture}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).expect("readable");
        build("node-a", facts_from_topo(&text).expect("parses"))
            .expect("builds")
            .spec
    }

    fn held(value: &Value) -> ResourceSlice {
        serde_json::from_value(value.clone()).expect("a slice")
    }

    const PAIRS: &str =
        "a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt";

    #[test]
    fn a_new_slice_is_owned_by_the_node_and_an_unchanged_one_is_left_alone() {
        let s = spec(PAIRS);
        let first = plan_link_slice(None, "node-a", "uid-1", &s).expect("created");
        assert_eq!(first["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(first["spec"]["pool"]["generation"], 1);
        assert_eq!(
            plan_link_slice(Some(&held(&first)), "node-a", "uid-1", &s),
            None
        );
        // Without allowMultipleAllocations (the gate off): still the same.
        let mut dropped = first.clone();
        for d in dropped["spec"]["devices"].as_array_mut().expect("devices") {
            d.as_object_mut()
                .expect("object")
                .remove("allowMultipleAllocations");
        }
        assert_eq!(
            plan_link_slice(Some(&held(&dropped)), "node-a", "uid-1", &s),
            None
        );
    }

    #[test]
    fn changed_devices_raise_the_generation_and_a_new_owner_does_not() {
        let s = spec(PAIRS);
        let first = plan_link_slice(None, "node-a", "uid-1", &s).expect("created");
        let other = spec("dgx-a100-mlx5-names-12nic-topo-m.txt");
        let next =
            plan_link_slice(Some(&held(&first)), "node-a", "uid-1", &other).expect("rewritten");
        assert_eq!(next["spec"]["pool"]["generation"], 2);
        assert_eq!(
            next["spec"]["devices"].as_array().map(Vec::len),
            Some(8 + 12)
        );
        // The node recreated under the same name: a new owner, same devices.
        let owner = plan_link_slice(Some(&held(&first)), "node-a", "uid-2", &s).expect("re-owned");
        assert_eq!(owner["spec"]["pool"]["generation"], 1);
        assert_eq!(owner["metadata"]["ownerReferences"][0]["uid"], "uid-2");
    }
}
