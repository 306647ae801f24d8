//! A GB200 NVL72 cluster of kwok nodes: racks of GB200 compute trays, each
//! rack one multi-node NVLink domain, racks on leaves under spines.
//!
//! Every node is a copy of a recorded GB200 compute tray (four GPUs joined
//! by NV18, two Grace sockets; [`GB200_TRAY_FIXTURE`], posted from a real
//! tray in NVIDIA/k8s-test-infra#371, see `fixtures/INDEX.md`): its
//! `GpuTopology` is what the agent's `nvidia-smi topo -m` parser and
//! normalizer make of that recording, plus each GPU's fabric membership
//! (cluster UUID and clique id) as NVML reports it on an NVL72 rack. Its
//! labels are the three network tiers of the scheduler preset
//! `gputopo+gpu-clique` ([`NETWORK_TIERS_CONFIG`]): `gputopo.dev/spine`,
//! `gputopo.dev/leaf` and `nvidia.com/gpu.clique`, whose value is GPU
//! Feature Discovery's `<cluster UUID>.<clique id>`, one per rack. A real
//! NVL72 rack holds 18 trays; the tests cut racks to a few trays so that a
//! cluster of several racks stays cheap to run.
//!
//! ```no_run
//! # async fn t() {
//! use gputopo_testenv::nvl72::{Layout, Nvl72Cluster};
//! let env = gputopo_testenv::TestEnv::shared().await;
//! env.with_controller_manager().await;
//! env.with_kwok().await;
//! // 2 spines x 2 leaves x 2 racks x 4 trays: 32 nodes, 128 GPUs.
//! let cluster = Nvl72Cluster::create(env, "nvl", Layout::new(2, 2, 2, 4)).await;
//! # }
//! ```

use crate::TestEnv;
use futures::future::join_all;
use gputopo_api::topology::GpuFabric;
use gputopo_api::{GpuTopology, GpuTopologySpec};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::normalize::normalize;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, PostParams};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The recorded GB200 compute tray every node copies (under `fixtures/`).
pub const GB200_TRAY_FIXTURE: &str =
    "nvidia/gb200-4gpu-tray-k8s-test-infra-issue371-space-expanded-topo-m-LEGEND-TRUNCATED.txt";
/// The network tier labels, outermost first.
pub const SPINE_LABEL: &str = gputopo_api::keys::node::SPINE;
pub const LEAF_LABEL: &str = gputopo_api::keys::node::LEAF;
/// The multi-node NVLink domain (the rack), as GPU Feature Discovery and
/// the agent label it.
pub const CLIQUE_LABEL: &str = "nvidia.com/gpu.clique";
/// The label every node of one cluster carries, for the tests' nodeSelector.
pub const GROUP_LABEL: &str = "e2e-group";
/// The clique id of every rack (GFD's README example uses 1).
pub const CLIQUE_ID: u32 = 1;
/// The line of a gputopo-scheduler configuration file that makes these
/// labels its network tiers.
pub const NETWORK_TIERS_CONFIG: &str = "networkTiers: {preset: gputopo+gpu-clique}\n";

/// How many of each: spines, leaves under each spine, racks on each leaf,
/// trays (nodes) in each rack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub spines: usize,
    pub leaves_per_spine: usize,
    pub racks_per_leaf: usize,
    pub trays_per_rack: usize,
}

impl Layout {
    pub const fn new(
        spines: usize,
        leaves_per_spine: usize,
        racks_per_leaf: usize,
        trays_per_rack: usize,
    ) -> Layout {
        Layout {
            spines,
            leaves_per_spine,
            racks_per_leaf,
            trays_per_rack,
        }
    }

    pub const fn nodes(&self) -> usize {
        self.spines * self.leaves_per_spine * self.racks_per_leaf * self.trays_per_rack
    }
}

