//! What the ecosystem tests (`ecosystem_*.rs`: JobSet, LeaderWorkerSet,
//! Kueue, the Trainer) share: one gputopo-scheduler under its default name,
//! the controllers (started once per test binary), kwok GPU nodes on leaves,
//! and the placement assertions: a gang bound whole in one leaf, each pod
//! on a GPU set as good as scheduler-core finds on its node.

use super::{SchedulerProcess, fixture_node, gpus_of, node_of, wait_for};
use gputopo_api::{Collective, GpuTopology};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest, choose};
use gputopo_testenv::TestEnv;
use gputopo_testenv::controllers::{self, Controller};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::OnceCell;

/// gputopo-scheduler's default `--scheduler-name`: what a workload names in
/// `schedulerName`, and the only gputopo-specific thing in these workloads.
pub const SCHEDULER: &str = "gputopo-scheduler";

/// The network tier labels of gputopo's default preset.
pub const SPINE_LABEL: &str = "gputopo.dev/spine";
pub const LEAF_LABEL: &str = "gputopo.dev/leaf";

/// How long a controller chain (controller, Job or StatefulSet controller,
/// kwok, the scheduler) may take to bring a workload's pods to their nodes.
pub const CHAIN_TIMEOUT: Duration = Duration::from_secs(180);

/// The one gputopo-scheduler of this test binary, as a cluster runs it:
/// under its default name, so every test's workloads name it. Tests keep
/// to their own nodes by a `nodeSelector` on their own `e2e-group`.
pub async fn scheduler(env: &TestEnv) -> &'static SchedulerProcess {
    static S: OnceCell<SchedulerProcess> = OnceCell::const_new();
    S.get_or_init(|| SchedulerProcess::start(env, SCHEDULER))
        .await
}

macro_rules! shared_controller {
    ($(#[$doc:meta])* $fn:ident, $start:path) => {
        $(#[$doc])*
        pub async fn $fn(env: &TestEnv) -> &'static Controller {
            static C: OnceCell<Controller> = OnceCell::const_new();
            C.get_or_init(|| async {
                $start(env).await.unwrap_or_else(|e| panic!("{e}"))
            })
            .await
        }
    };
}

shared_controller!(
    /// The JobSet controller of this test binary's control plane.
    jobset_controller, controllers::jobset::start
);
shared_controller!(
    /// The LeaderWorkerSet controller of this test binary's control plane.
    lws_controller, controllers::lws::start
);
shared_controller!(
    /// The Kueue controller of this test binary's control plane.
    kueue_controller, controllers::kueue::start
);
shared_controller!(
    /// The Trainer's controller of this test binary's control plane (it
    /// watches JobSets: the JobSet controller is started first).
    trainer_controller, start_trainer
);

async fn start_trainer(env: &TestEnv) -> controllers::Result<Controller> {
    jobset_controller(env).await;
    controllers::trainer::start(env).await
}

/// The shared control plane with the controller manager (Job, StatefulSet,
/// garbage collector...) and kwok. Unlike the other scheduler tests' env it
/// installs no PodGroup CRD of gputopo's: the Trainer brings
/// scheduler-plugins' own. Start a test's controllers before [`scheduler`]:
/// gputopo-scheduler watches PodGroups only if their CRD is served when it starts.
pub async fn ecosystem_env() -> &'static TestEnv {
    let env = TestEnv::shared().await;
    env.with_controller_manager().await;
    env.with_kwok().await;
    env
}

/// kwok GPU nodes of one recorded machine on leaves under one spine, for one test.
pub struct LeafCluster {
    /// The `e2e-group` label value every node carries.
    pub group: String,
    /// Node name to its leaf label value.
    pub leaf_of: BTreeMap<String, String>,
    pub topology: BTreeMap<String, GpuTopology>,
}

impl LeafCluster {
    /// `nodes_per_leaf[i]` nodes on leaf `i` (named `<group>-leaf-<i>`), each
    /// a copy of the recorded machine `fixture`. Nodes are named
    /// `<prefix>-l<i>-<n>`, so leaf 0's sort first: a tie between single
    /// pods goes to leaf 0 (ties go to the first name), and a gang that
    /// needs another leaf shows that it was placed as one.
    pub async fn create(
        env: &TestEnv,
        prefix: &str,
        fixture: &str,
        nodes_per_leaf: &[usize],
    ) -> Self {
        let group = env.unique_name(prefix);
        let spine = format!("{group}-spine");
        let mut cluster = LeafCluster {
            group: group.clone(),
            leaf_of: BTreeMap::new(),
            topology: BTreeMap::new(),
        };
        for (i, &count) in nodes_per_leaf.iter().enumerate() {
            let leaf = format!("{group}-leaf-{i}");
            for _ in 0..count {
                let name = env.unique_name(&format!("{prefix}-l{i}"));
                let labels = [
                    ("e2e-group", group.as_str()),
                    (SPINE_LABEL, spine.as_str()),
                    (LEAF_LABEL, leaf.as_str()),
                ];
                let (_, topology) = fixture_node(env, &name, fixture, &labels).await;
                cluster.leaf_of.insert(name.clone(), leaf.clone());
                cluster.topology.insert(name, topology);
            }
        }
        cluster
    }

    /// The leaves holding at least `n` nodes.
    pub fn leaves_with_at_least(&self, n: usize) -> BTreeSet<String> {
        let mut count = BTreeMap::<&String, usize>::new();
        for leaf in self.leaf_of.values() {
            *count.entry(leaf).or_default() += 1;
        }
        count
            .into_iter()
            .filter(|(_, c)| *c >= n)
            .map(|(l, _)| l.clone())
            .collect()
    }

