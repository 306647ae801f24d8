//! Hand-written node shapes, spine/leaf clusters built from them, and what
//! every placement must satisfy.

use crate::common;
use gputopo_api::{Collective, GpuTopologySpec, LinkClass};
use gputopo_scheduler_core::gang::{GangCluster, GangNode, GangPlacement, GangSpec};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// `n` GPUs of 80 GiB, the first half on NUMA node 0, the rest on 1.
fn spec(n: u32, class: impl Fn(u32, u32) -> LinkClass) -> GpuTopologySpec {
    common::spec_with(n, class, |i| common::Gpu {
        numa: Some(i32::from(i >= n / 2)),
        memory_mib: Some(81_920),
        mig: false,
    })
}

/// An HGX A100: 8 GPUs, NV12 between every pair (NVSwitch).
pub(crate) fn nv12() -> Arc<NodeShape> {
    Arc::new(NodeShape::from_spec(&spec(8, |_, _| LinkClass::Nv(12))).expect("valid shape"))
}

/// DGX-1 V100 hybrid cube-mesh (docs/references.md); SYS where no NVLink.
pub(crate) fn dgx1() -> Arc<NodeShape> {
    Arc::new(NodeShape::from_spec(&spec(8, common::dgx1_class)).expect("valid shape"))
}

pub(crate) const ALL: u32 = 0xff;

/// `spines × leaves × nodes` nodes, all free; ids count up leaf by leaf.
pub(crate) fn fabric(
    spines: usize,
    leaves: usize,
    nodes: usize,
    shape: &Arc<NodeShape>,
) -> GangCluster {
    let mut cluster = GangCluster {
        tier_names: vec!["gputopo.dev/spine".into(), "gputopo.dev/leaf".into()],
        nodes: Vec::new(),
    };
    for s in 0..spines {
        for l in 0..leaves {
            for _ in 0..nodes {
                let id = cluster.nodes.len();
                cluster.nodes.push(GangNode::new(
                    id,
                    vec![Some(format!("spine-{s}")), Some(format!("leaf-{l}"))],
                    Arc::clone(shape),
                    ALL,
                ));
            }
        }
    }
    cluster
}

/// Marks the first `busy` nodes of leaf (s, l) fully busy.
pub(crate) fn occupy(cluster: &mut GangCluster, s: usize, l: usize, busy: usize) {
    let (spine, leaf) = (format!("spine-{s}"), format!("leaf-{l}"));
    for node in cluster
        .nodes
        .iter_mut()
        .filter(|n| n.tiers[0].as_deref() == Some(&spine) && n.tiers[1].as_deref() == Some(&leaf))
        .take(busy)
    {
        node.free = 0;
    }
}

pub(crate) fn whole_node(count: u32) -> GangSpec {
    GangSpec::uniform(count, SetRequest::new(8, Collective::Ring))
}

fn node(cluster: &GangCluster, id: usize) -> &GangNode {
    cluster
        .nodes
        .iter()
        .find(|n| n.id == id)
        .expect("placement names a node of the cluster")
}

/// `(spine, leaf)` of a node.
fn leaf_of(cluster: &GangCluster, id: usize) -> (String, String) {
    let n = node(cluster, id);
    (
        n.tiers[0].clone().unwrap_or_default(),
        n.tiers[1].clone().unwrap_or_default(),
    )
}

pub(crate) fn leaves_used(cluster: &GangCluster, p: &GangPlacement) -> BTreeSet<(String, String)> {
    p.members.iter().map(|m| leaf_of(cluster, m.node)).collect()
}

pub(crate) fn spines_used(cluster: &GangCluster, p: &GangPlacement) -> BTreeSet<String> {
    leaves_used(cluster, p)
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

/// Free nodes per leaf.
pub(crate) fn free_nodes(cluster: &GangCluster, s: &str, l: &str) -> usize {
    cluster
        .nodes
        .iter()
        .filter(|n| n.free == ALL && leaf_of(cluster, n.id) == (s.to_string(), l.to_string()))
        .count()
}

/// Checks what every placement must satisfy: one slot per member, GPUs free
/// and of the requested size, no two members sharing a GPU.
pub(crate) fn assert_valid(cluster: &GangCluster, spec: &GangSpec, p: &GangPlacement) {
    assert_eq!(p.members.len(), spec.members.len());
    let mut used: HashMap<usize, u32> = HashMap::new();
    for (i, m) in p.members.iter().enumerate() {
        let request = spec.members.request(i).expect("member exists");
        assert_eq!(m.gpus.count_ones(), request.gpus, "member {i} size");
        let n = node(cluster, m.node);
        assert_eq!(
            m.gpus & !n.free,
            0,
            "member {i} uses a busy GPU on node {}",
            m.node
        );
        let seen = used.entry(m.node).or_default();
        assert_eq!(
            *seen & m.gpus,
            0,
            "member {i} shares GPUs on node {}",
            m.node
        );
        *seen |= m.gpus;
    }
}