/// One node: where it is, and the `GpuTopology` it was created with.
#[derive(Clone, Debug)]
pub struct Tray {
    pub name: String,
    /// The tier label values.
    pub spine: String,
    pub leaf: String,
    /// `nvidia.com/gpu.clique`: `<cluster UUID>.<clique id>`.
    pub clique: String,
    /// Indices in the layout: spine, leaf under it, rack on it, tray in it.
    pub position: [usize; 4],
    pub topology: GpuTopology,
}

impl Tray {
    /// The rack as a domain path, for messages: `spine/leaf/clique`.
    pub fn rack_path(&self) -> String {
        format!("{}/{}/{}", self.spine, self.leaf, self.clique)
    }

    /// The leaf as a domain path: `spine/leaf`.
    pub fn leaf_path(&self) -> String {
        format!("{}/{}", self.spine, self.leaf)
    }
}

/// The nodes of one NVL72 cluster, by name.
pub struct Nvl72Cluster {
    /// The [`GROUP_LABEL`] value every node carries.
    pub group: String,
    pub layout: Layout,
    pub trays: BTreeMap<String, Tray>,
}

/// Clusters made by this process, so that each gets cluster UUIDs of its own.
static CLUSTERS: AtomicU32 = AtomicU32::new(0);

impl Nvl72Cluster {
    /// Creates the cluster's nodes (all at once) with their `GpuTopology`
    /// objects, and returns once every node is Ready without the
    /// `node.kubernetes.io/not-ready` taint. Needs [`TestEnv::with_kwok`]
    /// and (for the taint) [`TestEnv::with_controller_manager`]. Names:
    /// the group is `<prefix>-<n>`; spines `<group>-spine-<s>`, leaves
    /// `<group>-leaf-<s>-<l>`, nodes `<group>-s<s>l<l>r<r>-<t>`, so that
    /// name order is layout order. Panics when a node cannot be made.
    pub async fn create(env: &TestEnv, prefix: &str, layout: Layout) -> Nvl72Cluster {
        let group = env.unique_name(prefix);
        let cluster_no = CLUSTERS.fetch_add(1, Ordering::Relaxed) + 1;
        let mut trays = Vec::with_capacity(layout.nodes());
        let mut rack_no = 0u64;
        for s in 0..layout.spines {
            let spine = format!("{group}-spine-{s}");
            for l in 0..layout.leaves_per_spine {
                let leaf = format!("{group}-leaf-{s}-{l}");
                for r in 0..layout.racks_per_leaf {
                    rack_no += 1;
                    let uuid = cluster_uuid(cluster_no, rack_no);
                    for t in 0..layout.trays_per_rack {
                        let name = format!("{group}-s{s}l{l}r{r}-{t}");
                        let spec = gb200_tray(&name, &uuid, CLIQUE_ID);
                        trays.push(Tray {
                            topology: GpuTopology::new(&name, spec),
                            name,
                            spine: spine.clone(),
                            leaf: leaf.clone(),
                            clique: format!("{uuid}.{CLIQUE_ID}"),
                            position: [s, l, r, t],
                        });
                    }
                }
            }
        }
        let created = join_all(trays.iter().map(|t| create_tray(env, &group, t))).await;
        let trays = trays
            .into_iter()
            .zip(created)
            .map(|(mut t, topology)| {
                t.topology = topology;
                (t.name.clone(), t)
            })
            .collect();
        Nvl72Cluster {
            group,
            layout,
            trays,
        }
    }

    /// The node `name`; panics, naming `what`, when it is not one of this cluster's.
    pub fn tray(&self, what: &str, name: &str) -> &Tray {
        self.trays
            .get(name)
            .unwrap_or_else(|| panic!("{what}: {name} is not a node of cluster {}", self.group))
    }

    /// Each rack's clique label value with its nodes, in layout order.
    pub fn racks(&self) -> BTreeMap<String, Vec<&Tray>> {
        let mut racks = BTreeMap::<String, Vec<&Tray>>::new();
        for t in self.trays.values() {
            racks.entry(t.clique.clone()).or_default().push(t);
        }
        racks
    }
}