    /// Every pod bound, all in one leaf of this cluster: a gang placed on
    /// the fewest leaves when one leaf can hold it. Returns that leaf.
    pub fn assert_one_leaf(&self, what: &str, pods: &[Pod]) -> String {
        let mut leaves = BTreeSet::new();
        for p in pods {
            let node = node_of(p).unwrap_or_else(|| panic!("{what}: {} is not bound", pod_name(p)));
            let leaf = self.leaf_of.get(&node).unwrap_or_else(|| {
                panic!(
                    "{what}: {} went to {node}, not a node of this test",
                    pod_name(p)
                )
            });
            leaves.insert(leaf.clone());
        }
        let placement: Vec<String> = pods
            .iter()
            .map(|p| format!("{} -> {:?}", pod_name(p), node_of(p)))
            .collect();
        assert_eq!(
            leaves.len(),
            1,
            "{what}: a gang that one leaf can hold went to {leaves:?}: {placement:?}"
        );
        leaves.into_iter().next().unwrap_or_default()
    }

    /// Each pod's GPUs (`gputopo.dev/assigned-gpus`) are as many as it asks
    /// for and as good a set as scheduler-core chooses on its node: see
    /// [`assert_optimal_sets`].
    pub fn assert_optimal_sets(&self, what: &str, pods: &[Pod]) {
        assert_optimal_sets(&self.topology, what, pods);
    }
}

/// Each pod's GPUs (`gputopo.dev/assigned-gpus`) are as many as it asks
/// for and as good a set as scheduler-core chooses on its node (its
/// `GpuTopology` in `topology`, by node name) among the GPUs the other pods
/// there leave: the same ring bottleneck and NUMA span (the order among
/// equals depends on which pod was placed first).
pub fn assert_optimal_sets(topology: &BTreeMap<String, GpuTopology>, what: &str, pods: &[Pod]) {
    let mut by_node = BTreeMap::<String, Vec<&Pod>>::new();
    for p in pods {
        let node = node_of(p).unwrap_or_else(|| panic!("{what}: {} is not bound", pod_name(p)));
        by_node.entry(node).or_default().push(p);
    }
    for (node, here) in by_node {
        let topology = topology
            .get(&node)
            .unwrap_or_else(|| panic!("{what}: {node} is not a node of this test"));
        let shape = NodeShape::from_spec(&topology.spec).expect("the node's shape");
        let mask = |p: &Pod| gpus_of(p).iter().fold(0u32, |m, g| m | (1 << g));
        let mut used = 0u32;
        for p in &here {
            assert_eq!(used & mask(p), 0, "{what}: GPUs given twice on {node}");
            used |= mask(p);
        }
        for p in &here {
            let wanted = gpu_limit(p);
            let got = gpus_of(p);
            assert_eq!(
                got.len() as u32,
                wanted,
                "{what}: {} got {got:?}",
                pod_name(p)
            );
            let free = shape.gpus_mask() & !(used & !mask(p));
            let best = choose(&shape, free, &SetRequest::new(wanted, Collective::Ring))
                .unwrap_or_else(|e| panic!("{what}: scheduler-core fits nothing on {node}: {e}"));
            assert_eq!(
                (shape.ring_bottleneck(mask(p)), shape.numa_nodes(mask(p))),
                (best.bottleneck, best.numa_nodes),
                "{what}: {} on {node} got GPUs {got:?}; scheduler-core's best there is {:?} ({})",
                pod_name(p),
                best.gpus,
                best.explanation
            );
        }
    }
}

pub fn pod_name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// The pod's `nvidia.com/gpu` limit, summed over its containers.
pub fn gpu_limit(p: &Pod) -> u32 {
    p.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get("nvidia.com/gpu"))
        .map(|q| q.0.parse::<u32>().expect("a whole number of GPUs"))
        .sum()
}

/// Waits until exactly `count` pods match `selector` in `ns` and `ready`
/// holds for all of them (e.g. bound), and returns them sorted by name.
pub async fn pods_where(
    client: &Client,
    ns: &str,
    selector: &str,
    count: usize,
    what: &str,
    ready: impl Fn(&Pod) -> bool,
    s: &SchedulerProcess,
) -> Vec<Pod> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(selector);
    wait_for(
        &format!("{count} pods {selector} {what}"),
        CHAIN_TIMEOUT,
        || async {
            let mut list = pods.list(&lp).await.ok()?.items;
            list.sort_by_key(pod_name);
            (list.len() == count && list.iter().all(&ready)).then_some(list)
        },
        || s.log(),
    )
    .await
}

/// [`pods_where`] every pod is bound to a node.
pub async fn pods_bound(
    client: &Client,
    ns: &str,
    selector: &str,
    count: usize,
    s: &SchedulerProcess,
) -> Vec<Pod> {
    pods_where(
        client,
        ns,
        selector,
        count,
        "bound",
        |p| node_of(p).is_some(),
        s,
    )
    .await
}

/// An API for `api_version`/`kind` objects (the controllers' CRDs) in `ns`,
/// or cluster-wide for `None`.
pub fn dynamic_api(
    client: &Client,
    ns: Option<&str>,
    api_version: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Creates `object` (JSON with apiVersion and kind) in `ns` (`None`: cluster-scoped).
pub async fn create_object(
    client: &Client,
    ns: Option<&str>,
    object: serde_json::Value,
) -> DynamicObject {
    let api_version = object["apiVersion"]
        .as_str()
        .expect("apiVersion")
        .to_owned();
    let kind = object["kind"].as_str().expect("kind").to_owned();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let object: DynamicObject = serde_json::from_value(object).expect("a Kubernetes object");
    dynamic_api(client, ns, &api_version, &kind)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"))
}

/// Every event in `ns` (events.k8s.io, as gputopo and the controllers write them).
pub async fn events_in(client: &Client, ns: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}
