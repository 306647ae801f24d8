//! Literal objects for the cycle's tests: DGX A100 nodes (the recorded
//! `nvidia-smi topo -m` of a real one), pods with GPU limits, gangs,
//! PodGroups, and the snapshot the cycle would build from them.

use crate::cluster::{AssumeCache, Objects, ReadingTrust, build_snapshot};
use crate::config::Accounting;
use crate::gangs::{GangObjects, PodGroup, PodGroupSpec};
use gputopo_api::GpuTopology;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::snapshot::Snapshot;
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::normalize::normalize;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use std::sync::{Arc, OnceLock};

/// The `GpuTopology` of a DGX A100 (8 GPUs, NV12 all to all) named `name`.
pub fn topology(name: &str) -> GpuTopology {
    static SPEC: OnceLock<gputopo_api::GpuTopologySpec> = OnceLock::new();
    let spec = SPEC.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt"
        );
        let text = std::fs::read_to_string(path).expect("the DGX A100 fixture");
        let facts = facts_from_topo(&text).expect("it parses");
        normalize("dgx-a100", &facts).expect("it normalizes")
    });
    let mut spec = spec.clone();
    spec.node_name = name.to_string();
    GpuTopology::new(name, spec)
}

/// A node with 8 GPUs on `leaf` (under spine `spine-1`).
pub fn node(name: &str, leaf: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"gputopo.dev/spine": "spine-1", "gputopo.dev/leaf": leaf}},
        "status": {"allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}}
    }))
    .expect("a node")
}

/// A pod of `gpus` GPUs, for gputopo-scheduler; bound to `node` (with GPUs
/// `0..gpus` recorded) when given.
pub fn pod(name: &str, gpus: u32, node: Option<&str>, priority: i32) -> Pod {
    let mut annotations = serde_json::Map::new();
    if node.is_some() {
        let list = (0..gpus)
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(",");
        annotations.insert("gputopo.dev/assigned-gpus".into(), list.into());
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": annotations},
        "spec": {
            "schedulerName": "gputopo-scheduler",
            "nodeName": node,
            "priority": priority,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]
        },
        "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}
    }))
    .expect("a pod")
}

/// `pod` with `key: value` added to its annotations.
pub fn annotate(mut pod: Pod, key: &str, value: &str) -> Pod {
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(key.into(), value.into());
    pod
}

/// A member of the annotated gang `gang` of `size` members.
pub fn member(gang: &str, size: u32, i: u32, gpus: u32, priority: i32) -> Pod {
    let p = pod(&format!("{gang}-{i}"), gpus, None, priority);
    let p = annotate(p, "gputopo.dev/gang", gang);
    annotate(p, "gputopo.dev/gang-size", &size.to_string())
}

/// Member `i` of the scheduler-plugins PodGroup `group` (its label).
pub fn group_member(group: &str, i: u32, gpus: u32, priority: i32) -> Pod {
    let mut p = pod(&format!("{group}-{i}"), gpus, None, priority);
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("scheduling.x-k8s.io/pod-group".into(), group.into());
    p
}

/// A scheduler-plugins PodGroup in namespace `ml`.
pub fn pod_group(name: &str, min_member: u32, timeout: Option<u32>) -> PodGroup {
    let mut g = PodGroup::new(
        name,
        PodGroupSpec {
            min_member,
            schedule_timeout_seconds: timeout,
        },
    );
    g.metadata.namespace = Some("ml".into());
    g
}

/// The watched objects of a test cluster.
#[derive(Clone, Default)]
pub struct World {
    pub nodes: Vec<Arc<Node>>,
    pub topologies: Vec<Arc<GpuTopology>>,
    pub pods: Vec<Arc<Pod>>,
    pub gangs: GangObjects,
    pub dra: crate::claims::DraObjects,
    pub namespaces: Vec<Arc<k8s_openapi::api::core::v1::Namespace>>,
    pub workloads: crate::workload_objects::WorkloadObjects,
    pub storage: crate::storage_objects::StorageObjects,
}

impl World {
    /// `count` DGX A100 nodes `n1..`, `per_leaf` to a leaf.
    pub fn dgx(count: usize, per_leaf: usize) -> World {
        let mut w = World::default();
        for i in 1..=count {
            let name = format!("n{i}");
            let leaf = format!("leaf-{}", (i - 1) / per_leaf.max(1) + 1);
            w.nodes.push(Arc::new(node(&name, &leaf)));
            w.topologies.push(Arc::new(topology(&name)));
        }
        w
    }

    /// Two DGX A100 on one leaf; n1 full with a low-priority 8-GPU pod.
    pub fn busy_pair() -> World {
        let mut w = World::dgx(2, 2);
        w.add(pod("low", 8, Some("n1"), 0));
        w
    }

    pub fn add(&mut self, pod: Pod) -> &mut World {
        self.pods.push(Arc::new(pod));
        self
    }

    pub fn objects(&self) -> Objects<'_> {
        Objects {
            nodes: &self.nodes,
            topologies: &self.topologies,
            pods: &self.pods,
            namespaces: &self.namespaces,
            workloads: &self.workloads,
            storage: &self.storage,
            gangs: &self.gangs,
            dra: &self.dra,
            changed: None,
        }
    }

    /// The snapshot a cycle would build, with nothing assumed.
    pub fn snapshot(&self) -> Snapshot {
        build_snapshot(
            &self.objects(),
            &AssumeCache::default(),
            &SchedulerConfig::default(),
            ReadingTrust {
                now: Timestamp::now(),
                max_age: Accounting::default().reported_allocations_max_age,
            },
        )
        .expect("a snapshot")
        .0
    }

    /// Applies what the API server would after a binding: the pod gets its
    /// node and the binding's annotations.
    pub fn bind(
        &mut self,
        name: &str,
        node: &str,
        annotations: &std::collections::BTreeMap<String, String>,
    ) {
        let p = self
            .pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no pod {name}"));
        let pod = Arc::make_mut(p);
        pod.spec.get_or_insert_default().node_name = Some(node.to_string());
        pod.metadata
            .annotations
            .get_or_insert_default()
            .extend(annotations.clone());
    }

    /// Removes the pod `name` (it finished, or was evicted and is gone).
    pub fn remove(&mut self, name: &str) {
        self.pods
            .retain(|p| p.metadata.name.as_deref() != Some(name));
    }
}