/// A cluster UUID in GFD's lowercase hyphenated form, never the nil one;
/// sorting by it sorts racks in layout order.
fn cluster_uuid(cluster_no: u32, rack_no: u64) -> String {
    format!("{cluster_no:08x}-0000-4000-8000-{rack_no:012x}")
}

/// The GB200 tray's `GpuTopologySpec` for node `name`, its GPUs in clique
/// `clique_id` of NVLink cluster `cluster_uuid`.
pub fn gb200_tray(name: &str, cluster_uuid: &str, clique_id: u32) -> GpuTopologySpec {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(GB200_TRAY_FIXTURE);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let facts = facts_from_topo(&text)
        .unwrap_or_else(|e| panic!("the agent's parser refuses {}: {e}", path.display()));
    let mut spec = normalize(name, &facts)
        .unwrap_or_else(|e| panic!("the agent's normalizer refuses {}: {e}", path.display()));
    for gpu in &mut spec.gpus {
        gpu.fabric = Some(GpuFabric {
            cluster_uuid: Some(cluster_uuid.to_string()),
            clique_id: Some(clique_id),
        });
    }
    spec
}

/// Creates the kwok node and its `GpuTopology` (owned by the node), and
/// waits until the node has lost its not-ready taint.
async fn create_tray(env: &TestEnv, group: &str, tray: &Tray) -> GpuTopology {
    let name = tray.name.as_str();
    let labels: BTreeMap<String, String> = [
        (GROUP_LABEL, group),
        (SPINE_LABEL, tray.spine.as_str()),
        (LEAF_LABEL, tray.leaf.as_str()),
        (CLIQUE_LABEL, tray.clique.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let gpus = tray.topology.spec.gpus.len() as u32;
    let node = env.create_fake_gpu_node(name, gpus, &labels).await;
    let mut topology = tray.topology.clone();
    topology.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.into(),
        uid: node.metadata.uid.clone().expect("a created node has a uid"),
        ..OwnerReference::default()
    }]);
    let client = env.client().await;
    let created = Api::<GpuTopology>::all(client.clone())
        .create(&PostParams::default(), &topology)
        .await
        .unwrap_or_else(|e| panic!("creating GpuTopology {name}: {e}"));
    // A new node carries node.kubernetes.io/not-ready until the node
    // lifecycle controller sees it Ready: a decision made before would
    // meet the node as no running cluster has it.
    let nodes = Api::<Node>::all(client);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let tainted = nodes.get(name).await.ok().is_none_or(|n| {
            n.spec
                .and_then(|s| s.taints)
                .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"))
        });
        if !tainted {
            return created;
        }
        assert!(
            Instant::now() < deadline,
            "node {name} still has the not-ready taint after 90 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gb200_tray_is_four_nv18_gpus_on_two_sockets_in_its_rack_clique() {
        let spec = gb200_tray("t", &cluster_uuid(1, 2), CLIQUE_ID);
        assert_eq!(spec.gpus.len(), 4);
        assert!(spec.gpus.iter().all(|g| g.fabric
            == Some(GpuFabric {
                cluster_uuid: Some("00000001-0000-4000-8000-000000000002".into()),
                clique_id: Some(1),
            })));
        let numa: Vec<Option<i32>> = spec.gpus.iter().map(|g| g.numa_node).collect();
        assert_eq!(numa, [Some(0), Some(0), Some(1), Some(1)]);
        assert_eq!(spec.links.len(), 6, "every pair joined: {:?}", spec.links);
        assert!(
            spec.links.iter().all(|l| l.nvlinks == 18),
            "{:?}",
            spec.links
        );
    }

    #[test]
    fn layout_order_is_name_order_and_cluster_uuid_order() {
        assert!(cluster_uuid(1, 9) < cluster_uuid(1, 10));
        assert_eq!(Layout::new(2, 2, 2, 4).nodes(), 32);
    }
}
